#include "core/passes/unit_precision.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/onnx_names.h"
#include "core/passes/weight_plan.h"

namespace quantd::passes {
namespace {

namespace tfq = tensorflow::quantization;
using Entry = tfq::UnitWiseQuantizationPrecision;

// One node of the model as unit-wise precision sees it.
struct Place {
  std::string scope;     // "" (main graph), a function, or a subgraph owner.
  std::string unit;      // Its name in that scope.
  std::string op;        // op_type.
  std::string instance;  // Which copy of the scope (a call, an owner node).
};

class PlaceCollector {
 public:
  PlaceCollector(const graph::InlinedFunctions* inlined,
                 std::vector<Place>* places,
                 absl::flat_hash_set<std::string>* owners)
      : inlined_(inlined), places_(places), owners_(owners) {}

  void Graph(const onnx::GraphProto& graph, const std::string& scope,
             const std::string& instance) {
    for (const onnx::NodeProto& node : graph.node()) {
      const graph::NodeOrigin* origin = nullptr;
      if (inlined_ != nullptr) {
        auto it = inlined_->origins.find(node.name());
        if (it != inlined_->origins.end()) origin = &it->second;
      }
      Place p;
      p.op = node.op_type();
      if (origin != nullptr && origin->top_level) {
        p.scope = origin->function;
        p.unit = origin->node;
        p.instance = origin->call;
      } else {
        p.scope = scope;
        p.unit = origin != nullptr ? origin->node : node.name();
        p.instance = instance;
      }
      const std::string owner = BodyScope(node, inlined_);
      places_->push_back(std::move(p));
      for (const onnx::AttributeProto& a : node.attribute()) {
        if (a.has_g()) {
          if (owner != kUnnamedScope) owners_->insert(owner);
          Graph(a.g(), owner, node.name());
        }
        for (const onnx::GraphProto& g : a.graphs()) {
          if (owner != kUnnamedScope) owners_->insert(owner);
          Graph(g, owner, node.name());
        }
      }
    }
  }

