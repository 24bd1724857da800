#include "core/base/serial_queue.h"

#include <atomic>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/base/thread_pool.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {

TEST(SerialQueueTest, ItemsRunOnceInTheOrderAdded) {
  ThreadPool pool(2);
  absl::Mutex mu;
  std::vector<int> order;
  {
    SerialQueue queue(&pool, 1 << 20);
    for (int i = 0; i < 500; ++i) {
      queue.Add(i % 7, [&, i] {
        if (i % 50 == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        absl::MutexLock lock(&mu);
        order.push_back(i);
        return absl::OkStatus();
      });
    }
    EXPECT_TRUE(queue.Finish().ok());
  }
  ASSERT_EQ(order.size(), 500u);
  for (int i = 0; i < 500; ++i) EXPECT_EQ(order[i], i);
}

TEST(SerialQueueTest, AddReturnsBeforeTheItemRunsWhenAWorkerCanTakeIt) {
  ThreadPool pool(1);
  // Not a member of the pool: this thread's ParallelFor would use both.
  SerialQueue queue(&pool, 1 << 20);
  absl::Notification release;
  std::atomic<bool> waited_out{false};
  queue.Add(8, [&] {
    waited_out = !release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return absl::OkStatus();
  });
  release.Notify();
  EXPECT_TRUE(queue.Finish().ok());
  // Run inside Add, it would have waited for a release that only comes
  // after Add.
  EXPECT_FALSE(waited_out.load()) << "the item ran inside Add";
}

TEST(SerialQueueTest, WithoutAHelperItemsRunInsideAdd) {
  ThreadPool pool(1);
  ThreadPool::Member member(&pool);  // parallelism() == 1 on this thread.
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    SerialQueue queue(p, 1 << 20);
    bool ran = false;
    queue.Add(4, [&] {
      ran = true;
      return absl::OkStatus();
    });
    EXPECT_TRUE(ran);
    EXPECT_TRUE(queue.Finish().ok());
  }
}

TEST(SerialQueueTest, TheFirstFailureIsReturnedAndLaterItemsAreDropped) {
  ThreadPool pool(2);
  SerialQueue queue(&pool, 1 << 20);
  std::atomic<int> ran{0};
  for (int i = 0; i < 20; ++i) {
    queue.Add(1, [&, i]() -> absl::Status {
      ++ran;
      if (i == 5) return absl::InvalidArgumentError("item 5");
      if (i == 6) return absl::InternalError("item 6");
      return absl::OkStatus();
    });
  }
  absl::Status s = queue.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "item 5");
  EXPECT_EQ(ran.load(), 6);
  // Later additions are dropped too.
  queue.Add(1, [&] {
    ++ran;
    return absl::OkStatus();
  });
  EXPECT_EQ(queue.Finish().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ran.load(), 6);
}

TEST(SerialQueueTest, AnItemsExceptionReachesTheAdder) {
  // std::bad_alloc on a worker would end the process; it is rethrown to the
  // adder, from Finish (or the Add that ran the item), and later items are
  // dropped.
  for (bool with_helper : {true, false}) {
    ThreadPool pool(1);
    std::optional<ThreadPool::Member> member;
    if (!with_helper) member.emplace(&pool);
    SerialQueue queue(&pool, 1 << 20);
    std::atomic<int> ran{0};
    bool caught = false;
    try {
      for (int i = 0; i < 10; ++i) {
        queue.Add(1, [&, i]() -> absl::Status {
          ++ran;
          if (i == 3) throw std::bad_alloc();
          return absl::OkStatus();
        });
      }
      (void)queue.Finish();
    } catch (const std::bad_alloc&) {
      caught = true;
    }
    EXPECT_TRUE(caught) << with_helper;
    EXPECT_EQ(ran.load(), 4) << with_helper;
    EXPECT_FALSE(queue.Finish().ok());  // Failed, nothing left to rethrow.
  }
}

TEST(SerialQueueTest, QueuedBytesStayWithinTheBound) {
  ThreadPool pool(1);
  constexpr int64_t kBound = 100;
  // Bytes added whose item has not finished: what the queue keeps alive.
  std::atomic<int64_t> held{0};
  std::atomic<int64_t> most{0};
  SerialQueue queue(&pool, kBound);
  for (int i = 0; i < 200; ++i) {
    held += 30;
    queue.Add(30, [&] {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      held -= 30;
      return absl::OkStatus();
    });
    int64_t now = held.load();
    int64_t seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
  }
  EXPECT_TRUE(queue.Finish().ok());
  EXPECT_LE(most.load(), kBound);
  EXPECT_EQ(held.load(), 0);
}

TEST(SerialQueueTest, AnItemOverTheBoundRunsOnTheAdderAfterTheOthers) {
  ThreadPool pool(1);
  SerialQueue queue(&pool, 100);
  absl::Mutex mu;
  std::vector<int> order;
  std::thread::id big_ran_on;
  for (int i = 0; i < 3; ++i) {
    queue.Add(10, [&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      absl::MutexLock lock(&mu);
      order.push_back(i);
      return absl::OkStatus();
    });
  }
  queue.Add(1000, [&] {
    big_ran_on = std::this_thread::get_id();
    absl::MutexLock lock(&mu);
    order.push_back(3);
    return absl::OkStatus();
  });
  // Run within Add: nothing of it is left to keep alive.
  EXPECT_EQ(big_ran_on, std::this_thread::get_id());
  EXPECT_TRUE(queue.Finish().ok());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(SerialQueueTest, DestructionWaitsForQueuedItems) {
  ThreadPool pool(1);
  std::atomic<int> ran{0};
  {
    SerialQueue queue(&pool, 1 << 20);
    for (int i = 0; i < 50; ++i) {
      queue.Add(1, [&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ++ran;
        return absl::OkStatus();
      });
    }
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace quantd
