#include "core/passes/channel_scaling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/executor/tensor.h"
#include "core/graph/graph_edit.h"
#include "core/graph/graph_index.h"
#include "core/graph/tensor_util.h"
#include "core/numerics/awq.h"
#include "core/passes/weight_plan.h"

namespace quantd::passes {
namespace {

using onnx::GraphProto;
using onnx::NodeProto;
using onnx::TensorProto;

// Chains longer than this between an absorber and X are not followed.
constexpr int kMaxChain = 8;

void AllGraphs(GraphProto* graph, std::vector<GraphProto*>* out) {
  out->push_back(graph);
  for (NodeProto& n : *graph->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) AllGraphs(a.mutable_g(), out);
      for (GraphProto& g : *a.mutable_graphs()) AllGraphs(&g, out);
    }
  }
}

// Product of dims[from:] (executor::NumElements, saturating).
int64_t Product(absl::Span<const int64_t> dims, size_t from) {
  return executor::NumElements(dims.subspan(from));
}

// How a Conv / Gemm / MatMul reads its input 0 along channels.
struct ReaderShape {
  ChannelAxis axis = ChannelAxis::kLast;
  int64_t channels = 0;
  int64_t rank = 0;
  int64_t weight_elements = 0;
};

// Whether `n` reads `name` as exactly one of its inputs (a rescale of it
// then concerns that input alone).
bool ReadsOnce(const NodeProto& n, const std::string& name) {
  int reads = 0;
  for (const std::string& in : n.input()) reads += in == name ? 1 : 0;
  return reads == 1;
}

bool ReadAsReader(const NodeProto& n, const ModelWeights& w, ReaderShape* out) {
  if (!IsQuantizableOp(n) || n.input_size() < 2 || n.output_size() < 1)
    return false;
  const TensorProto* t = w.Find(n.input(1));
  if (t == nullptr || !ReadsOnce(n, n.input(1)) || !ReadsOnce(n, n.input(0))) {
    return false;
  }
  const std::vector<int64_t> d = graph::Dims(*t);
  out->weight_elements = Product(d, 0);
  const std::string& op = n.op_type();
  if (op == "Conv") {
    const int64_t group = graph::IntAttribute(n, "group", 1);
    if (d.size() < 3 || group < 1 || d[0] % group != 0) return false;
    out->axis = ChannelAxis::kSecond;
    out->channels = d[1] * group;
    out->rank = static_cast<int64_t>(d.size());
  } else if (op == "Gemm") {
    if (d.size() != 2) return false;
    const bool trans_a = graph::IntAttribute(n, "transA", 0) != 0;
    const bool trans_b = graph::IntAttribute(n, "transB", 0) != 0;
    out->axis = trans_a ? ChannelAxis::kFirst : ChannelAxis::kLast;
    out->channels = trans_b ? d[1] : d[0];
    out->rank = 2;
  } else {
    if (d.size() != 2) return false;
    out->axis = ChannelAxis::kLast;
    out->channels = d[0];
    out->rank = 0;
  }
  return out->channels > 0;
}

// Whether `t` broadcasts against a value with `channels` channels on
// `axis` (of rank `rank`, 0 when unknown) as one number per channel or one
// number in all.
bool PerChannelConstant(const TensorProto& t, ChannelAxis axis,
                        int64_t channels, int64_t rank) {
  const std::vector<int64_t> d = graph::Dims(t);
  const int64_t n = Product(d, 0);
  if (n == 1) return axis == ChannelAxis::kLast || rank > 0;
  if (n != channels) return false;
  int at = -1;
  if (axis == ChannelAxis::kLast) {
    at = static_cast<int>(d.size()) - 1;
  } else if (axis == ChannelAxis::kSecond) {
    if (rank <= 0 || static_cast<int64_t>(d.size()) > rank) return false;
    at = static_cast<int>(1 - (rank - static_cast<int64_t>(d.size())));
  } else {
    if (d.size() != 2) return false;
    at = 0;
  }
  if (at < 0 || at >= static_cast<int>(d.size())) return false;
  for (int i = 0; i < static_cast<int>(d.size()); ++i) {
    if (i != at && d[i] != 1) return false;
  }
  return d[at] == channels;
}

// The shape of one number per channel for a value of `rank`.
std::vector<int64_t> ChannelShape(ChannelAxis axis, int64_t channels,
                                  int64_t rank) {
  if (axis == ChannelAxis::kLast) return {channels};
  if (axis == ChannelAxis::kFirst) return {channels, 1};
  std::vector<int64_t> d(std::max<int64_t>(rank - 1, 1), 1);
  d[0] = channels;
  return d;
}

// Which input of a binary node is the per-channel constant (-1: none).
int ConstantOperand(const NodeProto& n, const ModelWeights& w, ChannelAxis axis,
                    int64_t channels, int64_t rank) {
  if (n.input_size() != 2) return -1;
  for (int k = 0; k < 2; ++k) {
    const TensorProto* t = w.Find(n.input(k));
    const TensorProto* other = w.Find(n.input(1 - k));
    if (t != nullptr && other == nullptr && n.input(0) != n.input(1) &&
        PerChannelConstant(*t, axis, channels, rank)) {
      return k;
    }
  }
  return -1;
}

