// PrepareGraph and its graph-only steps (see prepare.h).
#include "core/graph/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <queue>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/huge_pages.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/graph_index.h"
#include "core/graph/model_io.h"
#include "core/graph/tensor_util.h"
#include "core/graph/unique_names.h"
#include "core/numerics/float16.h"

namespace quantd::graph {
namespace {

using onnx::AttributeProto;
using onnx::GraphProto;
using onnx::NodeProto;
using onnx::TensorProto;

// Every name a node of `g` (at any depth) reads: the outer values a body
// reads are among them. Body-local names cannot clash with outer producers
// (ONNX names are unique across scopes).
void CollectReads(const GraphProto& g, absl::flat_hash_set<std::string>* out) {
  for (const auto& node : g.node()) {
    for (const auto& in : node.input()) {
      if (!in.empty()) out->insert(in);
    }
    for (const auto& a : node.attribute()) {
      if (a.has_g()) CollectReads(a.g(), out);
      for (const auto& sub : a.graphs()) CollectReads(sub, out);
    }
  }
  for (const auto& o : g.output()) out->insert(o.name());
}

// What `node` reads, its subgraphs' reads included.
std::vector<std::string> NodeReads(const NodeProto& node) {
  std::vector<std::string> reads(node.input().begin(), node.input().end());
  absl::flat_hash_set<std::string> inner;
  for (const auto& a : node.attribute()) {
    if (a.has_g()) CollectReads(a.g(), &inner);
    for (const auto& sub : a.graphs()) CollectReads(sub, &inner);
  }
  reads.insert(reads.end(), inner.begin(), inner.end());
  return reads;
}

std::string Label(const NodeProto& node) {
  return absl::StrCat(node.op_type(), " '", node.name(), "'");
}

// ---------------------------------------------------------------- sorting

absl::Status SortOne(GraphProto* graph, int64_t* moved) {
  const int n = graph->node_size();
  absl::flat_hash_map<std::string, int> producer;
  for (int i = 0; i < n; ++i) {
    for (const auto& o : graph->node(i).output()) {
      if (!o.empty())
        producer.emplace(o, i);  // First wins; SSA is checked later.
    }
  }
  std::vector<std::vector<int>> readers(n);
  std::vector<std::vector<int>> deps(n);
  std::vector<int> pending(n, 0);
  for (int i = 0; i < n; ++i) {
    absl::flat_hash_set<int> seen;
    for (const std::string& name : NodeReads(graph->node(i))) {
      auto it = producer.find(name);
      if (it == producer.end() || !seen.insert(it->second).second) continue;
      if (it->second == i) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node ", Label(graph->node(i)), " reads its own output '", name,
            "': the graph has a cycle"));
      }
      readers[it->second].push_back(i);
      deps[i].push_back(it->second);
      ++pending[i];
    }
  }
  // Smallest original index first: an already sorted graph stays as it is.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int r : readers[i]) {
      if (--pending[r] == 0) ready.push(r);
    }
  }
  if (static_cast<int>(order.size()) < n) {
    // Walk unsatisfied dependencies until a node repeats: it is on a cycle.
    int at = 0;
    while (pending[at] == 0) ++at;
    std::vector<int> visit(n, -1);
    for (int step = 0; visit[at] < 0; ++step) {
      visit[at] = step;
      for (int d : deps[at]) {
        if (pending[d] > 0) {
          at = d;
          break;
        }
      }
    }
    std::vector<std::string> cycle;
    const int start = at;
    do {
      cycle.push_back(Label(graph->node(at)));
      for (int d : deps[at]) {
        if (pending[d] > 0 && visit[d] >= 0) {
          at = d;
          break;
        }
      }
    } while (at != start && cycle.size() < 8);
    return absl::InvalidArgumentError(absl::StrCat(
        "the graph has a cycle through node ", Label(graph->node(start)), " (",
        absl::StrJoin(cycle, " <- "), "): it cannot be sorted topologically"));
  }
  bool changed = false;
  for (int k = 0; k < n; ++k) {
    if (order[k] != k) {
      changed = true;
      if (moved != nullptr) ++*moved;
    }
  }
  if (changed) {
    google::protobuf::RepeatedPtrField<NodeProto> sorted;
    sorted.Reserve(n);
    for (int i : order) sorted.Add()->Swap(graph->mutable_node(i));
    graph->mutable_node()->Swap(&sorted);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------- Constant lift

}  // namespace

