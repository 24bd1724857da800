// QuantizationService over a real socket: an in-process Server on free ports
// with the real core Engine, driven through the generated stub so every
// protocol mistake can be sent on purpose.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "server/server.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/health.h"
#include "tests/support/test_paths.h"

namespace quantd::server {
namespace {

using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMaxModelBytes = 8 * kMiB;

struct CallResult {
  grpc::Status status;
  std::vector<QuantizeResponse> responses;

  std::string Model() const {
    std::string model;
    for (const QuantizeResponse& r : responses) {
      if (r.has_model_chunk()) model += r.model_chunk();
    }
    return model;
  }
};

QuantizeRequest ConfigRequest(uint64_t model_size_bytes) {
  QuantizeRequest request;
  request.mutable_config()->set_model_size_bytes(model_size_bytes);
  return request;
}

QuantizeRequest ChunkRequest(absl::string_view bytes) {
  QuantizeRequest request;
  request.set_model_chunk(bytes.data(), bytes.size());
  return request;
}

// The config (with the right size) and then `model` in `chunk_bytes` pieces.
std::vector<QuantizeRequest> ModelRequests(
    const std::string& model, uint64_t chunk_bytes,
    const tensorflow::quantization::QuantizationOptions& options = {}) {
  std::vector<QuantizeRequest> requests = {ConfigRequest(model.size())};
  *requests[0].mutable_config()->mutable_options() = options;
  for (size_t offset = 0; offset < model.size(); offset += chunk_bytes) {
    requests.push_back(
        ChunkRequest(absl::string_view(model).substr(offset, chunk_bytes)));
  }
  return requests;
}

// A tiny HTTP/1.0 GET, so the test needs no HTTP client library.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
      0) {
    const std::string request =
        absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return response;
}

class QuantizationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Server::Options options;
    options.listen.host = "127.0.0.1";
    options.listen.port = 0;
    options.metrics.host = "127.0.0.1";
    options.metrics.port = 0;
    // civetweb takes about a second to stop; only pay for it when used.
    options.metrics.enabled = NeedsMetrics();
    options.core.threads = 2;
    options.limits.max_model_bytes = kMaxModelBytes;
    server_ = std::make_unique<Server>(options);
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_GT(server_->selected_port(), 0);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 * kMiB);
    args.SetMaxSendMessageSize(16 * kMiB);
    channel_ = grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->selected_port()),
        grpc::InsecureChannelCredentials(), args);
    stub_ = quantd::v1::QuantizationService::NewStub(channel_);
  }

  virtual bool NeedsMetrics() const { return false; }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Now() + absl::Seconds(5));
  }

  // Sends `requests`, half-closes when asked, and reads to the end.
  CallResult Call(const std::vector<QuantizeRequest>& requests,
                  bool half_close = true) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    auto stream = stub_->Quantize(&context);
    for (const QuantizeRequest& request : requests) {
      if (!stream->Write(request)) break;  // The server has finished.
    }
    if (half_close) stream->WritesDone();
    CallResult result;
    QuantizeResponse response;
    while (stream->Read(&response)) result.responses.push_back(response);
    result.status = stream->Finish();
    return result;
  }

  bool IsServing() { return ::quantd::testing::IsServing(channel_); }

  std::string Metrics() { return HttpGet(server_->metrics_port(), "/metrics"); }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
};

// Checks the response stream's shape: events, then model chunks of at most
// 1 MiB, then exactly one summary, last.
void ExpectWellFormed(const CallResult& result) {
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_FALSE(result.responses.empty());
  EXPECT_TRUE(result.responses.back().has_summary());
  int summaries = 0;
  bool seen_chunk = false;
  for (const QuantizeResponse& r : result.responses) {
    if (r.has_summary()) ++summaries;
    if (r.has_model_chunk()) {
      seen_chunk = true;
      EXPECT_LE(r.model_chunk().size(), kMiB);
      EXPECT_FALSE(r.model_chunk().empty());
    } else if (!r.has_summary()) {
      EXPECT_FALSE(seen_chunk)
          << "an event after the model: " << r.ShortDebugString();
    }
  }
  EXPECT_EQ(summaries, 1);
  const quantd::v1::QuantizeSummary& summary =
      result.responses.back().summary();
  EXPECT_EQ(summary.output_bytes(), result.Model().size());
  std::vector<quantd::v1::Stage> stages;
  for (const auto& d : summary.stage_durations()) stages.push_back(d.stage());
  ASSERT_GE(stages.size(), 2u);
  EXPECT_EQ(stages.front(), quantd::v1::STAGE_RECEIVE);
  EXPECT_EQ(stages.back(), quantd::v1::STAGE_SEND);
}

