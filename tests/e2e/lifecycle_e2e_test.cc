// End to end: the server's lifecycle against the real quantd binary. Request
// ids in the call log and the initial metadata; SIGTERM draining (health
// NOT_SERVING, new calls UNAVAILABLE, the running call completes, exit 0);
// and how promptly a call cancelled by its deadline lets go of core (latency
// and memory over repeated cancellations).
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/quantd_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The first line of `path` containing every one of `parts`, polled every
// millisecond until `timeout`; nullopt if none showed up.
std::optional<std::string> WaitForLine(const std::string& path,
                                       const std::vector<std::string>& parts,
                                       absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  do {
    std::istringstream text(ReadAll(path));
    std::string line;
    while (std::getline(text, line)) {
      bool all = true;
      for (const std::string& part : parts) {
        all = all && line.find(part) != std::string::npos;
      }
      if (all) return line;
    }
    absl::SleepFor(absl::Milliseconds(1));
  } while (absl::Now() < end);
  return std::nullopt;
}

// x -> MatMul(W0) -> ... -> MatMul(W{n-1}) -> y, with x [1, dim] and every W
// a dim x dim float initializer of pseudo-random values.
std::string MatMulChainModel(int dim, int layers) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("matmul_chain");
  auto add_value = [dim](onnx::ValueInfoProto* value, const std::string& name) {
    value->set_name(name);
    onnx::TypeProto::Tensor* type =
        value->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_value(1);
    type->mutable_shape()->add_dim()->set_dim_value(dim);
  };
  add_value(graph->add_input(), "x");
  uint32_t state = 12345;
  std::string previous = "x";
  for (int i = 0; i < layers; ++i) {
    const std::string w = "W" + std::to_string(i);
    const std::string out = i + 1 == layers ? "y" : "h" + std::to_string(i);
    onnx::TensorProto* init = graph->add_initializer();
    init->set_name(w);
    init->set_data_type(onnx::TensorProto::FLOAT);
    init->add_dims(dim);
    init->add_dims(dim);
    std::string* raw = init->mutable_raw_data();
    raw->resize(sizeof(float) * dim * dim);
    float* values = reinterpret_cast<float*>(raw->data());
    for (int64_t k = 0; k < int64_t{dim} * dim; ++k) {
      state = state * 1664525u + 1013904223u;
      values[k] = (static_cast<float>(state >> 8) / (1 << 24) - 0.5f) * 0.1f;
    }
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type("MatMul");
    node->set_name("matmul" + std::to_string(i));
    node->add_input(previous);
    node->add_input(w);
    node->add_output(out);
    previous = out;
  }
  add_value(graph->add_output(), "y");
  return model.SerializeAsString();
}

quantd::v1::TensorBatch InputBatch(int dim) {
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* x = batch.add_tensors();
  x->set_name("x");
  x->set_data_type(onnx::TensorProto::FLOAT);
  x->add_shape(1);
  x->add_shape(dim);
  std::vector<float> values(dim);
  for (int i = 0; i < dim; ++i) values[i] = 0.01f * (i - dim / 2);
  x->set_data(values.data(), values.size() * sizeof(float));
  return batch;
}

quantd::v1::QuantizeConfig DynamicRangeConfig() {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(
          tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE);
  return config;
}

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

RawQuantize QuantizeRaw(const std::string& target, const std::string& model,
                        const std::string& request_id,
                        absl::Duration deadline) {
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
  while (stream->Read(&response)) {
    if (response.has_model_chunk()) {
      out.bytes_back += response.model_chunk().size();
    }
  }
  out.status = stream->Finish();
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

TEST(LifecycleE2eTest, SigtermDrainsTheRunningCallAndRefusesNewOnes) {
  TempDir tmp;
  const std::string log = tmp.File("quantd.err");
  ServerProcess server({"--shutdown_grace=30s"}, QUANTD_SERVER_BIN, log);
  ASSERT_TRUE(server.ok()) << server.startup_output() << ReadAll(log);
  constexpr int kDim = 8;
  const std::string model = MatMulChainModel(kDim, 2);

  // The in-flight call: a Calibrate whose batch source blocks until the
  // test releases it.
  absl::Notification source_waiting, release;
  absl::StatusOr<quantd::v1::CalibrationResult> held;
  std::thread in_flight([&] {
    client::Client client(ClientOptions(server));
    quantd::v1::CalibrateConfig config;
    config.set_method("min_max");
    int sent = 0;
    held = client.Calibrate(
        config, model,
        [&]() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
          if (sent == 0) {
            source_waiting.Notify();
            release.WaitForNotification();
          }
          if (sent == 3) return std::nullopt;
          ++sent;
          return InputBatch(kDim);
        });
  });
  source_waiting.WaitForNotification();
  // The model has been sent; the call is running on the server.
  absl::SleepFor(absl::Milliseconds(200));

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
  release.Notify();
  in_flight.join();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->batch_count(), 3);
  EXPECT_EQ(server.Terminate(), 0) << ReadAll(log);
  const std::string err = ReadAll(log);
  EXPECT_THAT(err, HasSubstr("method=Calibrate"));
  EXPECT_THAT(err, HasSubstr("quantd: stopped"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("cancelling")));
}

