// The fused weight quantizer. Its contract and reference are in the header;
// the arithmetic per value is QuantizeValue's, rewritten so that it
// vectorises without changing a single result:
//   QuantizeValue: q = clamp(nearbyint(x / s) + zp, qmin, qmax)
//   here:          q = round(clamp(x / s, qmin - zp, qmax - zp)) + zp
// The clamp may move before the rounding because rounding is monotonic and
// the bounds are integers (rounding leaves them alone), and adding the
// integer zp is exact. round() is half to even by adding and subtracting
// 1.5 * 2^23, exact in FE_TONEAREST for |y| < 2^22, which the clamp
// guarantees. The division stays a division: a multiply by 1/s rounds
// differently for some x. The error terms are MeasureError's: x and
// x - s * (q - zp) (exact in float, see Quantize8), squared in double.
#include "core/numerics/quantize_kernel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/multiversion.h"
#include "core/base/status_macros.h"

// The library targets baseline x86-64; the kernels are cloned for AVX-512
// and AVX2 with identical sums in every clone (multiversion.h).
#define QUANTD_QUANT_KERNEL QUANTD_EXACT_CLONES

// Helpers of the multiversioned kernels, inlined into each clone. Vectors
// pass by reference: by value they would change the ABI between clones.
#define QUANTD_ALWAYS_INLINE inline __attribute__((always_inline))

namespace quantd::numerics {
namespace {

constexpr int kLanes = 8;
typedef float V8f __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));
typedef int8_t V8b __attribute__((vector_size(8)));
typedef double V8d __attribute__((vector_size(64)));

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23.

// Elements a task covers, about: large enough that a task's overhead does
// not show, small enough that a tile read twice (range, then quantize) is
// still in L2 the second time, and that two threads share the work evenly.
constexpr int64_t kTaskElements = int64_t{1} << 16;
// The shortest row piece a column tile reads: shorter pieces of rows far
// apart defeat the hardware prefetcher.
constexpr int64_t kMinTileWidth = 256;
// Bands of rows whose column ranges are collected apart and merged: a fixed
// number, so that results do not depend on the threads, enough to keep a
// few threads busy, few enough that their ranges stay small.
constexpr int64_t kRangeBands = 16;

// Rows [0, count) of `width` consecutive values, row j starting at element
// start + j * stride.
struct View {
  int64_t start = 0;
  int64_t stride = 0;
  int64_t count = 0;
  int64_t width = 0;
};

// One QuantParams as the kernel uses it: bounds of x / scale before
// rounding (qmin - zp, qmax - zp) and the zero point, as floats.
struct Lane {
  float scale = 1.0f;
  float lo = 0.0f;
  float hi = 0.0f;
  float zp = 0.0f;
};

Lane LaneOf(const QuantParams& p, const QuantGrid& grid) {
  return {p.scale, static_cast<float>(grid.quant_min - p.zero_point),
          static_cast<float>(grid.quant_max - p.zero_point),
          static_cast<float>(p.zero_point)};
}

// Per-value params of a vector row: scale and zero point (the clamp bounds
// follow from the zero point). Padded to whole vectors with scale 1 and zero
// point quant_min, which map the zero padding to 0 with no error.
struct LaneArrays {
  float quant_min = 0.0f, quant_max = 0.0f;
  std::vector<float> scale, zp;
  void Resize(int64_t n, const QuantGrid& grid) {
    quant_min = static_cast<float>(grid.quant_min);
    quant_max = static_cast<float>(grid.quant_max);
    scale.assign(n, 1.0f);
    zp.assign(n, quant_min);
  }
  void Set(int64_t i, const QuantParams& p) {
    scale[i] = p.scale;
    zp[i] = static_cast<float>(p.zero_point);
  }
};

struct Sums {
  double signal = 0.0;
  double noise = 0.0;
};

QUANTD_ALWAYS_INLINE void Splat(float v, V8f* out) { *out = V8f{} + v; }

