// Hand-computed vectors for the ops that control-flow conditions and common
// heads use: comparisons and logic (broadcasting, BOOL out), variadic Max /
// Min and the unary math, plus their error codes (all in ops_elementwise.cc;
// the reductions are in ops_reduce_test.cc); and a head mixing them with the
// reductions, against ONNX Runtime.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::ModelBuilder;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// One node "n0" of `op` at `opset`: every input with a tensor is a graph
// input (declared with its type and shape), except those given as
// initializers; output "y" (or y0, y1, ...).
class NodeTester {
 public:
  NodeTester(std::string op, int64_t opset) : op_(std::move(op)), b_(opset) {}

  NodeTester& In(Tensor t) {
    const std::string name = absl::StrCat("x", inputs_.size());
    b_.Input(name, t.shape(), t.dtype());
    feeds_[name] = std::move(t);
    inputs_.push_back(name);
    return *this;
  }
  // An initializer: its value is known at Create.
  NodeTester& Const(const Tensor& t) {
    const std::string name = absl::StrCat("x", inputs_.size());
    *b_.model().mutable_graph()->add_initializer() = t.ToProto(name);
    inputs_.push_back(name);
    return *this;
  }
  // An omitted optional input.
  NodeTester& None() {
    inputs_.push_back("");
    return *this;
  }
  NodeTester& Attr(const std::string& name, int64_t v) {
    attrs_.emplace_back(name, std::vector<int64_t>{v});
    ints_.push_back(false);
    return *this;
  }
  NodeTester& Attr(const std::string& name, std::vector<int64_t> v) {
    attrs_.emplace_back(name, std::move(v));
    ints_.push_back(true);
    return *this;
  }

  onnx::ModelProto Model() {
    ModelBuilder b = b_;
    b.Node(op_, inputs_, {"y"}, "n0");
    for (size_t i = 0; i < attrs_.size(); ++i) {
      if (ints_[i]) {
        b.Attr(attrs_[i].first, attrs_[i].second);
      } else {
        b.Attr(attrs_[i].first, attrs_[i].second[0]);
      }
    }
    b.model().mutable_graph()->add_output()->set_name("y");
    return b.Build();
  }

  absl::StatusOr<std::unique_ptr<Executor>> Create() {
    return Executor::Create(Model());
  }

  // The output, or the Create / Run error.
  absl::StatusOr<Tensor> Run() {
    absl::StatusOr<std::unique_ptr<Executor>> e = Create();
    if (!e.ok()) return e.status();
    absl::StatusOr<std::vector<Tensor>> out = (*e)->Run(feeds_);
    if (!out.ok()) return out.status();
    return (*out)[0];
  }

 private:
  std::string op_;
  ModelBuilder b_;
  std::vector<std::string> inputs_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> attrs_;
  std::vector<bool> ints_;
  absl::flat_hash_map<std::string, Tensor> feeds_;
};

template <typename T>
std::vector<T> Values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), TypeOf<T>::value) << DataTypeName(t.dtype());
  if (t.dtype() != TypeOf<T>::value) return {};
  return std::vector<T>(t.data<T>(), t.data<T>() + t.size());
}

template <typename T>
Tensor T1(std::vector<int64_t> shape, std::vector<T> v) {
  return Tensor::FromVector<T>(std::move(shape), v);
}

// ------------------------------------------------------------ comparisons

TEST(OpsComparisonTest, GreaterBroadcastsRowOverMatrix) {
  absl::StatusOr<Tensor> y = NodeTester("Greater", 13)
                                 .In(T1<float>({2, 3}, {1, 5, 3, -1, 0, 9}))
                                 .In(T1<float>({3}, {0, 5, 2}))
                                 .Run();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<bool>(*y),
              ElementsAre(true, false, true, false, false, true));
}

TEST(OpsComparisonTest, LessBroadcastsColumnAgainstRowInt64) {
  absl::StatusOr<Tensor> y = NodeTester("Less", 9)
                                 .In(T1<int64_t>({2, 1}, {1, 4}))
                                 .In(T1<int64_t>({1, 3}, {0, 2, 4}))
                                 .Run();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<bool>(*y),
              ElementsAre(false, true, true, false, false, false));
}

