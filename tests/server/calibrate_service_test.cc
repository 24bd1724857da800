// Calibrate, and Quantize with inline calibration batches, over a real
// socket. Two fixtures:
//  - CalibrateServiceTest: the in-process Server with the real core Engine,
//    for the protocol (errors the reactor owns), cancellation and, once core
//    calibrates, results. Tests marked "NEEDS CORE" check what RunCalibrate /
//    STATIC_RANGE RunQuantize compute; they fail while core still answers
//    UNIMPLEMENTED.
//  - FakeJobsTest: the service with a fake JobRunner whose jobs pop batches
//    only when the test says so, to check flow control exactly: the server
//    reads a batch from the stream only when the queue has room.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "server/job_runner.h"
#include "server/metrics.h"
#include "server/quantization_service.h"
#include "server/server.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/health.h"

namespace quantd::server {
namespace {

using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;
using quantd::v1::TensorBatch;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMaxModelBytes = 8 * kMiB;
constexpr uint64_t kMaxBatches = 20;

// A float batch for input `name` of `shape`, values from Wave.
TensorBatch FloatBatch(const std::string& name, std::vector<int64_t> shape,
                       int seed = 1) {
  TensorBatch batch;
  quantd::v1::NamedTensor* t = batch.add_tensors();
  t->set_name(name);
  t->set_data_type(1);  // FLOAT
  for (int64_t d : shape) t->add_shape(d);
  const std::vector<float> values =
      quantd::testing::Wave(quantd::testing::Product(shape), seed);
  t->set_data(values.data(), values.size() * sizeof(float));
  return batch;
}

// MatMulModel's input: x[2, 64].
std::string SmallModel() { return quantd::testing::MatMulModel().Bytes(); }
TensorBatch SmallBatch(int seed = 1) { return FloatBatch("x", {2, 64}, seed); }

CalibrateRequest CalibrateConfigRequest(uint64_t model_size,
                                        const std::string& method = "min_max") {
  CalibrateRequest request;
  request.mutable_config()->set_method(method);
  request.mutable_config()->set_model_size_bytes(model_size);
  return request;
}
CalibrateRequest CalibrateChunk(absl::string_view bytes) {
  CalibrateRequest request;
  request.set_model_chunk(bytes.data(), bytes.size());
  return request;
}
CalibrateRequest CalibrateBatch(TensorBatch batch) {
  CalibrateRequest request;
  *request.mutable_batch() = std::move(batch);
  return request;
}
// Config and the model in one chunk.
std::vector<CalibrateRequest> CalibrateModel(const std::string& model) {
  return {CalibrateConfigRequest(model.size()), CalibrateChunk(model)};
}

QuantizeRequest QuantizeConfigRequest(
    uint64_t model_size,
    tensorflow::quantization::QuantizationMethod::ExperimentalMethod method =
        tensorflow::quantization::QuantizationMethod::
            EXPERIMENTAL_METHOD_UNSPECIFIED) {
  QuantizeRequest request;
  request.mutable_config()->set_model_size_bytes(model_size);
  if (method != tensorflow::quantization::QuantizationMethod::
                    EXPERIMENTAL_METHOD_UNSPECIFIED) {
    request.mutable_config()
        ->mutable_options()
        ->mutable_quantization_method()
        ->set_experimental_method(method);
  }
  return request;
}
QuantizeRequest QuantizeChunk(absl::string_view bytes) {
  QuantizeRequest request;
  request.set_model_chunk(bytes.data(), bytes.size());
  return request;
}
QuantizeRequest QuantizeBatch(TensorBatch batch) {
  QuantizeRequest request;
  *request.mutable_calibration_batch() = std::move(batch);
  return request;
}

template <typename Response>
struct CallResult {
  grpc::Status status;
  std::vector<Response> responses;
};

// Sends `requests`, half-closes when asked, and reads to the end.
template <typename Request, typename Response, typename StartFn>
CallResult<Response> RunCall(StartFn start,
                             const std::vector<Request>& requests,
                             bool half_close = true) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  auto stream = start(&context);
  for (const Request& request : requests) {
    if (!stream->Write(request)) break;  // The server has finished.
  }
  if (half_close) stream->WritesDone();
  CallResult<Response> result;
  Response response;
  while (stream->Read(&response)) result.responses.push_back(response);
  result.status = stream->Finish();
  return result;
}

// ---------------------------------------------------------------------------
// The real server and engine.
// ---------------------------------------------------------------------------

class CalibrateServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Server::Options options;
    options.listen.host = "127.0.0.1";
    options.listen.port = 0;
    options.metrics.enabled = false;
    options.core.threads = 2;
    options.limits.max_model_bytes = kMaxModelBytes;
    options.limits.max_calibration_batches = MaxBatches();
    options.limits.calibration_queue_batches = QueueBatches();
    server_ = std::make_unique<Server>(options);
    ASSERT_TRUE(server_->Start().ok());
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 * kMiB);
    args.SetMaxSendMessageSize(16 * kMiB);
    channel_ = grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->selected_port()),
        grpc::InsecureChannelCredentials(), args);
    stub_ = quantd::v1::QuantizationService::NewStub(channel_);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Now() + absl::Seconds(5));
  }
  virtual size_t QueueBatches() const { return 4; }
  virtual uint64_t MaxBatches() const { return kMaxBatches; }

  CallResult<CalibrateResponse> Calibrate(
      const std::vector<CalibrateRequest>& requests, bool half_close = true) {
    return RunCall<CalibrateRequest, CalibrateResponse>(
        [this](grpc::ClientContext* c) { return stub_->Calibrate(c); },
        requests, half_close);
  }
  CallResult<QuantizeResponse> Quantize(
      const std::vector<QuantizeRequest>& requests, bool half_close = true) {
    return RunCall<QuantizeRequest, QuantizeResponse>(
        [this](grpc::ClientContext* c) { return stub_->Quantize(c); }, requests,
        half_close);
  }
  bool IsServing() { return ::quantd::testing::IsServing(channel_); }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
};

