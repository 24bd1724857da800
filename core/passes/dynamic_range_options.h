// The options of the DYNAMIC_RANGE weight pass, resolved from a request:
// documented defaults applied, and every field DYNAMIC_RANGE cannot honour
// refused by name.
#ifndef QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_
#define QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/numerics/quant_params.h"
#include "core/passes/unit_precision.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// min_num_elements_for_weights when the request leaves it 0.
inline constexpr int64_t kDefaultMinElementsForWeights = 1024;

struct WeightQuantOptions {
  // Defaults: int8 storage, symmetric, narrow range [-127, 127].
  numerics::QuantSpec spec;
  bool per_channel = true;
  // Weights whose tensor name does not start with producer_scope, or with a
  // consumer whose node name does not start with consumer_scope, stay float.
  std::string producer_scope;
  std::string consumer_scope;
};

struct DynamicRangeOptions {
  WeightQuantOptions weights;
  // Weights with fewer elements stay float; 0 means no minimum.
  int64_t min_num_elements = kDefaultMinElementsForWeights;
  tensorflow::quantization::QuantizationPrecision precision =
      tensorflow::quantization::PRECISION_W8A8;
  // options.unit_wise_quantization_precision, as given (checked against the
  // model by UnitPrecision::Resolve when a pass starts).
  UnitPrecisionEntries units;
  // options.op_set (OP_SET_UNSPECIFIED resolves to TF): TF = QDQ around
  // float ops, XLA = ConvInteger/MatMulInteger + explicit rescale
  // (passes/xla_lowering.h).
  tensorflow::quantization::OpSet op_set = tensorflow::quantization::TF;
};

// INVALID_ARGUMENT naming the field for: min_num_elements_for_weights < -1,
// weight_params.bits outside 2..8, weight_params range-tracking fields
// (moving_avg, ema_decay, init_min, init_max, quant_delay), any
// activation_params field, and a non-empty calibration.
absl::StatusOr<DynamicRangeOptions> ResolveDynamicRangeOptions(
    const quantd::v1::QuantizeConfig& config);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_