bool ConstantTensor(const NodeProto& node, TensorProto* out) {
  if (node.attribute_size() != 1 || node.output_size() != 1 ||
      node.output(0).empty()) {
    return false;
  }
  const AttributeProto& a = node.attribute(0);
  TensorProto t;
  if (a.name() == "value" && a.has_t()) {
    t = a.t();
    if (t.data_type() == TensorProto::STRING ||
        t.data_type() == TensorProto::UNDEFINED) {
      return false;
    }
  } else if (a.name() == "value_float") {
    t.set_data_type(TensorProto::FLOAT);
    t.add_float_data(a.f());
  } else if (a.name() == "value_floats") {
    t.set_data_type(TensorProto::FLOAT);
    t.add_dims(a.floats_size());
    for (float f : a.floats()) t.add_float_data(f);
  } else if (a.name() == "value_int") {
    t.set_data_type(TensorProto::INT64);
    t.add_int64_data(a.i());
  } else if (a.name() == "value_ints") {
    t.set_data_type(TensorProto::INT64);
    t.add_dims(a.ints_size());
    for (int64_t v : a.ints()) t.add_int64_data(v);
  } else {
    return false;  // sparse_value, value_string(s): left to the runtime.
  }
  t.set_name(node.output(0));
  *out = std::move(t);
  return true;
}

namespace {

int64_t LiftIn(GraphProto* graph, bool main, int64_t ir_version) {
  int64_t lifted = 0;
  // Bodies first: each keeps its own Constants.
  for (auto& node : *graph->mutable_node()) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) lifted += LiftIn(a.mutable_g(), false, ir_version);
      for (auto& g : *a.mutable_graphs())
        lifted += LiftIn(&g, false, ir_version);
    }
  }
  // IR < 4 wants every initializer to be a graph input, which a body's
  // signature cannot take.
  if (!main && ir_version < 4) return lifted;
  absl::flat_hash_set<std::string> outputs;
  for (const auto& o : graph->output()) outputs.insert(o.name());
  google::protobuf::RepeatedPtrField<NodeProto> kept;
  for (auto& node : *graph->mutable_node()) {
    TensorProto t;
    if (node.op_type() == "Constant" && IsDefaultDomain(node) &&
        !outputs.contains(node.output(0)) && ConstantTensor(node, &t)) {
      AddInitializer(std::move(t), main && ir_version < 4, graph);
      ++lifted;
      continue;
    }
    kept.Add()->Swap(&node);
  }
  graph->mutable_node()->Swap(&kept);
  return lifted;
}

// ------------------------------------------------------ fp16 weight casts

// The values of a FLOAT16 / BFLOAT16 tensor as float32; false when they are
// external or malformed.
bool ReadHalfTensor(const TensorProto& t, std::vector<float>* out) {
  if (HasExternalData(t)) return false;
  const int64_t n = NumElements(t);
  if (n < 0) return false;
  std::vector<uint16_t> raw(n);
  if (t.has_raw_data()) {
    if (t.raw_data().size() != static_cast<size_t>(n) * 2) return false;
    for (int64_t i = 0; i < n; ++i) {  // Little-endian.
      raw[i] = static_cast<uint16_t>(
          static_cast<uint8_t>(t.raw_data()[2 * i]) |
          (static_cast<uint8_t>(t.raw_data()[2 * i + 1]) << 8));
    }
  } else {
    // ONNX keeps one 16-bit value per int32_data entry.
    if (t.int32_data_size() != n) return false;
    for (int64_t i = 0; i < n; ++i) {
      raw[i] = static_cast<uint16_t>(t.int32_data(i));
    }
  }
  out->resize(n);
  const bool bf16 = t.data_type() == TensorProto::BFLOAT16;
  for (int64_t i = 0; i < n; ++i) {
    (*out)[i] = bf16 ? numerics::BFloat16ToFloat(raw[i])
                     : numerics::HalfToFloat(raw[i]);
  }
  return true;
}

bool IsWeightedOp(const NodeProto& node) {
  if (!IsDefaultDomain(node)) return false;
  const std::string& op = node.op_type();
  return op == "Conv" || op == "ConvTranspose" || op == "Gemm" ||
         op == "MatMul";
}

