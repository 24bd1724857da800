// The options of the DYNAMIC_RANGE weight pass, resolved from a request:
// documented defaults applied, and every field DYNAMIC_RANGE cannot honour
// refused by name.
#ifndef QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_
#define QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_

#include "absl/status/statusor.h"
#include "core/passes/weight_pass_options.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// DYNAMIC_RANGE runs on the weight side alone (ResolveWeightPassOptions,
// with its checks), and refuses by name with INVALID_ARGUMENT:
// weight_params range-tracking fields (moving_avg, ema_decay, init_min,
// init_max, quant_delay), any activation_params field, and a non-empty
// calibration. UNIMPLEMENTED for PRECISION_W4A4, model-wide or in a unit
// entry: DYNAMIC_RANGE quantizes activations with DynamicQuantizeLinear,
// whose output is uint8 only, so 4-bit activations cannot be expressed.
absl::StatusOr<WeightPassOptions> ResolveDynamicRangeOptions(
    const quantd::v1::QuantizeConfig& config);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_
