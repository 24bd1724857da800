#include "core/passes/xla_lowering.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/tensor_util.h"

namespace quantd::passes {
namespace {

using onnx::NodeProto;
using onnx::TensorProto;

// How a weight is laid out for its integer op.
enum class Layout {
  kMatMul,            // B of MatMul / Gemm transB = 0: [..., K, N] int8.
  kMatMulTransposed,  // Gemm transB = 1: stored [N, K], written [K, N].
  kConv,              // [M, C/g, k...] uint8, zero point 128.
};

std::string Describe(const NodeProto& node) {
  return absl::StrCat(node.op_type(), " '", node.name(), "'");
}

bool HasInput(const NodeProto& node, int i) {
  return node.input_size() > i && !node.input(i).empty();
}

// The layout `node` needs, or UNIMPLEMENTED naming it and why.
absl::StatusOr<Layout> LayoutFor(const NodeProto& node) {
  if (node.op_type() == "Conv") return Layout::kConv;
  if (node.op_type() == "MatMul") return Layout::kMatMul;
  // Gemm: Y = alpha * A' * B' + beta * C.
  const float alpha = graph::FloatAttribute(node, "alpha", 1.0f);
  const float beta = graph::FloatAttribute(node, "beta", 1.0f);
  const int64_t trans_a = graph::IntAttribute(node, "transA", 0);
  if (alpha != 1.0f || (beta != 1.0f && HasInput(node, 2)) || trans_a != 0) {
    return absl::UnimplementedError(absl::StrCat(
        Describe(node), " has alpha=", alpha, ", beta=", beta,
        ", transA=", trans_a,
        "; op_set XLA lowers a Gemm to MatMulInteger + rescale + Add only "
        "with alpha = beta = 1 and transA = 0 (set the node or Gemm to "
        "PRECISION_FULL, or use op_set TF)"));
  }
  return graph::IntAttribute(node, "transB", 0) != 0 ? Layout::kMatMulTransposed
                                                     : Layout::kMatMul;
}

absl::StatusOr<Layout> WeightLayout(const onnx::GraphProto& graph,
                                    const WeightPlan& w) {
  absl::StatusOr<Layout> first;
  for (int n : w.consumers) {
    QUANTD_ASSIGN_OR_RETURN(Layout l, LayoutFor(graph.node(n)));
    if (n == w.consumers.front()) {
      first = l;
    } else if (l != *first) {
      return absl::UnimplementedError(absl::StrCat(
          "weight '", w.tensor, "' is read by ",
          Describe(graph.node(w.consumers.front())), " and ",
          Describe(graph.node(n)),
          ", which need it in different layouts for op_set XLA (one stored "
          "integer weight serves every reader)"));
    }
  }
  return first;
}

int FindInitializer(const onnx::GraphProto& graph, const std::string& name) {
  for (int i = 0; i < graph.initializer_size(); ++i) {
    if (graph.initializer(i).name() == name) return i;
  }
  return -1;
}

// Replaces initializer `index` by `t`; with IR < 4 also retypes the graph
// input of the same name.
void ReplaceInitializer(int index, TensorProto t, bool also_input,
                        onnx::GraphProto* graph) {
  if (also_input) {
    for (auto& in : *graph->mutable_input()) {
      if (in.name() != t.name()) continue;
      auto* tt = in.mutable_type()->mutable_tensor_type();
      tt->set_elem_type(t.data_type());
      auto* shape = tt->mutable_shape();
      shape->clear_dim();
      for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    }
  }
  *graph->mutable_initializer(index) = std::move(t);
}

TensorProto MakeInt64Tensor(const std::string& name,
                            const std::vector<int64_t>& values) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

// Rewrites one quantized weight's values, scale and zero point into the
// layout its integer op reads.
absl::Status RelayoutWeight(const WeightPlan& w, const WeightNames& names,
                            const std::vector<numerics::QuantParams>& params,
                            Layout layout, bool also_input,
                            onnx::GraphProto* graph) {
  const int vi = FindInitializer(*graph, names.values);
  const int si = FindInitializer(*graph, names.scale);
  const int zi = FindInitializer(*graph, names.zero_point);
  if (vi < 0 || si < 0 || zi < 0 || params.empty()) {
    return absl::InternalError(absl::StrCat(
        "quantized initializers of weight '", w.tensor, "' not found"));
  }
  const TensorProto& values = graph->initializer(vi);
  std::string bytes = values.raw_data();
  std::vector<int64_t> dims = graph::Dims(values);
  if (static_cast<int64_t>(bytes.size()) != w.num_elements) {
    return absl::InternalError(
        absl::StrCat("quantized weight '", w.tensor, "' has ", bytes.size(),
                     " bytes of values, expected ", w.num_elements));
  }
  bool uniform_zp = true;
  for (const auto& p : params) {
    uniform_zp &= p.zero_point == params.front().zero_point;
  }
  std::vector<float> scales;
  for (const auto& p : params) scales.push_back(p.scale);
  std::vector<int64_t> scale_dims;
  if (w.axis >= 0) scale_dims.push_back(static_cast<int64_t>(params.size()));

  TensorProto::DataType type = TensorProto::INT8;
  std::string zp_bytes;
  std::vector<int64_t> zp_dims;
  if (layout == Layout::kConv) {
    if (!uniform_zp) {
      return absl::UnimplementedError(absl::StrCat(
          "weight '", w.tensor,
          "' of a Conv has a zero point per channel, which ConvInteger "
          "cannot take (per-tensor weight zero point only); use symmetric "
          "weights for op_set XLA"));
    }
    // int8 q -> uint8 q + 128 with zero point zp + 128: same real values.
    for (char& c : bytes) {
      c = static_cast<char>(
          static_cast<uint8_t>(static_cast<int>(static_cast<int8_t>(c)) + 128));
    }
    type = TensorProto::UINT8;
    zp_bytes.push_back(static_cast<char>(
        static_cast<uint8_t>(params.front().zero_point + 128)));
    // Broadcast on the output's channel axis: [M, 1, ...] for NCHW....
    if (w.axis >= 0) scale_dims.resize(dims.size() - 1, 1);
  } else {
    if (layout == Layout::kMatMulTransposed) {
      // [N, K] -> [K, N]; the scales (axis 0) now run along the last axis.
      const int64_t n = dims[0], k = dims[1];
      std::string t(bytes.size(), '\0');
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) t[c * n + r] = bytes[r * k + c];
      }
      bytes = std::move(t);
      dims = {k, n};
    }
    if (uniform_zp) {
      zp_bytes.push_back(
          static_cast<char>(static_cast<int8_t>(params.front().zero_point)));
    } else {
      if (dims.size() != 2) {
        return absl::UnimplementedError(absl::StrCat(
            "weight '", w.tensor, "' has rank ", dims.size(),
            " and a zero point per channel; MatMulInteger takes a per-column "
            "zero point only for a 2-D weight"));
      }
      for (const auto& p : params) {
        zp_bytes.push_back(
            static_cast<char>(static_cast<int8_t>(p.zero_point)));
      }
      zp_dims = scale_dims;
    }
  }
  ReplaceInitializer(
      vi, graph::MakeByteTensor(names.values, type, dims, std::move(bytes)),
      also_input, graph);
  ReplaceInitializer(si,
                     graph::MakeFloatTensor(names.scale, scale_dims, scales),
                     also_input, graph);
  ReplaceInitializer(
      zi, graph::MakeByteTensor(names.zero_point, type, zp_dims, zp_bytes),
      also_input, graph);
  return absl::OkStatus();
}

