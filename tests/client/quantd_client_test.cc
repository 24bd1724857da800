// The SDK's resilience against in-process fake servers: which failures are
// retried (UNAVAILABLE only, never after results, batch sources only when
// rewindable), the backoff, the deadline across attempts, the multi-address
// target and round_robin over several servers.
#include "client/quantd_client.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "quantd/v1/quantization_service.grpc.pb.h"

namespace quantd::client {
namespace {

using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

// What the fake does with a call once it has read the whole request stream.
enum class Failure {
  kUnavailable,             // Before any response.
  kResultsThenUnavailable,  // A tensor report, then UNAVAILABLE.
  kInvalidArgument,
  kCancelled,  // As a server that shuts down cancels.
};

// A QuantizationService whose first `fail_first` calls fail as `failure`
// says; later calls succeed (Quantize echoes the model, Calibrate counts the
// batches).
class FakeService final : public quantd::v1::QuantizationService::Service {
 public:
  std::atomic<int> fail_first{0};
  Failure failure = Failure::kUnavailable;
  std::atomic<int> calls{0};
  // Batches each Calibrate/Quantize call received, in call order.
  std::vector<int> batches_per_call;

  grpc::Status GetServerInfo(grpc::ServerContext*,
                             const quantd::v1::GetServerInfoRequest*,
                             quantd::v1::ServerInfo* info) override {
    if (grpc::Status status = Next(); !status.ok()) return status;
    info->set_version("fake");
    return grpc::Status::OK;
  }

  grpc::Status Quantize(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<QuantizeResponse, QuantizeRequest>* stream)
      override {
    QuantizeRequest request;
    std::string model;
    std::string external;
    int batches = 0;
    while (stream->Read(&request)) {
      model += request.model_chunk();
      external += request.external_data_chunk();
      if (request.has_calibration_batch()) ++batches;
    }
    Record(batches);
    QuantizeResponse response;
    if (calls < fail_first && failure == Failure::kResultsThenUnavailable) {
      response.mutable_tensor_report()->set_tensor_name("w");
      stream->Write(response);
    }
    if (grpc::Status status = Next(); !status.ok()) return status;
    response.mutable_progress()->set_done(1);
    stream->Write(response);
    response.mutable_tensor_report()->set_tensor_name("w");
    stream->Write(response);
    response.set_model_chunk(model);
    stream->Write(response);
    // The external data stream comes back in two chunks.
    const size_t half = external.size() / 2;
    for (const std::string& piece :
         {external.substr(0, half), external.substr(half)}) {
      if (piece.empty()) continue;
      response.set_external_data_chunk(piece);
      stream->Write(response);
    }
    response.mutable_summary()->set_output_bytes(model.size() +
                                                 external.size());
    stream->Write(response);
    return grpc::Status::OK;
  }

  grpc::Status Calibrate(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<CalibrateResponse, CalibrateRequest>* stream)
      override {
    CalibrateRequest request;
    int batches = 0;
    while (stream->Read(&request)) {
      if (request.has_batch()) ++batches;
    }
    Record(batches);
    if (grpc::Status status = Next(); !status.ok()) return status;
    CalibrateResponse response;
    response.mutable_result()->set_batch_count(batches);
    stream->Write(response);
    return grpc::Status::OK;
  }

