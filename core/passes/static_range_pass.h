// The STATIC_RANGE pass for op set TF (QDQ, W8A8 by default): constant
// weights of Conv/Gemm/MatMul become INT8 behind one DequantizeLinear (the
// DYNAMIC_RANGE weight code), activations get one QuantizeLinear ->
// DequantizeLinear pair each with scales from calibrated ranges, placed by
// tf.contrib.quantize's _InsertQuantOp rules, and Conv/Gemm biases become
// INT32 behind a DequantizeLinear (scale = input scale * weight scale).
//
// Which activations are quantized (the rule, in graph order, each tensor at
// most once):
//  1. Inputs: input 0 of every default-domain Conv, Gemm and MatMul, and
//     input 1 of a MatMul when it is not a constant (an initializer or a
//     Constant output), i.e. a MatMul of two activations.
//  2. Outputs: for each such node with output o: when o's only reader is
//     one default-domain Relu or Clip reading it as input 0 (and o is not a
//     graph output), the Relu/Clip output is quantized (after the
//     activation, as tf.contrib does after bias add + activation: its
//     clamped range gives a finer grid than o's), or nothing when only
//     float-weight ops read it (see below); except when it reaches an
//     If/Loop/Scan body (directly or through Flatten / Reshape / Transpose
//     / Squeeze / Unsqueeze / MaxPool / Identity) and no quantized op:
//     ONNX Runtime 1.30 aborts loading such a point, so o gets it instead.
//     Without a Relu/Clip, o itself.
// Each quantization point sits between the tensor's producer and ALL its
// readers (InsertQuantPoint). No point is added for a tensor with no node
// reader (a graph output stays float to the caller), for a tensor read
// inside a subgraph, or for a tensor that already feeds a QuantizeLinear or
// comes out of a DequantizeLinear (so a second run adds nothing); scopes
// skip points as _InsertQuantOp does. A node whose weight stays float for
// its size (min_num_elements_for_weights) computes in float like a FULL
// unit below: it proposes no point and reads float inputs, because ONNX
// Runtime's default level quantizes, per tensor, the float weight of a Conv
// or Gemm that reads a DequantizeLinear.
// op_set XLA and UNIFORM_QUANTIZED: the QDQ graph above is then rewritten
// by LowerQdqToXla (xla_lowering.h) or LowerQdqToUniformQuantized
// (uniform_quantized_lowering.h); nodes they cannot express stay QDQ and are
// named in StaticRangeStats::lowering_note.
// Bodies (subgraph_bodies.h): a tensor an If/Loop/Scan body makes (a body
// input, or a node output inside a body) may have no calibrated range
// because calibration never ran that branch or iteration (e.g. Silero VAD's
// 8 kHz branch). It gets no point and stays float: its quantizable readers
// keep a float input (their weights are still quantized; a lowering keeps
// such a node in QDQ form and names it), and the stats name it once. A
// main-graph tensor always runs, so one without a range is an error.
// Unit-wise precision (unit_precision.h): a quantizable node at FULL suggests
// no point, and is never rewired to a dequantized tensor; a tensor still gets
// a point when a quantized node suggests it and it has other readers.
#ifndef QUANTD_CORE_PASSES_STATIC_RANGE_PASS_H_
#define QUANTD_CORE_PASSES_STATIC_RANGE_PASS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/passes/dynamic_range_pass.h"
#include "core/passes/static_range_options.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

struct StaticRangeStats {
  int quantized_weights = 0;
  int quantized_activations = 0;  // Quantization points inserted.
  int quantized_biases = 0;
  // Distinct Conv/Gemm/MatMul nodes reading at least one dequantized input
  // after the pass.
  int quantized_nodes = 0;
  std::vector<quantd::v1::SkippedTensor> skipped;
  uint64_t weight_bytes_before = 0;  // Float bytes of quantized weights/biases.
  uint64_t weight_bytes_after = 0;   // Their quantized values and params.
  std::string opset_note;            // Empty when the opset was new enough.
  // op_set XLA / UNIFORM_QUANTIZED: what the lowering did, and each
  // quantized node it left in QDQ form with the reason. Empty for TF.
  std::string lowering_note;
  // Tensors made inside bodies that calibration never reached (no range):
  // left float, in the order met. unreached_note says so in one sentence
  // for the summary ("" when there are none).
  std::vector<std::string> unreached;
  std::string unreached_note;
  // Tensors whose range is unbounded (an additive mask: TensorRange.
  // unbounded): left float, in the order met, and the sentence for the
  // summary ("" when there are none).
  std::vector<std::string> unbounded;
  std::string unbounded_note;
};

// Rewrites `model` in place (default opset upgraded to 13 when older).
// hooks.on_planned gets weights + activation points + biases; reports come
// weights first, then activations, then biases. INVALID_ARGUMENT naming
// every tensor of `ranges` the graph does not have (checked first, nothing
// changed), and for NaN weights; FAILED_PRECONDITION naming every
// activation to quantize that has no range, except those made inside a
// body (see above; nothing changed when the main graph's pass fails), or
// when the opset is too old and cannot be upgraded. The op_set's row in
// op_sets.h picks the lowering (INVALID_ARGUMENT outside the enum).
absl::StatusOr<StaticRangeStats> RunStaticRangePass(
    const StaticRangeOptions& options, const ActivationRanges& ranges,
    const PassHooks& hooks, onnx::ModelProto* model);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_STATIC_RANGE_PASS_H_
