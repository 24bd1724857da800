// The per-instruction-set GEMM blocks behind Gemm() (gemm.cc picks one at
// run time from the CPU's features).
#ifndef QUANTD_CORE_EXECUTOR_GEMM_INTERNAL_H_
#define QUANTD_CORE_EXECUTOR_GEMM_INTERNAL_H_

#include <cstdint>

namespace quantd::executor::gemm_internal {

// C[rows, cols] = alpha * op(A) * op(B) + beta * C for pointers already at
// the block's first row/column (see Gemm in gemm.h for the layout).
using GemmBlockFn = void (*)(bool trans_a, bool trans_b, int64_t rows,
                             int64_t cols, int64_t k, float alpha,
                             const float* a, int64_t lda, const float* b,
                             int64_t ldb, float beta, float* c, int64_t ldc);

void GemmBlockGeneric(bool, bool, int64_t, int64_t, int64_t, float,
                      const float*, int64_t, const float*, int64_t, float,
                      float*, int64_t);
void GemmBlockAvx2(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                   int64_t, const float*, int64_t, float, float*, int64_t);
void GemmBlockAvx512(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                     int64_t, const float*, int64_t, float, float*, int64_t);

}  // namespace quantd::executor::gemm_internal

#endif  // QUANTD_CORE_EXECUTOR_GEMM_INTERNAL_H_
