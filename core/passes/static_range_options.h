// The options of the STATIC_RANGE pass, resolved from a request (documented
// defaults applied, fields it cannot honour refused by name), and the
// activation ranges of a CalibrationResult, checked and keyed by tensor.
#ifndef QUANTD_CORE_PASSES_STATIC_RANGE_OPTIONS_H_
#define QUANTD_CORE_PASSES_STATIC_RANGE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/numerics/quant_params.h"
#include "core/passes/weight_pass_options.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// Where activation quantization points go and on which grid. Defaults: uint8
// asymmetric on the full grid [0, 255] (TensorFlow's nudging), no scopes.
struct ActivationQuantOptions {
  // `bits` is activation_params.bits when set, else 8; SpecFor() gives a
  // point's grid.
  numerics::QuantSpec spec{/*bits=*/8, /*is_signed=*/false,
                           /*symmetric=*/false, /*narrow_range=*/false};
  bool bits_from_params = false;
  // The grid of an activation point at `precision`: 4 bits for W4A4 (stored
  // UINT4 / INT4), unless activation_params.bits says otherwise.
  numerics::QuantSpec SpecFor(
      tensorflow::quantization::QuantizationPrecision precision) const {
    numerics::QuantSpec s = spec;
    if (HasFourBitActivations(precision) && !bits_from_params) s.bits = 4;
    return s;
  }
  // _InsertQuantOp's filters: no point when the producer node's name (a
  // graph input's or initializer's own tensor name) does not start with
  // producer_scope, or when ANY consumer's node name does not start with
  // consumer_scope.
  std::string producer_scope;
  std::string consumer_scope;
};

// How calibration collects activation ranges (tf.contrib's
// MovingAvgQuantize / LastValueQuantize and quant_delay). Calibration
// observers read these; the STATIC_RANGE pass only carries them, since it
// receives finished ranges. Defaults are those tf.contrib's Quantize() uses
// for activations.
struct RangeTrackingOptions {
  bool moving_avg = true;
  float ema_decay = 0.999f;
  float init_min = 0.0f;
  float init_max = 6.0f;
  int64_t quant_delay = 0;  // Steps during which ranges update unquantized.
};

// The weight side is exactly the DYNAMIC_RANGE one (int8 per-channel
// symmetric narrow range by default, min_num_elements_for_weights, units,
// op_set), so the pass hands this object to the shared weight planner as is.
struct StaticRangeOptions : WeightPassOptions {
  ActivationQuantOptions activations;
  RangeTrackingOptions tracking;
};

// Resolves `config` for STATIC_RANGE. Bits default to each unit's
// precision's (W8A8: 8/8, W4A8: weights 4, W4A4: both 4; see SpecFor) and
// weight_params.bits / activation_params.bits override them (INVALID_ARGUMENT
// when above 4 while the model-wide precision or a unit entry needs 4-bit
// storage of that side). weight_params as for DYNAMIC_RANGE;
// its range-tracking fields (moving_avg, ema_decay, init_min, init_max,
// quant_delay) are refused because weights are quantized offline from their
// values. activation_params: bits 2..8; symmetric selects a signed (int8)
// grid with zero point 0; narrow_range; producer/consumer scopes; the
// tracking fields are accepted and checked (ema_decay in (0, 1], init_min <=
// init_max, both finite, quant_delay >= 0) and carried for calibration, and
// are otherwise ignored by the pass. activation_params.per_channel = true is
// UNIMPLEMENTED (QDQ activations are per tensor). Does not look at
// `calibration` (see RangesFromCalibration).
absl::StatusOr<StaticRangeOptions> ResolveStaticRangeOptions(
    const quantd::v1::QuantizeConfig& config);

// One activation tensor's calibrated range. Per-channel calibration ranges
// are merged into [min, max] over all channels (and the per-tensor min/max
// fields); `channels` > 0 records that they were given.
struct ActivationRange {
  float min = 0.0f;
  float max = 0.0f;
  int32_t axis = 0;
  int64_t channels = 0;
  // TensorRange.unbounded: an additive mask; no quantization point, and
  // min/max mean nothing.
  bool unbounded = false;
};
using ActivationRanges = absl::flat_hash_map<std::string, ActivationRange>;

// INVALID_ARGUMENT (naming the tensor) for an empty or repeated tensor_name,
// a non-finite bound, min > max, or channel_min/channel_max of different
// sizes or with a channel whose min > max. An unbounded range carries no
// bounds and is not checked beyond its name.
absl::StatusOr<ActivationRanges> RangesFromCalibration(
    const quantd::v1::CalibrationResult& calibration);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_STATIC_RANGE_OPTIONS_H_
