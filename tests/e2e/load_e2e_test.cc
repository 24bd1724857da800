// End to end, under load: six clients send a mix of Quantize (DYNAMIC_RANGE
// and STATIC_RANGE) and Calibrate calls on models of three sizes to a real
// quantd with tight limits, through the load generator of
// bench/loadgen_lib.h (scripts/load.sh runs the same for minutes). A server
// past its limits must refuse calls with RESOURCE_EXHAUSTED and nothing
// else, keep answering, and give its memory back once idle. No timing is
// asserted: this runs on loaded CI machines.
#include <cstdint>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/loadgen_lib.h"
#include "client/quantd_client.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_models.h"
#include "tests/support/sanitizers.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {
namespace {

// The server log's lines of calls that ended neither OK nor refused, and its
// last lines (one per call otherwise: thousands here).
std::string LogDigest(const std::string& path) {
  std::istringstream text(ReadAll(path));
  std::vector<std::string> lines;
  std::string line, odd;
  int odd_count = 0;
  while (std::getline(text, line)) {
    if (line.find(" code=") != std::string::npos &&
        line.find(" code=OK ") == std::string::npos &&
        line.find(" code=RESOURCE_EXHAUSTED ") == std::string::npos &&
        ++odd_count <= 20) {
      odd += line + "\n";
    }
    lines.push_back(line);
  }
  std::string out = "server log, calls not OK nor RESOURCE_EXHAUSTED (" +
                    std::to_string(odd_count) + "):\n" + odd +
                    "server log, last lines:\n";
  for (size_t i = lines.size() > 10 ? lines.size() - 10 : 0; i < lines.size();
       ++i) {
    out += lines[i] + "\n";
  }
  return out;
}

std::string Describe(const loadgen::LoadReport& report) {
  return loadgen::FormatTable(report) + loadgen::FormatErrors(report) +
         loadgen::SummaryLine(report) + "\n";
}

// The load generator's own parsing and arithmetic, which the soak's verdict
// (scripts/load.sh) rests on.
TEST(LoadgenTest, ParsesItsFlagsAndSummarizes) {
  absl::StatusOr<std::vector<loadgen::ModelSize>> sizes =
      loadgen::ParseSizes("small=64x2,large=2048x3");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  ASSERT_EQ(sizes->size(), 2u);
  EXPECT_EQ((*sizes)[1].name, "large");
  EXPECT_EQ((*sizes)[1].dim, 2048);
  EXPECT_EQ((*sizes)[1].layers, 3);
  for (const char* bad : {"", "small", "small=64", "small=64x0", "a=1x1,a=2x2",
                          "=64x2", "small=64x2x2", "huge=9000x1"}) {
    EXPECT_FALSE(loadgen::ParseSizes(bad).ok()) << bad;
  }
  absl::StatusOr<std::pair<int, int>> mix = loadgen::ParseMix("3:1");
  ASSERT_TRUE(mix.ok());
  EXPECT_EQ(*mix, std::make_pair(3, 1));
  for (const char* bad : {"3", "0:0", "-1:2", "a:b", "1:2:3"}) {
    EXPECT_FALSE(loadgen::ParseMix(bad).ok()) << bad;
  }
  EXPECT_TRUE(loadgen::ParseCodes("OK, RESOURCE_EXHAUSTED,BAD_RESULT").ok());
  EXPECT_FALSE(loadgen::ParseCodes("OK,BUSY").ok());

  EXPECT_EQ(loadgen::Quantile({}, 0.5), 0);
  EXPECT_EQ(loadgen::Quantile({1, 2, 3, 4}, 0.5), 2);
  EXPECT_EQ(loadgen::Quantile({1, 2, 3, 4}, 0.99), 4);
  EXPECT_EQ(loadgen::Quantile({1, 2, 3, 4}, 0), 1);

  loadgen::LoadReport report;
  report.total.calls = 5;
  report.total.ok = 2;
  report.total.ok_latency_ms = {10, 30};
  report.total.errors = {{"RESOURCE_EXHAUSTED", 2}, {"INTERNAL", 1}};
  EXPECT_EQ(loadgen::SummaryLine(report),
            "loadgen: calls=5 ok=2 errors={INTERNAL:1,RESOURCE_EXHAUSTED:2} "
            "p50_ms=10.0 p99_ms=30.0");
  EXPECT_EQ(loadgen::DisallowedCalls(report, {"OK", "RESOURCE_EXHAUSTED"}), 1);
}

TEST(LoadE2eTest, OverloadedServerOnlyRefusesAndGivesMemoryBack) {
  TempDir tmp;
  const std::string log = tmp.File("quantd.err");
  // Two jobs and one queued call for six clients, and an upload budget that
  // holds one large model (12.6 MB) but not two: both admission paths
  // refuse calls all along.
  ServerProcess server(
      {"--threads=2", "--max_concurrent_jobs=2", "--max_queued_jobs=1",
       "--max_model_bytes=16777216", "--max_uploading_bytes=20971520",
       "--shutdown_grace=20s"},
      QUANTD_SERVER_BIN, log);
  ASSERT_TRUE(server.ok()) << server.startup_output() << LogDigest(log);

  loadgen::LoadOptions options;
  options.target = server.target();
  options.clients = 6;
  options.sizes = {{"small", 64, 2}, {"medium", 256, 3}, {"large", 1024, 3}};
  options.quantize_weight = 3;
  options.calibrate_weight = 1;
  options.static_fraction = 0.3;
  options.batches = 3;
  options.seed = 14;
  // Far above any call's time here: a call that reaches it is a hang.
  options.deadline = absl::Seconds(30);
  const std::set<std::string> allowed = {"OK", "RESOURCE_EXHAUSTED"};

  // The warm-up loads what every later call shares (ONNX's schemas, the
  // code pages of each path, the pool threads' stacks, a connection per
  // client); the baseline is the idle server after it.
  options.duration = absl::Seconds(2);
  const loadgen::LoadReport warmup = loadgen::RunLoad(options);
  ASSERT_EQ(loadgen::DisallowedCalls(warmup, allowed), 0)
      << Describe(warmup) << LogDigest(log);
  const int64_t baseline = SettledRssBytes(server.pid(), absl::Seconds(10));
  ASSERT_GT(baseline, 0);
  ResetPeakRss(server.pid());

  options.duration = absl::Seconds(8);
  options.seed = 15;
  const loadgen::LoadReport report = loadgen::RunLoad(options);
  std::printf("%s", Describe(report).c_str());
  EXPECT_EQ(loadgen::DisallowedCalls(report, allowed), 0)
      << Describe(report) << LogDigest(log);
  EXPECT_GT(report.total.ok, 0) << Describe(report);
  // Six clients on room for three calls: if nothing was refused, the limits
  // were not what this test exercised.
  EXPECT_GT(report.total.errors.count("RESOURCE_EXHAUSTED"), 0u)
      << Describe(report);

  client::Client::Options client_options;
  client_options.target = server.target();
  client_options.deadline = absl::Seconds(10);
  client::Client client(client_options);
  absl::StatusOr<quantd::v1::ServerInfo> info = client.GetServerInfo();
  EXPECT_TRUE(info.ok()) << info.status() << LogDigest(log);
  absl::StatusOr<client::ServingStatus> health = client.Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, client::ServingStatus::kServing);

  // The bound of hostile_e2e_test's IdleServerGivesMemoryBack: a trim
  // returns only whole free pages, so small objects that outlive a call keep
  // a few MB.
  const int64_t bound = baseline * 11 / 10 + (int64_t{8} << 20);
  const int64_t rss = SettledRssBytes(server.pid(), absl::Seconds(10));
  std::printf(
      "measured: idle server RSS %.1f MB after the load, baseline %.1f MB, "
      "peak under load %.1f MB\n",
      rss / 1e6, baseline / 1e6, ProcStatusBytes(server.pid(), "VmHWM") / 1e6);
  if (!kSanitizedBuild) {
    EXPECT_LE(rss, bound);
  }

  EXPECT_EQ(server.Terminate(), 0) << LogDigest(log);
}

}  // namespace
}  // namespace quantd::testing
