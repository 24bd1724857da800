#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/auth.h"
#include "server/job_limits.h"

namespace quantd::server {
namespace {

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("token", "token"));
  EXPECT_FALSE(ConstantTimeEquals("tokeN", "token"));
  EXPECT_FALSE(ConstantTimeEquals("toke", "token"));
  EXPECT_FALSE(ConstantTimeEquals("token2", "token"));
  EXPECT_FALSE(ConstantTimeEquals("", "token"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals(std::string("tok\0n", 5), "tok"));
}

TEST(TrimTokenTest, DropsSurroundingWhitespace) {
  EXPECT_EQ(TrimToken("  abc\n"), "abc");
  EXPECT_EQ(TrimToken("a b\r\n"), "a b");
  EXPECT_EQ(TrimToken("\n"), "");
}

TEST(JobLimiterTest, RefusesBeyondTheLimitAndReleases) {
  JobLimiter limiter(2);
  EXPECT_TRUE(limiter.HasRoom());
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_FALSE(limiter.HasRoom());
  EXPECT_FALSE(limiter.TryAcquire());
  EXPECT_EQ(limiter.in_flight(), 2);
  grpc::Status busy = limiter.BusyStatus();
  EXPECT_EQ(busy.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(busy.error_message(), "server busy: 2 jobs in flight (limit 2)");
  limiter.Release();
  EXPECT_TRUE(limiter.TryAcquire());
}

TEST(JobLimiterTest, NeverOvercommitsUnderContention) {
  JobLimiter limiter(3);
  std::atomic<int> acquired{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 1000; ++j) {
        if (limiter.TryAcquire()) acquired++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(acquired.load(), 3);
}

}  // namespace
}  // namespace quantd::server
