// The DYNAMIC_RANGE weight pass for op set TF (QDQ): constant weights of
// Conv/Gemm/MatMul become INT8 initializers behind one DequantizeLinear
// each, and the data input of every quantized node is quantized at run time
// by DynamicQuantizeLinear -> DequantizeLinear.
#ifndef QUANTD_CORE_PASSES_DYNAMIC_RANGE_PASS_H_
#define QUANTD_CORE_PASSES_DYNAMIC_RANGE_PASS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/passes/dynamic_range_options.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// How the pass reports and parallelizes; every member may be empty.
struct PassHooks {
  // Called once the weights to quantize are chosen (and the opset made new
  // enough), with their number.
  std::function<void(int64_t total)> on_planned;
  // Called on the calling thread, in plan order, as each tensor is done.
  std::function<void(const quantd::v1::TensorReport&)> on_report;
  std::function<void(int64_t done, int64_t total)> on_progress;
  // Polled between groups of tensors; a non-OK status stops the pass.
  std::function<absl::Status()> check_cancelled;
  // Runs fn(i) for i in [0, n) and returns when all are done (may run them
  // concurrently). Empty: serially.
  std::function<void(int64_t n, const std::function<void(int64_t)>& fn)>
      parallel_for;
  // Tensors quantized between two reports/cancellation checks; each holds
  // one float copy of its weight while it runs.
  int group_size = 1;
};

// The hooks a pass gives the passes over its If/Loop/Scan bodies: the
// same, minus on_planned and on_progress (the stage counts the main
// graph's tensors).
PassHooks BodyHooks(const PassHooks& hooks);

// Appends `more` to the note `*to`, "; "-separated; nothing when empty.
void AppendNote(std::string* to, const std::string& more);

struct PassStats {
  int quantized_tensors = 0;
  // Distinct nodes whose weight was quantized (their activations are
  // quantized at run time).
  int quantized_nodes = 0;
  std::vector<quantd::v1::SkippedTensor> skipped;
  uint64_t weight_bytes_before = 0;  // Float bytes of the quantized weights.
  uint64_t weight_bytes_after = 0;   // Their int8 values, scales, zero points.
  std::string opset_note;            // Empty when the opset was new enough.
};

// Rewrites `model` in place. Frees each float weight as soon as it is
// quantized. INVALID_ARGUMENT for weights that cannot be quantized (NaN),
// FAILED_PRECONDITION when the opset is too old and cannot be upgraded;
// UNIMPLEMENTED (INVALID_ARGUMENT outside the enum) for an op_set whose
// DYNAMIC_RANGE row in op_sets.h is not produced, before any change.
absl::StatusOr<PassStats> RunDynamicRangePass(const WeightPassOptions& options,
                                              const PassHooks& hooks,
                                              onnx::ModelProto* model);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_DYNAMIC_RANGE_PASS_H_
