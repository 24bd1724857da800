// The activation kernels (ops_activation.cc) against PyTorch golden values
// (scripts/make_activation_golden.py) and hand-computed ones, in FLOAT,
// DOUBLE and the 16-bit floats (computed in float by the executor's
// HalfAdapter), plus their error codes; and a FLOAT16 CNN
// (scripts/make_fp16_model.py) run in the executor and in ONNX Runtime.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/graph/model_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/core/executor/op_golden.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::SourcePath;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

std::vector<double> All(const Tensor& t) {
  std::vector<double> v(t.size());
  for (int64_t i = 0; i < t.size(); ++i) v[i] = At(t, i);
  return v;
}

// |got - want| <= atol + rtol * |want| everywhere (NaN matches NaN).
void ExpectClose(const Tensor& got, const GoldenArray& want, double atol,
                 double rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.dims) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = At(got, i), w = want.values[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (std::abs(g - w) <= atol + rtol * std::abs(w)) continue;
    ADD_FAILURE() << what << " at " << i << ": got " << g << ", torch " << w;
    ++bad;
  }
}

// ------------------------------------------------- against torch (golden)

struct TorchCase {
  const char* name;  // The golden case.
  const char* op;
  int64_t opset;
  std::function<void(OneNode&)> attrs;
  std::vector<const char*> inputs = {"x"};
};

std::ostream& operator<<(std::ostream& os, const TorchCase& c) {
  return os << c.name;
}

const std::vector<TorchCase>& TorchCases() {
  static const auto* cases = new std::vector<TorchCase>{
      // torch's hardsigmoid is relu6(x + 3) / 6: ONNX's with alpha 1/6.
      {"hardsigmoid_torch", "HardSigmoid", 13,
       [](OneNode& n) { n.Float("alpha", 1.0f / 6).Float("beta", 0.5f); }},
      {"hardswish", "HardSwish", 14, [](OneNode&) {}},
      {"gelu", "Gelu", 20, [](OneNode&) {}},
      {"gelu_tanh", "Gelu", 20,
       [](OneNode& n) { n.String("approximate", "tanh"); }},
      {"elu_a05", "Elu", 13, [](OneNode& n) { n.Float("alpha", 0.5f); }},
      {"selu", "Selu", 13, [](OneNode&) {}},
      {"celu_a2", "Celu", 12, [](OneNode& n) { n.Float("alpha", 2.0f); }},
      {"leaky_relu_a02", "LeakyRelu", 16,
       [](OneNode& n) { n.Float("alpha", 0.2f); }},
      {"softplus", "Softplus", 13, [](OneNode&) {}},
      {"softsign", "Softsign", 13, [](OneNode&) {}},
      {"mish", "Mish", 18, [](OneNode&) {}},
      {"thresholded_relu_a1", "ThresholdedRelu", 10, [](OneNode&) {}},
      {"softshrink_05", "Shrink", 9,
       [](OneNode& n) { n.Float("bias", 0.5f).Float("lambd", 0.5f); }},
      {"hardshrink_05", "Shrink", 9, [](OneNode& n) { n.Float("bias", 0); }},
      {"prelu_channel", "PRelu", 16, [](OneNode&) {}, {"x", "slope"}},
      {"log_softmax_axis1", "LogSoftmax", 13,
       [](OneNode& n) { n.Int("axis", 1); }},
      {"log_softmax_2d_axis1", "LogSoftmax", 11,
       [](OneNode& n) { n.Int("axis", 1); }},
      {"hardmax_axis2", "Hardmax", 13, [](OneNode& n) { n.Int("axis", 2); }},
  };
  return *cases;
}

class TorchGoldenTest : public ::testing::TestWithParam<TorchCase> {
 protected:
  // The node on the golden inputs converted to T.
  template <typename T>
  OneNode Node() const {
    const TorchCase& c = GetParam();
    OneNode n(c.op, c.opset);
    c.attrs(n);
    for (const char* in : c.inputs) {
      n.inputs.push_back(GoldenGet(c.name, in).As<T>());
    }
    return n;
  }
};