// One integer computation of op set XLA, with every operand already in
// the graph:
//   acc = ConvInteger / MatMulInteger(x_q, w_q, x_zero_point, w_zero_point)
//   [acc = Add(acc, int32_bias)]           (int32, same scale as acc)
//   y = Mul(Cast(acc, FLOAT), scale) [+ float_bias]
// y keeps the name of `node`'s output 0, so readers need no rewiring.
struct IntegerCompute {
  std::string x_q, x_zero_point, w_q, w_zero_point;
  std::string scale;       // x_scale * w_scale, broadcastable to the output.
  std::string int32_bias;  // "" when none; broadcastable to the output.
  std::string float_bias;  // "" when none; broadcastable to the output.
  std::string doc;
};

void EmitIntegerCompute(const NodeProto& node, const IntegerCompute& c,
                        graph::UniqueNames* unique,
                        google::protobuf::RepeatedPtrField<NodeProto>* out) {
  const bool conv = node.op_type() == "Conv";
  const std::string base = node.name().empty() ? node.output(0) : node.name();
  const std::string& y = node.output(0);
  std::string acc = unique->Make(base + "_int32");
  NodeProto op = graph::MakeNode(
      conv ? "ConvInteger" : "MatMulInteger",
      node.name().empty() ? unique->Make(base + "_Integer") : node.name(),
      {c.x_q, c.w_q, c.x_zero_point, c.w_zero_point}, {acc});
  if (conv) {
    // ConvInteger has Conv's attributes (auto_pad, dilations, group,
    // kernel_shape, pads, strides).
    for (const auto& attr : node.attribute()) *op.add_attribute() = attr;
  }
  op.set_doc_string(c.doc);
  *out->Add() = std::move(op);
  if (!c.int32_bias.empty()) {
    const std::string biased = unique->Make(base + "_int32_biased");
    *out->Add() = graph::MakeNode("Add", unique->Make(base + "_int32_bias_Add"),
                                  {acc, c.int32_bias}, {biased});
    acc = biased;
  }
  const std::string acc_float = unique->Make(base + "_int32_float");
  NodeProto cast =
      graph::MakeNode("Cast", unique->Make(base + "_Cast"), {acc}, {acc_float});
  graph::SetIntAttribute(&cast, "to", TensorProto::FLOAT);
  *out->Add() = std::move(cast);
  const bool bias = !c.float_bias.empty();
  const std::string scaled = bias ? unique->Make(base + "_rescaled") : y;
  *out->Add() = graph::MakeNode("Mul", unique->Make(base + "_rescale"),
                                {acc_float, c.scale}, {scaled});
  if (!bias) return;
  *out->Add() = graph::MakeNode("Add", unique->Make(base + "_bias_Add"),
                                {scaled, c.float_bias}, {y});
}