void ExpectInvalid(const grpc::Status& status, const std::string& substr) {
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr(substr));
}

TEST_F(CalibrateServiceTest, EmptyStreamIsInvalidArgument) {
  const auto result = Calibrate({});
  ExpectInvalid(result.status, "empty stream: expected a config message");
  EXPECT_TRUE(result.responses.empty());
}

TEST_F(CalibrateServiceTest, BatchBeforeConfigIsInvalidArgument) {
  ExpectInvalid(Calibrate({CalibrateBatch(SmallBatch())}).status,
                "first message must be config");
}

TEST_F(CalibrateServiceTest, ChunkBeforeConfigIsInvalidArgument) {
  ExpectInvalid(Calibrate({CalibrateChunk("abc")}).status,
                "first message must be config");
}

TEST_F(CalibrateServiceTest, MissingModelSizeIsInvalidArgument) {
  ExpectInvalid(Calibrate({CalibrateConfigRequest(0)}).status,
                "model_size_bytes");
}

TEST_F(CalibrateServiceTest, DeclaredSizeOverLimitIsRefusedBeforeChunks) {
  // No chunk and no half-close: the refusal must come from the config alone.
  const auto result =
      Calibrate({CalibrateConfigRequest(kMaxModelBytes + 1)}, false);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat(kMaxModelBytes)));
}

TEST_F(CalibrateServiceTest, MoreBytesThanDeclaredIsInvalidArgument) {
  ExpectInvalid(Calibrate({CalibrateConfigRequest(4), CalibrateChunk("abc"),
                           CalibrateChunk("de")})
                    .status,
                "more model bytes");
}

TEST_F(CalibrateServiceTest, FewerBytesThanDeclaredIsInvalidArgument) {
  ExpectInvalid(
      Calibrate({CalibrateConfigRequest(10), CalibrateChunk("abc")}).status,
      "received 3 of the 10 bytes");
}

TEST_F(CalibrateServiceTest, BatchBeforeTheModelIsCompleteIsInvalidArgument) {
  ExpectInvalid(Calibrate({CalibrateConfigRequest(10), CalibrateChunk("abc"),
                           CalibrateBatch(SmallBatch())})
                    .status,
                "batch before the model is complete: received 3 of");
}

