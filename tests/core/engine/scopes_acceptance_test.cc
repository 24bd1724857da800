// Acceptance of the two kinds of scope func_name names, each through
// in-process RunQuantize / RunCalibrate calls, judged by ONNX Runtime:
//  - Local functions (tests/data/passes/function_digits.onnx, PyTorch's
//    export_modules_as_functions: two calls of "Block"): every op set
//    quantizes the inlined function bodies, with digits accuracy within 1
//    point of float (W8A8) or 3 points (W4A8); a func_name entry keeps the
//    function's Gemms float in both calls; Calibrate's ranges name the
//    inlined tensors the way a later Quantize looks them up.
//  - If/Loop bodies (tests/data/passes/control_flow.onnx): STATIC_RANGE
//    calibrates the tensors inside the bodies through the executor and
//    quantizes them there, for every op set.
// Every measured number is printed on a "measured:" line.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/base/thread_pool.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
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

using ::quantd::testing::ReadFileOrDie;
using ::quantd::testing::SourcePath;
using ::quantd::testing::TempDir;
using ::quantd::testing::WriteFileOrDie;
using ::testing::HasSubstr;
namespace tfq = tensorflow::quantization;
using Unit = tfq::UnitWiseQuantizationPrecision;

const char kFunctionModel[] = "tests/data/passes/function_digits.onnx";
const char kControlFlowModel[] = "tests/data/passes/control_flow.onnx";

std::string Digits(const std::string& file) {
  return SourcePath("examples/digits/" + file);
}

quantd::v1::QuantizeConfig Config(
    tfq::QuantizationMethod::ExperimentalMethod method, tfq::OpSet op_set,
    tfq::QuantizationPrecision precision) {
  quantd::v1::QuantizeConfig config;
  tfq::QuantizationOptions* o = config.mutable_options();
  o->mutable_quantization_method()->set_experimental_method(method);
  o->set_op_set(op_set);
  o->set_quantization_precision(precision);
  o->set_min_num_elements_for_weights(-1);  // Every weight, however small.
  return config;
}

// `model` quantized with `config`; STATIC_RANGE calibrates on the rows of
// `calib_npy`, `rows_per_batch` at a time.
absl::StatusOr<QuantizeResult> Quantize(
    const quantd::v1::QuantizeConfig& config, const std::string& model,
    const std::string& calib_npy, int rows_per_batch) {
  CancellationToken cancel;
  ThreadPool pool(1);
  const std::string bytes = ReadFileOrDie(SourcePath(model));
  if (config.options().quantization_method().experimental_method() !=
          tfq::QuantizationMethod::STATIC_RANGE ||
      config.calibration().ranges_size() > 0) {
    return RunQuantize(config, bytes, {}, cancel, &pool);
  }
  quantd::v1::QuantizeConfig c = config;
  c.mutable_calibration_config()->set_method("min_max");
  absl::StatusOr<executor::Tensor> calib = executor::ReadNpyFile(calib_npy);
  if (!calib.ok()) return calib.status();
  std::vector<quantd::v1::TensorBatch> batches =
      ::quantd::testing::BatchesOf(*calib, rows_per_batch);
  BatchQueue queue(batches.size() + 1);
  for (auto& b : batches) queue.Push(std::move(b));
  queue.Close();
  return RunQuantize(c, bytes, {}, cancel, &pool, &queue);
}

std::string Save(const TempDir& tmp, const std::string& name,
                 const std::string& bytes) {
  const std::string path = tmp.File(name);
  WriteFileOrDie(path, bytes);
  return path;
}

