// End to end for DYNAMIC_RANGE with op_set XLA: a real quantd driven by the
// real quantctl; the output is checked by the ONNX checker and run in ONNX
// Runtime (onnxruntime-node), whose ConvInteger / MatMulInteger kernels are
// the independent judge of the integer lowering.
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "tests/support/ort.h"
#include "tests/support/quantd_fixture.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kModel = SourcePath("examples/digits/model.onnx");
const std::string kTestX = SourcePath("examples/digits/test_x.npy");
const std::string kTestY = SourcePath("examples/digits/test_y.npy");

struct OpCounts {
  int conv_integer = 0, matmul_integer = 0, dynamic_quantize = 0,
      dequantize = 0, cast = 0, float_conv = 0, float_gemm = 0;
};

OpCounts Count(const onnx::ModelProto& model) {
  OpCounts c;
  for (const auto& node : model.graph().node()) {
    const std::string& op = node.op_type();
    c.conv_integer += op == "ConvInteger";
    c.matmul_integer += op == "MatMulInteger";
    c.dynamic_quantize += op == "DynamicQuantizeLinear";
    c.dequantize += op == "DequantizeLinear";
    c.cast += op == "Cast";
    c.float_conv += op == "Conv";
    c.float_gemm += op == "Gemm" || op == "MatMul";
  }
  return c;
}

class XlaE2eTest : public QuantdServerTest {
 protected:
  // Quantizes the digits model with op_set XLA (plus `extra` flags), checks
  // the output with the ONNX checker, and returns it parsed.
  onnx::ModelProto Quantize(const TempDir& tmp, const std::string& out,
                            std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"quantize",
                                     "--model=" + kModel,
                                     "--output=" + out,
                                     "--method=dynamic_range",
                                     "--precision=w8a8",
                                     "--op_set=xla",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult r = Quantctl(args);
    onnx::ModelProto model;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("\"summary\""));
    EXPECT_THAT(r.out, HasSubstr("XLA"));
    EXPECT_TRUE(model.ParseFromString(ReadFileOrDie(out)));
    EXPECT_NO_THROW(onnx::checker::check_model(model));
    return model;
  }

  static void ExpectAccuracy(const std::string& out, const char* what) {
    const double float_acc = OrtAccuracy(kModel, kTestX, kTestY);
    const double quant_acc = OrtAccuracy(out, kTestX, kTestY);
    std::printf(
        "digits top-1 in ONNX Runtime: float %.4f, DYNAMIC_RANGE W8A8 XLA "
        "(%s) %.4f\n",
        float_acc, what, quant_acc);
    EXPECT_GT(float_acc, 0.9);
    EXPECT_GE(quant_acc, float_acc - 0.01);
  }
};

TEST_F(XlaE2eTest, DynamicRangeXlaRunsIntegerOpsInOrtAndKeepsAccuracy) {
  TempDir tmp;
  const std::string out = tmp.File("digits_xla.onnx");
  onnx::ModelProto model = Quantize(tmp, out);
  const OpCounts c = Count(model);
  // The default minimum of 1024 elements quantizes conv2 and fc1 (the first
  // conv and the last Linear stay float).
  EXPECT_EQ(c.conv_integer, 1);
  EXPECT_EQ(c.matmul_integer, 1);
  EXPECT_EQ(c.dynamic_quantize, 2);
  EXPECT_EQ(c.cast, 2);
  EXPECT_EQ(c.dequantize, 0) << "no DequantizeLinear on weights";
  EXPECT_EQ(c.float_conv, 1);
  EXPECT_EQ(c.float_gemm, 1);
  ExpectAccuracy(out, "default minimum");
}

TEST_F(XlaE2eTest, EveryWeightQuantizedStillKeepsAccuracy) {
  TempDir tmp;
  const std::string options = tmp.File("options.txtpb");
  WriteFileOrDie(options, "min_num_elements_for_weights: -1\n");
  const std::string out = tmp.File("digits_xla_all.onnx");
  onnx::ModelProto model = Quantize(tmp, out, {"--options=" + options});
  const OpCounts c = Count(model);
  EXPECT_EQ(c.conv_integer, 2);
  EXPECT_EQ(c.matmul_integer, 2);
  EXPECT_EQ(c.dequantize, 0);
  EXPECT_EQ(c.float_conv, 0);
  EXPECT_EQ(c.float_gemm, 0);
  ExpectAccuracy(out, "every weight");
}

TEST_F(XlaE2eTest, UnsupportedCombinationsStayUnimplemented) {
  TempDir tmp;
  CommandResult r = Quantctl(
      {"quantize", "--model=" + kModel, "--output=" + tmp.File("out.onnx"),
       "--method=dynamic_range", "--op_set=xla", "--precision=w4a8"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, StartsWith("UNIMPLEMENTED: "));
  EXPECT_THAT(r.err, HasSubstr("XLA"));
  ExpectServing();
}

}  // namespace
}  // namespace quantd::testing
