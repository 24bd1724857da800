#include "core/executor/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/executor/gemm.h"
#include "core/executor/parallel.h"

// The direct loops (depthwise convolution, pooling) are built once per
// instruction set and picked at load time (GCC function multi-versioning):
// the library itself targets baseline x86-64, where they would run 4 floats
// at a time instead of 16. O3 lets GCC vectorize loops of unknown length.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QUANTD_MULTIVERSION \
  __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define QUANTD_MULTIVERSION
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

// Rows [c0, c1) of the channel range of col = im2col(xg), where xg holds
// the group's channels [cg, h, w] and col is [cg*kh*kw, oh*ow].
void Im2Col(const float* xg, const Conv2DShape& s, int64_t c0, int64_t c1,
            float* col) {
  const int64_t p = s.oh * s.ow;
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        float* row = col + ((c * s.kh + ki) * s.kw + kj) * p;
        int64_t lo, hi;
        ValidColumns(s, kj, &lo, &hi);
        const int64_t shift = kj * s.dw - s.pl;
        for (int64_t oh = 0; oh < s.oh; ++oh) {
          float* dst = row + oh * s.ow;
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

void AddBias(const float* bias, int64_t rows, int64_t p, float* y) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) {
    const float b = bias[r];
    float* yr = y + r * p;
    for (int64_t i = 0; i < p; ++i) yr[i] += b;
  }
}

// One image, one group: y_g = w_g * im2col(x_g) + bias_g.
void ConvGroup(const float* xg, const float* wg, const float* bias, float* yg,
               const Conv2DShape& s, float* col, ThreadPool* pool) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * s.kh * s.kw, p = s.oh * s.ow;
  const bool pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 &&
                         s.pt == 0 && s.pl == 0 && s.oh == s.h && s.ow == s.w;
  const float* b = xg;
  if (!pointwise) {
    ParallelRange(pool, cg, 4,
                  [&](int64_t c0, int64_t c1) { Im2Col(xg, s, c0, c1, col); });
    b = col;
  }
  Gemm(false, false, mg, p, k, 1.0f, wg, k, b, p, 0.0f, yg, p, pool);
  AddBias(bias, mg, p, yg);
}

// Depthwise (one input and one output channel per group): a direct loop is
// far cheaper than a GEMM with a single output row.
// Output rows outer, taps inner: each output row stays in L1 while its
// kh*kw contributions are added.
QUANTD_MULTIVERSION void DepthwiseChannel(const float* xc, const float* wc,
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

}  // namespace

void Conv2D(const float* x, const float* w, const float* bias, float* y,
            const Conv2DShape& s, ThreadPool* pool) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * s.kh * s.kw, p = s.oh * s.ow;
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
  const int64_t jobs = s.n * s.group;
  auto job = [&](int64_t j, float* col, ThreadPool* inner) {
    const int64_t n = j / s.group, g = j % s.group;
    ConvGroup(x + (n * s.c + g * cg) * s.h * s.w, w + g * mg * k,
              bias ? bias + g * mg : nullptr, y + (n * s.m + g * mg) * p, s,
              col, inner);
  };
  const int64_t threads = pool ? pool->size() + 1 : 1;
  if (jobs >= threads && threads > 1) {
    // Enough independent images/groups: one per thread, each single-threaded.
    ParallelRange(pool, jobs, 1, [&](int64_t b, int64_t e) {
      std::unique_ptr<float[]> col(new float[k * p]);
      for (int64_t j = b; j < e; ++j) job(j, col.get(), nullptr);
    });
    return;
  }
  std::unique_ptr<float[]> col(new float[k * p]);
  for (int64_t j = 0; j < jobs; ++j) job(j, col.get(), pool);
}

namespace {

// One channel of max pooling.
QUANTD_MULTIVERSION void MaxPoolChannel(const float* xc, float* yc,
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
QUANTD_MULTIVERSION void SumPoolChannel(const float* xc, float* yc,
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
