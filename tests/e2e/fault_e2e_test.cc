// End to end: calls that die at each point a client can die, against the
// real quantd binary (issue 14). The Quantize job's stages are cancelled in
// lifecycle_e2e_test; here the rest: a client cancelling mid-upload,
// mid-calibration and mid-download, a client process killed with SIGKILL,
// and deadlines expiring while the client stalls its upload, while core
// calibrates, while core folds constants and while the client does not read
// its download.
//
// After each fault the server's own metrics prove the dead call let go:
// quantd_inflight_jobs back to 0 (the core job ended), quantd_uploading_bytes
// back to 0 (the upload's share returned), and for calibration the batch
// counter stops moving. At the end the idle server's RSS is within 10%
// (+8 MiB) of its baseline and it still answers.
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "tests/core/graph/test_models.h"
#include "tests/e2e/e2e_models.h"
#include "tests/support/background_process.h"
#include "tests/support/sanitizers.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {
namespace {

using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// Big enough that each stage takes a while on any machine: 3 MatMuls of
// 1024x1024 floats (12 MiB); a calibration batch runs them all.
constexpr int kDim = 1024;
constexpr int kLayers = 3;
constexpr size_t kChunk = size_t{1} << 20;

class FaultE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = tmp_.File("quantd.err");
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{},
                                              QUANTD_SERVER_BIN, log_);
    ASSERT_TRUE(server_->ok()) << server_->startup_output() << ReadAll(log_);
    stub_ = RawStub(server_->target());
    model_ = MatMulChainModel(kDim, kLayers);
  }

  double Metric(const std::string& name) {
    return MetricValue(server_->metrics_port(), name);
  }

  // Waits until the server's metric `name` is `value`; false after 30 s.
  bool MetricReaches(const std::string& name, double value) {
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      if (Metric(name) == value) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  // The call log line of `request_id` (the server writes one per call when
  // it ends); empty after 30 s.
  std::string CallLine(const std::string& request_id) {
    return WaitForLine(log_, {"quantd call", "request_id=" + request_id + " "},
                       absl::Seconds(30))
        .value_or("");
  }

  // The call log lines so far.
  std::vector<std::string> CallLines() {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(ReadAll(log_), '\n')) {
      if (absl::StrContains(line, "quantd call ")) {
        lines.emplace_back(line);
      }
    }
    return lines;
  }

  // The first call log line after the first `seen`; empty after 30 s.
  std::string NextCallLine(size_t seen) {
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      std::vector<std::string> lines = CallLines();
      if (lines.size() > seen) return lines[seen];
      absl::SleepFor(absl::Milliseconds(10));
    }
    return "";
  }

  // Prints how the server logged the end of a faulted call: its code and
  // duration, the figures docs/reliability.md quotes.
  static void Print(const std::string& fault, const std::string& line) {
    std::string outcome = "no call line";
    if (size_t at = line.find("code="); at != std::string::npos) {
      outcome = line.substr(at, line.find(' ', line.find("duration_s=")) - at);
    }
    std::printf("fault %-22s server: %s\n", fault.c_str(), outcome.c_str());
  }

  // The dead call let go of everything it held.
  void ExpectReleased(const std::string& request_id,
                      const std::string& server_code) {
    const std::string line = CallLine(request_id);
    Print(request_id, line);
    EXPECT_THAT(line, HasSubstr("code=" + server_code)) << ReadAll(log_);
    EXPECT_TRUE(MetricReaches("quantd_inflight_jobs", 0));
    EXPECT_TRUE(MetricReaches("quantd_uploading_bytes", 0));
    grpc::ClientContext context;
    quantd::v1::ServerInfo info;
    EXPECT_TRUE(
        stub_
            ->GetServerInfo(&context, quantd::v1::GetServerInfoRequest(), &info)
            .ok());
  }

  void Identify(grpc::ClientContext* context, const std::string& request_id,
                absl::Duration deadline = absl::InfiniteDuration()) {
    context->AddMetadata("x-request-id", request_id);
    if (deadline != absl::InfiniteDuration()) {
      context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    }
  }

  // Config and the first `bytes` of the model.
  template <typename Stream, typename Request>
  bool Upload(Stream* stream, Request request, size_t bytes) {
    bool ok = stream->Write(request);
    Request chunk;
    for (size_t offset = 0; ok && offset < bytes; offset += kChunk) {
      chunk.set_model_chunk(
          model_.substr(offset, std::min(kChunk, bytes - offset)));
      ok = stream->Write(chunk);
    }
    return ok;
  }

  QuantizeRequest QuantizeConfigMessage() {
    QuantizeRequest r;
    *r.mutable_config() = DynamicRangeConfig();
    r.mutable_config()->set_model_size_bytes(model_.size());
    return r;
  }
  CalibrateRequest CalibrateConfigMessage() {
    CalibrateRequest r;
    r.mutable_config()->set_method("min_max");
    r.mutable_config()->set_model_size_bytes(model_.size());
    return r;
  }

  TempDir tmp_;
  std::string log_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
  std::string model_;
};