TEST(OpsComparisonTest, OrEqualVariantsIncludeTies) {
  absl::StatusOr<Tensor> ge = NodeTester("GreaterOrEqual", 12)
                                  .In(T1<int32_t>({}, {2}))
                                  .In(T1<int32_t>({4}, {1, 2, 3, -7}))
                                  .Run();
  ASSERT_TRUE(ge.ok()) << ge.status();
  EXPECT_EQ(ge->shape(), (std::vector<int64_t>{4}));
  EXPECT_THAT(Values<bool>(*ge), ElementsAre(true, true, false, true));
  absl::StatusOr<Tensor> le = NodeTester("LessOrEqual", 16)
                                  .In(T1<double>({3}, {1.5, 2.0, 2.5}))
                                  .In(T1<double>({1}, {2.0}))
                                  .Run();
  ASSERT_TRUE(le.ok()) << le.status();
  EXPECT_THAT(Values<bool>(*le), ElementsAre(true, true, false));
}

TEST(OpsComparisonTest, NanComparesFalse) {
  absl::StatusOr<Tensor> y = NodeTester("Greater", 13)
                                 .In(T1<float>({2}, {kNan, 1}))
                                 .In(T1<float>({2}, {0, kNan}))
                                 .Run();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<bool>(*y), ElementsAre(false, false));
}

TEST(OpsComparisonTest, ShapesThatDoNotBroadcastNameTheNode) {
  absl::StatusOr<Tensor> y = NodeTester("Less", 13)
                                 .In(T1<float>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                 .In(T1<float>({2}, {1, 2}))
                                 .Run();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("n0"));
  EXPECT_THAT(y.status().message(), HasSubstr("do not broadcast"));
}

TEST(OpsComparisonTest, MixedInputTypesAreInvalid) {
  absl::StatusOr<Tensor> y = NodeTester("Greater", 13)
                                 .In(T1<float>({1}, {1}))
                                 .In(T1<int64_t>({1}, {1}))
                                 .Run();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("n0"));
}

// ------------------------------------------------------------------ logic

TEST(OpsLogicTest, AndOrXorBroadcast) {
  const Tensor a = T1<bool>({2, 2}, {true, true, false, false});
  const Tensor b = T1<bool>({2}, {true, false});
  struct Case {
    const char* op;
    std::vector<bool> want;
  };
  for (const Case& c : {Case{"And", {true, false, false, false}},
                        Case{"Or", {true, true, true, false}},
                        Case{"Xor", {false, true, true, false}}}) {
    absl::StatusOr<Tensor> y = NodeTester(c.op, 7).In(a).In(b).Run();
    ASSERT_TRUE(y.ok()) << c.op << ": " << y.status();
    EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 2})) << c.op;
    EXPECT_THAT(Values<bool>(*y), ElementsAreArray(c.want)) << c.op;
  }
}

TEST(OpsLogicTest, NotFlips) {
  absl::StatusOr<Tensor> y =
      NodeTester("Not", 7).In(T1<bool>({3}, {true, false, true})).Run();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<bool>(*y), ElementsAre(false, true, false));
}

TEST(OpsLogicTest, NonBoolInputIsRefusedAtCreate) {
  absl::StatusOr<std::unique_ptr<Executor>> e = NodeTester("And", 7)
                                                    .In(T1<float>({1}, {1}))
                                                    .In(T1<float>({1}, {0}))
                                                    .Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(e.status().message(), HasSubstr("n0"));
  EXPECT_THAT(e.status().message(), HasSubstr("FLOAT"));
}

