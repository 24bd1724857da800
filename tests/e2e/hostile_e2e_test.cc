// End to end: sizes and counts a client sends are checked before anything
// trusts them. Each test is a finding of the "no call may crash the server
// or make it allocate without bound" issue, sent to the real quantd binary;
// after each the server must still answer.
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

using ::testing::AnyOf;
using ::testing::HasSubstr;
using QuantizeCall =
    RawCall<quantd::v1::QuantizeRequest, quantd::v1::QuantizeResponse>;
using CalibrateCall =
    RawCall<quantd::v1::CalibrateRequest, quantd::v1::CalibrateResponse>;
using tensorflow::quantization::QuantizationMethod;
using tensorflow::quantization::UnitWiseQuantizationPrecision;

constexpr int kDim = 8;

// A tensor with `shape` and no data at all.
quantd::v1::TensorBatch Hollow(const std::string& name,
                               const std::vector<int64_t>& shape) {
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* t = batch.add_tensors();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : shape) t->add_shape(d);
  return batch;
}

int64_t RssBytes(pid_t pid) { return ProcStatusBytes(pid, "VmRSS"); }

class HostileE2eTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags = {}) {
    log_ = tmp_.File("quantd.err");
    server_ = std::make_unique<ServerProcess>(flags, QUANTD_SERVER_BIN, log_);
    ASSERT_TRUE(server_->ok()) << server_->startup_output() << ReadAll(log_);
    stub_ = RawStub(server_->target());
    model_ = MatMulChainModel(kDim, 2);
  }

  grpc::Status Calibrate(const quantd::v1::TensorBatch& batch,
                         quantd::v1::CalibrateConfig config = {}) {
    if (config.method().empty()) config.set_method("min_max");
    CalibrateCall call(
        [this](grpc::ClientContext* c) { return stub_->Calibrate(c); }, config,
        model_);
    quantd::v1::CalibrateRequest request;
    *request.mutable_batch() = batch;
    call.Write(request);
    return call.Finish();
  }

  grpc::Status StaticQuantize(const quantd::v1::TensorBatch& batch) {
    quantd::v1::QuantizeConfig config;
    config.mutable_options()
        ->mutable_quantization_method()
        ->set_experimental_method(QuantizationMethod::STATIC_RANGE);
    QuantizeCall call(
        [this](grpc::ClientContext* c) { return stub_->Quantize(c); }, config,
        model_);
    quantd::v1::QuantizeRequest request;
    *request.mutable_calibration_batch() = batch;
    call.Write(request);
    return call.Finish();
  }

  void ExpectServing() {
    grpc::ClientContext context;
    quantd::v1::ServerInfo info;
    const grpc::Status s = stub_->GetServerInfo(
        &context, quantd::v1::GetServerInfoRequest(), &info);
    EXPECT_TRUE(s.ok()) << s.error_message() << ReadAll(log_);
  }

  TempDir tmp_;
  std::string log_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
  std::string model_;
};

TEST_F(HostileE2eTest, OverflowingShapesAreRefusedByBothRpcs) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::vector<int64_t>> shapes = {
      {int64_t{1} << 62},
      {int64_t{1} << 31, int64_t{1} << 31, 4},
      {1, -8},
  };
  for (const auto& shape : shapes) {
    for (const char* name : {"x", "h0"}) {  // Graph input, observed tensor.
      SCOPED_TRACE(absl::StrCat(name, " shape[0]=", shape[0]));
      grpc::Status s = Calibrate(Hollow(name, shape));
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << s.error_message();
      if (std::string(name) == "x") {
        s = StaticQuantize(Hollow(name, shape));
        EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << s.error_message();
      }
      ExpectServing();
    }
  }
}

TEST_F(HostileE2eTest, ZeroSizeAndMisshapenBatchesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{0, kDim}, {1, kDim + 1}, {kDim}}) {
    quantd::v1::TensorBatch batch = Hollow("x", shape);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    batch.mutable_tensors(0)->set_data(std::string(n * sizeof(float), '\0'));
    const grpc::Status s = Calibrate(batch);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
  }
  ExpectServing();
}

