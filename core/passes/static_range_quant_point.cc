#include "core/passes/static_range_quant_point.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/tensor_util.h"
#include "core/numerics/int4.h"

namespace quantd::passes {
namespace {

// Whether `node` reads `tensor` as an input or inside one of its subgraphs
// (If/Loop/Scan bodies see outer values by name): either way it is a
// consumer of the tensor.
bool Reads(const onnx::NodeProto& node, const std::string& tensor) {
  if (std::find(node.input().begin(), node.input().end(), tensor) !=
      node.input().end()) {
    return true;
  }
  for (const auto& a : node.attribute()) {
    if (a.has_g() && graph::SubgraphReads(a.g(), tensor)) return true;
    for (const auto& g : a.graphs()) {
      if (graph::SubgraphReads(g, tensor)) return true;
    }
  }
  return false;
}

// Index of the node producing `tensor`; -1 for a graph input or
// initializer; -2 when the main graph has no such tensor.
int FindProducer(const onnx::GraphProto& graph, const std::string& tensor) {
  for (int n = 0; n < graph.node_size(); ++n) {
    for (const auto& out : graph.node(n).output()) {
      if (out == tensor) return n;
    }
  }
  for (const auto& v : graph.input()) {
    if (v.name() == tensor) return -1;
  }
  for (const auto& t : graph.initializer()) {
    if (t.name() == tensor) return -1;
  }
  return -2;
}

std::string Describe(const onnx::NodeProto& node, int index) {
  return absl::StrCat(node.op_type(), " '", node.name(), "' (node ", index,
                      ")");
}

// _FollowedByFakeQuant: does `tensor` reach a QuantizeLinear directly or
// through pass-through ops (their data input only)? Clip is looked through
// too: InsertQuantPoint puts one before the QuantizeLinear for small grids.
bool FollowedByQuantize(const onnx::GraphProto& graph,
                        const std::string& tensor) {
  std::deque<std::string> pending{tensor};
  absl::flat_hash_set<std::string> seen{tensor};
  while (!pending.empty()) {
    const std::string t = std::move(pending.front());
    pending.pop_front();
    for (const auto& node : graph.node()) {
      if (node.input_size() == 0 || node.input(0) != t) continue;
      if (IsOp(node, "QuantizeLinear")) return true;
      if (IsOp(node, "Identity") || IsOp(node, "Reshape") ||
          IsOp(node, "Clip")) {
        for (const auto& out : node.output()) {
          if (!out.empty() && seen.insert(out).second) pending.push_back(out);
        }
      }
    }
  }
  return false;
}

}  // namespace

std::vector<int> ConsumersOf(const onnx::GraphProto& graph,
                             const std::string& tensor) {
  std::vector<int> out;
  for (int n = 0; n < graph.node_size(); ++n) {
    if (Reads(graph.node(n), tensor)) out.push_back(n);
  }
  return out;
}

absl::StatusOr<QuantPoint> CheckQuantPoint(const onnx::GraphProto& graph,
                                           const std::string& producer_tensor,
                                           absl::Span<const int> consumers,
                                           const std::string& producer_scope,
                                           const std::string& consumer_scope) {
  const int producer = FindProducer(graph, producer_tensor);
  if (producer_tensor.empty() || producer == -2) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot insert a quantization point on '", producer_tensor,
                     "': no node output, graph input or initializer has "
                     "that name"));
  }
  if (consumers.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot insert a quantization point on '", producer_tensor,
                     "': no consumers given"));
  }
  for (int c : consumers) {
    if (c < 0 || c >= graph.node_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("consumer index ", c, " is not a node of the graph (",
                       graph.node_size(), " nodes)"));
    }
  }
  QuantPoint point;
  const std::string& producer_name =
      producer >= 0 ? graph.node(producer).name() : producer_tensor;
  if (!absl::StartsWith(producer_name, producer_scope)) {
    point.outcome = QuantPoint::kProducerOutOfScope;
    point.detail =
        absl::StrCat("producer '", producer_name,
                     "' is not in producer_scope '", producer_scope, "'");
    return point;
  }
  for (int c : consumers) {
    const onnx::NodeProto& node = graph.node(c);
    if (!absl::StartsWith(node.name(), consumer_scope)) {
      point.outcome = QuantPoint::kConsumerOutOfScope;
      point.detail =
          absl::StrCat("consumer ", Describe(node, c),
                       " is not in consumer_scope '", consumer_scope, "'");
      return point;
    }
  }
  if (producer >= 0 && IsOp(graph.node(producer), "DequantizeLinear")) {
    point.outcome = QuantPoint::kAlreadyQuantized;
    point.detail = "the tensor is the output of a DequantizeLinear";
    return point;
  }
  if (FollowedByQuantize(graph, producer_tensor)) {
    point.outcome = QuantPoint::kAlreadyQuantized;
    point.detail = "the tensor already feeds a QuantizeLinear";
    return point;
  }
  for (int c : consumers) {
    if (!Reads(graph.node(c), producer_tensor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "producer is not directly connected to the consumers: ",
          Describe(graph.node(c), c), " does not read '", producer_tensor, "'",
          producer >= 0
              ? absl::StrCat(" (produced by ",
                             Describe(graph.node(producer), producer), ")")
              : ""));
    }
  }
  return point;
}

