// smoothquant and equalize through RunQuantize, judged by ONNX Runtime: on
// a model built to have the problem each one solves (activation channels
// with outliers; a layer whose output channels have very different weight
// ranges, quantized per tensor), the option must give a model that runs in
// ONNX Runtime and is closer to the float model than the same request
// without it, on inputs that were not among the calibration batches.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "core/executor/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/batches.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

namespace tfq = tensorflow::quantization;
using ::quantd::testing::BatchesOf;
using ::quantd::testing::OrtSqnr;
using ::quantd::testing::TempDir;
using ::quantd::testing::WriteFileOrDie;
using ::testing::HasSubstr;

executor::Tensor Normal(const std::vector<int64_t>& shape, uint32_t seed) {
  executor::Tensor t(onnx::TensorProto::FLOAT, shape);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.size(); ++i)
    t.mutable_data<float>()[i] = normal(gen);
  return t;
}

// x [64, 32] -> MatMul W0 -> h -> Relu -> MatMul W1 -> y, where columns 3
// and 17 of W0 are 40x the others: h has two outlier channels that set
// its 8-bit step, as in the transformers SmoothQuant was made for.
onnx::ModelProto OutlierModel() {
  testing::ModelBuilder b(13);
  b.Input("x", {64, 32}).Weight("W0", {32, 32}, 1).Weight("W1", {32, 16}, 2);
  onnx::TensorProto* w0 = b.model().mutable_graph()->mutable_initializer(0);
  std::vector<float> v(32 * 32);
  std::memcpy(v.data(), w0->raw_data().data(), v.size() * sizeof(float));
  for (int r = 0; r < 32; ++r) {
    v[r * 32 + 3] *= 40;
    v[r * 32 + 17] *= 40;
  }
  *w0 = testing::ModelBuilder::FloatTensor("W0", {32, 32}, v);
  b.Node("MatMul", {"x", "W0"}, {"h"}, "mm0");
  b.Node("Relu", {"h"}, {"r"}, "relu");
  b.Node("MatMul", {"r", "W1"}, {"y"}, "mm1");
  b.Output("y");
  return b.Build();
}

// x [8, 3, 8, 8] -> Conv W1 -> Relu -> Conv W2 -> y, where W1's output
// channel c is 4^(c - 4) times the wave and W2's input channel c 4^(4 - c)
// times: every channel matters as much to y, but their weight ranges differ
// 16384-fold (batch-norm folding leaves such pairs), and one weight scale
// per tensor loses the small ones.
onnx::ModelProto UnevenConvModel() {
  testing::ModelBuilder b(13);
  b.Input("x", {8, 3, 8, 8})
      .Weight("W1", {8, 3, 3, 3}, 1)
      .Weight("W2", {8, 8, 3, 3}, 2);
  onnx::TensorProto* w1 = b.model().mutable_graph()->mutable_initializer(0);
  std::vector<float> v(8 * 27);
  std::memcpy(v.data(), w1->raw_data().data(), v.size() * sizeof(float));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] *= std::pow(4.0f, static_cast<int>(i / 27) - 4);
  }
  *w1 = testing::ModelBuilder::FloatTensor("W1", {8, 3, 3, 3}, v);
  onnx::TensorProto* w2 = b.model().mutable_graph()->mutable_initializer(1);
  std::vector<float> u(8 * 8 * 9);
  std::memcpy(u.data(), w2->raw_data().data(), u.size() * sizeof(float));
  for (size_t i = 0; i < u.size(); ++i) {
    u[i] *= std::pow(4.0f, 4 - static_cast<int>((i / 9) % 8));
  }
  *w2 = testing::ModelBuilder::FloatTensor("W2", {8, 8, 3, 3}, u);
  b.Node("Conv", {"x", "W1"}, {"c1"}, "conv1")
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  b.Node("Relu", {"c1"}, {"r1"}, "relu1");
  b.Node("Conv", {"r1", "W2"}, {"y"}, "conv2");
  b.Output("y");
  return b.Build();
}

struct Request {
  tfq::QuantizationMethod::ExperimentalMethod method =
      tfq::QuantizationMethod::STATIC_RANGE;
  bool smoothquant = false;
  bool auto_alpha = false;
  bool equalize = false;
  bool gptq = false;
  bool awq = false;
  bool cross_check = false;
  bool w4 = false;
  bool per_channel_weights = true;
};