// An initializer whose value is fixed: not also a graph input that a
// caller may override (IR >= 4).
const TensorProto* ConstInit(const GraphIndex& index, const GraphProto& g,
                             const std::string& name, int64_t ir_version) {
  const int i = index.Initializer(name);
  if (i < 0) return nullptr;
  if (ir_version >= 4 && index.IsGraphInput(name)) return nullptr;
  return &g.initializer(i);
}

// Drops initializers in `candidates` that nothing reads any more (in this
// graph or its bodies) and that are not graph inputs or outputs.
void DropUnread(const absl::flat_hash_set<std::string>& candidates,
                GraphProto* graph) {
  if (candidates.empty()) return;
  absl::flat_hash_set<std::string> read;
  CollectReads(*graph, &read);
  for (const auto& in : graph->input()) read.insert(in.name());
  google::protobuf::RepeatedPtrField<TensorProto> kept;
  for (auto& t : *graph->mutable_initializer()) {
    if (candidates.contains(t.name()) && !read.contains(t.name())) continue;
    kept.Add()->Swap(&t);
  }
  graph->mutable_initializer()->Swap(&kept);
}

int64_t FoldWeightCastsIn(GraphProto* graph, int64_t ir_version) {
  int64_t folded = 0;
  for (auto& node : *graph->mutable_node()) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) folded += FoldWeightCastsIn(a.mutable_g(), ir_version);
      for (auto& g : *a.mutable_graphs()) {
        folded += FoldWeightCastsIn(&g, ir_version);
      }
    }
  }
  const GraphIndex index(*graph);
  std::set<int> casts;  // Ordered: the output does not depend on hashing.
  for (const auto& node : graph->node()) {
    if (!IsWeightedOp(node)) continue;
    for (const auto& in : node.input()) {
      const int p = index.Producer(in);
      if (p < 0) continue;
      const NodeProto& cast = graph->node(p);
      if (cast.op_type() != "Cast" || !IsDefaultDomain(cast) ||
          cast.input_size() != 1 ||
          IntAttribute(cast, "to", 0) != TensorProto::FLOAT ||
          index.IsGraphOutput(cast.output(0))) {
        continue;
      }
      const TensorProto* w =
          ConstInit(index, *graph, cast.input(0), ir_version);
      if (w == nullptr || (w->data_type() != TensorProto::FLOAT16 &&
                           w->data_type() != TensorProto::BFLOAT16)) {
        continue;
      }
      casts.insert(p);
    }
  }
  if (casts.empty()) return folded;
  absl::flat_hash_set<std::string> sources;
  std::vector<TensorProto> made;
  for (int p : casts) {
    const NodeProto& cast = graph->node(p);
    const TensorProto& w = graph->initializer(index.Initializer(cast.input(0)));
    std::vector<float> values;
    if (!ReadHalfTensor(w, &values)) continue;
    made.push_back(MakeFloatTensor(cast.output(0), Dims(w), values));
    sources.insert(cast.input(0));
  }
  absl::flat_hash_set<std::string> done;
  for (auto& t : made) {
    done.insert(t.name());
    AddInitializer(std::move(t), ir_version < 4, graph);
  }
  google::protobuf::RepeatedPtrField<NodeProto> kept;
  for (auto& node : *graph->mutable_node()) {
    if (node.op_type() == "Cast" && node.output_size() == 1 &&
        done.contains(node.output(0))) {
      ++folded;
      continue;
    }
    kept.Add()->Swap(&node);
  }
  graph->mutable_node()->Swap(&kept);
  DropUnread(sources, graph);
  return folded;
}

// ------------------------------------------------------- BatchNorm folding

// Per-channel multiplier and shift of an inference BatchNormalization:
// y = x * mul + add.
struct BnAffine {
  std::vector<double> mul, add;
};