// Whether a Conv / Gemm / MatMul producing X can divide its output
// channels (and bias) by s.
bool LayerAbsorbs(const NodeProto& n, const ModelWeights& w, ChannelAxis axis,
                  int64_t channels) {
  const TensorProto* t = w.Find(n.input(1));
  if (t == nullptr || !ReadsOnce(n, n.input(1))) return false;
  const std::vector<int64_t> d = graph::Dims(*t);
  const std::string& op = n.op_type();
  const bool has_bias = n.input_size() > 2 && !n.input(2).empty();
  if (has_bias && !ReadsOnce(n, n.input(2))) return false;
  const TensorProto* b = has_bias ? w.Find(n.input(2)) : nullptr;
  if (has_bias && b == nullptr) return false;
  if (op == "Conv") {
    if (axis != ChannelAxis::kSecond || d.size() < 3 || d[0] != channels) {
      return false;
    }
    return !has_bias || Product(graph::Dims(*b), 0) == channels;
  }
  if (axis != ChannelAxis::kLast || d.size() != 2) return false;
  if (op == "MatMul") return d[1] == channels;
  const bool trans_b = graph::IntAttribute(n, "transB", 0) != 0;
  if ((trans_b ? d[0] : d[1]) != channels) return false;
  if (!has_bias) return true;
  return PerChannelConstant(*b, ChannelAxis::kLast, channels, 2);
}

bool PassesThrough(const std::string& op, ChannelAxis axis) {
  if (op == "Relu" || op == "LeakyRelu" || op == "PRelu" || op == "Identity" ||
      op == "Dropout") {
    return true;
  }
  return axis == ChannelAxis::kSecond &&
         (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" ||
          op == "GlobalMaxPool");
}

// Fills site->absorber / chain when one exists upstream of X.
void FindAbsorber(const graph::GraphIndex& index, const ModelWeights& w,
                  ScalingSite* site) {
  GraphProto* g = site->graph;
  std::string cur = site->value;
  std::vector<NodeProto*> chain;
  std::vector<std::string> values = {cur};
  for (int depth = 0; depth <= kMaxChain; ++depth) {
    const int p = index.Producer(cur);
    if (p < 0) return;
    NodeProto* n = g->mutable_node(p);
    if (!IsDefaultDomain(*n) || n->output_size() < 1 || n->output(0) != cur) {
      return;
    }
    for (int k = 1; k < n->output_size(); ++k) {
      if (!n->output(k).empty() && (!index.Uses(n->output(k)).empty() ||
                                    index.IsGraphOutput(n->output(k)))) {
        return;
      }
    }
    const std::string& op = n->op_type();
    bool absorbs = false;
    if (IsQuantizableOp(*n) && n->input_size() >= 2) {
      absorbs = LayerAbsorbs(*n, w, site->axis, site->channels);
    } else if (op == "LayerNormalization") {
      const TensorProto* scale =
          n->input_size() > 1 ? w.Find(n->input(1)) : nullptr;
      const bool has_bias = n->input_size() > 2 && !n->input(2).empty();
      const TensorProto* bias = has_bias ? w.Find(n->input(2)) : nullptr;
      absorbs =
          site->axis == ChannelAxis::kLast &&
          graph::IntAttribute(*n, "axis", -1) == -1 && scale != nullptr &&
          (!has_bias || n->input(1) != n->input(2)) &&
          graph::Dims(*scale).size() == 1 &&
          graph::Dims(*scale)[0] == site->channels &&
          (!has_bias || (bias != nullptr && graph::Dims(*bias).size() == 1 &&
                         graph::Dims(*bias)[0] == site->channels));
    } else if (op == "Mul") {
      absorbs =
          ConstantOperand(*n, w, site->axis, site->channels, site->rank) >= 0;
    }
    if (absorbs) {
      site->absorber = n;
      site->chain = std::move(chain);
      site->chain_values = std::move(values);
      return;
    }
    std::string next;
    if (PassesThrough(op, site->axis)) {
      if (op == "Dropout" && n->input_size() > 2 && !n->input(2).empty()) {
        return;  // training_mode given: not known to be inference.
      }
      next = n->input_size() > 0 ? n->input(0) : "";
    } else if (op == "Add" || op == "Sub") {
      const int k =
          ConstantOperand(*n, w, site->axis, site->channels, site->rank);
      if (k < 0 || (op == "Sub" && k != 1)) return;
      next = n->input(1 - k);
    } else {
      return;
    }
    if (next.empty() || index.IsGraphOutput(next) || index.IsGraphInput(next)) {
      return;
    }
    const std::vector<graph::Use>& uses = index.Uses(next);
    if (uses.size() != 1 || uses[0].slot == graph::Use::kSubgraphSlot) return;
    chain.insert(chain.begin(), n);
    values.insert(values.begin(), next);
    cur = next;
  }
}

// For each element of a reader's weight, fn(element, output channel,
// input channel): the output channel is the row the weight is quantized by,
// the input channel the one of the value the reader mixes.
template <typename Fn>
void ForReaderChannels(const NodeProto& n, const std::vector<int64_t>& d,
                       Fn fn) {
  const std::string& op = n.op_type();
  if (op == "Conv") {
    const int64_t group = graph::IntAttribute(n, "group", 1);
    const int64_t inner = Product(d, 2);
    const int64_t per_group = d[0] / group;
    for (int64_t o = 0; o < d[0]; ++o) {
      const int64_t base_channel = (o / per_group) * d[1];
      for (int64_t c = 0; c < d[1]; ++c) {
        const int64_t at = (o * d[1] + c) * inner;
        for (int64_t k = 0; k < inner; ++k) fn(at + k, o, base_channel + c);
      }
    }
    return;
  }
  const bool trans_b = op == "Gemm" && graph::IntAttribute(n, "transB", 0) != 0;
  for (int64_t r = 0; r < d[0]; ++r) {
    for (int64_t c = 0; c < d[1]; ++c) {
      fn(r * d[1] + c, trans_b ? r : c, trans_b ? c : r);
    }
  }
}

// For each element of an absorber's weight, fn(element, output channel).
template <typename Fn>
void ForAbsorberChannels(const NodeProto& n, const std::vector<int64_t>& d,
                         Fn fn) {
  if (n.op_type() == "Conv") {
    const int64_t inner = Product(d, 1);
    for (int64_t o = 0; o < d[0]; ++o) {
      for (int64_t k = 0; k < inner; ++k) fn(o * inner + k, o);
    }
    return;
  }
  const bool trans_b =
      n.op_type() == "Gemm" && graph::IntAttribute(n, "transB", 0) != 0;
  for (int64_t r = 0; r < d[0]; ++r) {
    for (int64_t c = 0; c < d[1]; ++c) fn(r * d[1] + c, trans_b ? r : c);
  }
}

