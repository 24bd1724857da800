// The float matrix product behind Conv, Gemm and MatMul: one entry point so
// the fast path (and its threading) lives in one place.
#ifndef QUANTD_CORE_EXECUTOR_GEMM_H_
#define QUANTD_CORE_EXECUTOR_GEMM_H_

#include <cstdint>

namespace quantd {
class ThreadPool;
}

namespace quantd::executor {

// Row-major C[m,n] = alpha * op(A) * op(B) + beta * C, where op(A) is [m,k]
// (A stored [k,m] when trans_a) and op(B) is [k,n]; lda/ldb/ldc are row
// strides. beta == 0 ignores C's previous contents (it may be garbage).
// Splits the rows or columns of C over `pool` when the product is large.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc, ThreadPool* pool);
// The same contract for double (Eigen at the library's instruction set; the
// kernels that accept DOUBLE are rarely hot).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          double alpha, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc, ThreadPool* pool);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_GEMM_H_
