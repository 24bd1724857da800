// MemoryBudget, and observers charging it before they allocate: a batch
// whose channels would need gigabytes of histograms is RESOURCE_EXHAUSTED
// with nothing allocated, and the estimate is exactly what an observer holds.
#include "core/calibration/memory_budget.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/calibration/observers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::calibration {
namespace {

using ::testing::HasSubstr;

TEST(MemoryBudgetTest, ChargesUpToTheLimitAndReleases) {
  MemoryBudget budget(1000, "test budget");
  EXPECT_TRUE(budget.Charge(600, "a").ok());
  EXPECT_EQ(budget.used(), 600);
  absl::Status s = budget.Charge(500, "the second thing");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("the second thing"));
  EXPECT_THAT(s.message(), HasSubstr("test budget"));
  EXPECT_THAT(s.message(), HasSubstr("1000 bytes"));
  EXPECT_EQ(budget.used(), 600);  // A refused charge reserves nothing.
  budget.Release(600);
  EXPECT_TRUE(budget.Charge(1000, "all of it").ok());
}

TEST(MemoryBudgetTest, ZeroLimitCountsButNeverRefuses) {
  MemoryBudget budget(0, "unlimited");
  EXPECT_TRUE(budget.Charge(int64_t{1} << 62, "a lot").ok());
  EXPECT_TRUE(budget.Charge(int64_t{1} << 62, "a lot more").ok());
  EXPECT_GT(budget.used(), 0);
}

TEST(MemoryBudgetTest, ByteText) {
  EXPECT_EQ(ByteText(100), "100 bytes");
  EXPECT_EQ(ByteText(int64_t{256} << 20), "256 MiB");
  EXPECT_EQ(ByteText(int64_t{3} << 29), "1.5 GiB");
}

ObserverConfig PerChannel(const std::string& method) {
  ObserverConfig c;
  c.method = method;
  c.per_channel = true;
  c.axis = 1;
  return c;
}

// 100,000 channels of one value each: 400 KB of data that would need
// 100,001 histograms of 2048 bins (about 3 GiB) per histogram method.
TEST(ObserverBudgetTest, ManyChannelHistogramsAreRefusedBeforeAllocating) {
  const int64_t channels = 100000;
  const std::vector<float> data(channels, 1.0f);
  const std::vector<int64_t> shape = {1, channels};
  for (const std::string method : {"percentile", "mse", "entropy"}) {
    MemoryBudget budget(int64_t{256} << 20, "observer memory budget");
    absl::StatusOr<std::unique_ptr<Observer>> o =
        MakeObserver(PerChannel(method), &budget);
    ASSERT_TRUE(o.ok()) << o.status();
    absl::Status s = (*o)->Observe(data, shape);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << method;
    EXPECT_THAT(s.message(), HasSubstr("observer memory budget"));
    EXPECT_THAT(s.message(), HasSubstr("256 MiB"));
    EXPECT_THAT(s.message(), HasSubstr(method));
    EXPECT_THAT(s.message(), HasSubstr("100000 channels"));
    // Nothing was allocated and nothing stays charged.
    EXPECT_EQ((*o)->StateBytes(), 0u) << method;
    EXPECT_EQ((*o)->batch_count(), 0);
    EXPECT_EQ(budget.used(), 0);
  }
}

TEST(ObserverBudgetTest, ObserversShareTheBudgetAndGiveItBack) {
  ObserverConfig c;
  c.method = "percentile";
  const int64_t one = ObserverStateBytes(c, 0);
  MemoryBudget budget(2 * one, "budget");
  const std::vector<float> data = {1.0f, 2.0f};
  auto a = *MakeObserver(c, &budget);
  auto b = *MakeObserver(c, &budget);
  auto third = *MakeObserver(c, &budget);
  EXPECT_TRUE(a->Observe(data, {2}).ok());
  EXPECT_TRUE(b->Observe(data, {2}).ok());
  EXPECT_EQ(budget.used(), 2 * one);
  // Later batches of an observer cost nothing more.
  EXPECT_TRUE(a->Observe(data, {2}).ok());
  EXPECT_EQ(third->Observe(data, {2}).code(),
            absl::StatusCode::kResourceExhausted);
  a.reset();
  EXPECT_EQ(budget.used(), one);
  EXPECT_TRUE(third->Observe(data, {2}).ok());
}

// The charge is what the observer then holds, for every method, per tensor
// and per channel.
TEST(ObserverBudgetTest, EstimateIsTheStateAfterTheFirstBatch) {
  const std::vector<float> data = {1, -2, 3, 4, 5, -6, 7, 8, 9, 10, 11, 12};
  const std::vector<int64_t> shape = {2, 3, 2};
  for (const char* method : kObserverMethods) {
    for (bool per_channel : {false, true}) {
      ObserverConfig c;
      c.method = method;
      c.per_channel = per_channel;
      c.num_bins = 64;
      c.num_quantized_bins = 32;
      MemoryBudget budget(0, "budget");
      auto o = *MakeObserver(c, &budget);
      ASSERT_TRUE(o->Observe(data, shape).ok());
      EXPECT_EQ(static_cast<int64_t>(o->StateBytes()), ObserverStateBytes(c, 3))
          << method << " per_channel=" << per_channel;
      EXPECT_EQ(budget.used(), ObserverStateBytes(c, 3));
    }
  }
}

TEST(ObserverBudgetTest, OverflowingShapesAreRefused) {
  ObserverConfig c;
  auto o = *MakeObserver(c);
  const std::vector<float> data(4, 1.0f);
  const int64_t big = int64_t{1} << 31;
  absl::Status s = o->Observe(data, {big, big, 4});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = o->Observe(data, {-4});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o->batch_count(), 0);
}

}  // namespace
}  // namespace quantd::calibration