void Store(std::vector<float> values, std::vector<int64_t> dims,
           TensorProto* t) {
  TensorProto made = graph::MakeFloatTensor(t->name(), dims, values);
  t->Swap(&made);
}

// Divides a per-channel (or single-number) constant by s, widening a
// single number to one per channel.
absl::Status DivideConstant(TensorProto* t, const ScalingSite& site,
                            absl::Span<const double> s) {
  QUANTD_ASSIGN_OR_RETURN(std::vector<float> v, graph::ReadFloatTensor(*t));
  std::vector<int64_t> dims = graph::Dims(*t);
  if (v.size() == 1 && site.channels != 1) {
    v.assign(site.channels, v[0]);
    dims = ChannelShape(site.axis, site.channels, site.rank);
  }
  if (static_cast<int64_t>(v.size()) != site.channels) {
    return absl::InternalError(
        absl::StrCat("constant '", t->name(), "' is not one per channel"));
  }
  for (size_t c = 0; c < v.size(); ++c) {
    v[c] = static_cast<float>(v[c] / s[c]);
  }
  Store(std::move(v), std::move(dims), t);
  return absl::OkStatus();
}

std::string Label(const NodeProto& n) {
  return absl::StrCat(n.op_type(), " '", n.name(), "'");
}

}  // namespace

std::string ScalingSite::AbsorberLabel() const {
  return absorber == nullptr ? "" : Label(*absorber);
}

bool ScalingSite::AbsorberIsLayer() const {
  return absorber != nullptr && IsQuantizableOp(*absorber);
}

// ---------------------------------------------------------- ModelWeights

ModelWeights::ModelWeights(onnx::ModelProto* model)
    : main_(model->mutable_graph()),
      ir_version_(model->ir_version()),
      names_(model->graph()) {
  std::vector<GraphProto*> graphs;
  AllGraphs(main_, &graphs);
  absl::flat_hash_set<std::string> twice;
  for (GraphProto* g : graphs) {
    for (TensorProto& t : *g->mutable_initializer()) {
      if (!tensors_.emplace(t.name(), &t).second) twice.insert(t.name());
      holder_[t.name()] = g;
    }
    for (const NodeProto& n : g->node()) {
      for (const std::string& in : n.input()) {
        if (!in.empty()) ++reads_[in];
      }
    }
    // A value a graph returns is read by its caller.
    for (const auto& out : g->output()) ++reads_[out.name()];
  }
  for (const std::string& name : twice) tensors_.erase(name);
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    if (it->second->data_type() != TensorProto::FLOAT ||
        graph::HasExternalData(*it->second)) {
      tensors_.erase(it++);
    } else {
      ++it;
    }
  }
}

TensorProto* ModelWeights::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

TensorProto* ModelWeights::Own(NodeProto* node, int slot, GraphProto* graph) {
  if (slot >= node->input_size()) return nullptr;
  const std::string name = node->input(slot);
  TensorProto* t = Find(name);
  if (t == nullptr) return nullptr;
  // Read by this node alone: change it in place.
  if (reads_[name] <= 1) return t;
  if (!ReadsOnce(*node, name)) return nullptr;
  const std::string copy = names_.Make(name + "_scaled");
  TensorProto made = *t;
  made.set_name(copy);
  graph::AddInitializer(std::move(made), ir_version_ < 4 && graph == main_,
                        graph);
  TensorProto* added =
      graph->mutable_initializer(graph->initializer_size() - 1);
  tensors_[copy] = added;
  holder_[copy] = graph;
  reads_[copy] = 1;
  if (--reads_[name] == 0) maybe_unread_.push_back(name);
  node->set_input(slot, copy);
  return added;
}

std::string ModelWeights::Add(GraphProto* graph, const std::string& base,
                              std::vector<int64_t> dims,
                              absl::Span<const float> values) {
  const std::string name = names_.Make(base);
  graph::AddInitializer(graph::MakeFloatTensor(name, dims, values),
                        ir_version_ < 4 && graph == main_, graph);
  TensorProto* added =
      graph->mutable_initializer(graph->initializer_size() - 1);
  tensors_[name] = added;
  holder_[name] = graph;
  return name;
}

void ModelWeights::DropUnread() {
  absl::flat_hash_map<GraphProto*, absl::flat_hash_set<std::string>> drop;
  for (const std::string& name : maybe_unread_) {
    if (reads_[name] == 0) drop[holder_[name]].insert(name);
  }
  maybe_unread_.clear();
  // Removal moves initializers: the object is done.
  tensors_.clear();
  for (auto& [g, names] : drop) {
    graph::RemoveInitializers(names, TensorProto::FLOAT, g);
  }
}

// ------------------------------------------------------------ the sites