TEST_F(HostileE2eTest, PerChannelHistogramsStayWithinTheObserverBudget) {
  // 512 channels x 1M bins x 8 bytes would be 4 GiB; the budget is 64 MiB.
  ASSERT_NO_FATAL_FAILURE(Start({"--max_observer_bytes=67108864"}));
  model_ = MatMulChainModel(512, 2);
  quantd::v1::CalibrateConfig config;
  config.set_method("percentile");
  config.set_per_channel(true);
  config.set_num_bins(1 << 20);
  const int64_t rss_before = RssBytes(server_->pid());
  const grpc::Status s = Calibrate(InputBatch(512), config);
  EXPECT_THAT(s.error_code(), AnyOf(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                    grpc::StatusCode::INVALID_ARGUMENT))
      << s.error_message();
  if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    EXPECT_THAT(s.error_message(), HasSubstr("observer"));
  }
  EXPECT_LT(RssBytes(server_->pid()) - rss_before, int64_t{256} << 20);
  ExpectServing();
}

// The observer budget is set far above what the process may map, as an
// operator might on a node whose memory is shared: the allocation itself
// fails (RLIMIT_AS set on the running server, as `prlimit` does), and that
// ends this call only, with RESOURCE_EXHAUSTED; the server keeps serving
// and still shuts down cleanly.
TEST_F(HostileE2eTest, FailedAllocationEndsOnlyThatCall) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max_observer_bytes=17179869184"}));
  model_ = MatMulChainModel(512, 2);
  const int64_t mapped = ProcStatusBytes(server_->pid(), "VmSize");
  ASSERT_GT(mapped, 0);
  const rlimit limit = {static_cast<rlim_t>(mapped + (int64_t{512} << 20)),
                        static_cast<rlim_t>(mapped + (int64_t{512} << 20))};
  ASSERT_EQ(prlimit(server_->pid(), RLIMIT_AS, &limit, nullptr), 0)
      << std::strerror(errno);
  // 512 channels x 1M bins x 8 bytes: 4 GiB per observed tensor.
  quantd::v1::CalibrateConfig histograms;
  histograms.set_method("percentile");
  histograms.set_per_channel(true);
  histograms.set_num_bins(1 << 20);
  const grpc::Status s = Calibrate(InputBatch(512), histograms);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("memory"));
  std::printf("measured: %s\n", s.error_message().c_str());
  ExpectServing();
  EXPECT_TRUE(Calibrate(InputBatch(512)).ok());
  EXPECT_EQ(server_->Terminate(), 0) << ReadAll(log_);
}

TEST_F(HostileE2eTest, IdleUploadsCannotPinMoreThanTheUploadBudget) {
  constexpr uint64_t kBudget = uint64_t{100} << 20;
  ASSERT_NO_FATAL_FAILURE(
      Start({absl::StrCat("--max_uploading_bytes=", kBudget),
             "--max_model_bytes=1073741824"}));
  const int64_t rss_before = RssBytes(server_->pid());
  quantd::v1::QuantizeConfig config = DynamicRangeConfig();
  config.set_model_size_bytes(uint64_t{40} << 20);
  auto start = [this](grpc::ClientContext* c) { return stub_->Quantize(c); };
  // Two 40 MiB uploads that never send a byte fit; the third does not.
  auto first = std::make_unique<QuantizeCall>(start, config, "");
  auto second = std::make_unique<QuantizeCall>(start, config, "");
  absl::SleepFor(absl::Milliseconds(300));
  QuantizeCall third(start, config, "");
  const grpc::Status refused = third.Finish(nullptr, /*half_close=*/false);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("max_uploading_bytes"));
  // Declared sizes are charged, not allocated.
  EXPECT_LT(RssBytes(server_->pid()) - rss_before, int64_t{40} << 20);
  // An ended upload gives its share back.
  first->Cancel();
  first->Finish();
  absl::SleepFor(absl::Milliseconds(300));
  QuantizeCall fits(start, DynamicRangeConfig(), model_);
  EXPECT_TRUE(fits.Finish().ok());
  second->Cancel();
  second->Finish();
  ExpectServing();
}

