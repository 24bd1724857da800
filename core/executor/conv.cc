#include "core/executor/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/base/multiversion.h"
#include "core/base/parallel.h"
#include "core/executor/gemm.h"

// The small-K GEMM and the 3x3 depthwise kernel are written with GCC/Clang
// vector extensions (16 floats, split into narrower registers where the
// target has none) and built for x86-64-v4 (AVX-512), v3 (AVX2 + FMA) and
// the baseline, picked at load time.
#if QUANTD_HAS_TARGET_CLONES
#define QUANTD_MULTIVERSION_V \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define QUANTD_MULTIVERSION_V
#endif

namespace quantd::executor {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// Output columns [lo, hi) whose input column ow*sw - pl + kj*dw is inside
// [0, w).
void ValidColumns(const Conv2DShape& s, int64_t kj, int64_t* lo, int64_t* hi) {
  const int64_t shift = kj * s.dw - s.pl;
  *lo = std::clamp<int64_t>(CeilDiv(-shift, s.sw), 0, s.ow);
  *hi = std::clamp<int64_t>(CeilDiv(s.w - shift, s.sw), *lo, s.ow);
}

// Rows [c0, c1) of the channel range of col = im2col(xg) for the output
// rows [oh0, oh1), where xg holds the group's channels [cg, h, w] and col is
// [cg*kh*kw, (oh1-oh0)*ow] with rows ld floats apart (ld is wider when several
// images sit side by side).
void Im2Col(const float* xg, const Conv2DShape& s, int64_t c0, int64_t c1,
            int64_t oh0, int64_t oh1, int64_t ld, float* col) {
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        float* row = col + ((c * s.kh + ki) * s.kw + kj) * ld;
        int64_t lo, hi;
        ValidColumns(s, kj, &lo, &hi);
        const int64_t shift = kj * s.dw - s.pl;
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          float* dst = row + (oh - oh0) * s.ow;
          const int64_t ih = oh * s.sh - s.pt + ki * s.dh;
          if (ih < 0 || ih >= s.h) {
            std::fill(dst, dst + s.ow, 0.0f);
            continue;
          }
          const float* src = xg + (c * s.h + ih) * s.w + shift;
          std::fill(dst, dst + lo, 0.0f);
          if (s.sw == 1) {
            std::memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * s.sw];
          }
          std::fill(dst + hi, dst + s.ow, 0.0f);
        }
      }
    }
  }
}

// For each kernel tap t = ki*kw + kj and output position q = oh*ow + ow,
// where its input sits in a channel plane (ih*w + iw), or -1 in the padding:
// taps*p entries, shared by every channel and image of a call.
std::vector<int64_t> Im2ColOffsets(const Conv2DShape& s) {
  const int64_t p = s.oh * s.ow;
  std::vector<int64_t> map(s.kh * s.kw * p);
  for (int64_t ki = 0; ki < s.kh; ++ki) {
    for (int64_t kj = 0; kj < s.kw; ++kj) {
      int64_t* row = map.data() + (ki * s.kw + kj) * p;
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const int64_t ih = oh * s.sh - s.pt + ki * s.dh;
        for (int64_t ow = 0; ow < s.ow; ++ow) {
          const int64_t iw = ow * s.sw - s.pl + kj * s.dw;
          row[oh * s.ow + ow] =
              ih >= 0 && ih < s.h && iw >= 0 && iw < s.w ? ih * s.w + iw : -1;
        }
      }
    }
  }
  return map;
}

// Im2Col for outputs of a few positions: Im2Col's per-row bookkeeping (the
// valid columns, a copy call per output row of 2..8 floats) costs more than
// the copy there; one gather through the offsets of Im2ColOffsets does not.
void Im2ColMapped(const float* xg, const Conv2DShape& s, const int64_t* map,
                  int64_t c0, int64_t c1, int64_t ld, float* col) {
  const int64_t taps = s.kh * s.kw, p = s.oh * s.ow;
  for (int64_t c = c0; c < c1; ++c) {
    const float* xc = xg + c * s.h * s.w;
    for (int64_t t = 0; t < taps; ++t) {
      const int64_t* offsets = map + t * p;
      float* dst = col + (c * taps + t) * ld;
      for (int64_t q = 0; q < p; ++q) {
        dst[q] = offsets[q] >= 0 ? xc[offsets[q]] : 0.0f;
      }
    }
  }
}

// y[r, 0:n] = bias[r] for rows r of stride ld: the GEMM then accumulates
// onto it (beta = 1), which costs no more than the zeroing it replaces and
// saves a pass over y.
void FillBias(const float* bias, int64_t rows, int64_t n, int64_t ld,
              float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(y + r * ld, y + r * ld + n, bias[r]);
  }
}

// 16 floats (GCC/Clang vector extension), split into narrower registers where
// the target has none.
typedef float V16 __attribute__((vector_size(64)));

// Helpers of the multiversioned kernels below, always inlined into them so
// they are compiled for the caller's instruction set.
#define QUANTD_ALWAYS_INLINE inline __attribute__((always_inline))

// ---------------------------------------------------- small-K direct GEMM
//
// y[m, j] = bias[m] + sum_k w[m, k] * x[k, j] for a small k (a convolution
// with few input channels, or the stem's im2col): Eigen's GEMM spends more
// on packing and on re-reading C than on arithmetic there. Register tiles of
// MR rows x 16*NV columns, x read in place (its rows are contiguous).
// Where it beats Eigen (measured on MobileNetV2's 1x1 shapes): k <= 64, or
// k <= 192 on at least 28x28 outputs. Eigen wins on long k over small
// outputs.
bool UseSmallK(int64_t k, int64_t p) {
  return k <= 64 || (k <= 192 && p >= 784);
}

template <int MR, int NV>
QUANTD_ALWAYS_INLINE void SmallKTile(const float* w, int64_t k, const float* x,
                                     int64_t ldx, const float* bias, float* y,
                                     int64_t ldy) {
  V16 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = V16{};
      acc[r][v] += bias != nullptr ? bias[r] : 0.0f;
    }
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    V16 xv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      std::memcpy(&xv[v], x + kk * ldx + 16 * v, sizeof(V16));
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float wr = w[r * k + kk];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += wr * xv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      std::memcpy(y + r * ldy + 16 * v, &acc[r][v], sizeof(V16));
    }
  }
}

