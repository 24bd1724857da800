// Offline choice of quantization parameters and the reference quantizer.
// Formulas and their derivation: docs/numerics.md.
#include "core/numerics/quant_params.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/multiversion.h"
#include "core/base/status_macros.h"

namespace quantd::numerics {
namespace {

constexpr int kMinBits = 2;
constexpr int kMaxBits = 8;

absl::Status ValidateBits(int bits) {
  if (bits < kMinBits || bits > kMaxBits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bits must be in [", kMinBits, ", ", kMaxBits, "], got ", bits));
  }
  return absl::OkStatus();
}

// The unsigned grid of `spec`; the signed one is this shifted by
// -SignedOffset(bits). Nudging always runs on the unsigned grid, as in TF.
QuantGrid UnsignedGrid(const QuantSpec& spec) {
  return QuantGrid{spec.narrow_range ? 1 : 0, (1 << spec.bits) - 1};
}
int32_t SignedOffset(int bits) { return 1 << (bits - 1); }

// Elements of `shape`, or -1 when a dimension is negative.
int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

// Symmetric: zero on the grid's centre, the larger magnitude on its edge.
QuantParams SymmetricParams(float min, float max, const QuantSpec& spec,
                            const QuantGrid& grid) {
  QuantParams params;
  params.zero_point = spec.is_signed ? 0 : SignedOffset(spec.bits);
  const float half_width =
      static_cast<float>(grid.quant_max - grid.quant_min) / 2.0f;
  params.scale = std::max(std::fabs(min), std::fabs(max)) / half_width;
  return params;
}

// Asymmetric: TF nudging on the unsigned grid, then shifted when signed.
QuantParams AsymmetricParams(float min, float max, const QuantSpec& spec) {
  const QuantGrid unsigned_grid = UnsignedGrid(spec);
  const NudgedRange nudged =
      Nudge(min, max, unsigned_grid.quant_min, unsigned_grid.quant_max);
  QuantParams params;
  params.scale = nudged.scale;
  params.zero_point =
      nudged.nudged_zero_point - (spec.is_signed ? SignedOffset(spec.bits) : 0);
  return params;
}

// Running [min, max] of one channel. Comparisons skip NaN, which the caller
// detects separately, so the loop stays branch-light.
struct Range {
  float min = std::numeric_limits<float>::infinity();
  float max = -std::numeric_limits<float>::infinity();
  void Add(float v) {
    min = v < min ? v : min;
    max = v > max ? v : max;
  }
};

// One pass over `data` collecting each channel's range; false if it holds NaN.
bool CollectRanges(absl::Span<const float> data, const ChannelLayout& layout,
                   std::vector<Range>& ranges) {
  bool has_nan = false;
  const float* p = data.data();
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t c = 0; c < layout.channels; ++c) {
      Range& r = ranges[c];
      for (int64_t i = 0; i < layout.inner; ++i, ++p) {
        has_nan |= std::isnan(*p);
        r.Add(*p);
      }
    }
  }
  return !has_nan;
}

// Stores q as one byte with the bit pattern of int8 or uint8.
int32_t FromByte(char b, bool is_signed) {
  return is_signed ? static_cast<int32_t>(static_cast<int8_t>(b))
                   : static_cast<int32_t>(static_cast<uint8_t>(b));
}

}  // namespace

absl::StatusOr<QuantGrid> GridFor(const QuantSpec& spec) {
  QUANTD_RETURN_IF_ERROR(ValidateBits(spec.bits));
  QuantGrid grid = UnsignedGrid(spec);
  if (spec.is_signed) {
    grid.quant_min -= SignedOffset(spec.bits);
    grid.quant_max -= SignedOffset(spec.bits);
  }
  return grid;
}

