// A fixed-size pool of worker threads for core work (jobs and the
// per-tensor work inside them).
#ifndef QUANTD_CORE_BASE_THREAD_POOL_H_
#define QUANTD_CORE_BASE_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace quantd {

class ThreadPool {
 public:
  // threads <= 0 means one per hardware thread.
  explicit ThreadPool(int threads);
  // Runs every task already scheduled, then joins the workers.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task);

  // Calls fn(i) for every i in [0, n) and returns when all calls are done.
  // The calling thread takes items too, so this is safe to call from a pool
  // thread (no deadlock when every worker is busy). When fn throws (e.g.
  // std::bad_alloc), the rest of the items are skipped and the first
  // exception is rethrown here once every item is done or skipped.
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace quantd

#endif  // QUANTD_CORE_BASE_THREAD_POOL_H_