bool ReadBn(const GraphIndex& index, const GraphProto& g, const NodeProto& bn,
            int64_t ir_version, BnAffine* out) {
  if (bn.input_size() != 5) return false;
  if (IntAttribute(bn, "training_mode", 0) != 0) return false;
  if (IntAttribute(bn, "spatial", 1) != 1) return false;
  const AttributeProto* is_test = FindAttribute(bn, "is_test");
  if (is_test != nullptr && is_test->i() == 0) return false;
  std::vector<std::vector<float>> v(4);
  for (int k = 0; k < 4; ++k) {
    const TensorProto* t = ConstInit(index, g, bn.input(k + 1), ir_version);
    if (t == nullptr || t->data_type() != TensorProto::FLOAT) return false;
    absl::StatusOr<std::vector<float>> values = ReadFloatTensor(*t);
    if (!values.ok()) return false;
    v[k] = std::move(*values);
    if (v[k].size() != v[0].size() || Dims(*t).size() != 1) return false;
  }
  const double eps = FloatAttribute(bn, "epsilon", 1e-5f);
  const size_t c = v[0].size();
  out->mul.resize(c);
  out->add.resize(c);
  for (size_t i = 0; i < c; ++i) {
    const double var = static_cast<double>(v[3][i]) + eps;
    if (!(var > 0)) return false;
    out->mul[i] = v[0][i] / std::sqrt(var);
    out->add[i] = v[1][i] - v[2][i] * out->mul[i];
  }
  return true;
}

// Folds one BN into its producer; false (nothing changed) when the shapes
// do not fit.
bool FoldOneBn(const GraphIndex& index, int bn_at, int prod_at,
               int64_t ir_version, UniqueNames* names, GraphProto* g,
               absl::flat_hash_set<std::string>* replaced) {
  const NodeProto& bn = g->node(bn_at);
  NodeProto* prod = g->mutable_node(prod_at);
  BnAffine a;
  if (!ReadBn(index, *g, bn, ir_version, &a)) return false;
  const int64_t c = static_cast<int64_t>(a.mul.size());
  const std::string& op = prod->op_type();
  if (prod->input_size() < 2) return false;
  const TensorProto* w = ConstInit(index, *g, prod->input(1), ir_version);
  if (w == nullptr || w->data_type() != TensorProto::FLOAT) return false;
  const std::vector<int64_t> wd = Dims(*w);
  absl::StatusOr<std::vector<float>> wv = ReadFloatTensor(*w);
  if (!wv.ok()) return false;
  // The output channel of every weight element.
  std::vector<float> nw(wv->size());
  std::vector<float> bias(c, 0.0f);
  const bool has_bias = prod->input_size() > 2 && !prod->input(2).empty();
  std::vector<float> old_bias;
  if (has_bias) {
    const TensorProto* b = ConstInit(index, *g, prod->input(2), ir_version);
    if (b == nullptr || b->data_type() != TensorProto::FLOAT) return false;
    absl::StatusOr<std::vector<float>> bv = ReadFloatTensor(*b);
    if (!bv.ok()) return false;
    old_bias = std::move(*bv);
  }
  if (op == "Conv" || op == "ConvTranspose") {
    if (wd.size() < 3) return false;
    const int64_t group = IntAttribute(*prod, "group", 1);
    if (group < 1) return false;
    int64_t inner = 1;
    for (size_t k = 2; k < wd.size(); ++k) inner *= wd[k];
    const bool transpose = op == "ConvTranspose";
    const int64_t out_channels = transpose ? wd[1] * group : wd[0];
    if (out_channels != c) return false;
    if (has_bias && static_cast<int64_t>(old_bias.size()) != c) return false;
    if (transpose && wd[0] % group != 0) return false;
    const int64_t in_per_group = transpose ? wd[0] / group : 0;
    for (int64_t i0 = 0; i0 < wd[0]; ++i0) {
      for (int64_t i1 = 0; i1 < wd[1]; ++i1) {
        const int64_t oc = transpose ? (i0 / in_per_group) * wd[1] + i1 : i0;
        const int64_t base = (i0 * wd[1] + i1) * inner;
        for (int64_t k = 0; k < inner; ++k) {
          nw[base + k] = static_cast<float>((*wv)[base + k] * a.mul[oc]);
        }
      }
    }
    for (int64_t o = 0; o < c; ++o) {
      const double b0 = has_bias ? old_bias[o] : 0.0;
      bias[o] = static_cast<float>(b0 * a.mul[o] + a.add[o]);
    }
  } else if (op == "Gemm") {
    if (wd.size() != 2) return false;
    const bool trans_b = IntAttribute(*prod, "transB", 0) != 0;
    const int64_t n = trans_b ? wd[0] : wd[1];
    if (n != c) return false;
    const double beta = FloatAttribute(*prod, "beta", 1.0f);
    if (has_bias) {
      const TensorProto* b = ConstInit(index, *g, prod->input(2), ir_version);
      const std::vector<int64_t> bd = Dims(*b);
      // Only a per-column (or scalar) C folds into a per-column bias.
      int64_t bn_elems = 1;
      for (int64_t d : bd) bn_elems *= d;
      const bool per_col = bd.empty() || (bd.size() == 1 && bd[0] == n) ||
                           (bd.size() == 2 && bd[0] == 1 && bd[1] == n) ||
                           bn_elems == 1;
      if (!per_col) return false;
      if (bn_elems == 1) old_bias.assign(c, old_bias.at(0));
    }
    for (int64_t r = 0; r < wd[0]; ++r) {
      for (int64_t k = 0; k < wd[1]; ++k) {
        const int64_t col = trans_b ? r : k;
        nw[r * wd[1] + k] =
            static_cast<float>((*wv)[r * wd[1] + k] * a.mul[col]);
      }
    }
    for (int64_t o = 0; o < c; ++o) {
      const double b0 = has_bias ? beta * old_bias[o] : 0.0;
      bias[o] = static_cast<float>(b0 * a.mul[o] + a.add[o]);
    }
  } else {
    return false;
  }
  const std::string w_name = names->Make(prod->input(1) + "_bn_folded");
  const std::string b_name = names->Make(
      has_bias ? prod->input(2) + "_bn_folded" : prod->name() + "_bias");
  replaced->insert(prod->input(1));
  if (has_bias) replaced->insert(prod->input(2));
  AddInitializer(MakeFloatTensor(w_name, wd, nw), ir_version < 4, g);
  AddInitializer(MakeFloatTensor(b_name, {c}, bias), ir_version < 4, g);
  prod->set_input(1, w_name);
  if (op == "Gemm") {
    // beta was applied to C above.
    auto* attrs = prod->mutable_attribute();
    for (int k = 0; k < attrs->size(); ++k) {
      if (attrs->Get(k).name() == "beta") {
        attrs->DeleteSubrange(k, 1);
        break;
      }
    }
  }
  if (has_bias) {
    prod->set_input(2, b_name);
  } else {
    while (prod->input_size() < 3) prod->add_input("");
    prod->set_input(2, b_name);
  }
  prod->set_output(0, bn.output(0));
  return true;
}