class Lowering {
 public:
  Lowering(const std::vector<WeightPlan>& weights,
           const std::vector<WeightNames>& names, int64_t ir_version,
           graph::UniqueNames* unique, onnx::GraphProto* graph)
      : weights_(weights),
        names_(names),
        also_input_(ir_version < 4),
        unique_(unique),
        graph_(graph) {}

  absl::Status Run(
      const std::vector<std::vector<numerics::QuantParams>>& params) {
    if (params.size() != weights_.size()) {
      return absl::InternalError("one parameter set per planned weight");
    }
    absl::flat_hash_map<int, int> constant_weight;  // node -> plan index
    for (int k = 0; k < static_cast<int>(weights_.size()); ++k) {
      const WeightPlan& w = weights_[k];
      QUANTD_ASSIGN_OR_RETURN(Layout layout, WeightLayout(*graph_, w));
      QUANTD_RETURN_IF_ERROR(
          RelayoutWeight(w, names_[k], params[k], layout, also_input_, graph_));
      if (w.constant_node >= 0) constant_weight[w.constant_node] = k;
      for (int n : w.consumers) consumer_weight_[n] = k;
    }

    google::protobuf::RepeatedPtrField<NodeProto> old;
    old.Swap(graph_->mutable_node());
    nodes_ = graph_->mutable_node();
    nodes_->Reserve(old.size() + 6 * consumer_weight_.size());
    for (int i = 0; i < old.size(); ++i) {
      if (constant_weight.contains(i)) continue;  // Now an initializer.
      auto c = consumer_weight_.find(i);
      if (c == consumer_weight_.end()) {
        *nodes_->Add() = std::move(*old.Mutable(i));
        continue;
      }
      Lower(old.Get(i), c->second);
    }
    RemoveQuantizedInitializers(weights_, graph_);
    return absl::OkStatus();
  }

