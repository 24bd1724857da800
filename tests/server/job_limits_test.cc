// JobLimiter's wait queue: first come first served, bounded, leavable, with
// its length reported for the quantd_queued_jobs gauge.
#include "server/job_limits.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::server {
namespace {

TEST(JobLimiterQueueTest, WaitersGetSlotsInOrderAndExtraCallsAreRefused) {
  std::vector<int> reported;
  JobLimiter limiter(1, 2, [&](int queued) { reported.push_back(queued); });
  std::vector<int> granted;
  std::atomic<uint64_t> a{0}, b{0}, c{0}, d{0};
  EXPECT_EQ(limiter.AcquireOrQueue([&] { granted.push_back(0); }, &a),
            JobLimiter::Admission::kAcquired);
  EXPECT_EQ(a.load(), 0u);
  EXPECT_TRUE(limiter.HasRoom());  // Room in the queue.
  EXPECT_EQ(limiter.AcquireOrQueue([&] { granted.push_back(1); }, &b),
            JobLimiter::Admission::kQueued);
  EXPECT_EQ(limiter.AcquireOrQueue([&] { granted.push_back(2); }, &c),
            JobLimiter::Admission::kQueued);
  EXPECT_NE(b.load(), 0u);
  EXPECT_NE(b.load(), c.load());
  EXPECT_FALSE(limiter.HasRoom());
  EXPECT_EQ(limiter.AcquireOrQueue([&] { granted.push_back(3); }, &d),
            JobLimiter::Admission::kRefused);
  EXPECT_EQ(limiter.queued(), 2);
  // A free slot is not taken past waiting calls.
  EXPECT_FALSE(limiter.TryAcquire());
  grpc::Status busy = limiter.BusyStatus();
  EXPECT_EQ(busy.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(busy.error_message(),
            "server busy: 1 jobs in flight (limit 1), 2 queued (limit 2)");

  // The slot passes straight to the first waiter, then the second.
  limiter.Release();
  EXPECT_EQ(granted, std::vector<int>({1}));
  EXPECT_EQ(limiter.in_flight(), 1);
  limiter.Release();
  EXPECT_EQ(granted, std::vector<int>({1, 2}));
  // Granted waits cannot be cancelled any more.
  EXPECT_FALSE(limiter.CancelWait(b.load()));
  limiter.Release();
  EXPECT_EQ(limiter.in_flight(), 0);
  EXPECT_EQ(reported, std::vector<int>({1, 2, 1, 0}));
}

TEST(JobLimiterQueueTest, CancelledWaiterLeavesAndIsNeverGranted) {
  JobLimiter limiter(1, 1);
  std::atomic<uint64_t> a{0}, b{0}, c{0};
  ASSERT_EQ(limiter.AcquireOrQueue([] {}, &a),
            JobLimiter::Admission::kAcquired);
  bool b_granted = false;
  ASSERT_EQ(limiter.AcquireOrQueue([&] { b_granted = true; }, &b),
            JobLimiter::Admission::kQueued);
  EXPECT_TRUE(limiter.CancelWait(b.load()));
  EXPECT_FALSE(limiter.CancelWait(b.load()));  // Only once.
  EXPECT_EQ(limiter.queued(), 0);
  // Its place is free again.
  bool c_granted = false;
  ASSERT_EQ(limiter.AcquireOrQueue([&] { c_granted = true; }, &c),
            JobLimiter::Admission::kQueued);
  limiter.Release();
  EXPECT_FALSE(b_granted);
  EXPECT_TRUE(c_granted);
}

TEST(JobLimiterQueueTest, WithoutAQueueRefusesAtOnce) {
  JobLimiter limiter(1);
  std::atomic<uint64_t> id{0};
  ASSERT_EQ(limiter.AcquireOrQueue([] {}, &id),
            JobLimiter::Admission::kAcquired);
  EXPECT_FALSE(limiter.HasRoom());
  EXPECT_EQ(limiter.AcquireOrQueue([] {}, &id),
            JobLimiter::Admission::kRefused);
  EXPECT_EQ(limiter.BusyStatus().error_message(),
            "server busy: 1 jobs in flight (limit 1)");
}

// Many threads acquiring, queueing, cancelling and releasing: every slot
// taken is given back exactly once and never more than `limit` run.
TEST(JobLimiterQueueTest, NeverOvercommitsUnderContention) {
  constexpr int kLimit = 2;
  JobLimiter limiter(kLimit, 3);
  std::atomic<int> running{0}, max_running{0}, ran{0};
  auto run_one = [&] {
    const int now = ++running;
    int seen = max_running.load();
    while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
    }
    ++ran;
    --running;
    limiter.Release();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < 500; ++j) {
        std::atomic<uint64_t> id{0};
        switch (limiter.AcquireOrQueue(run_one, &id)) {
          case JobLimiter::Admission::kAcquired:
            run_one();
            break;
          case JobLimiter::Admission::kQueued:
            // Half the waiters give up; a granted one has run (or will).
            if ((j + t) % 2 == 0) limiter.CancelWait(id.load());
            break;
          case JobLimiter::Admission::kRefused:
            break;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(max_running.load(), kLimit);
  EXPECT_EQ(limiter.queued(), 0);
  EXPECT_EQ(limiter.in_flight(), 0);
  EXPECT_GT(ran.load(), 0);
}

}  // namespace
}  // namespace quantd::server