NudgedRange Nudge(float min, float max, int32_t quant_min, int32_t quant_max) {
  NudgedRange out;
  if (!(max > min)) {  // Also catches NaN; TF would divide by zero here.
    out.nudged_zero_point = quant_min;
    return out;
  }
  // Float throughout, operation for operation as TF's kernel, so that results
  // agree bit for bit.
  const float quant_min_float = static_cast<float>(quant_min);
  const float quant_max_float = static_cast<float>(quant_max);
  out.scale = (max - min) / (quant_max_float - quant_min_float);
  const float zero_point_from_min = quant_min_float - min / out.scale;
  // NaN when the scale underflows to 0 with min = 0 (0 / 0): min = 0 is
  // zero point quant_min. TF's kernel rounds the NaN into an int (undefined).
  if (!(zero_point_from_min >= quant_min_float)) {
    out.nudged_zero_point = quant_min;
  } else if (zero_point_from_min > quant_max_float) {
    out.nudged_zero_point = quant_max;
  } else {
    // std::round: half away from zero (TF's StdRound).
    out.nudged_zero_point =
        static_cast<int32_t>(std::round(zero_point_from_min));
  }
  const float zero_point_float = static_cast<float>(out.nudged_zero_point);
  out.nudged_min = (quant_min_float - zero_point_float) * out.scale;
  out.nudged_max = (quant_max_float - zero_point_float) * out.scale;
  return out;
}

float FakeQuant(float x, const NudgedRange& range) {
  const float clamped =
      std::min(std::max(x, range.nudged_min), range.nudged_max);
  const float shifted = clamped - range.nudged_min;
  return std::floor(shifted / range.scale + 0.5f) * range.scale +
         range.nudged_min;
}

std::pair<float, float> AdjustRange(float batch_min, float batch_max, int bits,
                                    bool symmetric, bool narrow_range) {
  if (!symmetric) {
    return {std::min(batch_min, 0.0f), std::max(batch_max, 0.0f)};
  }
  // Full-range two's complement has one more negative step than positive
  // ones, so the negative side may reach a little further (quant_ops.py).
  const float steps = static_cast<float>(1 << bits);
  const float ratio = narrow_range ? -1.0f : -(steps - 2.0f) / steps;
  return {std::min(batch_min, batch_max / ratio),
          std::max(batch_max, batch_min * ratio)};
}

absl::StatusOr<QuantParams> ChooseQuantParams(float min, float max,
                                              const QuantSpec& spec) {
  QUANTD_ASSIGN_OR_RETURN(QuantGrid grid, GridFor(spec));
  if (!std::isfinite(min) || !std::isfinite(max)) {
    return absl::InvalidArgumentError(
        absl::StrCat("range must be finite, got [", min, ", ", max, "]"));
  }
  if (min > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("range min ", min, " > max ", max));
  }
  const QuantParams params = ChooseQuantParamsUnchecked(min, max, spec, grid);
  if (!std::isfinite(params.scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("range [", std::min(min, 0.0f), ", ", std::max(max, 0.0f),
                     "] is too wide for a float scale"));
  }
  return params;
}

QuantParams ChooseQuantParamsUnchecked(float min, float max,
                                       const QuantSpec& spec,
                                       const QuantGrid& grid) {
  // Zero must be exactly representable (padding, ReLU outputs), so the range
  // always contains it.
  min = std::min(min, 0.0f);
  max = std::max(max, 0.0f);
  QuantParams params = spec.symmetric ? SymmetricParams(min, max, spec, grid)
                                      : AsymmetricParams(min, max, spec);
  // An all-zero range (or one so small the scale underflows): any scale maps
  // every value to the zero point; 1 keeps dequantization well defined.
  if (!(params.scale > 0.0f)) params.scale = 1.0f;
  return params;
}

int32_t QuantizeValue(float x, const QuantParams& params,
                      const QuantGrid& grid) {
  // Rounding and saturation happen in float so that huge quotients cannot
  // overflow the integer conversion.
  const float q =
      std::nearbyint(x / params.scale) + static_cast<float>(params.zero_point);
  if (std::isnan(q)) return params.zero_point;
  const float clamped =
      std::min(std::max(q, static_cast<float>(grid.quant_min)),
               static_cast<float>(grid.quant_max));
  return static_cast<int32_t>(clamped);
}