TEST_P(TorchGoldenTest, FloatMatchesTorch) {
  absl::StatusOr<Tensor> y = Node<float>().Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::FLOAT);
  ExpectClose(*y, GoldenGet(GetParam().name, "out"), 1e-6, 1e-5, "float");
}

TEST_P(TorchGoldenTest, DoubleMatchesTorch) {
  absl::StatusOr<Tensor> y = Node<double>().Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::DOUBLE);
  // Torch computed in float: its own rounding bounds the difference.
  ExpectClose(*y, GoldenGet(GetParam().name, "out"), 1e-6, 1e-5, "double");
}

TEST_P(TorchGoldenTest, SixteenBitFloatsAreFloatResultsRounded) {
  // A 16-bit input computes in float and rounds once at the end: exactly
  // the float kernel on the widened input, narrowed (nearest even).
  for (const DataType half : {TP::FLOAT16, TP::BFLOAT16}) {
    OneNode n16 = Node<float>();
    OneNode n32 = Node<float>();
    for (size_t i = 0; i < n16.inputs.size(); ++i) {
      n16.inputs[i] = n16.inputs[i].NarrowedTo(half);
      n32.inputs[i] = n16.inputs[i].WidenedToFloat();
    }
    absl::StatusOr<Tensor> y16 = n16.Run1();
    absl::StatusOr<Tensor> y32 = n32.Run1();
    ASSERT_TRUE(y16.ok()) << y16.status();
    ASSERT_TRUE(y32.ok()) << y32.status();
    ASSERT_EQ(y16->dtype(), half);
    ASSERT_EQ(y16->shape(), y32->shape());
    const Tensor want = y32->NarrowedTo(half);
    for (int64_t i = 0; i < y16->size(); ++i) {
      ASSERT_EQ(y16->data<uint16_t>()[i], want.data<uint16_t>()[i])
          << DataTypeName(half) << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, TorchGoldenTest,
                         ::testing::ValuesIn(TorchCases()),
                         [](const auto& info) { return info.param.name; });

// ------------------------------------------------------------ hand values

TEST(ActivationTest, HardSigmoidDefaultsAreOnnxs) {
  OneNode n("HardSigmoid", 13);  // alpha 0.2, beta 0.5.
  n.inputs = {Floats({6}, {-3, -2.5f, 0, 1, 2.5f, 3})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(All(*y),
              ElementsAre(0, 0, 0.5, ::testing::DoubleNear(0.7, 1e-7), 1, 1));
}

TEST(ActivationTest, HardSwishAtItsKinks) {
  OneNode n("HardSwish", 14);
  n.inputs = {Floats({6}, {-4, -3, 0, 1, 3, 4})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(
      All(*y),
      ElementsAre(0, 0, 0, ::testing::DoubleNear(2.0 / 3.0, 1e-7), 3, 4));
}

TEST(ActivationTest, GeluBothApproximations) {
  OneNode exact("Gelu", 20);
  exact.inputs = {Tensor::FromVector<double>({3}, {1.0, -1.0, 0.0})};
  absl::StatusOr<Tensor> y = exact.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  // 0.5 x (1 + erf(x / sqrt 2)).
  EXPECT_THAT(
      All(*y),
      ElementsAre(::testing::DoubleNear(0.8413447460685429, 1e-15),
                  ::testing::DoubleNear(-0.15865525393145707, 1e-15), 0));
  OneNode tanh("Gelu", 20);
  tanh.String("approximate", "tanh");
  tanh.inputs = {Tensor::FromVector<double>({1}, {1.0})};
  y = tanh.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR(At(*y, 0), 0.8411919906082768, 1e-15);
}

TEST(ActivationTest, EluSeluCeluDefaults) {
  const double em1 = std::expm1(-1.0);
  OneNode elu("Elu", 13);
  elu.inputs = {Tensor::FromVector<double>({2}, {-1, 2})};
  absl::StatusOr<Tensor> y = elu.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(All(*y), ElementsAre(::testing::DoubleNear(em1, 1e-15), 2));

  OneNode selu("Selu", 13);
  selu.inputs = {Tensor::FromVector<double>({2}, {1, -1})};
  y = selu.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  // gamma = 1.0507..., alpha = 1.6732... as float attributes.
  const double gamma = 1.05070102214813232421875;
  const double alpha = 1.67326319217681884765625;
  EXPECT_THAT(All(*y),
              ElementsAre(::testing::DoubleNear(gamma, 1e-15),
                          ::testing::DoubleNear(gamma * alpha * em1, 1e-15)));

  OneNode celu("Celu", 12);
  celu.inputs = {Floats({3}, {-1, 0, 5})};
  y = celu.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(All(*y), ElementsAre(::testing::DoubleNear(em1, 1e-7), 0, 5));
}

TEST(ActivationTest, ThresholdedReluIsStrictlyAboveAlpha) {
  OneNode n("ThresholdedRelu", 10);
  n.Float("alpha", 2.0f);
  n.inputs = {Floats({4}, {1, 2, 2.5f, -3})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(All(*y), ElementsAre(0, 0, 2.5, 0));
}

TEST(ActivationTest, SoftplusDoesNotOverflow) {
  OneNode n("Softplus", 13);
  n.inputs = {Floats({3}, {100, -100, 0})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  // log(1 + e^100) is 100 in float, not inf.
  EXPECT_THAT(All(*y), ElementsAre(100, ::testing::DoubleNear(0, 1e-40),
                                   ::testing::DoubleNear(std::log(2.0), 1e-7)));
}

// x +- bias can leave an integer type (UBSan on the executor fuzzer: INT64
// values shifted by 2.5): the result saturates, as Cast does.
TEST(ActivationTest, ShrinkOnIntegersSaturates) {
  OneNode s("Shrink", 9);
  s.Float("lambd", -2.5f).Float("bias", -2.5f);
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  s.inputs = {Tensor::FromVector<int64_t>({2}, {kMax, 0})};
  absl::StatusOr<Tensor> y = s.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(y->ToInt64Vector(), ElementsAre(kMax, -2));
  OneNode t("Shrink", 9);
  t.Float("bias", 300.0f).Float("lambd", 1.0f);
  t.inputs = {Tensor::FromVector<int8_t>({2}, {-100, 100})};
  y = t.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(y->ToInt64Vector(), ElementsAre(127, -128));
}

TEST(ActivationTest, ShrinkOnIntegers) {
  OneNode s("Shrink", 9);
  s.Float("lambd", 1.5f).Float("bias", 1.0f);
  s.inputs = {Tensor::FromVector<int8_t>({5}, {-5, -1, 0, 1, 5})};
  absl::StatusOr<Tensor> y = s.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::INT8);
  EXPECT_THAT(y->ToInt64Vector(), ElementsAre(-4, 0, 0, 0, 4));

  s.inputs = {Tensor::FromVector<uint16_t>({4}, {0, 1, 2, 10})};
  y = s.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::UINT16);
  EXPECT_THAT(y->ToInt64Vector(), ElementsAre(0, 0, 1, 9));
}

TEST(ActivationTest, PReluBroadcastsScalarAndTrailingSlopes) {
  OneNode n("PRelu", 9);
  n.inputs = {Tensor::FromVector<int32_t>({2, 2}, {-2, 3, -4, 5}),
              Tensor::FromVector<int32_t>({}, {3})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::INT32);
  EXPECT_THAT(y->ToInt64Vector(), ElementsAre(-6, 3, -12, 5));

  // A slope along the last axis, given as an initializer.
  n.inputs = {Floats({2, 3}, {-1, -1, -1, 2, -2, 0}),
              Floats({3}, {0.5f, 1, 2})};
  n.constant = {false, true};
  y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(All(*y), ElementsAre(-0.5, -1, -2, 2, -2, 0));
}

TEST(ActivationTest, PReluSlopeMustBroadcastToTheInput) {
  OneNode n("PRelu", 16);
  n.inputs = {Floats({3}, {-1, 2, 3}), Floats({2, 3}, {1, 1, 1, 1, 1, 1})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("does not broadcast"));
}

TEST(ActivationTest, LogSoftmaxOpsetsCoerceOrNot) {
  // [1, 2, 2]: opset 11 normalizes over the 4 trailing values, 13 over
  // axis 1 only (pairs).
  const Tensor x = Floats({1, 2, 2}, {0, 1, 2, 3});
  OneNode old("LogSoftmax", 11);
  old.Int("axis", 1);
  old.inputs = {x};
  absl::StatusOr<Tensor> y = old.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  const double lse4 =
      std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(At(*y, 0), -lse4, 1e-6);
  EXPECT_NEAR(At(*y, 3), 3 - lse4, 1e-6);

  OneNode now("LogSoftmax", 13);
  now.Int("axis", 1);
  now.inputs = {x};
  y = now.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  const double lse2 = std::log(1 + std::exp(2.0));
  EXPECT_NEAR(At(*y, 0), -lse2, 1e-6);  // x[0,0,0] against x[0,1,0].
  EXPECT_NEAR(At(*y, 2), 2 - lse2, 1e-6);
}

TEST(ActivationTest, HardmaxPicksTheFirstMaximum) {
  OneNode n("Hardmax", 13);
  n.inputs = {Floats({2, 4}, {1, 3, 3, 2, -1, -1, -1, -1})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(All(*y), ElementsAre(0, 1, 0, 0, 1, 0, 0, 0));

  // Opset 11, axis 0: the whole tensor is one row.
  OneNode old("Hardmax", 11);
  old.Int("axis", 0);
  old.inputs = {Floats({2, 2}, {1, 5, 7, 2})};
  y = old.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(All(*y), ElementsAre(0, 0, 1, 0));
}

TEST(ActivationTest, AnEmptyAxisGivesAnEmptyOutput) {
  // libFuzzer: LogSoftmax over a zero-length axis read past the input.
  for (const char* op : {"LogSoftmax", "Hardmax"}) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{0, 6, 3}, std::vector<int64_t>{2, 0, 3},
          std::vector<int64_t>{2, 3, 0}}) {
      for (const int64_t axis : {-3, 1, -1}) {
        OneNode n(op, 13);
        n.Int("axis", axis);
        n.inputs = {Floats(shape, {})};
        absl::StatusOr<Tensor> y = n.Run1();
        ASSERT_TRUE(y.ok()) << op << " axis " << axis << ": " << y.status();
        EXPECT_EQ(y->shape(), shape) << op << " axis " << axis;
      }
    }
  }
}

TEST(ActivationTest, CastLikeTakesTheSecondInputsType) {
  OneNode n("CastLike", 15);
  n.inputs = {Floats({3}, {1.5f, -2.7f, 65520.0f}), Tensor(TP::FLOAT16, {0})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::FLOAT16);
  // 1.5 exact; -2.7 -> -2.69921875 (0xC166); 65520 rounds to infinity.
  EXPECT_THAT(
      std::vector<uint16_t>(y->data<uint16_t>(), y->data<uint16_t>() + 3),
      ElementsAre(0x3E00, 0xC166, 0x7C00));

  n.inputs = {Floats({2}, {2.9f, -2.9f}), Tensor::FromVector<int32_t>({}, {0})};
  y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::INT32);
  EXPECT_THAT(y->ToInt64Vector(), ElementsAre(2, -2));  // Toward zero.
}

TEST(ActivationTest, BadAttributesAreInvalid) {
  OneNode gelu("Gelu", 20);
  gelu.String("approximate", "erf");
  gelu.inputs = {Floats({1}, {1})};
  absl::StatusOr<Tensor> y = gelu.Run1();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("approximate"));

  OneNode celu("Celu", 12);
  celu.Float("alpha", 0);
  celu.inputs = {Floats({1}, {1})};
  EXPECT_EQ(celu.Run1().status().code(), absl::StatusCode::kInvalidArgument);

  OneNode ls("LogSoftmax", 13);
  ls.Int("axis", 2);
  ls.inputs = {Floats({2, 2}, {1, 2, 3, 4})};
  EXPECT_EQ(ls.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ActivationTest, FloatOnlyActivationsRefuseIntegersAtCreate) {
  OneNode n("Elu", 13);
  n.inputs = {Tensor::FromVector<int32_t>({1}, {1})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("INT32"));
}

TEST(ActivationTest, PoolSplitsBigTensorsWithTheSameResult) {
  const int64_t n = 1 << 17;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 997) / 50 - 10;
  ThreadPool pool(2);
  for (const char* op : {"HardSwish", "Mish", "Gelu", "Selu"}) {
    OneNode node(op, 20);
    node.inputs = {Floats({n}, v)};
    absl::StatusOr<Tensor> serial = node.Run1();
    absl::StatusOr<Tensor> parallel = node.Run1(&pool);
    ASSERT_TRUE(serial.ok() && parallel.ok()) << op;
    EXPECT_EQ(std::memcmp(serial->raw(), parallel->raw(), serial->bytes()), 0)
        << op;
  }
}

