// One activation quantization point, tf.contrib.quantize's _InsertQuantOp
// (seed 000) on an ONNX graph: QuantizeLinear -> DequantizeLinear between a
// tensor's producer and the given consumers, which then read the
// dequantized tensor.
#ifndef QUANTD_CORE_PASSES_STATIC_RANGE_QUANT_POINT_H_
#define QUANTD_CORE_PASSES_STATIC_RANGE_QUANT_POINT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/graph/unique_names.h"
#include "core/numerics/quant_params.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

struct QuantPointParams {
  // Scale and zero point (on spec's grid) of the point.
  numerics::QuantParams params;
  // bits, signedness (UINT8 or INT8 storage) and narrow range.
  numerics::QuantSpec spec;
  // Store the quantized tensor as UINT4 / INT4 (opset 21, the caller raises
  // the model) instead of UINT8 / INT8; spec.bits must then be <= 4.
  bool four_bit_storage = false;
  std::string producer_scope;
  std::string consumer_scope;
};

struct QuantPoint {
  enum Outcome {
    kInserted,
    // The producer node's name (for a graph input or initializer: the
    // tensor's name) does not start with producer_scope.
    kProducerOutOfScope,
    // Some consumer's node name does not start with consumer_scope.
    kConsumerOutOfScope,
    // The tensor already feeds a QuantizeLinear (directly or through
    // Identity/Reshape/Clip, as _FollowedByFakeQuant looks through
    // Identity/Reshape), or is a DequantizeLinear output.
    kAlreadyQuantized,
  };
  Outcome outcome = kInserted;
  std::string detail;  // Why, when not inserted.
  // When inserted: what the consumers read now, and the nodes added.
  std::string dequantized;
  std::vector<std::string> nodes;
  bool clipped = false;
};

// What InsertQuantPoint would do, without changing the graph: the same
// checks in _InsertQuantOp's order (producer scope, consumer scope, already
// quantized, then connection). `consumers` are node indices (repeats are
// fine). INVALID_ARGUMENT when the tensor is not a node output, graph input
// or initializer, when `consumers` is empty or holds a bad index, and
// "producer is not directly connected to the consumers" when a consumer
// does not read the tensor as one of its inputs in the main graph.
absl::StatusOr<QuantPoint> CheckQuantPoint(const onnx::GraphProto& graph,
                                           const std::string& producer_tensor,
                                           absl::Span<const int> consumers,
                                           const std::string& producer_scope,
                                           const std::string& consumer_scope);

// CheckQuantPoint, then, when the outcome is kInserted:
//   tensor [-> Clip] -> QuantizeLinear -> DequantizeLinear -> every consumer
// (each input slot of a consumer that read the tensor is rewired; other
// readers keep the float tensor). Scale and zero point are scalar
// initializers (zero point UINT8, or INT8 when spec.is_signed; UINT4 / INT4
// with four_bit_storage, INVALID_ARGUMENT when spec.bits > 4 then). ONNX's
// QuantizeLinear saturates to the whole storage type, so when spec's grid is
// smaller (fewer bits than the type, narrow range) a Clip to the grid's real
// range
// [DequantizeValue(quant_min), DequantizeValue(quant_max)] comes first,
// which is FakeQuant's clamp. The new nodes go right after the producer
// (first for a graph input or initializer), so a topologically ordered graph
// stays ordered; node indices after that position grow by the number of
// nodes added. New names come from `names` (a fresh UniqueNames of the
// graph when null). Initializers are not declared as graph inputs (IR < 4
// callers add that).
absl::StatusOr<QuantPoint> InsertQuantPoint(onnx::GraphProto* graph,
                                            const std::string& producer_tensor,
                                            absl::Span<const int> consumers,
                                            const QuantPointParams& params,
                                            graph::UniqueNames* names);

// Indices of the nodes reading `tensor` as a main-graph input, in order,
// each once.
std::vector<int> ConsumersOf(const onnx::GraphProto& graph,
                             const std::string& tensor);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_STATIC_RANGE_QUANT_POINT_H_
