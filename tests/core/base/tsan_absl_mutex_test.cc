// Each way absl::Mutex, absl::CondVar and absl::Notification hand data from
// one thread to another. Plain tests in a normal build; under
// `scripts/sanitize.sh thread` each one is a data race report unless
// core/base/tsan_absl_mutex.cc shows TSan that synchronisation (Debian's
// Abseil is not instrumented), so a path the interposer misses fails here.
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {

struct Shared {
  absl::Mutex mu;
  absl::CondVar changed;
  int value ABSL_GUARDED_BY(mu) = 0;  // Plain memory: TSan watches it.
  bool ready ABSL_GUARDED_BY(mu) = false;
};

TEST(TsanAbslMutexTest, AwaitSeesWritesOfTheThreadsThatUnlocked) {
  // The waiter's Condition is evaluated by the unlocking threads (inside
  // Unlock) as well as by the waiter itself.
  Shared s;
  std::thread writers[4];
  for (auto& w : writers) {
    w = std::thread([&s] {
      for (int i = 0; i < 100; ++i) {
        absl::MutexLock lock(&s.mu);
        ++s.value;
      }
    });
  }
  {
    absl::MutexLock lock(&s.mu);
    s.mu.Await(absl::Condition(
        +[](Shared* s)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->value == 400; },
        &s));
    s.value = 0;
  }
  for (auto& w : writers) w.join();
  absl::MutexLock lock(&s.mu);
  EXPECT_EQ(s.value, 0);
}

TEST(TsanAbslMutexTest, LockWhenAndAwaitWithTimeout) {
  Shared s;
  std::thread writer([&s] {
    absl::MutexLock lock(&s.mu);
    s.value = 5;
    s.ready = true;
  });
  s.mu.LockWhen(absl::Condition(&s.ready));
  ++s.value;
  s.ready = false;
  s.mu.Unlock();
  writer.join();

  std::thread second([&s] {
    absl::MutexLock lock(&s.mu);
    s.value = 7;
    s.ready = true;
  });
  {
    absl::MutexLock lock(&s.mu);
    ASSERT_TRUE(
        s.mu.AwaitWithTimeout(absl::Condition(&s.ready), absl::Seconds(30)));
    ++s.value;
  }
  second.join();
  absl::MutexLock lock(&s.mu);
  EXPECT_EQ(s.value, 8);
}

TEST(TsanAbslMutexTest, CondVarWaitSeesTheSignallersWrites) {
  Shared s;
  std::thread writer([&s] {
    absl::MutexLock lock(&s.mu);
    s.value = 9;
    s.ready = true;
    s.changed.Signal();
  });
  {
    absl::MutexLock lock(&s.mu);
    while (!s.ready) s.changed.WaitWithTimeout(&s.mu, absl::Seconds(30));
    ++s.value;
  }
  writer.join();
  absl::MutexLock lock(&s.mu);
  EXPECT_EQ(s.value, 10);
}

TEST(TsanAbslMutexTest, ReadersAndWritersAndTryLock) {
  Shared s;
  std::thread reader([&s] {
    absl::ReaderMutexLock lock(&s.mu);
    EXPECT_GE(s.value, 0);
  });
  {
    absl::WriterMutexLock lock(&s.mu);
    ++s.value;
  }
  reader.join();
  std::thread other([&s] {
    if (s.mu.TryLock()) {
      ++s.value;
      s.mu.Unlock();
    }
  });
  other.join();
  if (s.mu.ReaderTryLock()) {
    EXPECT_GE(s.value, 1);
    s.mu.ReaderUnlock();
  }
}

TEST(TsanAbslMutexTest, NotificationOrdersBothWaysOfWaiting) {
  // Already notified: WaitForNotification returns without locking.
  int early = 0;
  absl::Notification early_done;
  std::thread notifier([&] {
    early = 1;
    early_done.Notify();
  });
  notifier.join();
  early_done.WaitForNotification();
  EXPECT_EQ(early, 1);

  // Not yet notified: the waiter blocks on the Notification's Mutex.
  int late = 0;
  absl::Notification late_done;
  std::thread waiter([&] {
    ASSERT_TRUE(late_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(late, 1);
  });
  late = 1;
  late_done.Notify();
  waiter.join();
}

}  // namespace
}  // namespace quantd
