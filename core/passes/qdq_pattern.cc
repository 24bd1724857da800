#include "core/passes/qdq_pattern.h"

#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/tensor_util.h"
#include "core/numerics/int4.h"
#include "core/passes/weight_plan.h"

namespace quantd::passes {
namespace {

using onnx::NodeProto;
using onnx::TensorProto;

absl::Status NotMatched(const NodeProto& node, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat(DescribeNode(node), " stays QDQ: ", why));
}

// The DequantizeLinear producing input `slot` of `node`, read back.
absl::StatusOr<DequantizedInput> ReadDequantized(const onnx::GraphProto& graph,
                                                 const graph::GraphIndex& index,
                                                 const NodeProto& node,
                                                 int slot) {
  const std::string& tensor = node.input(slot);
  const int p = index.Producer(tensor);
  if (p < 0 || graph.node(p).op_type() != "DequantizeLinear" ||
      !IsDefaultDomain(graph.node(p))) {
    return NotMatched(node, absl::StrCat("input ", slot, " '", tensor,
                                         "' is not a DequantizeLinear output"));
  }
  const NodeProto& dq = graph.node(p);
  if (dq.input_size() < 3 || dq.input(2).empty()) {
    return NotMatched(node, absl::StrCat("the DequantizeLinear of input ", slot,
                                         " has no zero point"));
  }
  DequantizedInput d;
  d.dq_node = p;
  d.values = dq.input(0);
  d.scale = dq.input(1);
  d.zero_point = dq.input(2);
  const int si = index.Initializer(d.scale);
  const int zi = index.Initializer(d.zero_point);
  if (si < 0 || zi < 0) {
    return NotMatched(node, absl::StrCat("the scale or zero point of input ",
                                         slot, " is not an initializer"));
  }
  const int32_t zp_type = graph.initializer(zi).data_type();
  if (numerics::IsFourBitType(zp_type)) {
    return NotMatched(
        node, absl::StrCat("input ", slot, " is ", ElementTypeName(zp_type),
                           "; the integer and QLinear ops take "
                           "8-bit inputs only"));
  }
  absl::StatusOr<std::vector<float>> scales =
      graph::ReadFloatTensor(graph.initializer(si));
  absl::StatusOr<std::vector<int32_t>> zps =
      ReadIntegerTensor(graph.initializer(zi));
  if (!scales.ok() || !zps.ok() || scales->size() != zps->size() ||
      scales->empty()) {
    return NotMatched(node, absl::StrCat("the scale / zero point of input ",
                                         slot, " cannot be read"));
  }
  d.scales = std::move(*scales);
  d.zero_points = std::move(*zps);
  d.type = graph.initializer(zi).data_type();
  const int vi = index.Initializer(d.values);
  d.constant = vi >= 0;
  if (d.constant) {
    d.dims = graph::Dims(graph.initializer(vi));
    if (graph.initializer(vi).data_type() != d.type) {
      return NotMatched(node, absl::StrCat("input ", slot,
                                           "'s values and zero point differ "
                                           "in type"));
    }
  }
  if (d.scales.size() > 1) {
    int64_t axis = 1;
    for (const auto& a : dq.attribute()) {
      if (a.name() == "axis") axis = a.i();
    }
    const int64_t rank = static_cast<int64_t>(d.dims.size());
    if (!d.constant || axis < -rank || axis >= rank ||
        d.dims[axis < 0 ? axis + rank : axis] !=
            static_cast<int64_t>(d.scales.size())) {
      return NotMatched(node, absl::StrCat("input ", slot,
                                           " is per channel but not a "
                                           "constant of matching shape"));
    }
    d.axis = axis < 0 ? axis + rank : axis;
  }
  return d;
}

}  // namespace

std::string DescribeNode(const NodeProto& node) {
  return absl::StrCat(node.op_type(), " '", node.name(), "'");
}

std::string ElementTypeName(int32_t type) {
  if (type == numerics::kOnnxInt4) return "INT4";
  if (type == numerics::kOnnxUint4) return "UINT4";
  const std::string name =
      TensorProto::DataType_IsValid(type)
          ? TensorProto::DataType_Name(static_cast<TensorProto::DataType>(type))
          : "";
  return name.empty() ? absl::StrCat("type ", type) : name;
}

bool DequantizedInput::UniformZeroPoint() const {
  for (int32_t z : zero_points) {
    if (z != zero_points.front()) return false;
  }
  return true;
}

