// Acceptance tests of the 4-bit precisions on the bundled digits CNN
// (examples/digits), judged by ONNX Runtime (onnxruntime-node 1.30, through
// scripts/ort_eval.js), each through one in-process RunQuantize call:
//   - W4A8, DYNAMIC_RANGE and STATIC_RANGE (op set TF): top-1 test accuracy
//     within 3 points of float; the weights (INT4 values + scales + zero
//     points against the float initializers) shrink at least 6x;
//   - W4A4, STATIC_RANGE: runs in ONNX Runtime (accuracy printed; the issue
//     sets no bound, the test only asks for better than a coin's worth);
//   - W8A8 by default with one W4A8 unit: both storage types in one model;
//   - W4A4 with DYNAMIC_RANGE: refused, naming the combination.
// Every measured number is printed on a "measured:" line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "core/base/thread_pool.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "core/graph/model_io.h"
#include "core/graph/tensor_util.h"
#include "core/numerics/int4.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/batches.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

using ::quantd::testing::ReadFileOrDie;
using ::quantd::testing::SourcePath;
using ::quantd::testing::TempDir;
using ::quantd::testing::WriteFileOrDie;
using ::testing::HasSubstr;
namespace tfq = tensorflow::quantization;

// The digits CNN's Conv/Gemm weights.
const std::vector<std::string>& WeightNames() {
  static const auto* names = new std::vector<std::string>{
      "0.weight", "2.weight", "5.weight", "7.weight"};
  return *names;
}

std::string Dir() { return SourcePath("examples/digits"); }

quantd::v1::QuantizeConfig Config(
    tfq::QuantizationMethod::ExperimentalMethod method,
    tfq::QuantizationPrecision precision) {
  quantd::v1::QuantizeConfig config;
  tfq::QuantizationOptions* o = config.mutable_options();
  o->mutable_quantization_method()->set_experimental_method(method);
  o->set_op_set(tfq::TF);
  o->set_quantization_precision(precision);
  o->set_min_num_elements_for_weights(-1);  // Every weight, however small.
  return config;
}

absl::StatusOr<QuantizeResult> RunDigits(
    const quantd::v1::QuantizeConfig& config) {
  const bool is_static =
      config.options().quantization_method().experimental_method() ==
      tfq::QuantizationMethod::STATIC_RANGE;
  CancellationToken cancel;
  ThreadPool pool(1);
  if (!is_static) {
    return RunQuantize(config, ReadFileOrDie(Dir() + "/model.onnx"), {}, cancel,
                       &pool);
  }
  quantd::v1::QuantizeConfig c = config;
  c.mutable_calibration_config()->set_method("min_max");
  absl::StatusOr<executor::Tensor> calib =
      executor::ReadNpyFile(Dir() + "/calib_x.npy");
  if (!calib.ok()) return calib.status();
  std::vector<quantd::v1::TensorBatch> batches =
      ::quantd::testing::BatchesOf(*calib, 32);
  BatchQueue queue(batches.size() + 1);
  for (auto& b : batches) queue.Push(std::move(b));
  queue.Close();
  return RunQuantize(c, ReadFileOrDie(Dir() + "/model.onnx"), {}, cancel, &pool,
                     &queue);
}

const onnx::TensorProto* Init(const onnx::GraphProto& g,
                              const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// Bytes of what stands for `weight` in `m`: the float initializer, or the
// values, scale and zero point of the DequantizeLinear producing it. Sets
// *type to the stored element type.
uint64_t WeightBytes(const onnx::ModelProto& m, const std::string& weight,
                     int32_t* type) {
  if (const onnx::TensorProto* t = Init(m.graph(), weight)) {
    *type = t->data_type();
    return graph::DataBytes(*t);
  }
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "DequantizeLinear" || n.output(0) != weight) continue;
    uint64_t bytes = 0;
    for (const auto& in : n.input()) {
      const onnx::TensorProto* t = Init(m.graph(), in);
      EXPECT_NE(t, nullptr) << in;
      if (t != nullptr) bytes += graph::DataBytes(*t);
    }
    *type = Init(m.graph(), n.input(0))->data_type();
    return bytes;
  }
  ADD_FAILURE() << "no weight " << weight;
  return 0;
}

struct Measured {
  double float_acc = std::nan("");
  double quant_acc = std::nan("");
  double weight_ratio = 0;
  double model_ratio = 0;
  onnx::ModelProto model;
};

double FloatAccuracy() {
  static const double acc = testing::OrtAccuracy(
      Dir() + "/model.onnx", Dir() + "/test_x.npy", Dir() + "/test_y.npy");
  return acc;
}

