#include "core/passes/uniform_quantized_lowering.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/graph_index.h"
#include "core/graph/tensor_util.h"
#include "core/graph/unique_names.h"

namespace quantd::passes {
namespace {

using onnx::NodeProto;
using onnx::TensorProto;

absl::Status Keep(const NodeProto& node, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat(DescribeNode(node), " stays QDQ: ", why));
}

// The QuantizeLinear of a node's output: what the QLinear op writes.
struct OutputPoint {
  int quantize_node = -1;
  int relu_node = -1;  // Folded into the QLinear op's saturation.
  std::string q, scale, zero_point;
};

// A per-tensor UINT8 quantization parameter pair of initializers.
bool ScalarUint8(const onnx::GraphProto& graph, const graph::GraphIndex& index,
                 const NodeProto& q, int32_t* zero_point, float* scale) {
  if (q.input_size() < 3) return false;
  const int si = index.Initializer(q.input(1));
  const int zi = index.Initializer(q.input(2));
  if (si < 0 || zi < 0) return false;
  const TensorProto& zt = graph.initializer(zi);
  if (zt.data_type() != TensorProto::UINT8) return false;
  absl::StatusOr<std::vector<float>> s =
      graph::ReadFloatTensor(graph.initializer(si));
  absl::StatusOr<std::vector<int32_t>> z = ReadIntegerTensor(zt);
  if (!s.ok() || !z.ok() || s->size() != 1 || z->size() != 1) return false;
  *zero_point = (*z)[0];
  *scale = (*s)[0];
  return true;
}

bool IsDataMovement(const NodeProto& node) {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"};
  return (node.domain().empty() || node.domain() == "ai.onnx") &&
         ops->contains(node.op_type()) && node.output_size() == 1;
}

class QdqToUniformQuantized {
 public:
  QdqToUniformQuantized(int64_t ir_version, onnx::GraphProto* graph)
      : also_input_(ir_version < 4), graph_(graph), unique_(*graph) {}

  absl::StatusOr<QdqLoweringStats> Run() {
    QdqLoweringStats stats;
    std::vector<std::unique_ptr<std::vector<NodeProto>>> plan(
        graph_->node_size());
    absl::flat_hash_set<int> dropped;
    {
      const graph::GraphIndex index(*graph_);
      for (int i = 0; i < graph_->node_size(); ++i) {
        if (!ReadsDequantized(*graph_, index, i)) continue;
        absl::StatusOr<QdqCompute> m = MatchQdqCompute(*graph_, index, i);
        absl::Status s = m.status();
        OutputPoint out;
        if (s.ok()) s = FindOutputPoint(index, graph_->node(i), &out);
        std::vector<NodeProto> nodes;
        if (s.ok()) s = Prepare(*m, out, &nodes);
        if (!s.ok()) {
          if (!absl::IsFailedPrecondition(s)) return s;
          stats.kept.emplace_back(s.message());
          continue;
        }
        plan[i] = std::make_unique<std::vector<NodeProto>>(std::move(nodes));
        dropped.insert(out.quantize_node);
        if (out.relu_node >= 0) dropped.insert(out.relu_node);
      }
    }
    google::protobuf::RepeatedPtrField<NodeProto> old;
    old.Swap(graph_->mutable_node());
    auto* nodes = graph_->mutable_node();
    for (int i = 0; i < old.size(); ++i) {
      if (dropped.contains(i)) continue;
      if (plan[i] == nullptr) {
        *nodes->Add() = std::move(*old.Mutable(i));
        continue;
      }
      for (NodeProto& n : *plan[i]) *nodes->Add() = std::move(n);
      ++stats.lowered_nodes;
    }
    FoldDataMovement();
    RemoveDeadQdq(also_input_, graph_, &stats);
    return stats;
  }

 private:
  std::string AddInit(TensorProto t) {
    const std::string name = t.name();
    graph::AddInitializer(std::move(t), also_input_, graph_);
    return name;
  }

  const TensorProto* Init(const std::string& name) const {
    return graph::FindInitializer(*graph_, name);
  }