absl::StatusOr<QuantizeResult> Quantize(
    const onnx::ModelProto& model, const Request& request,
    const executor::Tensor& calib, int batch,
    std::vector<quantd::v1::TensorReport>* reports = nullptr) {
  quantd::v1::QuantizeConfig config;
  tfq::QuantizationOptions* o = config.mutable_options();
  o->mutable_quantization_method()->set_experimental_method(request.method);
  o->set_quantization_precision(request.w4 ? tfq::PRECISION_W4A8
                                           : tfq::PRECISION_W8A8);
  o->set_min_num_elements_for_weights(-1);
  if (request.smoothquant) config.mutable_smoothquant();  // alpha 0.5.
  if (request.auto_alpha) config.mutable_smoothquant()->set_auto_alpha(true);
  config.set_equalize(request.equalize);
  if (request.gptq) {
    config.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_GPTQ);
  }
  if (request.awq) {
    config.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_AWQ);
  }
  config.set_cross_check(request.cross_check);
  if (!request.per_channel_weights) {
    config.mutable_weight_params()->set_per_channel(false);
  }
  std::vector<quantd::v1::TensorBatch> batches = BatchesOf(calib, batch);
  BatchQueue queue(batches.size() + 1);
  for (auto& b : batches) queue.Push(std::move(b));
  queue.Close();
  CancellationToken cancel;
  ThreadPool pool(1);
  const bool send = request.smoothquant || request.gptq || request.awq ||
                    request.method == tfq::QuantizationMethod::STATIC_RANGE;
  QuantizeEvents events;
  if (reports != nullptr) {
    events.on_tensor_report = [reports](const quantd::v1::TensorReport& t) {
      reports->push_back(t);
    };
  }
  return RunQuantize(config, model.SerializeAsString(), events, cancel, &pool,
                     send ? &queue : nullptr);
}

TEST(ChannelScalingAcceptanceTest, SmoothQuantMovesOutliersIntoTheWeights) {
  const onnx::ModelProto model = OutlierModel();
  const executor::Tensor calib = Normal({256, 32}, 1);
  const executor::Tensor test = Normal({64, 32}, 2);
  TempDir tmp;
  const std::string x = tmp.File("x.npy");
  ASSERT_TRUE(executor::WriteNpyFile(x, test).ok());
  const std::string float_model = tmp.File("float.onnx");
  WriteFileOrDie(float_model, model.SerializeAsString());
  for (auto method : {tfq::QuantizationMethod::STATIC_RANGE,
                      tfq::QuantizationMethod::DYNAMIC_RANGE}) {
    SCOPED_TRACE(tfq::QuantizationMethod::ExperimentalMethod_Name(method));
    double sqnr[2] = {0, 0};
    for (bool smooth : {false, true}) {
      Request request;
      request.method = method;
      request.smoothquant = smooth;
      absl::StatusOr<QuantizeResult> r = Quantize(model, request, calib, 64);
      ASSERT_TRUE(r.ok()) << r.status();
      const std::string path = tmp.File(smooth ? "sq.onnx" : "plain.onnx");
      WriteFileOrDie(path, r->model);
      sqnr[smooth] = OrtSqnr(float_model, path, x);
      if (!smooth) {
        EXPECT_EQ(r->summary.channel_scalings_size(), 0);
        continue;
      }
      // x is a graph input (an inserted Mul); r folds into mm0 through Relu.
      ASSERT_EQ(r->summary.channel_scalings_size(), 2);
      for (const auto& c : r->summary.channel_scalings()) {
        EXPECT_EQ(c.algorithm(), "smoothquant");
        EXPECT_EQ(c.channels(), 32);
      }
      // The outliers moved out of r (x had none: it takes some of W0's).
      EXPECT_LT(r->summary.channel_scalings(1).after(),
                r->summary.channel_scalings(1).before() / 4);
      EXPECT_THAT(r->summary.channel_scalings(0).absorbed_by(),
                  HasSubstr("inserted Mul"));
      EXPECT_EQ(r->summary.channel_scalings(1).value(), "r");
      EXPECT_EQ(r->summary.channel_scalings(1).absorbed_by(), "MatMul 'mm0'");
      if (method == tfq::QuantizationMethod::STATIC_RANGE) {
        EXPECT_TRUE(r->summary.fidelity().evaluated());
      }
    }
    std::printf(
        "measured: %s W8A8, two outlier channels, in ONNX Runtime: %.2f dB, "
        "with smoothquant %.2f dB\n",
        tfq::QuantizationMethod::ExperimentalMethod_Name(method).c_str(),
        sqnr[0], sqnr[1]);
    // Measured: +4.6 dB STATIC, +1.3 dB DYNAMIC (run-time ranges still
    // span the outliers, per tensor).
    EXPECT_GT(
        sqnr[1],
        sqnr[0] +
            (method == tfq::QuantizationMethod::STATIC_RANGE ? 2.5 : 0.5));
  }
}