 private:
  struct QuantizedActivation {
    std::string q, scale, zero_point;
  };

  // DynamicQuantizeLinear of `x`, emitted before its first quantized reader
  // (which follows x's producer, so the order stays topological).
  const QuantizedActivation& Activation(const std::string& x) {
    auto it = activations_.find(x);
    if (it != activations_.end()) return it->second;
    QuantizedActivation a{unique_->Make(x + "_quantized"),
                          unique_->Make(x + "_scale"),
                          unique_->Make(x + "_zero_point")};
    *nodes_->Add() = graph::MakeNode(
        "DynamicQuantizeLinear", unique_->Make(x + "_DynamicQuantizeLinear"),
        {x}, {a.q, a.scale, a.zero_point});
    return activations_.emplace(x, std::move(a)).first->second;
  }

  // Reshape's shape [-1, 1, ...] of length `rank`, one initializer per rank.
  const std::string& BiasShape(size_t rank) {
    auto it = bias_shapes_.find(rank);
    if (it != bias_shapes_.end()) return it->second;
    std::vector<int64_t> shape(rank, 1);
    shape[0] = -1;
    const std::string name = unique_->Make("xla_bias_shape");
    graph::AddInitializer(MakeInt64Tensor(name, shape), also_input_, graph_);
    return bias_shapes_.emplace(rank, name).first->second;
  }

  void Lower(const NodeProto& node, int k) {
    const WeightPlan& w = weights_[k];
    const WeightNames& wn = names_[k];
    const std::string base = node.name().empty() ? node.output(0) : node.name();
    const QuantizedActivation a = Activation(node.input(0));

    IntegerCompute c;
    c.x_q = a.q;
    c.x_zero_point = a.zero_point;
    c.w_q = wn.values;
    c.w_zero_point = wn.zero_point;
    c.scale = unique_->Make(base + "_output_scale");
    *nodes_->Add() = graph::MakeNode("Mul", unique_->Make(base + "_scale_Mul"),
                                     {a.scale, wn.scale}, {c.scale});
    if (HasInput(node, 2)) {
      c.float_bias = node.input(2);
      if (node.op_type() == "Conv") {
        // Conv's B is [M]; the output is [N, M, spatial...].
        c.float_bias = unique_->Make(node.input(2) + "_channels");
        *nodes_->Add() = graph::MakeNode(
            "Reshape", unique_->Make(base + "_bias_Reshape"),
            {node.input(2), BiasShape(w.dims.size() - 1)}, {c.float_bias});
      }
    }
    c.doc = absl::StrCat("op_set XLA lowering of ", node.op_type(),
                         " reading weight '", w.tensor, "'");
    EmitIntegerCompute(node, c, unique_, nodes_);
  }

  const std::vector<WeightPlan>& weights_;
  const std::vector<WeightNames>& names_;
  const bool also_input_;
  graph::UniqueNames* unique_;
  onnx::GraphProto* graph_;
  google::protobuf::RepeatedPtrField<NodeProto>* nodes_ = nullptr;
  absl::flat_hash_map<int, int> consumer_weight_;  // node -> plan index
  absl::flat_hash_map<std::string, QuantizedActivation> activations_;
  absl::flat_hash_map<size_t, std::string> bias_shapes_;
};

// Op set XLA for STATIC_RANGE: the QDQ graph's quantized Conv / Gemm /
// MatMul become integer ops reading the quantized tensors directly (see the
// header); the QuantizeLinear of each activation stays, with its calibrated
// scale and zero point, and DequantizeLinears nobody reads any more go.
class QdqToXla {
 public:
  QdqToXla(int64_t ir_version, onnx::GraphProto* graph)
      : also_input_(ir_version < 4), graph_(graph), unique_(*graph) {}