std::vector<ScalingSite> FindScalingSites(onnx::ModelProto* model,
                                          int64_t min_elements) {
  ModelWeights w(model);
  std::vector<GraphProto*> graphs;
  AllGraphs(model->mutable_graph(), &graphs);
  std::vector<ScalingSite> sites;
  for (GraphProto* g : graphs) {
    const graph::GraphIndex index(*g);
    absl::flat_hash_set<std::string> seen;
    for (const NodeProto& n : g->node()) {
      if (!IsQuantizableOp(n) || n.input_size() < 2 || n.input(0).empty())
        continue;
      const std::string& x = n.input(0);
      if (!seen.insert(x).second || w.Find(x) != nullptr ||
          index.Initializer(x) >= 0) {
        continue;
      }
      ScalingSite site;
      site.graph = g;
      site.value = x;
      bool all_readers = !index.IsGraphOutput(x);
      int64_t largest = 0;
      for (const graph::Use& use : index.Uses(x)) {
        ReaderShape shape;
        NodeProto* reader = use.slot == graph::Use::kSubgraphSlot
                                ? nullptr
                                : g->mutable_node(use.node);
        if (reader == nullptr || use.slot != 0 ||
            !ReadAsReader(*reader, w, &shape) ||
            (!site.readers.empty() &&
             (shape.axis != site.axis || shape.channels != site.channels ||
              (shape.rank != 0 && site.rank != 0 &&
               shape.rank != site.rank)))) {
          all_readers = false;
          continue;
        }
        if (site.readers.empty()) {
          site.axis = shape.axis;
          site.channels = shape.channels;
        }
        site.rank = std::max(site.rank, shape.rank);
        site.readers.push_back(reader);
        largest = std::max(largest, shape.weight_elements);
      }
      if (site.readers.empty() ||
          largest < std::max<int64_t>(min_elements, 1)) {
        continue;
      }
      if (all_readers) FindAbsorber(index, w, &site);
      sites.push_back(std::move(site));
    }
  }
  return sites;
}

absl::StatusOr<std::vector<double>> ReaderChannelMax(const ScalingSite& site,
                                                     const ModelWeights& w) {
  std::vector<double> m(site.channels, 0.0);
  for (const NodeProto* r : site.readers) {
    const TensorProto* t = w.Find(r->input(1));
    if (t == nullptr) {
      return absl::InternalError(absl::StrCat(Label(*r), " lost its weight"));
    }
    QUANTD_ASSIGN_OR_RETURN(std::vector<float> v, graph::ReadFloatTensor(*t));
    ForReaderChannels(
        *r, graph::Dims(*t), [&](int64_t i, int64_t /*o*/, int64_t c) {
          m[c] = std::max(m[c], static_cast<double>(std::fabs(v[i])));
        });
  }
  return m;
}

absl::StatusOr<std::vector<double>> AbsorberChannelMax(const ScalingSite& site,
                                                       const ModelWeights& w) {
  if (!site.AbsorberIsLayer()) return std::vector<double>();
  const TensorProto* t = w.Find(site.absorber->input(1));
  if (t == nullptr) {
    return absl::InternalError(
        absl::StrCat(site.AbsorberLabel(), " lost its weight"));
  }
  QUANTD_ASSIGN_OR_RETURN(std::vector<float> v, graph::ReadFloatTensor(*t));
  std::vector<double> m(site.channels, 0.0);
  ForAbsorberChannels(
      *site.absorber, graph::Dims(*t), [&](int64_t i, int64_t c) {
        m[c] = std::max(m[c], static_cast<double>(std::fabs(v[i])));
      });
  return m;
}

absl::StatusOr<AppliedScaling> ApplyChannelScales(const ScalingSite& site,
                                                  absl::Span<const double> s,
                                                  ModelWeights* w) {
  if (static_cast<int64_t>(s.size()) != site.channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", site.value, "' has ", site.channels, " channels but ",
                     s.size(), " factors were given"));
  }
  for (double f : s) {
    if (!(f > 0) || !std::isfinite(f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a channel factor of '", site.value, "' is ", f));
    }
  }
  GraphProto* g = site.graph;
  for (NodeProto* r : site.readers) {
    TensorProto* t = w->Own(r, 1, g);
    if (t == nullptr) {
      return absl::InternalError(
          absl::StrCat(Label(*r), " has no weight of its own to rescale"));
    }
    QUANTD_ASSIGN_OR_RETURN(std::vector<float> v, graph::ReadFloatTensor(*t));
    const std::vector<int64_t> d = graph::Dims(*t);
    ForReaderChannels(*r, d, [&](int64_t i, int64_t /*o*/, int64_t c) {
      v[i] = static_cast<float>(v[i] * s[c]);
    });
    Store(std::move(v), d, t);
  }
  AppliedScaling out;
  if (site.absorber != nullptr) {
    NodeProto* a = site.absorber;
    const std::string& op = a->op_type();
    auto own = [&](int slot) -> absl::StatusOr<TensorProto*> {
      TensorProto* t = w->Own(a, slot, g);
      if (t == nullptr) {
        return absl::InternalError(absl::StrCat(
            Label(*a), " has no input ", slot, " of its own to rescale"));
      }
      return t;
    };
    if (IsQuantizableOp(*a)) {
      QUANTD_ASSIGN_OR_RETURN(TensorProto * t, own(1));
      QUANTD_ASSIGN_OR_RETURN(std::vector<float> v, graph::ReadFloatTensor(*t));
      const std::vector<int64_t> d = graph::Dims(*t);
      ForAbsorberChannels(*a, d, [&](int64_t i, int64_t c) {
        v[i] = static_cast<float>(v[i] / s[c]);
      });
      Store(std::move(v), d, t);
      if (a->input_size() > 2 && !a->input(2).empty()) {
        QUANTD_ASSIGN_OR_RETURN(TensorProto * b, own(2));
        ScalingSite flat = site;
        flat.axis = ChannelAxis::kLast;
        QUANTD_RETURN_IF_ERROR(DivideConstant(b, flat, s));
      }
    } else if (op == "LayerNormalization") {
      for (int slot = 1; slot <= 2; ++slot) {
        if (slot >= a->input_size() || a->input(slot).empty()) continue;
        QUANTD_ASSIGN_OR_RETURN(TensorProto * t, own(slot));
        QUANTD_RETURN_IF_ERROR(DivideConstant(t, site, s));
      }
    } else {  // Mul by a per-channel constant.
      const int k =
          ConstantOperand(*a, *w, site.axis, site.channels, site.rank);
      if (k < 0) return absl::InternalError(Label(*a) + " changed");
      QUANTD_ASSIGN_OR_RETURN(TensorProto * t, own(k));
      QUANTD_RETURN_IF_ERROR(DivideConstant(t, site, s));
    }
    for (NodeProto* n : site.chain) {
      if (n->op_type() != "Add" && n->op_type() != "Sub") continue;
      const int k =
          ConstantOperand(*n, *w, site.axis, site.channels, site.rank);
      if (k < 0) return absl::InternalError(Label(*n) + " changed");
      TensorProto* t = w->Own(n, k, g);
      if (t == nullptr) {
        return absl::InternalError(
            absl::StrCat(Label(*n), " has no constant of its own to rescale"));
      }
      QUANTD_RETURN_IF_ERROR(DivideConstant(t, site, s));
    }
    out.value = site.value;
    out.absorbed_by = site.AbsorberLabel();
    out.scaled_values = site.chain_values;
    return out;
  }
  if (site.axis == ChannelAxis::kSecond && site.rank <= 0) {
    return absl::InternalError(
        absl::StrCat("'", site.value, "' has no known rank"));
  }
  std::vector<float> inv(s.size());
  for (size_t c = 0; c < s.size(); ++c) {
    inv[c] = static_cast<float>(1.0 / s[c]);
  }
  const std::string factor =
      w->Add(g, site.value + "_inv_scale",
             ChannelShape(site.axis, site.channels, site.rank), inv);
  const std::string scaled = w->FreshName(site.value + "_scaled");
  const std::string node_name = w->FreshName(site.value + "_scale");
  int position = 0;
  for (int i = 0; i < g->node_size(); ++i) {
    for (const std::string& o : g->node(i).output()) {
      if (o == site.value) position = i + 1;
    }
  }
  graph::InsertNode(
      graph::MakeNode("Mul", node_name, {site.value, factor}, {scaled}),
      position, g);
  for (NodeProto* r : site.readers) r->set_input(0, scaled);
  out.value = scaled;
  out.absorbed_by = absl::StrCat("inserted Mul '", node_name, "'");
  out.scaled_values = {scaled};
  return out;
}

