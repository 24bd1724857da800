// End to end: the server's limits against the real quantd binary. Tensor and
// node limits (INVALID_ARGUMENT right after the parse), a declared size far
// over --max_model_bytes refused before any byte is read, --max_call_duration
// cutting a call whose client set no deadline, the bounded wait queue of
// --max_queued_jobs (with its gauge), and quantd_quantized_tensors_total.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "tests/e2e/e2e_models.h"
#include "tests/e2e/raw_call.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;

quantd::v1::CalibrateConfig MinMax() {
  quantd::v1::CalibrateConfig config;
  config.set_method("min_max");
  return config;
}

class LimitsE2eTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags) {
    log_ = tmp_.File("quantd.err");
    server_ = std::make_unique<ServerProcess>(flags, QUANTD_SERVER_BIN, log_);
    ASSERT_TRUE(server_->ok()) << server_->startup_output() << ReadAll(log_);
    stub_ = RawStub(server_->target());
  }

  std::unique_ptr<QuantizeCall> Quantize(
      const std::string& model,
      absl::Duration deadline = absl::InfiniteDuration()) {
    return std::make_unique<QuantizeCall>(
        [this](grpc::ClientContext* c) { return stub_->Quantize(c); },
        DynamicRangeConfig(), model, deadline);
  }
  std::unique_ptr<CalibrateCall> Calibrate(
      const std::string& model,
      absl::Duration deadline = absl::InfiniteDuration()) {
    return std::make_unique<CalibrateCall>(
        [this](grpc::ClientContext* c) { return stub_->Calibrate(c); },
        MinMax(), model, deadline);
  }
  static quantd::v1::CalibrateRequest Batch(int dim) {
    quantd::v1::CalibrateRequest request;
    *request.mutable_batch() = InputBatch(dim);
    return request;
  }
  double Metric(const std::string& name, const std::string& labels = "") {
    return MetricValue(server_->metrics_port(), name, labels);
  }

  TempDir tmp_;
  std::string log_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
};

TEST_F(LimitsE2eTest, TensorAndNodeLimitsRefuseRightAfterTheParse) {
  Start({"--max_tensor_elements=100000", "--max_graph_nodes=20"});
  // One 400 x 400 weight: 160000 elements.
  grpc::Status status = Quantize(MatMulChainModel(400, 1))->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("initializer 'W0'"));
  EXPECT_THAT(status.error_message(), HasSubstr("160000 elements"));
  EXPECT_THAT(status.error_message(), HasSubstr("100000"));
  // Calibrate applies the same limits.
  auto calibrate = Calibrate(MatMulChainModel(400, 1));
  calibrate->Write(Batch(400));
  status = calibrate->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("160000 elements"));
  // 25 small nodes.
  status = Quantize(MatMulChainModel(16, 25))->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("25 nodes"));
  EXPECT_THAT(status.error_message(), HasSubstr("limit of 20"));
  // Within both: quantized, and counted by precision and op set.
  std::vector<quantd::v1::QuantizeResponse> responses;
  status = Quantize(MatMulChainModel(64, 3))->Finish(&responses);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(responses.empty());
  EXPECT_EQ(responses.back().summary().quantized_tensors(), 3);
  EXPECT_EQ(Metric("quantd_quantized_tensors_total",
                   "op_set=\"TF\",precision=\"PRECISION_W8A8\""),
            3);
}