TEST_F(CalibrateServiceTest, SecondConfigIsInvalidArgument) {
  ExpectInvalid(
      Calibrate({CalibrateConfigRequest(3), CalibrateConfigRequest(3)}).status,
      "exactly once");
}

// A valid model and batch, so core is waiting for the next batch when the
// chunk arrives: the reactor's error is the call's.
TEST_F(CalibrateServiceTest, ChunkAfterBatchIsInvalidArgument) {
  std::vector<CalibrateRequest> requests = CalibrateModel(SmallModel());
  requests.push_back(CalibrateBatch(SmallBatch()));
  requests.push_back(CalibrateChunk("late"));
  ExpectInvalid(Calibrate(requests, /*half_close=*/false).status,
                "a model_chunk after a batch");
}

TEST_F(CalibrateServiceTest, ConfigAfterBatchIsInvalidArgument) {
  std::vector<CalibrateRequest> requests = CalibrateModel(SmallModel());
  requests.push_back(CalibrateBatch(SmallBatch()));
  requests.push_back(CalibrateConfigRequest(3));
  ExpectInvalid(Calibrate(requests, /*half_close=*/false).status,
                "exactly once");
}

TEST_F(CalibrateServiceTest, EmptyMessageAfterTheModelIsInvalidArgument) {
  std::vector<CalibrateRequest> requests = CalibrateModel(SmallModel());
  requests.push_back(CalibrateRequest());
  ExpectInvalid(Calibrate(requests, /*half_close=*/false).status,
                "must be a model_chunk");
}

TEST_F(CalibrateServiceTest, TooManyBatchesIsResourceExhausted) {
  std::vector<CalibrateRequest> requests = CalibrateModel(SmallModel());
  for (int i = 0; i < static_cast<int>(kMaxBatches) + 5; ++i) {
    requests.push_back(CalibrateBatch(SmallBatch(i)));
  }
  const auto result = Calibrate(requests);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << result.status.error_message();
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat("more than ", kMaxBatches, " batches")));
}

TEST_F(CalibrateServiceTest, QuantizeBatchBeforeTheModelIsInvalidArgument) {
  ExpectInvalid(Quantize({QuantizeConfigRequest(10), QuantizeChunk("abc"),
                          QuantizeBatch(SmallBatch())})
                    .status,
                "calibration_batch before the model is complete");
}

TEST_F(CalibrateServiceTest, QuantizeChunkAfterBatchIsInvalidArgument) {
  const std::string model = SmallModel();
  // Without a method core does not wait for batches, so the job may finish
  // first; STATIC_RANGE makes it consume them (once core implements it; until
  // then it refuses STATIC_RANGE with UNIMPLEMENTED, which may also win).
  const auto result =
      Quantize({QuantizeConfigRequest(
                    model.size(),
                    tensorflow::quantization::QuantizationMethod::STATIC_RANGE),
                QuantizeChunk(model), QuantizeBatch(SmallBatch()),
                QuantizeChunk("late")},
               /*half_close=*/false);
  EXPECT_NE(result.status.error_code(), grpc::StatusCode::OK);
  if (result.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    EXPECT_THAT(result.status.error_message(),
                HasSubstr("a model_chunk after a calibration_batch"));
  }
}

TEST_F(CalibrateServiceTest, QuantizeWithoutBatchesIsUnchanged) {
  const std::string model = SmallModel();
  const auto result =
      Quantize({QuantizeConfigRequest(model.size()), QuantizeChunk(model)});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_FALSE(result.responses.empty());
  EXPECT_TRUE(result.responses.back().has_summary());
  EXPECT_TRUE(result.responses.back().summary().model_unchanged());
}

TEST_F(CalibrateServiceTest, ServerInfoReportsCalibrationLimits) {
  grpc::ClientContext context;
  quantd::v1::ServerInfo info;
  ASSERT_TRUE(
      stub_->GetServerInfo(&context, quantd::v1::GetServerInfoRequest(), &info)
          .ok());
  EXPECT_EQ(info.limits().max_calibration_batches(), kMaxBatches);
  EXPECT_EQ(info.limits().calibration_queue_batches(), 4u);
}