// ------------------------------------------------ a FLOAT16 model vs ORT

TEST(Float16ModelTest, RunsInFloat16AndMatchesOnnxRuntime) {
  const std::string model_path =
      SourcePath("tests/data/executor_ops/fp16_cnn.onnx");
  const std::string x_path =
      SourcePath("tests/data/executor_ops/fp16_cnn_x.npy");
  absl::StatusOr<onnx::ModelProto> model =
      graph::ParseModel(::quantd::testing::ReadFileOrDie(model_path));
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(*model);
  ASSERT_TRUE(exec.ok()) << exec.status();
  absl::StatusOr<Tensor> x = ReadNpyFile(x_path);
  ASSERT_TRUE(x.ok()) << x.status();

  // Every value between the two Casts is FLOAT16 (the bfloat16 constant
  // until its Cast).
  Executor::RunOptions ro;
  int halves = 0;
  ro.on_tensor = [&](const std::string& name, const Tensor& t) {
    if (name == "x" || name == "y") {
      EXPECT_EQ(t.dtype(), TP::FLOAT) << name;
    } else if (name != "shift_bf16") {
      EXPECT_EQ(t.dtype(), TP::FLOAT16) << name;
      ++halves;
    }
  };
  absl::StatusOr<std::vector<Tensor>> ours = (*exec)->Run({{"x", *x}}, ro);
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_GE(halves, 17);
  const Tensor& a = (*ours)[0];
  ASSERT_EQ(a.shape(), (std::vector<int64_t>{6, 10}));

  ASSERT_TRUE(OrtAvailable())
      << "no onnxruntime-node under " << QUANTD_ORT_NODE_PATH;
  ::quantd::testing::TempDir tmp;
  const std::string out = tmp.File("ort.npy");
  ::quantd::testing::CommandResult r = ::quantd::testing::RunCommand(
      {QUANTD_NODE_BIN, SourcePath("scripts/ort_eval.js"), "run", "--model",
       model_path, "--x", x_path, "--out", out, "--ort_dir",
       QUANTD_ORT_NODE_PATH},
      {absl::StrCat("NODE_PATH=", QUANTD_ORT_NODE_PATH)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<Tensor> theirs = ReadNpyFile(out);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(theirs->shape(), a.shape());
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double g = a.data<float>()[i], w = theirs->data<float>()[i];
    max_diff = std::max(max_diff, std::abs(g - w));
    max_ref = std::max(max_ref, std::abs(w));
  }
  std::cout << "fp16 CNN: max|ours-ort| = " << max_diff
            << ", max|ort| = " << max_ref << std::endl;
  // Both round to FLOAT16 between ops (ORT partly computes in float): a
  // few float16 steps (2^-8 at magnitude 4) apart at most.
  EXPECT_LE(max_diff, 0.01);
  EXPECT_GT(max_ref, 0.5);
}

}  // namespace
}  // namespace quantd::executor