const onnx::TensorProto* Init(const onnx::GraphProto& g,
                              const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

bool SomeValidationSays(const quantd::v1::QuantizeSummary& s,
                        const std::string& text) {
  for (const auto& v : s.validations()) {
    if (v.find(text) != std::string::npos) return true;
  }
  return false;
}

double FloatFunctionAccuracy() {
  static const double acc = ::quantd::testing::OrtAccuracy(
      SourcePath(kFunctionModel), Digits("test_x.npy"), Digits("test_y.npy"));
  return acc;
}

struct Cell {
  tfq::QuantizationMethod::ExperimentalMethod method;
  tfq::OpSet op_set;
  tfq::QuantizationPrecision precision;
  double max_drop;  // Accuracy points below float.
};

TEST(ScopesAcceptanceTest, LocalFunctionsAreQuantizedInEveryOpSet) {
  using M = tfq::QuantizationMethod;
  const std::vector<Cell> cells = {
      {M::DYNAMIC_RANGE, tfq::TF, tfq::PRECISION_W8A8, 0.01},
      {M::DYNAMIC_RANGE, tfq::XLA, tfq::PRECISION_W8A8, 0.01},
      {M::STATIC_RANGE, tfq::TF, tfq::PRECISION_W8A8, 0.01},
      {M::STATIC_RANGE, tfq::XLA, tfq::PRECISION_W8A8, 0.01},
      {M::STATIC_RANGE, tfq::UNIFORM_QUANTIZED, tfq::PRECISION_W8A8, 0.01},
      {M::STATIC_RANGE, tfq::TF, tfq::PRECISION_W4A8, 0.03},
  };
  const double float_acc = FloatFunctionAccuracy();
  TempDir tmp;
  for (const Cell& cell : cells) {
    const std::string what =
        absl::StrCat(M::ExperimentalMethod_Name(cell.method), " ",
                     tfq::OpSet_Name(cell.op_set), " ",
                     tfq::QuantizationPrecision_Name(cell.precision));
    absl::StatusOr<QuantizeResult> r =
        Quantize(Config(cell.method, cell.op_set, cell.precision),
                 kFunctionModel, Digits("calib_x.npy"), 32);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status();
    EXPECT_TRUE(SomeValidationSays(r->summary, "inlined 2 calls"))
        << what << ": " << r->summary.ShortDebugString();
    absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(r->model);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->functions_size(), 0) << what;
    for (const auto& n : m->graph().node()) {
      EXPECT_NE(n.op_type(), "Block") << what;
    }
    // The blocks' weights are quantized like the others.
    EXPECT_EQ(Init(m->graph(), "b1.fc.weight"), nullptr) << what;
    EXPECT_EQ(Init(m->graph(), "b2.fc.weight"), nullptr) << what;
    const double acc = ::quantd::testing::OrtAccuracy(
        Save(tmp, "q.onnx", r->model), Digits("test_x.npy"),
        Digits("test_y.npy"));
    std::cout << "measured: local-function digits " << what << " ORT top-1 "
              << acc << " (float " << float_acc << ", "
              << r->summary.quantized_tensors() << " tensors)" << std::endl;
    EXPECT_GE(acc, float_acc - cell.max_drop - 1e-9) << what;
  }
}

TEST(ScopesAcceptanceTest, FuncNameKeepsTheFunctionsGemmsFloat) {
  quantd::v1::QuantizeConfig config = Config(
      tfq::QuantizationMethod::STATIC_RANGE, tfq::TF, tfq::PRECISION_W8A8);
  Unit* u = config.mutable_options()->add_unit_wise_quantization_precision();
  u->set_unit_type(Unit::UNIT_OP);
  u->set_func_name("Block");
  u->set_unit_name("Gemm");
  u->set_quantization_precision(tfq::PRECISION_FULL);
  absl::StatusOr<QuantizeResult> r =
      Quantize(config, kFunctionModel, Digits("calib_x.npy"), 32);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(r->model);
  ASSERT_TRUE(m.ok()) << m.status();
  // Both calls' weights are still float initializers; stem and head not.
  for (const char* w : {"b1.fc.weight", "b2.fc.weight"}) {
    const onnx::TensorProto* t = Init(m->graph(), w);
    ASSERT_NE(t, nullptr) << w;
    EXPECT_EQ(t->data_type(), onnx::TensorProto::FLOAT) << w;
  }
  EXPECT_EQ(Init(m->graph(), "stem.weight"), nullptr);
  EXPECT_EQ(Init(m->graph(), "head.weight"), nullptr);
  TempDir tmp;
  const double acc = ::quantd::testing::OrtAccuracy(
      Save(tmp, "q.onnx", r->model), Digits("test_x.npy"),
      Digits("test_y.npy"));
  std::cout << "measured: local-function digits, Block FULL, ORT top-1 " << acc
            << std::endl;
  EXPECT_GE(acc, FloatFunctionAccuracy() - 0.01);

  // An entry naming a function node that does not exist is refused.
  u->set_unit_type(Unit::UNIT_NODE);
  u->set_unit_name("Gemm_9");
  r = Quantize(config, kFunctionModel, Digits("calib_x.npy"), 32);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("no node in local function 'Block' is named 'Gemm_9'"));
}