// dst[k] = b[k] for b[k] in [0, 255].
QUANTD_ALWAYS_INLINE void StoreLowBytes(const V8i& b, char* dst) {
#if defined(__SSE2__)
  // GCC narrows a vector one lane at a time without SSSE3; the packs
  // saturate, which values already in [0, 255] never reach.
  __m128i h[2];
  std::memcpy(h, &b, sizeof(h));
  const __m128i w = _mm_packs_epi32(h[0], h[1]);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(w, w));
#else
  const V8b q = __builtin_convertvector(b, V8b);
  std::memcpy(dst, &q, sizeof(q));
#endif
}

// Running sums of error^2, per lane, in two sets so that two vectors in
// flight do not wait on one add. (x^2 is summed by the range pass, which
// waits on memory and has the time for its conversions to double.)
struct Acc {
  V8d noise[2] = {};
};

// Quantizes 8 values to dst[0, 8) and adds their error^2 to acc.
// The error x - approx is exact in float: approx is 0 (then it is x), or
// within half a step (a step and a half where the grid's edge clamps) of x
// with |approx| >= one step, so x / approx is in [1/2, 2] and the
// subtraction is exact (Sterbenz). Squared in double it is MeasureError's
// term.
QUANTD_ALWAYS_INLINE void Quantize8(const V8f& x, const V8f& scale,
                                    const V8f& lo, const V8f& hi, const V8f& zp,
                                    char* dst, Acc* acc, int set = 0) {
  V8f y = x / scale;
  y = y < lo ? lo : y;
  y = y > hi ? hi : y;
  V8f magic;
  Splat(kRoundMagic, &magic);
  const V8f t = y + magic;  // 1.5 * 2^23 + round(y), exactly.
  const V8f r = t - magic;
  // t + zp = 1.5 * 2^23 + q exactly, so the low byte of its bits is q's
  // int8 / uint8 bit pattern.
  StoreLowBytes((V8i)(t + zp) & 0xFF, dst);
  const V8f approx = scale * r;  // DequantizeValue: scale * (q - zp).
  const V8d e = __builtin_convertvector(x - approx, V8d);
  acc->noise[set] += e * e;
}

QUANTD_ALWAYS_INLINE void AddSums(const Acc& acc, Sums* sums) {
  const V8d noise = acc.noise[0] + acc.noise[1];
  double e = 0;
  for (int k = 0; k < kLanes; ++k) e += noise[k];
  sums->noise += e;
}

// The first n (< 8) values at p, zero padded.
QUANTD_ALWAYS_INLINE void LoadTail(const char* p, int64_t n, V8f* x) {
  *x = V8f{};
  std::memcpy(x, p, n * sizeof(float));
}

// Range of some values; NaN is skipped and flagged.
// Range of some values, NaN skipped and flagged, and the sum of their
// squares in double (MeasureError's signal terms).
struct RangeAcc {
  V8f vmin, vmax, vmin2, vmax2;  // Two sets, as Acc.
  V8i bad = V8i{};
  V8d signal[2] = {};
  float min = kInf, max = -kInf;
  bool nan = false;
  double scalar_signal = 0.0;
};

QUANTD_ALWAYS_INLINE void AddSquares(const V8f& x, V8d* acc) {
  const V8d xd = __builtin_convertvector(x, V8d);
  *acc += xd * xd;
}

QUANTD_ALWAYS_INLINE void RangeInit(RangeAcc* a) {
  Splat(kInf, &a->vmin);
  Splat(-kInf, &a->vmax);
  a->vmin2 = a->vmin;
  a->vmax2 = a->vmax;
}