 private:
  void Record(int batches) {
    absl::MutexLock lock(&mu_);
    batches_per_call.push_back(batches);
  }
  // Counts the call; its failure, if it is one of the first `fail_first`.
  grpc::Status Next() {
    const int call = ++calls;
    if (call > fail_first) return grpc::Status::OK;
    switch (failure) {
      case Failure::kInvalidArgument:
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad model");
      case Failure::kCancelled:
        return grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled");
      case Failure::kUnavailable:
      case Failure::kResultsThenUnavailable:
        break;
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "replica going away");
  }
  absl::Mutex mu_;
};

// A FakeService on a free loopback port.
class FakeServer {
 public:
  FakeServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() { server_->Shutdown(); }
  FakeService& service() { return service_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  FakeService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

Client::Options FastRetries(const std::string& target) {
  Client::Options options;
  options.target = target;
  options.retry.initial_backoff = absl::Milliseconds(1);
  options.retry.max_backoff = absl::Milliseconds(4);
  options.deadline = absl::Seconds(60);
  return options;
}

quantd::v1::TensorBatch Batch() {
  quantd::v1::TensorBatch batch;
  batch.add_tensors()->set_name("x");
  return batch;
}

// `count` batches; `*pulled` counts the ones handed out.
BatchSource Batches(int count, int* next, int* pulled) {
  return [=]() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
    if (*next == count) return std::nullopt;
    ++*next;
    ++*pulled;
    return Batch();
  };
}

TEST(ChannelTargetTest, IpListsBecomeMultiAddressTargets) {
  EXPECT_EQ(*ChannelTarget("10.0.0.1:1,10.0.0.2:2", false, 0),
            "ipv4:10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(*ChannelTarget(" 10.0.0.1:1 , 10.0.0.2:2 ", false, 0),
            "ipv4:10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(*ChannelTarget("[::1]:1,[fe80::2]:2", false, 0),
            "ipv6:[::1]:1,[fe80::2]:2");
  EXPECT_EQ(*ChannelTarget("ipv4:10.0.0.1:1,10.0.0.2:2", false, 0),
            "ipv4:10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(*ChannelTarget("ipv4:10.0.0.1:1", false, 0), "ipv4:10.0.0.1:1");
}

TEST(ChannelTargetTest, OtherTargetsAreLeftToTheirResolver) {
  for (const char* target :
       {"localhost:50051", "10.0.0.1:50051", "dns:///quantd.svc:50051",
        "dns://8.8.8.8/quantd:1", "unix:/tmp/quantd.sock"}) {
    EXPECT_EQ(*ChannelTarget(target, true, 7), target);
  }
}

TEST(ChannelTargetTest, RefusesWhatNoSchemeCanHold) {
  for (const char* target :
       {"localhost:1,localhost:2", "10.0.0.1:1,,10.0.0.2:2",
        "10.0.0.1,10.0.0.2:2", "10.0.0.1:0,10.0.0.2:2",
        "10.0.0.1:65536,10.0.0.2:2", "10.0.0.1:1,[::1]:2", "ipv6:10.0.0.1:1",
        "::1:1,::1:2"}) {
    absl::StatusOr<std::string> result = ChannelTarget(target, false, 0);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << target;
    EXPECT_THAT(result.status().message(), HasSubstr(target));
  }
}

TEST(ChannelTargetTest, ShuffleSpreadsTheFirstAddressOverSeeds) {
  const std::vector<std::string> addresses = {"10.0.0.1:1", "10.0.0.2:2",
                                              "10.0.0.3:3"};
  std::set<std::string> firsts;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    absl::StatusOr<std::string> target =
        ChannelTarget("10.0.0.1:1,10.0.0.2:2,10.0.0.3:3", true, seed);
    ASSERT_TRUE(target.ok()) << target.status();
    ASSERT_EQ(target->rfind("ipv4:", 0), 0u) << *target;
    std::vector<std::string> entries = absl::StrSplit(target->substr(5), ',');
    EXPECT_THAT(entries, UnorderedElementsAreArray(addresses)) << *target;
    firsts.insert(entries.front());
  }
  EXPECT_EQ(firsts.size(), 3u);
}

TEST(RetryBackoffTest, GrowsToTheCapWithBoundedJitter) {
  Client::Options::Retry retry;  // 200 ms, x2, 5 s cap, +-20%.
  std::vector<int64_t> ms;
  for (int n = 1; n <= 7; ++n) {
    ms.push_back(
        absl::ToInt64Milliseconds(Client::RetryBackoff(retry, n, 0.5)));
  }
  EXPECT_THAT(ms, ElementsAre(200, 400, 800, 1600, 3200, 5000, 5000));
  EXPECT_EQ(Client::RetryBackoff(retry, 1, 0.0), absl::Milliseconds(160));
  EXPECT_EQ(Client::RetryBackoff(retry, 7, 0.0), absl::Seconds(4));
  EXPECT_LE(Client::RetryBackoff(retry, 2, 0.999999), absl::Milliseconds(480));
  EXPECT_GT(Client::RetryBackoff(retry, 2, 0.999999), absl::Milliseconds(479));
}

TEST(ClientRetryTest, UnavailableIsRetriedAndReported) {
  FakeServer server;
  server.service().fail_first = 2;
  Client::Options options = FastRetries(server.address());
  std::vector<RetryEvent> events;
  options.on_retry = [&](const RetryEvent& event) { events.push_back(event); };
  absl::StatusOr<quantd::v1::ServerInfo> info = Client(options).GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version(), "fake");
  EXPECT_EQ(server.service().calls, 3);
  ASSERT_EQ(events.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_STREQ(events[i].method, "GetServerInfo");
    EXPECT_EQ(events[i].failed_attempt, i + 1);
    EXPECT_EQ(events[i].max_attempts, 4);
    EXPECT_EQ(events[i].status.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(events[i].peer, HasSubstr(server.address()));
  }
}

TEST(ClientRetryTest, GivesUpAfterMaxRetries) {
  FakeServer server;
  server.service().fail_first = 100;
  Client::Options options = FastRetries(server.address());
  options.retry.max_retries = 1;
  absl::StatusOr<quantd::v1::ServerInfo> info = Client(options).GetServerInfo();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(info.status().message(),
              HasSubstr("replica going away (gave up after 2 attempts)"));
  EXPECT_EQ(server.service().calls, 2);

  options.retry.max_retries = 0;
  server.service().calls = 0;
  info = Client(options).GetServerInfo();
  EXPECT_EQ(info.status().message(), "replica going away");
  EXPECT_EQ(server.service().calls, 1);
}

// What a replica's gRPC server answers a call it cancels as it shuts down.
TEST(ClientRetryTest, CancelledByTheServerIsRetried) {
  FakeServer server;
  server.service().fail_first = 1;
  server.service().failure = Failure::kCancelled;
  Client client(FastRetries(server.address()));
  absl::StatusOr<QuantizeOutcome> outcome =
      client.Quantize(quantd::v1::QuantizeConfig(), "model");
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(server.service().calls, 2);
  EXPECT_TRUE(Client::IsRetriedCode(absl::StatusCode::kCancelled));
  EXPECT_FALSE(Client::IsRetriedCode(absl::StatusCode::kDeadlineExceeded));
}

TEST(ClientRetryTest, OtherCodesAreNotRetried) {
  FakeServer server;
  server.service().fail_first = 1;
  server.service().failure = Failure::kInvalidArgument;
  Client client(FastRetries(server.address()));
  absl::StatusOr<QuantizeOutcome> outcome =
      client.Quantize(quantd::v1::QuantizeConfig(), "model");
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outcome.status().message(), "bad model");
  EXPECT_EQ(server.service().calls, 1);
}

TEST(ClientRetryTest, QuantizeIsRetriedBeforeResults) {
  FakeServer server;
  server.service().fail_first = 1;
  Client::Options options = FastRetries(server.address());
  options.chunk_bytes = 3;  // Several chunks, all sent again.
  absl::StatusOr<QuantizeOutcome> outcome =
      Client(options).Quantize(quantd::v1::QuantizeConfig(), "model bytes");
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->model, "model bytes");
  EXPECT_EQ(outcome->reports.size(), 1u);
  EXPECT_EQ(server.service().calls, 2);
}

TEST(ClientRetryTest, QuantizeIsNotRetriedOnceResultsArrived) {
  FakeServer server;
  server.service().fail_first = 1;
  server.service().failure = Failure::kResultsThenUnavailable;
  int reports_seen = 0;
  QuantizeCallbacks callbacks;
  callbacks.on_tensor_report = [&](const quantd::v1::TensorReport&) {
    ++reports_seen;
  };
  absl::StatusOr<QuantizeOutcome> outcome =
      Client(FastRetries(server.address()))
          .Quantize(quantd::v1::QuantizeConfig(), "model", callbacks);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(outcome.status().message(),
              HasSubstr("not retried: the server had started sending results"));
  EXPECT_EQ(reports_seen, 1);
  EXPECT_EQ(server.service().calls, 1);
}

// A model sent with an external data stream of `size` bytes ('a' + i % 26).
ExternalDataSource Stream(uint64_t size) {
  return {size, [](uint64_t offset, size_t n, char* out) {
            for (size_t i = 0; i < n; ++i) out[i] = 'a' + (offset + i) % 26;
            return absl::OkStatus();
          }};
}

TEST(ClientTest, ReturnedExternalDataIsHeldOrHandedToTheSink) {
  FakeServer server;
  Client::Options options = FastRetries(server.address());
  options.chunk_bytes = 7;
  std::string want(100, '\0');
  ASSERT_TRUE(Stream(100).read(0, 100, want.data()).ok());

  absl::StatusOr<QuantizeOutcome> held = Client(options).Quantize(
      quantd::v1::QuantizeConfig(), ModelInput("model", Stream(100)));
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->model, "model");
  EXPECT_EQ(held->external_data, want);
  EXPECT_EQ(held->external_data_bytes, 100u);

