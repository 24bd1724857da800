// End to end: the server's lifecycle against the real quantd binary. Request
// ids in the call log and the initial metadata; SIGTERM draining (health
// NOT_SERVING, new calls UNAVAILABLE, the running call completes, exit 0);
// and how promptly a cancelled call (deadline or client) lets go of core, by
// stage, and the memory over 50 cancellations.
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/quantd_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "tests/e2e/e2e_models.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

client::Client::Options ClientOptions(const ServerProcess& server) {
  client::Client::Options options;
  options.target = server.target();
  return options;
}

// One Quantize over a raw stub (so the test controls metadata, deadline and
// timing): the outcome and when the upload finished.
struct RawQuantize {
  grpc::Status status;
  std::string request_id_back;  // The x-request-id initial metadata.
  absl::Time upload_done;
  absl::Time deadline = absl::InfiniteFuture();
  uint64_t bytes_back = 0;
};

RawQuantize QuantizeRaw(
    const std::string& target, const std::string& model,
    const std::string& request_id, absl::Duration deadline,
    absl::Duration cancel_after = absl::InfiniteDuration(),
    const std::function<bool(const quantd::v1::QuantizeResponse&)>& cancel_on =
        nullptr) {
  auto channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), [] {
        grpc::ChannelArguments args;
        args.SetMaxReceiveMessageSize(64 << 20);
        args.SetMaxSendMessageSize(16 << 20);
        return args;
      }());
  auto stub = quantd::v1::QuantizationService::NewStub(channel);
  RawQuantize out;
  grpc::ClientContext context;
  if (!request_id.empty()) context.AddMetadata("x-request-id", request_id);
  if (deadline != absl::InfiniteDuration()) {
    out.deadline = absl::Now() + deadline;
    context.set_deadline(absl::ToChronoTime(out.deadline));
  }
  auto stream = stub->Quantize(&context);
  // The client's own cancel, `cancel_after` the call started.
  absl::Notification call_over;
  std::thread canceller;
  if (cancel_after != absl::InfiniteDuration()) {
    out.deadline = absl::Now() + cancel_after;
    canceller = std::thread([&context, &call_over, cancel_after] {
      if (!call_over.WaitForNotificationWithTimeout(cancel_after)) {
        context.TryCancel();
      }
    });
  }
  quantd::v1::QuantizeRequest request;
  *request.mutable_config() = DynamicRangeConfig();
  request.mutable_config()->set_model_size_bytes(model.size());
  bool ok = stream->Write(request);
  constexpr size_t kChunk = size_t{1} << 20;
  for (size_t offset = 0; ok && offset < model.size(); offset += kChunk) {
    request.set_model_chunk(model.substr(offset, kChunk));
    ok = stream->Write(request);
  }
  if (ok) stream->WritesDone();
  out.upload_done = absl::Now();
  quantd::v1::QuantizeResponse response;
  bool cancelled = false;
  while (stream->Read(&response)) {
    if (response.has_model_chunk()) {
      out.bytes_back += response.model_chunk().size();
    }
    // The client's own cancel, as soon as the server reports `cancel_on`.
    if (!cancelled && cancel_on && cancel_on(response)) {
      out.deadline = absl::Now();
      context.TryCancel();
      cancelled = true;
    }
  }
  out.status = stream->Finish();
  call_over.Notify();
  if (canceller.joinable()) canceller.join();
  const auto& metadata = context.GetServerInitialMetadata();
  if (auto it = metadata.find("x-request-id"); it != metadata.end()) {
    out.request_id_back.assign(it->second.data(), it->second.size());
  }
  return out;
}