// Cancels at varying points while batches stream and the job waits for
// them: the job must be released (BatchQueue::Abort), the call must end, and
// the server must stay healthy (and shut down without hanging in TearDown).
TEST_F(CalibrateServiceTest, CancelMidStreamFreesTheJob) {
  const std::string model = SmallModel();
  for (int i = 0; i < 10; ++i) {
    grpc::ClientContext context;
    auto stream = stub_->Calibrate(&context);
    for (const CalibrateRequest& r : CalibrateModel(model)) stream->Write(r);
    for (int b = 0; b < 3; ++b) stream->Write(CalibrateBatch(SmallBatch(b)));
    absl::SleepFor(absl::Milliseconds(5 * i));
    context.TryCancel();
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED)
        << status.error_message();
  }
  EXPECT_TRUE(IsServing());
}

// A client that goes away without cancelling or half-closing: its deadline
// ends the call and frees the job.
TEST_F(CalibrateServiceTest, DeadlineMidStreamFreesTheJob) {
  const std::string model = SmallModel();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(300));
  auto stream = stub_->Calibrate(&context);
  for (const CalibrateRequest& r : CalibrateModel(model)) stream->Write(r);
  stream->Write(CalibrateBatch(SmallBatch()));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(IsServing());
}

// NEEDS CORE (RunCalibrate): min_max ranges of the input and the output.
TEST_F(CalibrateServiceTest, NeedsCore_CalibratesAndSendsTheResultLast) {
  std::vector<CalibrateRequest> requests = CalibrateModel(SmallModel());
  for (int b = 0; b < 5; ++b) requests.push_back(CalibrateBatch(SmallBatch(b)));
  const auto result = Calibrate(requests);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_FALSE(result.responses.empty());
  int results = 0;
  for (const CalibrateResponse& r : result.responses) results += r.has_result();
  EXPECT_EQ(results, 1);
  ASSERT_TRUE(result.responses.back().has_result());
  const quantd::v1::CalibrationResult& ranges =
      result.responses.back().result();
  EXPECT_EQ(ranges.batch_count(), 5);
  std::vector<std::string> names;
  for (const auto& r : ranges.ranges()) {
    names.push_back(r.tensor_name());
    EXPECT_LE(r.min(), r.max()) << r.tensor_name();
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"x", "y"}));
}

// NEEDS CORE: an unnamed tensor is the model's only input.
TEST_F(CalibrateServiceTest, NeedsCore_UnnamedTensorIsTheOnlyInput) {
  std::vector<CalibrateRequest> requests = CalibrateModel(SmallModel());
  requests.push_back(CalibrateBatch(FloatBatch("", {2, 64})));
  const auto result = Calibrate(requests);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.responses.back().result().batch_count(), 1);
}

// NEEDS CORE: STATIC_RANGE with neither ranges nor batches.
TEST_F(CalibrateServiceTest,
       NeedsCore_StaticRangeWithoutRangesOrBatchesIsFailedPrecondition) {
  const std::string model = SmallModel();
  const auto result =
      Quantize({QuantizeConfigRequest(
                    model.size(),
                    tensorflow::quantization::QuantizationMethod::STATIC_RANGE),
                QuantizeChunk(model)});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << result.status.error_message();
}

// NEEDS CORE: STATIC_RANGE in one call, calibrating with inline batches.
TEST_F(CalibrateServiceTest, NeedsCore_StaticRangeWithInlineBatches) {
  const std::string model = SmallModel();
  std::vector<QuantizeRequest> requests = {
      QuantizeConfigRequest(
          model.size(),
          tensorflow::quantization::QuantizationMethod::STATIC_RANGE),
      QuantizeChunk(model)};
  for (int b = 0; b < 4; ++b) requests.push_back(QuantizeBatch(SmallBatch(b)));
  const auto result = Quantize(requests);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_TRUE(result.responses.back().has_summary());
  EXPECT_FALSE(result.responses.back().summary().model_unchanged());
}

