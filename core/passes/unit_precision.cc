#include "core/passes/unit_precision.h"

#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quantd::passes {
namespace {

namespace tfq = tensorflow::quantization;
using Entry = tfq::UnitWiseQuantizationPrecision;

// Names of the nodes (in the main graph and, recursively, in subgraphs)
// that hold a subgraph attribute (If/Loop/Scan bodies).
void CollectSubgraphOwners(const onnx::GraphProto& graph,
                           absl::flat_hash_set<std::string>* owners) {
  for (const onnx::NodeProto& node : graph.node()) {
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.has_g()) {
        owners->insert(node.name());
        CollectSubgraphOwners(a.g(), owners);
      }
      for (const onnx::GraphProto& g : a.graphs()) {
        owners->insert(node.name());
        CollectSubgraphOwners(g, owners);
      }
    }
  }
}

}  // namespace

std::string DescribeUnitEntry(int index, const Entry& entry) {
  return absl::StrCat("unit_wise_quantization_precision[", index, "] {",
                      entry.ShortDebugString(), "}");
}

UnitPrecision::UnitPrecision(tfq::QuantizationPrecision default_precision)
    : default_(default_precision == tfq::PRECISION_UNSPECIFIED
                   ? tfq::PRECISION_W8A8
                   : default_precision) {}

absl::StatusOr<UnitPrecision> UnitPrecision::Resolve(
    const onnx::ModelProto& model, tfq::QuantizationPrecision default_precision,
    const UnitPrecisionEntries& entries) {
  UnitPrecision out(default_precision);
  out.entries_ = entries;
  if (entries.empty()) return out;

  const onnx::GraphProto& graph = model.graph();
  absl::flat_hash_map<std::string, int> node_names;  // name -> count
  absl::flat_hash_set<std::string> op_types;
  for (const onnx::NodeProto& node : graph.node()) {
    ++node_names[node.name()];
    op_types.insert(node.op_type());
  }
  absl::flat_hash_set<std::string> scopes;  // Functions and subgraph owners.
  for (const onnx::FunctionProto& f : model.functions())
    scopes.insert(f.name());
  CollectSubgraphOwners(graph, &scopes);

  const int n = static_cast<int>(entries.size());
  std::vector<std::vector<std::string>> invalid(n), unimplemented(n);
  // (unit_type, func_name, unit_name) -> first entry with a valid precision.
  std::map<std::tuple<int, std::string, std::string>, int> first;
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

    if (!e.func_name().empty()) {
      if (scopes.contains(e.func_name())) {
        unimplemented[i].push_back(absl::StrCat(
            "func_name '", e.func_name(),
            "' names a local function or subgraph: quantizing inside "
            "functions/subgraphs is not supported yet"));
      } else {
        invalid[i].push_back(absl::StrCat(
            "matches nothing: no local function and no node with a subgraph "
            "is named '",
            e.func_name(), "' (func_name)"));
      }
    } else if (e.unit_type() == Entry::UNIT_NODE) {
      auto it = node_names.find(e.unit_name());
      if (it == node_names.end()) {
        invalid[i].push_back(absl::StrCat(
            "matches nothing: no node of the main graph is named '",
            e.unit_name(), "'"));
      } else if (it->second > 1) {
        invalid[i].push_back(absl::StrCat(
            "ambiguous: ", it->second, " nodes of the main graph are named '",
            e.unit_name(), "'"));
      }
    } else if (!op_types.contains(e.unit_name())) {
      invalid[i].push_back(absl::StrCat(
          "matches nothing: no node of the main graph has op_type '",
          e.unit_name(), "'"));
    }

    if (!precision_ok) continue;
    auto [it, inserted] =
        first.emplace(std::make_tuple(static_cast<int>(e.unit_type()),
                                      e.func_name(), e.unit_name()),
                      i);
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
  std::string todo = message(unimplemented, "not implemented");
  if (!todo.empty()) return absl::UnimplementedError(todo);

  for (int i = 0; i < n; ++i) {
    const Entry& e = entries[i];
    auto& map = e.unit_type() == Entry::UNIT_NODE ? out.by_node_ : out.by_op_;
    map.emplace(e.unit_name(), i);  // Duplicates agree: keep the first.
  }
  return out;
}

UnitPrecision::Choice UnitPrecision::For(const onnx::NodeProto& node) const {
  int entry = -1;
  if (auto it = by_node_.find(node.name()); it != by_node_.end()) {
    entry = it->second;
  } else if (auto op = by_op_.find(node.op_type()); op != by_op_.end()) {
    entry = op->second;
  }
  if (entry < 0) return {default_, -1};
  return {entries_[entry].quantization_precision(), entry};
}

std::string UnitPrecision::Why(const onnx::NodeProto& node) const {
  const Choice c = For(node);
  if (c.entry < 0) {
    return absl::StrCat("the model-wide quantization_precision ",
                        tfq::QuantizationPrecision_Name(c.precision));
  }
  return DescribeUnitEntry(c.entry, entries_[c.entry]);
}

}  // namespace quantd::passes