  absl::StatusOr<QdqLoweringStats> Run() {
    QdqLoweringStats stats;
    std::vector<std::unique_ptr<Planned>> plan(graph_->node_size());
    {
      const graph::GraphIndex index(*graph_);
      for (int i = 0; i < graph_->node_size(); ++i) {
        if (!ReadsDequantized(*graph_, index, i)) continue;
        absl::StatusOr<QdqCompute> m = MatchQdqCompute(*graph_, index, i);
        absl::StatusOr<Planned> p =
            m.ok() ? Prepare(*m) : absl::StatusOr<Planned>(m.status());
        if (!p.ok()) {
          if (!absl::IsFailedPrecondition(p.status())) return p.status();
          stats.kept.emplace_back(p.status().message());
          continue;
        }
        plan[i] = std::make_unique<Planned>(std::move(*p));
      }
    }
    google::protobuf::RepeatedPtrField<NodeProto> old;
    old.Swap(graph_->mutable_node());
    auto* nodes = graph_->mutable_node();
    for (int i = 0; i < old.size(); ++i) {
      if (plan[i] == nullptr) {
        *nodes->Add() = std::move(*old.Mutable(i));
        continue;
      }
      for (NodeProto& pre : plan[i]->pre) *nodes->Add() = std::move(pre);
      EmitIntegerCompute(old.Get(i), plan[i]->compute, &unique_, nodes);
      ++stats.lowered_nodes;
    }
    RemoveDeadQdq(also_input_, graph_, &stats);
    return stats;
  }

 private:
  struct Planned {
    std::vector<NodeProto> pre;  // Emitted before the integer op.
    IntegerCompute compute;
  };
  struct StoredWeight {
    std::string values, zero_point;
  };