int64_t FoldBatchNormsIn(GraphProto* g, int64_t ir_version) {
  int64_t folded = 0;
  for (auto& node : *g->mutable_node()) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) folded += FoldBatchNormsIn(a.mutable_g(), ir_version);
      for (auto& sub : *a.mutable_graphs()) {
        folded += FoldBatchNormsIn(&sub, ir_version);
      }
    }
  }
  UniqueNames names(*g);
  absl::flat_hash_set<std::string> replaced;
  absl::flat_hash_set<int> drop;
  // Indices stay valid: nodes are only dropped at the end, and the index
  // is rebuilt after each fold (a fold renames one output).
  for (int i = 0; i < g->node_size(); ++i) {
    const NodeProto& bn = g->node(i);
    if (bn.op_type() != "BatchNormalization" || !IsDefaultDomain(bn)) continue;
    const GraphIndex index(*g);
    bool extra_read = false;
    for (int k = 1; k < bn.output_size(); ++k) {
      if (!bn.output(k).empty() && (!index.Uses(bn.output(k)).empty() ||
                                    index.IsGraphOutput(bn.output(k)))) {
        extra_read = true;
      }
    }
    if (extra_read || bn.input_size() < 1 || bn.output_size() < 1) continue;
    const std::string& x = bn.input(0);
    const int p = index.Producer(x);
    if (p < 0 || drop.contains(p)) continue;
    const NodeProto& prod = g->node(p);
    if (!IsDefaultDomain(prod) ||
        (prod.op_type() != "Conv" && prod.op_type() != "ConvTranspose" &&
         prod.op_type() != "Gemm")) {
      continue;
    }
    const std::vector<Use>& uses = index.Uses(x);
    if (uses.size() != 1 || uses[0].node != i || index.IsGraphOutput(x) ||
        prod.output_size() != 1) {
      continue;
    }
    if (FoldOneBn(index, i, p, ir_version, &names, g, &replaced)) {
      // Its statistics may be unread now.
      for (int k = 1; k < bn.input_size(); ++k) replaced.insert(bn.input(k));
      drop.insert(i);
      ++folded;
    }
  }
  if (drop.empty()) return folded;
  google::protobuf::RepeatedPtrField<NodeProto> kept;
  for (int i = 0; i < g->node_size(); ++i) {
    if (!drop.contains(i)) kept.Add()->Swap(g->mutable_node(i));
  }
  g->mutable_node()->Swap(&kept);
  DropUnread(replaced, g);
  return folded;
}