 private:
  const graph::InlinedFunctions* inlined_;
  std::vector<Place>* places_;
  absl::flat_hash_set<std::string>* owners_;
};

// "the main graph", "local function 'F'", "the subgraphs of node 'L'".
std::string ScopeName(const std::string& scope,
                      const absl::flat_hash_set<std::string>& functions) {
  if (scope.empty()) return "the main graph";
  if (functions.contains(scope)) {
    return absl::StrCat("local function '", scope, "'");
  }
  if (scope == kUnnamedScope) return "the subgraphs of unnamed nodes";
  return absl::StrCat("the subgraphs of node '", scope, "'");
}

// Non-empty when some copy of the scope (a call, an owner node) holds more
// than one of `matches`.
std::string AmbiguityIn(const std::vector<const Place*>& matches) {
  absl::flat_hash_map<std::string, int> per_instance;
  int most = 0;
  for (const Place* p : matches)
    most = std::max(most, ++per_instance[p->instance]);
  if (most <= 1) return "";
  return absl::StrCat(most, " nodes are named '", matches.front()->unit,
                      "' in one scope");
}

}  // namespace

std::string BodyScope(const onnx::NodeProto& owner,
                      const graph::InlinedFunctions* inlined) {
  if (inlined != nullptr) {
    auto origin = inlined->origins.find(owner.name());
    if (origin != inlined->origins.end()) return origin->second.node;
  }
  return owner.name().empty() ? kUnnamedScope : owner.name();
}

bool MayUseFourBitWeights(tfq::QuantizationPrecision default_precision,
                          const UnitPrecisionEntries& entries) {
  auto four_bit = [](tfq::QuantizationPrecision p) {
    return p == tfq::PRECISION_W4A8 || p == tfq::PRECISION_W4A4;
  };
  if (four_bit(default_precision)) return true;
  for (const Entry& e : entries) {
    if (four_bit(e.quantization_precision())) return true;
  }
  return false;
}

std::string DescribeUnitEntry(int index, const Entry& entry) {
  return absl::StrCat("unit_wise_quantization_precision[", index, "] {",
                      entry.ShortDebugString(), "}");
}

UnitPrecision::UnitPrecision(tfq::QuantizationPrecision default_precision)
    : default_(default_precision == tfq::PRECISION_UNSPECIFIED
                   ? tfq::PRECISION_W8A8
                   : default_precision) {}

namespace {

// Ops a layer's rounding noise does not pass through unchanged in kind:
// they bound, normalise or exponentiate their input, or hide it in a body.
bool StopsNoise(const onnx::NodeProto& node) {
  static const auto* kStops =
      new absl::flat_hash_set<std::string>{"Softmax",
                                           "LogSoftmax",
                                           "Sigmoid",
                                           "Tanh",
                                           "HardSigmoid",
                                           "HardSwish",
                                           "LayerNormalization",
                                           "BatchNormalization",
                                           "InstanceNormalization",
                                           "GroupNormalization",
                                           "LpNormalization",
                                           "MeanVarianceNormalization",
                                           "Exp",
                                           "Softplus",
                                           "LSTM",
                                           "GRU",
                                           "RNN",
                                           "If",
                                           "Loop",
                                           "Scan",
                                           "Shape",
                                           "Size",
                                           "ArgMax",
                                           "ArgMin",
                                           "TopK",
                                           "Equal",
                                           "Greater",
                                           "Less",
                                           "GreaterOrEqual",
                                           "LessOrEqual",
                                           "Not",
                                           "And",
                                           "Or",
                                           "NonZero",
                                           "QuantizeLinear",
                                           "DequantizeLinear",
                                           "DynamicQuantizeLinear"};
  return !IsDefaultDomain(node) || kStops->contains(node.op_type());
}

// Records, for `graph` (scope `scope`) and every body in it, the layers
// whose output reaches a Log (see the header).
void FindLayersFeedingLog(
    const onnx::GraphProto& graph, const std::string& scope,
    const graph::InlinedFunctions* inlined,
    absl::flat_hash_map<std::pair<std::string, std::string>, std::string>*
        out) {
  absl::flat_hash_map<std::string, std::vector<int>> readers;
  for (int i = 0; i < graph.node_size(); ++i) {
    for (const std::string& in : graph.node(i).input()) {
      if (!in.empty()) readers[in].push_back(i);
    }
  }
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& layer = graph.node(i);
    if (!IsQuantizableOp(layer) || layer.name().empty()) continue;
    std::vector<int> frontier;
    absl::flat_hash_set<int> seen;
    auto add_readers = [&](const onnx::NodeProto& n) {
      for (const std::string& o : n.output()) {
        auto it = readers.find(o);
        if (it == readers.end()) continue;
        for (int r : it->second) {
          if (seen.insert(r).second) frontier.push_back(r);
        }
      }
    };
    add_readers(layer);
    std::string log;
    for (int depth = 0;
         depth < UnitPrecision::kLogReach && log.empty() && !frontier.empty();
         ++depth) {
      std::vector<int> next;
      next.swap(frontier);
      for (int r : next) {
        const onnx::NodeProto& n = graph.node(r);
        if (IsDefaultDomain(n) && n.op_type() == "Log") {
          log = n.name().empty() ? std::string("(unnamed)") : n.name();
          break;
        }
        if (!StopsNoise(n)) add_readers(n);
      }
    }
    if (!log.empty()) (*out)[{scope, layer.name()}] = log;
  }
  for (const onnx::NodeProto& node : graph.node()) {
    const std::string owner = BodyScope(node, inlined);
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.has_g()) FindLayersFeedingLog(a.g(), owner, inlined, out);
      for (const onnx::GraphProto& g : a.graphs()) {
        FindLayersFeedingLog(g, owner, inlined, out);
      }
    }
  }
}

}  // namespace

