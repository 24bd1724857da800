// Slow, obvious reference kernels: the oracle the executor's fast Conv and
// MatMul are compared against. Plain loops, double accumulation, no tricks.
#ifndef QUANTD_TESTS_CORE_EXECUTOR_REFERENCE_KERNELS_H_
#define QUANTD_TESTS_CORE_EXECUTOR_REFERENCE_KERNELS_H_

#include <cstdint>
#include <vector>

namespace quantd::testing {

// Plain NCHW convolution (1-D when h == kh == 1). pads: top, left, bottom,
// right. Returns y [n, m, oh, ow] and sets oh/ow.
struct RefConvParams {
  int64_t n, c, h, w, m, group, kh, kw;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
};

inline std::vector<float> RefConv(const RefConvParams& p,
                                  const std::vector<float>& x,
                                  const std::vector<float>& w,
                                  const std::vector<float>* bias,
                                  int64_t* oh_out, int64_t* ow_out) {
  const int64_t oh = (p.h + p.pt + p.pb - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  const int64_t ow = (p.w + p.pl + p.pr - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  *oh_out = oh;
  *ow_out = ow;
  const int64_t cg = p.c / p.group, mg = p.m / p.group;
  std::vector<float> y(p.n * p.m * oh * ow);
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t m = 0; m < p.m; ++m) {
      const int64_t g = m / mg;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bias ? (*bias)[m] : 0.0;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t ki = 0; ki < p.kh; ++ki) {
              for (int64_t kj = 0; kj < p.kw; ++kj) {
                const int64_t ih = i * p.sh - p.pt + ki * p.dh;
                const int64_t iw = j * p.sw - p.pl + kj * p.dw;
                if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
                acc +=
                    double(x[((n * p.c + g * cg + c) * p.h + ih) * p.w + iw]) *
                    w[((m * cg + c) * p.kh + ki) * p.kw + kj];
              }
            }
          }
          y[((n * p.m + m) * oh + i) * ow + j] = static_cast<float>(acc);
        }
      }
    }
  }
  return y;
}

// One [m,k] x [k,n] product.
inline void RefMatrixProduct(const float* a, const float* b, int64_t m,
                             int64_t k, int64_t n, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l)
        acc += double(a[i * k + l]) * b[l * n + j];
      y[i * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_CORE_EXECUTOR_REFERENCE_KERNELS_H_