TEST(LifecycleE2eTest, RequestIdIsLoggedAndSentBack) {
  TempDir tmp;
  const std::string log = tmp.File("quantd.err");
  ServerProcess server({}, QUANTD_SERVER_BIN, log);
  ASSERT_TRUE(server.ok()) << server.startup_output() << ReadAll(log);
  auto stub = quantd::v1::QuantizationService::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));

  auto call = [&](const std::optional<std::string>& id, std::string* back) {
    grpc::ClientContext context;
    if (id.has_value()) context.AddMetadata("x-request-id", *id);
    quantd::v1::ServerInfo info;
    grpc::Status status = stub->GetServerInfo(
        &context, quantd::v1::GetServerInfoRequest(), &info);
    const auto& metadata = context.GetServerInitialMetadata();
    auto it = metadata.find("x-request-id");
    back->clear();
    if (it != metadata.end())
      back->assign(it->second.data(), it->second.size());
    return status;
  };

  std::string back;
  ASSERT_TRUE(call("abc-123", &back).ok());
  EXPECT_EQ(back, "abc-123");
  std::optional<std::string> line = WaitForLine(
      log, {"quantd call", "method=GetServerInfo", "request_id=abc-123 "},
      absl::Seconds(5));
  ASSERT_TRUE(line.has_value()) << ReadAll(log);
  EXPECT_THAT(*line, HasSubstr("code=OK"));

  // None given: the server makes one up, logs it and sends it back.
  ASSERT_TRUE(call(std::nullopt, &back).ok());
  EXPECT_THAT(back, MatchesRegex("[0-9a-f]{16}"));
  EXPECT_TRUE(WaitForLine(log, {"quantd call", "request_id=" + back + " "},
                          absl::Seconds(5))
                  .has_value())
      << ReadAll(log);

  // Spaces, quotes or too long: sanitized, and cut to 128 characters.
  const std::string evil = "a b\"c d" + std::string(300, 'z');
  ASSERT_TRUE(call(evil, &back).ok());
  const std::string expected = "a_b_c_d" + std::string(121, 'z');
  EXPECT_EQ(back, expected);
  EXPECT_TRUE(
      WaitForLine(log, {"request_id=" + expected + " "}, absl::Seconds(5))
          .has_value())
      << ReadAll(log);

  // A streaming call that fails (no model: INVALID_ARGUMENT) carries it too.
  RawQuantize refused =
      QuantizeRaw(server.target(), "", "refused-1", absl::InfiniteDuration());
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.request_id_back, "refused-1");
  EXPECT_TRUE(WaitForLine(log,
                          {"method=Quantize", "request_id=refused-1 ",
                           "code=INVALID_ARGUMENT"},
                          absl::Seconds(5))
                  .has_value())
      << ReadAll(log);
}

// A Calibrate call held open by its client: once constructed, the model has
// been sent and the call runs on the server, waiting for its first batch
// until Finish() lets the client send three.
class HeldCalibrate {
 public:
  static constexpr int kDim = 8;

  HeldCalibrate(const ServerProcess& server, const std::string& model)
      : thread_([this, options = ClientOptions(server), model] {
          client::Client client(options);
          quantd::v1::CalibrateConfig config;
          config.set_method("min_max");
          int sent = 0;
          result_ = client.Calibrate(
              config, model,
              [&]() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
                if (sent == 0) {
                  source_waiting_.Notify();
                  release_.WaitForNotification();
                }
                if (sent == 3) return std::nullopt;
                ++sent;
                return InputBatch(kDim);
              });
        }) {
    source_waiting_.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(200));
  }
  ~HeldCalibrate() { Finish(); }

  const absl::StatusOr<quantd::v1::CalibrationResult>& Finish() {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  absl::Notification source_waiting_, release_;
  absl::StatusOr<quantd::v1::CalibrationResult> result_;
  std::thread thread_;  // Last: starts once the members above exist.
};

