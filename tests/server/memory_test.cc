#include "server/memory.h"

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/status.h"
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

// The pages of /proc/self/status's VmRSS, in bytes.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stoll(line.substr(6)) * 1024;
    }
  }
  return -1;
}

TEST(ReserveModelBytesTest,
     ReservesTheDeclaredSizeOnceSoTheModelIsNeverCopied) {
  std::string buffer;
  const uint64_t declared = uint64_t{24} << 20;
  ASSERT_TRUE(ReserveModelBytes(&buffer, 1000, declared).ok());
  EXPECT_GE(buffer.capacity(), declared);
  const char* const data = buffer.data();
  const std::string chunk(uint64_t{1} << 20, 'x');
  while (buffer.size() < declared) {
    ASSERT_TRUE(ReserveModelBytes(&buffer, chunk.size(), declared).ok());
    buffer.append(chunk);
  }
  EXPECT_EQ(buffer.data(), data);  // Never reallocated.
  ASSERT_TRUE(ReserveModelBytes(&buffer, 0, declared).ok());
}

TEST(ReserveModelBytesTest, ResidentMemoryFollowsTheBytesNotTheDeclaredSize) {
  std::string buffer;
  const uint64_t declared = uint64_t{512} << 20;
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0);
  ASSERT_TRUE(ReserveModelBytes(&buffer, 1 << 20, declared).ok());
  buffer.append(1 << 20, 'x');
  const int64_t reserved = ResidentBytes();
  EXPECT_LT(reserved - before, int64_t{32} << 20);
  buffer.append(uint64_t{128} << 20, 'y');
  EXPECT_GT(ResidentBytes() - reserved, int64_t{120} << 20);
}

TEST(ReserveModelBytesTest, AnImpossibleSizeIsResourceExhausted) {
  std::string buffer;
  // Past any x86-64 address space.
  const absl::Status s = ReserveModelBytes(&buffer, 100, uint64_t{1} << 60);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
}

}  // namespace
}  // namespace quantd::server