absl::StatusOr<QuantPoint> InsertQuantPoint(onnx::GraphProto* graph,
                                            const std::string& producer_tensor,
                                            absl::Span<const int> consumers,
                                            const QuantPointParams& params,
                                            graph::UniqueNames* names) {
  absl::StatusOr<QuantPoint> point =
      CheckQuantPoint(*graph, producer_tensor, consumers, params.producer_scope,
                      params.consumer_scope);
  if (!point.ok() || point->outcome != QuantPoint::kInserted) return point;
  QUANTD_ASSIGN_OR_RETURN(numerics::QuantGrid grid,
                          numerics::GridFor(params.spec));
  const numerics::QuantParams& qp = params.params;
  if (!(qp.scale > 0.0f) || qp.zero_point < grid.quant_min ||
      qp.zero_point > grid.quant_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantization point on '", producer_tensor, "': scale ", qp.scale,
        " and zero point ", qp.zero_point, " do not fit the grid [",
        grid.quant_min, ", ", grid.quant_max, "]"));
  }
  if (params.four_bit_storage && params.spec.bits > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantization point on '", producer_tensor,
                     "': ", params.spec.bits, "-bit grid cannot be stored as ",
                     params.spec.is_signed ? "INT4" : "UINT4"));
  }
  std::unique_ptr<graph::UniqueNames> own;
  if (names == nullptr) {
    own = std::make_unique<graph::UniqueNames>(*graph);
    names = own.get();
  }
  const std::string& x = producer_tensor;
  const std::string scale = names->Make(x + "_scale");
  const std::string zp = names->Make(x + "_zero_point");
  const std::string q = names->Make(x + "_quantized");
  point->dequantized = names->Make(x + "_dequantized");

  const bool is_signed = params.spec.is_signed;
  // The zero point's type is the quantized tensor's (QuantizeLinear's
  // output type follows it).
  onnx::TensorProto zp_tensor;
  if (params.four_bit_storage) {
    QUANTD_ASSIGN_OR_RETURN(std::string packed,
                            numerics::PackInt4({qp.zero_point}, is_signed));
    zp_tensor.set_name(zp);
    zp_tensor.set_data_type(is_signed ? numerics::kOnnxInt4
                                      : numerics::kOnnxUint4);
    zp_tensor.set_raw_data(std::move(packed));
  } else {
    zp_tensor = graph::MakeByteTensor(
        zp, is_signed ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8, {},
        std::string(1, static_cast<char>(
                           is_signed ? static_cast<int8_t>(qp.zero_point)
                                     : static_cast<uint8_t>(qp.zero_point))));
  }
  *graph->add_initializer() = graph::MakeFloatTensor(scale, {}, {qp.scale});
  *graph->add_initializer() = std::move(zp_tensor);
  std::vector<onnx::NodeProto> added;
  std::string q_input = x;
  const int type_bits = params.four_bit_storage ? 4 : 8;
  const int32_t type_min = is_signed ? -(1 << (type_bits - 1)) : 0;
  const int32_t type_max =
      is_signed ? (1 << (type_bits - 1)) - 1 : (1 << type_bits) - 1;
  if (grid.quant_min != type_min || grid.quant_max != type_max) {
    const std::string lo = names->Make(x + "_clip_min");
    const std::string hi = names->Make(x + "_clip_max");
    q_input = names->Make(x + "_clipped");
    *graph->add_initializer() = graph::MakeFloatTensor(
        lo, {}, {numerics::DequantizeValue(grid.quant_min, qp)});
    *graph->add_initializer() = graph::MakeFloatTensor(
        hi, {}, {numerics::DequantizeValue(grid.quant_max, qp)});
    added.push_back(graph::MakeNode("Clip", names->Make(x + "_Clip"),
                                    {x, lo, hi}, {q_input}));
    point->clipped = true;
  }
  added.push_back(graph::MakeNode("QuantizeLinear",
                                  names->Make(x + "_QuantizeLinear"),
                                  {q_input, scale, zp}, {q}));
  added.push_back(graph::MakeNode("DequantizeLinear",
                                  names->Make(x + "_DequantizeLinear"),
                                  {q, scale, zp}, {point->dequantized}));

  // Rewire before inserting: insertion shifts the consumers' indices.
  for (int c : consumers) {
    onnx::NodeProto* node = graph->mutable_node(c);
    for (int s = 0; s < node->input_size(); ++s) {
      if (node->input(s) == x) node->set_input(s, point->dequantized);
    }
    graph::RenameSubgraphReads(x, point->dequantized, node);
  }
  int position = FindProducer(*graph, x) + 1;  // 0 for inputs/initializers.
  for (onnx::NodeProto& node : added) {
    point->nodes.push_back(node.name());
    graph::InsertNode(std::move(node), position++, graph);
  }
  return point;
}

}  // namespace quantd::passes