class SlowCoreTest : public CalibrateServiceTest {
 protected:
  size_t QueueBatches() const override { return 1; }
  uint64_t MaxBatches() const override { return 100; }
};

// NEEDS CORE: flow control with the real engine. Each batch is a
// [512, 1024] x [1024, 1024] MatMul (0.5 G multiply-adds) plus observers, so
// core takes far longer per batch than loopback takes to carry its 2 MiB.
// The client writes 50 batches as fast as it can; with a queue of one batch
// the server reads the next only after core popped the previous, so the
// client's writes are held back and its last write completes near the end
// of the call. Without flow control all 50 writes would complete within a
// fraction of a second, long before core is done.
TEST_F(SlowCoreTest, NeedsCore_FlowControlHoldsBackAFastClient) {
  constexpr int64_t kRows = 512, kK = 1024, kN = 1024;
  quantd::testing::ModelBuilder b;
  b.Input("x", {kRows, kK})
      .Weight("W", {kK, kN})
      .Node("MatMul", {"x", "W"}, {"y"}, "mm")
      .Output("y", {kRows, kN});
  const std::string model = b.Bytes();
  const TensorBatch batch = FloatBatch("x", {kRows, kK});
  constexpr int kBatches = 50;

  grpc::ClientContext context;
  const absl::Time start = absl::Now();
  auto stream = stub_->Calibrate(&context);
  for (const CalibrateRequest& r : CalibrateModel(model)) {
    ASSERT_TRUE(stream->Write(r));
  }
  absl::Time last_write;
  std::thread reader([&] {
    CalibrateResponse response;
    while (stream->Read(&response)) {
    }
  });
  int written = 0;
  for (; written < kBatches; ++written) {
    if (!stream->Write(CalibrateBatch(batch))) break;
  }
  last_write = absl::Now();
  stream->WritesDone();
  reader.join();
  const grpc::Status status = stream->Finish();
  const absl::Time end = absl::Now();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(written, kBatches);
  const double writing = absl::ToDoubleSeconds(last_write - start);
  const double call = absl::ToDoubleSeconds(end - start);
  std::printf("50 batches: writes done after %.2fs, call %.2fs\n", writing,
              call);
  EXPECT_GT(writing, 0.6 * call)
      << "the client got ahead of core: flow control is not holding it back";
}

// ---------------------------------------------------------------------------
// A fake core whose jobs pop batches only when the test allows it.
// ---------------------------------------------------------------------------

class FakeJobs final : public JobRunner {
 public:
  ~FakeJobs() override { JoinAll(); }

  // Lets the jobs pop `n` more batches (in total, across jobs).
  void Allow(int n) {
    absl::MutexLock lock(&mu_);
    permits_ += n;
  }
  void AllowAll() {
    absl::MutexLock lock(&mu_);
    unlimited_ = true;
  }
  int popped() {
    absl::MutexLock lock(&mu_);
    return popped_;
  }
  // Waits (up to 10 s) until `n` batches were popped in total.
  bool WaitForPopped(int n) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (popped() < n && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    return popped() >= n;
  }
  // How the last job was submitted.
  bool last_had_queue() {
    absl::MutexLock lock(&mu_);
    return last_had_queue_;
  }
  int jobs_finished() {
    absl::MutexLock lock(&mu_);
    return jobs_finished_;
  }

  void SubmitQuantize(quantd::v1::QuantizeConfig config, ModelUpload upload,
                      QuantizeEvents events,
                      std::shared_ptr<const CancellationToken> cancel,
                      Engine::QuantizeDone done,
                      std::shared_ptr<BatchQueue> batches) override {
    Start(
        [this, model = std::move(upload.bytes), events, cancel,
         done = std::move(done), batches]() mutable {
          const int64_t n = Consume(batches.get(), *cancel, events.on_progress);
          if (cancel->IsCancelled()) {
            done(absl::CancelledError("fake job cancelled"));
            return;
          }
          QuantizeResult result;
          result.summary.set_input_bytes(model.size());
          result.summary.set_output_bytes(model.size());
          result.summary.set_model_unchanged(true);
          result.summary.set_unchanged_reason(
              absl::StrCat("fake: ", n, " calibration batches"));
          result.model = std::move(model);
          done(std::move(result));
        },
        batches != nullptr);
  }

