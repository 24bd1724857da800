// End to end for STATIC_RANGE with op sets XLA (ConvInteger / MatMulInteger
// + rescale) and UNIFORM_QUANTIZED (QLinearConv / QLinearMatMul): a real
// quantd driven by quantctl, calibrating inline from the examples'
// calib_x.npy; ONNX Runtime (onnxruntime-node) runs the output as the
// independent judge: top-1 within one point of the float model on the
// digits CNN and the digits transformer. Our executor must agree with ONNX
// Runtime on the lowered models. Sizes, node counts and the Q/DQ left are
// printed as "measured:" lines.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/executor/executor.h"
#include "core/executor/npy.h"
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

struct Example {
  std::string name, dir;
};

const Example kDigits{"digits", SourcePath("examples/digits")};
const Example kTransformer{"digits_transformer",
                           SourcePath("examples/digits_transformer")};

int Count(const onnx::ModelProto& m, const std::string& op) {
  int n = 0;
  for (const auto& node : m.graph().node()) n += node.op_type() == op;
  return n;
}

class StaticOpSetsE2eTest : public QuantdServerTest {
 protected:
  // Quantizes `e` with STATIC_RANGE W8A8 and `op_set`, calibrating inline;
  // checks the output with the ONNX checker and returns it parsed.
  onnx::ModelProto Quantize(const Example& e, const std::string& op_set,
                            const std::string& out, std::string* json,
                            std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "quantize",
        "--model=" + e.dir + "/model.onnx",
        "--output=" + out,
        "--method=static_range",
        "--precision=w8a8",
        "--op_set=" + op_set,
        "--calibration_data=" + e.dir + "/calib_x.npy",
        "--batch_size=32",
        "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult r = Quantctl(args);
    onnx::ModelProto model;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    *json = r.out;
    EXPECT_TRUE(model.ParseFromString(ReadFileOrDie(out)));
    EXPECT_NO_THROW(onnx::checker::check_model(model));
    return model;
  }

  // Accuracy in ONNX Runtime against the float model's, and the counts.
  void Measure(const Example& e, const std::string& op_set,
               const onnx::ModelProto& model, const std::string& out) {
    const double float_acc = OrtAccuracy(
        e.dir + "/model.onnx", e.dir + "/test_x.npy", e.dir + "/test_y.npy");
    const double quant_acc =
        OrtAccuracy(out, e.dir + "/test_x.npy", e.dir + "/test_y.npy");
    std::printf(
        "measured: %s STATIC_RANGE W8A8 %s: top-1 in ONNX Runtime float %.4f, "
        "quantized %.4f; model %lld -> %lld bytes; %d nodes, QuantizeLinear "
        "%d, DequantizeLinear %d, ConvInteger %d, "
        "MatMulInteger %d, QLinearConv %d, QLinearMatMul %d\n",
        e.name.c_str(), op_set.c_str(), float_acc, quant_acc,
        static_cast<long long>(
            std::filesystem::file_size(e.dir + "/model.onnx")),
        static_cast<long long>(std::filesystem::file_size(out)),
        model.graph().node_size(), Count(model, "QuantizeLinear"),
        Count(model, "DequantizeLinear"), Count(model, "ConvInteger"),
        Count(model, "MatMulInteger"), Count(model, "QLinearConv"),
        Count(model, "QLinearMatMul"));
    std::fflush(stdout);
    EXPECT_GT(float_acc, 0.9);
    EXPECT_GE(quant_acc, float_acc - 0.01);
  }

  // Our executor against ONNX Runtime on the lowered model, on the test
  // inputs: same top-1 almost everywhere, logits close.
  void ExpectExecutorAgreesWithOrt(const Example& e, const std::string& out,
                                   const TempDir& tmp) {
    const std::string ort_out = tmp.File("ort_logits.npy");
    OrtEval({"run", "--model", out, "--x", e.dir + "/test_x.npy", "--out",
             ort_out});
    absl::StatusOr<executor::Tensor> expected = executor::ReadNpyFile(ort_out);
    absl::StatusOr<executor::Tensor> x =
        executor::ReadNpyFile(e.dir + "/test_x.npy");
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(x.ok()) << x.status();
    onnx::ModelProto model;
    ASSERT_TRUE(model.ParseFromString(ReadFileOrDie(out)));
    absl::StatusOr<std::unique_ptr<executor::Executor>> ex =
        executor::Executor::Create(model);
    ASSERT_TRUE(ex.ok()) << ex.status();
    absl::StatusOr<std::vector<executor::Tensor>> got =
        (*ex)->Run({{(*ex)->input_names().at(0), *x}});
    ASSERT_TRUE(got.ok()) << got.status();
    const executor::Tensor& a = *expected;
    const executor::Tensor& b = got->at(0);
    ASSERT_EQ(a.size(), b.size());
    const int64_t classes = a.dim(a.rank() - 1);
    const int64_t n = a.size() / classes;
    int agree = 0;
    float max_diff = 0.0f, max_abs = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float* pa = a.data<float>() + i * classes;
      const float* pb = b.data<float>() + i * classes;
      agree += std::max_element(pa, pa + classes) - pa ==
               std::max_element(pb, pb + classes) - pb;
      for (int64_t c = 0; c < classes; ++c) {
        max_diff = std::max(max_diff, std::fabs(pa[c] - pb[c]));
        max_abs = std::max(max_abs, std::fabs(pa[c]));
      }
    }
    std::printf(
        "measured: %s executor vs ONNX Runtime on %s: top-1 agreement "
        "%.4f, max |logit diff| %g (max |logit| %g)\n",
        e.name.c_str(), out.c_str(), static_cast<double>(agree) / n, max_diff,
        max_abs);
    std::fflush(stdout);
    EXPECT_GE(agree, n - n / 100);
    EXPECT_LE(max_diff, 0.05f * max_abs);
  }
};