// Rows [0, m) of one 16*NV-column block.
template <int NV>
QUANTD_ALWAYS_INLINE void SmallKRows(const float* w, int64_t k, const float* x,
                                     int64_t ldx, const float* bias, int64_t m,
                                     float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    SmallKTile<4, NV>(w + r * k, k, x, ldx, bias ? bias + r : nullptr,
                      y + r * ldy, ldy);
  }
  for (; r < m; ++r) {
    SmallKTile<1, NV>(w + r * k, k, x, ldx, bias ? bias + r : nullptr,
                      y + r * ldy, ldy);
  }
}

// Whether the small-K kernel pays on this CPU: its 4x64 register tiles (16
// accumulators of 16 floats) are 16 of AVX-512's 32 registers but 32 of
// AVX2's 16, and the spills made it far slower than Eigen there. Measured
// on an AVX2-only EPYC (executor_bench, 1 thread): MobileNetV2 133 ms with
// it, 71 ms with 4x16 tiles, 20 ms through Eigen (ONNX Runtime: 14 ms).
bool SmallKPays() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool wide = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return wide;
#else
  return false;
#endif
}

// All m rows of columns [j0, j1) of y (row stride ldy; x's is ldx); scratch
// holds k*16 + 16 floats for the last, partial vector of columns.
QUANTD_MULTIVERSION_V void SmallKGemm(const float* w, const float* x,
                                      int64_t ldx, const float* bias, int64_t m,
                                      int64_t k, float* y, int64_t ldy,
                                      int64_t j0, int64_t j1, float* scratch) {
  int64_t j = j0;
  for (; j + 64 <= j1; j += 64)
    SmallKRows<4>(w, k, x + j, ldx, bias, m, y + j, ldy);
  for (; j + 16 <= j1; j += 16)
    SmallKRows<1>(w, k, x + j, ldx, bias, m, y + j, ldy);
  if (j == j1) return;
  // The last 1..15 columns: through a zero-padded copy, 16 wide.
  const int64_t tail = j1 - j;
  float* xt = scratch;
  float* yt = scratch + k * 16;
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t c = 0; c < 16; ++c) {
      xt[kk * 16 + c] = c < tail ? x[kk * ldx + j + c] : 0.0f;
    }
  }
  for (int64_t r = 0; r < m; ++r) {
    SmallKTile<1, 1>(w + r * k, k, xt, 16, bias ? bias + r : nullptr, yt, 16);
    for (int64_t c = 0; c < tail; ++c) y[r * ldy + j + c] = yt[c];
  }
}

// y[mg, cols] = bias + wg[mg, k] * b[k, cols]; b's rows are ldb floats
// apart, y's ldy.
void ConvGemm(const float* wg, const float* b, int64_t ldb, const float* bias,
              int64_t mg, int64_t k, int64_t cols, float* y, int64_t ldy,
              ThreadPool* pool) {
  if (SmallKPays() && UseSmallK(k, cols)) {
    // The direct kernel: threads take 64-column strips, or blocks of 4 rows
    // when there are too few strips to share.
    const int64_t strips = (cols + 63) / 64;
    const int64_t threads = pool ? pool->parallelism() : 1;
    if (strips >= 2 * threads || threads == 1) {
      ParallelRange(pool, strips, 1, [&](int64_t t0, int64_t t1) {
        std::vector<float> scratch(k * 16 + 16);
        SmallKGemm(wg, b, ldb, bias, mg, k, y, ldy, t0 * 64,
                   std::min(cols, t1 * 64), scratch.data());
      });
    } else {
      ParallelRange(pool, (mg + 3) / 4, 1, [&](int64_t r0, int64_t r1) {
        std::vector<float> scratch(k * 16 + 16);
        r0 *= 4;
        r1 = std::min(mg, r1 * 4);
        SmallKGemm(wg + r0 * k, b, ldb, bias ? bias + r0 : nullptr, r1 - r0, k,
                   y + r0 * ldy, ldy, 0, cols, scratch.data());
      });
    }
    return;
  }
  if (bias != nullptr) FillBias(bias, mg, cols, ldy, y);
  Gemm(false, false, mg, cols, k, 1.0f, wg, k, b, ldb, bias ? 1.0f : 0.0f, y,
       ldy, pool);
}

bool IsPointwise(const Conv2DShape& s) {
  return s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pt == 0 &&
         s.pl == 0 && s.oh == s.h && s.ow == s.w;
}

// Output rows per im2col band of one image: the whole image unless its
// im2col would pass kMaxConvBandScratch floats (a 64-channel 3x3 conv at
// 512x512 would build a 600 MB matrix, fresh pages on every call, and the
// GEMM would stream it from memory).
int64_t ConvBandRows(const Conv2DShape& s) {
  const int64_t k = s.c / s.group * s.kh * s.kw;
  return std::clamp<int64_t>(
      kMaxConvBandScratch / std::max<int64_t>(1, k * s.ow), 1,
      std::max<int64_t>(1, s.oh));
}

// The im2col scratch ConvGroup needs: none for a pointwise conv (its input
// is its im2col), else one band.
int64_t ConvGroupScratchFloats(const Conv2DShape& s) {
  if (IsPointwise(s)) return 0;
  return s.c / s.group * s.kh * s.kw * ConvBandRows(s) * s.ow;
}

// One image, one group: y_g = w_g * im2col(x_g) + bias_g, band by band of
// output rows; col holds ConvGroupScratchFloats(s) floats.
void ConvGroup(const float* xg, const float* wg, const float* bias, float* yg,
               const Conv2DShape& s, float* col, ThreadPool* pool) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * s.kh * s.kw, p = s.oh * s.ow;
  if (IsPointwise(s)) {
    ConvGemm(wg, xg, p, bias, mg, k, p, yg, p, pool);
    return;
  }
  const int64_t band = ConvBandRows(s);
  for (int64_t oh0 = 0; oh0 < s.oh; oh0 += band) {
    const int64_t oh1 = std::min(s.oh, oh0 + band);
    const int64_t cols = (oh1 - oh0) * s.ow;
    ParallelRange(pool, cg, 4, [&](int64_t c0, int64_t c1) {
      Im2Col(xg, s, c0, c1, oh0, oh1, cols, col);
    });
    ConvGemm(wg, col, cols, bias, mg, k, cols, yg + oh0 * s.ow, p, pool);
  }
}