absl::StatusOr<UnitPrecision> UnitPrecision::Resolve(
    const onnx::ModelProto& model, tfq::QuantizationPrecision default_precision,
    const UnitPrecisionEntries& entries,
    const graph::InlinedFunctions* inlined) {
  UnitPrecision out(default_precision);
  out.entries_ = entries;
  if (inlined != nullptr) {
    for (const auto& [name, origin] : inlined->origins) {
      // A node inside a subgraph of a function's node takes the scope of
      // that subgraph (known when For is asked, see InBody).
      out.inlined_[name] = {origin.top_level ? origin.function : "",
                            origin.node};
    }
  }
  FindLayersFeedingLog(model.graph(), "", inlined, &out.feeds_log_);
  if (entries.empty()) return out;

  std::vector<Place> places;
  absl::flat_hash_set<std::string> owners;  // Nodes holding subgraphs.
  PlaceCollector(inlined, &places, &owners).Graph(model.graph(), "", "");
  absl::flat_hash_set<std::string> functions, called;
  if (inlined != nullptr) {
    functions.insert(inlined->functions.begin(), inlined->functions.end());
  }
  for (const onnx::FunctionProto& f : model.functions()) {
    functions.insert(f.name());  // Not inlined (no pass ran): still a scope.
  }
  for (const Place& p : places) {
    if (!p.scope.empty() && functions.contains(p.scope)) called.insert(p.scope);
  }

  const int n = static_cast<int>(entries.size());
  std::vector<std::vector<std::string>> invalid(n);
  // Decision keys -> first entry with a valid precision.
  std::map<std::tuple<int, std::string, std::string>, int> first;
  // Resolved keys of each entry (kept for the maps below).
  std::vector<std::pair<std::string, std::string>> keys(n);
  for (int i = 0; i < n; ++i) {
    const Entry& e = entries[i];
    const bool type_ok =
        e.unit_type() == Entry::UNIT_NODE || e.unit_type() == Entry::UNIT_OP;
    if (!type_ok) {
      invalid[i].push_back(
          e.unit_type() == Entry::UNIT_UNSPECIFIED
              ? "unit_type is UNIT_UNSPECIFIED"
              : absl::StrCat("unit_type has unknown value ", e.unit_type()));
    }
    if (e.unit_name().empty()) invalid[i].push_back("unit_name is empty");
    const tfq::QuantizationPrecision p = e.quantization_precision();
    const bool precision_ok = p != tfq::PRECISION_UNSPECIFIED &&
                              tfq::QuantizationPrecision_IsValid(p);
    if (!precision_ok) {
      invalid[i].push_back(
          p == tfq::PRECISION_UNSPECIFIED
              ? "quantization_precision is PRECISION_UNSPECIFIED"
              : absl::StrCat("quantization_precision has unknown value ", p));
    }
    if (!type_ok || e.unit_name().empty()) continue;

    const std::string& scope = e.func_name();
    if (!scope.empty()) {
      const bool is_function = functions.contains(scope);
      const bool is_owner = owners.contains(scope);
      if (is_function && is_owner) {
        invalid[i].push_back(absl::StrCat(
            "ambiguous: func_name '", scope,
            "' names both a local function and a node with a subgraph"));
        continue;
      }
      if (!is_function && !is_owner) {
        invalid[i].push_back(absl::StrCat(
            "matches nothing: no local function and no node with a subgraph "
            "is named '",
            scope, "' (func_name)"));
        continue;
      }
      if (is_function && !called.contains(scope)) {
        invalid[i].push_back(absl::StrCat("matches nothing: local function '",
                                          scope, "' is never called"));
        continue;
      }
    }

    // The places the entry selects.
    std::vector<const Place*> matches;
    const bool by_node = e.unit_type() == Entry::UNIT_NODE;
    std::string resolved_scope = scope;
    if (by_node && scope.empty()) {
      for (const Place& pl : places) {
        if (pl.scope.empty() && pl.unit == e.unit_name())
          matches.push_back(&pl);
      }
      if (matches.empty()) {
        std::set<std::string> scopes;
        for (const Place& pl : places) {
          if (pl.unit == e.unit_name()) {
            matches.push_back(&pl);
            scopes.insert(pl.scope);
          }
        }
        if (scopes.size() > 1) {
          std::vector<std::string> where;
          for (const std::string& sc : scopes) {
            where.push_back(ScopeName(sc, functions));
          }
          invalid[i].push_back(absl::StrCat(
              "ambiguous: nodes named '", e.unit_name(), "' are in ",
              absl::StrJoin(where, " and "), "; set func_name to choose"));
          continue;
        }
        if (!scopes.empty()) resolved_scope = *scopes.begin();
      }
    } else {
      for (const Place& pl : places) {
        if (!scope.empty() && pl.scope != scope) continue;
        if (by_node ? pl.unit == e.unit_name() : pl.op == e.unit_name()) {
          matches.push_back(&pl);
        }
      }
    }
    if (matches.empty() && by_node && inlined != nullptr &&
        std::find(inlined->calls.begin(), inlined->calls.end(),
                  e.unit_name()) != inlined->calls.end()) {
      invalid[i].push_back(absl::StrCat(
          "matches nothing: '", e.unit_name(),
          "' is a call of a local function, inlined before quantizing; name "
          "the function in func_name to reach its nodes"));
      continue;
    }
    if (matches.empty()) {
      const std::string where = scope.empty()
                                    ? std::string(
                                          "the main graph, local functions or "
                                          "subgraphs")
                                    : ScopeName(scope, functions);
      invalid[i].push_back(
          by_node ? absl::StrCat("matches nothing: no node in ", where,
                                 " is named '", e.unit_name(), "'")
                  : absl::StrCat("matches nothing: no node in ", where,
                                 " has op_type '", e.unit_name(), "'"));
      continue;
    }
    if (by_node) {
      const std::string ambiguous = AmbiguityIn(matches);
      if (!ambiguous.empty()) {
        invalid[i].push_back(absl::StrCat("ambiguous: ", ambiguous, " (",
                                          ScopeName(resolved_scope, functions),
                                          ")"));
        continue;
      }
    }
    if (!precision_ok) continue;
    // Node entries are keyed by the node they resolved to, so a scoped and
    // an unscoped entry naming one node are the same unit.
    const int kind = by_node ? 0 : (scope.empty() ? 1 : 2);
    keys[i] = {by_node ? resolved_scope : scope, e.unit_name()};
    auto [it, inserted] =
        first.emplace(std::make_tuple(kind, keys[i].first, keys[i].second), i);
    if (!inserted) {
      const int j = it->second;
      if (entries[j].quantization_precision() != p) {
        const std::string why =
            absl::StrCat("conflict: entries [", j, "] and [", i,
                         "] name the same unit with different precisions");
        if (invalid[j].empty() || invalid[j].back() != why) {
          invalid[j].push_back(why);
        }
        invalid[i].push_back(why);
      }
    }
  }

  auto message = [&](const std::vector<std::vector<std::string>>& problems,
                     const char* what) {
    std::vector<std::string> parts;
    for (int i = 0; i < n; ++i) {
      if (problems[i].empty()) continue;
      parts.push_back(absl::StrCat(DescribeUnitEntry(i, entries[i]), ": ",
                                   absl::StrJoin(problems[i], "; ")));
    }
    if (parts.empty()) return std::string();
    return absl::StrCat(parts.size(), " unit_wise_quantization_precision ",
                        parts.size() == 1 ? "entry is " : "entries are ", what,
                        ": ", absl::StrJoin(parts, " | "));
  };
  std::string bad = message(invalid, "invalid");
  if (!bad.empty()) return absl::InvalidArgumentError(bad);

  // Duplicates agree: keep the first.
  for (int i = 0; i < n; ++i) {
    const Entry& e = entries[i];
    if (e.unit_type() == Entry::UNIT_NODE) {
      out.by_node_.emplace(keys[i], i);
    } else if (e.func_name().empty()) {
      out.by_op_.emplace(e.unit_name(), i);
    } else {
      out.by_scoped_op_.emplace(keys[i], i);
    }
  }
  return out;
}