// ------------------------------------------------------ channel extremes

void ChannelExtremes::Track(const std::string& value, ChannelAxis axis,
                            int64_t channels) {
  Extremes& e = values_[value];
  e.axis = axis;
  e.min.assign(channels, std::numeric_limits<float>::infinity());
  e.max.assign(channels, -std::numeric_limits<float>::infinity());
  e.sum_sq.assign(channels, 0.0);
  e.count = 0;
}

absl::Status ChannelExtremes::Observe(const std::string& name,
                                      const executor::Tensor& t) {
  auto it = values_.find(name);
  if (it == values_.end()) return absl::OkStatus();
  Extremes& e = it->second;
  const std::vector<int64_t>& shape = t.shape();
  const int64_t channels = static_cast<int64_t>(e.min.size());
  const int rank = static_cast<int>(shape.size());
  const int axis = e.axis == ChannelAxis::kLast     ? rank - 1
                   : e.axis == ChannelAxis::kSecond ? 1
                                                    : 0;
  if (e.unusable) return absl::OkStatus();
  if (t.dtype() != onnx::TensorProto::FLOAT || axis < 0 || axis >= rank ||
      shape[axis] != channels) {
    // Not what its readers take (the executor would have refused such a
    // model): the site finder misread this value, which is left alone.
    e.unusable = true;
    return absl::OkStatus();
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  for (int i = axis + 1; i < rank; ++i) inner *= shape[i];
  const float* x = t.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* p = x + (o * channels + c) * inner;
      float lo = e.min[c], hi = e.max[c];
      double sq = 0;
      for (int64_t k = 0; k < inner; ++k) {
        // NaN compares false and is ignored, as the min/max observer does.
        lo = p[k] < lo ? p[k] : lo;
        hi = p[k] > hi ? p[k] : hi;
        if (std::isfinite(p[k])) sq += double{p[k]} * p[k];
      }
      e.min[c] = lo;
      e.max[c] = hi;
      e.sum_sq[c] += sq;
    }
  }
  e.count += outer * inner;
  e.seen = e.seen || t.size() > 0;
  return absl::OkStatus();
}

const ChannelExtremes::Extremes* ChannelExtremes::Find(
    const std::string& value) const {
  auto it = values_.find(value);
  return it == values_.end() || !it->second.seen || it->second.unusable
             ? nullptr
             : &it->second;
}

std::vector<double> ChannelAbsMax(const ChannelExtremes::Extremes& e) {
  std::vector<double> m(e.min.size(), 0.0);
  for (size_t c = 0; c < m.size(); ++c) {
    if (e.min[c] > e.max[c]) continue;  // Never saw a number.
    m[c] = std::max(std::fabs(static_cast<double>(e.min[c])),
                    std::fabs(static_cast<double>(e.max[c])));
  }
  return m;
}

std::vector<double> SmoothQuantScales(absl::Span<const double> act_max,
                                      absl::Span<const double> weight_max,
                                      double alpha) {
  std::vector<double> s(act_max.size(), 1.0);
  for (size_t c = 0; c < s.size(); ++c) {
    const double a = act_max[c], wm = weight_max[c];
    if (!(a > 0) || !(wm > 0) || !std::isfinite(a) || !std::isfinite(wm)) {
      continue;
    }
    s[c] =
        std::clamp(std::pow(a, alpha) / std::pow(wm, 1.0 - alpha), 1e-4, 1e4);
  }
  return s;
}

// ------------------------------------------------- predicted noise

namespace {

// E[(x - b)^2; x > b] for x ~ N(0, sigma^2) and a bound b >= 0: the power
// a clip at b removes from one tail. (A Laplace tail, for heavier-tailed
// activations, refused rescales that help in ONNX Runtime and was worse on
// seven of eleven corpus models: docs/accuracy.md.)
double TailPower(double b, double sigma) {
  if (!(b >= 0)) return sigma * sigma / 2;
  const double z = b / sigma;
  const double tail = 0.5 * std::erfc(z / std::sqrt(2.0));
  const double density = std::exp(-z * z / 2) / std::sqrt(2 * M_PI);
  return std::max(0.0, (sigma * sigma + b * b) * tail - b * sigma * density);
}

}  // namespace

