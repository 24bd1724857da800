#include "core/executor/gemm.h"

#include "Eigen/Core"
#include "core/base/parallel.h"
#include "core/executor/gemm_internal.h"

namespace quantd::executor {
namespace {

using gemm_internal::GemmBlockFn;

// The widest GEMM block this CPU runs, chosen once.
GemmBlockFn PickBlock() {
// QUANTD_GEMM_PORTABLE_ONLY: the libFuzzer build (fuzz/CMakeLists.txt) leaves
// out gemm_avx2.cc and gemm_avx512.cc, which clang cannot compile (they turn
// on AVX with GCC's target pragma, which clang ignores, so Eigen's AVX
// intrinsics refuse to inline); the generic block computes the same GEMM.
#if defined(__x86_64__) && !defined(QUANTD_GEMM_PORTABLE_ONLY)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) {
    return &gemm_internal::GemmBlockAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return &gemm_internal::GemmBlockAvx2;
  }
#endif
  return &gemm_internal::GemmBlockGeneric;
}

// Rows [r0, r1) and columns [c0, c1) of C.
void GemmBlock(bool trans_a, bool trans_b, int64_t r0, int64_t r1, int64_t c0,
               int64_t c1, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  static const GemmBlockFn block = PickBlock();
  block(trans_a, trans_b, r1 - r0, c1 - c0, k, alpha,
        trans_a ? a + r0 : a + r0 * lda, lda, trans_b ? b + c0 * ldb : b + c0,
        ldb, beta, c + r0 * ldc + c0, ldc);
}

}  // namespace

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      }
    }
    return;
  }
  // Below ~1 MFLOP a thread hand-off costs more than it saves.
  const bool split = pool != nullptr && m * n * k >= (int64_t{1} << 20);
  if (!split) {
    GemmBlock(trans_a, trans_b, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
    return;
  }
  // Split the longer side of C so every task keeps a reasonably shaped block.
  if (m >= n) {
    ParallelRange(pool, m, 16, [&](int64_t r0, int64_t r1) {
      GemmBlock(trans_a, trans_b, r0, r1, 0, n, k, alpha, a, lda, b, ldb, beta,
                c, ldc);
    });
  } else {
    ParallelRange(pool, n, 64, [&](int64_t c0, int64_t c1) {
      GemmBlock(trans_a, trans_b, 0, m, c0, c1, k, alpha, a, lda, b, ldb, beta,
                c, ldc);
    });
  }
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          double alpha, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc, ThreadPool* pool) {
  using Mat =
      Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CMap = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;
  if (m == 0 || n == 0) return;
  Eigen::Map<Mat, 0, Eigen::OuterStride<>> cm(c, m, n,
                                              Eigen::OuterStride<>(ldc));
  if (beta == 0.0) {
    cm.setZero();
  } else if (beta != 1.0) {
    cm *= beta;
  }
  if (k == 0) return;
  // op(A) rows [r0, r1): each task owns a band of C.
  ParallelRange(
      m * n * k >= (int64_t{1} << 20) ? pool : nullptr, m, 16,
      [&](int64_t r0, int64_t r1) {
        const int64_t rows = r1 - r0;
        auto cb = cm.middleRows(r0, rows);
        if (!trans_a && !trans_b) {
          cb.noalias() +=
              alpha * CMap(a + r0 * lda, rows, k, Eigen::OuterStride<>(lda)) *
              CMap(b, k, n, Eigen::OuterStride<>(ldb));
        } else if (!trans_a) {
          cb.noalias() +=
              alpha * CMap(a + r0 * lda, rows, k, Eigen::OuterStride<>(lda)) *
              CMap(b, n, k, Eigen::OuterStride<>(ldb)).transpose();
        } else if (!trans_b) {
          cb.noalias() += alpha *
                          CMap(a, k, m, Eigen::OuterStride<>(lda))
                              .middleCols(r0, rows)
                              .transpose() *
                          CMap(b, k, n, Eigen::OuterStride<>(ldb));
        } else {
          cb.noalias() += alpha *
                          CMap(a, k, m, Eigen::OuterStride<>(lda))
                              .middleCols(r0, rows)
                              .transpose() *
                          CMap(b, n, k, Eigen::OuterStride<>(ldb)).transpose();
        }
      });
}

}  // namespace quantd::executor