absl::StatusOr<QdqCompute> MatchQdqCompute(const onnx::GraphProto& graph,
                                           const graph::GraphIndex& index,
                                           int node) {
  const NodeProto& n = graph.node(node);
  if (!IsQuantizableOp(n) || n.input_size() < 2 || n.output_size() < 1) {
    return NotMatched(n, "not a Conv, Gemm or MatMul");
  }
  QdqCompute c;
  c.node = node;
  QUANTD_ASSIGN_OR_RETURN(c.x, ReadDequantized(graph, index, n, 0));
  QUANTD_ASSIGN_OR_RETURN(c.w, ReadDequantized(graph, index, n, 1));
  if (n.op_type() != "MatMul" && n.input_size() > 2 && !n.input(2).empty()) {
    c.has_bias = true;
    c.bias_tensor = n.input(2);
    absl::StatusOr<DequantizedInput> b = ReadDequantized(graph, index, n, 2);
    if (b.ok() && b->constant && b->type == TensorProto::INT32) {
      bool zero = true;
      for (int32_t z : b->zero_points) zero &= z == 0;
      if (zero) {
        c.int32_bias = true;
        c.bias = std::move(*b);
      }
    }
  }
  return c;
}

bool ReadsDequantized(const onnx::GraphProto& graph,
                      const graph::GraphIndex& index, int node) {
  const NodeProto& n = graph.node(node);
  if (!IsQuantizableOp(n)) return false;
  for (const std::string& in : n.input()) {
    const int p = index.Producer(in);
    if (p >= 0 && graph.node(p).op_type() == "DequantizeLinear") return true;
  }
  return false;
}

absl::StatusOr<std::vector<int32_t>> ReadIntegerTensor(
    const TensorProto& tensor) {
  const int32_t type = tensor.data_type();
  if (type != TensorProto::INT8 && type != TensorProto::UINT8 &&
      type != TensorProto::INT32) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' is not INT8/UINT8/INT32"));
  }
  if (graph::HasExternalData(tensor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' has external data"));
  }
  const int64_t n = graph::NumElements(tensor);
  std::vector<int32_t> out;
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' has a bad shape"));
  }
  if (!tensor.has_raw_data()) {
    if (tensor.int32_data_size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name(), "' has ", tensor.int32_data_size(),
          " values for ", n, " elements"));
    }
    out.assign(tensor.int32_data().begin(), tensor.int32_data().end());
    return out;
  }
  const std::string& raw = tensor.raw_data();
  const size_t width = type == TensorProto::INT32 ? 4 : 1;
  if (raw.size() != static_cast<size_t>(n) * width) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' has ", raw.size(),
                     " bytes for ", n, " elements"));
  }
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    if (type == TensorProto::INT32) {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);  // Little-endian host.
      out[i] = v;
    } else if (type == TensorProto::INT8) {
      out[i] = static_cast<int8_t>(raw[i]);
    } else {
      out[i] = static_cast<uint8_t>(raw[i]);
    }
  }
  return out;
}

void RemoveDeadQdq(bool also_input, onnx::GraphProto* graph,
                   QdqLoweringStats* stats) {
  absl::flat_hash_set<std::string> freed;  // Inputs of removed nodes.
  for (bool changed = true; changed;) {
    changed = false;
    const graph::GraphIndex index(*graph);
    google::protobuf::RepeatedPtrField<NodeProto> kept;
    for (NodeProto& node : *graph->mutable_node()) {
      const bool qdq =
          IsDefaultDomain(node) && (node.op_type() == "QuantizeLinear" ||
                                    node.op_type() == "DequantizeLinear");
      bool dead = qdq;
      for (const std::string& out : node.output()) {
        dead &= index.Uses(out).empty() && !index.IsGraphOutput(out);
      }
      if (!dead) {
        *kept.Add() = std::move(node);
        continue;
      }
      for (const std::string& in : node.input()) freed.insert(in);
      changed = true;
    }
    graph->mutable_node()->Swap(&kept);
  }
  const graph::GraphIndex index(*graph);
  absl::flat_hash_set<std::string> unused;
  for (const std::string& name : freed) {
    if (index.Initializer(name) >= 0 && index.Uses(name).empty() &&
        !index.IsGraphOutput(name) &&
        (also_input || !index.IsGraphInput(name))) {
      unused.insert(name);
    }
  }
  auto* inits = graph->mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i) {
    if (unused.contains(inits->Get(i).name())) inits->DeleteSubrange(i, 1);
  }
  if (also_input) {
    auto* inputs = graph->mutable_input();
    for (int i = inputs->size() - 1; i >= 0; --i) {
      if (unused.contains(inputs->Get(i).name())) inputs->DeleteSubrange(i, 1);
    }
  }
  stats->quantize_linear = 0;
  stats->dequantize_linear = 0;
  for (const NodeProto& node : graph->node()) {
    stats->quantize_linear += node.op_type() == "QuantizeLinear";
    stats->dequantize_linear += node.op_type() == "DequantizeLinear";
  }
}

}  // namespace quantd::passes