TEST_F(HostileE2eTest, HundredThousandBadUnitWiseEntriesGiveAReadableStatus) {
  ASSERT_NO_FATAL_FAILURE(Start());
  quantd::v1::QuantizeConfig config = DynamicRangeConfig();
  for (int i = 0; i < 100000; ++i) {
    UnitWiseQuantizationPrecision* u =
        config.mutable_options()->add_unit_wise_quantization_precision();
    u->set_unit_type(UnitWiseQuantizationPrecision::UNIT_NODE);
    u->set_unit_name(absl::StrCat("no_such_node_", i));
    u->set_quantization_precision(
        tensorflow::quantization::QuantizationPrecision::PRECISION_W8A8);
  }
  QuantizeCall call(
      [this](grpc::ClientContext* c) { return stub_->Quantize(c); }, config,
      model_);
  const grpc::Status s = call.Finish();
  // The reason itself, not gRPC's "metadata size exceeds limit".
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message().substr(0, 300);
  EXPECT_LE(s.error_message().size(), 1024u);
  EXPECT_THAT(s.error_message(), HasSubstr("no_such_node_0"));
  EXPECT_THAT(s.error_message(), HasSubstr("more"));
  // The log line is capped too.
  for (absl::string_view line : absl::StrSplit(ReadAll(log_), '\n')) {
    EXPECT_LT(line.size(), size_t{20000});
  }
  ExpectServing();
}

TEST_F(HostileE2eTest, IdleServerGivesMemoryBack) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string small = model_;
  const std::string big = MatMulChainModel(2048, 3);  // 48 MB.
  auto quantize = [this](const std::string& model) {
    QuantizeCall call(
        [this](grpc::ClientContext* c) { return stub_->Quantize(c); },
        DynamicRangeConfig(), model);
    return call.Finish();
  };
  auto hostile_round = [&] {
    model_ = small;
    EXPECT_FALSE(Calibrate(Hollow("x", {int64_t{1} << 62})).ok());
    quantd::v1::CalibrateConfig histograms;
    histograms.set_method("percentile");
    histograms.set_per_channel(true);
    histograms.set_num_bins(1 << 16);
    EXPECT_TRUE(Calibrate(InputBatch(kDim), histograms).ok());
    EXPECT_TRUE(quantize(big).ok());
  };
  // The first round loads what every later call shares (ONNX's operator
  // schemas, protobuf descriptors, the code pages of every path these calls
  // take, the pool threads' stacks): the baseline is the idle server after
  // it, once its trimmer has run.
  hostile_round();
  // Measured with the connection closed: gRPC keeps a read buffer sized by
  // the last big transfers for as long as a connection stays open (up to
  // ~13 MB live heap here after the 48 MB uploads, varying run to run),
  // which belongs to the connection, not to any call (the flake this test
  // had on loaded CI machines, 2026-12-04: 1 run in ~10).
  stub_ = RawStub(server_->target());
  const int64_t baseline = SettledRssBytes(server_->pid(), absl::Seconds(10));
  const std::string baseline_mappings = TopMappings(server_->pid(), 6);
  for (int round = 0; round < 2; ++round) hostile_round();
  stub_ = RawStub(server_->target());
  // Within 10% of the baseline, plus 8 MiB: the baseline is small (~30 MB)
  // and a trim returns only whole free pages, so small objects that outlive
  // a call (gRPC's, protobuf's, the metrics') keep the pages they sit on;
  // measured up to +8 MB on a loaded machine. Without the trims the server
  // keeps 100 MB and more here (its peak is printed below).
  const int64_t bound = baseline * 11 / 10 + (int64_t{8} << 20);
  const int64_t rss = SettledRssBytes(server_->pid(), absl::Seconds(10));
  std::printf(
      "measured: idle server RSS %.1f MB after hostile and 48 MB "
      "calls, baseline %.1f MB, peak %.1f MB\n",
      rss / 1e6, baseline / 1e6,
      ProcStatusBytes(server_->pid(), "VmHWM") / 1e6);
  EXPECT_LE(rss, bound) << "largest mappings at the baseline:\n"
                        << baseline_mappings << "and now:\n"
                        << TopMappings(server_->pid(), 6);
}

}  // namespace
}  // namespace quantd::testing