  std::vector<std::string> chunks;
  QuantizeCallbacks callbacks;
  callbacks.on_external_data = [&](absl::string_view chunk) {
    chunks.emplace_back(chunk);
    return absl::OkStatus();
  };
  absl::StatusOr<QuantizeOutcome> sunk =
      Client(options).Quantize(quantd::v1::QuantizeConfig(),
                               ModelInput("model", Stream(100)), callbacks);
  ASSERT_TRUE(sunk.ok()) << sunk.status();
  EXPECT_EQ(sunk->model, "model");
  EXPECT_EQ(sunk->external_data, "");  // Not held as well.
  EXPECT_EQ(sunk->external_data_bytes, 100u);
  EXPECT_EQ(chunks.size(), 2u);
  EXPECT_EQ(absl::StrJoin(chunks, ""), want);
}

TEST(ClientTest, AnExternalDataSinkErrorEndsTheCallAsIs) {
  FakeServer server;
  QuantizeCallbacks callbacks;
  int chunks = 0;
  callbacks.on_external_data = [&](absl::string_view) {
    ++chunks;
    return absl::DataLossError("disk full");
  };
  absl::StatusOr<QuantizeOutcome> outcome =
      Client(FastRetries(server.address()))
          .Quantize(quantd::v1::QuantizeConfig(),
                    ModelInput("model", Stream(64)), callbacks);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(outcome.status().message(), "disk full");
  EXPECT_EQ(chunks, 1);  // Not called again after the error.
  EXPECT_EQ(server.service().calls, 1);
}

