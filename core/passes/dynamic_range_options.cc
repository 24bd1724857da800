#include "core/passes/dynamic_range_options.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quantd::passes {

bool HasFourBitWeights(tensorflow::quantization::QuantizationPrecision p) {
  return p == tensorflow::quantization::PRECISION_W4A8 ||
         p == tensorflow::quantization::PRECISION_W4A4;
}

bool HasFourBitActivations(tensorflow::quantization::QuantizationPrecision p) {
  return p == tensorflow::quantization::PRECISION_W4A4;
}

namespace {

absl::Status CheckWeightBitsFitPrecision(
    const quantd::v1::QuantizeConfig& config) {
  const quantd::v1::QuantOpParams& w = config.weight_params();
  if (!w.has_bits() || w.bits() <= 4) return absl::OkStatus();
  std::string four_bit;
  if (HasFourBitWeights(config.options().quantization_precision())) {
    four_bit =
        absl::StrCat("the model-wide quantization_precision is ",
                     tensorflow::quantization::QuantizationPrecision_Name(
                         config.options().quantization_precision()));
  }
  const auto& units = config.options().unit_wise_quantization_precision();
  for (int i = 0; four_bit.empty() && i < units.size(); ++i) {
    if (HasFourBitWeights(units[i].quantization_precision())) {
      four_bit = absl::StrCat(DescribeUnitEntry(i, units[i]), " is 4-bit");
    }
  }
  if (four_bit.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "weight_params.bits is ", w.bits(), " but ", four_bit,
      ": 4-bit weights are stored as INT4, which holds at most 4 bits; leave "
      "weight_params.bits unset (4 for W4 units, 8 for W8A8) or set it <= 4"));
}

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

absl::Status ResolveBlockSize(const QuantOpParams& w,
                              tensorflow::quantization::OpSet op_set,
                              WeightQuantOptions* weights) {
  if (!w.has_block_size() || w.block_size() == 0) return absl::OkStatus();
  const int32_t b = w.block_size();
  if (b < kMinWeightBlockSize || b > kMaxWeightBlockSize || (b & (b - 1))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight_params.block_size is ", b,
        "; it must be 0 (per channel) or a "
        "power of two from ",
        kMinWeightBlockSize, " to ", kMaxWeightBlockSize,
        " (ONNX Runtime's blocked DequantizeLinear takes no other size)"));
  }
  if (w.has_per_channel() && !w.per_channel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight_params.block_size is ", b,
        " but weight_params.per_channel is false: blocks give every output "
        "channel several scales, per_channel = false asks for one scale for "
        "the whole tensor; set one or the other"));
  }
  if (op_set != tensorflow::quantization::TF) {
    return absl::UnimplementedError(absl::StrCat(
        "weight_params.block_size is not implemented for op_set ",
        tensorflow::quantization::OpSet_Name(op_set),
        ": its lowering takes one weight scale per output channel (",
        op_set == tensorflow::quantization::XLA ? "MatMulInteger / ConvInteger"
                                                : "the uniform quantized ops",
        "); use op_set TF, whose DequantizeLinear-21 takes blocks"));
  }
  weights->block_size = b;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DynamicRangeOptions> ResolveDynamicRangeOptions(
    const quantd::v1::QuantizeConfig& config) {
  absl::Status s = CheckNotForDynamicRange(config);
  if (!s.ok()) return s;
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
  return ResolveWeightSideOptions(config);
}

absl::StatusOr<DynamicRangeOptions> ResolveWeightSideOptions(
    const quantd::v1::QuantizeConfig& config) {
  absl::Status s = CheckWeightBitsFitPrecision(config);
  if (!s.ok()) return s;
  DynamicRangeOptions options;
  options.precision = config.options().quantization_precision() ==
                              tensorflow::quantization::PRECISION_UNSPECIFIED
                          ? tensorflow::quantization::PRECISION_W8A8
                          : config.options().quantization_precision();
  options.op_set =
      config.options().op_set() == tensorflow::quantization::OP_SET_UNSPECIFIED
          ? tensorflow::quantization::TF
          : config.options().op_set();
  options.units.assign(
      config.options().unit_wise_quantization_precision().begin(),
      config.options().unit_wise_quantization_precision().end());
  const int64_t min = config.options().min_num_elements_for_weights();
  if (min < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_num_elements_for_weights is ", min,
                     "; use 0 for the default (", kDefaultMinElementsForWeights,
                     "), -1 for no minimum, or a positive count"));
  }
  options.min_num_elements =
      min == 0 ? kDefaultMinElementsForWeights : (min == -1 ? 0 : min);

  const QuantOpParams& w = config.weight_params();
  WeightQuantOptions& weights = options.weights;
  if (w.has_bits()) {
    if (w.bits() < 2 || w.bits() > 8) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight_params.bits is ", w.bits(), "; it must be in 2..8"));
    }
    weights.spec.bits = w.bits();
    weights.bits_from_params = true;
  }
  if (w.has_symmetric()) weights.spec.symmetric = w.symmetric();
  if (w.has_narrow_range()) weights.spec.narrow_range = w.narrow_range();
  if (w.has_per_channel()) weights.per_channel = w.per_channel();
  weights.producer_scope = w.producer_scope();
  weights.consumer_scope = w.consumer_scope();
  s = ResolveBlockSize(w, options.op_set, &weights);
  if (!s.ok()) return s;
  return options;
}

}  // namespace quantd::passes