  absl::Status FindOutputPoint(const graph::GraphIndex& index,
                               const NodeProto& node, OutputPoint* out) const {
    const std::string& y = node.output(0);
    const char* need =
        "; a QLinear op needs a static output scale, which only the "
        "QuantizeLinear of the output's quantization point gives";
    if (index.IsGraphOutput(y) || index.Uses(y).size() != 1) {
      return Keep(node, absl::StrCat("its output '", y,
                                     "' is a graph output or has several "
                                     "readers",
                                     need));
    }
    int r = index.Uses(y)[0].node;
    const NodeProto* reader = &graph_->node(r);
    if (reader->op_type() == "Relu") {
      const std::string& ry = reader->output(0);
      if (index.IsGraphOutput(ry) || index.Uses(ry).size() != 1) {
        return Keep(node, absl::StrCat("its Relu's output '", ry,
                                       "' is a graph output or has several "
                                       "readers",
                                       need));
      }
      out->relu_node = r;
      r = index.Uses(ry)[0].node;
      reader = &graph_->node(r);
    }
    int32_t zp = 0;
    float scale = 0.0f;
    if (reader->op_type() != "QuantizeLinear" ||
        !ScalarUint8(*graph_, index, *reader, &zp, &scale)) {
      return Keep(node,
                  absl::StrCat("its output is read by ", DescribeNode(*reader),
                               ", not a per-tensor UINT8 "
                               "QuantizeLinear",
                               need));
    }
    if (out->relu_node >= 0 && zp != 0) {
      return Keep(node, absl::StrCat("the QuantizeLinear after its Relu has "
                                     "zero point ",
                                     zp,
                                     ", so saturation at the zero point "
                                     "would not implement the Relu"));
    }
    out->quantize_node = r;
    out->q = reader->output(0);
    out->scale = reader->input(1);
    out->zero_point = reader->input(2);
    return absl::OkStatus();
  }

