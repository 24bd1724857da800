#include "core/passes/static_range_options.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace quantd::passes {
namespace {

namespace tfq = tensorflow::quantization;
using quantd::v1::QuantOpParams;

std::vector<std::string> TrackingFields(const QuantOpParams& p) {
  std::vector<std::string> set;
  if (p.has_moving_avg()) set.push_back("moving_avg");
  if (p.has_ema_decay()) set.push_back("ema_decay");
  if (p.has_init_min()) set.push_back("init_min");
  if (p.has_init_max()) set.push_back("init_max");
  if (p.has_quant_delay()) set.push_back("quant_delay");
  return set;
}

absl::Status CheckBits(const char* field, int bits) {
  if (bits >= 2 && bits <= 8) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ".bits is ", bits, "; it must be in 2..8"));
}

absl::Status ResolveActivations(const QuantOpParams& a,
                                StaticRangeOptions* options) {
  ActivationQuantOptions& act = options->activations;
  if (a.has_bits()) {
    QUANTD_RETURN_IF_ERROR(CheckBits("activation_params", a.bits()));
    act.spec.bits = a.bits();
    act.bits_from_params = true;
  }
  if (a.has_symmetric()) {
    act.spec.symmetric = a.symmetric();
    // Symmetric activations have zero point 0 on a signed grid.
    act.spec.is_signed = a.symmetric();
  }
  if (a.has_narrow_range()) act.spec.narrow_range = a.narrow_range();
  if (a.has_per_channel() && a.per_channel()) {
    return absl::UnimplementedError(
        "activation_params.per_channel = true is not supported by "
        "STATIC_RANGE with op set TF: activations get one scale per tensor "
        "(QuantizeLinear on activations is per tensor in ONNX QDQ models)");
  }
  if (a.has_block_size()) {
    return absl::InvalidArgumentError(
        "activation_params.block_size cannot be used: blocks are for weights "
        "(weight_params.block_size); an activation gets one scale per tensor");
  }
  if (a.has_range()) {
    return absl::InvalidArgumentError(
        "activation_params.range cannot be used: it chooses weight ranges "
        "(weight_params.range); an activation's range comes from calibration "
        "(calibration_config.method, e.g. \"mse\" or \"percentile\")");
  }
  act.producer_scope = a.producer_scope();
  act.consumer_scope = a.consumer_scope();

  RangeTrackingOptions& t = options->tracking;
  if (a.has_moving_avg()) t.moving_avg = a.moving_avg();
  if (a.has_ema_decay()) {
    if (!(a.ema_decay() > 0.0f && a.ema_decay() <= 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("activation_params.ema_decay is ", a.ema_decay(),
                       "; it must be in (0, 1]"));
    }
    t.ema_decay = a.ema_decay();
  }
  if (a.has_init_min()) t.init_min = a.init_min();
  if (a.has_init_max()) t.init_max = a.init_max();
  if (!std::isfinite(t.init_min) || !std::isfinite(t.init_max) ||
      t.init_min > t.init_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activation_params.init_min/init_max are [", t.init_min, ", ",
        t.init_max, "]; they must be finite with init_min <= init_max"));
  }
  if (a.has_quant_delay()) {
    if (a.quant_delay() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("activation_params.quant_delay is ", a.quant_delay(),
                       "; it must be >= 0"));
    }
    t.quant_delay = a.quant_delay();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StaticRangeOptions> ResolveStaticRangeOptions(
    const quantd::v1::QuantizeConfig& config) {
  std::vector<std::string> tracking = TrackingFields(config.weight_params());
  if (!tracking.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight_params.", absl::StrJoin(tracking, ", weight_params."),
        " cannot be used with STATIC_RANGE: weights are quantized once, "
        "offline, from their values in the model (last value), so there is "
        "no range tracking over steps (these fields apply to "
        "activation_params, for calibration)"));
  }
  QUANTD_ASSIGN_OR_RETURN(WeightPassOptions w,
                          ResolveWeightPassOptions(config));
  StaticRangeOptions options;
  static_cast<WeightPassOptions&>(options) = std::move(w);
  // Bits follow each unit's precision (SpecFor), unless the params set them.
  QUANTD_RETURN_IF_ERROR(
      ResolveActivations(config.activation_params(), &options));
  const QuantOpParams& a = config.activation_params();
  if (a.has_bits() && a.bits() > 4) {
    std::string four_bit;
    if (HasFourBitActivations(options.precision)) {
      four_bit = "the model-wide quantization_precision is PRECISION_W4A4";
    }
    for (int i = 0;
         four_bit.empty() && i < static_cast<int>(options.units.size()); ++i) {
      if (HasFourBitActivations(options.units[i].quantization_precision())) {
        four_bit = absl::StrCat(DescribeUnitEntry(i, options.units[i]),
                                " is PRECISION_W4A4");
      }
    }
    if (!four_bit.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "activation_params.bits is ", a.bits(), " but ", four_bit,
          ": 4-bit activations are stored as UINT4, which holds at most 4 "
          "bits; leave activation_params.bits unset or set it <= 4"));
    }
  }
  return options;
}

absl::StatusOr<ActivationRanges> RangesFromCalibration(
    const quantd::v1::CalibrationResult& calibration) {
  ActivationRanges ranges;
  for (int i = 0; i < calibration.ranges_size(); ++i) {
    const quantd::v1::TensorRange& r = calibration.ranges(i);
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration.ranges[", i, "] ('", r.tensor_name(), "'): ", why));
    };
    if (r.tensor_name().empty()) return bad("tensor_name is empty");
    if (ranges.contains(r.tensor_name())) {
      return bad("the tensor has more than one range");
    }
    if (r.unbounded()) {
      ActivationRange mask;
      mask.unbounded = true;
      ranges.emplace(r.tensor_name(), mask);
      continue;
    }
    if (!std::isfinite(r.min()) || !std::isfinite(r.max()) ||
        r.min() > r.max()) {
      return bad(absl::StrCat("range [", r.min(), ", ", r.max(),
                              "] must be finite with min <= max"));
    }
    ActivationRange range{r.min(), r.max(), r.axis(), 0};
    if (r.channel_min_size() != r.channel_max_size()) {
      return bad(absl::StrCat(r.channel_min_size(), " channel_min but ",
                              r.channel_max_size(), " channel_max values"));
    }
    for (int c = 0; c < r.channel_min_size(); ++c) {
      const float lo = r.channel_min(c), hi = r.channel_max(c);
      if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi) {
        return bad(absl::StrCat("channel ", c, " range [", lo, ", ", hi,
                                "] must be finite with min <= max"));
      }
      range.min = std::min(range.min, lo);
      range.max = std::max(range.max, hi);
    }
    range.channels = r.channel_min_size();
    ranges.emplace(r.tensor_name(), range);
  }
  return ranges;
}

}  // namespace quantd::passes