namespace {

// sum((x - dq(q(x)))^2) over v[0, n), q as QuantizeValue computes it: a
// clamp to the grid before rounding gives the same integer (rounding is
// monotonic and the bounds are integers), and adding then subtracting
// 1.5 * 2^23 rounds half to even exactly for the clamped |y| < 2^22, so the
// loop needs no libm call. The squares go to kLanes sums in a fixed order
// (value i to lane i % kLanes), so the loop vectorises and every clone
// (fp-contract=off: no FMA in one and not another) adds the same numbers
// the same way.
constexpr int kLanes = 8;
QUANTD_EXACT_CLONES double SquaredError(const float* v, int64_t n, float scale,
                                        float zero_point, float lo, float hi) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23.
  double acc[kLanes] = {};
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float x = v[i + k];
      const float y = std::min(std::max(x / scale, lo), hi);
      const float r = (y + kRound) - kRound;
      const double e = static_cast<double>(x - scale * r);
      acc[k] += e * e;
    }
  }
  for (int64_t i = whole; i < n; ++i) {
    const float x = v[i];
    const float y = std::min(std::max(x / scale, lo), hi);
    const float r = (y + kRound) - kRound;
    const double e = static_cast<double>(x - scale * r);
    acc[i - whole] += e * e;
  }
  double sum = 0.0;
  for (double a : acc) sum += a;
  return sum;
}

double RoundingError(const float* v, int64_t n, const QuantParams& p,
                     const QuantGrid& grid) {
  const float zp = static_cast<float>(p.zero_point);
  return SquaredError(v, n, p.scale, zp,
                      static_cast<float>(grid.quant_min) - zp,
                      static_cast<float>(grid.quant_max) - zp);
}

}  // namespace

absl::StatusOr<QuantParams> ChooseParamsOver(const float* v, int64_t n,
                                             int64_t stride,
                                             const QuantSpec& spec,
                                             const RangeSearch& search) {
  float lo = 0.0f, hi = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i * stride];
    nan = nan || std::isnan(x);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  if (nan) return absl::InvalidArgumentError("tensor holds NaN");
  QUANTD_ASSIGN_OR_RETURN(QuantParams best, ChooseQuantParams(lo, hi, spec));
  if (!search.enabled() || (lo == 0.0f && hi == 0.0f)) return best;
  QUANTD_ASSIGN_OR_RETURN(const QuantGrid grid, GridFor(spec));
  std::vector<float> gathered;
  if (stride != 1) {
    gathered.resize(n);
    for (int64_t i = 0; i < n; ++i) gathered[i] = v[i * stride];
    v = gathered.data();
  }
  double best_error = RoundingError(v, n, best, grid);
  const float step =
      (1.0f - search.min_ratio) / static_cast<float>(search.steps - 1);
  for (int k = 1; k < search.steps && best_error > 0.0; ++k) {
    const float ratio = 1.0f - step * static_cast<float>(k);
    const QuantParams candidate =
        ChooseQuantParamsUnchecked(lo * ratio, hi * ratio, spec, grid);
    const double error = RoundingError(v, n, candidate, grid);
    if (error < best_error) {
      best_error = error;
      best = candidate;
    }
  }
  return best;
}

absl::StatusOr<ChannelLayout> LayoutFor(absl::Span<const int64_t> shape,
                                        int axis) {
  const int rank = static_cast<int>(shape.size());
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is outside [", -rank, ", ", rank,
                     ") for shape [", absl::StrJoin(shape, ","), "]"));
  }
  if (axis < 0) axis += rank;
  ChannelLayout layout;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "negative dimension in shape [", absl::StrJoin(shape, ","), "]"));
    }
    if (d < axis) layout.outer *= shape[d];
    if (d > axis) layout.inner *= shape[d];
  }
  layout.channels = shape[axis];
  return layout;
}

