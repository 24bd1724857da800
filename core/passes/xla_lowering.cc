#include "core/passes/xla_lowering.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
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

const onnx::AttributeProto* Attr(const NodeProto& node, const char* name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t IntAttr(const NodeProto& node, const char* name, int64_t dflt) {
  const onnx::AttributeProto* a = Attr(node, name);
  return a != nullptr ? a->i() : dflt;
}

float FloatAttr(const NodeProto& node, const char* name, float dflt) {
  const onnx::AttributeProto* a = Attr(node, name);
  return a != nullptr ? a->f() : dflt;
}

bool HasInput(const NodeProto& node, int i) {
  return node.input_size() > i && !node.input(i).empty();
}

// The layout `node` needs, or UNIMPLEMENTED naming it and why.
absl::StatusOr<Layout> LayoutFor(const NodeProto& node) {
  if (node.op_type() == "Conv") return Layout::kConv;
  if (node.op_type() == "MatMul") return Layout::kMatMul;
  // Gemm: Y = alpha * A' * B' + beta * C.
  const float alpha = FloatAttr(node, "alpha", 1.0f);
  const float beta = FloatAttr(node, "beta", 1.0f);
  const int64_t trans_a = IntAttr(node, "transA", 0);
  if (alpha != 1.0f || (beta != 1.0f && HasInput(node, 2)) || trans_a != 0) {
    return absl::UnimplementedError(absl::StrCat(
        Describe(node), " has alpha=", alpha, ", beta=", beta,
        ", transA=", trans_a,
        "; op_set XLA lowers a Gemm to MatMulInteger + rescale + Add only "
        "with alpha = beta = 1 and transA = 0 (set the node or Gemm to "
        "PRECISION_FULL, or use op_set TF)"));
  }
  return IntAttr(node, "transB", 0) != 0 ? Layout::kMatMulTransposed
                                         : Layout::kMatMul;
}

absl::StatusOr<Layout> WeightLayout(const onnx::GraphProto& graph,
                                    const WeightPlan& w) {
  absl::StatusOr<Layout> first;
  for (int n : w.consumers) {
    absl::StatusOr<Layout> l = LayoutFor(graph.node(n));
    if (!l.ok()) return l.status();
    if (n == w.consumers.front()) {
      first = *l;
    } else if (*l != *first) {
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
      absl::StatusOr<Layout> layout = WeightLayout(*graph_, w);
      if (!layout.ok()) return layout.status();
      absl::Status s =
          RelayoutWeight(w, names_[k], params[k], *layout, also_input_, graph_);
      if (!s.ok()) return s;
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
    const bool conv = node.op_type() == "Conv";
    const std::string base = node.name().empty() ? node.output(0) : node.name();
    const std::string& y = node.output(0);
    const QuantizedActivation a = Activation(node.input(0));

    const std::string scale = unique_->Make(base + "_output_scale");
    *nodes_->Add() = graph::MakeNode("Mul", unique_->Make(base + "_scale_Mul"),
                                     {a.scale, wn.scale}, {scale});
    const std::string acc = unique_->Make(base + "_int32");
    NodeProto op = graph::MakeNode(
        conv ? "ConvInteger" : "MatMulInteger",
        node.name().empty() ? unique_->Make(base + "_Integer") : node.name(),
        {a.q, wn.values, a.zero_point, wn.zero_point}, {acc});
    if (conv) {
      // ConvInteger has Conv's attributes (auto_pad, dilations, group,
      // kernel_shape, pads, strides).
      for (const auto& attr : node.attribute()) *op.add_attribute() = attr;
    }
    op.set_doc_string(absl::StrCat("op_set XLA lowering of ", node.op_type(),
                                   " reading weight '", w.tensor, "'"));
    *nodes_->Add() = std::move(op);
    const std::string acc_float = unique_->Make(base + "_int32_float");
    NodeProto cast = graph::MakeNode("Cast", unique_->Make(base + "_Cast"),
                                     {acc}, {acc_float});
    graph::SetIntAttribute(&cast, "to", TensorProto::FLOAT);
    *nodes_->Add() = std::move(cast);

    const bool bias = HasInput(node, 2);
    const std::string scaled = bias ? unique_->Make(base + "_rescaled") : y;
    *nodes_->Add() = graph::MakeNode("Mul", unique_->Make(base + "_rescale"),
                                     {acc_float, scale}, {scaled});
    if (!bias) return;
    std::string b = node.input(2);
    if (conv) {
      // Conv's B is [M]; the output is [N, M, spatial...].
      const std::string reshaped = unique_->Make(b + "_channels");
      *nodes_->Add() =
          graph::MakeNode("Reshape", unique_->Make(base + "_bias_Reshape"),
                          {b, BiasShape(w.dims.size() - 1)}, {reshaped});
      b = reshaped;
    }
    *nodes_->Add() = graph::MakeNode("Add", unique_->Make(base + "_bias_Add"),
                                     {scaled, b}, {y});
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

}  // namespace

absl::Status CheckXlaLowerable(const onnx::GraphProto& graph,
                               const std::vector<WeightPlan>& weights,
                               const DynamicRangeOptions& options) {
  for (const WeightPlan& w : weights) {
    absl::StatusOr<Layout> layout = WeightLayout(graph, w);
    if (!layout.ok()) return layout.status();
    if (options.weights.spec.symmetric || w.axis < 0) continue;
    const NodeProto& node = graph.node(w.consumers.front());
    if (*layout == Layout::kConv) {
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

}  // namespace quantd::passes
