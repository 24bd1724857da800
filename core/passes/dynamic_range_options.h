// The options of the DYNAMIC_RANGE weight pass, resolved from a request:
// documented defaults applied, and every field DYNAMIC_RANGE cannot honour
// refused by name.
#ifndef QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_
#define QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/graph/function_inline.h"
#include "core/numerics/quant_params.h"
#include "core/passes/unit_precision.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// The block sizes weight_params.block_size accepts (powers of two): ONNX
// Runtime's blocked DequantizeLinear refuses smaller or odd sizes.
inline constexpr int32_t kMinWeightBlockSize = 16;
inline constexpr int32_t kMaxWeightBlockSize = 4096;

// min_num_elements_for_weights when the request leaves it 0.
inline constexpr int64_t kDefaultMinElementsForWeights = 1024;

// True for the precisions with 4-bit weights (W4A8, W4A4): their weights
// are stored as packed ONNX INT4 (opset 21).
bool HasFourBitWeights(tensorflow::quantization::QuantizationPrecision p);
// True for W4A4 (4-bit activations too).
bool HasFourBitActivations(tensorflow::quantization::QuantizationPrecision p);

struct WeightQuantOptions {
  // Defaults: int8 storage, symmetric, narrow range [-127, 127]. `bits` is
  // weight_params.bits when set, else 8; SpecFor() gives a unit's grid.
  numerics::QuantSpec spec;
  // weight_params.bits was set: it applies to every precision (it must be
  // <= 4 when some unit is 4-bit).
  bool bits_from_params = false;
  // The grid of a unit's weights at `precision`: `spec`, with 4 bits for
  // W4A8 / W4A4 unless weight_params.bits says otherwise. INT4 grid narrow
  // range is [-7, 7].
  numerics::QuantSpec SpecFor(
      tensorflow::quantization::QuantizationPrecision precision) const {
    numerics::QuantSpec s = spec;
    if (HasFourBitWeights(precision) && !bits_from_params) s.bits = 4;
    return s;
  }
  bool per_channel = true;
  // > 0: MatMul and Gemm weights get one scale per block of this many values
  // along their input axis (DequantizeLinear-21 block_size); Conv weights
  // stay per channel.
  int64_t block_size = 0;
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
  // Where the nodes of inlined local functions came from (the caller ran
  // graph::InlineLocalFunctions before the pass), for func_name scoping.
  graph::InlinedFunctions inlined;
  // options.op_set (OP_SET_UNSPECIFIED resolves to TF): TF = QDQ around
  // float ops, XLA = ConvInteger/MatMulInteger + explicit rescale
  // (passes/xla_lowering.h).
  tensorflow::quantization::OpSet op_set = tensorflow::quantization::TF;
};

// INVALID_ARGUMENT naming the field for: min_num_elements_for_weights < -1,
// weight_params.bits outside 2..8 (or above 4 when the model-wide precision
// or a unit_wise_quantization_precision entry is W4A8 / W4A4: INT4 storage
// holds 4 bits), weight_params range-tracking fields (moving_avg, ema_decay,
// init_min, init_max, quant_delay), any activation_params field, and a
// non-empty calibration; weight_params.block_size that is not a power of two
// in [kMinWeightBlockSize, kMaxWeightBlockSize] or comes with per_channel =
// false (UNIMPLEMENTED with op_set XLA or UNIFORM_QUANTIZED). UNIMPLEMENTED
// for PRECISION_W4A4, model-wide or in
// a unit entry: DYNAMIC_RANGE quantizes activations with
// DynamicQuantizeLinear, whose output is uint8 only, so 4-bit activations
// cannot be expressed.
absl::StatusOr<DynamicRangeOptions> ResolveDynamicRangeOptions(
    const quantd::v1::QuantizeConfig& config);

// The weight side alone (options, min_num_elements_for_weights,
// weight_params, unit entries), shared with STATIC_RANGE: no check of
// activation_params, calibration or 4-bit activations.
absl::StatusOr<DynamicRangeOptions> ResolveWeightSideOptions(
    const quantd::v1::QuantizeConfig& config);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_DYNAMIC_RANGE_OPTIONS_H_