// quantd_inflight_jobs from /metrics; -1 when absent.
int InflightJobs(int metrics_port) {
  const std::string body = HttpGet(metrics_port, "/metrics");
  std::smatch m;
  static const std::regex re(
      "\nquantd_inflight_jobs(\\{[^}]*\\})? ([0-9.e+-]+)");
  if (!std::regex_search(body, m, re)) return -1;
  return static_cast<int>(std::stod(m[2]));
}

TEST(LifecycleE2eTest, DeadlineCancelsTheCoreJobPromptlyWithoutLeaking) {
  TempDir tmp;
  const std::string log = tmp.File("quantd.err");
  ServerProcess server({}, QUANTD_SERVER_BIN, log);
  ASSERT_TRUE(server.ok()) << server.startup_output() << ReadAll(log);
  constexpr int kDim = 4096;
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
  // The deadline falls ~50 ms after the upload (with a margin for uploads
  // slower than the first), while core is working. A call whose upload is
  // slower still is cancelled while receiving: also DEADLINE_EXCEEDED.
  const absl::Duration deadline = upload * 1.25 + absl::Milliseconds(50);
  const int64_t rss_full = ProcStatusBytes(server.pid(), "VmRSS");
  std::printf("server VmRSS after the uncancelled call: %.1f MiB\n",
              rss_full / 1048576.0);
  ASSERT_GT(total, deadline + absl::Milliseconds(200))
      << "the job is too quick to be cancelled mid-way";

  constexpr int kCalls = 20;
  int64_t rss_first = -1;
  std::vector<double> log_ms, job_ms;
  for (int i = 0; i < kCalls; ++i) {
    const std::string id = "cancel-" + std::to_string(i);
    RawQuantize r = QuantizeRaw(server.target(), model, id, deadline);
    const absl::Time client_done = absl::Now();
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << id << ": " << r.status.error_message();
    std::optional<std::string> line = WaitForLine(
        log, {"quantd call", "request_id=" + id + " "}, absl::Seconds(30));
    const absl::Time logged = absl::Now();
    ASSERT_TRUE(line.has_value()) << ReadAll(log);
    EXPECT_THAT(*line, HasSubstr("code=DEADLINE_EXCEEDED"));
    log_ms.push_back(absl::ToDoubleMilliseconds(logged - r.deadline));
    // The core job must let go too: the slot comes back, and the job's own
    // line says how long after the call it ended.
    std::optional<std::string> job = WaitForLine(
        log, {"quantd job-ended", "request_id=" + id + " "}, absl::Seconds(30));
    if (job.has_value()) {
      std::smatch m;
      static const std::regex after("after_call_s=([0-9.]+)");
      if (std::regex_search(*job, m, after)) {
        job_ms.push_back(1000 * std::stod(m[1]));
      }
    }
    const absl::Time wait_end = absl::Now() + absl::Seconds(30);
    while (InflightJobs(server.metrics_port()) != 0 && absl::Now() < wait_end) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(InflightJobs(server.metrics_port()), 0) << id;
    (void)client_done;
    // The call's memory goes back once its last reference is dropped, just
    // after the job's slot is released.
    absl::SleepFor(absl::Milliseconds(200));
    if (i == 0) rss_first = ProcStatusBytes(server.pid(), "VmRSS");
    std::printf("%s%.0f", i == 0 ? "VmRSS MiB per call:" : " ",
                ProcStatusBytes(server.pid(), "VmRSS") / 1048576.0);
  }
  std::printf("\n");
  const int64_t rss_last = ProcStatusBytes(server.pid(), "VmRSS");
  auto summary = [](std::vector<double> v) {
    if (v.empty()) return std::string("n/a");
    std::sort(v.begin(), v.end());
    char buf[128];
    std::snprintf(buf, sizeof(buf),
                  "min %.1f / median %.1f / max %.1f ms (%zu)", v.front(),
                  v[v.size() / 2], v.back(), v.size());
    return std::string(buf);
  };
  std::printf("deadline -> server's call log line: %s\n",
              summary(log_ms).c_str());
  std::printf("call end -> core job ended: %s\n", summary(job_ms).c_str());
  std::printf(
      "server VmRSS after cancelled call 1: %.1f MiB, after %d: %.1f MiB\n",
      rss_first / 1048576.0, kCalls, rss_last / 1048576.0);
  for (double ms : log_ms) EXPECT_LT(ms, 1000) << "log line late";
  // Most deadlines fall after the upload, so most calls had a job to stop;
  // core checks for cancellation between stages and weight groups, so it
  // stops well before it would have finished (the uncancelled call's time
  // after its upload).
  EXPECT_GE(job_ms.size(), kCalls / 2);
  for (double ms : job_ms) {
    EXPECT_LT(ms, absl::ToDoubleMilliseconds(total - upload))
        << "core job slow to stop";
  }
  ASSERT_GT(rss_first, 0);
  // No per-call leak: over the 20 cancelled calls RSS grows by less than one
  // model, so even 10% of a model kept per call would fail. (A ratio to the
  // RSS after call 1 is not a sound bound: that baseline depends on how far
  // the first call got, and glibc's per-thread arenas fill up in plateaus,
  // e.g. 70 -> 123 MiB here, before they level off.)
  EXPECT_LT(rss_last - rss_first, static_cast<int64_t>(model.size()));
  // Still healthy and working after all that.
  client::Client client(ClientOptions(server));
  absl::StatusOr<client::ServingStatus> health = client.Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, client::ServingStatus::kServing);
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace quantd::testing
