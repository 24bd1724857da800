// Whether GCC function multi-versioning (target_clones: a function built once
// per instruction set, picked at load time by an ifunc resolver) is used.
// Off for Clang (its target_clones differs) and under ThreadSanitizer: the
// resolver runs while the dynamic loader relocates the binary, before the
// TSan runtime is initialised, and its instrumented entry crashes every
// binary at load.
#ifndef QUANTD_CORE_BASE_MULTIVERSION_H_
#define QUANTD_CORE_BASE_MULTIVERSION_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define QUANTD_HAS_TARGET_CLONES 1
#else
#define QUANTD_HAS_TARGET_CLONES 0
#endif

// For a simple loop GCC vectorizes: built for AVX-512, AVX2 and the
// baseline (16, 8 or 4 floats at a time), picked at load time; O3 so that
// loops of unknown length vectorize at all.
#if QUANTD_HAS_TARGET_CLONES
#define QUANTD_VECTOR_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define QUANTD_VECTOR_CLONES
#endif

// For a kernel whose clones must compute the same sums bit for bit: built
// for x86-64-v4 (AVX-512), v3 (AVX2) and the baseline, picked at load time,
// with fp-contract=off (no FMA in one clone and not in another).
#if QUANTD_HAS_TARGET_CLONES
#define QUANTD_EXACT_CLONES                                                    \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), \
                 optimize("O3", "fp-contract=off")))
#else
#define QUANTD_EXACT_CLONES
#endif

#endif  // QUANTD_CORE_BASE_MULTIVERSION_H_