// ------------------------------------------------------ half compute

bool IsHalfType(int32_t t) {
  return t == TensorProto::FLOAT16 || t == TensorProto::BFLOAT16;
}

// Widens a half tensor in place to FLOAT (same name and dims); false when
// its data does not match its dims.
bool WidenHalfTensor(TensorProto* t) {
  const int64_t n = NumElements(*t);
  if (t->has_raw_data() && !HasExternalData(*t) && n >= 0 &&
      t->raw_data().size() == static_cast<size_t>(n) * 2) {
    // The common case (every exporter's), in one pass from the half bytes
    // into the float bytes: a half LLM's weights are gigabytes, and fresh
    // memory is faulted in on huge pages.
    const bool bf16 = t->data_type() == TensorProto::BFLOAT16;
    std::string wide;
    wide.reserve(static_cast<size_t>(n) * 4);
    AdviseHugePages(wide.data(), wide.capacity());
    wide.resize(static_cast<size_t>(n) * 4);
    const auto* from = reinterpret_cast<const uint8_t*>(t->raw_data().data());
    for (int64_t i = 0; i < n; ++i) {  // Little-endian both ways.
      const auto h =
          static_cast<uint16_t>(from[2 * i] | (from[2 * i + 1] << 8));
      const float f =
          bf16 ? numerics::BFloat16ToFloat(h) : numerics::HalfToFloat(h);
      const uint32_t bits = numerics::FloatToBits(f);
      for (int b = 0; b < 4; ++b) {
        wide[4 * i + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
      }
    }
    t->set_raw_data(std::move(wide));
    t->set_data_type(TensorProto::FLOAT);
    return true;
  }
  std::vector<float> values;
  if (!ReadHalfTensor(*t, &values)) return false;
  TensorProto wide = MakeFloatTensor(t->name(), Dims(*t), values);
  t->Swap(&wide);
  return true;
}

// Makes a declared half tensor type FLOAT; false when it was not half.
bool WidenDeclaredType(onnx::ValueInfoProto* v) {
  if (!v->type().has_tensor_type() ||
      !IsHalfType(v->type().tensor_type().elem_type())) {
    return false;
  }
  v->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  return true;
}

// Widens every half thing `graph` holds (and its bodies); counts what it
// changed in `*widened`. INVALID_ARGUMENT names a malformed half tensor.
absl::Status WidenHalfIn(GraphProto* graph, int64_t* widened) {
  for (TensorProto& t : *graph->mutable_initializer()) {
    if (!IsHalfType(t.data_type())) continue;
    if (!WidenHalfTensor(&t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("half initializer '", t.name(),
                       "' has data that does not match "
                       "its dims"));
    }
    ++*widened;
  }
  for (NodeProto& node : *graph->mutable_node()) {
    const bool default_domain = IsDefaultDomain(node);
    const std::string& op = node.op_type();
    for (onnx::AttributeProto& a : *node.mutable_attribute()) {
      if (a.has_g())
        QUANTD_RETURN_IF_ERROR(WidenHalfIn(a.mutable_g(), widened));
      for (GraphProto& g : *a.mutable_graphs()) {
        QUANTD_RETURN_IF_ERROR(WidenHalfIn(&g, widened));
      }
      if (!default_domain) continue;
      const bool type_attr =
          (op == "Cast" && a.name() == "to") ||
          (a.name() == "dtype" &&
           (op == "EyeLike" || op == "RandomNormal" || op == "RandomUniform" ||
            op == "RandomNormalLike" || op == "RandomUniformLike" ||
            op == "Multinomial" || op == "Bernoulli"));
      if (type_attr && IsHalfType(static_cast<int32_t>(a.i()))) {
        a.set_i(TensorProto::FLOAT);
        ++*widened;
      }
      if (a.has_t() && IsHalfType(a.t().data_type()) &&
          (op == "Constant" || op == "ConstantOfShape")) {
        if (!WidenHalfTensor(a.mutable_t())) {
          return absl::InvalidArgumentError(
              absl::StrCat("the half value of ", op, " node '", node.name(),
                           "' has data that does not match its dims"));
        }
        ++*widened;
      }
    }
  }
  for (auto* values : {graph->mutable_input(), graph->mutable_output(),
                       graph->mutable_value_info()}) {
    for (onnx::ValueInfoProto& v : *values) {
      if (WidenDeclaredType(&v)) ++*widened;
    }
  }
  return absl::OkStatus();
}

bool HasHalfValues(const GraphProto& graph) {
  for (const auto& t : graph.initializer()) {
    if (IsHalfType(t.data_type())) return true;
  }
  for (const auto* values : {&graph.input(), &graph.output()}) {
    for (const auto& v : *values) {
      if (v.type().has_tensor_type() &&
          IsHalfType(v.type().tensor_type().elem_type())) {
        return true;
      }
    }
  }
  for (const auto& node : graph.node()) {
    for (const auto& a : node.attribute()) {
      if (a.has_g() && HasHalfValues(a.g())) return true;
      for (const auto& g : a.graphs()) {
        if (HasHalfValues(g)) return true;
      }
    }
  }
  return false;
}

}  // namespace