// Images [n0, n0 + nb) of group g in one GEMM: their im2col side by side in
// col [k, nb*p] (pointwise inputs are copied the same way: NCHW keeps an
// image's rows apart from the next image's), the product in out [mg, nb*p],
// then each image's columns copied to its rows of y.
void ConvGroupImages(const float* x, const float* w, const float* bias,
                     float* y, const Conv2DShape& s, const int64_t* map,
                     int64_t n0, int64_t nb, int64_t g, float* col, float* out,
                     ThreadPool* pool) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * s.kh * s.kw, p = s.oh * s.ow, cols = nb * p;
  // Items are (image, input channel) pairs, image-major.
  const bool pointwise = IsPointwise(s);
  ParallelRange(pool, nb * cg, 4, [&](int64_t i0, int64_t i1) {
    if (pointwise) {
      // A channel of a pointwise input is already its im2col row: one copy,
      // not Im2Col's one per output row (rows of 2..8 floats here).
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t j = i / cg, c = i % cg;
        std::memcpy(col + c * cols + j * p,
                    x + ((n0 + j) * s.c + g * cg + c) * p, p * sizeof(float));
      }
      return;
    }
    for (int64_t i = i0; i < i1;) {
      const int64_t j = i / cg, c0 = i % cg;
      const int64_t c1 = std::min(cg, c0 + (i1 - i));
      Im2ColMapped(x + ((n0 + j) * s.c + g * cg) * s.h * s.w, s, map, c0, c1,
                   cols, col + j * p);
      i += c1 - c0;
    }
  });
  ConvGemm(w + g * mg * k, col, cols, bias ? bias + g * mg : nullptr, mg, k,
           cols, out, cols, pool);
  ParallelRange(pool, nb * mg, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t j = i / mg, r = i % mg;
      std::memcpy(y + ((n0 + j) * s.m + g * mg + r) * p, out + r * cols + j * p,
                  p * sizeof(float));
    }
  });
}

// Depthwise (one input and one output channel per group): a direct loop is
// far cheaper than a GEMM with a single output row.
// Output rows outer, taps inner: each output row stays in L1 while its
// kh*kw contributions are added.
QUANTD_VECTOR_CLONES void DepthwiseChannel(const float* xc, const float* wc,
                                           float bias, float* yc,
                                           const Conv2DShape& s) {
  int64_t lo[16], hi[16];
  const bool small = s.kw <= 16;
  for (int64_t kj = 0; kj < s.kw && small; ++kj) {
    ValidColumns(s, kj, &lo[kj], &hi[kj]);
  }
  for (int64_t oh = 0; oh < s.oh; ++oh) {
    float* __restrict dst = yc + oh * s.ow;
    std::fill(dst, dst + s.ow, bias);
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      const int64_t ih = oh * s.sh - s.pt + ki * s.dh;
      if (ih < 0 || ih >= s.h) continue;
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        const float wv = wc[ki * s.kw + kj];
        int64_t l, h;
        if (small) {
          l = lo[kj];
          h = hi[kj];
        } else {
          ValidColumns(s, kj, &l, &h);
        }
        const float* __restrict src = xc + ih * s.w + kj * s.dw - s.pl;
        if (s.sw == 1) {
          for (int64_t ow = l; ow < h; ++ow) dst[ow] += wv * src[ow];
        } else {
          for (int64_t ow = l; ow < h; ++ow) dst[ow] += wv * src[ow * s.sw];
        }
      }
    }
  }
}

// ------------------------------------------------- depthwise 3x3, stride 1/2
//
// Each channel is first copied into zero-padded scratch "planes" so the
// arithmetic needs no bounds checks and every tap reads contiguous floats:
//  - stride 1: one plane, the padded input, lines of L = ow + 2;
//  - stride 2: four planes Q[a][b] (row parity a, column parity b) with
//    Q[a][b][r][c] = padded[2r + a][2c + b], lines of L = ow + 1.
// padded[i][j] is x[i - pt][j - pl], or 0 outside x. Output (i, j) then
// lives at flat position i*L + j of a scratch run of L-wide lines and every
// tap is plane[flat + constant]: one flat loop over oh*L positions (the
// L - ow extra columns per line are computed and dropped), 16 floats at a
// time whatever the row width. The lines are then copied out.

bool IsDepthwise3x3(const Conv2DShape& s) {
  return s.kh == 3 && s.kw == 3 && s.dh == 1 && s.dw == 1 && s.sh == s.sw &&
         (s.sh == 1 || s.sh == 2);
}

struct Dw3x3Layout {
  int64_t stride, line, rows, n, nvec, plane_size;
};

Dw3x3Layout Dw3x3LayoutFor(const Conv2DShape& s) {
  Dw3x3Layout l;
  l.stride = s.sh;
  l.line = s.sh == 1 ? s.ow + 2 : s.ow + 1;
  l.rows = s.sh == 1 ? s.oh + 2 : s.oh + 1;
  l.n = s.oh * l.line;
  l.nvec = (l.n + 15) / 16 * 16;
  // Largest tap offset: 2*line + 2 (stride 1), line + 1 (stride 2).
  const int64_t reach = s.sh == 1 ? 2 * l.line + 2 : l.line + 1;
  l.plane_size = std::max(l.rows * l.line, l.nvec + reach) + 16;
  return l;
}

// Planes, the output lines, then (stride 2) one padded input row.
int64_t Dw3x3ScratchSize(const Dw3x3Layout& l) {
  return (l.stride == 1 ? 1 : 4) * l.plane_size + l.nvec +
         (l.stride == 1 ? 0 : 2 * l.line);
}