TEST_F(LimitsE2eTest, DeclaredTenGigabyteModelIsRefusedBeforeReading) {
  Start({});
  const int64_t rss_before = ProcStatusBytes(server_->pid(), "VmRSS");
  const int64_t vm_before = ProcStatusBytes(server_->pid(), "VmSize");
  grpc::ClientContext context;
  auto stream = stub_->Quantize(&context);
  quantd::v1::QuantizeRequest request;
  *request.mutable_config() = DynamicRangeConfig();
  request.mutable_config()->set_model_size_bytes(uint64_t{10} << 30);
  ASSERT_TRUE(stream->Write(request));
  // No chunk, no half-close: the answer can only come from the config.
  quantd::v1::QuantizeResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("10737418240"));
  const int64_t rss_after = ProcStatusBytes(server_->pid(), "VmRSS");
  const int64_t vm_after = ProcStatusBytes(server_->pid(), "VmSize");
  std::printf(
      "measured: 10 GiB declared: server VmRSS %.1f -> %.1f MiB, VmSize %.1f "
      "-> %.1f MiB\n",
      rss_before / 1048576.0, rss_after / 1048576.0, vm_before / 1048576.0,
      vm_after / 1048576.0);
  // Nothing was reserved for it (a reservation would show in VmSize).
  EXPECT_LT(vm_after - vm_before, int64_t{1} << 30);
  EXPECT_EQ(Metric("quantd_model_bytes_total", "direction=\"in\""), 0);
}

TEST_F(LimitsE2eTest, CallDurationCapEndsACallWithoutAClientDeadline) {
  Start({"--max_call_duration=1500ms"});
  constexpr int kDim = 16;
  const absl::Time start = absl::Now();
  // A Calibrate whose client goes quiet after one batch: its job waits for
  // more, and the client set no deadline.
  auto call = Calibrate(MatMulChainModel(kDim, 2));
  call->Write(Batch(kDim));
  const grpc::Status status =
      call->Finish(/*responses=*/nullptr, /*half_close=*/false);
  const absl::Duration took = absl::Now() - start;
  std::printf("measured: capped call ended after %s (cap 1.5s)\n",
              absl::FormatDuration(took).c_str());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("limit of 1.5s per call"));
  // The job let go: its slot is back.
  EXPECT_TRUE(WaitForMetric(server_->metrics_port(), "quantd_inflight_jobs", 0,
                            absl::Seconds(10)));
  // Short calls are not affected.
  auto quick = Calibrate(MatMulChainModel(kDim, 2));
  quick->Write(Batch(kDim));
  EXPECT_TRUE(quick->Finish().ok());
}

TEST_F(LimitsE2eTest, ConnectionAgeNeverBreaksACallAndTheChannelReconnects) {
  Start({"--max_connection_age=300ms"});
  constexpr int kDim = 16;
  // A call that outlives its connection's age: the GOAWAY waits for it.
  auto call = Calibrate(MatMulChainModel(kDim, 2));
  call->Write(Batch(kDim));
  absl::SleepFor(absl::Milliseconds(900));
  call->Write(Batch(kDim));
  const grpc::Status first = call->Finish();
  EXPECT_TRUE(first.ok()) << first.error_message();
  // Later calls on the same channel land on a fresh connection.
  for (int i = 0; i < 3; ++i) {
    absl::SleepFor(absl::Milliseconds(400));
    auto next = Calibrate(MatMulChainModel(kDim, 2));
    next->Write(Batch(kDim));
    const grpc::Status status = next->Finish();
    EXPECT_TRUE(status.ok()) << "call " << i << ": " << status.error_message();
  }
}

TEST_F(LimitsE2eTest, ServerInfoReportsTheQueueAndCallCaps) {
  Start({"--max_concurrent_jobs=1", "--max_queued_jobs=2",
         "--max_call_duration=90s"});
  grpc::ClientContext context;
  quantd::v1::ServerInfo info;
  ASSERT_TRUE(
      stub_->GetServerInfo(&context, quantd::v1::GetServerInfoRequest(), &info)
          .ok());
  EXPECT_EQ(info.limits().max_concurrent_jobs(), 1);
  EXPECT_EQ(info.limits().max_queued_jobs(), 2);
  EXPECT_DOUBLE_EQ(info.limits().max_call_duration_seconds(), 90.0);
}