TEST(LifecycleE2eTest, SigtermDrainsTheRunningCallAndRefusesNewOnes) {
  TempDir tmp;
  const std::string log = tmp.File("quantd.err");
  ServerProcess server({"--shutdown_grace=30s"}, QUANTD_SERVER_BIN, log);
  ASSERT_TRUE(server.ok()) << server.startup_output() << ReadAll(log);
  const std::string model = MatMulChainModel(HeldCalibrate::kDim, 2);
  HeldCalibrate held(server, model);

  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  ASSERT_TRUE(WaitForLine(log, {"draining"}, absl::Seconds(10)).has_value())
      << ReadAll(log);

  // Health, from a fresh channel: NOT_SERVING (the server still listens).
  {
    client::Client other(ClientOptions(server));
    absl::StatusOr<client::ServingStatus> health = other.Health();
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, client::ServingStatus::kNotServing);
  }
  // A new call: refused with UNAVAILABLE and a clear message.
  {
    client::Client other(ClientOptions(server));
    quantd::v1::CalibrateConfig config;
    config.set_method("min_max");
    absl::StatusOr<quantd::v1::CalibrationResult> refused = other.Calibrate(
        config, model,
        []() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
          return std::nullopt;
        });
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
        << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("shutting down"));
  }
  {
    RawQuantize refused =
        QuantizeRaw(server.target(), model, "late-1", absl::Seconds(10));
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << refused.status.error_message();
    EXPECT_THAT(refused.status.error_message(), HasSubstr("shutting down"));
  }

  // The running call completes normally once the client lets it.
  const absl::StatusOr<quantd::v1::CalibrationResult>& done = held.Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->batch_count(), 3);
  // With no call left the drain ends and the server exits by itself.
  EXPECT_EQ(server.Wait(), 0) << ReadAll(log);
  const std::string err = ReadAll(log);
  EXPECT_THAT(err, HasSubstr("method=Calibrate"));
  EXPECT_THAT(err, HasSubstr("quantd: stopped"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("cancelling")));
}

// A second signal while draining ends the process at once, without waiting
// out the grace for the running call (whose job might never stop: the
// kubelet, or an operator, must be able to end a drain).
TEST(LifecycleE2eTest, ASecondSignalEndsTheDrainAtOnce) {
  TempDir tmp;
  const std::string log = tmp.File("quantd.err");
  ServerProcess server({"--shutdown_grace=10m"}, QUANTD_SERVER_BIN, log);
  ASSERT_TRUE(server.ok()) << server.startup_output() << ReadAll(log);
  HeldCalibrate held(server, MatMulChainModel(HeldCalibrate::kDim, 2));

  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  ASSERT_TRUE(WaitForLine(log, {"draining"}, absl::Seconds(10)).has_value())
      << ReadAll(log);
  EXPECT_EQ(server.Terminate(), 1) << ReadAll(log);  // The second SIGTERM.
  EXPECT_THAT(ReadAll(log),
              HasSubstr("while draining: exiting without waiting"));
  // The held call ends with the process, not with a result.
  EXPECT_FALSE(held.Finish().ok());
}

// quantd_inflight_jobs from /metrics; -1 when absent.
int InflightJobs(int metrics_port) {
  return static_cast<int>(MetricValue(metrics_port, "quantd_inflight_jobs"));
}

std::string Summary(std::vector<double> v) {
  if (v.empty()) return "n/a";
  std::sort(v.begin(), v.end());
  char buf[128];
  std::snprintf(buf, sizeof(buf), "median %.1f / max %.1f ms (%zu)",
                v[v.size() / 2], v.back(), v.size());
  return buf;
}