// dst[0, n) = src[0, n): a plain loop beats a memcpy call on the 7..28-wide
// rows of the small layers.
QUANTD_ALWAYS_INLINE void CopyFloats(const float* __restrict src, int64_t n,
                                     float* __restrict dst) {
  if (n >= 32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// One line of the stride-1 plane: dst[c] = x_row[c - pl] inside the row,
// else 0 (x_row null: the whole line is padding).
QUANTD_ALWAYS_INLINE void FillLine1(const float* x_row, int64_t w, int64_t pl,
                                    int64_t line, float* __restrict dst) {
  if (x_row == nullptr) {
    std::fill(dst, dst + line, 0.0f);
    return;
  }
  const int64_t lo = std::min(pl, line);
  const int64_t hi = std::clamp<int64_t>(w + pl, lo, line);
  std::fill(dst, dst + lo, 0.0f);
  CopyFloats(x_row + lo - pl, hi - lo, dst + lo);
  std::fill(dst + hi, dst + line, 0.0f);
}

// One line of each stride-2 column plane: even[c] = x_row[2c - pl],
// odd[c] = x_row[2c + 1 - pl] inside the row, else 0. The row is first copied
// into `padded` (2 * line floats, padded[j] = x_row[j - pl] or 0) so that
// every 16 columns are one unchecked 32-float load and a shuffle: checking
// the row's ends in place left most of a 32-wide row (64x64 inputs) to the
// scalar loop, 2 us per channel plane.
QUANTD_ALWAYS_INLINE void FillLines2(const float* x_row, int64_t w, int64_t pl,
                                     int64_t line, float* __restrict padded,
                                     float* __restrict even,
                                     float* __restrict odd) {
  if (x_row == nullptr) {
    std::fill(even, even + line, 0.0f);
    std::fill(odd, odd + line, 0.0f);
    return;
  }
  const int64_t len = 2 * line;
  const int64_t lo = std::min(pl, len);
  const int64_t hi = std::clamp<int64_t>(w + pl, lo, len);
  std::fill(padded, padded + lo, 0.0f);
  CopyFloats(x_row + lo - pl, hi - lo, padded + lo);
  std::fill(padded + hi, padded + len, 0.0f);
  int64_t c = 0;
#if defined(__GNUC__) && !defined(__clang__)
  typedef int I16 __attribute__((vector_size(64)));
  const I16 ev = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  const I16 od = ev + 1;
  for (; c + 16 <= line; c += 16) {
    V16 v0, v1;
    std::memcpy(&v0, padded + 2 * c, sizeof(V16));
    std::memcpy(&v1, padded + 2 * c + 16, sizeof(V16));
    const V16 e = __builtin_shuffle(v0, v1, ev);
    const V16 o = __builtin_shuffle(v0, v1, od);
    std::memcpy(even + c, &e, sizeof(V16));
    std::memcpy(odd + c, &o, sizeof(V16));
  }
#endif
  for (; c < line; ++c) {
    even[c] = padded[2 * c];
    odd[c] = padded[2 * c + 1];
  }
}

// out[i] = bias + sum_t w[t] * q[t][i] for i in [0, n), n a multiple of 16.
// Three partial sums (one per kernel row) and two vectors per step keep six
// independent FMA chains in flight.
QUANTD_ALWAYS_INLINE void Taps9(const float* const* q, const float* w,
                                float bias, int64_t n, float* __restrict out) {
  const float* __restrict q0 = q[0];
  const float* __restrict q1 = q[1];
  const float* __restrict q2 = q[2];
  const float* __restrict q3 = q[3];
  const float* __restrict q4 = q[4];
  const float* __restrict q5 = q[5];
  const float* __restrict q6 = q[6];
  const float* __restrict q7 = q[7];
  const float* __restrict q8 = q[8];
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5],
              w6 = w[6], w7 = w[7], w8 = w[8];
#define QUANTD_DW_ROW(acc, i, pa, wa, pb, wb, pc, wc) \
  do {                                                \
    V16 ta_, tb_, tc_;                                \
    std::memcpy(&ta_, (pa) + (i), sizeof(V16));       \
    std::memcpy(&tb_, (pb) + (i), sizeof(V16));       \
    std::memcpy(&tc_, (pc) + (i), sizeof(V16));       \
    acc = acc + ta_ * (wa) + tb_ * (wb) + tc_ * (wc); \
  } while (0)
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    V16 a0 = {}, b0 = {}, c0 = {}, a1 = {}, b1 = {}, c1 = {};
    a0 += bias;
    a1 += bias;
    QUANTD_DW_ROW(a0, i, q0, w0, q1, w1, q2, w2);
    QUANTD_DW_ROW(b0, i, q3, w3, q4, w4, q5, w5);
    QUANTD_DW_ROW(c0, i, q6, w6, q7, w7, q8, w8);
    QUANTD_DW_ROW(a1, i + 16, q0, w0, q1, w1, q2, w2);
    QUANTD_DW_ROW(b1, i + 16, q3, w3, q4, w4, q5, w5);
    QUANTD_DW_ROW(c1, i + 16, q6, w6, q7, w7, q8, w8);
    const V16 r0 = a0 + b0 + c0, r1 = a1 + b1 + c1;
    std::memcpy(out + i, &r0, sizeof(V16));
    std::memcpy(out + i + 16, &r1, sizeof(V16));
  }
  for (; i < n; i += 16) {
    V16 a0 = {}, b0 = {}, c0 = {};
    a0 += bias;
    QUANTD_DW_ROW(a0, i, q0, w0, q1, w1, q2, w2);
    QUANTD_DW_ROW(b0, i, q3, w3, q4, w4, q5, w5);
    QUANTD_DW_ROW(c0, i, q6, w6, q7, w7, q8, w8);
    const V16 r0 = a0 + b0 + c0;
    std::memcpy(out + i, &r0, sizeof(V16));
  }
#undef QUANTD_DW_ROW
}

// Images x channels [i0, i1) (flat n*c index); scratch is
// Dw3x3ScratchSize(l) floats.
QUANTD_MULTIVERSION_V void Depthwise3x3Range(const float* x, const float* w,
                                             const float* bias, float* y,
                                             const Conv2DShape& s,
                                             const Dw3x3Layout& l,
                                             float* scratch, int64_t i0,
                                             int64_t i1) {
  const int64_t L = l.line;
  const int64_t nplanes = l.stride == 1 ? 1 : 4;
  float* planes[4];
  for (int64_t i = 0; i < 4; ++i) planes[i] = scratch + i * l.plane_size;
  float* out = scratch + nplanes * l.plane_size;
  float* padded = out + l.nvec;  // Stride 2 only.
  // The planes' tails past their rows are read (never used) by the flat
  // loop: zero them once, no channel writes there.
  for (int64_t i = 0; i < nplanes; ++i) {
    std::fill(planes[i] + l.rows * L, planes[i] + l.plane_size, 0.0f);
  }
  const float* q[9];
  if (l.stride == 1) {
    for (int64_t ki = 0; ki < 3; ++ki)
      for (int64_t kj = 0; kj < 3; ++kj)
        q[ki * 3 + kj] = planes[0] + ki * L + kj;
  } else {
    // planes[2a + b] is Q[a][b]. padded[2i + ki][2j + kj]: ki = 0, 1, 2 is
    // even row i, odd row i, even row i + 1; kj likewise over columns.
    const float* rows[3] = {planes[0], planes[2], planes[0] + L};
    const float* odd[3] = {planes[1], planes[3], planes[1] + L};
    for (int64_t ki = 0; ki < 3; ++ki) {
      q[ki * 3 + 0] = rows[ki];
      q[ki * 3 + 1] = odd[ki];
      q[ki * 3 + 2] = rows[ki] + 1;
    }
  }
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t c = i % s.c;
    const float* xc = x + i * s.h * s.w;
    if (l.stride == 1) {
      for (int64_t r = 0; r < l.rows; ++r) {
        const int64_t ih = r - s.pt;
        FillLine1(ih >= 0 && ih < s.h ? xc + ih * s.w : nullptr, s.w, s.pl, L,
                  planes[0] + r * L);
      }
    } else {
      for (int64_t r = 0; r < 2 * l.rows; ++r) {
        const int64_t a = r % 2, at = (r / 2) * L;
        const int64_t ih = r - s.pt;
        FillLines2(ih >= 0 && ih < s.h ? xc + ih * s.w : nullptr, s.w, s.pl, L,
                   padded, planes[2 * a] + at, planes[2 * a + 1] + at);
      }
    }
    Taps9(q, w + c * 9, bias ? bias[c] : 0.0f, l.nvec, out);
    float* yc = y + i * s.oh * s.ow;
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      CopyFloats(out + oh * L, s.ow, yc + oh * s.ow);
    }
  }
}