QUANTD_ALWAYS_INLINE void RangeRow(const char* row, int64_t width,
                                   RangeAcc* a) {
  int64_t i = 0;
  for (; i + 2 * kLanes <= width; i += 2 * kLanes) {
    V8f x0, x1;
    std::memcpy(&x0, row + i * sizeof(float), sizeof(x0));
    std::memcpy(&x1, row + (i + kLanes) * sizeof(float), sizeof(x1));
    a->vmin = x0 < a->vmin ? x0 : a->vmin;
    a->vmax = x0 > a->vmax ? x0 : a->vmax;
    a->vmin2 = x1 < a->vmin2 ? x1 : a->vmin2;
    a->vmax2 = x1 > a->vmax2 ? x1 : a->vmax2;
    a->bad |= (x0 != x0) | (x1 != x1);
    AddSquares(x0, &a->signal[0]);
    AddSquares(x1, &a->signal[1]);
  }
  for (; i + kLanes <= width; i += kLanes) {
    V8f x;
    std::memcpy(&x, row + i * sizeof(float), sizeof(x));
    a->vmin = x < a->vmin ? x : a->vmin;
    a->vmax = x > a->vmax ? x : a->vmax;
    a->bad |= x != x;
    AddSquares(x, &a->signal[0]);
  }
  for (; i < width; ++i) {
    float x;
    std::memcpy(&x, row + i * sizeof(float), sizeof(x));
    a->min = x < a->min ? x : a->min;
    a->max = x > a->max ? x : a->max;
    a->nan |= x != x;
    a->scalar_signal += static_cast<double>(x) * x;
  }
}

// Folds the lanes into a->min, a->max, a->nan.
QUANTD_ALWAYS_INLINE void RangeFinish(RangeAcc* a) {
  V8f lo = a->vmin2 < a->vmin ? a->vmin2 : a->vmin;
  V8f hi = a->vmax2 > a->vmax ? a->vmax2 : a->vmax;
  // Halve the lanes three times (the order of min / max does not matter).
  V8f t = __builtin_shufflevector(lo, lo, 4, 5, 6, 7, 0, 1, 2, 3);
  lo = t < lo ? t : lo;
  t = __builtin_shufflevector(lo, lo, 2, 3, 0, 1, 6, 7, 4, 5);
  lo = t < lo ? t : lo;
  t = __builtin_shufflevector(lo, lo, 1, 0, 3, 2, 5, 4, 7, 6);
  lo = t < lo ? t : lo;
  t = __builtin_shufflevector(hi, hi, 4, 5, 6, 7, 0, 1, 2, 3);
  hi = t > hi ? t : hi;
  t = __builtin_shufflevector(hi, hi, 2, 3, 0, 1, 6, 7, 4, 5);
  hi = t > hi ? t : hi;
  t = __builtin_shufflevector(hi, hi, 1, 0, 3, 2, 5, 4, 7, 6);
  hi = t > hi ? t : hi;
  a->min = lo[0] < a->min ? lo[0] : a->min;
  a->max = hi[0] > a->max ? hi[0] : a->max;
  for (int k = 0; k < kLanes; ++k) {
    a->nan |= a->bad[k] != 0;
  }
}

// Adds the squares a summed to *signal.
QUANTD_ALWAYS_INLINE void AddSignal(const RangeAcc& a, double* signal) {
  const V8d v = a.signal[0] + a.signal[1];
  double s = a.scalar_signal;
  for (int k = 0; k < kLanes; ++k) s += v[k];
  *signal += s;
}

// Quantizes `width` values at row into out with one param.
QUANTD_ALWAYS_INLINE void QuantizeRow(const char* row, int64_t width,
                                      const V8f& scale, const V8f& lo,
                                      const V8f& hi, const V8f& zp, char* out,
                                      Acc* acc) {
  int64_t i = 0;
  for (; i + 2 * kLanes <= width; i += 2 * kLanes) {
    V8f x0, x1;
    std::memcpy(&x0, row + i * sizeof(float), sizeof(x0));
    std::memcpy(&x1, row + (i + kLanes) * sizeof(float), sizeof(x1));
    Quantize8(x0, scale, lo, hi, zp, out + i, acc, 0);
    Quantize8(x1, scale, lo, hi, zp, out + i + kLanes, acc, 1);
  }
  for (; i + kLanes <= width; i += kLanes) {
    V8f x;
    std::memcpy(&x, row + i * sizeof(float), sizeof(x));
    Quantize8(x, scale, lo, hi, zp, out + i, acc);
  }
  if (i < width) {
    V8f x;
    LoadTail(row + i * sizeof(float), width - i, &x);
    char q[kLanes];
    Quantize8(x, scale, lo, hi, zp, q, acc);
    std::memcpy(out + i, q, width - i);
  }
}

QUANTD_ALWAYS_INLINE void Splat(const Lane& lane, V8f* scale, V8f* lo, V8f* hi,
                                V8f* zp) {
  Splat(lane.scale, scale);
  Splat(lane.lo, lo);
  Splat(lane.hi, hi);
  Splat(lane.zp, zp);
}