// A 2 MiB weight: bigger than one chunk either way.
std::string LargeModel() {
  return quantd::testing::MatMulModel(/*k=*/512, /*n=*/1024).Bytes();
}

class ChunkSizeTest : public QuantizationServiceTest,
                      public ::testing::WithParamInterface<uint64_t> {};

TEST_P(ChunkSizeTest, PassThroughReturnsTheModelUnchanged) {
  const std::string model = LargeModel();
  ASSERT_GT(model.size(), 2 * kMiB);
  const CallResult result = Call(ModelRequests(model, GetParam()));
  ExpectWellFormed(result);
  EXPECT_EQ(result.Model(), model);
  const auto& summary = result.responses.back().summary();
  EXPECT_TRUE(summary.model_unchanged());
  EXPECT_EQ(summary.input_bytes(), model.size());
  // 2 MiB and a bit out: three chunks of at most 1 MiB.
  EXPECT_EQ(std::count_if(
                result.responses.begin(), result.responses.end(),
                [](const QuantizeResponse& r) { return r.has_model_chunk(); }),
            3);
}

INSTANTIATE_TEST_SUITE_P(Chunks, ChunkSizeTest,
                         ::testing::Values(64 << 10,   // Smaller than 1 MiB.
                                           kMiB,       // The SDK's size.
                                           3 * kMiB,   // Bigger.
                                           4 << 10));  // Many messages.

TEST_F(QuantizationServiceTest, DigitsExampleRoundTrips) {
  const std::string path =
      quantd::testing::SourcePath("examples/digits/model.onnx");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not built";
  const std::string model = quantd::testing::ReadFileOrDie(path);
  const CallResult result = Call(ModelRequests(model, kMiB));
  ExpectWellFormed(result);
  EXPECT_EQ(result.Model(), model);
}

TEST_F(QuantizationServiceTest, DynamicRangeStreamsReportsBeforeTheModel) {
  tensorflow::quantization::QuantizationOptions options;
  options.mutable_quantization_method()->set_experimental_method(
      tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE);
  const CallResult result =
      Call(ModelRequests(LargeModel(), 256 << 10, options));
  ExpectWellFormed(result);
  int reports = 0;
  for (const QuantizeResponse& r : result.responses) {
    if (r.has_tensor_report()) {
      ++reports;
      EXPECT_EQ(r.tensor_report().tensor_name(), "W");
    }
  }
  EXPECT_EQ(reports, 1);
  const auto& summary = result.responses.back().summary();
  EXPECT_EQ(summary.quantized_tensors(), 1);
  EXPECT_LT(summary.output_bytes(), summary.input_bytes());
}

TEST_F(QuantizationServiceTest, EmptyStreamIsInvalidArgument) {
  const CallResult result = Call({});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(result.status.error_message(),
            "empty stream: expected a config message");
  EXPECT_TRUE(result.responses.empty());
}

TEST_F(QuantizationServiceTest, ChunkBeforeConfigIsInvalidArgument) {
  const CallResult result = Call({ChunkRequest("abc")});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(result.status.error_message(), "first message must be config");
}

TEST_F(QuantizationServiceTest, MissingModelSizeIsInvalidArgument) {
  const CallResult result = Call({ConfigRequest(0), ChunkRequest("abc")});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("model_size_bytes"));
}

TEST_F(QuantizationServiceTest, DeclaredSizeOverLimitIsRefusedBeforeChunks) {
  // No chunk and no half-close: the refusal must come from the config alone.
  const CallResult result =
      Call({ConfigRequest(kMaxModelBytes + 1)}, /*half_close=*/false);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat(kMaxModelBytes)));
}

TEST_F(QuantizationServiceTest, MoreBytesThanDeclaredIsInvalidArgument) {
  const CallResult result =
      Call({ConfigRequest(4), ChunkRequest("abc"), ChunkRequest("de")});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("more model bytes"));
}

TEST_F(QuantizationServiceTest, FewerBytesThanDeclaredIsInvalidArgument) {
  const CallResult result = Call({ConfigRequest(10), ChunkRequest("abc")});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr("received 3 of the 10 bytes"));
}

TEST_F(QuantizationServiceTest, SecondConfigIsInvalidArgument) {
  const CallResult result = Call({ConfigRequest(3), ConfigRequest(3)});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("exactly once"));
}

