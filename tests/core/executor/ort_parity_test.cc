// The executor against ONNX Runtime (onnxruntime-node via
// scripts/ort_eval.js) on real exported models: the digits CNN, the
// transformer-encoder fixture, and torchvision ResNet-18 / MobileNetV2 with
// random weights (exported at test time; 47 MB, not committed). Outputs must
// agree within 1e-4 relative: max |ours - ort| / max |ort|. Also a head
// built here that mixes the reductions with the comparison / logic ops.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/graph/model_io.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::ModelBuilder;
using ::quantd::testing::RunCommand;
using ::quantd::testing::SourcePath;
using ::quantd::testing::TempDir;
using TP = onnx::TensorProto;

constexpr double kMaxRelativeDiff = 1e-4;

// Runs the model on x in the executor and in ORT; returns the relative
// difference of the first outputs (or -1 after a test failure).
double RelativeDiff(const std::string& model_path, const std::string& x_path,
                    const TempDir& tmp) {
  absl::StatusOr<onnx::ModelProto> model =
      graph::ParseModel(testing::ReadFileOrDie(model_path));
  if (!model.ok()) {
    ADD_FAILURE() << model.status();
    return -1;
  }
  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(*model);
  if (!exec.ok()) {
    ADD_FAILURE() << exec.status();
    return -1;
  }
  absl::StatusOr<Tensor> x = ReadNpyFile(x_path);
  if (!x.ok()) {
    ADD_FAILURE() << x.status();
    return -1;
  }
  ThreadPool pool(2);
  Executor::RunOptions ro;
  ro.pool = &pool;
  absl::StatusOr<std::vector<Tensor>> ours =
      (*exec)->Run({{(*exec)->input_names()[0], *x}}, ro);
  if (!ours.ok()) {
    ADD_FAILURE() << ours.status();
    return -1;
  }

  const std::string out = tmp.File("ort_out.npy");
  testing::CommandResult r =
      RunCommand({QUANTD_NODE_BIN, SourcePath("scripts/ort_eval.js"), "run",
                  "--model", model_path, "--x", x_path, "--out", out, "--batch",
                  "1000000", "--ort_dir", QUANTD_ORT_NODE_PATH},
                 {absl::StrCat("NODE_PATH=", QUANTD_ORT_NODE_PATH)});
  if (r.exit_code != 0) {
    ADD_FAILURE() << "ort_eval failed: " << r.err;
    return -1;
  }
  absl::StatusOr<Tensor> theirs = ReadNpyFile(out);
  if (!theirs.ok()) {
    ADD_FAILURE() << theirs.status();
    return -1;
  }
  const Tensor& a = (*ours)[0];
  if (a.shape() != theirs->shape()) {
    ADD_FAILURE() << "shape " << ShapeString(a.shape()) << " vs ORT "
                  << ShapeString(theirs->shape());
    return -1;
  }
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double g = a.data<float>()[i], w = theirs->data<float>()[i];
    max_diff = std::max(max_diff, std::abs(g - w));
    max_ref = std::max(max_ref, std::abs(w));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

void ExpectParity(const std::string& name, const std::string& model,
                  const std::string& x) {
  TempDir tmp;
  const double rel = RelativeDiff(model, x, tmp);
  std::cout << "ORT parity " << name << ": max|ours-ort|/max|ort| = " << rel
            << std::endl;
  EXPECT_GE(rel, 0.0);
  EXPECT_LE(rel, kMaxRelativeDiff) << name;
}

// A [n, 3, 224, 224] normal(0, 1) input written as .npy.
std::string WriteImageBatch(const TempDir& tmp, int64_t n) {
  Tensor x(onnx::TensorProto::FLOAT, {n, 3, 224, 224});
  std::mt19937 gen(42);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < x.size(); ++i) x.mutable_data<float>()[i] = d(gen);
  const std::string path = tmp.File("x.npy");
  absl::Status s = WriteNpyFile(path, x);
  EXPECT_TRUE(s.ok()) << s;
  return path;
}

TEST(OrtParityTest, DigitsCnn) {
  // scripts/setup.sh installs it: a missing runtime is a broken set-up.
  ASSERT_TRUE(OrtAvailable())
      << "no onnxruntime-node under " << QUANTD_ORT_NODE_PATH;
  ExpectParity("digits", SourcePath("examples/digits/model.onnx"),
               SourcePath("examples/digits/test_x.npy"));
}

TEST(OrtParityTest, TransformerEncoder) {
  // scripts/setup.sh installs it: a missing runtime is a broken set-up.
  ASSERT_TRUE(OrtAvailable())
      << "no onnxruntime-node under " << QUANTD_ORT_NODE_PATH;
  for (const char* opset : {"14", "17"}) {
    ExpectParity(absl::StrCat("transformer opset ", opset),
                 SourcePath(absl::StrCat(
                     "tests/data/executor/transformer_opset", opset, ".onnx")),
                 SourcePath("tests/data/executor/transformer_x.npy"));
  }
}

