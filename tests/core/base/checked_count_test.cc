// CheckedElementCount, CheckedByteSize and the saturating counts: the one
// way core counts a shape, whoever sent it.
#include "core/base/checked_count.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {

using ::testing::HasSubstr;

constexpr int64_t k2p31 = int64_t{1} << 31;
constexpr int64_t k2p62 = int64_t{1} << 62;

TEST(CheckedElementCountTest, CountsOrdinaryShapes) {
  EXPECT_EQ(*CheckedElementCount({}), 1);
  EXPECT_EQ(*CheckedElementCount({7}), 7);
  EXPECT_EQ(*CheckedElementCount({2, 3, 4}), 24);
  EXPECT_EQ(*CheckedElementCount({k2p62}), k2p62);
  EXPECT_EQ(*CheckedElementCount({kMaxCount}), kMaxCount);
}

TEST(CheckedElementCountTest, ZeroDimsCountZero) {
  EXPECT_EQ(*CheckedElementCount({0}), 0);
  EXPECT_EQ(*CheckedElementCount({3, 0, 5}), 0);
}

TEST(CheckedElementCountTest, RefusesOverflowWhateverTheOrder) {
  for (const std::vector<int64_t>& dims :
       std::vector<std::vector<int64_t>>{{k2p31, k2p31, 4},
                                         {4, k2p31, k2p31},
                                         {k2p62, 2},
                                         {kMaxCount, kMaxCount},
                                         // A zero dim does not hide it:
                                         // strides over the rest overflow.
                                         {k2p31, k2p31, 4, 0},
                                         {0, k2p31, k2p31, 4}}) {
    absl::StatusOr<int64_t> n = CheckedElementCount(dims);
    ASSERT_FALSE(n.ok()) << dims.size();
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(n.status().message(), HasSubstr("64 bits"));
  }
}

TEST(CheckedElementCountTest, RefusesNegativeDims) {
  absl::StatusOr<int64_t> n = CheckedElementCount({2, -1, 3});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(n.status().message(), HasSubstr("[2,-1,3]"));
  EXPECT_THAT(n.status().message(), HasSubstr("negative"));
}

TEST(CheckedByteSizeTest, MultipliesOrRefuses) {
  EXPECT_EQ(*CheckedByteSize(0, 4), 0);
  EXPECT_EQ(*CheckedByteSize(16, 4), 64);
  EXPECT_EQ(*CheckedByteSize(k2p62, 1), k2p62);
  EXPECT_EQ(*CheckedByteSize(kMaxCount, 0), 0);
  // The report's example: [2^62] of FLOAT wraps to 0 bytes in a signed
  // product.
  EXPECT_FALSE(CheckedByteSize(k2p62, 4).ok());
  EXPECT_FALSE(CheckedByteSize(kMaxCount / 8 + 1, 8).ok());
  EXPECT_FALSE(CheckedByteSize(-1, 4).ok());
  EXPECT_FALSE(CheckedByteSize(4, -1).ok());
}

TEST(SaturatingElementCountTest, SaturatesInsteadOfWrapping) {
  EXPECT_EQ(SaturatingElementCount({}), 1);
  EXPECT_EQ(SaturatingElementCount({2, 3}), 6);
  EXPECT_EQ(SaturatingElementCount({k2p31, k2p31, 4}), kMaxCount);
  EXPECT_EQ(SaturatingElementCount({4, k2p31, k2p31}), kMaxCount);
  EXPECT_EQ(SaturatingElementCount({k2p31, k2p31, 4, 0}), 0);
  EXPECT_EQ(SaturatingElementCount({0, k2p31, k2p31, 4}), 0);
  EXPECT_EQ(SaturatingElementCount({3, -2}), -1);
  EXPECT_EQ(SaturatingElementCount({k2p31, k2p31, 4, -2}), -1);
}

TEST(SaturatingArithmeticTest, MulAndAdd) {
  EXPECT_EQ(SaturatingMul(3, 4), 12);
  EXPECT_EQ(SaturatingMul(k2p62, 4), kMaxCount);
  EXPECT_EQ(SaturatingMul(0, kMaxCount), 0);
  EXPECT_EQ(SaturatingAdd(kMaxCount, 1), kMaxCount);
  EXPECT_EQ(SaturatingAdd(2, 3), 5);
}

}  // namespace
}  // namespace quantd