// Range of every value the view covers, NaN skipped and flagged.
QUANTD_QUANT_KERNEL void RangeBroadcast(const char* src, const View& v,
                                        float* min, float* max, bool* nan,
                                        double* signal) {
  RangeAcc a;
  RangeInit(&a);
  for (int64_t j = 0; j < v.count; ++j) {
    RangeRow(src + (v.start + j * v.stride) * sizeof(float), v.width, &a);
  }
  RangeFinish(&a);
  *min = a.min < *min ? a.min : *min;
  *max = a.max > *max ? a.max : *max;
  *nan |= a.nan;
  AddSignal(a, signal);
}

// Per-column range: min[i], max[i] over the view's rows, for i < width.
QUANTD_QUANT_KERNEL void RangeVector(const char* src, const View& v, float* min,
                                     float* max, bool* nan, double* signal) {
  V8i bad = V8i{};
  bool sbad = false;
  RangeAcc squares;
  for (int64_t j = 0; j < v.count; ++j) {
    const char* row = src + (v.start + j * v.stride) * sizeof(float);
    int64_t i = 0;
    for (; i + kLanes <= v.width; i += kLanes) {
      V8f x, lo, hi;
      std::memcpy(&x, row + i * sizeof(float), sizeof(x));
      std::memcpy(&lo, min + i, sizeof(lo));
      std::memcpy(&hi, max + i, sizeof(hi));
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
      bad |= x != x;
      AddSquares(x, &squares.signal[0]);
      std::memcpy(min + i, &lo, sizeof(lo));
      std::memcpy(max + i, &hi, sizeof(hi));
    }
    for (; i < v.width; ++i) {
      float x;
      std::memcpy(&x, row + i * sizeof(float), sizeof(x));
      min[i] = x < min[i] ? x : min[i];
      max[i] = x > max[i] ? x : max[i];
      sbad |= x != x;
      squares.scalar_signal += static_cast<double>(x) * x;
    }
  }
  for (int k = 0; k < kLanes; ++k) sbad |= bad[k] != 0;
  *nan |= sbad;
  AddSignal(squares, signal);
}

// Quantizes the view with one param.
QUANTD_QUANT_KERNEL void QuantizeBroadcast(const char* src, const View& v,
                                           const Lane& lane, char* dst,
                                           Sums* sums) {
  V8f scale, lo, hi, zp;
  Splat(lane, &scale, &lo, &hi, &zp);
  Acc acc;
  for (int64_t j = 0; j < v.count; ++j) {
    const int64_t at = v.start + j * v.stride;
    QuantizeRow(src + at * sizeof(float), v.width, scale, lo, hi, zp, dst + at,
                &acc);
  }
  AddSums(acc, sums);
}

// Quantizes the view with param i for column i (arrays padded to whole
// vectors).
QUANTD_QUANT_KERNEL void QuantizeVector(const char* src, const View& v,
                                        const LaneArrays& lanes, char* dst,
                                        Sums* sums) {
  V8f qmin, qmax;
  Splat(lanes.quant_min, &qmin);
  Splat(lanes.quant_max, &qmax);
  const float* scales = lanes.scale.data();
  const float* zps = lanes.zp.data();
  Acc acc;
  for (int64_t j = 0; j < v.count; ++j) {
    const int64_t at = v.start + j * v.stride;
    const char* row = src + at * sizeof(float);
    char* out = dst + at;
    int64_t i = 0;
    for (; i + 2 * kLanes <= v.width; i += 2 * kLanes) {
      V8f x0, x1, s0, s1, z0, z1;
      std::memcpy(&x0, row + i * sizeof(float), sizeof(x0));
      std::memcpy(&x1, row + (i + kLanes) * sizeof(float), sizeof(x1));
      std::memcpy(&s0, scales + i, sizeof(s0));
      std::memcpy(&s1, scales + i + kLanes, sizeof(s1));
      std::memcpy(&z0, zps + i, sizeof(z0));
      std::memcpy(&z1, zps + i + kLanes, sizeof(z1));
      Quantize8(x0, s0, qmin - z0, qmax - z0, z0, out + i, &acc, 0);
      Quantize8(x1, s1, qmin - z1, qmax - z1, z1, out + i + kLanes, &acc, 1);
    }
    for (; i < v.width; i += kLanes) {
      V8f x, scale, zp;
      std::memcpy(&scale, scales + i, sizeof(scale));
      std::memcpy(&zp, zps + i, sizeof(zp));
      if (i + kLanes <= v.width) {
        std::memcpy(&x, row + i * sizeof(float), sizeof(x));
        Quantize8(x, scale, qmin - zp, qmax - zp, zp, out + i, &acc);
      } else {
        LoadTail(row + i * sizeof(float), v.width - i, &x);
        char q[kLanes];
        Quantize8(x, scale, qmin - zp, qmax - zp, zp, q, &acc);
        std::memcpy(out + i, q, v.width - i);
      }
    }
  }
  AddSums(acc, sums);
}

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Elements of `shape`, or -1 when a dimension is negative.
int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