  void SubmitCalibrate(quantd::v1::CalibrateConfig config, ModelUpload upload,
                       std::shared_ptr<BatchQueue> batches,
                       CalibrateEvents events,
                       std::shared_ptr<const CancellationToken> cancel,
                       Engine::CalibrateDone done) override {
    Start(
        [this, config, events, cancel, done = std::move(done),
         batches]() mutable {
          const int64_t n = Consume(batches.get(), *cancel, events.on_progress);
          if (cancel->IsCancelled()) {
            done(absl::CancelledError("fake job cancelled"));
            return;
          }
          quantd::v1::CalibrationResult result;
          result.set_method(config.method());
          result.set_batch_count(n);
          quantd::v1::TensorRange* range = result.add_ranges();
          range->set_tensor_name("x");
          range->set_min(-1);
          range->set_max(1);
          done(std::move(result));
        },
        batches != nullptr);
  }

  int threads() const override { return 1; }

  void Join() { JoinAll(); }

 private:
  void Start(std::function<void()> job, bool has_queue) {
    absl::MutexLock lock(&mu_);
    last_had_queue_ = has_queue;
    threads_.emplace_back([this, job = std::move(job)] {
      job();
      absl::MutexLock lock(&mu_);
      ++jobs_finished_;
    });
  }

  // Pops batches as permitted until the queue ends; one progress event per
  // batch.
  int64_t Consume(
      BatchQueue* batches, const CancellationToken& cancel,
      const std::function<void(const quantd::v1::Progress&)>& on_progress) {
    if (batches == nullptr) return 0;
    int64_t n = 0;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        // Polls the token: cancellation is not signalled through mu_.
        while (!unlimited_ && permits_ == 0 && !cancel.IsCancelled()) {
          mu_.AwaitWithTimeout(
              absl::Condition(
                  +[](FakeJobs* f) { return f->unlimited_ || f->permits_ > 0; },
                  this),
              absl::Milliseconds(10));
        }
        if (!unlimited_) {
          if (permits_ == 0) return n;  // Cancelled.
          --permits_;
        }
      }
      if (!batches->Pop().has_value()) return n;
      ++n;
      {
        absl::MutexLock lock(&mu_);
        ++popped_;
      }
      if (on_progress) {
        quantd::v1::Progress progress;
        progress.set_stage(quantd::v1::STAGE_CALIBRATE);
        progress.set_done(n);
        on_progress(progress);
      }
    }
  }

  // Waits for every job submitted so far.
  void JoinAll() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  absl::Mutex mu_;
  int permits_ = 0;
  bool unlimited_ = false;
  int popped_ = 0;
  bool last_had_queue_ = false;
  int jobs_finished_ = 0;
  std::vector<std::thread> threads_;
};

double CounterValue(Metrics& metrics, const std::string& name,
                    const std::string& method) {
  for (const prometheus::MetricFamily& family : metrics.registry().Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      for (const prometheus::ClientMetric::Label& label : metric.label) {
        if (label.name == "method" && label.value == method) {
          return metric.counter.value;
        }
      }
    }
  }
  return 0;
}

class FakeJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Metrics::Options metrics_options;
    metrics_options.bind_address.clear();
    metrics_ = std::move(*Metrics::Create(metrics_options));
    QuantizationServiceImpl::Options options;
    options.max_model_bytes = kMaxModelBytes;
    options.calibration_queue_batches = QueueBatches();
    service_ = std::make_unique<QuantizationServiceImpl>(&jobs_, metrics_.get(),
                                                         options);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.SetMaxReceiveMessageSize(16 * kMiB);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(16 * kMiB);
    channel_ =
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials(), args);
    stub_ = quantd::v1::QuantizationService::NewStub(channel_);
  }
  void TearDown() override {
    jobs_.AllowAll();
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    // A cancelled call's job may still run and use the service and metrics.
    jobs_.Join();
  }
  virtual size_t QueueBatches() const { return 3; }

  // Batches the server has read from streams so far.
  int BatchesRead(const std::string& method = "Calibrate") {
    return static_cast<int>(
        CounterValue(*metrics_, "quantd_calibration_batches_total", method));
  }
  // Waits (up to 10 s) for the read count to reach `n`, then returns it.
  int WaitForBatchesRead(int n, const std::string& method = "Calibrate") {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (BatchesRead(method) < n && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return BatchesRead(method);
  }

  // Declared first: outlives the server, which must be shut down (and its
  // jobs finished) before the fake goes.
  FakeJobs jobs_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<QuantizationServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
};

