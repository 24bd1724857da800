#include "core/engine/batch_queue.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace quantd {
namespace {

quantd::v1::TensorBatch Batch(const std::string& name) {
  quantd::v1::TensorBatch b;
  b.add_tensors()->set_name(name);
  return b;
}

TEST(BatchQueueTest, PushReportsFullAndPopCallsOnRoomOnce) {
  BatchQueue q(2);
  int woken = 0;
  q.SetOnRoom([&] { ++woken; });
  EXPECT_TRUE(q.Push(Batch("a")));
  EXPECT_FALSE(q.Push(Batch("b")));  // Now full: the producer must wait.
  ASSERT_EQ(q.Pop()->tensors(0).name(), "a");
  EXPECT_EQ(woken, 1);
  ASSERT_EQ(q.Pop()->tensors(0).name(), "b");
  EXPECT_EQ(woken, 1);  // Nobody was waiting any more.
}

TEST(BatchQueueTest, CloseDrainsThenEnds) {
  BatchQueue q(4);
  q.Push(Batch("a"));
  q.Close();
  EXPECT_FALSE(q.Push(Batch("late")));
  ASSERT_TRUE(q.Pop().has_value());
  EXPECT_FALSE(q.Pop().has_value());
}

TEST(BatchQueueTest, AbortWakesABlockedConsumer) {
  BatchQueue q(4);
  std::atomic<bool> returned{false};
  std::thread consumer([&] {
    EXPECT_FALSE(q.Pop().has_value());
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned.load());
  q.Abort();
  consumer.join();
  EXPECT_TRUE(returned.load());
}

TEST(BatchQueueTest, ProducerAndConsumerOnTwoThreadsLoseNothing) {
  // The producer behaves like the gRPC reactor: after a Push that reports
  // "full" it sends nothing until on_room grants it a turn. A counted grant
  // (not a flag) cannot be lost if on_room fires before Push returns.
  BatchQueue q(3);
  absl::Mutex mu;
  int grants = 0;
  q.SetOnRoom([&] {
    absl::MutexLock lock(&mu);
    ++grants;
  });
  std::thread producer([&] {
    for (int i = 0; i < 500; ++i) {
      if (q.Push(Batch(std::to_string(i)))) continue;
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](int* g) { return *g > 0; }, &grants));
      --grants;
    }
    q.Close();
  });
  int expected = 0;
  while (auto b = q.Pop()) {
    EXPECT_EQ(b->tensors(0).name(), std::to_string(expected));
    ++expected;
  }
  producer.join();
  EXPECT_EQ(expected, 500);
}

}  // namespace
}  // namespace quantd