// Blocks [0, count) of `block` contiguous values each from element `start`
// (the last one shorter when the row ends first, at `end`). Ranges and
// quantization are separate kernels with the params chosen in between: a
// call inside the loop would spill the vector accumulators on every block.
QUANTD_QUANT_KERNEL void RangeBlocks(const char* src, int64_t start,
                                     int64_t end, int64_t block, int64_t count,
                                     float* min, float* max, bool* nan,
                                     double* signal) {
  bool any_nan = false;
  RangeAcc squares;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t at = start + b * block;
    RangeAcc a;
    RangeInit(&a);
    RangeRow(src + at * sizeof(float), std::min(block, end - at), &a);
    RangeFinish(&a);
    min[b] = a.min;
    max[b] = a.max;
    any_nan |= a.nan;
    squares.signal[0] += a.signal[0];
    squares.signal[1] += a.signal[1];
    squares.scalar_signal += a.scalar_signal;
  }
  *nan |= any_nan;
  AddSignal(squares, signal);
}

QUANTD_QUANT_KERNEL void QuantizeBlocks(const char* src, int64_t start,
                                        int64_t end, int64_t block,
                                        int64_t count, const Lane* lanes,
                                        char* dst, Sums* sums) {
  Acc acc;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t at = start + b * block;
    V8f scale, lo, hi, zp;
    Splat(lanes[b], &scale, &lo, &hi, &zp);
    QuantizeRow(src + at * sizeof(float), std::min(block, end - at), scale, lo,
                hi, zp, dst + at, &acc);
  }
  AddSums(acc, sums);
}

// Buffers one task reuses across its vector groups.
struct Scratch {
  std::vector<float> min, max;
  LaneArrays lanes;
  std::vector<Lane> block_lanes;
};

// What one task found: its share of the sums, and why it stopped.
struct TaskResult {
  Sums sums;
  bool nan = false;
  absl::Status error;
};

// Everything the tasks of one call share.
struct Job {
  const char* src = nullptr;
  char* dst = nullptr;
  QuantSpec spec;
  QuantGrid grid;
  QuantParams* params = nullptr;
  std::atomic<bool> failed{false};

  // ChooseAllParams for one range: an empty range (sentinels) is all zeros;
  // errors are ChooseQuantParams's own.
  bool Choose(float min, float max, QuantParams* out, TaskResult* r) {
    if (min > max) min = max = 0.0f;
    if (std::isfinite(min) && std::isfinite(max)) {
      *out = ChooseQuantParamsUnchecked(min, max, spec, grid);
      if (std::isfinite(out->scale)) return true;
    }
    r->error = ChooseQuantParams(min, max, spec).status();
    failed = true;
    return false;
  }

  // A group sharing one param, `param`: range, param, quantize.
  void BroadcastGroup(const View& v, int64_t param, TaskResult* r) {
    float min = kInf, max = -kInf;
    RangeBroadcast(src, v, &min, &max, &r->nan, &r->sums.signal);
    if (r->nan) {
      failed = true;
      return;
    }
    if (!Choose(min, max, &params[param], r)) return;
    QuantizeBroadcast(src, v, LaneOf(params[param], grid), dst, &r->sums);
  }