// 512 KiB batches: 50 of them are far more than any HTTP/2 window, so a
// client whose batches are not read is really held back.
TensorBatch BigBatch(int seed) { return FloatBatch("x", {128, 1024}, seed); }

// The client writes 50 batches as fast as it can while core pops none: the
// server reads exactly as many as the queue holds and then stops reading;
// each pop lets exactly one more in; the client's writes block meanwhile.
TEST_F(FakeJobsTest, ReadsAreGatedByTheQueue) {
  constexpr int kBatches = 50;
  grpc::ClientContext context;
  auto stream = stub_->Calibrate(&context);
  const std::string model = SmallModel();
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (const CalibrateRequest& r : CalibrateModel(model)) stream->Write(r);
    for (int b = 0; b < kBatches; ++b) {
      if (!stream->Write(CalibrateBatch(BigBatch(b)))) return;
      ++written;
    }
    stream->WritesDone();
  });

  EXPECT_EQ(WaitForBatchesRead(3), 3);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(BatchesRead(), 3) << "read past a full queue";
  EXPECT_LT(written.load(), kBatches) << "the client was not held back";

  for (int pops = 1; pops <= 4; ++pops) {
    jobs_.Allow(1);
    ASSERT_TRUE(jobs_.WaitForPopped(pops));
    EXPECT_EQ(WaitForBatchesRead(3 + pops), 3 + pops);
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(BatchesRead(), 3 + pops) << "more than one read per pop";
  }

  jobs_.AllowAll();
  writer.join();
  EXPECT_EQ(written.load(), kBatches);
  std::vector<CalibrateResponse> responses;
  CalibrateResponse response;
  while (stream->Read(&response)) responses.push_back(response);
  const grpc::Status status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(BatchesRead(), kBatches);
  ASSERT_FALSE(responses.empty());
  // One progress event per batch, then the result, last.
  ASSERT_TRUE(responses.back().has_result());
  EXPECT_EQ(responses.back().result().batch_count(), kBatches);
  EXPECT_EQ(responses.size(), kBatches + 1u);
  for (size_t i = 0; i + 1 < responses.size(); ++i) {
    EXPECT_TRUE(responses[i].has_progress());
  }
}

class FakeJobsQueueOfOneTest : public FakeJobsTest {
 protected:
  size_t QueueBatches() const override { return 1; }
};

TEST_F(FakeJobsQueueOfOneTest, OneBatchAtATime) {
  grpc::ClientContext context;
  auto stream = stub_->Calibrate(&context);
  const std::string model = SmallModel();
  std::thread writer([&] {
    for (const CalibrateRequest& r : CalibrateModel(model)) stream->Write(r);
    for (int b = 0; b < 10; ++b) {
      if (!stream->Write(CalibrateBatch(SmallBatch(b)))) return;
    }
    stream->WritesDone();
  });
  EXPECT_EQ(WaitForBatchesRead(1), 1);
  for (int pops = 1; pops <= 9; ++pops) {
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(BatchesRead(), pops) << "read past a full queue";
    jobs_.Allow(1);
    EXPECT_EQ(WaitForBatchesRead(pops + 1), pops + 1);
  }
  jobs_.AllowAll();
  writer.join();
  CalibrateResponse response;
  int64_t batch_count = -1;
  while (stream->Read(&response)) {
    if (response.has_result()) batch_count = response.result().batch_count();
  }
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(batch_count, 10);
}