TEST(ChannelScalingAcceptanceTest, AutoAlphaChoosesPerValue) {
  const onnx::ModelProto model = OutlierModel();
  const executor::Tensor calib = Normal({256, 32}, 1);
  TempDir tmp;
  const std::string x = tmp.File("x.npy");
  ASSERT_TRUE(executor::WriteNpyFile(x, Normal({64, 32}, 2)).ok());
  const std::string float_model = tmp.File("float.onnx");
  WriteFileOrDie(float_model, model.SerializeAsString());
  double sqnr[2] = {0, 0};
  for (bool choose : {false, true}) {
    Request request;
    request.auto_alpha = choose;
    absl::StatusOr<QuantizeResult> r = Quantize(model, request, calib, 64);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::string path = tmp.File(choose ? "auto.onnx" : "plain.onnx");
    WriteFileOrDie(path, r->model);
    sqnr[choose] = OrtSqnr(float_model, path, x);
    if (!choose) continue;
    for (const auto& c : r->summary.channel_scalings()) {
      std::printf("measured: %s alpha %.1f, |x| max %.3g -> %.3g\n",
                  c.value().c_str(), c.alpha(), c.before(), c.after());
    }
    // r has the outliers and takes a rescale; whether x (no outliers, a
    // graph input) is worth one is the noise model's call.
    bool r_rescaled = false;
    for (const auto& c : r->summary.channel_scalings()) {
      EXPECT_GE(c.alpha(), 0.0);
      EXPECT_LE(c.alpha(), 1.0);
      if (c.value() != "r") continue;
      r_rescaled = true;
      EXPECT_GT(c.alpha(), 0.0);
      EXPECT_LT(c.after(), c.before() / 4);
    }
    EXPECT_TRUE(r_rescaled);
    bool noted = false;
    for (const std::string& v : r->summary.validations()) {
      noted = noted || absl::StrContains(v, "smoothquant (auto_alpha)");
    }
    EXPECT_TRUE(noted);
  }
  std::printf(
      "measured: STATIC W8A8, two outlier channels, in ONNX Runtime: %.2f "
      "dB, with smoothquant auto_alpha %.2f dB\n",
      sqnr[0], sqnr[1]);
  EXPECT_GT(sqnr[1], sqnr[0] + 2.5);
}

TEST(ChannelScalingAcceptanceTest, SmoothQuantWithGptqScalesItsStatistics) {
  const onnx::ModelProto model = OutlierModel();
  const executor::Tensor calib = Normal({256, 32}, 3);
  Request request;
  request.smoothquant = true;
  request.gptq = true;
  request.w4 = true;
  absl::StatusOr<QuantizeResult> r = Quantize(model, request, calib, 64);
  ASSERT_TRUE(r.ok()) << r.status();
  TempDir tmp;
  const std::string x = tmp.File("x.npy");
  ASSERT_TRUE(executor::WriteNpyFile(x, Normal({64, 32}, 4)).ok());
  const std::string float_model = tmp.File("float.onnx");
  WriteFileOrDie(float_model, model.SerializeAsString());
  const std::string path = tmp.File("sq_gptq.onnx");
  WriteFileOrDie(path, r->model);
  const double both = OrtSqnr(float_model, path, x);
  Request rtn = request;
  rtn.gptq = false;
  r = Quantize(model, rtn, calib, 64);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string rtn_path = tmp.File("sq_rtn.onnx");
  WriteFileOrDie(rtn_path, r->model);
  const double rounding = OrtSqnr(float_model, rtn_path, x);
  std::printf(
      "measured: STATIC W4A8 with smoothquant in ONNX Runtime: rounding "
      "%.2f dB, gptq %.2f dB\n",
      rounding, both);
  // GPTQ's statistics followed the rescale: with stale ones it would fit
  // the weights to inputs they no longer see and fall below rounding.
  // Measured: +0.55 dB (independent inputs leave GPTQ little to exploit).
  EXPECT_GT(both, rounding + 0.2);
}

