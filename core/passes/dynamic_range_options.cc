#include "core/passes/dynamic_range_options.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace quantd::passes {

namespace {

using quantd::v1::QuantOpParams;

// Names of the fields of `p` that are set, in field order.
std::vector<std::string> SetFields(const QuantOpParams& p) {
  std::vector<std::string> set;
  if (p.has_bits()) set.push_back("bits");
  if (p.has_symmetric()) set.push_back("symmetric");
  if (p.has_narrow_range()) set.push_back("narrow_range");
  if (p.has_per_channel()) set.push_back("per_channel");
  if (p.has_moving_avg()) set.push_back("moving_avg");
  if (p.has_ema_decay()) set.push_back("ema_decay");
  if (p.has_init_min()) set.push_back("init_min");
  if (p.has_init_max()) set.push_back("init_max");
  if (p.has_quant_delay()) set.push_back("quant_delay");
  if (p.has_producer_scope()) set.push_back("producer_scope");
  if (p.has_consumer_scope()) set.push_back("consumer_scope");
  if (p.has_block_size()) set.push_back("block_size");
  if (p.has_range()) set.push_back("range");
  return set;
}

absl::Status CheckNotForDynamicRange(const quantd::v1::QuantizeConfig& config) {
  std::vector<std::string> act = SetFields(config.activation_params());
  if (!act.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activation_params.", absl::StrJoin(act, ", activation_params."),
        " cannot be used with DYNAMIC_RANGE: it quantizes activations at run "
        "time (DynamicQuantizeLinear computes each activation's range on "
        "every inference), so there are no activation parameters to set"));
  }
  if (config.has_calibration() && config.calibration().ByteSizeLong() > 0) {
    return absl::InvalidArgumentError(
        "calibration cannot be used with DYNAMIC_RANGE: it quantizes "
        "activations at run time, so calibrated ranges are not used (they "
        "are for STATIC_RANGE)");
  }
  const QuantOpParams& w = config.weight_params();
  std::vector<std::string> tracking;
  if (w.has_moving_avg()) tracking.push_back("moving_avg");
  if (w.has_ema_decay()) tracking.push_back("ema_decay");
  if (w.has_init_min()) tracking.push_back("init_min");
  if (w.has_init_max()) tracking.push_back("init_max");
  if (w.has_quant_delay()) tracking.push_back("quant_delay");
  if (!tracking.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight_params.", absl::StrJoin(tracking, ", weight_params."),
        " cannot be used with DYNAMIC_RANGE: weights are quantized once, "
        "offline, from their values in the model (last value), so there is "
        "no range tracking over steps"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WeightPassOptions> ResolveDynamicRangeOptions(
    const quantd::v1::QuantizeConfig& config) {
  QUANTD_RETURN_IF_ERROR(CheckNotForDynamicRange(config));
  // DynamicQuantizeLinear (the run-time activation quantizer) outputs uint8
  // only: 4-bit activations have no expression.
  constexpr char kNoA4[] =
      " cannot be honoured by DYNAMIC_RANGE: activations are quantized at run "
      "time by DynamicQuantizeLinear, whose output is uint8 only, so 4-bit "
      "activations cannot be expressed; use STATIC_RANGE for W4A4, or W4A8 "
      "with DYNAMIC_RANGE";
  if (config.options().quantization_precision() ==
      tensorflow::quantization::PRECISION_W4A4) {
    return absl::UnimplementedError(
        absl::StrCat("quantization_precision PRECISION_W4A4", kNoA4));
  }
  const auto& unit_entries =
      config.options().unit_wise_quantization_precision();
  for (int i = 0; i < unit_entries.size(); ++i) {
    if (HasFourBitActivations(unit_entries[i].quantization_precision())) {
      return absl::UnimplementedError(
          absl::StrCat(DescribeUnitEntry(i, unit_entries[i]), kNoA4));
    }
  }
  return ResolveWeightPassOptions(config);
}

}  // namespace quantd::passes