void TorchvisionParity(const std::string& name, bool mobilenet) {
  // scripts/setup.sh installs it: a missing runtime is a broken set-up.
  ASSERT_TRUE(OrtAvailable())
      << "no onnxruntime-node under " << QUANTD_ORT_NODE_PATH;
  TempDir tmp;
  const std::string model = tmp.File(name + ".onnx");
  std::vector<std::string> argv = {
      "/usr/bin/python3", SourcePath("scripts/make_resnet18.py"), model};
  if (mobilenet) argv.push_back("--mobilenet");
  testing::CommandResult r = RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectParity(name, model, WriteImageBatch(tmp, 2));
}

TEST(OrtParityTest, ResNet18) { TorchvisionParity("resnet18", false); }
TEST(OrtParityTest, MobileNetV2) { TorchvisionParity("mobilenet_v2", true); }

// A head and a condition mixing the reductions (ops_reduce.cc) with the
// comparisons, logic, variadic Max / Min and unary math (ops_elementwise.cc),
// built here rather than exported: log-sum-exp, products, mins, an ArgMax, a
// comparison / logic chain feeding Where. Held to 1e-5 relative.
TEST(OpsLogicReduceOrtParityTest, HeadAndConditionMatchOnnxRuntime) {
  // scripts/setup.sh installs it: a missing runtime is a broken set-up.
  ASSERT_TRUE(OrtAvailable())
      << "no onnxruntime-node under " << QUANTD_ORT_NODE_PATH;
  ModelBuilder b(13);
  b.Input("x", {4, 5, 6})
      .Initializer("half", {}, {0.5f})
      .Initializer("zero", {}, {0.0f})
      .Initializer("neg", {}, {-1.5f});
  *b.model().mutable_graph()->add_initializer() = I64({1}, {2}).ToProto("ax2");
  b.Node("ReduceMax", {"x"}, {"m"})
      .Attr("axes", std::vector<int64_t>{2})
      .Node("Sub", {"x", "m"}, {"d"})
      .Node("Exp", {"d"}, {"e"})
      .Node("ReduceSum", {"e", "ax2"}, {"s"})
      .Node("Log", {"s"}, {"ls"})
      .Node("Abs", {"x"}, {"ax"})
      .Node("ReduceProd", {"ax"}, {"p"})
      .Attr("axes", std::vector<int64_t>{1})
      .Node("ReduceMin", {"x"}, {"mn"})
      .Attr("axes", std::vector<int64_t>{0, 2})
      .Node("ReduceMean", {"x"}, {"rm"})
      .Attr("axes", std::vector<int64_t>{0})
      .Attr("keepdims", 0)
      .Node("ArgMax", {"x"}, {"am"})
      .Attr("axis", 1)
      .Attr("select_last_index", 1)
      .Node("Cast", {"am"}, {"amf"})
      .Attr("to", int64_t{TP::FLOAT})
      .Node("Mul", {"m", "half"}, {"hm"})
      .Node("Greater", {"x", "mn"}, {"g"})
      .Node("LessOrEqual", {"x", "hm"}, {"le"})
      .Node("Not", {"le"}, {"nle"})
      .Node("And", {"g", "nle"}, {"c1"})
      .Node("GreaterOrEqual", {"x", "zero"}, {"ge"})
      .Node("Xor", {"c1", "ge"}, {"c2"})
      .Node("Less", {"x", "neg"}, {"lt"})
      .Node("Or", {"c2", "lt"}, {"c3"})
      .Node("Sign", {"x"}, {"sg"})
      .Node("Where", {"c3", "x", "sg"}, {"w"})
      .Node("Max", {"w", "ls", "amf"}, {"mx"})
      .Node("Min", {"x", "mn"}, {"mi"})
      .Node("Add", {"mx", "mi"}, {"t0"})
      .Node("Add", {"t0", "p"}, {"t1"})
      .Node("Add", {"t1", "rm"}, {"y"})
      .Output("y", {4, 5, 6});

  TempDir tmp;
  const std::string model_path = tmp.File("head.onnx");
  testing::WriteFileOrDie(model_path, b.Bytes());
  Tensor x(TP::FLOAT, {4, 5, 6});
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < x.size(); ++i) x.mutable_data<float>()[i] = dist(gen);
  const std::string x_path = tmp.File("x.npy");
  ASSERT_TRUE(WriteNpyFile(x_path, x).ok());

  const double rel = RelativeDiff(model_path, x_path, tmp);
  std::cout << "measured: ORT parity of the logic/reduce head: "
               "max|ours-ort|/max|ort| = "
            << rel << std::endl;
  EXPECT_GE(rel, 0.0);
  EXPECT_LE(rel, 1e-5);
}

}  // namespace
}  // namespace quantd::executor