// ------------------------------------- depthwise, channels in vector lanes
//
// On small maps (MobileNetV2's last blocks at 64x64 have 2x2 and 4x4 outputs)
// one channel's plane fills a fraction of a 16-float vector and the per-plane
// set-up dominates. Here 16 channels of one image are transposed into a
// zero-padded [hp][wp][16] scratch (channel in the lane), every tap is one
// full-width FMA with that tap's 16 weights, and the [oh*ow][16] result is
// transposed back. Any kernel size, stride and dilation.

struct DwLanesLayout {
  int64_t hp, wp;  // Padded input rows and columns actually read.
  int64_t in_floats, out_floats, w_floats;
};

int64_t RoundUp16(int64_t n) { return (n + 15) / 16 * 16; }

DwLanesLayout DwLanesLayoutFor(const Conv2DShape& s) {
  DwLanesLayout l;
  l.hp = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1;
  l.wp = (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1;
  l.in_floats = l.hp * l.wp * 16;
  // Whole 16-position blocks: the transpose back reads them.
  l.out_floats = RoundUp16(s.oh * s.ow) * 16;
  l.w_floats = s.kh * s.kw * 16 + 16;  // Taps, then the bias.
  return l;
}

// Floats of scratch: the padded input, the output, the weights. (Plus an
// int64_t per input position, DepthwiseLanesRange's `dest`.)
int64_t DwLanesScratchSize(const DwLanesLayout& l) {
  return l.in_floats + l.out_floats + l.w_floats;
}

// rows[k] = 16 floats; afterwards rows[k][j] is the old rows[j][k]. Four
// butterfly stages: at distance d, rows i and i + d swap their off-diagonal
// d-wide blocks (GCC's __builtin_shuffle; a scalar transpose elsewhere).
QUANTD_ALWAYS_INLINE void Transpose16x16(V16* rows) {
#if defined(__GNUC__) && !defined(__clang__)
  typedef int I16 __attribute__((vector_size(64)));
  static constexpr I16 kLo[4] = {
      {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
      {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
      {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
      {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}};
  static constexpr I16 kHi[4] = {
      {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
      {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
      {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
      {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}};
  for (int stage = 0; stage < 4; ++stage) {
    const int d = 8 >> stage;
    for (int i = 0; i < 16; ++i) {
      if (i & d) continue;
      const V16 a = rows[i], b = rows[i + d];
      rows[i] = __builtin_shuffle(a, b, kLo[stage]);
      rows[i + d] = __builtin_shuffle(a, b, kHi[stage]);
    }
  }
#else
  for (int i = 0; i < 16; ++i) {
    for (int j = i + 1; j < 16; ++j) {
      const float t = rows[i][j];
      rows[i][j] = rows[j][i];
      rows[j][i] = t;
    }
  }
#endif
}

// Runs of fewer positions than this (2x2 maps) go in and out of the lanes
// one element at a time: a 16x16 transpose for 4 useful rows cost more
// (conv_bench: 0.29 against 0.16 ms on MobileNetV2's 2x2 layer).
constexpr int64_t kLanesTransposeFrom = 8;

// Items are (block of 16 channels, image) pairs, [i0, i1) of blocks * n,
// block-major so that a range transposes each block's weights once.
// Channels go into lanes and back 16 positions at a time through
// Transpose16x16: one element at a time, the two transposes took most of
// the kernel's time on 4x4 maps (perf).
QUANTD_MULTIVERSION_V void DepthwiseLanesRange(const float* x, const float* w,
                                               const float* bias, float* y,
                                               const Conv2DShape& s,
                                               const DwLanesLayout& l,
                                               float* scratch, int64_t* dest,
                                               int64_t i0, int64_t i1) {
  const int64_t taps = s.kh * s.kw;
  const int64_t hw = s.h * s.w, p = s.oh * s.ow;
  float* in = scratch;
  float* out = in + l.in_floats;
  float* wt = out + l.out_floats;
  // Input position q = (ih, iw) goes to padded position (ih + pt, iw + pl)
  // when the windows read it, else nowhere (-1). Everything else of `in` is
  // padding: zeroed once here, never written.
  for (int64_t q = 0; q < hw; ++q) {
    const int64_t r = q / s.w + s.pt, c = q % s.w + s.pl;
    dest[q] = r < l.hp && c < l.wp ? (r * l.wp + c) * 16 : -1;
  }
  std::fill(in, in + l.in_floats, 0.0f);
  std::fill(out, out + l.out_floats, 0.0f);
  int64_t weights_of = -1;
  V16 rows[16];
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t blk = item / s.n, n = item % s.n;
    const int64_t ch0 = blk * 16, lanes = std::min<int64_t>(16, s.c - ch0);
    if (weights_of != blk) {
      std::fill(wt, wt + l.w_floats, 0.0f);
      for (int64_t lane = 0; lane < lanes; ++lane) {
        const float* wc = w + (ch0 + lane) * taps;
        for (int64_t t = 0; t < taps; ++t) wt[t * 16 + lane] = wc[t];
        wt[taps * 16 + lane] = bias ? bias[ch0 + lane] : 0.0f;
      }
      weights_of = blk;
    }
    // Lanes past c read zeros (their weights are zero) and are never
    // stored.
    const float* xb = x + (n * s.c + ch0) * hw;
    for (int64_t q0 = 0; q0 < hw; q0 += 16) {
      const int64_t count = std::min<int64_t>(16, hw - q0);
      if (count < kLanesTransposeFrom) {
        for (int64_t lane = 0; lane < lanes; ++lane) {
          for (int64_t k = 0; k < count; ++k) {
            if (dest[q0 + k] >= 0)
              in[dest[q0 + k] + lane] = xb[lane * hw + q0 + k];
          }
        }
        continue;
      }
      for (int64_t lane = 0; lane < 16; ++lane) {
        rows[lane] = V16{};
        if (lane >= lanes) continue;
        // A fixed-size copy is one load; a variable one became `rep movs`
        // (perf: a quarter of the kernel on 2x2 maps).
        const float* src = xb + lane * hw + q0;
        if (count == 16) {
          std::memcpy(&rows[lane], src, sizeof(V16));
        } else {
          for (int64_t k = 0; k < count; ++k) rows[lane][k] = src[k];
        }
      }
      Transpose16x16(rows);
      for (int64_t k = 0; k < count; ++k) {
        if (dest[q0 + k] >= 0) {
          std::memcpy(in + dest[q0 + k], &rows[k], sizeof(V16));
        }
      }
    }
    V16 b;
    std::memcpy(&b, wt + taps * 16, sizeof(V16));
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      for (int64_t ow = 0; ow < s.ow; ++ow) {
        V16 acc = b;
        const float* base = in + (oh * s.sh * l.wp + ow * s.sw) * 16;
        for (int64_t ki = 0; ki < s.kh; ++ki) {
          const float* row = base + ki * s.dh * l.wp * 16;
          const float* wr = wt + ki * s.kw * 16;
          for (int64_t kj = 0; kj < s.kw; ++kj) {
            V16 xv, wv;
            std::memcpy(&xv, row + kj * s.dw * 16, sizeof(V16));
            std::memcpy(&wv, wr + kj * 16, sizeof(V16));
            acc += xv * wv;
          }
        }
        std::memcpy(out + (oh * s.ow + ow) * 16, &acc, sizeof(V16));
      }
    }
    float* yb = y + (n * s.c + ch0) * p;
    for (int64_t p0 = 0; p0 < p; p0 += 16) {
      const int64_t count = std::min<int64_t>(16, p - p0);
      if (count < kLanesTransposeFrom) {
        for (int64_t lane = 0; lane < lanes; ++lane) {
          for (int64_t k = 0; k < count; ++k) {
            yb[lane * p + p0 + k] = out[(p0 + k) * 16 + lane];
          }
        }
        continue;
      }
      std::memcpy(rows, out + p0 * 16, sizeof(rows));
      Transpose16x16(rows);
      for (int64_t lane = 0; lane < lanes; ++lane) {
        float* dst = yb + lane * p + p0;
        if (count == 16) {
          std::memcpy(dst, &rows[lane], sizeof(V16));
        } else {
          for (int64_t k = 0; k < count; ++k) dst[k] = rows[lane][k];
        }
      }
    }
  }
}

// Below this many output positions per image (8x8), several images share
// one GEMM of about kBatchedColumns columns. Measured per layer with
// bench/conv_bench (batch 16, 1 and 2 threads, AVX-512): on ResNet-18's 2x2
// and 4x4 layers one GEMM over 16 images takes 2.4-6 ms where 16 per-image
// GEMMs take 10-23 ms (the weights packed 16 times, GEMMs 4 or 16 columns
// wide); at 8x8 the two are within noise, and 1x1 convolutions with short
// reductions lose to the copies in and out. The gain flattens from about 128
// columns on.
constexpr int64_t kBatchBelowPositions = 64;

// 3x3 depthwise maps of at most this many output positions (8x8) take the
// channels-in-lanes kernel (DepthwiseLanesRange), larger ones the
// padded-plane kernel; other windows take lanes whenever its scratch (16
// channels of one padded image and output) fits, so that it stays in L2.
// Measured with bench/conv_bench (batch 16, 1 thread, AVX-512): 3x3 at 8x8
// within 10% of planes, at 4x4 and 2x2 1.5-3.5x faster; at 16x16 planes is
// 1.9x faster; 5x5 (no planes kernel) 4-5x faster than the direct loop.
constexpr int64_t kLanesAtMostPositions = 64;
constexpr int64_t kMaxLanesScratch = int64_t{1} << 16;  // 256 KiB
constexpr int64_t kBatchedColumns = 256;

}  // namespace

int64_t ConvImagesPerGemm(const Conv2DShape& s) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * s.kh * s.kw, p = s.oh * s.ow;
  if (s.n <= 1 || p <= 0 || p >= kBatchBelowPositions) return 1;
  const int64_t want = std::min(s.n, CeilDiv(kBatchedColumns, p));
  const int64_t fit =
      kMaxBatchedConvScratch / std::max<int64_t>(1, (k + mg) * p);
  return std::max<int64_t>(1, std::min(want, fit));
}

DepthwiseKernel ChooseDepthwiseKernel(const Conv2DShape& s) {
  const bool planes = IsDepthwise3x3(s);
  if ((!planes || s.oh * s.ow <= kLanesAtMostPositions) &&
      DwLanesScratchSize(DwLanesLayoutFor(s)) + 2 * s.h * s.w <=
          kMaxLanesScratch) {
    return DepthwiseKernel::kLanes;
  }
  return planes ? DepthwiseKernel::kPlanes : DepthwiseKernel::kDirect;
}

void DepthwiseConv2D(const float* x, const float* w, const float* bias,
                     float* y, const Conv2DShape& s, DepthwiseKernel kernel,
                     ThreadPool* pool) {
  const int64_t p = s.oh * s.ow;
  if (p == 0 || s.n == 0 || s.c == 0) return;
  if (kernel == DepthwiseKernel::kPlanes && !IsDepthwise3x3(s)) {
    kernel = DepthwiseKernel::kDirect;
  }
  switch (kernel) {
    case DepthwiseKernel::kLanes: {
      const DwLanesLayout l = DwLanesLayoutFor(s);
      ParallelRange(pool, s.n * ((s.c + 15) / 16), 1,
                    [&](int64_t b, int64_t e) {
                      std::vector<float> scratch(DwLanesScratchSize(l));
                      std::vector<int64_t> dest(s.h * s.w);
                      DepthwiseLanesRange(x, w, bias, y, s, l, scratch.data(),
                                          dest.data(), b, e);
                    });
      return;
    }
    case DepthwiseKernel::kPlanes: {
      const Dw3x3Layout l = Dw3x3LayoutFor(s);
      ParallelRange(pool, s.n * s.c, 1, [&](int64_t b, int64_t e) {
        std::vector<float> scratch(Dw3x3ScratchSize(l));
        Depthwise3x3Range(x, w, bias, y, s, l, scratch.data(), b, e);
      });
      return;
    }
    case DepthwiseKernel::kDirect:
      ParallelRange(pool, s.n * s.c, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const int64_t c = i % s.c;
          DepthwiseChannel(x + i * s.h * s.w, w + c * s.kh * s.kw,
                           bias ? bias[c] : 0.0f, y + i * p, s);
        }
      });
      return;
  }
}

void Conv2D(const float* x, const float* w, const float* bias, float* y,
            const Conv2DShape& s, ThreadPool* pool) {
  Conv2DWithImagesPerGemm(x, w, bias, y, s, ConvImagesPerGemm(s), pool);
}

void Conv3D(const float* x, const float* w, const float* bias, float* y,
            const Conv2DShape& s, const DepthWindow& depth, ThreadPool* pool) {
  const int64_t cg = s.c / s.group;
  const int64_t in_plane = s.h * s.w, out_plane = s.oh * s.ow;
  const int64_t k_plane = s.kh * s.kw;
  if (s.n == 0 || depth.od == 0 || out_plane == 0) return;
  // Contiguous [n, c, h, w] input planes and [m, c/group, kh, kw] kernel
  // planes, one per depth, as Conv2D reads them.
  std::vector<float> planes(static_cast<size_t>(depth.d * s.n * s.c) *
                            in_plane);
  for (int64_t i = 0; i < s.n * s.c; ++i) {
    for (int64_t d = 0; d < depth.d; ++d) {
      std::memcpy(&planes[(d * s.n * s.c + i) * in_plane],
                  x + (i * depth.d + d) * in_plane, in_plane * sizeof(float));
    }
  }
  std::vector<float> kernels(static_cast<size_t>(depth.kd * s.m * cg) *
                             k_plane);
  for (int64_t i = 0; i < s.m * cg; ++i) {
    for (int64_t d = 0; d < depth.kd; ++d) {
      std::memcpy(&kernels[(d * s.m * cg + i) * k_plane],
                  w + (i * depth.kd + d) * k_plane, k_plane * sizeof(float));
    }
  }
  const size_t out_size = static_cast<size_t>(s.n * s.m) * out_plane;
  std::vector<float> sum(out_size), part(out_size);
  for (int64_t od = 0; od < depth.od; ++od) {
    bool first = true;
    for (int64_t kd = 0; kd < depth.kd; ++kd) {
      const int64_t id = od * depth.sd - depth.pd + kd * depth.dd;
      if (id < 0 || id >= depth.d) continue;
      Conv2D(&planes[id * s.n * s.c * in_plane],
             &kernels[kd * s.m * cg * k_plane], first ? bias : nullptr,
             first ? sum.data() : part.data(), s, pool);
      if (!first) {
        for (size_t i = 0; i < out_size; ++i) sum[i] += part[i];
      }
      first = false;
    }
    if (first) {  // The window lies in the padding: the bias alone.
      for (int64_t i = 0; i < s.n * s.m; ++i) {
        std::fill_n(&sum[i * out_plane], out_plane,
                    bias != nullptr ? bias[i % s.m] : 0.0f);
      }
    }
    for (int64_t i = 0; i < s.n * s.m; ++i) {
      std::memcpy(y + (i * depth.od + od) * out_plane, &sum[i * out_plane],
                  out_plane * sizeof(float));
    }
  }
}

void Conv2DWithImagesPerGemm(const float* x, const float* w, const float* bias,
                             float* y, const Conv2DShape& s,
                             int64_t images_per_gemm, ThreadPool* pool) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * s.kh * s.kw, p = s.oh * s.ow;
  if (p == 0 || s.n == 0) return;
  if (cg == 1 && mg == 1) {
    DepthwiseConv2D(x, w, bias, y, s, ChooseDepthwiseKernel(s), pool);
    return;
  }
  const int64_t threads = pool ? pool->parallelism() : 1;
  const int64_t nb = std::clamp<int64_t>(images_per_gemm, 1, s.n);
  if (nb > 1) {
    // Jobs are (batch of nb images, group) pairs; the last batch may be
    // short.
    const int64_t jobs = CeilDiv(s.n, nb) * s.group;
    const std::vector<int64_t> map =
        IsPointwise(s) ? std::vector<int64_t>() : Im2ColOffsets(s);
    auto job = [&](int64_t j, float* col, float* out, ThreadPool* inner) {
      const int64_t n0 = j / s.group * nb;
      ConvGroupImages(x, w, bias, y, s, map.data(), n0, std::min(nb, s.n - n0),
                      j % s.group, col, out, inner);
    };
    const int64_t cols = nb * p;
    if (jobs >= threads && threads > 1) {
      ParallelRange(pool, jobs, 1, [&](int64_t b, int64_t e) {
        std::unique_ptr<float[]> col(new float[k * cols]);
        std::unique_ptr<float[]> out(new float[mg * cols]);
        for (int64_t j = b; j < e; ++j) job(j, col.get(), out.get(), nullptr);
      });
      return;
    }
    std::unique_ptr<float[]> col(new float[k * cols]);
    std::unique_ptr<float[]> out(new float[mg * cols]);
    for (int64_t j = 0; j < jobs; ++j) job(j, col.get(), out.get(), pool);
    return;
  }
  const int64_t jobs = s.n * s.group;
  auto job = [&](int64_t j, float* col, ThreadPool* inner) {
    const int64_t n = j / s.group, g = j % s.group;
    ConvGroup(x + (n * s.c + g * cg) * s.h * s.w, w + g * mg * k,
              bias ? bias + g * mg : nullptr, y + (n * s.m + g * mg) * p, s,
              col, inner);
  };
  const int64_t col_floats = ConvGroupScratchFloats(s);
  if (jobs >= threads && threads > 1) {
    // Enough independent images/groups: one per thread, each single-threaded.
    ParallelRange(pool, jobs, 1, [&](int64_t b, int64_t e) {
      std::unique_ptr<float[]> col(new float[col_floats]);
      for (int64_t j = b; j < e; ++j) job(j, col.get(), nullptr);
    });
    return;
  }
  std::unique_ptr<float[]> col(new float[col_floats]);
  for (int64_t j = 0; j < jobs; ++j) job(j, col.get(), pool);
}