namespace {

// One QuantParams per range, in order. An empty range keeps the infinite
// sentinels; it is treated as all zeros.
absl::Status ChooseAllParams(const std::vector<Range>& ranges,
                             const QuantSpec& spec,
                             std::vector<QuantParams>* params) {
  params->reserve(ranges.size());
  for (const Range& r : ranges) {
    const bool empty = r.min > r.max;
    QUANTD_ASSIGN_OR_RETURN(
        QuantParams p,
        ChooseQuantParams(empty ? 0.0f : r.min, empty ? 0.0f : r.max, spec));
    params->push_back(p);
  }
  return absl::OkStatus();
}

}  // namespace

char ToByte(int32_t q, bool is_signed) {
  return is_signed ? static_cast<char>(static_cast<int8_t>(q))
                   : static_cast<char>(static_cast<uint8_t>(q));
}

absl::StatusOr<QuantizedTensor> QuantizeTensor(absl::Span<const float> data,
                                               absl::Span<const int64_t> shape,
                                               bool per_channel, int axis,
                                               const QuantSpec& spec) {
  QUANTD_ASSIGN_OR_RETURN(QuantGrid grid, GridFor(spec));
  const int64_t n = NumElements(shape);
  if (n < 0 || n != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(shape, ","), "] does not hold ",
                     data.size(), " values"));
  }
  ChannelLayout layout;  // Per tensor: one channel spanning everything.
  layout.inner = n;
  QuantizedTensor out;
  out.spec = spec;
  if (per_channel) {
    QUANTD_ASSIGN_OR_RETURN(layout, LayoutFor(shape, axis));
    out.axis = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
  }

  std::vector<Range> ranges(layout.channels);
  if (!CollectRanges(data, layout, ranges)) {
    return absl::InvalidArgumentError("tensor holds NaN");
  }
  QUANTD_RETURN_IF_ERROR(ChooseAllParams(ranges, spec, &out.params));

  out.values.resize(data.size());
  const float* src = data.data();
  char* dst = out.values.data();
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t c = 0; c < layout.channels; ++c) {
      const QuantParams& p = out.params[c];
      for (int64_t i = 0; i < layout.inner; ++i) {
        *dst++ = ToByte(QuantizeValue(*src++, p, grid), spec.is_signed);
      }
    }
  }
  return out;
}

std::vector<int64_t> BlockedParamShape(absl::Span<const int64_t> shape,
                                       int axis, int64_t block_size) {
  std::vector<int64_t> out(shape.begin(), shape.end());
  out[axis] = BlockCount(out[axis], block_size);
  return out;
}

absl::StatusOr<QuantizedTensor> QuantizeTensorBlocked(
    absl::Span<const float> data, absl::Span<const int64_t> shape, int axis,
    int64_t block_size, const QuantSpec& spec) {
  QUANTD_ASSIGN_OR_RETURN(QuantGrid grid, GridFor(spec));
  if (block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be >= 1, got ", block_size));
  }
  const int64_t n = NumElements(shape);
  if (n < 0 || n != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(shape, ","), "] does not hold ",
                     data.size(), " values"));
  }
  QUANTD_ASSIGN_OR_RETURN(const ChannelLayout layout, LayoutFor(shape, axis));
  QuantizedTensor out;
  out.spec = spec;
  out.axis = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
  out.block_size = block_size;
  const int64_t blocks = BlockCount(layout.channels, block_size);
  // Parameter (o, b, i) covers values (o, c, i) for c in block b.
  const int64_t row = layout.channels * layout.inner;
  std::vector<Range> ranges(layout.outer * blocks * layout.inner);
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t c = 0; c < layout.channels; ++c) {
      const float* src = data.data() + o * row + c * layout.inner;
      Range* r = ranges.data() + (o * blocks + c / block_size) * layout.inner;
      for (int64_t i = 0; i < layout.inner; ++i) {
        if (std::isnan(src[i])) {
          return absl::InvalidArgumentError("tensor holds NaN");
        }
        r[i].Add(src[i]);
      }
    }
  }
  QUANTD_RETURN_IF_ERROR(ChooseAllParams(ranges, spec, &out.params));
  out.values.resize(data.size());
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t c = 0; c < layout.channels; ++c) {
      const int64_t at = o * row + c * layout.inner;
      const QuantParams* p =
          out.params.data() + (o * blocks + c / block_size) * layout.inner;
      for (int64_t i = 0; i < layout.inner; ++i) {
        out.values[at + i] =
            ToByte(QuantizeValue(data[at + i], p[i], grid), spec.is_signed);
      }
    }
  }
  return out;
}

