// End to end: STATIC_RANGE on the digits example. quantctl calibrate collects
// activation ranges from calib_x.npy through a real quantd; quantctl quantize
// uses them (--calibration) or calibrates inline (--calibration_data); ONNX
// Runtime checks the quantized model's accuracy against the float one.
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"
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