namespace {

// One channel of max pooling.
QUANTD_VECTOR_CLONES void MaxPoolChannel(const float* xc, float* yc,
                                         const Conv2DShape& s) {
  std::fill(yc, yc + s.oh * s.ow, -std::numeric_limits<float>::infinity());
  for (int64_t ki = 0; ki < s.kh; ++ki) {
    for (int64_t kj = 0; kj < s.kw; ++kj) {
      int64_t lo, hi;
      ValidColumns(s, kj, &lo, &hi);
      const int64_t shift = kj * s.dw - s.pl;
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const int64_t ih = oh * s.sh - s.pt + ki * s.dh;
        if (ih < 0 || ih >= s.h) continue;
        const float* src = xc + ih * s.w + shift;
        float* dst = yc + oh * s.ow;
        if (s.sw == 1) {
          for (int64_t ow = lo; ow < hi; ++ow) {
            dst[ow] = std::max(dst[ow], src[ow]);
          }
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) {
            dst[ow] = std::max(dst[ow], src[ow * s.sw]);
          }
        }
      }
    }
  }
}

// One channel of window sums (the caller divides).
QUANTD_VECTOR_CLONES void SumPoolChannel(const float* xc, float* yc,
                                         const Conv2DShape& s) {
  std::fill(yc, yc + s.oh * s.ow, 0.0f);
  for (int64_t ki = 0; ki < s.kh; ++ki) {
    for (int64_t kj = 0; kj < s.kw; ++kj) {
      int64_t lo, hi;
      ValidColumns(s, kj, &lo, &hi);
      const int64_t shift = kj * s.dw - s.pl;
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const int64_t ih = oh * s.sh - s.pt + ki * s.dh;
        if (ih < 0 || ih >= s.h) continue;
        const float* src = xc + ih * s.w + shift;
        float* dst = yc + oh * s.ow;
        for (int64_t ow = lo; ow < hi; ++ow) dst[ow] += src[ow * s.sw];
      }
    }
  }
}

}  // namespace

