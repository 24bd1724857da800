#include "core/passes/weight_pass_options.h"

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/passes/op_sets.h"

namespace quantd::passes {

bool HasFourBitWeights(tensorflow::quantization::QuantizationPrecision p) {
  return p == tensorflow::quantization::PRECISION_W4A8 ||
         p == tensorflow::quantization::PRECISION_W4A4;
}

bool HasFourBitActivations(tensorflow::quantization::QuantizationPrecision p) {
  return p == tensorflow::quantization::PRECISION_W4A4;
}

namespace {

using quantd::v1::QuantOpParams;

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
  // Blocks live in DequantizeLinear-21; only the QDQ lowering keeps it. Every
  // op set has a STATIC_RANGE row, and its lowering is the op set's.
  const OpSetRow* row = FindOpSet(Method::kStaticRange, op_set);
  if (row != nullptr && row->lowering != Lowering::kQdq) {
    return absl::UnimplementedError(absl::StrCat(
        "weight_params.block_size is not implemented for op_set ",
        tensorflow::quantization::OpSet_Name(op_set), ": its lowering (",
        row->lowered_ops,
        ") takes one weight scale per output channel; use op_set TF, whose "
        "DequantizeLinear-21 takes blocks"));
  }
  weights->block_size = b;
  return absl::OkStatus();
}

absl::Status ResolveWeightAlgorithm(const quantd::v1::QuantizeConfig& config,
                                    WeightPassOptions* options) {
  const quantd::v1::WeightAlgorithm a = config.weight_algorithm();
  if (!quantd::v1::WeightAlgorithm_IsValid(a)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_algorithm ", a, " is not a known algorithm"));
  }
  options->awq = a == quantd::v1::WEIGHT_ALGORITHM_AWQ ||
                 a == quantd::v1::WEIGHT_ALGORITHM_AWQ_GPTQ;
  const bool gptq = a == quantd::v1::WEIGHT_ALGORITHM_GPTQ ||
                    a == quantd::v1::WEIGHT_ALGORITHM_AWQ_GPTQ;
  if (config.cross_check() && !gptq && !options->awq) {
    return absl::InvalidArgumentError(
        "cross_check judges GPTQ's rounding and AWQ's factors, but "
        "weight_algorithm is not WEIGHT_ALGORITHM_GPTQ, WEIGHT_ALGORITHM_AWQ "
        "or WEIGHT_ALGORITHM_AWQ_GPTQ");
  }
  options->cross_check = config.cross_check();
  if (!gptq) {
    if (config.has_gptq()) {
      return absl::InvalidArgumentError(
          "gptq settings were given but weight_algorithm is not "
          "WEIGHT_ALGORITHM_GPTQ or WEIGHT_ALGORITHM_AWQ_GPTQ");
    }
    return absl::OkStatus();
  }
  const char* name = options->awq ? "AWQ_GPTQ" : "GPTQ";
  if (!options->weights.per_channel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight_algorithm ", name,
        " rounds each output channel (or block) on its own grid, but "
        "weight_params.per_channel is false; leave it unset or true"));
  }
  if (options->op_set != tensorflow::quantization::TF) {
    return absl::UnimplementedError(absl::StrCat(
        "weight_algorithm ", name, " is implemented for op_set TF only, not ",
        tensorflow::quantization::OpSet_Name(options->op_set)));
  }
  const quantd::v1::GptqConfig& g = config.gptq();
  if (g.has_dampening()) {
    if (!(g.dampening() >= 0 && g.dampening() <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gptq.dampening is ", g.dampening(), "; it must be in [0, 1]"));
    }
    options->gptq.dampening = g.dampening();
  }
  options->gptq.act_order = g.act_order();
  options->algorithm = WeightAlgorithm::kGptq;
  return absl::OkStatus();
}

}  // namespace

const char* WeightAlgorithmName(WeightAlgorithm a, bool awq) {
  switch (a) {
    case WeightAlgorithm::kGptq:
      return awq ? "awq+gptq" : "gptq";
    case WeightAlgorithm::kRoundToNearest:
      break;
  }
  return awq ? "awq" : "rtn";
}

absl::StatusOr<WeightPassOptions> ResolveWeightPassOptions(
    const quantd::v1::QuantizeConfig& config) {
  QUANTD_RETURN_IF_ERROR(CheckWeightBitsFitPrecision(config));
  WeightPassOptions options;
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
  QUANTD_RETURN_IF_ERROR(ResolveBlockSize(w, options.op_set, &weights));
  if (w.has_range()) {
    switch (w.range()) {
      case quantd::v1::WEIGHT_RANGE_UNSPECIFIED:
      case quantd::v1::WEIGHT_RANGE_MIN_MAX:
        break;
      case quantd::v1::WEIGHT_RANGE_MSE:
        weights.range = numerics::kMseRangeSearch;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "weight_params.range ", w.range(),
            " is not a known range method (WEIGHT_RANGE_MIN_MAX or "
            "WEIGHT_RANGE_MSE)"));
    }
  }
  QUANTD_RETURN_IF_ERROR(ResolveWeightAlgorithm(config, &options));
  options.gptq.range = weights.range;
  options.bias_correction = config.bias_correction();
  return options;
}

}  // namespace quantd::passes