TEST(OpsLogicTest, ComparisonFeedsWhereAndLogic) {
  // The shape of a typical condition: (x > 0) and not (x > 2) selects x.
  ModelBuilder b(13);
  b.Input("x", {4})
      .Initializer("zero", {}, {0.0f})
      .Initializer("two", {}, {2.0f})
      .Node("Greater", {"x", "zero"}, {"pos"})
      .Node("Greater", {"x", "two"}, {"big"})
      .Node("Not", {"big"}, {"small"})
      .Node("And", {"pos", "small"}, {"cond"})
      .Node("Where", {"cond", "x", "zero"}, {"y"})
      .Output("y", {4});
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(b.Build());
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<std::vector<Tensor>> out =
      (*e)->Run({{"x", T1<float>({4}, {-1, 1, 2, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values<float>((*out)[0]), ElementsAre(0, 1, 2, 0));
}

// ------------------------------------------------------------ elementwise

TEST(OpsElementwiseTest, VariadicMaxMinBroadcastThreeInputs) {
  const Tensor a = T1<float>({2, 1}, {1, 6});
  const Tensor b = T1<float>({3}, {0, 4, 8});
  const Tensor c = T1<float>({}, {3});
  absl::StatusOr<Tensor> mx = NodeTester("Max", 13).In(a).In(b).In(c).Run();
  ASSERT_TRUE(mx.ok()) << mx.status();
  EXPECT_EQ(mx->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<float>(*mx), ElementsAre(3, 4, 8, 6, 6, 8));
  absl::StatusOr<Tensor> mn = NodeTester("Min", 13).In(a).In(b).In(c).Run();
  ASSERT_TRUE(mn.ok()) << mn.status();
  EXPECT_THAT(Values<float>(*mn), ElementsAre(0, 1, 1, 0, 3, 3));
  absl::StatusOr<Tensor> one =
      NodeTester("Max", 13).In(T1<int64_t>({2}, {5, -5})).Run();
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(Values<int64_t>(*one), ElementsAre(5, -5));
}

TEST(OpsElementwiseTest, MaxPropagatesNan) {
  absl::StatusOr<Tensor> y = NodeTester("Max", 13)
                                 .In(T1<float>({2}, {kNan, 1}))
                                 .In(T1<float>({2}, {0, kNan}))
                                 .Run();
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> v = Values<float>(*y);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_TRUE(std::isnan(v[1]));
}

TEST(OpsElementwiseTest, MaxBeforeOpset8NeedsEqualShapes) {
  absl::StatusOr<Tensor> y = NodeTester("Max", 7)
                                 .In(T1<float>({2}, {1, 2}))
                                 .In(T1<float>({1}, {3}))
                                 .Run();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("n0"));
  absl::StatusOr<Tensor> same = NodeTester("Min", 7)
                                    .In(T1<float>({2}, {1, 2}))
                                    .In(T1<float>({2}, {3, 0}))
                                    .Run();
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_THAT(Values<float>(*same), ElementsAre(1, 0));
}

TEST(OpsElementwiseTest, AbsSignExpLog) {
  const Tensor x = T1<float>({4}, {-2, 0, 0.5f, kNan});
  absl::StatusOr<Tensor> abs = NodeTester("Abs", 13).In(x).Run();
  ASSERT_TRUE(abs.ok()) << abs.status();
  std::vector<float> v = Values<float>(*abs);
  EXPECT_EQ(v[0], 2);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[2], 0.5f);
  EXPECT_TRUE(std::isnan(v[3]));
  absl::StatusOr<Tensor> sign = NodeTester("Sign", 13).In(x).Run();
  ASSERT_TRUE(sign.ok()) << sign.status();
  v = Values<float>(*sign);
  EXPECT_EQ(v[0], -1);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[2], 1);
  EXPECT_TRUE(std::isnan(v[3]));
  absl::StatusOr<Tensor> isign =
      NodeTester("Sign", 9).In(T1<int64_t>({3}, {-9, 0, 4})).Run();
  ASSERT_TRUE(isign.ok()) << isign.status();
  EXPECT_THAT(Values<int64_t>(*isign), ElementsAre(-1, 0, 1));
  absl::StatusOr<Tensor> iabs =
      NodeTester("Abs", 13).In(T1<int32_t>({2}, {-3, 3})).Run();
  ASSERT_TRUE(iabs.ok()) << iabs.status();
  EXPECT_THAT(Values<int32_t>(*iabs), ElementsAre(3, 3));

  absl::StatusOr<Tensor> ex =
      NodeTester("Exp", 13).In(T1<float>({3}, {0, 1, -kInf})).Run();
  ASSERT_TRUE(ex.ok()) << ex.status();
  v = Values<float>(*ex);
  EXPECT_EQ(v[0], 1);
  EXPECT_NEAR(v[1], 2.7182817f, 1e-6);
  EXPECT_EQ(v[2], 0);
  absl::StatusOr<Tensor> lg =
      NodeTester("Log", 13).In(T1<double>({3}, {1, M_E, 0})).Run();
  ASSERT_TRUE(lg.ok()) << lg.status();
  const std::vector<double> d = Values<double>(*lg);
  EXPECT_EQ(d[0], 0);
  EXPECT_NEAR(d[1], 1, 1e-15);
  EXPECT_EQ(d[2], -std::numeric_limits<double>::infinity());
}

TEST(OpsElementwiseTest, ExpOfIntsIsRefusedAtCreate) {
  absl::StatusOr<std::unique_ptr<Executor>> e =
      NodeTester("Exp", 13).In(T1<int64_t>({1}, {1})).Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(e.status().message(), HasSubstr("INT64"));
}

// ------------------------------------------------------ against ONNX Runtime

// A head and a condition built from every new op (and the moved ReduceMean),
// judged by onnxruntime-node: log-sum-exp, products, mins, an ArgMax, a
// comparison / logic chain feeding Where, variadic Max / Min.
TEST(OpsLogicReduceOrtParityTest, HeadAndConditionMatchOnnxRuntime) {
  ASSERT_TRUE(std::filesystem::exists(std::string(QUANTD_ORT_NODE_PATH) +
                                      "/onnxruntime-node"))
      << "no onnxruntime-node under " << QUANTD_ORT_NODE_PATH;
  ModelBuilder b(13);
  b.Input("x", {4, 5, 6})
      .Initializer("half", {}, {0.5f})
      .Initializer("zero", {}, {0.0f})
      .Initializer("neg", {}, {-1.5f});
  *b.model().mutable_graph()->add_initializer() =
      T1<int64_t>({1}, {2}).ToProto("ax2");
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

  testing::TempDir tmp;
  const std::string model_path = tmp.File("head.onnx");
  testing::WriteFileOrDie(model_path, b.Bytes());
  Tensor x(TP::FLOAT, {4, 5, 6});
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < x.size(); ++i) x.mutable_data<float>()[i] = dist(gen);
  const std::string x_path = tmp.File("x.npy");
  ASSERT_TRUE(WriteNpyFile(x_path, x).ok());

  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(b.Build());
  ASSERT_TRUE(exec.ok()) << exec.status();
  ThreadPool pool(2);
  Executor::RunOptions ro;
  ro.pool = &pool;
  absl::StatusOr<std::vector<Tensor>> ours = (*exec)->Run({{"x", x}}, ro);
  ASSERT_TRUE(ours.ok()) << ours.status();

  const std::string out_path = tmp.File("ort_out.npy");
  testing::CommandResult r = testing::RunCommand(
      {QUANTD_NODE_BIN, testing::SourcePath("scripts/ort_eval.js"), "run",
       "--model", model_path, "--x", x_path, "--out", out_path, "--batch",
       "1000000", "--ort_dir", QUANTD_ORT_NODE_PATH},
      {absl::StrCat("NODE_PATH=", QUANTD_ORT_NODE_PATH)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<Tensor> theirs = ReadNpyFile(out_path);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const Tensor& a = (*ours)[0];
  ASSERT_EQ(a.shape(), theirs->shape());
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double g = a.data<float>()[i], w = theirs->data<float>()[i];
    max_diff = std::max(max_diff, std::abs(g - w));
    max_ref = std::max(max_ref, std::abs(w));
  }
  const double rel = max_diff / max_ref;
  std::cout << "measured: ORT parity of the logic/reduce head: "
               "max|ours-ort|/max|ort| = "
            << rel << std::endl;
  EXPECT_LE(rel, 1e-5);
}

}  // namespace
}  // namespace quantd::executor