TEST(ClientRetryTest, ConsumedBatchSourceIsNotRetriedWithoutRewind) {
  FakeServer server;
  server.service().fail_first = 1;
  int next = 0, pulled = 0;
  absl::StatusOr<quantd::v1::CalibrationResult> result =
      Client(FastRetries(server.address()))
          .Calibrate(quantd::v1::CalibrateConfig(), "model",
                     Batches(3, &next, &pulled));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(),
              HasSubstr("not retried: calibration batches were sent"));
  EXPECT_EQ(server.service().calls, 1);
  EXPECT_EQ(pulled, 3);
}

TEST(ClientRetryTest, RewoundBatchSourceIsSentAgainFromTheStart) {
  FakeServer server;
  server.service().fail_first = 2;
  int next = 0, pulled = 0, rewinds = 0;
  BatchRewind rewind = [&]() {
    ++rewinds;
    next = 0;
    return absl::OkStatus();
  };
  absl::StatusOr<quantd::v1::CalibrationResult> result =
      Client(FastRetries(server.address()))
          .Calibrate(quantd::v1::CalibrateConfig(), "model",
                     Batches(3, &next, &pulled), nullptr, rewind);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->batch_count(), 3);
  EXPECT_EQ(rewinds, 2);
  EXPECT_EQ(pulled, 9);
  EXPECT_THAT(server.service().batches_per_call, ElementsAre(3, 3, 3));

  // The same through Quantize's calibration batches.
  server.service().calls = 0;
  server.service().fail_first = 1;
  next = pulled = rewinds = 0;
  absl::StatusOr<QuantizeOutcome> outcome =
      Client(FastRetries(server.address()))
          .Quantize(quantd::v1::QuantizeConfig(), "model", {},
                    Batches(2, &next, &pulled), rewind);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(rewinds, 1);
  EXPECT_EQ(pulled, 4);
}

