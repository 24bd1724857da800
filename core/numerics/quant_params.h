// Offline choice of quantization parameters (scale, zero point) from float
// ranges, and the reference quantize/dequantize of weight tensors. The math
// is derived in docs/numerics.md; every function names its contract.
#ifndef QUANTD_CORE_NUMERICS_QUANT_PARAMS_H_
#define QUANTD_CORE_NUMERICS_QUANT_PARAMS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace quantd::numerics {

// How values are quantized: the integer grid and how the range maps onto it.
struct QuantSpec {
  int bits = 8;              // 2..8.
  bool is_signed = true;     // Stored as a signed type (int8/int4) or unsigned.
  bool symmetric = true;     // Zero maps to the grid's centre.
  bool narrow_range = true;  // Drop the grid's lowest value (int8: -128).
};

// The closed integer interval [quant_min, quant_max] values are stored in.
struct QuantGrid {
  int32_t quant_min = 0;
  int32_t quant_max = 0;
};

// real = scale * (q - zero_point); scale > 0; zero_point inside the grid.
struct QuantParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
};

// Validates bits in [2, 8]. Signed grids are the unsigned ones shifted by
// -2^(bits-1): int8 narrow = [-127, 127], full = [-128, 127]; uint8 narrow =
// [1, 255], full = [0, 255].
absl::StatusOr<QuantGrid> GridFor(const QuantSpec& spec);

// TensorFlow's FakeQuantWithMinMaxVars range nudging, on the unsigned grid
// [quant_min, quant_max] (see docs/numerics.md). min <= 0 <= max is not
// required: the nudged range always contains zero exactly. A degenerate range
// (max <= min, e.g. all zeros) gives [0, 0] with scale 1 and zero point
// quant_min, so FakeQuant returns 0 instead of dividing by zero.
struct NudgedRange {
  float nudged_min = 0.0f;
  float nudged_max = 0.0f;
  float scale = 1.0f;
  int32_t nudged_zero_point = 0;  // On the unsigned grid.
};
NudgedRange Nudge(float min, float max, int32_t quant_min, int32_t quant_max);

// FakeQuant(x) as TensorFlow's (tf.contrib-era) kernel computes it, in float:
// floor((clamp(x, nudged_min, nudged_max) - nudged_min) / scale + 0.5) * scale
// + nudged_min. Ties round up (toward +inf), unlike ONNX's half to even.
float FakeQuant(float x, const NudgedRange& range);

// Range collection of tf.contrib.quantize (quant_ops.py) for one batch:
// asymmetric ranges are widened to include zero; symmetric ranges use the
// `ratio` rule. Returns {range_min, range_max}.
std::pair<float, float> AdjustRange(float batch_min, float batch_max, int bits,
                                    bool symmetric, bool narrow_range);

// Scale and zero point for [min, max] on spec's grid. The range is first
// widened to contain zero. Symmetric: zero point is the grid centre (0 when
// signed) and scale = max(|min|, |max|) / ((quant_max - quant_min) / 2).
// Asymmetric: TensorFlow's nudging (zero exactly representable). A range of
// all zeros gives scale 1 (every value quantizes exactly to the zero point).
// INVALID_ARGUMENT for non-finite ranges or bad bits.
absl::StatusOr<QuantParams> ChooseQuantParams(float min, float max,
                                              const QuantSpec& spec);

// ChooseQuantParams without its checks, for kernels choosing many params:
// `min` <= `max` must be finite and `grid` must be GridFor(spec). The scale
// is infinite when the range is too wide for a float scale (ChooseQuantParams
// then fails); the caller checks.
QuantParams ChooseQuantParamsUnchecked(float min, float max,
                                       const QuantSpec& spec,
                                       const QuantGrid& grid);

// How a weight's range is chosen for each tensor, channel or block
// (weight_params.range). Disabled (steps 0): the values' own extremes, so
// nothing is clipped. Enabled: the candidates [p * min, p * max] for
// p = 1, 1 - step, 1 - 2 * step, ... (`steps` of them, step =
// (1 - min_ratio) / (steps - 1)), and the one whose rounding error
// sum((x - dq(q(x)))^2) over the values is least: a few outliers are
// clipped so that the grid is finer for all the rest (the "mse" search of
// GPTQ's reference quantizer, with the squared error).
struct RangeSearch {
  int steps = 0;
  float min_ratio = 1.0f;
  bool enabled() const { return steps > 1; }
};
// weight_params.range WEIGHT_RANGE_MSE: p = 1, 0.98, ..., 0.2.
inline constexpr RangeSearch kMseRangeSearch{41, 0.2f};