  static absl::Status Keep(const NodeProto& node, const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat(DescribeNode(node), " stays QDQ: ", why));
  }

  std::string AddInit(TensorProto t) {
    const std::string name = t.name();
    graph::AddInitializer(std::move(t), also_input_, graph_);
    return name;
  }

  const TensorProto* Init(const std::string& name) const {
    return graph::FindInitializer(*graph_, name);
  }

  // The weight of `m` stored for its integer op (one copy per layout).
  absl::StatusOr<StoredWeight> StoreWeight(const NodeProto& node,
                                           const DequantizedInput& w,
                                           Layout layout) {
    const std::string key =
        absl::StrCat(w.values, "/", static_cast<int>(layout));
    auto it = stored_.find(key);
    if (it != stored_.end()) return it->second;
    const TensorProto* t = Init(w.values);
    absl::StatusOr<std::vector<int32_t>> q =
        t != nullptr ? ReadIntegerTensor(*t)
                     : absl::StatusOr<std::vector<int32_t>>(
                           absl::InternalError("weight initializer missing"));
    if (!q.ok()) return Keep(node, std::string(q.status().message()));
    std::vector<int64_t> dims = w.dims;
    const int64_t rank = static_cast<int64_t>(dims.size());
    std::string bytes(q->size(), '\0');
    std::string zp;
    std::vector<int64_t> zp_dims;
    TensorProto::DataType type = TensorProto::INT8;
    if (layout == Layout::kConv) {
      if (!w.UniformZeroPoint()) {
        return Keep(node,
                    "its weight has a zero point per channel, which "
                    "ConvInteger cannot take (per-tensor weight zero point "
                    "only); use symmetric weights");
      }
      if (w.axis > 0)
        return Keep(node, "weight quantized on an axis other than 0");
      // int8 q -> uint8 q + 128, zero point + 128: the same real values, in
      // the only form ONNX Runtime's CPU ConvInteger takes.
      for (size_t i = 0; i < q->size(); ++i) {
        bytes[i] = static_cast<char>(static_cast<uint8_t>((*q)[i] + 128));
      }
      zp.push_back(
          static_cast<char>(static_cast<uint8_t>(w.zero_points[0] + 128)));
      type = TensorProto::UINT8;
    } else {
      if (layout == Layout::kMatMulTransposed) {
        if (rank != 2 || (w.axis >= 0 && w.axis != 0)) {
          return Keep(node, "transB weight is not 2-D per output row");
        }
        const int64_t n = dims[0], k = dims[1];
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c = 0; c < k; ++c) {
            bytes[c * n + r] = static_cast<char>((*q)[r * k + c]);
          }
        }
        dims = {k, n};
      } else {
        if (w.axis >= 0 && w.axis != rank - 1) {
          return Keep(node, "MatMul weight is not quantized per column");
        }
        for (size_t i = 0; i < q->size(); ++i) {
          bytes[i] = static_cast<char>((*q)[i]);
        }
      }
      if (w.UniformZeroPoint()) {
        zp.push_back(static_cast<char>(w.zero_points[0]));
      } else if (dims.size() == 2) {
        for (int32_t z : w.zero_points) zp.push_back(static_cast<char>(z));
        zp_dims = {static_cast<int64_t>(w.zero_points.size())};
      } else {
        return Keep(node,
                    "its weight has a zero point per column and rank > 2; "
                    "MatMulInteger takes a per-column zero point only for a "
                    "2-D weight");
      }
    }
    StoredWeight s;
    s.values = AddInit(graph::MakeByteTensor(unique_.Make(w.values + "_xla"),
                                             type, dims, std::move(bytes)));
    s.zero_point = AddInit(graph::MakeByteTensor(
        unique_.Make(w.zero_point + "_xla"), type, zp_dims, std::move(zp)));
    stored_.emplace(key, s);
    return s;
  }

  absl::StatusOr<Planned> Prepare(const QdqCompute& m) {
    const NodeProto& node = graph_->node(m.node);
    const bool conv = node.op_type() == "Conv";
    const std::string base = node.name().empty() ? node.output(0) : node.name();
    if (m.x.type != TensorProto::UINT8 || m.x.scales.size() != 1) {
      return Keep(node,
                  "input 0 is not a per-tensor UINT8 activation (ONNX "
                  "Runtime's ConvInteger / MatMulInteger take uint8 "
                  "activations; leave activation_params.symmetric unset)");
    }
    absl::StatusOr<Layout> layout = LayoutFor(node);
    if (!layout.ok()) return Keep(node, std::string(layout.status().message()));
    Planned p;
    IntegerCompute& c = p.compute;
    c.x_q = m.x.values;
    c.x_zero_point = m.x.zero_point;
    c.doc =
        absl::StrCat("op_set XLA lowering (STATIC_RANGE) of ", node.op_type());
    if (m.w.constant) {
      if (m.w.type != TensorProto::INT8) {
        return Keep(node,
                    absl::StrCat("weight is stored as ",
                                 ElementTypeName(m.w.type), ", not INT8"));
      }
      QUANTD_ASSIGN_OR_RETURN(StoredWeight s, StoreWeight(node, m.w, *layout));
      c.w_q = s.values;
      c.w_zero_point = s.zero_point;
    } else {
      // MatMul of two activations: uint8 x uint8.
      if (node.op_type() != "MatMul" || m.w.type != TensorProto::UINT8 ||
          m.w.scales.size() != 1) {
        return Keep(node,
                    "input 1 is neither a constant INT8 weight nor a "
                    "per-tensor UINT8 activation of a MatMul");
      }
      c.w_q = m.w.values;
      c.w_zero_point = m.w.zero_point;
    }
    // The output's scale, folded offline: x_scale * w_scale per channel,
    // computed in float as the bias scale is.
    std::vector<float> scale;
    for (float ws : m.w.scales) scale.push_back(m.x.scales[0] * ws);
    std::vector<int64_t> channel_dims;  // Broadcast over the output.
    if (scale.size() > 1) {
      channel_dims.push_back(static_cast<int64_t>(scale.size()));
      if (conv) channel_dims.resize(m.w.dims.size() - 1, 1);
    }
    c.scale = AddInit(graph::MakeFloatTensor(
        unique_.Make(base + "_output_scale"), channel_dims, scale));
    if (!m.has_bias) return p;
    // An int32 bias with exactly the accumulator's scale adds to it before
    // the Cast; any other bias is added in float after the rescale.
    bool same_scale = m.int32_bias;
    if (same_scale) {
      for (size_t i = 0; i < m.bias.scales.size() && same_scale; ++i) {
        same_scale = m.bias.scales[i] == scale[scale.size() == 1 ? 0 : i];
      }
      same_scale &=
          m.bias.scales.size() == scale.size() || m.bias.scales.size() == 1;
    }
    const int64_t channels =
        m.w.dims.empty()
            ? 0
            : (conv ? m.w.dims[0]
                    : (*layout == Layout::kMatMulTransposed ? m.w.dims[0]
                                                            : m.w.dims.back()));
    std::vector<int64_t> bias_dims = {channels};
    if (conv) bias_dims.resize(m.w.dims.size() - 1, 1);
    if (same_scale) {
      if (!conv) {
        c.int32_bias = m.bias.values;
        return p;
      }
      const TensorProto* b = Init(m.bias.values);
      absl::StatusOr<std::vector<int32_t>> v =
          b != nullptr ? ReadIntegerTensor(*b)
                       : absl::StatusOr<std::vector<int32_t>>(
                             absl::InternalError("bias missing"));
      if (v.ok() && static_cast<int64_t>(v->size()) == channels) {
        c.int32_bias = AddInit(graph::MakeInt32Tensor(
            unique_.Make(m.bias.values + "_channels"), bias_dims, *v));
        return p;
      }
    }
    c.float_bias = m.bias_tensor;
    if (conv) {
      // Conv's B is [M]; the output is [N, M, spatial...].
      const std::string shape = AddInit(
          MakeInt64Tensor(unique_.Make(base + "_bias_shape"), bias_dims));
      c.float_bias = unique_.Make(m.bias_tensor + "_channels");
      p.pre.push_back(graph::MakeNode("Reshape",
                                      unique_.Make(base + "_bias_Reshape"),
                                      {m.bias_tensor, shape}, {c.float_bias}));
    }
    return p;
  }

  const bool also_input_;
  onnx::GraphProto* graph_;
  graph::UniqueNames unique_;
  absl::flat_hash_map<std::string, StoredWeight> stored_;
};

}  // namespace

