// Eigen's GEMM built for AVX-512 (plus FMA) in a library compiled for the
// baseline x86-64 ISA: the pragma lets this file emit AVX-512 code and the
// feature macros make Eigen pick its AVX-512 packets (GCC's target pragma
// does not define them). Eigen is renamed so none of its templates are
// shared with the baseline build. Only called after a CPU check (gemm.cc).
// Nothing but Eigen may be included here: any std template instantiated in
// this file could be emitted with AVX-512 code.
#if defined(__x86_64__) && !defined(__AVX512F__)
#pragma GCC target( \
    "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c,sse4.2,popcnt")
#define __SSE3__ 1
#define __SSSE3__ 1
#define __SSE4_1__ 1
#define __SSE4_2__ 1
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#define __AVX512F__ 1
#define __AVX512DQ__ 1
#endif
// GCC 12 reports false "may be used uninitialized" inside its own
// avx512fintrin.h for Eigen's AVX-512 packets.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define Eigen quantd_eigen_avx512
#define QUANTD_GEMM_BLOCK GemmBlockAvx512
#include "core/executor/gemm_block.inc"