// The params of the `n` values v[0], v[stride], ..., v[(n - 1) * stride] on
// spec's grid: ChooseQuantParams over their [min, max] (n = 0: all zeros),
// or with `search` the candidate with the least squared rounding error (the
// widest among equals). INVALID_ARGUMENT as ChooseQuantParams, for values
// that are not finite.
absl::StatusOr<QuantParams> ChooseParamsOver(const float* v, int64_t n,
                                             int64_t stride,
                                             const QuantSpec& spec,
                                             const RangeSearch& search = {});

// ONNX QuantizeLinear on one value: round(x / scale) half to even, plus the
// zero point, saturated to the grid. NaN maps to the zero point. Assumes the
// default FE_TONEAREST rounding mode.
int32_t QuantizeValue(float x, const QuantParams& params,
                      const QuantGrid& grid);

// real = scale * (q - zero_point).
inline float DequantizeValue(int32_t q, const QuantParams& params) {
  return params.scale * static_cast<float>(q - params.zero_point);
}

// Splits a shape around a channel axis: element i of a row-major tensor has
// channel (i / inner) % channels.
struct ChannelLayout {
  int64_t outer = 1;
  int64_t channels = 1;
  int64_t inner = 1;
};
// INVALID_ARGUMENT when axis is outside [-rank, rank).
absl::StatusOr<ChannelLayout> LayoutFor(absl::Span<const int64_t> shape,
                                        int axis);

// A grid value as the byte QuantizedTensor::values stores: its int8 bit
// pattern when `is_signed`, else its uint8 one.
char ToByte(int32_t q, bool is_signed);

// A quantized tensor: one byte per value (int8 or uint8 bit pattern, ready
// for TensorProto.raw_data), and one QuantParams per channel (a single entry
// when per-tensor).
struct QuantizedTensor {
  std::string values;
  std::vector<QuantParams> params;
  int axis = -1;  // -1: per-tensor. Otherwise the non-negative channel axis.
  QuantSpec spec;
  // > 0: blocked along `axis` (ONNX DequantizeLinear-21 block_size). Then
  // `params` is laid out like the scale tensor: the shape with dimension
  // `axis` replaced by BlockCount(shape[axis], block_size), row-major.
  int64_t block_size = 0;
};

// ceil(dim / block_size): the blocks one row of `dim` values splits into
// (the last one may be short).
inline int64_t BlockCount(int64_t dim, int64_t block_size) {
  return (dim + block_size - 1) / block_size;
}

// The shape of the scale (and zero point) tensor of a blocked quantization
// of `shape`: dimension `axis` becomes BlockCount(shape[axis], block_size).
std::vector<int64_t> BlockedParamShape(absl::Span<const int64_t> shape,
                                       int axis, int64_t block_size);

// Quantizes `data` of `shape` with ChooseQuantParams + QuantizeValue. With
// per_channel, one QuantParams per slice along `axis` (may be negative), each
// from that channel's own [min, max]; otherwise one entry and `axis` is
// ignored. INVALID_ARGUMENT when the shape does not match data.size(), the
// axis is bad, or data holds NaN or infinity.
absl::StatusOr<QuantizedTensor> QuantizeTensor(absl::Span<const float> data,
                                               absl::Span<const int64_t> shape,
                                               bool per_channel, int axis,
                                               const QuantSpec& spec);

// Quantizes `data` of `shape` with one QuantParams per block of `block_size`
// consecutive values along `axis` (may be negative), each from that block's
// own [min, max]: the scheme of DequantizeLinear-21 with block_size.
// INVALID_ARGUMENT as QuantizeTensor, and for block_size < 1.
absl::StatusOr<QuantizedTensor> QuantizeTensorBlocked(
    absl::Span<const float> data, absl::Span<const int64_t> shape, int axis,
    int64_t block_size, const QuantSpec& spec);

// The float values a QuantizedTensor stands for (same shape as its source).
// Empty when `shape` does not fit `q`.
std::vector<float> DequantizeTensor(const QuantizedTensor& q,
                                    absl::Span<const int64_t> shape);

// Error of `approx` against `reference`: mean squared error and
// SQNR = 10*log10(sum(ref^2) / sum((ref - approx)^2)) in dB (+inf when the
// error is exactly zero; 0 signal with nonzero error gives -inf). Sizes must
// match; when they do not, both fields are NaN.
struct ErrorStats {
  double mse = 0.0;
  double sqnr_db = 0.0;
};
ErrorStats MeasureError(absl::Span<const float> reference,
                        absl::Span<const float> approx);

// The ErrorStats of `count` values whose sum(ref^2) is `signal` and
// sum((ref - approx)^2) is `noise`, with MeasureError's edge cases.
ErrorStats ErrorFromSums(double signal, double noise, int64_t count);

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_QUANT_PARAMS_H_