UnitPrecision::Choice UnitPrecision::For(const onnx::NodeProto& node) const {
  std::pair<std::string, std::string> unit{body_scope_, node.name()};
  if (auto it = inlined_.find(node.name()); it != inlined_.end()) {
    if (!it->second.first.empty()) unit.first = it->second.first;
    unit.second = it->second.second;
  }
  int entry = kDefault;
  if (auto it = by_node_.find(unit); it != by_node_.end()) {
    entry = it->second;
  } else if (feeds_log_.contains({body_scope_, node.name()})) {
    return {tfq::PRECISION_FULL, kFeedsLog};
  } else if (auto scoped = by_scoped_op_.find({unit.first, node.op_type()});
             !unit.first.empty() && scoped != by_scoped_op_.end()) {
    entry = scoped->second;
  } else if (auto op = by_op_.find(node.op_type()); op != by_op_.end()) {
    entry = op->second;
  }
  if (entry < 0) return {default_, -1};
  return {entries_[entry].quantization_precision(), entry};
}

UnitPrecision UnitPrecision::InBody(const std::string& owner) const {
  UnitPrecision body = *this;
  body.body_scope_ = owner;
  return body;
}

std::string UnitPrecision::Why(const onnx::NodeProto& node) const {
  const Choice c = For(node);
  if (c.entry == kFeedsLog) {
    auto it = feeds_log_.find({body_scope_, node.name()});
    return absl::StrCat(
        "default: its output reaches Log '",
        it != feeds_log_.end() ? it->second : std::string(),
        "', which turns rounding noise into relative error on the smallest "
        "values; a UNIT_NODE entry naming the node quantizes it anyway");
  }
  if (c.entry < 0) {
    return absl::StrCat("the model-wide quantization_precision ",
                        tfq::QuantizationPrecision_Name(c.precision));
  }
  return DescribeUnitEntry(c.entry, entries_[c.entry]);
}

}  // namespace quantd::passes
