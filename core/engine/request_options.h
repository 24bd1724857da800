// A request's options resolved once, before its model is parsed: defaults
// applied and every field checked, in one documented order, so refusing a
// request never costs a parse. A new request field is validated here (or in
// the pass options this calls) and nowhere else.
#ifndef QUANTD_CORE_ENGINE_REQUEST_OPTIONS_H_
#define QUANTD_CORE_ENGINE_REQUEST_OPTIONS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/calibration/observers.h"
#include "core/engine/resolved_options.h"
#include "core/passes/static_range_options.h"
#include "core/passes/weight_pass_options.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd {

struct QuantizeRequestOptions {
  ResolvedOptions resolved;
  // No method, or PRECISION_FULL with no unit entries: the model is returned
  // as received, for `unchanged_reason`.
  bool pass_through = false;
  std::string unchanged_reason;
  // The pass options of the resolved method (the other one is unused).
  passes::WeightPassOptions dynamic_range;
  passes::StaticRangeOptions static_range;
  // STATIC_RANGE calibrating from batches in the call: the observers, on the
  // activation grid the pass will use.
  calibration::ObserverConfig observers;
  // config.smoothquant: set means on; its alpha, or auto_alpha.
  std::optional<double> smoothquant_alpha;
  bool smoothquant_auto = false;
  // config.equalize.
  bool equalize = false;
};

// Resolves a Quantize request. `batch_stream`: the call carries (or may
// carry) calibration batches. The checks, in order:
//  1. method, enums and (method, op set, precision) of the model and of
//     each unit entry against the capability table (CheckSupported);
//  2. the search fields: target_sqnr_db (in (0, 200]) and target_agreement
//     (in (0, 1]), STATIC_RANGE only, allowed_precisions (with a target,
//     from the request's precision up; accuracy_search.h),
//     weight_algorithm GPTQ or AWQ, bias_correction and smoothquant (not
//     with config.calibration), holdout_batches (>= 0, STATIC_RANGE only),
//     smoothquant (alpha in [0, 1], not with AWQ) and equalize (a method
//     set);
//  3. the method's pass options (passes::ResolveStaticRangeOptions or
//     passes::ResolveDynamicRangeOptions, each field refused by name);
//  4. the stream: calibration batches with DYNAMIC_RANGE, unless
//     weight_algorithm GPTQ or AWQ, bias_correction or smoothquant use them;
//  5. STATIC_RANGE calibrating in the call: calibration_config (falling back
//     to activation_params) as the observers will run it; with smoothquant
//     or AWQ only the min_max observer.
absl::StatusOr<QuantizeRequestOptions> ResolveQuantizeRequest(
    const quantd::v1::QuantizeConfig& config, bool batch_stream);

// Resolves a Calibrate request into the observers it runs (method,
// activation grid, percentile, bins, tracking), checked.
absl::StatusOr<calibration::ObserverConfig> ResolveCalibrateRequest(
    const quantd::v1::CalibrateConfig& config);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_REQUEST_OPTIONS_H_
