// Splitting a kernel's work over the core ThreadPool (the caller takes part,
// so this is safe from pool threads running concurrent batches).
#ifndef QUANTD_CORE_BASE_PARALLEL_H_
#define QUANTD_CORE_BASE_PARALLEL_H_

#include <algorithm>
#include <cstdint>

#include "core/base/thread_pool.h"

namespace quantd {

// Calls fn(begin, end) over [0, n) in contiguous chunks of at least `grain`
// items, one chunk per thread the caller's ParallelFor runs on
// (pool->parallelism()); inline without a pool.
template <typename F>
void ParallelRange(ThreadPool* pool, int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  const int64_t threads = pool ? pool->parallelism() : 1;
  const int64_t chunks = std::max<int64_t>(
      1, std::min<int64_t>(threads, n / std::max<int64_t>(grain, 1)));
  if (chunks == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool->ParallelFor(chunks, [&](int64_t c) {
    const int64_t begin = n * c / chunks;
    const int64_t end = n * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace quantd

#endif  // QUANTD_CORE_BASE_PARALLEL_H_
