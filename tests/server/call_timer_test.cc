#include "server/call_timer.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace quantd::server {
namespace {

TEST(CallTimerTest, RunsInTimeOrderNotScheduleOrder) {
  CallTimer timer;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  const absl::Time now = absl::Now();
  timer.Schedule(now + absl::Milliseconds(60), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(2);
    done.Notify();
  });
  timer.Schedule(now + absl::Milliseconds(20), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, std::vector<int>({1, 2}));
}

TEST(CallTimerTest, CancelledCallbackNeverRuns) {
  CallTimer timer;
  std::atomic<bool> ran{false};
  const uint64_t id =
      timer.Schedule(absl::Now() + absl::Milliseconds(50), [&] { ran = true; });
  EXPECT_TRUE(timer.Cancel(id));
  EXPECT_FALSE(timer.Cancel(id));
  absl::Notification later;
  const uint64_t other = timer.Schedule(absl::Now() + absl::Milliseconds(100),
                                        [&] { later.Notify(); });
  ASSERT_TRUE(later.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(timer.Cancel(other));  // Already ran.
}

TEST(CallTimerTest, PendingCallbacksAreDroppedOnDestruction) {
  std::atomic<bool> ran{false};
  {
    CallTimer timer;
    timer.Schedule(absl::Now() + absl::Hours(1), [&] { ran = true; });
  }
  EXPECT_FALSE(ran.load());
}

}  // namespace
}  // namespace quantd::server