absl::Status CheckXlaLowerable(const onnx::GraphProto& graph,
                               const std::vector<WeightPlan>& weights,
                               const WeightPassOptions& options) {
  for (const WeightPlan& w : weights) {
    QUANTD_ASSIGN_OR_RETURN(Layout layout, WeightLayout(graph, w));
    if (options.weights.spec.symmetric || w.axis < 0) continue;
    const NodeProto& node = graph.node(w.consumers.front());
    if (layout == Layout::kConv) {
      return absl::UnimplementedError(absl::StrCat(
          Describe(node),
          ": asymmetric per-channel weights need a zero point "
          "per output channel, which ConvInteger cannot take (per-tensor "
          "weight zero point only); use symmetric or per-tensor weights for "
          "op_set XLA"));
    }
    if (w.dims.size() != 2) {
      return absl::UnimplementedError(absl::StrCat(
          Describe(node), ": asymmetric per-channel weights of rank ",
          w.dims.size(),
          " need a zero point per column, which MatMulInteger takes only for "
          "a 2-D weight; use symmetric or per-tensor weights for op_set XLA"));
    }
  }
  return absl::OkStatus();
}

absl::Status LowerToXla(
    const std::vector<WeightPlan>& weights,
    const std::vector<WeightNames>& names,
    const std::vector<std::vector<numerics::QuantParams>>& params,
    int64_t ir_version, graph::UniqueNames* unique, onnx::GraphProto* graph) {
  return Lowering(weights, names, ir_version, unique, graph).Run(params);
}

absl::StatusOr<QdqLoweringStats> LowerQdqToXla(int64_t ir_version,
                                               onnx::GraphProto* graph) {
  return QdqToXla(ir_version, graph).Run();
}

}  // namespace quantd::passes
