#include "core/base/thread_pool.h"

#include <atomic>
#include <new>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/base/parallel.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {

TEST(ThreadPoolTest, ParallelForVisitsEveryIndexOnce) {
  ThreadPool pool(2);
  for (int64_t n : {0, 1, 2, 3, 17, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, ParallelForFromEveryWorkerDoesNotDeadlock) {
  // Every worker runs a job that fans out again: the callers must do the
  // work themselves when no worker is free.
  ThreadPool pool(2);
  std::atomic<int> total{0};
  absl::Notification done[2];
  for (int j = 0; j < 2; ++j) {
    pool.Schedule([&, j] {
      pool.ParallelFor(100, [&](int64_t) { total.fetch_add(1); });
      done[j].Notify();
    });
  }
  for (auto& d : done) {
    ASSERT_TRUE(d.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  EXPECT_EQ(total.load(), 200);
}

// Many short regions back to back while workers spin between them (a model
// run), from two threads with nested scopes: every index exactly once, and
// the pool still shuts down (a spinning worker goes back to sleep and sees
// the stop).
TEST(ThreadPoolTest, SpinScopesKeepParallelForExact) {
  ThreadPool pool(2);
  auto run = [&pool] {
    ThreadPool::SpinScope outer(&pool);
    ThreadPool::SpinScope inner(&pool);
    for (int region = 0; region < 2000; ++region) {
      std::vector<std::atomic<int>> hits(7);
      pool.ParallelFor(7, [&](int64_t i) { hits[i].fetch_add(1); });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "region " << region;
    }
  };
  std::thread other(run);
  run();
  other.join();
  ThreadPool::SpinScope none(nullptr);  // A null pool changes nothing.
  pool.ParallelFor(3, [](int64_t) {});
}

TEST(ThreadPoolTest, DestructorRunsEveryScheduledTask) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 50; ++i) pool.Schedule([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 50);
}

TEST(ThreadPoolTest, NonPositiveSizeMeansHardwareThreads) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
}

TEST(ThreadPoolTest, ParallelForRethrowsOnTheCaller) {
  // An item that throws on a worker must not terminate the process: the
  // caller gets the exception once every item is done or skipped.
  ThreadPool pool(2);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> ran{0};
    EXPECT_THROW(pool.ParallelFor(64,
                                  [&](int64_t i) {
                                    ran.fetch_add(1);
                                    if (i % 5 == 3) throw std::bad_alloc();
                                  }),
                 std::bad_alloc);
    EXPECT_GE(ran.load(), 1);
  }
  // The pool still works.
  std::atomic<int> total{0};
  pool.ParallelFor(100, [&](int64_t) { total.fetch_add(1); });
  EXPECT_EQ(total.load(), 100);
}

TEST(ThreadPoolTest, ParallelismCountsTheCallerOnlyOutsideThePool) {
  ThreadPool pool(2);
  ThreadPool other(3);
  EXPECT_EQ(pool.parallelism(), 3);  // The caller and both workers.
  {
    ThreadPool::Member member(&pool);
    EXPECT_EQ(pool.parallelism(), 2);  // The caller in a worker's stead.
    EXPECT_EQ(other.parallelism(), 4);
    {
      ThreadPool::Member inner(&other);
      EXPECT_EQ(other.parallelism(), 3);
      EXPECT_EQ(pool.parallelism(), 3);
    }
    EXPECT_EQ(pool.parallelism(), 2);
    ThreadPool::Member none(nullptr);
    EXPECT_EQ(pool.parallelism(), 2);
  }
  EXPECT_EQ(pool.parallelism(), 3);
  // A worker is a member of its pool.
  int on_worker = 0;
  absl::Notification done;
  pool.Schedule([&] {
    on_worker = pool.parallelism();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(on_worker, 2);
}

// The distinct threads that ran items of one ParallelFor, each item long
// enough for every helper to start.
int ThreadsUsed(ThreadPool* pool) {
  absl::Mutex mu;
  std::set<std::thread::id> ids;
  pool->ParallelFor(24, [&](int64_t) {
    absl::SleepFor(absl::Milliseconds(2));
    absl::MutexLock lock(&mu);
    ids.insert(std::this_thread::get_id());
  });
  return static_cast<int>(ids.size());
}

TEST(ThreadPoolTest, AMemberUsesNoMoreThreadsThanThePoolHas) {
  ThreadPool pool(2);
  EXPECT_LE(ThreadsUsed(&pool), 3);
  ThreadPool::Member member(&pool);
  EXPECT_LE(ThreadsUsed(&pool), 2);
  // ParallelRange cuts one chunk per thread.
  std::atomic<int> chunks{0};
  ParallelRange(&pool, 100, 1, [&](int64_t, int64_t) { chunks.fetch_add(1); });
  EXPECT_EQ(chunks.load(), 2);
}

TEST(ThreadPoolTest, ParallelRangeOutsideThePoolAddsTheCaller) {
  ThreadPool pool(2);
  std::atomic<int> chunks{0};
  ParallelRange(&pool, 100, 1, [&](int64_t, int64_t) { chunks.fetch_add(1); });
  EXPECT_EQ(chunks.load(), 3);
}

}  // namespace
}  // namespace quantd