TEST(ScopesAcceptanceTest, CalibrateRangesNameTheInlinedTensors) {
  quantd::v1::CalibrateConfig calibrate;
  calibrate.set_method("min_max");
  absl::StatusOr<executor::Tensor> calib =
      executor::ReadNpyFile(Digits("calib_x.npy"));
  ASSERT_TRUE(calib.ok()) << calib.status();
  std::vector<quantd::v1::TensorBatch> batches =
      ::quantd::testing::BatchesOf(*calib, 32);
  BatchQueue queue(batches.size() + 1);
  for (auto& b : batches) queue.Push(std::move(b));
  queue.Close();
  CancellationToken cancel;
  absl::StatusOr<quantd::v1::CalibrationResult> ranges =
      RunCalibrate(calibrate, ReadFileOrDie(SourcePath(kFunctionModel)), &queue,
                   {}, cancel, nullptr);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  bool inner = false;
  for (const auto& t : ranges->ranges()) {
    inner |= t.tensor_name().rfind("/b2/Block/", 0) == 0;
  }
  EXPECT_TRUE(inner) << ranges->ShortDebugString();

  quantd::v1::QuantizeConfig config = Config(
      tfq::QuantizationMethod::STATIC_RANGE, tfq::TF, tfq::PRECISION_W8A8);
  *config.mutable_calibration() = *ranges;
  absl::StatusOr<QuantizeResult> r = Quantize(config, kFunctionModel, "", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  TempDir tmp;
  const double acc = ::quantd::testing::OrtAccuracy(
      Save(tmp, "q.onnx", r->model), Digits("test_x.npy"),
      Digits("test_y.npy"));
  std::cout << "measured: local-function digits, Calibrate then Quantize, "
               "ORT top-1 "
            << acc << std::endl;
  EXPECT_GE(acc, FloatFunctionAccuracy() - 0.01);
}

// The largest |executor - ORT| difference on `model`'s output over the rows
// of `x_npy` (one row per run), in 8-bit steps of the output's range.
double StepsFromOrt(const std::string& model, const std::string& x_npy,
                    const TempDir& tmp) {
  absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(ReadFileOrDie(model));
  if (!m.ok()) {
    ADD_FAILURE() << m.status();
    return 1e9;
  }
  absl::StatusOr<std::unique_ptr<executor::Executor>> exec =
      executor::Executor::Create(*m);
  if (!exec.ok()) {
    ADD_FAILURE() << exec.status();
    return 1e9;
  }
  const std::string out = tmp.File("ort_y.npy");
  ::quantd::testing::OrtEval(
      {"run", "--model", model, "--x", x_npy, "--out", out, "--batch", "1"});
  absl::StatusOr<executor::Tensor> theirs = executor::ReadNpyFile(out);
  absl::StatusOr<executor::Tensor> x = executor::ReadNpyFile(x_npy);
  if (!theirs.ok() || !x.ok()) {
    ADD_FAILURE() << theirs.status() << " " << x.status();
    return 1e9;
  }
  const int64_t rows = x->shape()[0], cols = x->size() / rows;
  std::vector<int64_t> row_shape = x->shape();
  row_shape[0] = 1;
  const int64_t outs = theirs->size() / rows;
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < theirs->size(); ++i) {
    lo = std::min(lo, theirs->data<float>()[i]);
    hi = std::max(hi, theirs->data<float>()[i]);
  }
  const double step = (hi - lo) / 255.0;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    executor::Tensor row(onnx::TensorProto::FLOAT, row_shape);
    std::copy_n(x->data<float>() + r * cols, cols, row.mutable_data<float>());
    absl::StatusOr<std::vector<executor::Tensor>> ours =
        (*exec)->Run({{(*exec)->input_names()[0], row}});
    if (!ours.ok()) {
      ADD_FAILURE() << ours.status();
      return 1e9;
    }
    for (int64_t j = 0; j < outs; ++j) {
      worst = std::max<double>(worst,
                               std::abs((*ours)[0].data<float>()[j] -
                                        theirs->data<float>()[r * outs + j]));
    }
  }
  return worst / step;
}

// The control-flow model, calibrated one sample per batch (its If decides
// on the whole batch's sum).
TEST(ScopesAcceptanceTest, IfAndLoopBodiesAreCalibratedAndQuantized) {
  using M = tfq::QuantizationMethod;
  const std::string x = SourcePath("tests/data/passes/control_flow_x.npy");
  const std::string calib =
      SourcePath("tests/data/passes/control_flow_calib.npy");
  TempDir tmp;
  for (tfq::OpSet op_set : {tfq::TF, tfq::XLA, tfq::UNIFORM_QUANTIZED}) {
    absl::StatusOr<QuantizeResult> r =
        Quantize(Config(M::STATIC_RANGE, op_set, tfq::PRECISION_W8A8),
                 kControlFlowModel, calib, 1);
    ASSERT_TRUE(r.ok()) << tfq::OpSet_Name(op_set) << ": " << r.status();
    EXPECT_EQ(r->summary.quantized_nodes(), 5) << tfq::OpSet_Name(op_set);
    const std::string path = Save(tmp, "q.onnx", r->model);
    const std::string json = ::quantd::testing::OrtEval(
        {"compare", "--model", SourcePath(kControlFlowModel), "--model2", path,
         "--x", x, "--batch", "1"});
    const double sqnr = ::quantd::testing::JsonNumber(json, "sqnr_db");
    // Our executor runs the same quantized bodies as ONNX Runtime: within
    // one 8-bit step of the output's range.
    const double steps = StepsFromOrt(path, x, tmp);
    std::cout << "measured: control-flow model STATIC "
              << tfq::OpSet_Name(op_set) << " W8A8 (calibrated) ORT SQNR "
              << sqnr << " dB; executor vs ORT " << steps << " output steps"
              << std::endl;
    EXPECT_GT(sqnr, 22.0) << tfq::OpSet_Name(op_set);
    EXPECT_LE(steps, 1.0) << tfq::OpSet_Name(op_set);
  }
}

