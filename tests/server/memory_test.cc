#include "server/memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

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

#if defined(__GLIBC__)
TEST(IdleHeapTrimmerTest, MemoryFreedLongAfterTheLastCallStillGoesBack) {
  // No call asks for a trim (no Request): only the growth of the free heap
  // can make the trimmer act. 384 blocks of 64 KiB come from the heap (below
  // glibc's mmap threshold), and a block allocated after them pins the top,
  // so free() alone gives none of their pages back: only a trim does.
  IdleHeapTrimmer trimmer([] { return true; }, absl::Milliseconds(20));
  absl::SleepFor(absl::Milliseconds(100));  // Its first trim, at start.
  constexpr int kBlocks = 384;
  constexpr size_t kBlock = size_t{64} << 10;
  std::vector<char*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
    ASSERT_NE(blocks.back(), nullptr);
    std::memset(blocks.back(), 1, kBlock);
  }
  char* pin = static_cast<char*>(std::malloc(4096));
  ASSERT_NE(pin, nullptr);
  pin[0] = 1;
  const int64_t held = ResidentBytes();
  for (char* b : blocks) std::free(b);
  int64_t now = ResidentBytes();
  for (int i = 0; i < 100 && held - now < (int64_t{20} << 20); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    now = ResidentBytes();
  }
  std::free(pin);
  EXPECT_GT(held - now, int64_t{20} << 20)
      << "RSS " << held << " -> " << now << " after freeing 24 MiB";
}
#endif

}  // namespace
}  // namespace quantd::server
