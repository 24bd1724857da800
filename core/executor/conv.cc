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

// Below this many output positions per image (8x8), several images share
// one GEMM of about kBatchedColumns columns. Measured per layer with
// bench/conv_bench (batch 16, 1 and 2 threads, AVX-512): on ResNet-18's 2x2
// and 4x4 layers one GEMM over 16 images takes 2.4-6 ms where 16 per-image
// GEMMs take 10-23 ms (the weights packed 16 times, GEMMs 4 or 16 columns
// wide); at 8x8 the two are within noise, and 1x1 convolutions with short
// reductions lose to the copies in and out. The gain flattens from about 128
// columns on.
constexpr int64_t kBatchBelowPositions = 64;
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

void Conv2D(const float* x, const float* w, const float* bias, float* y,
            const Conv2DShape& s, ThreadPool* pool) {
  Conv2DWithImagesPerGemm(x, w, bias, y, s, ConvImagesPerGemm(s), pool);
}

void Conv2DWithImagesPerGemm(const float* x, const float* w, const float* bias,
                             float* y, const Conv2DShape& s,
                             int64_t images_per_gemm, ThreadPool* pool) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * s.kh * s.kw, p = s.oh * s.ow;
  if (p == 0 || s.n == 0) return;
  if (cg == 1 && mg == 1 && IsDepthwise3x3(s)) {
    const Dw3x3Layout l = Dw3x3LayoutFor(s);
    ParallelRange(pool, s.n * s.c, 1, [&](int64_t b, int64_t e) {
      std::vector<float> scratch(Dw3x3ScratchSize(l));
      Depthwise3x3Range(x, w, bias, y, s, l, scratch.data(), b, e);
    });
    return;
  }
  if (cg == 1 && mg == 1) {
    ParallelRange(pool, s.n * s.c, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t c = i % s.c;
        DepthwiseChannel(x + i * s.h * s.w, w + c * s.kh * s.kw,
                         bias ? bias[c] : 0.0f, y + i * p, s);
      }
    });
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

}  // namespace quantd::executor
