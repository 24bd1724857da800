#include "fuzz/alloc_limit.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace quantd::fuzz {
namespace {

// The largest single allocation allowed while an input runs (SIZE_MAX
// outside), and who set it.
std::atomic<size_t> alloc_limit{SIZE_MAX};
std::atomic<const char*> limit_owner{"fuzzer"};

#ifndef QUANTD_FUZZ_SANITIZED
[[noreturn]] void AllocationTooLarge(size_t bytes) {
  std::fprintf(stderr,
               "%s: an allocation of %zu bytes, beyond what the input "
               "implies (%zu)\n",
               limit_owner.load(), bytes, alloc_limit.load());
  std::abort();
}
#endif

}  // namespace

ScopedAllocLimit::ScopedAllocLimit(const char* target, size_t input_size,
                                   size_t slack, size_t per_input_byte) {
  limit_owner.store(target);
  alloc_limit.store(slack + per_input_byte * input_size);
}

ScopedAllocLimit::~ScopedAllocLimit() { alloc_limit.store(SIZE_MAX); }

}  // namespace quantd::fuzz

#ifndef QUANTD_FUZZ_SANITIZED
// Replaces the global operator new (the array, nothrow and aligned forms of
// libstdc++ call it or aligned_alloc); the default operator delete frees
// with free(), which matches.
void* operator new(size_t bytes) {
  if (bytes > quantd::fuzz::alloc_limit.load(std::memory_order_relaxed)) {
    quantd::fuzz::AllocationTooLarge(bytes);
  }
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}

// Tensor storage (core/executor/tensor.cc) comes from aligned_alloc.
extern "C" void* aligned_alloc(size_t alignment, size_t bytes) {
  if (bytes > quantd::fuzz::alloc_limit.load(std::memory_order_relaxed)) {
    quantd::fuzz::AllocationTooLarge(bytes);
  }
  void* p = nullptr;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  return posix_memalign(&p, alignment, bytes) == 0 ? p : nullptr;
}
#endif