TEST_F(StaticOpSetsE2eTest, DigitsXlaRunsIntegerOpsInOrt) {
  TempDir tmp;
  const std::string out = tmp.File("digits_static_xla.onnx");
  std::string json;
  onnx::ModelProto model = Quantize(kDigits, "xla", out, &json);
  // The default minimum of 1024 elements keeps conv1's and fc2's weights
  // float; the activation points still make every node integer where its
  // weight is quantized.
  EXPECT_GE(Count(model, "ConvInteger"), 1);
  EXPECT_GE(Count(model, "MatMulInteger"), 1);
  EXPECT_EQ(Count(model, "DynamicQuantizeLinear"), 0);
  EXPECT_THAT(json, HasSubstr("op_set XLA: "));
  Measure(kDigits, "XLA", model, out);
  ExpectExecutorAgreesWithOrt(kDigits, out, tmp);
}

TEST_F(StaticOpSetsE2eTest, DigitsUniformQuantizedRunsQLinearOpsInOrt) {
  TempDir tmp;
  const std::string out = tmp.File("digits_static_uq.onnx");
  std::string json;
  onnx::ModelProto model = Quantize(kDigits, "uniform_quantized", out, &json);
  EXPECT_GE(Count(model, "QLinearConv"), 1);
  EXPECT_THAT(json, HasSubstr("op_set UNIFORM_QUANTIZED: "));
  // No QuantizeLinear requantizes a DequantizeLinear output.
  for (const auto& q : model.graph().node()) {
    if (q.op_type() != "QuantizeLinear") continue;
    for (const auto& p : model.graph().node()) {
      if (p.op_type() == "DequantizeLinear") {
        EXPECT_NE(p.output(0), q.input(0)) << q.name();
      }
    }
  }
  Measure(kDigits, "UNIFORM_QUANTIZED", model, out);
  ExpectExecutorAgreesWithOrt(kDigits, out, tmp);
}

TEST_F(StaticOpSetsE2eTest, DigitsEveryWeightInBothOpSets) {
  TempDir tmp;
  const std::string options = tmp.File("options.txtpb");
  WriteFileOrDie(options, "min_num_elements_for_weights: -1\n");
  // TF (QDQ) too, as the baseline of the printed sizes and counts.
  for (const std::string op_set : {"tf", "xla", "uniform_quantized"}) {
    const std::string out = tmp.File("digits_all_" + op_set + ".onnx");
    std::string json;
    onnx::ModelProto model =
        Quantize(kDigits, op_set, out, &json, {"--options=" + options});
    Measure(kDigits, op_set + " (every weight)", model, out);
    if (op_set == "tf") continue;
    EXPECT_EQ(Count(model, "Conv"), 0) << op_set;
    if (op_set == "xla") {
      EXPECT_EQ(Count(model, "Gemm"), 0);
      EXPECT_EQ(Count(model, "ConvInteger"), 2);
      EXPECT_EQ(Count(model, "MatMulInteger"), 2);
    } else {
      // fc2 writes the logits (a graph output): no output scale, so QDQ.
      EXPECT_EQ(Count(model, "QLinearConv"), 3);
      EXPECT_EQ(Count(model, "Gemm"), 1);
      EXPECT_THAT(json, HasSubstr("stays QDQ"));
    }
    ExpectExecutorAgreesWithOrt(kDigits, out, tmp);
  }
}

TEST_F(StaticOpSetsE2eTest, TransformerInBothOpSets) {
  for (const std::string op_set : {"tf", "xla", "uniform_quantized"}) {
    TempDir tmp;
    const std::string out = tmp.File("transformer_" + op_set + ".onnx");
    std::string json;
    onnx::ModelProto model = Quantize(kTransformer, op_set, out, &json);
    Measure(kTransformer, op_set, model, out);
    if (op_set == "tf") continue;  // The baseline of the printed counts.
    EXPECT_GE(Count(model, "MatMulInteger") + Count(model, "QLinearMatMul") +
                  Count(model, "QLinearConv"),
              1)
        << op_set;
    ExpectExecutorAgreesWithOrt(kTransformer, out, tmp);
  }
}

TEST_F(StaticOpSetsE2eTest, RefusedCombinationsSayWhy) {
  TempDir tmp;
  const std::string model = kDigits.dir + "/model.onnx";
  CommandResult r = Quantctl(
      {"quantize", "--model=" + model, "--output=" + tmp.File("a.onnx"),
       "--method=dynamic_range", "--op_set=uniform_quantized"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, StartsWith("UNIMPLEMENTED: "));
  EXPECT_THAT(r.err, HasSubstr("UNIFORM_QUANTIZED"));
  EXPECT_THAT(r.err, HasSubstr("static output scale"));
  EXPECT_THAT(r.err, HasSubstr("use STATIC_RANGE"));
  for (const std::string op_set : {"xla", "uniform_quantized"}) {
    r = Quantctl({"quantize", "--model=" + model,
                  "--output=" + tmp.File("b.onnx"), "--method=static_range",
                  "--op_set=" + op_set, "--precision=w4a8",
                  "--calibration_data=" + kDigits.dir + "/calib_x.npy"});
    EXPECT_NE(r.exit_code, 0) << op_set;
    EXPECT_THAT(r.err, StartsWith("UNIMPLEMENTED: ")) << op_set;
    EXPECT_THAT(r.err, HasSubstr("8-bit")) << op_set;
    EXPECT_FALSE(std::filesystem::exists(tmp.File("b.onnx")));
  }
  ExpectServing();
}

}  // namespace
}  // namespace quantd::testing