// A burst of clients larger than the job slots waits instead of failing:
// the default queue is twice the slots (--max_queued_jobs=-1).
TEST_F(LimitsE2eTest, TheDefaultQueueIsTwiceTheJobSlots) {
  Start({"--max_concurrent_jobs=3"});
  grpc::ClientContext context;
  quantd::v1::ServerInfo info;
  ASSERT_TRUE(
      stub_->GetServerInfo(&context, quantd::v1::GetServerInfoRequest(), &info)
          .ok());
  EXPECT_EQ(info.limits().max_concurrent_jobs(), 3);
  EXPECT_EQ(info.limits().max_queued_jobs(), 6);
}

TEST_F(LimitsE2eTest, QueuedCallsWaitForASlotAndLeaveWhenCancelled) {
  Start({"--max_concurrent_jobs=1", "--max_queued_jobs=1"});
  constexpr int kDim = 16;
  const std::string model = MatMulChainModel(kDim, 2);
  const int port = server_->metrics_port();
  EXPECT_EQ(Metric("quantd_queued_jobs"), 0);

  // A takes the one slot: its job waits for more batches.
  auto a = Calibrate(model);
  ASSERT_TRUE(a->Write(Batch(kDim)));
  ASSERT_TRUE(
      WaitForMetric(port, "quantd_inflight_jobs", 1, absl::Seconds(10)));

  // B waits in the queue, its model still charged to the upload budget (A's
  // is not: the job limit bounds it); C finds no room and is refused at once.
  auto b = Calibrate(model);
  ASSERT_TRUE(b->Write(Batch(kDim)));
  ASSERT_TRUE(WaitForMetric(port, "quantd_queued_jobs", 1, absl::Seconds(10)));
  EXPECT_TRUE(WaitForMetric(port, "quantd_uploading_bytes",
                            static_cast<double>(model.size()),
                            absl::Seconds(10)));
  const absl::Time c_start = absl::Now();
  grpc::Status c = Quantize(model)->Finish();
  std::printf("measured: refusal with a full queue took %s\n",
              absl::FormatDuration(absl::Now() - c_start).c_str());
  EXPECT_EQ(c.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(c.error_message(),
              HasSubstr("server busy: 1 jobs in flight (limit 1), 1 queued "
                        "(limit 1)"));

  // B is cancelled while queued: it leaves the queue.
  b->Cancel();
  EXPECT_EQ(b->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitForMetric(port, "quantd_queued_jobs", 0, absl::Seconds(10)));
  EXPECT_TRUE(
      WaitForMetric(port, "quantd_uploading_bytes", 0, absl::Seconds(10)));

  // D's deadline passes while it waits: it leaves the queue too.
  auto d = Calibrate(model, absl::Seconds(2));
  ASSERT_TRUE(d->Write(Batch(kDim)));
  EXPECT_TRUE(WaitForMetric(port, "quantd_queued_jobs", 1, absl::Seconds(10)));
  EXPECT_EQ(d->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitForMetric(port, "quantd_queued_jobs", 0, absl::Seconds(10)));

  // E waits, and runs once A is done.
  auto e = Calibrate(model);
  ASSERT_TRUE(e->Write(Batch(kDim)));
  ASSERT_TRUE(WaitForMetric(port, "quantd_queued_jobs", 1, absl::Seconds(10)));
  std::vector<quantd::v1::CalibrateResponse> responses;
  ASSERT_TRUE(a->Finish(&responses).ok());
  ASSERT_FALSE(responses.empty());
  EXPECT_EQ(responses.back().result().batch_count(), 1);
  EXPECT_TRUE(WaitForMetric(port, "quantd_queued_jobs", 0, absl::Seconds(10)));
  responses.clear();
  ASSERT_TRUE(e->Write(Batch(kDim)));
  const grpc::Status e_status = e->Finish(&responses);
  ASSERT_TRUE(e_status.ok()) << e_status.error_message();
  EXPECT_EQ(responses.back().result().batch_count(), 2);
  EXPECT_TRUE(
      WaitForMetric(port, "quantd_inflight_jobs", 0, absl::Seconds(10)));
}

}  // namespace
}  // namespace quantd::testing