  // Blocks [b0, b1) of the row [start, end), `block` values each; block b
  // uses param `param0` + b.
  void BlockRun(int64_t start, int64_t end, int64_t block, int64_t b0,
                int64_t b1, int64_t param0, Scratch* s, TaskResult* r) {
    const int64_t count = b1 - b0, first = start + b0 * block;
    s->min.resize(count);
    s->max.resize(count);
    RangeBlocks(src, first, end, block, count, s->min.data(), s->max.data(),
                &r->nan, &r->sums.signal);
    if (r->nan) {
      failed = true;
      return;
    }
    s->block_lanes.resize(count);
    for (int64_t b = 0; b < count; ++b) {
      QuantParams& p = params[param0 + b0 + b];
      if (!Choose(s->min[b], s->max[b], &p, r)) return;
      s->block_lanes[b] = LaneOf(p, grid);
    }
    QuantizeBlocks(src, first, end, block, count, s->block_lanes.data(), dst,
                   &r->sums);
  }

  // A group whose column i uses param `base` + i.
  void VectorGroup(const View& v, int64_t base, Scratch* s, TaskResult* r) {
    const int64_t padded = RoundUp(v.width, kLanes);
    s->min.assign(padded, kInf);
    s->max.assign(padded, -kInf);
    RangeVector(src, v, s->min.data(), s->max.data(), &r->nan, &r->sums.signal);
    if (r->nan) {
      failed = true;
      return;
    }
    s->lanes.Resize(padded, grid);
    for (int64_t i = 0; i < v.width; ++i) {
      if (!Choose(s->min[i], s->max[i], &params[base + i], r)) return;
      s->lanes.Set(i, params[base + i]);
    }
    QuantizeVector(src, v, s->lanes, dst, &r->sums);
  }
};

