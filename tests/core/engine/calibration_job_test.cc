// RunCalibrate and STATIC_RANGE through RunQuantize, on the bundled digits
// CNN with its calibration samples.
#include <cstring>
#include <string>
#include <vector>

#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "core/executor/npy.h"
#include "core/graph/model_io.h"
#include "core/graph/validate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/batches.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

using ::quantd::testing::ReadFileOrDie;
using ::quantd::testing::SourcePath;
using ::testing::HasSubstr;
namespace tfq = tensorflow::quantization;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// Samples [begin, end) of the digits calibration set as one batch, fed to
// the model's input by name ("" = the only input).
quantd::v1::TensorBatch DigitsBatch(int begin, int end,
                                    const std::string& name = "") {
  static const executor::Tensor all =
      *executor::ReadNpyFile(SourcePath("examples/digits/calib_x.npy"));
  return ::quantd::testing::BatchOf(all, begin, end, name);
}

std::shared_ptr<BatchQueue> Queue(std::vector<quantd::v1::TensorBatch> v) {
  auto q = std::make_shared<BatchQueue>(v.size() + 1);
  for (auto& b : v) q->Push(std::move(b));
  q->Close();
  return q;
}

absl::StatusOr<quantd::v1::CalibrationResult> Calibrate(
    quantd::v1::CalibrateConfig config,
    std::vector<quantd::v1::TensorBatch> batches) {
  CancellationToken cancel;
  auto q = Queue(std::move(batches));
  return RunCalibrate(config,
                      ReadFileOrDie(SourcePath("examples/digits/model.onnx")),
                      q.get(), {}, cancel, nullptr);
}

const quantd::v1::TensorRange* Find(const quantd::v1::CalibrationResult& r,
                                    const std::string& name) {
  for (const auto& range : r.ranges()) {
    if (range.tensor_name() == name) return &range;
  }
  return nullptr;
}

TEST(RunCalibrateTest, MinMaxCoversInputAndEveryFloatActivation) {
  quantd::v1::CalibrateConfig config;
  config.set_method("min_max");
  auto result = Calibrate(config, {DigitsBatch(0, 32), DigitsBatch(32, 64)});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->batch_count(), 2);
  EXPECT_EQ(result->method(), "min_max");
  // Input pixels are scaled to [0, 1]: the range is the data's own.
  const auto* input = Find(*result, "input");
  ASSERT_NE(input, nullptr);
  EXPECT_FLOAT_EQ(input->min(), 0.0f);
  EXPECT_FLOAT_EQ(input->max(), 1.0f);
  // Conv, Relu, Conv, Relu, Flatten, Gemm, Relu, Gemm: 8 node outputs.
  EXPECT_EQ(result->ranges_size(), 1 + 8);
  for (const auto& r : result->ranges()) {
    EXPECT_LE(r.min(), 0.0f) << r.tensor_name();  // Ranges include zero.
    EXPECT_GT(r.max(), 0.0f) << r.tensor_name();
  }
}

TEST(RunCalibrateTest, PerChannelGivesOneRangePerChannel) {
  quantd::v1::CalibrateConfig config;
  config.set_method("min_max");
  config.set_per_channel(true);
  auto result = Calibrate(config, {DigitsBatch(0, 16)});
  ASSERT_TRUE(result.ok()) << result.status();
  const auto* conv1 = Find(*result, "/0/Conv_output_0");
  ASSERT_NE(conv1, nullptr);
  EXPECT_EQ(conv1->axis(), 1);
  EXPECT_EQ(conv1->channel_min_size(), 16);  // Conv2d(1, 16, 3).
}

TEST(RunCalibrateTest, ObservedActivationsNeedNoModelRun) {
  quantd::v1::TensorBatch batch;
  auto* t = batch.add_tensors();
  t->set_name("/1/Relu_output_0");
  t->set_data_type(onnx::TensorProto::FLOAT);
  // The shape the model gives the tensor ([?,16,8,8]): batches are checked
  // against it.
  for (int64_t d : {1, 16, 8, 8}) t->add_shape(d);
  std::vector<float> values(16 * 8 * 8, 0.0f);
  values[0] = -1.0f;
  values[1] = 3.5f;
  t->set_data(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(float));
  quantd::v1::CalibrateConfig config;
  auto result = Calibrate(config, {batch});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->ranges_size(), 1);
  EXPECT_FLOAT_EQ(result->ranges(0).min(), -1.0f);
  EXPECT_FLOAT_EQ(result->ranges(0).max(), 3.5f);
}

TEST(RunCalibrateTest, BadBatchesAreInvalidArgumentNamingTheProblem) {
  quantd::v1::CalibrateConfig config;
  quantd::v1::TensorBatch unknown = DigitsBatch(0, 1, "no_such_tensor");
  auto r = Calibrate(config, {unknown});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("no_such_tensor"));

  quantd::v1::TensorBatch short_data = DigitsBatch(0, 2);
  short_data.mutable_tensors(0)->mutable_data()->resize(10);
  r = Calibrate(config, {DigitsBatch(0, 1), short_data});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("calibration batch 2"));

  r = Calibrate(config, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("no calibration batches"));

  config.set_method("median");
  r = Calibrate(config, {DigitsBatch(0, 1)});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("median"));
}