// Cancels large calls at each stage of their job (the client cancels as
// soon as the server reports the stage, so the stage is hit whatever the
// machine's speed), plus some by deadline, and measures from the server's
// own log how long after each call ended its core job let go ("cancel ->
// core stopped"); then checks that 50 such calls leave no memory behind and
// the server still serves. No wall-clock assertion: the numbers are printed.
TEST(LifecycleE2eTest, CancelledCallsStopCorePromptlyWithoutLeaking) {
  TempDir tmp;
  const std::string log = tmp.File("quantd.err");
  ServerProcess server({}, QUANTD_SERVER_BIN, log);
  ASSERT_TRUE(server.ok()) << server.startup_output() << ReadAll(log);
  constexpr int kDim = 2048;
  constexpr int kLayers = 3;
  const std::string model = MatMulChainModel(kDim, kLayers);
  std::printf("model: %d x %dx%d float MatMul weights, %.1f MiB\n", kLayers,
              kDim, kDim, model.size() / 1048576.0);

  // Uncancelled first: how long the upload and the whole call take.
  const absl::Time start = absl::Now();
  RawQuantize full =
      QuantizeRaw(server.target(), model, "full-0", absl::InfiniteDuration());
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  const absl::Duration upload = full.upload_done - start;
  const absl::Duration total = absl::Now() - start;
  std::printf(
      "uncancelled Quantize: upload %s, whole call %s, %llu bytes back\n",
      absl::FormatDuration(upload).c_str(), absl::FormatDuration(total).c_str(),
      static_cast<unsigned long long>(full.bytes_back));
  absl::SleepFor(absl::Milliseconds(200));
  const int64_t rss_baseline = ProcStatusBytes(server.pid(), "VmRSS");

  constexpr int kCalls = 50;
  // The stage whose start (its first Progress event) triggers the cancel;
  // STAGE_UNSPECIFIED: a deadline ~20 ms after the upload instead.
  constexpr quantd::v1::Stage kTargets[] = {
      quantd::v1::STAGE_PARSE, quantd::v1::STAGE_VALIDATE,
      quantd::v1::STAGE_QUANTIZE, quantd::v1::STAGE_SERIALIZE,
      quantd::v1::STAGE_UNSPECIFIED};
  std::map<std::string, std::vector<double>> by_stage;
  std::vector<double> all_ms;
  int no_job = 0, job_already_done = 0, completed = 0;
  absl::Duration last_upload = upload;
  const absl::Time calls_start = absl::Now();
  int64_t rss_first = -1;
  // glibc's per-thread arenas fill up over the first calls in plateaus
  // (fragmentation, not a leak); growth is measured after these.
  constexpr int kWarmCalls = 10;
  int64_t rss_warm = -1;
  for (int i = 0; i < kCalls; ++i) {
    const std::string id = "cancel-" + std::to_string(i);
    const quantd::v1::Stage target = kTargets[i % std::size(kTargets)];
    const bool by_deadline = target == quantd::v1::STAGE_UNSPECIFIED;
    const absl::Time call_start = absl::Now();
    RawQuantize r =
        by_deadline
            ? QuantizeRaw(server.target(), model, id,
                          last_upload + absl::Milliseconds(20))
            : QuantizeRaw(server.target(), model, id, absl::InfiniteDuration(),
                          absl::InfiniteDuration(),
                          [target](const quantd::v1::QuantizeResponse& r) {
                            return r.has_progress() &&
                                   r.progress().stage() == target;
                          });
    last_upload = r.upload_done - call_start;
    // A deadline call whose upload was quicker than the last one's may
    // finish first (OK); every other call ends with its cancel's code.
    if (by_deadline && r.status.ok()) {
      ++completed;
      if (i + 1 == kWarmCalls) {
        rss_warm = ProcStatusBytes(server.pid(), "VmRSS");
      }
      continue;
    }
    const grpc::StatusCode expected = by_deadline
                                          ? grpc::StatusCode::DEADLINE_EXCEEDED
                                          : grpc::StatusCode::CANCELLED;
    EXPECT_EQ(r.status.error_code(), expected)
        << id << ": " << r.status.error_message();
    std::optional<std::string> line = WaitForLine(
        log, {"quantd call", "request_id=" + id + " "}, absl::Seconds(30));
    ASSERT_TRUE(line.has_value()) << ReadAll(log);
    // On a loaded machine the server can finish sending a deadline call
    // (code=OK in its log) while the client, still reading, runs out of
    // time: both are right about their own side.
    if (by_deadline && absl::StrContains(*line, "code=OK ")) {
      ++completed;
      if (i + 1 == kWarmCalls) {
        rss_warm = ProcStatusBytes(server.pid(), "VmRSS");
      }
      continue;
    }
    EXPECT_THAT(*line,
                HasSubstr(std::string("code=") +
                          (by_deadline ? "DEADLINE_EXCEEDED" : "CANCELLED")));
    // The core job lets go: the slot comes back.
    const absl::Time wait_end = absl::Now() + absl::Seconds(30);
    while (InflightJobs(server.metrics_port()) != 0 && absl::Now() < wait_end) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    ASSERT_EQ(InflightJobs(server.metrics_port()), 0) << id;
    // A job still running when the call ended logs when it let go, and
    // the stage it was cancelled in.
    std::optional<std::string> job =
        WaitForLine(log, {"quantd job-ended", "request_id=" + id + " "},
                    absl::Milliseconds(50));
    if (!job.has_value()) {
      // Cancelled while receiving (no job yet) or after the job was done
      // (while sending).
      if (WaitForLine(
              log, {"quantd call", "request_id=" + id + " ", "while receiving"},
              absl::ZeroDuration())
              .has_value()) {
        ++no_job;
      } else {
        ++job_already_done;
      }
    } else {
      std::smatch m;
      static const std::regex after("after_call_s=([0-9.]+)");
      static const std::regex during("cancelled during ([a-z ]+)");
      ASSERT_TRUE(std::regex_search(*job, m, after)) << *job;
      const double ms = 1000 * std::stod(m[1]);
      all_ms.push_back(ms);
      std::string stage = "other";
      if (std::regex_search(*job, m, during)) stage = m[1];
      by_stage[stage].push_back(ms);
    }
    if (i == 0) rss_first = ProcStatusBytes(server.pid(), "VmRSS");
    if (i + 1 == kWarmCalls) rss_warm = ProcStatusBytes(server.pid(), "VmRSS");
  }
  const double calls_s = absl::ToDoubleSeconds(absl::Now() - calls_start);
  // The last call's memory goes once its last reference is dropped, just
  // after the job's slot is released (then the heap is trimmed). On a loaded
  // machine that can take longer than a moment: wait up to 10 s for RSS to
  // come back under the bound; a leak never does.
  ASSERT_GT(rss_warm, 0);
  const absl::Time settle_start = absl::Now();
  int64_t rss_last = ProcStatusBytes(server.pid(), "VmRSS");
  while (rss_last - rss_warm >= static_cast<int64_t>(model.size()) &&
         absl::Now() - settle_start < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(50));
    rss_last = ProcStatusBytes(server.pid(), "VmRSS");
  }
  std::printf("measured: RSS settled %.2f s after the last call\n",
              absl::ToDoubleSeconds(absl::Now() - settle_start));
  std::printf("measured: %d cancelled calls in %.1f s\n", kCalls, calls_s);
  std::printf("measured: cancel -> core stopped, all: %s\n",
              Summary(all_ms).c_str());
  for (const auto& [stage, ms] : by_stage) {
    std::printf("measured: cancel -> core stopped, during %s: %s\n",
                stage.c_str(), Summary(ms).c_str());
  }
  std::printf(
      "measured: %d calls cancelled while receiving (no job yet), %d after "
      "their job was done, %d completed before their cancel\n",
      no_job, job_already_done, completed);
  std::printf(
      "measured: server VmRSS after the uncancelled call %.1f MiB, after "
      "cancelled call 1 %.1f MiB, after %d %.1f MiB, after %d: %.1f MiB\n",
      rss_baseline / 1048576.0, rss_first / 1048576.0, kWarmCalls,
      rss_warm / 1048576.0, kCalls, rss_last / 1048576.0);
  // Most cancels fall while core works.
  EXPECT_GE(all_ms.size(), kCalls / 2);
  // No per-call leak: over the 40 cancelled calls after the warm-up RSS
  // grows by less than one model, so even 2.5% of a model kept per call
  // would fail.
  EXPECT_LT(rss_last - rss_warm, static_cast<int64_t>(model.size()));
  // Still healthy and working after all that.
  client::Client client(ClientOptions(server));
  absl::StatusOr<client::ServingStatus> health = client.Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, client::ServingStatus::kServing);
  RawQuantize after = QuantizeRaw(server.target(), MatMulChainModel(64, 2),
                                  "after-0", absl::Seconds(30));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace quantd::testing