void RunTasks(int64_t n, const ParallelFor& parallel_for,
              const std::function<void(int64_t)>& fn) {
  if (parallel_for && n > 1) {
    parallel_for(n, fn);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

// Groups [0, groups) in tasks of `per_task` consecutive groups; group g is
// run by group(g, scratch, result). Sums add up in group order whatever the
// threads. Tasks stop early once any has failed (the caller then asks the
// reference for the status).
template <typename Group>
std::vector<TaskResult> RunGroups(int64_t groups, int64_t per_task, Job& job,
                                  const ParallelFor& parallel_for,
                                  const Group& group) {
  per_task = std::max<int64_t>(per_task, 1);
  const int64_t tasks = (groups + per_task - 1) / per_task;
  std::vector<TaskResult> results(tasks);
  RunTasks(tasks, parallel_for, [&](int64_t t) {
    const int64_t end = std::min(groups, (t + 1) * per_task);
    Scratch scratch;
    for (int64_t g = t * per_task; g < end && !job.failed; ++g) {
      group(g, &scratch, &results[t]);
    }
  });
  return results;
}

// Per tensor: the range needs every value before any can be quantized, so
// two passes, each split into chunks.
std::vector<TaskResult> PerTensor(int64_t n, Job& job,
                                  const ParallelFor& parallel_for) {
  const int64_t tasks = (n + kTaskElements - 1) / kTaskElements;
  auto chunk = [n](int64_t t) {
    return View{t * kTaskElements, 0, 1,
                std::min(kTaskElements, n - t * kTaskElements)};
  };
  std::vector<float> mins(tasks, kInf), maxs(tasks, -kInf);
  std::vector<TaskResult> results(std::max<int64_t>(tasks, 1));
  RunTasks(tasks, parallel_for, [&](int64_t t) {
    RangeBroadcast(job.src, chunk(t), &mins[t], &maxs[t], &results[t].nan,
                   &results[t].sums.signal);
  });
  float min = kInf, max = -kInf;
  for (int64_t t = 0; t < tasks; ++t) {
    if (results[t].nan) return results;
    min = mins[t] < min ? mins[t] : min;
    max = maxs[t] > max ? maxs[t] : max;
  }
  if (!job.Choose(min, max, &job.params[0], &results[0])) return results;
  const Lane lane = LaneOf(job.params[0], job.grid);
  RunTasks(tasks, parallel_for, [&](int64_t t) {
    QuantizeBroadcast(job.src, chunk(t), lane, job.dst, &results[t].sums);
  });
  return results;
}

// Per channel along the innermost axis: every row holds each channel once,
// so a channel's range needs every row. Two streaming passes: column ranges
// over fixed bands of rows (merged), then bands of rows quantized with one
// param per column. Column tiles over all rows would read each row in short
// pieces, far apart, which the prefetcher does not follow.
std::vector<TaskResult> InnermostChannels(int64_t rows, int64_t channels,
                                          Job& job,
                                          const ParallelFor& parallel_for) {
  const int64_t padded = RoundUp(channels, kLanes);
  auto band = [channels](int64_t r0, int64_t r1) {
    return View{r0 * channels, channels, r1 - r0, channels};
  };
  // Each band holds a min and a max per channel: at most one band per 64
  // rows keeps them within 1/32 of the tensor's size.
  const int64_t bands = std::min(
      kRangeBands, std::max<int64_t>(rows / 64, std::min<int64_t>(rows, 1)));
  std::vector<float> min(bands * padded, kInf), max(bands * padded, -kInf);
  std::vector<TaskResult> band_results(bands);
  RunTasks(bands, parallel_for, [&](int64_t t) {
    RangeVector(job.src, band(rows * t / bands, rows * (t + 1) / bands),
                min.data() + t * padded, max.data() + t * padded,
                &band_results[t].nan, &band_results[t].sums.signal);
  });
  const int64_t per_task =
      std::max<int64_t>(1, kTaskElements / std::max<int64_t>(channels, 1));
  const int64_t tasks = (rows + per_task - 1) / per_task;
  std::vector<TaskResult> results(std::max<int64_t>(tasks, 1));
  for (int64_t t = 0; t < bands; ++t) {
    if (band_results[t].nan) {
      results[0].nan = true;
      return results;
    }
    results[0].sums.signal += band_results[t].sums.signal;
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t i = t * padded + c;
      min[c] = min[i] < min[c] ? min[i] : min[c];
      max[c] = max[i] > max[c] ? max[i] : max[c];
    }
  }
  LaneArrays lanes;
  lanes.Resize(padded, job.grid);
  for (int64_t c = 0; c < channels; ++c) {
    const float lo = bands > 0 ? min[c] : kInf;
    const float hi = bands > 0 ? max[c] : -kInf;
    if (!job.Choose(lo, hi, &job.params[c], &results[0])) return results;
    lanes.Set(c, job.params[c]);
  }
  RunTasks(tasks, parallel_for, [&](int64_t t) {
    QuantizeVector(job.src,
                   band(t * per_task, std::min(rows, (t + 1) * per_task)),
                   lanes, job.dst, &results[t].sums);
  });
  return results;
}

// Columns per tile of a vector group of `rows` rows: a tile of about
// kTaskElements values, in whole vectors, at least kMinTileWidth, at most
// `width`.
int64_t TileWidth(int64_t rows, int64_t width) {
  const int64_t w = RoundUp(
      std::max(kTaskElements / std::max<int64_t>(rows, 1), kMinTileWidth),
      kLanes);
  return std::max<int64_t>(std::min(w, width), 1);
}

// The status the reference quantizer gives `data`, which the kernel found
// it cannot quantize: the reference decides which of several problems (NaN
// anywhere first, then the first bad param in order) is reported.
absl::Status ReferenceError(FloatBytes data, absl::Span<const int64_t> shape,
                            bool per_channel, int axis, int64_t block_size,
                            const QuantSpec& spec) {
  std::vector<float> values(data.size);
  if (!values.empty()) {
    std::memcpy(values.data(), data.data, values.size() * sizeof(float));
  }
  absl::StatusOr<QuantizedTensor> q =
      block_size > 0
          ? QuantizeTensorBlocked(values, shape, axis, block_size, spec)
          : QuantizeTensor(values, shape, per_channel, axis, spec);
  if (q.ok()) {
    return absl::InternalError(
        "the fused quantizer failed on a tensor the reference quantizes");
  }
  return q.status();
}

}  // namespace

