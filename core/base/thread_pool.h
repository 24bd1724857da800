// A fixed-size pool of worker threads for core work (jobs and the
// per-tensor work inside them).
#ifndef QUANTD_CORE_BASE_THREAD_POOL_H_
#define QUANTD_CORE_BASE_THREAD_POOL_H_

#include <atomic>
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
  // thread (no deadlock when every worker is busy); it asks parallelism() - 1
  // workers to help. When fn throws (e.g. std::bad_alloc), the rest of the
  // items are skipped and the first exception is rethrown here once every
  // item is done or skipped.
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

  int size() const { return static_cast<int>(workers_.size()); }

  // Threads a ParallelFor called from this thread runs on, the caller
  // included: size() on a member of the pool (one of its workers, or a thread
  // holding a Member), whose own thread stands in for a worker; size() + 1 on
  // any other thread, which adds itself to the workers.
  int parallelism() const;

  // While one is alive, idle workers of `pool` (and ParallelFor callers
  // waiting for helpers) spin for a moment before they sleep. For runs of
  // many short parallel regions back to back (a model run: one region per
  // node), where a sleeping worker wakes too late to take its share. Outside
  // such runs nothing spins, so other threads (gRPC, other calls) keep the
  // cores. Nests; a null pool changes nothing.
  class SpinScope {
   public:
    explicit SpinScope(ThreadPool* pool);
    ~SpinScope();
    SpinScope(const SpinScope&) = delete;
    SpinScope& operator=(const SpinScope&) = delete;

   private:
    ThreadPool* pool_;
  };

  // While one is alive, the thread that made it counts as one of `pool`'s
  // workers (see parallelism()): a thread that is not a worker but computes
  // for the pool's owner, like an engine job on a thread of its own. With the
  // pool sized to the cores, such a thread beside every worker would be one
  // compute thread more than there are cores, and each parallel region would
  // be split in size() + 1 pieces that run in two rounds. Nests; a null pool
  // changes nothing.
  class Member {
   public:
    explicit Member(const ThreadPool* pool);
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    const ThreadPool* previous_;
  };

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  // queue_.size(), readable without mu_: idle workers spin on it for a
  // moment before they sleep, while a SpinScope is alive (spin_scopes_).
  std::atomic<int64_t> queued_{0};
  std::atomic<int> spin_scopes_{0};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace quantd

#endif  // QUANTD_CORE_BASE_THREAD_POOL_H_
