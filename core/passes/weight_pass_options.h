// The weight side of both quantization passes: which Conv/Gemm/MatMul
// weights are quantized, on which grid, and with which blocks; resolved from
// a request with the documented defaults.
#ifndef QUANTD_CORE_PASSES_WEIGHT_PASS_OPTIONS_H_
#define QUANTD_CORE_PASSES_WEIGHT_PASS_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "core/graph/function_inline.h"
#include "core/numerics/gptq.h"
#include "core/numerics/quant_params.h"
#include "core/passes/input_moments.h"
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
  // along their input axis (DequantizeLinear-21 block_size); so do INT4 Conv
  // weights along their input channels (weight_plan.cc, ApplyBlocks).
  int64_t block_size = 0;
  // weight_params.range: min/max (disabled) or the MSE search of each
  // tensor's, channel's or block's range.
  numerics::RangeSearch range;
  // Weights whose tensor name does not start with producer_scope, or with a
  // consumer whose node name does not start with consumer_scope, stay float.
  std::string producer_scope;
  std::string consumer_scope;
};

// How weight values are rounded onto their grid, after AWQ's factors when
// WeightPassOptions::awq asks for them.
enum class WeightAlgorithm { kRoundToNearest, kGptq };

// The word summaries and reports use: "rtn", "gptq", and for a weight AWQ
// rescaled "awq" (then rounded to nearest) or "awq+gptq".
const char* WeightAlgorithmName(WeightAlgorithm a, bool awq = false);

// The weight side of a pass, shared by both methods: DYNAMIC_RANGE runs on
// it alone, STATIC_RANGE extends it with activations (StaticRangeOptions).
struct WeightPassOptions {
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
  // options.op_set (OP_SET_UNSPECIFIED resolves to TF); the lowering each
  // method applies for it is in op_sets.h.
  tensorflow::quantization::OpSet op_set = tensorflow::quantization::TF;
  WeightAlgorithm algorithm = WeightAlgorithm::kRoundToNearest;
  numerics::GptqOptions gptq;
  // config.cross_check: the calibration statistics keep two folds
  // (InputMoments folds); a weight whose GPTQ loses on the held-out fold is
  // rounded to nearest, a value whose AWQ factors lose is not rescaled.
  bool cross_check = false;
  // config.bias_correction: add each Conv / Gemm weight's expected output
  // shift (ExpectedOutputShift) to its layer's float bias.
  bool bias_correction = false;
  // GPTQ's and bias correction's input statistics, gathered by the caller's
  // calibration and
  // finished (InputMoments::Finish) before the pass; not owned. A weight
  // whose readers have none is rounded to nearest, and its report says
  // why.
  const InputMoments* input_moments = nullptr;
  // weight_algorithm AWQ or AWQ_GPTQ: the caller searches and applies AWQ's
  // factors before the pass (QuantizeJob::Awq); `awq_rescaled` holds the
  // weights it changed (their reports say "awq" or "awq+gptq").
  bool awq = false;
  absl::flat_hash_set<std::string> awq_rescaled;
};

// The weight side of a request, for either method: options.op_set,
// quantization_precision, min_num_elements_for_weights,
// unit_wise_quantization_precision and weight_params (bits, symmetric,
// narrow_range, per_channel, block_size, range, scopes). INVALID_ARGUMENT
// naming the field for min_num_elements_for_weights < -1, weight_params.bits
// outside 2..8 (or above 4 when the model-wide precision or a unit entry is
// W4A8 / W4A4: INT4 storage holds 4 bits), weight_params.block_size that is
// not a power of two in [kMinWeightBlockSize, kMaxWeightBlockSize] or comes
// with per_channel = false; UNIMPLEMENTED for block_size with op_set XLA or
// UNIFORM_QUANTIZED. weight_algorithm and gptq: INVALID_ARGUMENT for an
// unknown algorithm, gptq settings without GPTQ, cross_check without GPTQ
// or AWQ, dampening outside [0, 1], GPTQ with per_channel = false;
// UNIMPLEMENTED for GPTQ with an op_set other than TF. The range-tracking
// fields of weight_params are each method's to refuse (with its own reason).
absl::StatusOr<WeightPassOptions> ResolveWeightPassOptions(
    const quantd::v1::QuantizeConfig& config);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_WEIGHT_PASS_OPTIONS_H_
