#include "core/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace quantd {
namespace {

// The pool the current thread is a member of (a worker's own pool, or the
// pool of the innermost ThreadPool::Member), else null.
thread_local const ThreadPool* member_of = nullptr;

// How long an idle worker watches for a task, and a ParallelFor caller for
// its helpers to finish, before going to sleep on the mutex; only while a
// SpinScope is alive, so that outside model runs the cores stay with gRPC
// and other calls (quantd_loadgen's mixed calls could not resolve a
// difference either way: 1 client 9-15 calls/s with and without). A
// calibration batch runs one parallel region per node (MobileNetV2: ~150 per
// batch of 5-15 ms); a worker that had gone to sleep woke too late to take
// its half of most of them (futex wake-up on this VM: tens of
// microseconds), and the caller did the whole region alone: 2 threads ran no
// faster than 1.
constexpr std::chrono::microseconds kSpin{50};

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// True as soon as ready() is; false once kSpin has passed without it.
// After the first few hundred polls the spinner yields between polls: with
// other threads runnable (concurrent jobs on a busy server) it hands them
// the core instead of burning its time slice; on an idle core yield returns
// at once.
template <typename Ready>
bool SpinUntil(const Ready& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    if (i < 256) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace

ThreadPool::SpinScope::SpinScope(ThreadPool* pool) : pool_(pool) {
  if (pool_ != nullptr) pool_->spin_scopes_.fetch_add(1);
}

ThreadPool::SpinScope::~SpinScope() {
  if (pool_ != nullptr) pool_->spin_scopes_.fetch_sub(1);
}

ThreadPool::Member::Member(const ThreadPool* pool) : previous_(member_of) {
  if (pool != nullptr) member_of = pool;
}

ThreadPool::Member::~Member() { member_of = previous_; }

int ThreadPool::parallelism() const {
  return member_of == this ? std::max(size(), 1) : size() + 1;
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) {
    threads = std::max(1u, std::thread::hardware_concurrency());
  }
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  queued_.fetch_add(1, std::memory_order_release);
}

void ThreadPool::WorkerLoop() {
  member_of = this;
  while (true) {
    std::function<void()> task;
    if (spin_scopes_.load(std::memory_order_relaxed) > 0) {
      SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; });
    }
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      // Drain the queue before stopping: the destructor promises that every
      // scheduled task runs.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n,
                             const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // Items are claimed from a shared counter by the caller and by helper tasks
  // on the pool. The caller never waits for a helper that has not started:
  // if every worker is busy, the caller simply does all the items itself.
  struct State {
    std::atomic<int64_t> next{0};
    absl::Mutex mu;
    // Written under mu (so that Await sees it), read without it by the
    // caller's spin.
    std::atomic<int64_t> done{0};
    // The first exception an item threw (e.g. std::bad_alloc), rethrown on
    // the caller: thrown on a worker it would terminate the process.
    std::exception_ptr error ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  auto run = [state, n, &fn] {
    int64_t finished = 0;
    std::exception_ptr error;
    for (int64_t i = state->next.fetch_add(1); i < n;
         i = state->next.fetch_add(1)) {
      // After a failure the remaining items are only counted off.
      if (error == nullptr) {
        try {
          fn(i);
        } catch (...) {
          error = std::current_exception();
        }
      }
      ++finished;
    }
    if (finished > 0) {
      absl::MutexLock lock(&state->mu);
      state->done.fetch_add(finished, std::memory_order_release);
      if (error != nullptr && state->error == nullptr) state->error = error;
    }
  };
  const int helpers = static_cast<int>(
      std::min<int64_t>(n - 1, static_cast<int64_t>(parallelism() - 1)));
  for (int h = 0; h < helpers; ++h) {
    // A helper that starts after all items are claimed does nothing and never
    // touches `fn`, which may be gone by then.
    Schedule([state, n, run] {
      if (state->next.load() < n) run();
    });
  }
  run();
  if (spin_scopes_.load(std::memory_order_relaxed) > 0) {
    SpinUntil([&] { return state->done.load(std::memory_order_acquire) == n; });
  }
  std::pair<State*, int64_t> target(state.get(), n);
  std::exception_ptr error;
  {
    absl::MutexLock lock(&state->mu);
    state->mu.Await(absl::Condition(
        +[](std::pair<State*, int64_t>* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return t->first->done.load(std::memory_order_acquire) == t->second;
        },
        &target));
    error = state->error;
  }
  if (error != nullptr) std::rethrow_exception(error);
}

}  // namespace quantd