absl::StatusOr<SiteNoise> SiteNoise::Create(const ScalingSite& site,
                                            const ModelWeights& w,
                                            const ChannelExtremes::Extremes& x,
                                            const QuantGrids& grids) {
  SiteNoise out;
  out.grids_ = grids;
  out.min_ = x.min;
  out.max_ = x.max;
  const int64_t channels = site.channels;
  if (static_cast<int64_t>(x.min.size()) != channels) {
    return absl::InternalError(absl::StrCat(
        "'", site.value, "' was observed with another channel count"));
  }
  out.mean_sq_.assign(channels, 0.0);
  for (int64_t c = 0; c < channels; ++c) {
    out.mean_sq_[c] = x.count > 0 ? x.sum_sq[c] / x.count : 0.0;
  }
  for (const NodeProto* r : site.readers) {
    const TensorProto* t = w.Find(r->input(1));
    if (t == nullptr) {
      return absl::InternalError(absl::StrCat(Label(*r), " lost its weight"));
    }
    const std::vector<int64_t> d = graph::Dims(*t);
    if (Product(d, 0) < std::max<int64_t>(grids.min_elements, 1)) continue;
    QUANTD_ASSIGN_OR_RETURN(std::vector<float> v, graph::ReadFloatTensor(*t));
    Reader reader;
    // Conv and Gemm with transB keep output channels on the weight's rows.
    const bool rows_are_outputs =
        r->op_type() == "Conv" ||
        (r->op_type() == "Gemm" && graph::IntAttribute(*r, "transB", 0) != 0);
    reader.outputs = rows_are_outputs ? d[0] : d[1];
    reader.max_abs.assign(reader.outputs * channels, 0.0);
    reader.links.assign(reader.outputs * channels, 0.0);
    reader.sum_sq.assign(channels, 0.0);
    ForReaderChannels(*r, d, [&](int64_t i, int64_t o, int64_t c) {
      const double a = std::fabs(static_cast<double>(v[i]));
      double& m = reader.max_abs[o * channels + c];
      m = std::max(m, a);
      reader.links[o * channels + c] += 1;
      reader.sum_sq[c] += a * a;
    });
    out.readers_.push_back(std::move(reader));
  }
  return out;
}

double SiteNoise::ActivationNoise(absl::Span<const double> s) const {
  const int64_t channels = static_cast<int64_t>(mean_sq_.size());
  // The value's per-tensor step after the rescale.
  double lo = 0, hi = 0;
  for (int64_t c = 0; c < channels; ++c) {
    if (min_[c] > max_[c]) continue;
    lo = std::min(lo, min_[c] / s[c]);
    hi = std::max(hi, max_[c] / s[c]);
  }
  const double levels = std::ldexp(1.0, grids_.activation_bits) - 1;
  const double step = grids_.activation_symmetric
                          ? 2 * std::max(-lo, hi) / (levels - 1)
                          : (hi - lo) / levels;
  const double act_var = step * step / 12;
  // Clipping: the grid's bounds for channel c, in its own units, are
  // s_c * lo and s_c * hi. A rescale that brings every channel's observed
  // extreme to the grid's edge leaves no headroom for values beyond the
  // calibration batches' (the channel's own extremes are estimates).
  std::vector<double> clip(channels, 0.0);
  for (int64_t c = 0; c < channels && grids_.activation_ranges_fixed; ++c) {
    const double sigma = std::sqrt(mean_sq_[c]);
    if (min_[c] > max_[c] || !(sigma > 0)) continue;
    if (max_[c] > 0) clip[c] += TailPower(s[c] * hi, sigma);
    if (min_[c] < 0) clip[c] += TailPower(-s[c] * lo, sigma);
  }
  double noise = 0;
  for (const Reader& r : readers_) {
    for (int64_t c = 0; c < channels; ++c) {
      noise += act_var * r.sum_sq[c] * s[c] * s[c] + clip[c] * r.sum_sq[c];
    }
  }
  return noise;
}

double SiteNoise::Predict(absl::Span<const double> s) const {
  const int64_t channels = static_cast<int64_t>(mean_sq_.size());
  const double wq = std::ldexp(1.0, grids_.weight_bits - 1) - 1;
  double noise = ActivationNoise(s);
  for (const Reader& r : readers_) {
    std::vector<double> out_max(r.outputs, 0.0);
    std::vector<double> out_signal(r.outputs, 0.0);
    for (int64_t o = 0; o < r.outputs; ++o) {
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t at = o * channels + c;
        if (r.links[at] == 0) continue;
        out_max[o] = std::max(out_max[o], r.max_abs[at] * s[c]);
        out_signal[o] += r.links[at] * mean_sq_[c] / (s[c] * s[c]);
      }
    }
    double tensor_max = 0;
    for (double m : out_max) tensor_max = std::max(tensor_max, m);
    for (int64_t o = 0; o < r.outputs; ++o) {
      const double wstep =
          (grids_.weight_per_channel ? out_max[o] : tensor_max) / wq;
      noise += wstep * wstep / 12 * out_signal[o];
    }
  }
  return noise;
}

absl::StatusOr<SmoothingChoice> ChooseSmoothing(
    const ScalingSite& site, const ModelWeights& w,
    const ChannelExtremes::Extremes& x, const QuantGrids& grids) {
  QUANTD_ASSIGN_OR_RETURN(SiteNoise model,
                          SiteNoise::Create(site, w, x, grids));
  QUANTD_ASSIGN_OR_RETURN(std::vector<double> wmax, ReaderChannelMax(site, w));
  const std::vector<double> act = ChannelAbsMax(x);
  SmoothingChoice best;
  best.noise_unscaled = model.Predict(std::vector<double>(site.channels, 1.0));
  best.noise = best.noise_unscaled;
  for (int k = 0; k <= 10; ++k) {
    const double alpha = k / 10.0;
    std::vector<double> s = SmoothQuantScales(act, wmax, alpha);
    const double noise = model.Predict(s);
    // A rescale must earn its change: one predicting less than 5% less
    // noise than leaving the value alone is within the model's error.
    if (noise < best.noise && noise < best.noise_unscaled * 0.95) {
      best.rescale = true;
      best.alpha = alpha;
      best.noise = noise;
      best.s = std::move(s);
    }
  }
  return best;
}