std::string PrepareReport::Summary() const {
  std::vector<std::string> parts;
  if (opset_to != opset_from) {
    parts.push_back(absl::StrCat("opset upgraded from ", opset_from, " to ",
                                 opset_to,
                                 " (ONNX version converter, ranks from shape "
                                 "inference)"));
  }
  if (reordered_nodes > 0) {
    parts.push_back(
        absl::StrCat(reordered_nodes, " nodes reordered (topological sort)"));
  }
  if (lifted_constants > 0) {
    parts.push_back(absl::StrCat(lifted_constants,
                                 " Constant nodes lifted to initializers"));
  }
  if (folded_weight_casts > 0) {
    parts.push_back(absl::StrCat(folded_weight_casts,
                                 " fp16/bf16 weight Casts folded to float32"));
  }
  if (widened_half_tensors > 0) {
    parts.push_back(absl::StrCat(
        "computes in float32 instead of FLOAT16/BFLOAT16 (",
        widened_half_tensors, " half tensors, types and casts widened; ",
        half_interface.inputs.size(), " half inputs and ",
        half_interface.outputs.size(),
        " half outputs keep their type through Casts)"));
  }
  if (folded_batch_norms > 0) {
    parts.push_back(absl::StrCat(folded_batch_norms,
                                 " BatchNormalization folded into Conv/Gemm"));
  }
  if (folded_constant_nodes > 0) {
    parts.push_back(
        absl::StrCat(folded_constant_nodes, " constant nodes folded"));
  }
  for (const auto& n : notes) parts.push_back(n);
  if (parts.empty()) return "";
  return absl::StrCat("prepared: ", absl::StrJoin(parts, "; "));
}

absl::Status SortTopologically(GraphProto* graph, int64_t* moved) {
  for (auto& node : *graph->mutable_node()) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) {
        QUANTD_RETURN_IF_ERROR(SortTopologically(a.mutable_g(), moved));
      }
      for (auto& g : *a.mutable_graphs()) {
        QUANTD_RETURN_IF_ERROR(SortTopologically(&g, moved));
      }
    }
  }
  return SortOne(graph, moved);
}

int64_t LiftConstants(GraphProto* graph, int64_t ir_version) {
  return LiftIn(graph, /*main=*/true, ir_version);
}

absl::StatusOr<bool> WidenHalfCompute(onnx::ModelProto* model,
                                      PrepareReport* report) {
  GraphProto* g = model->mutable_graph();
  if (!HasHalfValues(*g)) return false;
  auto note_half = [](const auto& values,
                      std::vector<HalfInterface::Value>* out) {
    for (const onnx::ValueInfoProto& v : values) {
      const int32_t t =
          v.type().has_tensor_type() ? v.type().tensor_type().elem_type() : 0;
      if (IsHalfType(t)) out->push_back({v.name(), t});
    }
  };
  note_half(g->input(), &report->half_interface.inputs);
  note_half(g->output(), &report->half_interface.outputs);
  QUANTD_RETURN_IF_ERROR(WidenHalfIn(g, &report->widened_half_tensors));
  return true;
}

