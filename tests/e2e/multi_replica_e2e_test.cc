// End to end: three real quantd replicas on loopback behind one client-side
// load-balanced target. One SDK client spreads its calls over all three
// (round_robin); separate quantctl runs spread too (each shuffles the list);
// and when a replica is SIGKILLed under a running call, that call is retried
// on another replica and every later call, SDK or quantctl, still completes.
// Which replica served what comes from each one's quantd_requests_total.
// Also quantctl's --retries against a dead replica.
#include <signal.h>

#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/calibration_data.h"
#include "client/quantd_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_models.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kReplicas = 3;
const std::string kModel = SourcePath("examples/digits/model.onnx");
const std::string kCalibX = SourcePath("examples/digits/calib_x.npy");

// The value of one labelled series in a replica's /metrics; 0 when absent
// (prometheus-cpp only shows a label set once it was used).
double Metric(int metrics_port, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  const std::string body = HttpGet(metrics_port, "/metrics");
  static const std::regex series_re("\n([a-z_]+)(\\{([^}]*)\\})? ([0-9.e+-]+)");
  for (std::sregex_iterator it(body.begin(), body.end(), series_re), end;
       it != end; ++it) {
    if ((*it)[1] != name) continue;
    const std::string label_text = (*it)[3];
    bool all = true;
    for (const auto& [key, value] : labels) {
      all = all &&
            label_text.find(key + "=\"" + value + "\"") != std::string::npos;
    }
    if (all) return std::stod((*it)[4]);
  }
  return 0;
}

double QuantizeOk(int metrics_port) {
  return Metric(metrics_port, "quantd_requests_total",
                {{"method", "Quantize"}, {"code", "OK"}});
}

class MultiReplicaE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kReplicas; ++i) {
      replicas_.push_back(std::make_unique<ServerProcess>(
          std::vector<std::string>{}, QUANTD_SERVER_BIN,
          tmp_.File("quantd" + std::to_string(i) + ".err")));
      ASSERT_TRUE(replicas_.back()->ok()) << replicas_.back()->startup_output();
      addresses_.push_back(replicas_.back()->target());
    }
    target_ = absl::StrJoin(addresses_, ",");
    model_ = ReadFileOrDie(kModel);
  }

  // Quantize calls served (OK) by each replica since the last call.
  std::vector<int> ServedSinceLast() {
    std::vector<int> served;
    last_.resize(kReplicas, 0);
    for (int i = 0; i < kReplicas; ++i) {
      const double now =
          alive_[i] ? QuantizeOk(replicas_[i]->metrics_port()) : last_[i];
      served.push_back(static_cast<int>(now - last_[i]));
      last_[i] = now;
    }
    return served;
  }

  client::Client::Options ClientOptions() {
    client::Client::Options options;
    options.target = target_;
    options.deadline = absl::Seconds(120);
    options.on_retry = [this](const client::RetryEvent& event) {
      std::printf("retry: %s attempt %d failed on %s: %s; backoff %s\n",
                  event.method, event.failed_attempt, event.peer.c_str(),
                  event.status.ToString().c_str(),
                  absl::FormatDuration(event.backoff).c_str());
      retry_peers_.push_back(event.peer);
    };
    return options;
  }

  // `n` quantctl quantize runs, one process each, against the whole list.
  void RunQuantctl(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string out = tmp_.File("out" + std::to_string(i) + ".onnx");
      CommandResult r =
          RunCommand({QUANTCTL_BIN, "quantize", "--server=" + target_,
                      "--model=" + kModel, "--output=" + out,
                      "--method=dynamic_range", "--timeout=60", "--json"});
      ASSERT_EQ(r.exit_code, 0) << "run " << i << ": " << r.err;
      if (!r.err.empty()) std::printf("quantctl run %d: %s", i, r.err.c_str());
    }
  }

  TempDir tmp_;
  std::vector<std::unique_ptr<ServerProcess>> replicas_;
  std::vector<bool> alive_ = std::vector<bool>(kReplicas, true);
  std::vector<std::string> addresses_;
  std::string target_;
  std::string model_;
  std::vector<double> last_;
  std::vector<std::string> retry_peers_;
};

int Sum(const std::vector<int>& v) {
  int sum = 0;
  for (int x : v) sum += x;
  return sum;
}

int Busy(const std::vector<int>& v) {
  int busy = 0;
  for (int x : v) busy += x > 0;
  return busy;
}

