// Eigen's GEMM built for AVX2 + FMA; see gemm_avx512.cc for why the pragma,
// the feature macros and the renamed namespace.
#if defined(__x86_64__) && !defined(__AVX2__)
#pragma GCC target("avx2,fma,f16c,sse4.2,popcnt")
#define __SSE3__ 1
#define __SSSE3__ 1
#define __SSE4_1__ 1
#define __SSE4_2__ 1
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#endif
#define Eigen quantd_eigen_avx2
#define QUANTD_GEMM_BLOCK GemmBlockAvx2
#include "core/executor/gemm_block.inc"