// Conv, Gemm and MatMul nodes anywhere in `g`, bodies included.
int CountFloatCompute(const onnx::GraphProto& g) {
  int n = 0;
  for (const auto& node : g.node()) {
    n += node.op_type() == "Conv" || node.op_type() == "Gemm" ||
         node.op_type() == "MatMul";
    for (const auto& a : node.attribute()) {
      if (a.has_g()) n += CountFloatCompute(a.g());
    }
  }
  return n;
}

// The executor's control-flow model (scripts/make_control_flow_model.py):
// unnamed nodes, an If nested in a Loop whose branches read the Loop body's
// values, and a reverse Scan. Both methods and every op set; calibration and
// test inputs are seeded normal samples.
TEST(ScopesAcceptanceTest, NestedBodiesOfUnnamedNodes) {
  using M = tfq::QuantizationMethod;
  const std::string model = "tests/data/executor/control_flow.onnx";
  TempDir tmp;
  auto normal = [&](int n, uint32_t seed, const std::string& name) {
    executor::Tensor t(onnx::TensorProto::FLOAT, {n, 3, 8, 8});
    uint64_t state = seed;
    float* v = t.mutable_data<float>();
    for (int64_t i = 0; i < t.size(); i += 2) {  // Box-Muller.
      auto uniform = [&] {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return ((state >> 11) + 0.5) / 9007199254740992.0;
      };
      const double r = std::sqrt(-2 * std::log(uniform()));
      const double a = 6.283185307179586 * uniform();
      v[i] = static_cast<float>(r * std::cos(a));
      if (i + 1 < t.size()) v[i + 1] = static_cast<float>(r * std::sin(a));
    }
    const std::string path = tmp.File(name);
    EXPECT_TRUE(executor::WriteNpyFile(path, t).ok());
    return path;
  };
  const std::string calib = normal(32, 1, "calib.npy");
  const std::string x = normal(24, 2, "x.npy");
  struct Case {
    M::ExperimentalMethod method;
    tfq::OpSet op_set;
  };
  for (const Case& c :
       {Case{M::DYNAMIC_RANGE, tfq::TF}, Case{M::STATIC_RANGE, tfq::TF},
        Case{M::STATIC_RANGE, tfq::XLA},
        Case{M::STATIC_RANGE, tfq::UNIFORM_QUANTIZED}}) {
    const std::string what = absl::StrCat(M::ExperimentalMethod_Name(c.method),
                                          " ", tfq::OpSet_Name(c.op_set));
    absl::StatusOr<QuantizeResult> r = Quantize(
        Config(c.method, c.op_set, tfq::PRECISION_W8A8), model, calib, 8);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status();
    // Two Convs, the If's MatMul, the head and the Scan's MatMul.
    EXPECT_EQ(r->summary.quantized_nodes(), 5) << what;
    if (c.op_set != tfq::TF) {
      // Every one lowered, in whichever body it is.
      absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(r->model);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(CountFloatCompute(m->graph()), 0) << what;
    }
    const std::string path = Save(tmp, "q.onnx", r->model);
    const double sqnr = ::quantd::testing::JsonNumber(
        ::quantd::testing::OrtEval({"compare", "--model", SourcePath(model),
                                    "--model2", path, "--x", x, "--batch",
                                    "6"}),
        "sqnr_db");
    const double steps = StepsFromOrt(path, x, tmp);
    std::cout << "measured: nested-bodies model " << what << " W8A8 ORT SQNR "
              << sqnr << " dB; executor vs ORT " << steps << " output steps"
              << std::endl;
    // Two of the 24 held-out samples leave the range min_max saw in 32
    // calibration samples and clip (their own SQNR is 13-15 dB, the others'
    // 25-37 dB), which caps the whole set's SQNR near 21 dB.
    EXPECT_GT(sqnr, 18.0) << what;
    EXPECT_LE(steps, 1.0) << what;
  }
}

}  // namespace
}  // namespace quantd