TEST_F(MultiReplicaE2eTest, SpreadsCallsAndSurvivesAKilledReplica) {
  ServedSinceLast();

  // (a) One SDK client: round_robin sends calls to every replica.
  constexpr int kSdkCalls = 12;
  {
    client::Client client(ClientOptions());
    EXPECT_THAT(client.channel_target(), HasSubstr("ipv4:"));
    const absl::Time start = absl::Now();
    for (int i = 0; i < kSdkCalls; ++i) {
      absl::StatusOr<client::QuantizeOutcome> outcome =
          client.Quantize(DynamicRangeConfig(), model_);
      ASSERT_TRUE(outcome.ok()) << "call " << i << ": " << outcome.status();
    }
    std::printf("measured: %d SDK Quantize calls in %s\n", kSdkCalls,
                absl::FormatDuration(absl::Now() - start).c_str());
  }
  std::vector<int> served = ServedSinceLast();
  std::printf("SDK client, calls per replica: %s\n",
              absl::StrJoin(served, " / ").c_str());
  EXPECT_EQ(Sum(served), kSdkCalls);
  EXPECT_EQ(Busy(served), kReplicas) << "round_robin left a replica idle";

  // (b) Separate quantctl runs: each process's channel starts on the first
  // address that connects; the shuffled list spreads them.
  constexpr int kRuns = 9;
  const absl::Time runs_start = absl::Now();
  RunQuantctl(kRuns);
  std::printf("measured: %d quantctl runs in %s\n", kRuns,
              absl::FormatDuration(absl::Now() - runs_start).c_str());
  served = ServedSinceLast();
  std::printf("quantctl runs per replica: %s\n",
              absl::StrJoin(served, " / ").c_str());
  EXPECT_EQ(Sum(served), kRuns);
  EXPECT_GE(Busy(served), 2) << "every quantctl run went to one replica";

  // (c) A replica dies (SIGKILL) under a running call. The call is a
  // Calibrate whose batch source holds it open on the server (the job has
  // started with the first batch) until the test has killed the replica.
  client::Client client(ClientOptions());
  absl::StatusOr<std::unique_ptr<client::CalibrationData>> data =
      client::CalibrationData::Open({{"input", kCalibX}}, 16);
  ASSERT_TRUE(data.ok()) << data.status();
  const int64_t batches = (*data)->num_batches();
  absl::Notification holding, killed;
  int pulled = 0, rewinds = 0;
  absl::StatusOr<quantd::v1::CalibrationResult> held;
  std::thread call([&] {
    quantd::v1::CalibrateConfig config;
    config.set_method("min_max");
    held = client.Calibrate(
        config, model_,
        [&]() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
          if (pulled == 1) {  // Only in the first attempt.
            holding.Notify();
            killed.WaitForNotification();
          }
          std::optional<quantd::v1::TensorBatch> batch = (*data)->Next();
          if (batch.has_value()) ++pulled;
          return batch;
        },
        nullptr,
        [&] {
          ++rewinds;
          (*data)->Rewind();
          return absl::OkStatus();
        });
  });
  holding.WaitForNotification();
  // The replica running the job: the one whose quantd_inflight_jobs is 1.
  int victim = -1;
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (victim < 0 && absl::Now() < end) {
    for (int i = 0; i < kReplicas && victim < 0; ++i) {
      if (Metric(replicas_[i]->metrics_port(), "quantd_inflight_jobs", {}) ==
          1) {
        victim = i;
      }
    }
    if (victim < 0) absl::SleepFor(absl::Milliseconds(20));
  }
  if (victim < 0) {  // Let the call end before failing.
    killed.Notify();
    call.join();
    FAIL() << "no replica shows the held call's job";
  }
  const int kill_result = kill(replicas_[victim]->pid(), SIGKILL);
  alive_[victim] = false;
  std::printf("killed replica %d (%s) under a running Calibrate\n", victim,
              addresses_[victim].c_str());
  killed.Notify();
  call.join();
  ASSERT_EQ(kill_result, 0);
  ASSERT_TRUE(held.ok()) << held.status();
  std::printf("held call: %d batch(es) pulled, %d rewind(s)\n", pulled,
              rewinds);
  EXPECT_EQ(held->batch_count(), batches);
  // Rewound, then every batch sent again (after two or more the first time).
  EXPECT_GE(rewinds, 1);
  EXPECT_GE(pulled, 2 + batches);
  ASSERT_FALSE(retry_peers_.empty());
  EXPECT_THAT(retry_peers_.front(), HasSubstr(addresses_[victim]));

  // Every later call completes on the two survivors: the same client...
  ServedSinceLast();
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<client::QuantizeOutcome> outcome =
        client.Quantize(DynamicRangeConfig(), model_);
    ASSERT_TRUE(outcome.ok()) << "call " << i << ": " << outcome.status();
  }
  // ...and new quantctl processes, whose shuffled lists often start with
  // the dead address.
  RunQuantctl(6);
  served = ServedSinceLast();
  std::printf("after the kill, calls per surviving replica: %s\n",
              absl::StrJoin(served, " / ").c_str());
  EXPECT_EQ(Sum(served), 12);
  EXPECT_EQ(Busy(served), kReplicas - 1);
}

// quantctl's --retries: how many times a call to a dead replica is made
// again, and its bounds.
TEST(QuantctlRetriesTest, RetriesUnavailableAsOftenAsAsked) {
  int port;
  {
    ServerProcess gone;  // Its ports are free again once it is gone.
    ASSERT_TRUE(gone.ok()) << gone.startup_output();
    port = gone.port();
  }
  const std::string server = "--server=127.0.0.1:" + std::to_string(port);
  // Not on a terminal: no retry notices, one error line that counts them.
  CommandResult r = RunCommand({QUANTCTL_BIN, "info", server, "--retries=2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("UNAVAILABLE: "));
  EXPECT_THAT(r.err, EndsWith(" (gave up after 3 attempts)\n"));

  r = RunCommand({QUANTCTL_BIN, "health", server, "--retries=0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("UNAVAILABLE: "));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("attempts")));

  for (const char* bad : {"--retries=-1", "--retries=11", "--retries=x"}) {
    r = RunCommand({QUANTCTL_BIN, "info", server, bad});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
  }
  r = RunCommand({QUANTCTL_BIN, "info", "--server=localhost:1,localhost:2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("INVALID_ARGUMENT: server list"));
}

}  // namespace
}  // namespace quantd::testing