// Constant folding runs the executor on the model's constants before any
// other stage, and a node's work can follow its input values: the deadline
// must reach into the folded node's run (the job-ended line names it; a fold
// that ran to its end would have been cancelled at the next stage instead).
TEST_F(FaultE2eTest, ADeadlineStopsConstantFoldingInsideTheNode) {
  model_ = LongFoldModel().SerializeAsString();
  const std::string id = "fold-deadline";
  grpc::ClientContext context;
  Identify(&context, id, absl::Seconds(1));
  auto stream = stub_->Quantize(&context);
  ASSERT_TRUE(Upload(stream.get(), QuantizeConfigMessage(), model_.size()));
  stream->WritesDone();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ExpectReleased(id, "DEADLINE_EXCEEDED");
  const std::optional<std::string> ended = WaitForLine(
      log_, {"quantd job-ended", "request_id=" + id + " "}, absl::Seconds(30));
  ASSERT_TRUE(ended.has_value()) << ReadAll(log_);
  EXPECT_THAT(*ended, HasSubstr("cancelled during RoiAlign"));
  std::printf("fault fold-deadline: %s\n", ended->c_str());
}

TEST_F(FaultE2eTest, EveryFaultReleasesTheCallAndMemoryComesBack) {
  int faults = 0;
  // One round of every fault; the first warms the server (schemas, arenas,
  // pool stacks), the baseline is the idle server after it.
  auto round = [&](int r) {
    const std::string tag = absl::StrCat("-", r);

    {  // Cancelled mid-upload: the declared size was charged, then freed.
      const std::string id = "upload-cancel" + tag;
      grpc::ClientContext context;
      Identify(&context, id);
      auto stream = stub_->Quantize(&context);
      ASSERT_TRUE(
          Upload(stream.get(), QuantizeConfigMessage(), model_.size() / 2));
      EXPECT_TRUE(MetricReaches("quantd_uploading_bytes",
                                static_cast<double>(model_.size())));
      context.TryCancel();
      EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
      ExpectReleased(id, "CANCELLED");
      ++faults;
    }

    {  // Cancelled mid-calibration: the batch counter stops.
      const std::string id = "calibrate-cancel" + tag;
      grpc::ClientContext context;
      Identify(&context, id);
      auto stream = stub_->Calibrate(&context);
      ASSERT_TRUE(
          Upload(stream.get(), CalibrateConfigMessage(), model_.size()));
      const double before = Metric("quantd_calibration_batches_total");
      CalibrateRequest batch;
      *batch.mutable_batch() = InputBatch(kDim);
      // More batches than the server takes in before the cancel; the writes
      // block on flow control once its queue is full.
      std::thread writer([&] {
        for (int i = 0; i < 10000 && stream->Write(batch); ++i) {
        }
      });
      CalibrateResponse response;
      while (stream->Read(&response)) {
        if (response.has_progress() &&
            response.progress().stage() == quantd::v1::STAGE_CALIBRATE &&
            response.progress().done() >= 2) {
          context.TryCancel();
          break;
        }
      }
      context.TryCancel();
      writer.join();
      EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
      ExpectReleased(id, "CANCELLED");
      const double stopped = Metric("quantd_calibration_batches_total");
      EXPECT_GE(stopped - before, 2);
      EXPECT_LT(stopped - before, 10000);
      absl::SleepFor(absl::Milliseconds(300));
      EXPECT_EQ(Metric("quantd_calibration_batches_total"), stopped)
          << "calibration went on after the call ended";
      ++faults;
    }

    {  // Cancelled mid-download: after the first model chunk back.
      const std::string id = "download-cancel" + tag;
      grpc::ClientContext context;
      Identify(&context, id);
      auto stream = stub_->Quantize(&context);
      ASSERT_TRUE(Upload(stream.get(), QuantizeConfigMessage(), model_.size()));
      stream->WritesDone();
      QuantizeResponse response;
      bool got_chunk = false;
      while (stream->Read(&response)) {
        if (response.has_model_chunk()) {
          got_chunk = true;
          context.TryCancel();
          break;
        }
      }
      EXPECT_TRUE(got_chunk);
      // The server may have queued the last chunk and the summary already
      // (the quantized model is 3 MiB): either side may see its end first.
      const grpc::StatusCode code = stream->Finish().error_code();
      EXPECT_THAT(code,
                  AnyOf(grpc::StatusCode::CANCELLED, grpc::StatusCode::OK));
      const std::string line = CallLine(id);
      Print(id, line);
      EXPECT_THAT(line,
                  AnyOf(HasSubstr("code=CANCELLED"), HasSubstr("code=OK")));
      EXPECT_TRUE(MetricReaches("quantd_inflight_jobs", 0));
      ++faults;
    }

    {  // Deadline while the client stalls its upload.
      const std::string id = "upload-stall" + tag;
      grpc::ClientContext context;
      Identify(&context, id, absl::Milliseconds(500));
      auto stream = stub_->Quantize(&context);
      Upload(stream.get(), QuantizeConfigMessage(), kChunk);
      EXPECT_EQ(stream->Finish().error_code(),
                grpc::StatusCode::DEADLINE_EXCEEDED);
      ExpectReleased(id, "DEADLINE_EXCEEDED");
      ++faults;
    }

    {  // Deadline while core calibrates (batches keep coming).
      const std::string id = "calibrate-deadline" + tag;
      grpc::ClientContext context;
      Identify(&context, id, absl::Seconds(2));
      auto stream = stub_->Calibrate(&context);
      Upload(stream.get(), CalibrateConfigMessage(), model_.size());
      CalibrateRequest batch;
      *batch.mutable_batch() = InputBatch(kDim);
      for (int i = 0; i < 100000 && stream->Write(batch); ++i) {
      }
      EXPECT_EQ(stream->Finish().error_code(),
                grpc::StatusCode::DEADLINE_EXCEEDED);
      ExpectReleased(id, "DEADLINE_EXCEEDED");
      ++faults;
    }

    {  // Deadline while the client does not read its download.
      const std::string id = "download-stall" + tag;
      grpc::ClientContext context;
      Identify(&context, id, absl::Seconds(3));
      auto stream = stub_->Quantize(&context);
      Upload(stream.get(), QuantizeConfigMessage(), model_.size());
      // Not one read: the answer waits in gRPC's buffers and flow-control
      // windows, or the server blocks writing it until the deadline.
      stream->WritesDone();
      absl::SleepFor(absl::Seconds(4));
      const grpc::StatusCode code = stream->Finish().error_code();
      // gRPC buffers the 3 MiB answer for the unread stream, so the server
      // usually finishes (OK); with a larger answer it would block until
      // the deadline. Either way the job is over.
      EXPECT_THAT(code, AnyOf(grpc::StatusCode::DEADLINE_EXCEEDED,
                              grpc::StatusCode::OK));
      const std::string line = CallLine(id);
      Print(id, line);
      EXPECT_THAT(line, AnyOf(HasSubstr("code=DEADLINE_EXCEEDED"),
                              HasSubstr("code=OK")));
      EXPECT_TRUE(MetricReaches("quantd_inflight_jobs", 0));
      ++faults;
    }

    {  // A client process killed with SIGKILL in the middle of its call.
      const std::string model_path = tmp_.File("model.onnx");
      WriteFileOrDie(model_path, MatMulChainModel(2048, 3));
      const size_t seen = CallLines().size();
      BackgroundProcess quantctl(
          {QUANTCTL_BIN, "quantize", "--server=" + server_->target(),
           "--model=" + model_path, "--output=" + tmp_.File("out.onnx"),
           "--method=dynamic_range"},
          tmp_.File("quantctl.log"));
      ASSERT_TRUE(quantctl.started());
      // Killed once the server is working on it.
      EXPECT_TRUE(MetricReaches("quantd_inflight_jobs", 1) ||
                  Metric("quantd_uploading_bytes") > 0);
      ASSERT_EQ(kill(quantctl.pid(), SIGKILL), 0);
      EXPECT_EQ(quantctl.Terminate(), -1);
      // The server sees the connection go: the call ends CANCELLED (or OK
      // if it had already finished sending).
      const std::string line = NextCallLine(seen);
      Print("killed-client" + tag, line);
      EXPECT_THAT(line,
                  AnyOf(HasSubstr("code=CANCELLED"), HasSubstr("code=OK")))
          << ReadAll(tmp_.File("quantctl.log"));
      EXPECT_TRUE(MetricReaches("quantd_inflight_jobs", 0));
      EXPECT_TRUE(MetricReaches("quantd_uploading_bytes", 0));
      ++faults;
    }
  };

  round(0);
  const int64_t baseline = SettledRssBytes(server_->pid(), absl::Seconds(10));
  const std::string baseline_mappings = TopMappings(server_->pid(), 6);
  round(1);
  round(2);
  const int64_t rss = SettledRssBytes(server_->pid(), absl::Seconds(10));
  std::printf(
      "measured: %d faults survived; idle RSS %.1f MB after them, baseline "
      "%.1f MB (after the first round), peak %.1f MB\n",
      faults, rss / 1e6, baseline / 1e6,
      ProcStatusBytes(server_->pid(), "VmHWM") / 1e6);
  if (!kSanitizedBuild) {
    EXPECT_LE(rss, baseline * 11 / 10 + (int64_t{8} << 20))
        << "largest mappings at the baseline:\n"
        << baseline_mappings << "and now:\n"
        << TopMappings(server_->pid(), 6);
  }
  EXPECT_EQ(server_->Terminate(), 0) << ReadAll(log_);
}

}  // namespace
}  // namespace quantd::testing