TEST_F(QuantizationServiceTest, GarbageBytesAreInvalidArgument) {
  const std::string garbage(1000, '\xff');
  const CallResult result = Call(ModelRequests(garbage, 300));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Calibrate is served (tests/server/calibrate_service_test.cc has the rest).
TEST_F(QuantizationServiceTest, CalibrateEmptyStreamIsInvalidArgument) {
  grpc::ClientContext context;
  auto stream = stub_->Calibrate(&context);
  stream->WritesDone();
  quantd::v1::CalibrateResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "empty stream: expected a config message");
}

TEST_F(QuantizationServiceTest, ServerInfoReportsLimitsAndThreads) {
  grpc::ClientContext context;
  quantd::v1::ServerInfo info;
  ASSERT_TRUE(
      stub_->GetServerInfo(&context, quantd::v1::GetServerInfoRequest(), &info)
          .ok());
  EXPECT_EQ(info.limits().max_model_bytes(), kMaxModelBytes);
  EXPECT_EQ(info.limits().max_message_bytes(), 16 * kMiB);
  EXPECT_EQ(info.limits().model_chunk_bytes(), kMiB);
  EXPECT_EQ(info.core_threads(), 2);
  EXPECT_FALSE(info.capabilities().empty());
}

TEST_F(QuantizationServiceTest, StillServingAfterBadCalls) {
  Call({});
  Call({ChunkRequest("x")});
  Call({ConfigRequest(kMaxModelBytes + 1)}, /*half_close=*/false);
  Call(ModelRequests(std::string(100, 'x'), 10));
  EXPECT_TRUE(IsServing());
  // And still quantizes.
  ExpectWellFormed(Call(ModelRequests(LargeModel(), kMiB)));
}

class MetricsTest : public QuantizationServiceTest {
 protected:
  bool NeedsMetrics() const override { return true; }
};

TEST_F(MetricsTest, CountCallsByCode) {
  Call({});
  Call({ConfigRequest(kMaxModelBytes + 1)}, /*half_close=*/false);
  ExpectWellFormed(Call(ModelRequests(LargeModel(), kMiB)));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(metrics, HasSubstr("quantd_requests_total{code=\"INVALID_"
                                 "ARGUMENT\",method=\"Quantize\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("quantd_requests_total{code=\"RESOURCE_"
                                 "EXHAUSTED\",method=\"Quantize\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("quantd_requests_total{code=\"OK\","
                                 "method=\"Quantize\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("quantd_request_duration_seconds_count{method="
                                 "\"Quantize\"} 3"));
  EXPECT_THAT(metrics, HasSubstr("quantd_inflight_jobs 0"));
  EXPECT_THAT(metrics, HasSubstr("quantd_model_bytes_total{direction=\"in\"}"));
}

TEST_F(MetricsTest, ClientCancelFinishesAndCountsTheCall) {
  grpc::ClientContext context;
  auto stream = stub_->Quantize(&context);
  ASSERT_TRUE(stream->Write(ConfigRequest(kMiB)));
  ASSERT_TRUE(stream->Write(ChunkRequest("abc")));
  context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server side finishes too, and counts it.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (Metrics().find("code=\"CANCELLED\"") == std::string::npos &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(Metrics(),
              HasSubstr("code=\"CANCELLED\",method=\"Quantize\"} 1"));
  EXPECT_TRUE(IsServing());
}

// Cancels at varying points while the job runs, so some jobs finish after
// the call is gone: the reactor must outlive OnDone until its job is done.
TEST_F(QuantizationServiceTest, CancelWhileTheJobRunsIsSafe) {
  tensorflow::quantization::QuantizationOptions options;
  options.mutable_quantization_method()->set_experimental_method(
      tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE);
  const std::vector<QuantizeRequest> requests =
      ModelRequests(LargeModel(), kMiB, options);
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext context;
    auto stream = stub_->Quantize(&context);
    for (const QuantizeRequest& request : requests) stream->Write(request);
    stream->WritesDone();
    absl::SleepFor(absl::Milliseconds(i));
    context.TryCancel();
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok() ||
                status.error_code() == grpc::StatusCode::CANCELLED)
        << status.error_message();
  }
  EXPECT_TRUE(IsServing());
  ExpectWellFormed(Call(requests));
}

TEST_F(QuantizationServiceTest, ShutdownEndsACallThatIsStillReceiving) {
  grpc::ClientContext context;
  auto stream = stub_->Quantize(&context);
  ASSERT_TRUE(stream->Write(ConfigRequest(kMiB)));
  ASSERT_TRUE(stream->Write(ChunkRequest("abc")));
  // The call never completes on its own: shutdown has to cancel it.
  std::thread shutdown([this] { server_->Shutdown(absl::Now()); });
  const grpc::Status status = stream->Finish();
  shutdown.join();
  EXPECT_FALSE(status.ok());
}

}  // namespace
}  // namespace quantd::server