absl::StatusOr<QuantizedWithError> QuantizeAndMeasure(
    FloatBytes data, absl::Span<const int64_t> shape, bool per_channel,
    int axis, int64_t block_size, const QuantSpec& spec,
    const ParallelFor& parallel_for) {
  QUANTD_ASSIGN_OR_RETURN(const QuantGrid grid, GridFor(spec));
  if (block_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be >= 1, got ", block_size));
  }
  const bool blocked = block_size > 0;
  const int64_t n = NumElements(shape);
  if (n < 0 || n != data.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(shape, ","), "] does not hold ",
                     data.size, " values"));
  }
  QuantizedWithError out;
  QuantizedTensor& q = out.q;
  q.spec = spec;
  ChannelLayout layout;  // Per tensor: one channel spanning everything.
  layout.inner = n;
  if (blocked || per_channel) {
    QUANTD_ASSIGN_OR_RETURN(layout, LayoutFor(shape, axis));
    q.axis = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
  }
  q.block_size = block_size;
  const int64_t outer = layout.outer, channels = layout.channels,
                inner = layout.inner;
  const int64_t blocks = blocked ? BlockCount(channels, block_size) : 0;
  q.params.resize(blocked       ? outer * blocks * inner
                  : per_channel ? channels
                                : 1);
  q.values.resize(n);

  Job job;
  job.src = data.data;
  job.dst = q.values.data();
  job.spec = spec;
  job.grid = grid;
  job.params = q.params.data();
  std::vector<TaskResult> results;
  if (!blocked && !per_channel) {
    results = PerTensor(n, job, parallel_for);
  } else if (!blocked && inner != 1) {
    // Channel c: rows (o, c) of `inner` contiguous values.
    results =
        RunGroups(channels, kTaskElements / std::max<int64_t>(outer * inner, 1),
                  job, parallel_for, [&](int64_t c, Scratch*, TaskResult* r) {
                    job.BroadcastGroup(
                        View{c * inner, channels * inner, outer, inner}, c, r);
                  });
  } else if (!blocked) {
    results = InnermostChannels(outer, channels, job, parallel_for);
  } else if (inner != 1) {
    // Block (o, b): rows c in the block, each of `inner` values with their
    // own param; tiles of columns.
    const int64_t tile = TileWidth(block_size, inner);
    const int64_t tiles = (inner + tile - 1) / tile;
    results =
        RunGroups(outer * blocks * tiles,
                  kTaskElements / std::max<int64_t>(block_size * tile, 1), job,
                  parallel_for, [&](int64_t g, Scratch* s, TaskResult* r) {
                    const int64_t ob = g / tiles, t = g % tiles;
                    const int64_t o = ob / blocks, b = ob % blocks;
                    const int64_t c0 = b * block_size, i0 = t * tile;
                    const View v{(o * channels + c0) * inner + i0, inner,
                                 std::min(block_size, channels - c0),
                                 std::min(tile, inner - i0)};
                    job.VectorGroup(v, ob * inner + i0, s, r);
                  });
  } else {
    // Block (o, b): block_size contiguous values sharing one param; runs
    // of blocks of one row.
    const int64_t run = std::max<int64_t>(1, kTaskElements / block_size);
    const int64_t runs = (blocks + run - 1) / run;
    results = RunGroups(outer * runs, 1, job, parallel_for,
                        [&](int64_t g, Scratch* s, TaskResult* r) {
                          const int64_t o = g / runs, b0 = (g % runs) * run;
                          job.BlockRun(
                              o * channels, (o + 1) * channels, block_size, b0,
                              std::min(blocks, b0 + run), o * blocks, s, r);
                        });
  }

  bool failed = job.failed;
  for (const TaskResult& r : results) failed |= r.nan || !r.error.ok();
  if (failed)
    return ReferenceError(data, shape, per_channel, axis, block_size, spec);
  Sums sums;
  for (const TaskResult& r : results) {
    sums.signal += r.sums.signal;
    sums.noise += r.sums.noise;
  }
  out.error = ErrorFromSums(sums.signal, sums.noise, n);
  return out;
}

}  // namespace quantd::numerics