// Normal inputs whose channels 3 and 17 are 20x louder: the salient input
// channels AWQ was made for (their weights matter most to the output).
executor::Tensor LoudInputs(const std::vector<int64_t>& shape, uint32_t seed) {
  executor::Tensor t = Normal(shape, seed);
  const int64_t channels = shape.back();
  for (int64_t i = 0; i < t.size(); ++i) {
    const int64_t c = i % channels;
    if (c == 3 || c == 17) t.mutable_data<float>()[i] *= 20;
  }
  return t;
}

TEST(ChannelScalingAcceptanceTest, AwqProtectsSalientChannelsAt4Bits) {
  const onnx::ModelProto model = OutlierModel();
  const executor::Tensor calib = LoudInputs({256, 32}, 7);
  TempDir tmp;
  const std::string x = tmp.File("x.npy");
  ASSERT_TRUE(executor::WriteNpyFile(x, LoudInputs({64, 32}, 8)).ok());
  const std::string float_model = tmp.File("float.onnx");
  WriteFileOrDie(float_model, model.SerializeAsString());
  for (auto method : {tfq::QuantizationMethod::STATIC_RANGE,
                      tfq::QuantizationMethod::DYNAMIC_RANGE}) {
    SCOPED_TRACE(tfq::QuantizationMethod::ExperimentalMethod_Name(method));
    double sqnr[2] = {0, 0};
    for (bool awq : {false, true}) {
      Request request;
      request.method = method;
      request.w4 = true;
      request.awq = awq;
      std::vector<quantd::v1::TensorReport> reports;
      absl::StatusOr<QuantizeResult> r =
          Quantize(model, request, calib, 64, &reports);
      ASSERT_TRUE(r.ok()) << r.status();
      const std::string path = tmp.File(awq ? "awq.onnx" : "rtn.onnx");
      WriteFileOrDie(path, r->model);
      sqnr[awq] = OrtSqnr(float_model, path, x);
      if (!awq) continue;
      ASSERT_GE(r->summary.channel_scalings_size(), 1);
      for (const auto& c : r->summary.channel_scalings()) {
        EXPECT_EQ(c.algorithm(), "awq");
        EXPECT_GT(c.alpha(), 0.0);
        // The search's own measure: the readers' output SQNR went up.
        EXPECT_GT(c.after(), c.before()) << c.value();
      }
      // x, a graph input, is rescaled through an inserted Mul.
      EXPECT_THAT(r->summary.channel_scalings(0).absorbed_by(),
                  HasSubstr("inserted Mul"));
      int awq_weights = 0;
      for (const auto& t : reports) {
        awq_weights += t.weight_algorithm() == "awq" ? 1 : 0;
      }
      EXPECT_GE(awq_weights, 1);
    }
    std::printf(
        "measured: %s W4A8, two salient input channels, in ONNX Runtime: "
        "rounding %.2f dB, awq %.2f dB\n",
        tfq::QuantizationMethod::ExperimentalMethod_Name(method).c_str(),
        sqnr[0], sqnr[1]);
    // Measured: +4.5 dB STATIC, +4.7 dB DYNAMIC.
    EXPECT_GT(sqnr[1], sqnr[0] + 2.5);
  }
}

// AWQ's cross-check: on calibration inputs where channel 3 is loud in the
// even samples and channel 17 in the odd ones, the search on all samples
// protects both, but factors searched on either half protect the wrong
// channel for the other half: with cross_check the value is left as it
// is, and the summary says why.
TEST(ChannelScalingAcceptanceTest, AwqThatDoesNotCarryOverIsNotApplied) {
  testing::ModelBuilder b(13);
  b.Input("x", {4, 32}).Weight("W", {32, 32}, 1);
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  b.Output("y");
  const onnx::ModelProto model = b.Build();
  executor::Tensor calib = LoudInputs({8, 32}, 9);
  for (int64_t sample = 0; sample < 8; ++sample) {
    calib.mutable_data<float>()[sample * 32 + (sample % 2 == 0 ? 3 : 17)] *=
        100;
  }
  Request request;
  request.method = tfq::QuantizationMethod::DYNAMIC_RANGE;
  request.w4 = true;
  request.awq = true;
  absl::StatusOr<QuantizeResult> r = Quantize(model, request, calib, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.channel_scalings_size(), 1);  // Unchecked: applied.
  request.cross_check = true;
  r = Quantize(model, request, calib, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.channel_scalings_size(), 0);
  std::string notes;
  for (const std::string& v : r->summary.validations()) notes += v + "\n";
  EXPECT_THAT(notes, HasSubstr("1 left as they are because factors searched "
                               "on half of the calibration samples"));
  // The same inputs with both channels loud in every sample: kept.
  for (int64_t sample = 0; sample < 8; ++sample) {
    calib.mutable_data<float>()[sample * 32 + (sample % 2 == 0 ? 17 : 3)] *=
        100;
  }
  r = Quantize(model, request, calib, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.channel_scalings_size(), 1);
}

