// End to end: STATIC_RANGE on the digits example. quantctl calibrate collects
// activation ranges from calib_x.npy through a real quantd; quantctl quantize
// uses them (--calibration) or calibrates inline (--calibration_data); ONNX
// Runtime checks the quantized model's accuracy against the float one.
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/ort.h"
#include "tests/support/quantd_fixture.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kModel = SourcePath("examples/digits/model.onnx");
const std::string kCalibX = SourcePath("examples/digits/calib_x.npy");
const std::string kTestX = SourcePath("examples/digits/test_x.npy");
const std::string kTestY = SourcePath("examples/digits/test_y.npy");
// ONNX Runtime's float accuracy on the test set (examples/digits/README.md).
constexpr double kFloatAccuracy = 0.9778;

class CalibrateE2eTest : public QuantdServerTest {
 protected:
  double OrtAccuracy(const std::string& model) {
    return testing::OrtAccuracy(model, kTestX, kTestY);
  }

  // A quantized model: valid for the checker, with QDQ pairs for the
  // activations, and within a point of the float accuracy in ONNX Runtime.
  void ExpectGoodStaticModel(const std::string& path, const char* label) {
    onnx::ModelProto model;
    ASSERT_TRUE(model.ParseFromString(ReadFileOrDie(path)));
    EXPECT_NO_THROW(onnx::checker::check_model(model));
    int quantize = 0;
    for (const auto& node : model.graph().node()) {
      quantize += node.op_type() == "QuantizeLinear";
    }
    EXPECT_GT(quantize, 0) << "no activation is quantized";
    const double accuracy = OrtAccuracy(path);
    std::printf(
        "digits top-1 in ONNX Runtime: float %.4f, STATIC_RANGE (%s) "
        "%.4f\n",
        kFloatAccuracy, label, accuracy);
    EXPECT_GE(accuracy, kFloatAccuracy - 0.01);
  }
};

TEST_F(CalibrateE2eTest, CalibrateWritesARangeForTheInputAndEveryActivation) {
  TempDir tmp;
  const std::string ranges_path = tmp.File("ranges.pb");
  CommandResult r =
      Quantctl({"calibrate", "--model=" + kModel, "--data=" + kCalibX,
                "--batch_size=16", "--output=" + ranges_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("TENSOR"));
  EXPECT_THAT(r.out, HasSubstr("wrote:"));

  quantd::v1::CalibrationResult ranges;
  ASSERT_TRUE(ranges.ParseFromString(ReadFileOrDie(ranges_path)));
  EXPECT_EQ(ranges.batch_count(), 4);  // 64 samples in batches of 16.
  EXPECT_EQ(ranges.method(), "min_max");
  std::set<std::string> names;
  for (const quantd::v1::TensorRange& range : ranges.ranges()) {
    names.insert(range.tensor_name());
    EXPECT_LE(range.min(), range.max()) << range.tensor_name();
  }
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(ReadFileOrDie(kModel)));
  EXPECT_TRUE(names.count("input")) << "no range for the input";
  for (const auto& node : model.graph().node()) {
    for (const std::string& output : node.output()) {
      EXPECT_TRUE(names.count(output)) << "no range for activation " << output
                                       << " (" << node.op_type() << ")";
    }
  }
  ExpectServing();
}

