// The acceptance matrix of issue 4: every (method x op set x precision) of
// the capability table, on the digits example. A combination the table
// serves must produce a model that
//   - ONNX Runtime runs, with top-1 accuracy within 1 point of float for
//     W8A8 and 3 points for W4A8 (FULL: unchanged accuracy);
//   - our own executor runs too, with logits that agree with ONNX Runtime's
//     on the same quantized model within one quantization step of the
//     logits' range at the activation bit width.
// A combination the table refuses must fail with an error that names the
// method, op set and precision. Every measured number is printed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/base/thread_pool.h"
#include "core/engine/batch_queue.h"
#include "core/engine/capabilities.h"
#include "core/engine/engine.h"
#include "core/engine/resolved_options.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/graph/model_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/batches.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

using ::quantd::testing::BatchesOf;
using ::quantd::testing::OrtEval;
using ::quantd::testing::ReadFileOrDie;
using ::quantd::testing::SourcePath;
using ::quantd::testing::TempDir;
using ::quantd::testing::WriteFileOrDie;
using ::testing::HasSubstr;
namespace tfq = tensorflow::quantization;

constexpr char kExample[] = "examples/digits";

std::string ExamplePath(const std::string& file) {
  return SourcePath(std::string(kExample) + "/" + file);
}

double FloatAccuracy() {
  static const double acc =
      testing::OrtAccuracy(ExamplePath("model.onnx"), ExamplePath("test_x.npy"),
                           ExamplePath("test_y.npy"));
  return acc;
}

Method MethodOf(const std::string& name) {
  return name == MethodName(Method::kStaticRange) ? Method::kStaticRange
                                                  : Method::kDynamicRange;
}

absl::StatusOr<QuantizeResult> Quantize(const quantd::v1::Capability& c) {
  quantd::v1::QuantizeConfig config;
  tfq::QuantizationOptions* options = config.mutable_options();
  const Method method = MethodOf(c.method());
  options->mutable_quantization_method()->set_experimental_method(
      method == Method::kStaticRange ? tfq::QuantizationMethod::STATIC_RANGE
                                     : tfq::QuantizationMethod::DYNAMIC_RANGE);
  options->set_op_set(c.op_set());
  options->set_quantization_precision(c.precision());
  std::vector<quantd::v1::TensorBatch> batches;
  if (method == Method::kStaticRange) {
    config.mutable_calibration_config()->set_method("min_max");
    absl::StatusOr<executor::Tensor> calib =
        executor::ReadNpyFile(ExamplePath("calib_x.npy"));
    EXPECT_TRUE(calib.ok()) << calib.status();
    if (calib.ok()) batches = BatchesOf(*calib, 32);
  }
  BatchQueue queue(batches.size() + 1);
  for (auto& b : batches) queue.Push(std::move(b));
  queue.Close();
  CancellationToken cancel;
  ThreadPool pool(1);
  return RunQuantize(config, ReadFileOrDie(ExamplePath("model.onnx")), {},
                     cancel, &pool,
                     method == Method::kStaticRange ? &queue : nullptr);
}

// Our executor's first output for `x` on `model_bytes`.
absl::StatusOr<executor::Tensor> RunOwn(const std::string& model_bytes,
                                        const executor::Tensor& x) {
  absl::StatusOr<onnx::ModelProto> model = graph::ParseModel(model_bytes);
  if (!model.ok()) return model.status();
  auto exec = executor::Executor::Create(*model);
  if (!exec.ok()) return exec.status();
  ThreadPool pool(1);
  executor::Executor::RunOptions run;
  run.pool = &pool;
  auto out = (*exec)->Run({{(*exec)->input_names()[0], x}}, run);
  if (!out.ok()) return out.status();
  return (*out)[0];
}

std::string CellName(const quantd::v1::Capability& c) {
  return absl::StrCat(
      c.method(), "_", OpSetName(c.op_set()), "_",
      absl::StrReplaceAll(PrecisionName(c.precision()), {{"PRECISION_", ""}}));
}

class AcceptanceMatrixTest : public ::testing::TestWithParam<int> {};