TEST(RunCalibrateTest, CancelledBeforeTheFirstBatch) {
  CancellationToken cancel;
  cancel.Cancel();
  auto q = Queue({DigitsBatch(0, 1)});
  auto r =
      RunCalibrate({}, ReadFileOrDie(SourcePath("examples/digits/model.onnx")),
                   q.get(), {}, cancel, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
}

quantd::v1::QuantizeConfig StaticConfig() {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  return config;
}

absl::StatusOr<QuantizeResult> Quantize(const quantd::v1::QuantizeConfig& c,
                                        BatchQueue* batches) {
  CancellationToken cancel;
  return RunQuantize(c, ReadFileOrDie(SourcePath("examples/digits/model.onnx")),
                     {}, cancel, nullptr, batches);
}

int Count(const onnx::ModelProto& m, const std::string& op) {
  int n = 0;
  for (const auto& node : m.graph().node()) n += node.op_type() == op;
  return n;
}

void ExpectStaticQdqModel(const QuantizeResult& result) {
  auto model = graph::ParseModel(result.model);
  ASSERT_TRUE(model.ok());
  std::vector<std::string> validations;
  EXPECT_TRUE(graph::ValidateModel(*model, "output", &validations).ok());
  // conv1 and fc2 keep float weights (under 1024 elements) and read float
  // inputs. Activations: conv2's input (conv1's relu), conv2's relu, fc1's
  // input (the Flatten output); fc1's relu is read only by float fc2, so
  // neither it nor fc1's output gets a point: 3.
  EXPECT_EQ(Count(*model, "QuantizeLinear"), 3);
  EXPECT_EQ(Count(*model, "DynamicQuantizeLinear"), 0);
  EXPECT_GT(result.summary.quantized_tensors(), 4);
}

TEST(StaticRangeQuantizeTest, InlineBatchesCalibrateThenQuantize) {
  auto q = Queue({DigitsBatch(0, 32), DigitsBatch(32, 64)});
  auto result = Quantize(StaticConfig(), q.get());
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectStaticQdqModel(*result);
  bool calibrate_stage = false;
  for (const auto& d : result->summary.stage_durations()) {
    calibrate_stage |= d.stage() == quantd::v1::STAGE_CALIBRATE;
  }
  EXPECT_TRUE(calibrate_stage);
}

TEST(StaticRangeQuantizeTest, RangesFromCalibrateGiveTheSameModel) {
  quantd::v1::CalibrateConfig calibrate;
  calibrate.set_method("min_max");
  auto ranges = Calibrate(calibrate, {DigitsBatch(0, 32), DigitsBatch(32, 64)});
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  quantd::v1::QuantizeConfig config = StaticConfig();
  *config.mutable_calibration() = *ranges;
  auto from_ranges = Quantize(config, nullptr);
  ASSERT_TRUE(from_ranges.ok()) << from_ranges.status();
  ExpectStaticQdqModel(*from_ranges);

  auto q = Queue({DigitsBatch(0, 32), DigitsBatch(32, 64)});
  auto inline_result = Quantize(StaticConfig(), q.get());
  ASSERT_TRUE(inline_result.ok());
  EXPECT_EQ(from_ranges->model, inline_result->model)
      << "calibrating in the call must equal calibrating first";
}

TEST(StaticRangeQuantizeTest, NoRangesNoBatchesIsFailedPrecondition) {
  auto r = Quantize(StaticConfig(), nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(r.status()), HasSubstr("calibration"));
  auto empty = Queue({});
  r = Quantize(StaticConfig(), empty.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StaticRangeQuantizeTest, RangesAndBatchesTogetherAreInvalid) {
  quantd::v1::QuantizeConfig config = StaticConfig();
  auto* range = config.mutable_calibration()->add_ranges();
  range->set_tensor_name("input");
  range->set_max(1.0f);
  auto q = Queue({DigitsBatch(0, 4)});
  auto r = Quantize(config, q.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("one or the other"));
}

TEST(StaticRangeQuantizeTest, RangesForUnknownTensorsAreInvalidArgument) {
  quantd::v1::QuantizeConfig config = StaticConfig();
  auto* range = config.mutable_calibration()->add_ranges();
  range->set_tensor_name("not_in_model");
  range->set_max(1.0f);
  auto r = Quantize(config, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("not_in_model"));
}

TEST(StaticRangeQuantizeTest, QuantDelayLongerThanCalibrationIsRefused) {
  quantd::v1::QuantizeConfig config = StaticConfig();
  config.mutable_activation_params()->set_quant_delay(5);
  config.mutable_activation_params()->set_moving_avg(true);
  auto q = Queue({DigitsBatch(0, 8), DigitsBatch(8, 16)});
  auto r = Quantize(config, q.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(r.status()), HasSubstr("quant_delay is 5"));
}

TEST(StaticRangeQuantizeTest, DynamicRangeRefusesCalibrationBatches) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::DYNAMIC_RANGE);
  auto q = Queue({DigitsBatch(0, 4)});
  auto r = Quantize(config, q.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("STATIC_RANGE"));
}

}  // namespace
}  // namespace quantd
