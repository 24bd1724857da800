// A bound on single allocations while a fuzz input runs, for the replay
// builds (gcc, no sanitizer): an input that makes the code under test
// allocate far more than its own size implies (a header declaring 2^60
// elements) aborts instead of passing or exhausting memory. Linking
// alloc_limit.cc replaces the global operator new and aligned_alloc.
// Sanitizer runtimes replace those themselves and bound allocations with
// -malloc_limit_mb, so there the guard is off.
#ifndef QUANTD_FUZZ_ALLOC_LIMIT_H_
#define QUANTD_FUZZ_ALLOC_LIMIT_H_

#include <cstddef>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define QUANTD_FUZZ_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define QUANTD_FUZZ_SANITIZED 1
#endif

namespace quantd::fuzz {

// While alive, no single allocation may exceed
// slack + per_input_byte * input_size; `target` names the fuzzer in the
// abort message.
class ScopedAllocLimit {
 public:
  ScopedAllocLimit(const char* target, size_t input_size, size_t slack,
                   size_t per_input_byte);
  ~ScopedAllocLimit();
  ScopedAllocLimit(const ScopedAllocLimit&) = delete;
  ScopedAllocLimit& operator=(const ScopedAllocLimit&) = delete;
};

}  // namespace quantd::fuzz

#endif  // QUANTD_FUZZ_ALLOC_LIMIT_H_