void MaxPool2D(const float* x, float* y, const Conv2DShape& s,
               ThreadPool* pool) {
  const int64_t p = s.oh * s.ow;
  ParallelRange(pool, s.n * s.c, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      MaxPoolChannel(x + i * s.h * s.w, y + i * p, s);
  });
}

void AveragePool2D(const float* x, float* y, const Conv2DShape& s,
                   bool count_include_pad, ThreadPool* pool) {
  const int64_t p = s.oh * s.ow;
  // Divisors depend only on the output position.
  std::vector<float> inv(p);
  for (int64_t oh = 0; oh < s.oh; ++oh) {
    for (int64_t ow = 0; ow < s.ow; ++ow) {
      const int64_t h0 = oh * s.sh - s.pt, w0 = ow * s.sw - s.pl;
      int64_t count = 0;
      if (count_include_pad) {
        // Positions inside the padded input [-pt, h + pb) x [-pl, w + pr).
        const int64_t rows =
            std::min(h0 + (s.kh - 1) * s.dh + 1, s.h + s.pb) - h0;
        const int64_t cols =
            std::min(w0 + (s.kw - 1) * s.dw + 1, s.w + s.pr) - w0;
        count = CeilDiv(rows, s.dh) * CeilDiv(cols, s.dw);
      } else {
        int64_t rows = 0, cols = 0;
        for (int64_t ki = 0; ki < s.kh; ++ki) {
          const int64_t ih = h0 + ki * s.dh;
          rows += ih >= 0 && ih < s.h;
        }
        for (int64_t kj = 0; kj < s.kw; ++kj) {
          const int64_t iw = w0 + kj * s.dw;
          cols += iw >= 0 && iw < s.w;
        }
        count = rows * cols;
      }
      inv[oh * s.ow + ow] = count > 0 ? 1.0f / count : 0.0f;
    }
  }
  ParallelRange(pool, s.n * s.c, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* yc = y + i * p;
      SumPoolChannel(x + i * s.h * s.w, yc, s);
      for (int64_t j = 0; j < p; ++j) yc[j] *= inv[j];
    }
  });
}

