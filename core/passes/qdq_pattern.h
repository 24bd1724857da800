// Reading the QDQ graph the STATIC_RANGE pass writes (op set TF) back as
// integer computations, for the lowerings to op sets XLA and
// UNIFORM_QUANTIZED: which Conv / Gemm / MatMul reads only dequantized
// tensors, and the quantized tensors, scales and zero points behind them.
// Both lowerings start from the same QDQ graph so that which tensors are
// quantized, and with which calibrated parameters, is decided in one place
// (static_range_pass.h); they only change how the arithmetic is spelled.
#ifndef QUANTD_CORE_PASSES_QDQ_PATTERN_H_
#define QUANTD_CORE_PASSES_QDQ_PATTERN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/graph/graph_index.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

// The DequantizeLinear in front of one input of a quantized op.
struct DequantizedInput {
  int dq_node = -1;
  std::string values, scale, zero_point;  // The DequantizeLinear's inputs.
  int32_t type = 0;           // TensorProto type of the zero point (= values').
  bool constant = false;      // values, scale and zero point are initializers.
  int64_t axis = -1;          // Quantized axis of values, -1 when per tensor.
  std::vector<int64_t> dims;  // Of values, when constant.
  std::vector<float> scales;  // One per channel (one when per tensor).
  std::vector<int32_t> zero_points;  // Same length as scales.

  bool UniformZeroPoint() const;
};

// A Conv / Gemm / MatMul whose inputs 0 and 1 are DequantizeLinear outputs
// with initializer scales and zero points.
struct QdqCompute {
  int node = -1;
  DequantizedInput x;  // Input 0: an activation.
  DequantizedInput w;  // Input 1: a constant weight, or (MatMul) activation.
  // Input 2 of Conv / Gemm, when present: `int32_bias` when it is the
  // DequantizeLinear of INT32 initializers with zero point 0 (the pass's
  // quantized bias); its float tensor name either way.
  bool has_bias = false;
  bool int32_bias = false;
  DequantizedInput bias;
  std::string bias_tensor;
};

// `node` as a QdqCompute, or FAILED_PRECONDITION saying why it is not one
// ("Gemm 'fc' stays QDQ: input 1 ... is not a DequantizeLinear output", for
// the lowering's report). Only default-domain Conv, Gemm and MatMul
// match.
absl::StatusOr<QdqCompute> MatchQdqCompute(const onnx::GraphProto& graph,
                                           const graph::GraphIndex& index,
                                           int node);

// True when `node` is a default-domain Conv / Gemm / MatMul reading at
// least one DequantizeLinear output (a node the pass quantized).
bool ReadsDequantized(const onnx::GraphProto& graph,
                      const graph::GraphIndex& index, int node);

// The values of an INT8, UINT8 or INT32 tensor (raw_data or int32_data).
// INVALID_ARGUMENT for another type, external data or a size mismatch.
absl::StatusOr<std::vector<int32_t>> ReadIntegerTensor(
    const onnx::TensorProto& tensor);

// What a lowering did.
struct QdqLoweringStats {
  int lowered_nodes = 0;  // Now integer / QLinear ops.
  // One line per quantized node left in QDQ form: "Gemm 'fc': why".
  std::vector<std::string> kept;
  // Left in the graph after the lowering.
  int quantize_linear = 0;
  int dequantize_linear = 0;
};

// Removes QuantizeLinear / DequantizeLinear nodes whose outputs nobody
// reads (and that are no graph outputs), repeatedly, then the initializers
// only they read (and, when `also_input`, the graph inputs of those names).
// Finally counts the Q / DQ nodes left into `stats`.
void RemoveDeadQdq(bool also_input, onnx::GraphProto* graph,
                   QdqLoweringStats* stats);

// "Conv 'name'".
std::string DescribeNode(const onnx::NodeProto& node);

// "INT8", "INT4" (libonnx 1.12 has no name for the 4-bit types), or
// "type 42".
std::string ElementTypeName(int32_t type);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_QDQ_PATTERN_H_
