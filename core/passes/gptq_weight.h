// GPTQ applied to one planned weight: the tensor seen as output channels x
// K (per group for a grouped Conv), H from its readers' input statistics,
// and the result put back in the tensor's own layout with the plan's
// parameter layout (per channel or blocked), ready for DequantizeLinear.
#ifndef QUANTD_CORE_PASSES_GPTQ_WEIGHT_H_
#define QUANTD_CORE_PASSES_GPTQ_WEIGHT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/numerics/gptq.h"
#include "core/numerics/quant_params.h"
#include "core/passes/input_moments.h"
#include "core/passes/weight_plan.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

struct GptqWeight {
  numerics::QuantizedTensor q;
  // The weight's output SQNR over its calibration inputs (worst group for
  // a grouped Conv), and what plain rounding would have given.
  double output_sqnr_db = 0;
  double rtn_output_sqnr_db = 0;
  // The cross-check (inputs with both folds): GPTQ fitted on each half of
  // the calibration samples and judged on the other, the two halves' errors
  // added, against rounding to nearest on the same inputs (output SQNRs,
  // all groups together). GPTQ that loses it fits its calibration inputs
  // but not the layer's: the caller rounds to nearest instead.
  bool cross_checked = false;
  double held_out_sqnr_db = 0;
  double held_out_rtn_sqnr_db = 0;
  int64_t input_rows = 0;  // Calibration rows behind H.
  double seconds = 0;
};

// The statistics GPTQ would use for `plan`: its readers' H, summed when
// several layers share the weight. `why_not` says why GPTQ cannot run
// (empty when it can): a reader without statistics, or readers that
// disagree on K. Fewer rows than K are allowed: the damping keeps H
// invertible, and on the corpus GPTQ still beat rounding on such layers
// (docs/accuracy.md, "GPTQ").
struct GptqInputs {
  std::vector<float> h;  // groups x k x k.
  int64_t k = 0, groups = 1, rows = 0;
  // The even-numbered samples' part of h (InputMoments folds; empty
  // without), and its rows.
  std::vector<float> h_fold;
  int64_t fold_rows = 0;
  std::string why_not;
};
GptqInputs GptqInputsFor(const onnx::GraphProto& graph, const WeightPlan& plan,
                         const InputMoments& moments);

// GPTQ on the weight `values` of `plan` (a 2-D MatMul / Gemm weight or a
// Conv weight read by `consumer`, per channel on the output axis or blocked
// along the input axis). With both folds in `inputs` (each holding rows),
// also the cross-check: two more solves, one on each fold. INVALID_ARGUMENT
// when the plan's layout is not one of those, or when GptqQuantize refuses.
absl::StatusOr<GptqWeight> GptqQuantizeWeight(
    const onnx::NodeProto& consumer, const WeightPlan& plan,
    absl::Span<const float> values, const GptqInputs& inputs,
    const numerics::QuantSpec& spec, const numerics::GptqOptions& options);

// Bias correction (Nagel et al., 2019): the mean shift of each output
// channel of `consumer` that the weight error `error` (W - dq(q(W)), in the
// tensor's layout) causes on its calibration inputs, error . E[x] (per group
// for a Conv): what is to be added to its bias so the layer's output keeps
// its mean. INVALID_ARGUMENT for layouts other than GPTQ's or statistics
// that do not fit.
absl::StatusOr<std::vector<double>> ExpectedOutputShift(
    const onnx::NodeProto& consumer, const WeightPlan& plan,
    absl::Span<const float> error, const LayerMoments& m);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_GPTQ_WEIGHT_H_