namespace {

// Pools a 3-D window as a 2-D one: for each output depth, the input planes of
// its depth window are first combined elementwise (max or sum), then pooled
// in 2-D by `pool2d` into a [n * c, oh, ow] plane that is scattered into y.
// Scratch is one input depth and one output depth, whatever the window.
template <typename Combine, typename Pool2D>
void Pool3D(const float* x, float* y, const Conv2DShape& s,
            const DepthWindow& depth, float empty, Combine combine,
            Pool2D pool2d, ThreadPool* pool) {
  const int64_t planes = s.n * s.c;
  const int64_t in_plane = s.h * s.w, out_plane = s.oh * s.ow;
  std::vector<float> merged(static_cast<size_t>(planes * in_plane));
  std::vector<float> pooled(static_cast<size_t>(planes * out_plane));
  for (int64_t od = 0; od < depth.od; ++od) {
    std::fill(merged.begin(), merged.end(), empty);
    int64_t valid = 0;
    for (int64_t kd = 0; kd < depth.kd; ++kd) {
      const int64_t id = od * depth.sd - depth.pd + kd * depth.dd;
      if (id < 0 || id >= depth.d) continue;
      ++valid;
      ParallelRange(pool, planes, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float* src = x + (i * depth.d + id) * in_plane;
          float* dst = &merged[i * in_plane];
          for (int64_t j = 0; j < in_plane; ++j)
            dst[j] = combine(dst[j], src[j]);
        }
      });
    }
    pool2d(merged.data(), pooled.data(), od, valid);
    for (int64_t i = 0; i < planes; ++i) {
      std::memcpy(y + (i * depth.od + od) * out_plane, &pooled[i * out_plane],
                  out_plane * sizeof(float));
    }
  }
}

}  // namespace

void MaxPool3D(const float* x, float* y, const Conv2DShape& s,
               const DepthWindow& depth, ThreadPool* pool) {
  Pool3D(
      x, y, s, depth, -std::numeric_limits<float>::infinity(),
      [](float a, float b) { return std::max(a, b); },
      [&](const float* in, float* out, int64_t, int64_t) {
        MaxPool2D(in, out, s, pool);
      },
      pool);
}

void AveragePool3D(const float* x, float* y, const Conv2DShape& s,
                   const DepthWindow& depth, bool count_include_pad,
                   ThreadPool* pool) {
  const int64_t out_size = s.n * s.c * s.oh * s.ow;
  Pool3D(
      x, y, s, depth, 0.0f, [](float a, float b) { return a + b; },
      [&](const float* in, float* out, int64_t od, int64_t valid) {
        AveragePool2D(in, out, s, count_include_pad, pool);
        int64_t count = valid;
        if (count_include_pad) {
          // Depth positions inside the padded input [-pd, d + pe).
          const int64_t d0 = od * depth.sd - depth.pd;
          count = CeilDiv(
              std::min(d0 + (depth.kd - 1) * depth.dd + 1, depth.d + depth.pe) -
                  d0,
              depth.dd);
        }
        const float inv = count > 0 ? 1.0f / count : 0.0f;
        for (int64_t i = 0; i < out_size; ++i) out[i] *= inv;
      },
      pool);
}

}  // namespace quantd::executor