std::vector<float> DequantizeTensor(const QuantizedTensor& q,
                                    absl::Span<const int64_t> shape) {
  const int64_t n = NumElements(shape);
  if (n < 0 || n != static_cast<int64_t>(q.values.size())) return {};
  if (q.block_size > 0) {
    absl::StatusOr<ChannelLayout> l = LayoutFor(shape, q.axis);
    if (!l.ok()) return {};
    const int64_t blocks = BlockCount(l->channels, q.block_size);
    if (static_cast<int64_t>(q.params.size()) != l->outer * blocks * l->inner) {
      return {};
    }
    std::vector<float> out(q.values.size());
    const int64_t row = l->channels * l->inner;
    for (int64_t o = 0; o < l->outer; ++o) {
      for (int64_t c = 0; c < l->channels; ++c) {
        const int64_t at = o * row + c * l->inner;
        const QuantParams* p =
            q.params.data() + (o * blocks + c / q.block_size) * l->inner;
        for (int64_t i = 0; i < l->inner; ++i) {
          out[at + i] = DequantizeValue(
              FromByte(q.values[at + i], q.spec.is_signed), p[i]);
        }
      }
    }
    return out;
  }
  ChannelLayout layout;
  layout.inner = n;
  if (q.axis >= 0) {
    absl::StatusOr<ChannelLayout> l = LayoutFor(shape, q.axis);
    if (!l.ok()) return {};
    layout = *l;
  }
  if (static_cast<int64_t>(q.params.size()) != layout.channels) return {};

  std::vector<float> out(q.values.size());
  const char* src = q.values.data();
  float* dst = out.data();
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t c = 0; c < layout.channels; ++c) {
      const QuantParams& p = q.params[c];
      for (int64_t i = 0; i < layout.inner; ++i) {
        *dst++ = DequantizeValue(FromByte(*src++, q.spec.is_signed), p);
      }
    }
  }
  return out;
}

ErrorStats MeasureError(absl::Span<const float> reference,
                        absl::Span<const float> approx) {
  ErrorStats stats;
  if (reference.size() != approx.size()) {
    stats.mse = stats.sqnr_db = std::numeric_limits<double>::quiet_NaN();
    return stats;
  }
  double signal = 0.0;
  double noise = 0.0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double r = reference[i];
    const double e = r - static_cast<double>(approx[i]);
    signal += r * r;
    noise += e * e;
  }
  return ErrorFromSums(signal, noise, static_cast<int64_t>(reference.size()));
}

ErrorStats ErrorFromSums(double signal, double noise, int64_t count) {
  ErrorStats stats;
  stats.mse = count == 0 ? 0.0 : noise / count;
  // log10(signal / 0) would be +inf anyway, but 0/0 is NaN: say it outright.
  stats.sqnr_db = noise == 0.0 ? std::numeric_limits<double>::infinity()
                               : 10.0 * std::log10(signal / noise);
  return stats;
}

}  // namespace quantd::numerics