TEST_P(AcceptanceMatrixTest, ServedOrRefusedByName) {
  const quantd::v1::Capability& c = CapabilityTable()[GetParam()];
  const std::string cell = CellName(c);
  absl::StatusOr<QuantizeResult> result = Quantize(c);
  if (!c.supported()) {
    ASSERT_FALSE(result.ok()) << cell << " is refused by the table but ran";
    const std::string msg(result.status().message());
    EXPECT_THAT(msg, HasSubstr(c.method())) << cell;
    EXPECT_THAT(msg, HasSubstr(OpSetName(c.op_set()))) << cell;
    EXPECT_THAT(msg, HasSubstr(PrecisionName(c.precision()))) << cell;
    std::printf("measured: %s refused: %s\n", cell.c_str(),
                std::string(result.status().message()).substr(0, 160).c_str());
    return;
  }
  ASSERT_TRUE(result.ok()) << cell << ": " << result.status();
  TempDir tmp;
  const std::string out = tmp.File("quantized.onnx");
  WriteFileOrDie(out, result->model);

  // Independent judge: accuracy in ONNX Runtime.
  const double float_acc = FloatAccuracy();
  const double quant_acc = testing::OrtAccuracy(out, ExamplePath("test_x.npy"),
                                                ExamplePath("test_y.npy"));
  const size_t in_bytes = ReadFileOrDie(ExamplePath("model.onnx")).size();
  std::printf(
      "measured: %s top-1 float %.4f quantized %.4f (ONNX Runtime); size "
      "%zu -> %zu bytes (%.1f%%)\n",
      cell.c_str(), float_acc, quant_acc, in_bytes, result->model.size(),
      100.0 * result->model.size() / in_bytes);
  switch (c.precision()) {
    case tfq::PRECISION_FULL:
      EXPECT_DOUBLE_EQ(quant_acc, float_acc) << cell;
      break;
    case tfq::PRECISION_W8A8:
      EXPECT_GE(quant_acc, float_acc - 0.01) << cell;
      break;
    case tfq::PRECISION_W4A8:
      EXPECT_GE(quant_acc, float_acc - 0.03) << cell;
      break;
    default:  // W4A4: measured only (the issue sets no bound).
      EXPECT_GT(quant_acc, 0.1) << cell << " is no better than chance";
      break;
  }

  // Our executor against ONNX Runtime on the same quantized model.
  const std::string ort_out = tmp.File("ort_logits.npy");
  OrtEval({"run", "--model", out, "--x", ExamplePath("test_x.npy"), "--out",
           ort_out});
  absl::StatusOr<executor::Tensor> ort = executor::ReadNpyFile(ort_out);
  ASSERT_TRUE(ort.ok()) << ort.status();
  absl::StatusOr<executor::Tensor> x =
      executor::ReadNpyFile(ExamplePath("test_x.npy"));
  ASSERT_TRUE(x.ok()) << x.status();
  absl::StatusOr<executor::Tensor> own = RunOwn(result->model, *x);
  ASSERT_TRUE(own.ok()) << cell << ": our executor: " << own.status();
  ASSERT_EQ(own->shape(), ort->shape()) << cell;
  const float* a = ort->data<float>();
  const float* b = own->data<float>();
  float lo = a[0], hi = a[0], max_diff = 0;
  for (int64_t i = 0; i < ort->size(); ++i) {
    lo = std::min(lo, a[i]);
    hi = std::max(hi, a[i]);
    max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
  }
  const int activation_bits = c.precision() == tfq::PRECISION_W4A4 ? 4 : 8;
  const float step = (hi - lo) / ((1 << activation_bits) - 1);
  std::printf(
      "measured: %s own executor vs ONNX Runtime: max |diff| %.3g = %.3f "
      "quantization steps of the logits\n",
      cell.c_str(), max_diff, step > 0 ? max_diff / step : 0.0);
  EXPECT_LE(max_diff, step) << cell;
}

INSTANTIATE_TEST_SUITE_P(
    EveryCombination, AcceptanceMatrixTest,
    ::testing::Range(0, static_cast<int>(CapabilityTable().size())),
    [](const ::testing::TestParamInfo<int>& info) {
      return CellName(CapabilityTable()[info.param]);
    });

}  // namespace
}  // namespace quantd