Measured Measure(const std::string& label,
                 const quantd::v1::QuantizeConfig& config) {
  Measured out;
  absl::StatusOr<QuantizeResult> result = RunDigits(config);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return out;
  absl::StatusOr<onnx::ModelProto> parsed = graph::ParseModel(result->model);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return out;
  out.model = std::move(*parsed);
  absl::StatusOr<onnx::ModelProto> original =
      graph::ParseModel(ReadFileOrDie(Dir() + "/model.onnx"));
  EXPECT_TRUE(original.ok());
  uint64_t before = 0, after = 0;
  for (const std::string& w : WeightNames()) {
    int32_t type = 0;
    before += WeightBytes(*original, w, &type);
    after += WeightBytes(out.model, w, &type);
  }
  out.weight_ratio = static_cast<double>(before) / after;
  const uint64_t model_before = ReadFileOrDie(Dir() + "/model.onnx").size();
  out.model_ratio = static_cast<double>(model_before) / result->model.size();
  TempDir tmp;
  const std::string path = tmp.File("quantized.onnx");
  WriteFileOrDie(path, result->model);
  out.float_acc = FloatAccuracy();
  out.quant_acc =
      testing::OrtAccuracy(path, Dir() + "/test_x.npy", Dir() + "/test_y.npy");
  std::printf(
      "measured: digits %s: top-1 float %.4f, quantized %.4f (ONNX Runtime); "
      "weights %llu -> %llu bytes (%.2fx); model %llu -> %zu bytes (%.2fx); "
      "opset %lld, IR %lld\n",
      label.c_str(), out.float_acc, out.quant_acc,
      static_cast<unsigned long long>(before),
      static_cast<unsigned long long>(after), out.weight_ratio,
      static_cast<unsigned long long>(model_before), result->model.size(),
      out.model_ratio, static_cast<long long>(graph::DefaultOpset(out.model)),
      static_cast<long long>(out.model.ir_version()));
  std::fflush(stdout);
  return out;
}

int CountStored(const onnx::ModelProto& m, int32_t type) {
  int n = 0;
  for (const std::string& w : WeightNames()) {
    int32_t t = 0;
    WeightBytes(m, w, &t);
    n += t == type;
  }
  return n;
}

TEST(FourBitAcceptanceTest, DynamicRangeW4A8) {
  Measured m = Measure(
      "DYNAMIC_RANGE TF W4A8",
      Config(tfq::QuantizationMethod::DYNAMIC_RANGE, tfq::PRECISION_W4A8));
  EXPECT_EQ(CountStored(m.model, numerics::kOnnxInt4), 4);
  EXPECT_EQ(graph::DefaultOpset(m.model), 21);
  EXPECT_GE(m.model.ir_version(), 10);
  EXPECT_GE(m.quant_acc, m.float_acc - 0.03);
  EXPECT_GE(m.weight_ratio, 6.0);
}

TEST(FourBitAcceptanceTest, StaticRangeW4A8) {
  Measured m = Measure(
      "STATIC_RANGE TF W4A8",
      Config(tfq::QuantizationMethod::STATIC_RANGE, tfq::PRECISION_W4A8));
  EXPECT_EQ(CountStored(m.model, numerics::kOnnxInt4), 4);
  // Activations stay uint8.
  for (const auto& n : m.model.graph().node()) {
    if (n.op_type() != "QuantizeLinear") continue;
    EXPECT_EQ(Init(m.model.graph(), n.input(2))->data_type(),
              onnx::TensorProto::UINT8);
  }
  EXPECT_GE(m.quant_acc, m.float_acc - 0.03);
  EXPECT_GE(m.weight_ratio, 6.0);
}

TEST(FourBitAcceptanceTest, StaticRangeW4A4RunsInOrt) {
  Measured m = Measure(
      "STATIC_RANGE TF W4A4",
      Config(tfq::QuantizationMethod::STATIC_RANGE, tfq::PRECISION_W4A4));
  int uint4_points = 0;
  for (const auto& n : m.model.graph().node()) {
    if (n.op_type() != "QuantizeLinear") continue;
    EXPECT_EQ(Init(m.model.graph(), n.input(2))->data_type(),
              numerics::kOnnxUint4);
    ++uint4_points;
  }
  EXPECT_GT(uint4_points, 0);
  // No bound from the issue; far above chance (0.1) shows it computes.
  EXPECT_GT(m.quant_acc, 0.5);
}

TEST(FourBitAcceptanceTest, UnitWiseMixesW8A8AndW4A8) {
  quantd::v1::QuantizeConfig config =
      Config(tfq::QuantizationMethod::STATIC_RANGE, tfq::PRECISION_W8A8);
  auto* unit = config.mutable_options()->add_unit_wise_quantization_precision();
  unit->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_NODE);
  unit->set_unit_name("/5/Gemm");  // The big layer: 131072 of 136464 weights.
  unit->set_quantization_precision(tfq::PRECISION_W4A8);
  Measured m = Measure("STATIC_RANGE TF W8A8 + /5/Gemm W4A8", config);
  int32_t type = 0;
  WeightBytes(m.model, "5.weight", &type);
  EXPECT_EQ(type, numerics::kOnnxInt4);
  WeightBytes(m.model, "2.weight", &type);
  EXPECT_EQ(type, onnx::TensorProto::INT8);
  EXPECT_GE(m.quant_acc, m.float_acc - 0.03);
}

TEST(FourBitAcceptanceTest, DynamicRangeW4A4IsRefusedWithTheReason) {
  absl::StatusOr<QuantizeResult> r = RunDigits(
      Config(tfq::QuantizationMethod::DYNAMIC_RANGE, tfq::PRECISION_W4A4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r.status().message(), HasSubstr("PRECISION_W4A4"));
  EXPECT_THAT(r.status().message(), HasSubstr("DynamicQuantizeLinear"));
}

}  // namespace
}  // namespace quantd