  // A copy of weight `w` (INT8, rank 2) as `dims`, transposed from [R, C]
  // to [C, R] first when `transpose`. One copy per (weight, form).
  absl::StatusOr<std::string> Relayout(const NodeProto& node,
                                       const DequantizedInput& w,
                                       bool transpose,
                                       std::vector<int64_t> dims) {
    const std::string key =
        absl::StrCat(w.values, transpose ? "/t/" : "/", dims.size());
    auto it = stored_.find(key);
    if (it != stored_.end()) return it->second;
    const TensorProto* t = Init(w.values);
    absl::StatusOr<std::vector<int32_t>> q =
        t != nullptr ? ReadIntegerTensor(*t)
                     : absl::StatusOr<std::vector<int32_t>>(
                           absl::InternalError("weight missing"));
    if (!q.ok() || w.dims.size() != 2) {
      return Keep(node, "its weight is not a readable 2-D INT8 initializer");
    }
    std::string bytes(q->size(), '\0');
    const int64_t rows = w.dims[0], cols = w.dims[1];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t to = transpose ? c * rows + r : r * cols + c;
        bytes[to] = static_cast<char>((*q)[r * cols + c]);
      }
    }
    const std::string name = AddInit(graph::MakeByteTensor(
        unique_.Make(w.values + (dims.size() == 4 ? "_1x1" : "_kn")),
        TensorProto::INT8, dims, std::move(bytes)));
    stored_.emplace(key, name);
    return name;
  }

  const std::string& Int64Shape(const std::vector<int64_t>& shape) {
    const std::string key = absl::StrCat(shape.size());
    auto it = shapes_.find(key);
    if (it != shapes_.end()) return it->second;
    TensorProto t;
    t.set_name(unique_.Make("qlinear_shape"));
    t.set_data_type(TensorProto::INT64);
    t.add_dims(static_cast<int64_t>(shape.size()));
    for (int64_t v : shape) t.add_int64_data(v);
    return shapes_.emplace(key, AddInit(std::move(t))).first->second;
  }

  absl::Status Prepare(const QdqCompute& m, const OutputPoint& out,
                       std::vector<NodeProto>* nodes) {
    const NodeProto& node = graph_->node(m.node);
    const std::string& op = node.op_type();
    const std::string base = node.name().empty() ? node.output(0) : node.name();
    if (m.x.type != TensorProto::UINT8 || m.x.scales.size() != 1) {
      return Keep(node,
                  "input 0 is not a per-tensor UINT8 activation (leave "
                  "activation_params.symmetric unset)");
    }
    const bool weight = m.w.constant;
    if (weight && m.w.type != TensorProto::INT8) {
      return Keep(node, absl::StrCat("its weight is stored as ",
                                     ElementTypeName(m.w.type),
                                     "; QLinearConv / QLinearMatMul take "
                                     "8-bit weights"));
    }
    if (!weight && (op != "MatMul" || m.w.type != TensorProto::UINT8 ||
                    m.w.scales.size() != 1)) {
      return Keep(node,
                  "input 1 is neither a constant INT8 weight nor a "
                  "per-tensor UINT8 activation of a MatMul");
    }
    // The bias of a QLinearConv is int32 with scale x_scale * w_scale and
    // zero point 0: exactly the pass's quantized bias.
    auto check_bias = [&]() -> absl::Status {
      if (!m.has_bias) return absl::OkStatus();
      bool ok = m.int32_bias && (m.bias.scales.size() == m.w.scales.size() ||
                                 m.bias.scales.size() == 1);
      for (size_t i = 0; ok && i < m.bias.scales.size(); ++i) {
        ok = m.bias.scales[i] ==
             m.x.scales[0] * m.w.scales[m.w.scales.size() == 1 ? 0 : i];
      }
      if (ok) return absl::OkStatus();
      return Keep(node,
                  "its bias is not INT32 with scale input scale x weight "
                  "scale (it stayed float), which QLinearConv requires");
    };
    auto conv_inputs = [&](const std::string& x, const std::string& w) {
      std::vector<std::string> in = {x,         m.x.scale,     m.x.zero_point,
                                     w,         m.w.scale,     m.w.zero_point,
                                     out.scale, out.zero_point};
      if (m.has_bias) in.push_back(m.bias.values);
      return in;
    };
    const std::string doc =
        absl::StrCat("op_set UNIFORM_QUANTIZED lowering of ", op,
                     out.relu_node >= 0 ? " + Relu (saturation at zero "
                                          "point 0)"
                                        : "");
    if (op == "Conv") {
      if (!m.w.UniformZeroPoint() || m.w.axis > 0) {
        return Keep(node,
                    "its weight's zero points differ per channel (ONNX "
                    "Runtime's QLinearConv needs one weight zero point); use "
                    "symmetric weights");
      }
      QUANTD_RETURN_IF_ERROR(check_bias());
      NodeProto q = graph::MakeNode(
          "QLinearConv", node.name().empty() ? unique_.Make(base) : node.name(),
          conv_inputs(m.x.values, m.w.values), {out.q});
      for (const auto& a : node.attribute()) *q.add_attribute() = a;
      q.set_doc_string(doc);
      nodes->push_back(std::move(q));
      return absl::OkStatus();
    }
    bool trans_b = false;
    if (op == "Gemm") {
      const float alpha = graph::FloatAttribute(node, "alpha", 1.0f);
      const float beta = graph::FloatAttribute(node, "beta", 1.0f);
      if (alpha != 1.0f || (m.has_bias && beta != 1.0f) ||
          graph::IntAttribute(node, "transA", 0) != 0) {
        return Keep(node,
                    absl::StrCat("alpha=", alpha, ", beta=", beta, ", transA=",
                                 graph::IntAttribute(node, "transA", 0),
                                 "; only alpha = beta = 1, transA = 0 "
                                 "is lowered"));
      }
      trans_b = graph::IntAttribute(node, "transB", 0) != 0;
      if (!weight || m.w.dims.size() != 2) {
        return Keep(node, "its B is not a constant 2-D weight");
      }
      // Per output channel: axis 0 of [N, K] (transB) or 1 of [K, N].
      if (m.w.axis >= 0 && m.w.axis != (trans_b ? 0 : 1)) {
        return Keep(node, "its weight is not quantized per output column");
      }
    }
    if (op == "Gemm" && m.has_bias) {
      QUANTD_RETURN_IF_ERROR(check_bias());
      if (!m.w.UniformZeroPoint()) {
        return Keep(node,
                    "its weight's zero points differ per channel (ONNX "
                    "Runtime's QLinearConv needs one weight zero point)");
      }
      const int64_t n = m.w.dims[trans_b ? 0 : 1];
      const int64_t k = m.w.dims[trans_b ? 1 : 0];
      QUANTD_ASSIGN_OR_RETURN(std::string w4,
                              Relayout(node, m.w, !trans_b, {n, k, 1, 1}));
      const std::string x4 = unique_.Make(node.input(0) + "_nchw");
      const std::string y4 = unique_.Make(base + "_nchw");
      nodes->push_back(
          graph::MakeNode("Reshape", unique_.Make(base + "_to_1x1"),
                          {m.x.values, Int64Shape({0, -1, 1, 1})}, {x4}));
      NodeProto q = graph::MakeNode(
          "QLinearConv", node.name().empty() ? unique_.Make(base) : node.name(),
          conv_inputs(x4, w4), {y4});
      q.set_doc_string(absl::StrCat(doc,
                                    ", as a 1x1 QLinearConv for its "
                                    "int32 bias"));
      nodes->push_back(std::move(q));
      nodes->push_back(graph::MakeNode("Reshape",
                                       unique_.Make(base + "_from_1x1"),
                                       {y4, Int64Shape({0, -1})}, {out.q}));
      return absl::OkStatus();
    }
    // MatMul, or Gemm without C: QLinearMatMul with B [K, N] and per-column
    // scales and zero points.
    std::string b = m.w.values;
    if (weight) {
      const int64_t rank = static_cast<int64_t>(m.w.dims.size());
      if (op == "MatMul" && m.w.axis >= 0 && m.w.axis != rank - 1) {
        return Keep(node, "its weight is not quantized per column");
      }
      if (m.w.axis >= 0 && rank != 2) {
        return Keep(node,
                    "its weight has rank > 2 and per-column scales, which "
                    "QLinearMatMul takes only for a 2-D b");
      }
      if (trans_b) {
        QUANTD_ASSIGN_OR_RETURN(
            b, Relayout(node, m.w, true, {m.w.dims[1], m.w.dims[0]}));
      }
    }
    NodeProto q = graph::MakeNode(
        "QLinearMatMul", node.name().empty() ? unique_.Make(base) : node.name(),
        {m.x.values, m.x.scale, m.x.zero_point, b, m.w.scale, m.w.zero_point,
         out.scale, out.zero_point},
        {out.q});
    q.set_doc_string(doc);
    nodes->push_back(std::move(q));
    return absl::OkStatus();
  }

  // DequantizeLinear -> data movement -> QuantizeLinear with the same
  // parameters: the op reads the uint8 tensor and writes the Quantize's
  // output (the DequantizeLinear goes later if nobody else reads it).
  void FoldDataMovement() {
    absl::flat_hash_set<int> dropped;
    {
      const graph::GraphIndex index(*graph_);
      for (int i = 0; i < graph_->node_size(); ++i) {
        NodeProto* n = graph_->mutable_node(i);
        if (!IsDataMovement(*n) || n->input_size() < 1) continue;
        const int d = index.Producer(n->input(0));
        const std::string& y = n->output(0);
        if (d < 0 || graph_->node(d).op_type() != "DequantizeLinear" ||
            index.IsGraphOutput(y) || index.Uses(y).size() != 1 ||
            index.Uses(y)[0].slot != 0) {
          continue;
        }
        const int q = index.Uses(y)[0].node;
        const NodeProto& qn = graph_->node(q);
        const NodeProto& dn = graph_->node(d);
        int32_t dz = 0, qz = 0;
        float ds = 0.0f, qs = 0.0f;
        if (qn.op_type() != "QuantizeLinear" ||
            !ScalarUint8(*graph_, index, dn, &dz, &ds) ||
            !ScalarUint8(*graph_, index, qn, &qz, &qs) || dz != qz ||
            ds != qs) {
          continue;
        }
        n->set_input(0, dn.input(0));
        n->set_output(0, qn.output(0));
        dropped.insert(q);
      }
    }
    google::protobuf::RepeatedPtrField<NodeProto> old;
    old.Swap(graph_->mutable_node());
    for (int i = 0; i < old.size(); ++i) {
      if (!dropped.contains(i))
        *graph_->add_node() = std::move(*old.Mutable(i));
    }
  }

  const bool also_input_;
  onnx::GraphProto* graph_;
  graph::UniqueNames unique_;
  absl::flat_hash_map<std::string, std::string> stored_;
  absl::flat_hash_map<std::string, std::string> shapes_;
};

}  // namespace

absl::StatusOr<QdqLoweringStats> LowerQdqToUniformQuantized(
    int64_t ir_version, onnx::GraphProto* graph) {
  return QdqToUniformQuantized(ir_version, graph).Run();
}

}  // namespace quantd::passes