void RestoreHalfInterface(const HalfInterface& half, onnx::ModelProto* model) {
  if (half.inputs.empty() && half.outputs.empty()) return;
  GraphProto* g = model->mutable_graph();
  UniqueNames names(*g);
  auto declare =
      [](google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* values,
         const std::string& name, int32_t type) {
        for (auto& v : *values) {
          if (v.name() == name && v.type().has_tensor_type()) {
            v.mutable_type()->mutable_tensor_type()->set_elem_type(type);
          }
        }
      };
  for (const HalfInterface::Value& in : half.inputs) {
    // Nodes (and bodies' outer reads) now read a float32 copy; a graph
    // output that is the input itself stays as it is, half in and out.
    const std::string wide = names.Make(in.name + "_float");
    RenameNodeReads(in.name, wide, g);
    NodeProto cast =
        MakeNode("Cast", names.Make(in.name + "_to_float"), {in.name}, {wide});
    SetIntAttribute(&cast, "to", TensorProto::FLOAT);
    InsertNode(std::move(cast), 0, g);
    declare(g->mutable_input(), in.name, in.elem_type);
    declare(g->mutable_output(), in.name, in.elem_type);
  }
  absl::flat_hash_set<std::string> inputs;
  for (const auto& v : g->input()) inputs.insert(v.name());
  for (const HalfInterface::Value& out : half.outputs) {
    if (inputs.contains(out.name)) continue;  // Handled above.
    // The float32 value gets a new name, and the output is cast from it.
    const std::string wide = names.Make(out.name + "_float");
    RenameNodeReads(out.name, wide, g);
    for (NodeProto& node : *g->mutable_node()) {
      for (std::string& o : *node.mutable_output()) {
        if (o == out.name) o = wide;
      }
    }
    for (TensorProto& t : *g->mutable_initializer()) {
      if (t.name() == out.name) t.set_name(wide);
    }
    for (auto& v : *g->mutable_value_info()) {
      if (v.name() == out.name) v.set_name(wide);
    }
    NodeProto cast =
        MakeNode("Cast", names.Make(out.name + "_to_half"), {wide}, {out.name});
    SetIntAttribute(&cast, "to", out.elem_type);
    InsertNode(std::move(cast), g->node_size(), g);
    declare(g->mutable_output(), out.name, out.elem_type);
  }
}

absl::StatusOr<PrepareReport> PrepareGraph(onnx::ModelProto* model,
                                           const PrepareOptions& options) {
  PrepareReport report;
  report.opset_from = DefaultOpset(*model);
  const int64_t ir = model->ir_version();
  if (options.sort) {
    QUANTD_RETURN_IF_ERROR(
        SortTopologically(model->mutable_graph(), &report.reordered_nodes));
  }
  if (options.lift_constants) {
    report.lifted_constants = LiftConstants(model->mutable_graph(), ir);
  }
  if (options.upgrade) {
    QUANTD_RETURN_IF_ERROR(options.upgrade(model, &report));
    // The converter writes some values (e.g. Squeeze axes) as Constants.
    if (options.lift_constants) {
      report.lifted_constants +=
          LiftConstants(model->mutable_graph(), model->ir_version());
    }
  }
  if (options.fold_weight_casts) {
    report.folded_weight_casts =
        FoldWeightCastsIn(model->mutable_graph(), model->ir_version());
  }
  if (options.widen_half_compute) {
    QUANTD_RETURN_IF_ERROR(WidenHalfCompute(model, &report).status());
  }
  if (options.fold_batch_norms) {
    report.folded_batch_norms =
        FoldBatchNormsIn(model->mutable_graph(), model->ir_version());
  }
  if (options.fold_constants) {
    QUANTD_RETURN_IF_ERROR(options.fold_constants(model, &report));
  }
  report.opset_to = DefaultOpset(*model);
  return report;
}

}  // namespace quantd::graph