// ------------------------------------------------ cross-layer equalization

namespace {

// The largest ratio between the two layers' ranges of a channel.
double WorstRatio(const std::vector<double>& r1,
                  const std::vector<double>& r2) {
  double worst = 1.0;
  for (size_t c = 0; c < r1.size(); ++c) {
    if (!(r1[c] > 0) || !(r2[c] > 0)) continue;
    worst = std::max(worst, std::max(r1[c] / r2[c], r2[c] / r1[c]));
  }
  return worst;
}

}  // namespace

absl::StatusOr<std::vector<quantd::v1::ChannelScaling>> EqualizeLayers(
    onnx::ModelProto* model, int64_t min_elements) {
  std::vector<ScalingSite> sites;
  for (ScalingSite& site : FindScalingSites(model, min_elements)) {
    if (site.AbsorberIsLayer()) sites.push_back(std::move(site));
  }
  std::vector<quantd::v1::ChannelScaling> reports(sites.size());
  if (sites.empty()) return reports;
  ModelWeights w(model);
  std::vector<std::vector<double>> total(sites.size());
  for (size_t i = 0; i < sites.size(); ++i) {
    total[i].assign(sites[i].channels, 1.0);
  }
  constexpr int kRounds = 32;
  constexpr double kSettled = 1e-3;
  for (int round = 0; round < kRounds; ++round) {
    double moved = 0;
    for (size_t i = 0; i < sites.size(); ++i) {
      QUANTD_ASSIGN_OR_RETURN(std::vector<double> r1,
                              AbsorberChannelMax(sites[i], w));
      QUANTD_ASSIGN_OR_RETURN(std::vector<double> r2,
                              ReaderChannelMax(sites[i], w));
      if (round == 0) reports[i].set_before(WorstRatio(r1, r2));
      std::vector<double> s(r1.size(), 1.0);
      for (size_t c = 0; c < s.size(); ++c) {
        if (r1[c] > 0 && r2[c] > 0 && std::isfinite(r1[c]) &&
            std::isfinite(r2[c])) {
          s[c] = std::clamp(std::sqrt(r1[c] / r2[c]), 1e-4, 1e4);
        }
        moved = std::max(moved, std::fabs(s[c] - 1.0));
        total[i][c] *= s[c];
      }
      QUANTD_ASSIGN_OR_RETURN(AppliedScaling applied,
                              ApplyChannelScales(sites[i], s, &w));
      if (round == 0) {
        reports[i].set_value(applied.value);
        reports[i].set_absorbed_by(applied.absorbed_by);
      }
    }
    if (moved < kSettled) break;
  }
  for (size_t i = 0; i < sites.size(); ++i) {
    QUANTD_ASSIGN_OR_RETURN(std::vector<double> r1,
                            AbsorberChannelMax(sites[i], w));
    QUANTD_ASSIGN_OR_RETURN(std::vector<double> r2,
                            ReaderChannelMax(sites[i], w));
    quantd::v1::ChannelScaling& r = reports[i];
    r.set_algorithm("equalize");
    r.set_after(WorstRatio(r1, r2));
    r.set_channels(sites[i].channels);
    for (const NodeProto* n : sites[i].readers) r.add_layers(n->name());
    r.set_min_scale(*std::min_element(total[i].begin(), total[i].end()));
    r.set_max_scale(*std::max_element(total[i].begin(), total[i].end()));
  }
  w.DropUnread();
  return reports;
}