TEST_F(CalibrateE2eTest, CalibrateJsonAndNamedData) {
  TempDir tmp;
  CommandResult r = Quantctl(
      {"calibrate", "--model=" + kModel, "--data=input=" + kCalibX,
       "--method=moving_average", "--output=" + tmp.File("r.pb"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("{"));
  EXPECT_THAT(r.out, HasSubstr("\"ranges\""));
  EXPECT_THAT(r.out, HasSubstr("moving_average"));
}

TEST_F(CalibrateE2eTest, StaticRangeWithRangesFromCalibrate) {
  TempDir tmp;
  const std::string ranges = tmp.File("ranges.pb");
  CommandResult c = Quantctl({"calibrate", "--model=" + kModel,
                              "--data=" + kCalibX, "--output=" + ranges});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const std::string out = tmp.File("static.onnx");
  CommandResult q =
      Quantctl({"quantize", "--model=" + kModel, "--output=" + out,
                "--method=static_range", "--calibration=" + ranges, "--json"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  ExpectGoodStaticModel(out, "--calibration");
}

TEST_F(CalibrateE2eTest, StaticRangeWithInlineCalibrationData) {
  TempDir tmp;
  const std::string out = tmp.File("static_inline.onnx");
  CommandResult q =
      Quantctl({"quantize", "--model=" + kModel, "--output=" + out,
                "--method=static_range", "--calibration_data=" + kCalibX,
                "--calibration_method=min_max", "--batch_size=8", "--json"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  ExpectGoodStaticModel(out, "--calibration_data");
}

// calibration_method auto through the real server and quantctl: the table
// of candidates, the kept one, a model ONNX Runtime runs at float's top-1;
// `quantctl calibrate` refuses auto before calling.
TEST_F(CalibrateE2eTest, AutoObserverPrintsItsCandidatesAndKeepsOne) {
  TempDir tmp;
  const std::string out = tmp.File("static_auto.onnx");
  CommandResult q =
      Quantctl({"quantize", "--model=" + kModel, "--output=" + out,
                "--method=static_range", "--calibration_data=" + kCalibX,
                "--calibration_method=auto", "--batch_size=16"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_THAT(q.out, HasSubstr("calibration method auto: kept "));
  for (const char* m :
       {"min_max", "percentile", "mse", "entropy", "entropy_unguarded"}) {
    EXPECT_THAT(q.out, HasSubstr(std::string("\n") + m + " "));
  }
  EXPECT_THAT(q.out, HasSubstr("<- kept"));
  ExpectGoodStaticModel(out, "--calibration_method=auto");
  CommandResult c =
      Quantctl({"calibrate", "--model=" + kModel, "--data=" + kCalibX,
                "--method=auto", "--output=" + tmp.File("r.pb")});
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_THAT(c.err, HasSubstr("--method=auto is not one of"));
  EXPECT_FALSE(std::filesystem::exists(tmp.File("r.pb")));
}

// --headroom through quantctl and the real server: calibrate's ranges are
// the plain ones times the factor; quantize with held-out batches and auto
// also tries widened min_max and prints it by its factor; out of [1, 16] the
// server refuses it by name and writes nothing.
TEST_F(CalibrateE2eTest, HeadroomWidensRangesAndAutoTriesIt) {
  TempDir tmp;
  auto ranges = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"calibrate", "--model=" + kModel,
                                     "--data=" + kCalibX,
                                     "--output=" + tmp.File("r.pb")};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult c = Quantctl(args);
    EXPECT_EQ(c.exit_code, 0) << c.err;
    quantd::v1::CalibrationResult r;
    EXPECT_TRUE(r.ParseFromString(ReadFileOrDie(tmp.File("r.pb"))));
    return r;
  };
  const quantd::v1::CalibrationResult plain = ranges({});
  const quantd::v1::CalibrationResult wide = ranges({"--headroom=1.5"});
  ASSERT_EQ(plain.ranges_size(), wide.ranges_size());
  ASSERT_GT(plain.ranges_size(), 0);
  for (int i = 0; i < plain.ranges_size(); ++i) {
    EXPECT_EQ(wide.ranges(i).min(), plain.ranges(i).min() * 1.5f);
    EXPECT_EQ(wide.ranges(i).max(), plain.ranges(i).max() * 1.5f);
  }

  const std::string out = tmp.File("auto_headroom.onnx");
  CommandResult q = Quantctl(
      {"quantize", "--model=" + kModel, "--output=" + out,
       "--method=static_range", "--calibration_data=" + kCalibX,
       "--calibration_method=auto", "--batch_size=16", "--holdout_batches=1"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_THAT(q.out, HasSubstr("held-out batches"));
  for (const char* m : {"\nmin_max x1.1 ", "\nmin_max x1.25 ",
                        "\nmin_max x1.5 ", "\nmin_max x2 "}) {
    EXPECT_THAT(q.out, HasSubstr(m));
  }
  ExpectGoodStaticModel(out, "--calibration_method=auto --holdout_batches=1");

  const std::string folded = tmp.File("auto_headroom_folds.onnx");
  CommandResult f =
      Quantctl({"quantize", "--model=" + kModel, "--output=" + folded,
                "--method=static_range", "--calibration_data=" + kCalibX,
                "--auto_headroom", "--batch_size=16"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_THAT(f.out, HasSubstr("auto_headroom: kept min_max"));
  EXPECT_THAT(f.out, HasSubstr("4 batches in 4 folds"));
  EXPECT_THAT(f.out, HasSubstr("\nmin_max x1.5 "));
  ExpectGoodStaticModel(folded, "--auto_headroom");

  CommandResult bad =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("bad.onnx"), "--method=static_range",
                "--calibration_data=" + kCalibX, "--headroom=20"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(bad.err, HasSubstr("headroom: must be in [1, 16]"));
  EXPECT_FALSE(std::filesystem::exists(tmp.File("bad.onnx")));
  ExpectServing();
}

TEST_F(CalibrateE2eTest, MismatchedSampleCountsFailBeforeCalling) {
  TempDir tmp;
  CommandResult r =
      Quantctl({"calibrate", "--model=" + kModel, "--data=a=" + kCalibX,
                "--data=b=" + kTestX, "--output=" + tmp.File("r.pb")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("INVALID_ARGUMENT: "));
  EXPECT_THAT(r.err, HasSubstr("calib_x.npy has 64"));
  EXPECT_THAT(r.err, HasSubstr("test_x.npy has 360"));
  EXPECT_FALSE(std::filesystem::exists(tmp.File("r.pb")));
}

TEST_F(CalibrateE2eTest, UnknownTensorNameIsAnErrorFromTheServer) {
  TempDir tmp;
  CommandResult r = Quantctl({"calibrate", "--model=" + kModel,
                              "--data=no_such_tensor=" + kCalibX,
                              "--output=" + tmp.File("r.pb")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no_such_tensor"));
  EXPECT_FALSE(std::filesystem::exists(tmp.File("r.pb")));
  ExpectServing();
}

// A stateful model as exporters write them (Silero VAD's shape): a scalar
// sample rate `sr` and a recurrent state `h` [layers, batch, hidden] next to
// the batched input. y = (x W + h[0]) * sr. quantctl sends sr whole with
// every batch and cuts h along axis 1; with x = 0 and h[l, n, :] = 100 l + n
// the range of y is exactly [0, (samples - 1) * sr].
TEST_F(CalibrateE2eTest, ScalarInputsAndASampleAxisOtherThanTheFirst) {
  constexpr int64_t kSamples = 8, kHidden = 4;
  testing::ModelBuilder b;
  b.Input("x", {1, kHidden})
      .Input("sr", {}, onnx::TensorProto::INT64)
      .Input("h", {2, 1, kHidden})
      .Output("y", {1, kHidden})
      .Weight("w", {kHidden, kHidden}, 3)
      .Node("MatMul", {"x", "w"}, {"xw"})
      .Node("Gather", {"h", "layer0"}, {"h0"})
      .Node("Add", {"xw", "h0"}, {"a"})
      .Node("Cast", {"sr"}, {"srf"})
      .Attr("to", int64_t{onnx::TensorProto::FLOAT})
      .Node("Mul", {"a", "srf"}, {"y"});
  onnx::ModelProto model = b.Build();
  onnx::TensorProto* layer0 = model.mutable_graph()->add_initializer();
  layer0->set_name("layer0");
  layer0->set_data_type(onnx::TensorProto::INT64);
  layer0->add_int64_data(0);
  // The batch dims are symbolic, as exporters leave them.
  auto dim = [&](int input, int axis) {
    return model.mutable_graph()
        ->mutable_input(input)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(axis);
  };
  dim(0, 0)->set_dim_param("batch");
  dim(2, 1)->set_dim_param("batch");
  model.mutable_graph()
      ->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("batch");

  TempDir tmp;
  const std::string model_path = tmp.File("stateful.onnx");
  WriteFileOrDie(model_path, model.SerializeAsString());
  std::vector<float> state;
  for (int l = 0; l < 2; ++l) {
    for (int n = 0; n < kSamples; ++n) {
      for (int k = 0; k < kHidden; ++k) state.push_back(100.0f * l + n);
    }
  }
  using quantd::executor::Tensor;
  const std::string x = tmp.File("x.npy"), sr = tmp.File("sr.npy"),
                    h = tmp.File("h.npy"), ranges_path = tmp.File("r.pb");
  ASSERT_TRUE(quantd::executor::WriteNpyFile(
                  x, Tensor::FromVector<float>(
                         {kSamples, kHidden},
                         std::vector<float>(kSamples * kHidden, 0.0f)))
                  .ok());
  ASSERT_TRUE(
      quantd::executor::WriteNpyFile(sr, Tensor::Scalar<int64_t>(1000)).ok());
  ASSERT_TRUE(quantd::executor::WriteNpyFile(
                  h, Tensor::FromVector<float>({2, kSamples, kHidden}, state))
                  .ok());
  CommandResult r =
      Quantctl({"calibrate", "--model=" + model_path, "--data=x=" + x,
                "--data=sr=" + sr, "--data=h=" + h, "--sample_axis=h=1",
                "--batch_size=3", "--output=" + ranges_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  quantd::v1::CalibrationResult ranges;
  ASSERT_TRUE(ranges.ParseFromString(ReadFileOrDie(ranges_path)));
  EXPECT_EQ(ranges.batch_count(), 3);  // 8 samples in batches of 3.
  bool saw_y = false;
  for (const quantd::v1::TensorRange& range : ranges.ranges()) {
    if (range.tensor_name() != "y") continue;
    saw_y = true;
    EXPECT_FLOAT_EQ(range.min(), 0.0f);
    EXPECT_FLOAT_EQ(range.max(), (kSamples - 1) * 1000.0f);
  }
  EXPECT_TRUE(saw_y) << "no range for y";

  // Without --sample_axis, h's first axis (2 layers) is not 8 samples long.
  r = Quantctl({"calibrate", "--model=" + model_path, "--data=x=" + x,
                "--data=sr=" + sr, "--data=h=" + h, "--output=" + ranges_path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("has 2 on axis 0"));
}

TEST_F(CalibrateE2eTest, UsageErrors) {
  TempDir tmp;
  // No --data.
  CommandResult r = Quantctl(
      {"calibrate", "--model=" + kModel, "--output=" + tmp.File("r.pb")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("INVALID_ARGUMENT: "));
  // An unknown observer.
  r = Quantctl({"calibrate", "--model=" + kModel, "--data=" + kCalibX,
                "--method=median", "--output=" + tmp.File("r.pb")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--method=median is not one of"));
  // --data is not a quantize flag.
  r = Quantctl({"quantize", "--model=" + kModel, "--data=" + kCalibX,
                "--output=" + tmp.File("o.onnx")});
  EXPECT_EQ(r.exit_code, 2);
  // A --calibration file that is not a CalibrationResult.
  WriteFileOrDie(tmp.File("bad.pb"), "\xff\xff");
  r = Quantctl({"quantize", "--model=" + kModel, "--method=static_range",
                "--calibration=" + tmp.File("bad.pb"),
                "--output=" + tmp.File("o.onnx")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("INVALID_ARGUMENT: "));
  EXPECT_THAT(r.err, HasSubstr("bad.pb"));
}

}  // namespace
}  // namespace quantd::testing