TEST(ChannelScalingAcceptanceTest, EqualizeHelpsOneScalePerTensor) {
  const onnx::ModelProto model = UnevenConvModel();
  const executor::Tensor calib = Normal({32, 3, 8, 8}, 5);
  const executor::Tensor test = Normal({8, 3, 8, 8}, 6);
  TempDir tmp;
  const std::string x = tmp.File("x.npy");
  ASSERT_TRUE(executor::WriteNpyFile(x, test).ok());
  const std::string float_model = tmp.File("float.onnx");
  WriteFileOrDie(float_model, model.SerializeAsString());
  double sqnr[2] = {0, 0};
  for (bool equalize : {false, true}) {
    Request request;
    request.equalize = equalize;
    request.per_channel_weights = false;
    absl::StatusOr<QuantizeResult> r = Quantize(model, request, calib, 8);
    ASSERT_TRUE(r.ok()) << r.status();
    if (equalize) {
      ASSERT_EQ(r->summary.channel_scalings_size(), 1);
      const auto& c = r->summary.channel_scalings(0);
      EXPECT_EQ(c.algorithm(), "equalize");
      EXPECT_EQ(c.absorbed_by(), "Conv 'conv1'");
      EXPECT_GT(c.before(), 100.0);
      EXPECT_LT(c.after(), 1.01);
    }
    const std::string path = tmp.File(equalize ? "eq.onnx" : "plain.onnx");
    WriteFileOrDie(path, r->model);
    sqnr[equalize] = OrtSqnr(float_model, path, x);
  }
  std::printf(
      "measured: STATIC W8A8 per-tensor weights, uneven channels, in ONNX "
      "Runtime: %.2f dB, with equalize %.2f dB\n",
      sqnr[0], sqnr[1]);
  EXPECT_GT(sqnr[1], sqnr[0] + 6.0);
}

TEST(ChannelScalingAcceptanceTest, RefusedWhereItCannotApply) {
  const std::string bytes = OutlierModel().SerializeAsString();
  CancellationToken cancel;
  auto run = [&](const quantd::v1::QuantizeConfig& c) {
    return RunQuantize(c, bytes, {}, cancel, nullptr);
  };
  quantd::v1::QuantizeConfig c;
  c.mutable_smoothquant()->set_alpha(1.5);
  c.mutable_options()->mutable_quantization_method()->set_experimental_method(
      tfq::QuantizationMethod::STATIC_RANGE);
  absl::StatusOr<QuantizeResult> r = run(c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("smoothquant.alpha"));

  c.mutable_smoothquant()->set_alpha(0.5);
  c.mutable_smoothquant()->set_auto_alpha(true);
  r = run(c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("auto_alpha"));

  c.mutable_smoothquant()->set_auto_alpha(false);
  c.mutable_calibration()->add_ranges()->set_tensor_name("x");
  r = run(c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("config.calibration"));

  c.clear_calibration();
  c.mutable_options()->mutable_quantization_method()->set_experimental_method(
      tfq::QuantizationMethod::DYNAMIC_RANGE);
  r = run(c);  // No batches.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("smoothquant"));

  c.mutable_options()->clear_quantization_method();
  r = run(c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("quantization_method"));

  c.clear_smoothquant();
  c.set_equalize(true);
  r = run(c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("equalize"));

  // STATIC with an observer whose ranges cannot be derived per channel.
  c.set_equalize(false);
  c.mutable_smoothquant();
  c.mutable_options()->mutable_quantization_method()->set_experimental_method(
      tfq::QuantizationMethod::STATIC_RANGE);
  c.mutable_calibration_config()->set_method("entropy");
  BatchQueue queue(2);
  queue.Push(BatchesOf(Normal({64, 32}, 1), 64).front());
  queue.Close();
  r = RunQuantize(c, bytes, {}, cancel, nullptr, &queue);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r.status().message(), HasSubstr("min_max"));
}

}  // namespace
}  // namespace quantd