absl::StatusOr<AwqSiteChoice> ChooseAwqScales(
    const ScalingSite& site, const ModelWeights& w, const InputMoments& moments,
    const AwqGrid& grid, const ChannelExtremes::Extremes* x,
    const QuantGrids& activations) {
  AwqSiteChoice out;
  // The readers' matrices with one of three H per reader: all calibration
  // samples, the even fold, or the odd one (InputMoments folds).
  enum Part { kAll = 0, kEven = 1, kOdd = 2 };
  std::vector<numerics::AwqMatrix> matrices[3];
  std::vector<double> magnitude[3];
  bool folds = true;
  for (int part = 0; part < 3; ++part) {
    magnitude[part].assign(site.channels, 0.0);
  }
  std::vector<double> diag_sum[3], diag_count;
  for (auto& d : diag_sum) d.assign(site.channels, 0.0);
  diag_count.assign(site.channels, 0);
  for (const NodeProto* r : site.readers) {
    const TensorProto* t = w.Find(r->input(1));
    if (t == nullptr) {
      return absl::InternalError(absl::StrCat(Label(*r), " lost its weight"));
    }
    const std::vector<int64_t> d = graph::Dims(*t);
    if (executor::NumElements(d) < grid.min_elements) continue;  // Float.
    const LayerMoments* m =
        r->output_size() > 0 ? moments.Find(r->output(0)) : nullptr;
    if (m == nullptr) {
      out.why_not = absl::StrCat(
          Label(*r), " has no input statistics: ",
          r->output_size() > 0 ? moments.WhyNone(r->output(0)) : "no output");
      return out;
    }
    QUANTD_ASSIGN_OR_RETURN(std::vector<float> v, graph::ReadFloatTensor(*t));
    const bool conv = r->op_type() == "Conv";
    const int64_t groups = conv ? graph::IntAttribute(*r, "group", 1) : 1;
    // Rows per group and columns (H's order: Conv c_in then kernel position;
    // MatMul / Gemm the K inputs).
    const bool trans_b =
        r->op_type() == "Gemm" && graph::IntAttribute(*r, "transB", 0) != 0;
    const int64_t rows = conv ? d[0] / groups : (trans_b ? d[0] : d[1]);
    const int64_t cols = conv ? Product(d, 1) : (trans_b ? d[1] : d[0]);
    if (groups < 1 || m->groups != groups || m->k != cols || m->rows == 0) {
      out.why_not = absl::StrCat("the input statistics of ", Label(*r),
                                 " do not fit its weight");
      return out;
    }
    folds = folds && m->h_fold.size() == m->h.size() && m->fold_rows > 0 &&
            m->fold_rows < m->rows;
    const int64_t inner = conv ? Product(d, 2) : 1;
    // A blocked Conv weight is rounded in blocks of input channels at one
    // kernel tap (weight_plan.cc): its columns go tap by tap
    // (TapMajorColumn), one block segment per tap.
    const bool conv_blocks = conv && grid.block_size > 0 && grid.per_channel &&
                             BlocksConvWeight(grid.four_bit_weights, d);
    const int64_t taps = conv_blocks ? inner : 1;
    auto source = [&](int64_t c) {
      return TapMajorColumn(c, cols / taps, taps);
    };
    // One group's H (cols x cols at `from`) in the matrix's column order.
    auto ordered_h = [&](const float* from, std::vector<float>* to) {
      to->resize(cols * cols);
      TapMajorGram(from, cols / taps, taps, to->data());
    };
    for (int64_t g = 0; g < groups; ++g) {
      numerics::AwqMatrix a;
      a.rows = rows;
      a.cols = cols;
      a.samples = m->rows;
      a.per_row = grid.per_channel;
      a.block_size = !conv || conv_blocks ? grid.block_size : 0;
      a.segment = conv_blocks ? d[1] : 0;
      a.w.resize(rows * cols);
      for (int64_t o = 0; o < rows; ++o) {
        for (int64_t c = 0; c < cols; ++c) {
          a.w[o * cols + c] = conv      ? v[(g * rows + o) * cols + source(c)]
                              : trans_b ? v[o * cols + c]
                                        : v[c * rows + o];
        }
      }
      ordered_h(m->h.data() + g * cols * cols, &a.h);
      a.channel.resize(cols);
      for (int64_t c = 0; c < cols; ++c) {
        a.channel[c] = conv ? g * d[1] + source(c) / inner : c;
        if (a.channel[c] >= site.channels) {
          return absl::InternalError(absl::StrCat(
              Label(*r), " reads more channels than '", site.value, "' has"));
        }
        diag_sum[kAll][a.channel[c]] +=
            a.h[c * cols + c] / static_cast<double>(m->rows);
        ++diag_count[a.channel[c]];
      }
      if (folds) {
        numerics::AwqMatrix even = a, odd = a;
        even.samples = m->fold_rows;
        odd.samples = m->rows - m->fold_rows;
        ordered_h(m->h_fold.data() + g * cols * cols, &even.h);
        for (int64_t i = 0; i < cols * cols; ++i) {
          odd.h[i] = a.h[i] - even.h[i];
        }
        for (int64_t c = 0; c < cols; ++c) {
          diag_sum[kEven][a.channel[c]] +=
              even.h[c * cols + c] / static_cast<double>(even.samples);
          diag_sum[kOdd][a.channel[c]] +=
              odd.h[c * cols + c] / static_cast<double>(odd.samples);
        }
        matrices[kEven].push_back(std::move(even));
        matrices[kOdd].push_back(std::move(odd));
      }
      matrices[kAll].push_back(std::move(a));
    }
  }
  if (matrices[kAll].empty()) {
    out.why_not = "none of its readers' weights is quantized";
    return out;
  }
  for (int part = 0; part < 3; ++part) {
    for (int64_t c = 0; c < site.channels; ++c) {
      if (diag_count[c] > 0) {
        magnitude[part][c] =
            std::sqrt(std::max(0.0, diag_sum[part][c] / diag_count[c]));
      }
    }
  }
  QUANTD_ASSIGN_OR_RETURN(
      out.choice, numerics::SearchAwqScales(matrices[kAll], magnitude[kAll],
                                            grid.spec, grid.steps));
  if (!out.choice.rescale || !folds) return out;
  // The cross-check: factors searched on each fold, judged on the other,
  // against no rescale on the same rows (errors per calibration row).
  auto held_out_error = [&](Part judged, absl::Span<const double> s) {
    absl::StatusOr<double> sum = 0.0;
    for (const numerics::AwqMatrix& m : matrices[judged]) {
      absl::StatusOr<numerics::AwqLoss> loss =
          numerics::ScaledRoundingLoss(m, s, grid.spec);
      if (!loss.ok()) return absl::StatusOr<double>(loss.status());
      *sum += loss->error / static_cast<double>(m.samples);
    }
    return sum;
  };
  const std::vector<double> ones(site.channels, 1.0);
  double with = 0, without = 0;
  for (Part fit : {kEven, kOdd}) {
    const Part judged = fit == kEven ? kOdd : kEven;
    QUANTD_ASSIGN_OR_RETURN(
        const numerics::AwqChoice half,
        numerics::SearchAwqScales(matrices[fit], magnitude[fit], grid.spec,
                                  grid.steps));
    QUANTD_ASSIGN_OR_RETURN(const double plain, held_out_error(judged, ones));
    QUANTD_ASSIGN_OR_RETURN(
        const double scaled,
        held_out_error(judged, half.rescale ? absl::MakeConstSpan(half.s)
                                            : absl::MakeConstSpan(ones)));
    with += scaled;
    without += plain;
  }
  if (!(with < without)) {
    out.choice.rescale = false;
    out.choice.s.clear();
    out.lost_cross_check = true;
  }
  return out;
}

}  // namespace quantd::passes
