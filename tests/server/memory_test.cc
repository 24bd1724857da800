#include "server/memory.h"

#include <string>

#include "gtest/gtest.h"

namespace quantd::server {
namespace {

TEST(UploadBudgetTest, ChargesUpToTheLimitAndGivesBack) {
  UploadBudget budget(100);
  EXPECT_TRUE(budget.TryCharge(60));
  EXPECT_FALSE(budget.TryCharge(41));  // Nothing charged on refusal.
  EXPECT_EQ(budget.in_use(), 60u);
  EXPECT_TRUE(budget.TryCharge(40));
  EXPECT_FALSE(budget.TryCharge(1));
  budget.Release(60);
  EXPECT_EQ(budget.in_use(), 40u);
  EXPECT_TRUE(budget.TryCharge(60));
}

TEST(UploadBudgetTest, ZeroMeansNoBudgetAndHugeChargesDoNotWrap) {
  UploadBudget unlimited(0);
  EXPECT_TRUE(unlimited.TryCharge(uint64_t{1} << 62));
  UploadBudget budget(10);
  EXPECT_FALSE(budget.TryCharge(~uint64_t{0}));
  EXPECT_TRUE(budget.TryCharge(10));
}

TEST(ReserveModelBytesTest, GrowsInStepsNotToTheDeclaredSize) {
  std::string buffer;
  const uint64_t declared = uint64_t{1} << 40;  // 1 TiB declared...
  ASSERT_TRUE(ReserveModelBytes(&buffer, 1000, declared).ok());
  // ...but only the first step is allocated.
  EXPECT_GE(buffer.capacity(), 1000u);
  EXPECT_LE(buffer.capacity(), 2 * kModelBufferFirstStep);
}

TEST(ReserveModelBytesTest, NeverPastTheDeclaredSize) {
  std::string buffer;
  ASSERT_TRUE(ReserveModelBytes(&buffer, 10, 100).ok());
  EXPECT_GE(buffer.capacity(), 10u);
  EXPECT_LT(buffer.capacity(), kModelBufferFirstStep);
  buffer.assign(100, 'x');
  ASSERT_TRUE(ReserveModelBytes(&buffer, 0, 100).ok());
}

TEST(ReserveModelBytesTest, DoublesAsBytesArrive) {
  std::string buffer;
  const uint64_t declared = uint64_t{64} << 20;
  ASSERT_TRUE(ReserveModelBytes(&buffer, 1, declared).ok());
  const size_t first = buffer.capacity();
  buffer.resize(first);
  ASSERT_TRUE(ReserveModelBytes(&buffer, 1, declared).ok());
  EXPECT_GE(buffer.capacity(), 2 * first);
  EXPECT_LE(buffer.capacity(), declared);
}

}  // namespace
}  // namespace quantd::server