TEST(ClientRetryTest, FailedRewindEndsTheCall) {
  FakeServer server;
  server.service().fail_first = 1;
  int next = 0, pulled = 0;
  absl::StatusOr<quantd::v1::CalibrationResult> result =
      Client(FastRetries(server.address()))
          .Calibrate(quantd::v1::CalibrateConfig(), "model",
                     Batches(1, &next, &pulled), nullptr,
                     [] { return absl::DataLossError("file gone"); });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(),
              HasSubstr("rewinding the batch source failed: DATA_LOSS"));
  EXPECT_EQ(server.service().calls, 1);
}

TEST(ClientRetryTest, UnpulledBatchSourceIsRetriedWithoutRewind) {
  FakeServer server;
  server.service().fail_first = 1;
  int next = 0, pulled = 0;
  absl::StatusOr<quantd::v1::CalibrationResult> result =
      Client(FastRetries(server.address()))
          .Calibrate(quantd::v1::CalibrateConfig(), "model",
                     Batches(0, &next, &pulled));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(server.service().calls, 2);
}

TEST(ClientRetryTest, SourceErrorsAreReturnedAsIs) {
  FakeServer server;
  BatchSource failing =
      []() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
    return absl::UnavailableError("disk unavailable");
  };
  absl::StatusOr<quantd::v1::CalibrationResult> result =
      Client(FastRetries(server.address()))
          .Calibrate(quantd::v1::CalibrateConfig(), "model", failing);
  EXPECT_EQ(result.status(), absl::UnavailableError("disk unavailable"));
}

TEST(ClientRetryTest, NoRetryWhoseBackoffEndsPastTheDeadline) {
  FakeServer server;
  server.service().fail_first = 100;
  Client::Options options = FastRetries(server.address());
  options.retry.initial_backoff = absl::Seconds(30);
  options.retry.max_backoff = absl::Seconds(30);
  options.deadline = absl::Seconds(10);
  const absl::Time start = absl::Now();
  absl::StatusOr<quantd::v1::ServerInfo> info = Client(options).GetServerInfo();
  std::printf("measured: refused retry returned after %s\n",
              absl::FormatDuration(absl::Now() - start).c_str());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(info.status().message(), HasSubstr("deadline"));
  EXPECT_EQ(server.service().calls, 1);
}

TEST(ClientRetryTest, DownServerIsRetriedThenUnavailable) {
  int port;
  {
    FakeServer gone;  // A port that was just free: nobody listens now.
    port = std::stoi(gone.address().substr(gone.address().rfind(':') + 1));
  }
  Client::Options options = FastRetries("127.0.0.1:" + std::to_string(port));
  int retries = 0;
  options.on_retry = [&](const RetryEvent&) { ++retries; };
  absl::StatusOr<ServingStatus> health = Client(options).Health();
  EXPECT_EQ(health.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(retries, 3);
}

TEST(ClientTest, InvalidTargetFailsEveryCall) {
  Client client(FastRetries("localhost:1,localhost:2"));
  EXPECT_EQ(client.GetServerInfo().status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Health().status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientTest, RoundRobinReachesEveryAddress) {
  FakeServer a, b, c;
  Client::Options options =
      FastRetries(a.address() + "," + b.address() + "," + c.address());
  Client client(options);
  EXPECT_THAT(client.channel_target(), HasSubstr("ipv4:"));
  // round_robin only picks connected addresses: the first calls may all go
  // to the first one that connected, and on a loaded machine 2000 calls
  // (half a second) can pass before the last subchannel connects. So the
  // calls pause now and then to let the connections come up; a server never
  // reached in 30 s is a failure, not a slow machine.
  int calls = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while ((a.service().calls == 0 || b.service().calls == 0 ||
          c.service().calls == 0) &&
         absl::Now() < give_up) {
    ASSERT_TRUE(client.GetServerInfo().ok());
    if (++calls % 200 == 0) absl::SleepFor(absl::Milliseconds(20));
  }
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(client.GetServerInfo().ok());
  std::printf("measured: every server reached after %d calls; then %d/%d/%d\n",
              calls, a.service().calls.load(), b.service().calls.load(),
              c.service().calls.load());
  EXPECT_GT(a.service().calls, 0);
  EXPECT_GT(b.service().calls, 0);
  EXPECT_GT(c.service().calls, 0);
}

}  // namespace
}  // namespace quantd::client