// Cancelling while the server waits for room and core waits for a permit:
// the call ends at once and the job is released.
TEST_F(FakeJobsTest, CancelWhileWaitingForRoomEndsTheCallAndTheJob) {
  grpc::ClientContext context;
  auto stream = stub_->Calibrate(&context);
  const std::string model = SmallModel();
  std::thread writer([&] {
    for (const CalibrateRequest& r : CalibrateModel(model)) stream->Write(r);
    for (int b = 0; b < 50; ++b) {
      if (!stream->Write(CalibrateBatch(BigBatch(b)))) return;
    }
  });
  EXPECT_EQ(WaitForBatchesRead(3), 3);
  context.TryCancel();
  writer.join();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (jobs_.jobs_finished() < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(jobs_.jobs_finished(), 1);
  EXPECT_EQ(jobs_.popped(), 0);
  EXPECT_EQ(CounterValue(*metrics_, "quantd_requests_total", "Calibrate"), 1);
  EXPECT_TRUE(::quantd::testing::IsServing(channel_));
}

TEST_F(FakeJobsTest, CalibrateWithoutBatchesGetsAClosedQueue) {
  jobs_.AllowAll();
  const auto result = RunCall<CalibrateRequest, CalibrateResponse>(
      [this](grpc::ClientContext* c) { return stub_->Calibrate(c); },
      CalibrateModel(SmallModel()));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_TRUE(jobs_.last_had_queue());
  EXPECT_EQ(result.responses.back().result().batch_count(), 0);
}

TEST_F(FakeJobsTest, QuantizeForwardsCalibrationBatches) {
  jobs_.AllowAll();
  const std::string model = SmallModel();
  std::vector<QuantizeRequest> requests = {
      QuantizeConfigRequest(
          model.size(),
          tensorflow::quantization::QuantizationMethod::STATIC_RANGE),
      QuantizeChunk(model)};
  for (int b = 0; b < 7; ++b) requests.push_back(QuantizeBatch(SmallBatch(b)));
  const auto result = RunCall<QuantizeRequest, QuantizeResponse>(
      [this](grpc::ClientContext* c) { return stub_->Quantize(c); }, requests);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_TRUE(jobs_.last_had_queue());
  EXPECT_EQ(result.responses.back().summary().unchanged_reason(),
            "fake: 7 calibration batches");
  EXPECT_EQ(BatchesRead("Quantize"), 7);
}

TEST_F(FakeJobsTest, QuantizeWithoutBatchesHasNoQueue) {
  jobs_.AllowAll();
  const std::string model = SmallModel();
  const auto result = RunCall<QuantizeRequest, QuantizeResponse>(
      [this](grpc::ClientContext* c) { return stub_->Quantize(c); },
      {QuantizeConfigRequest(
           model.size(),
           tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE),
       QuantizeChunk(model)});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_FALSE(jobs_.last_had_queue());
}

TEST_F(FakeJobsTest, StaticRangeWithoutRangesOrBatchesGetsAClosedQueue) {
  jobs_.AllowAll();
  const std::string model = SmallModel();
  const auto result = RunCall<QuantizeRequest, QuantizeResponse>(
      [this](grpc::ClientContext* c) { return stub_->Quantize(c); },
      {QuantizeConfigRequest(
           model.size(),
           tensorflow::quantization::QuantizationMethod::STATIC_RANGE),
       QuantizeChunk(model)});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_TRUE(jobs_.last_had_queue());
  EXPECT_EQ(result.responses.back().summary().unchanged_reason(),
            "fake: 0 calibration batches");
}

TEST_F(FakeJobsTest, StaticRangeWithRangesAndNoBatchesHasNoQueue) {
  jobs_.AllowAll();
  const std::string model = SmallModel();
  QuantizeRequest config = QuantizeConfigRequest(
      model.size(), tensorflow::quantization::QuantizationMethod::STATIC_RANGE);
  config.mutable_config()->mutable_calibration()->add_ranges()->set_tensor_name(
      "x");
  const auto result = RunCall<QuantizeRequest, QuantizeResponse>(
      [this](grpc::ClientContext* c) { return stub_->Quantize(c); },
      {config, QuantizeChunk(model)});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_FALSE(jobs_.last_had_queue());
}

}  // namespace
}  // namespace quantd::server
