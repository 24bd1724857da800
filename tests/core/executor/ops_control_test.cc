// Control flow in the executor (If, Loop, Scan): bodies reading outer-scope
// values, loop-carried and scan values, nesting, run options reaching the
// bodies (on_tensor, cancellation), error codes, and ONNX Runtime parity on
// tests/data/executor/control_flow.onnx (scripts/make_control_flow_model.py).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/base/cancellation.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/graph/model_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::executor {
namespace {

using ::testing::HasSubstr;
using TP = onnx::TensorProto;
using Dims = std::optional<std::vector<int64_t>>;

// ------------------------------------------------------------ model helpers

onnx::ValueInfoProto Vi(const std::string& name, int32_t type,
                        Dims dims = std::nullopt) {
  onnx::ValueInfoProto vi;
  vi.set_name(name);
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  if (dims.has_value()) {
    auto* shape = tt->mutable_shape();
    for (int64_t d : *dims) shape->add_dim()->set_dim_value(d);
  }
  return vi;
}

onnx::NodeProto N(const std::string& op, std::vector<std::string> in,
                  std::vector<std::string> out, const std::string& name) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (const auto& i : in) n.add_input(i);
  for (const auto& o : out) n.add_output(o);
  return n;
}

onnx::NodeProto& WithGraph(onnx::NodeProto& n, const std::string& attr,
                           const onnx::GraphProto& g) {
  auto* a = n.add_attribute();
  a->set_name(attr);
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = g;
  return n;
}

onnx::NodeProto& WithInt(onnx::NodeProto& n, const std::string& attr,
                         int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(attr);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
  return n;
}

onnx::NodeProto& WithInts(onnx::NodeProto& n, const std::string& attr,
                          std::vector<int64_t> v) {
  auto* a = n.add_attribute();
  a->set_name(attr);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
  return n;
}

onnx::GraphProto Graph(const std::string& name,
                       std::vector<onnx::NodeProto> nodes,
                       std::vector<onnx::ValueInfoProto> inputs,
                       std::vector<onnx::ValueInfoProto> outputs,
                       std::vector<std::pair<std::string, Tensor>> inits = {}) {
  onnx::GraphProto g;
  g.set_name(name);
  for (auto& n : nodes) *g.add_node() = n;
  for (auto& i : inputs) *g.add_input() = i;
  for (auto& o : outputs) *g.add_output() = o;
  for (auto& [n, t] : inits) *g.add_initializer() = t.ToProto(n);
  return g;
}

onnx::ModelProto Model(const onnx::GraphProto& g, int64_t opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  *m.mutable_graph() = g;
  return m;
}

// ---------------------------------------------------------------------- If

// y = c ? (x + x) * w : x - w, z = c ? x : w; w is a main-graph initializer,
// x + x a main-graph run-time value, both read by the branches by name.
onnx::ModelProto IfModel(std::vector<int64_t> cond_dims = {}) {
  onnx::GraphProto then_g =
      Graph("then", {N("Mul", {"d", "w"}, {"ty"}, "then_mul")}, {},
            {Vi("ty", TP::FLOAT), Vi("x", TP::FLOAT)});
  onnx::GraphProto else_g =
      Graph("else", {N("Sub", {"x", "w"}, {"ey"}, "else_sub")}, {},
            {Vi("ey", TP::FLOAT), Vi("w", TP::FLOAT)});
  onnx::NodeProto iff = N("If", {"c"}, {"y", "z"}, "branch");
  WithGraph(iff, "then_branch", then_g);
  WithGraph(iff, "else_branch", else_g);
  return Model(Graph("main", {N("Add", {"x", "x"}, {"d"}, "double"), iff},
                     {Vi("c", TP::BOOL, cond_dims), Vi("x", TP::FLOAT, {{3}})},
                     {Vi("y", TP::FLOAT), Vi("z", TP::FLOAT)},
                     {{"w", Floats({3}, {1, 2, 3})}}));
}

TEST(IfTest, BranchesReadOuterValuesAndInitializers) {
  auto exec = MustCreate(IfModel());
  ASSERT_NE(exec, nullptr);
  const Tensor x = Floats({3}, {1, -1, 0.5f});
  auto then_out = exec->Run({{"c", Tensor::Scalar<bool>(true)}, {"x", x}});
  ASSERT_TRUE(then_out.ok()) << then_out.status();
  EXPECT_EQ(Values<float>((*then_out)[0]), (std::vector<float>{2, -4, 3}));
  EXPECT_EQ(Values<float>((*then_out)[1]), (std::vector<float>{1, -1, 0.5f}));
  auto else_out = exec->Run({{"c", Tensor::Scalar<bool>(false)}, {"x", x}});
  ASSERT_TRUE(else_out.ok()) << else_out.status();
  EXPECT_EQ(Values<float>((*else_out)[0]), (std::vector<float>{0, -3, -2.5f}));
  EXPECT_EQ(Values<float>((*else_out)[1]), (std::vector<float>{1, 2, 3}));
}

TEST(IfTest, ConditionMustBeOneBoolElement) {
  auto exec = MustCreate(IfModel({2}));
  ASSERT_NE(exec, nullptr);
  auto out = exec->Run({{"c", Tensor::FromVector<bool>({2}, {true, false})},
                        {"x", Floats({3}, {1, 2, 3})}});
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'branch'"));
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("single BOOL element"));

  onnx::ModelProto m = IfModel();
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->set_elem_type(TP::INT64);
  auto e = Executor::Create(m);
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("'branch'"));
}

// -------------------------------------------------------------------- Loop

// Loop(M, c, a0) over body (i, c_in, acc): acc += x + i; scan sq = acc * i;
// continues while i != 3. x is a main-graph input read by the body.
onnx::ModelProto LoopModel(bool with_m) {
  onnx::GraphProto body =
      Graph("body",
            {N("Cast", {"i"}, {"fi"}, "b_cast"),
             N("Add", {"x", "fi"}, {"inc"}, "b_inc"),
             N("Add", {"acc", "inc"}, {"acc_out"}, "b_acc"),
             N("Equal", {"i", "three"}, {"stop"}, "b_eq"),
             N("Cast", {"stop"}, {"stop_i"}, "b_cast2"),
             N("Equal", {"stop_i", "zero"}, {"c_out"}, "b_not"),
             N("Mul", {"acc_out", "fi"}, {"sq"}, "b_scan")},
            {Vi("i", TP::INT64, {{}}), Vi("c_in", TP::BOOL, {{}}),
             Vi("acc", TP::FLOAT)},
            {Vi("c_out", TP::BOOL, {{}}), Vi("acc_out", TP::FLOAT),
             Vi("sq", TP::FLOAT, {{2}})});
  WithInt(*body.mutable_node(0), "to", TP::FLOAT);
  WithInt(*body.mutable_node(4), "to", TP::INT64);
  onnx::NodeProto loop =
      N("Loop", {with_m ? "M" : "", "c", "a0"}, {"acc_final", "sqs"}, "loop");
  WithGraph(loop, "body", body);
  std::vector<onnx::ValueInfoProto> inputs = {Vi("c", TP::BOOL, {{}}),
                                              Vi("a0", TP::FLOAT, {{2}}),
                                              Vi("x", TP::FLOAT, {{2}})};
  if (with_m) inputs.push_back(Vi("M", TP::INT64, {{}}));
  return Model(Graph("main", {loop}, inputs,
                     {Vi("acc_final", TP::FLOAT), Vi("sqs", TP::FLOAT)},
                     {{"three", Tensor::Scalar<int64_t>(3)},
                      {"zero", Tensor::Scalar<int64_t>(0)}}));
}

struct LoopResult {
  std::vector<float> acc;
  std::vector<float> sqs;  // Flattened [iterations, 2].
  int64_t iterations = 0;
};

LoopResult LoopReference(std::optional<int64_t> m, bool cond,
                         std::vector<float> acc, std::vector<float> x) {
  LoopResult r;
  for (int64_t i = 0; (!m.has_value() || i < *m) && cond; ++i) {
    for (int k = 0; k < 2; ++k) {
      acc[k] += x[k] + static_cast<float>(i);
      r.sqs.push_back(acc[k] * static_cast<float>(i));
    }
    cond = i != 3;
    ++r.iterations;
  }
  r.acc = acc;
  return r;
}

TEST(LoopTest, TripCountConditionCarriedAndScanOutputs) {
  auto exec = MustCreate(LoopModel(true));
  ASSERT_NE(exec, nullptr);
  const std::vector<float> a0 = {1, 2}, x = {0.5f, -1};
  struct Case {
    int64_t m;
    bool cond;
    int64_t want_iterations;
  };
  // Cond turns false at i == 3 (4 iterations) unless M stops it first; a
  // false initial condition runs none.
  for (const Case& c : {Case{10, true, 4}, Case{2, true, 2}, Case{0, true, 0},
                        Case{10, false, 0}}) {
    SCOPED_TRACE(absl::StrCat("M=", c.m, " cond=", c.cond));
    auto out = exec->Run({{"M", Tensor::Scalar<int64_t>(c.m)},
                          {"c", Tensor::Scalar<bool>(c.cond)},
                          {"a0", Floats({2}, a0)},
                          {"x", Floats({2}, x)}});
    ASSERT_TRUE(out.ok()) << out.status();
    const LoopResult want = LoopReference(c.m, c.cond, a0, x);
    EXPECT_EQ(want.iterations, c.want_iterations);
    EXPECT_EQ(Values<float>((*out)[0]), want.acc);
    // With no iteration the scan output takes the body's declared shape.
    EXPECT_EQ((*out)[1].shape(), (std::vector<int64_t>{c.want_iterations, 2}));
    EXPECT_EQ(Values<float>((*out)[1]), want.sqs);
  }
}

TEST(LoopTest, WithoutTripCountRunsUntilTheConditionTurnsFalse) {
  auto exec = MustCreate(LoopModel(false));
  ASSERT_NE(exec, nullptr);
  auto out = exec->Run({{"c", Tensor::Scalar<bool>(true)},
                        {"a0", Floats({2}, {0, 0})},
                        {"x", Floats({2}, {1, 1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  const LoopResult want = LoopReference(std::nullopt, true, {0, 0}, {1, 1});
  EXPECT_EQ(want.iterations, 4);
  EXPECT_EQ(Values<float>((*out)[0]), want.acc);
  EXPECT_EQ(Values<float>((*out)[1]), want.sqs);
}

TEST(LoopTest, OnTensorSeesBodyValuesOncePerIteration) {
  auto exec = MustCreate(LoopModel(true));
  ASSERT_NE(exec, nullptr);
  std::map<std::string, int> count;
  std::vector<int64_t> iterations_seen;
  Executor::RunOptions ro;
  ro.on_tensor = [&](const std::string& name, const Tensor& t) {
    ++count[name];
    if (name == "i") iterations_seen.push_back(t.IntAt(0));
  };
  auto out = exec->Run({{"M", Tensor::Scalar<int64_t>(10)},
                        {"c", Tensor::Scalar<bool>(true)},
                        {"a0", Floats({2}, {1, 2})},
                        {"x", Floats({2}, {3, 4})}},
                       ro);
  ASSERT_TRUE(out.ok()) << out.status();
  // Body inputs and every body node output: once per iteration (4).
  for (const char* name :
       {"i", "c_in", "acc", "fi", "inc", "acc_out", "stop", "c_out", "sq"}) {
    EXPECT_EQ(count[name], 4) << name;
  }
  EXPECT_EQ(iterations_seen, (std::vector<int64_t>{0, 1, 2, 3}));
  // Main-graph values: once.
  for (const char* name : {"M", "c", "a0", "x", "acc_final", "sqs"}) {
    EXPECT_EQ(count[name], 1) << name;
  }
}

// Loop(M, c, v) with body v + 1 (cond and M may be absent).
onnx::ModelProto CountingLoop(bool with_m, bool with_cond,
                              int64_t m = int64_t{1} << 40) {
  onnx::GraphProto body =
      Graph("body",
            {N("Add", {"v", "onef"}, {"v2"}, "inc"),
             N("Identity", {"ci"}, {"co"}, "keep")},
            {Vi("i", TP::INT64, {{}}), Vi("ci", TP::BOOL, {{}}),
             Vi("v", TP::FLOAT, {{1}})},
            {Vi("co", TP::BOOL, {{}}), Vi("v2", TP::FLOAT, {{1}})});
  onnx::NodeProto loop =
      N("Loop", {with_m ? "M" : "", with_cond ? "c" : "", "v0"}, {"vf"},
        "long_loop");
  WithGraph(loop, "body", body);
  return Model(Graph("main", {loop}, {Vi("v0", TP::FLOAT, {{1}})},
                     {Vi("vf", TP::FLOAT)},
                     {{"M", Tensor::Scalar<int64_t>(m)},
                      {"c", Tensor::Scalar<bool>(true)},
                      {"onef", Floats({1}, {1})}}));
}

TEST(LoopTest, CancellationStopsALongLoopBetweenIterations) {
  for (bool with_m : {true, false}) {
    SCOPED_TRACE(with_m ? "M = 2^40" : "no M, no condition: endless");
    auto exec = MustCreate(CountingLoop(with_m, with_m));
    ASSERT_NE(exec, nullptr);
    // Deterministic: cancel from inside the 100th iteration.
    CancellationToken token;
    int produced = 0;
    Executor::RunOptions ro;
    ro.cancel = &token;
    ro.on_tensor = [&](const std::string& name, const Tensor&) {
      if (name == "v2" && ++produced == 100) token.Cancel();
    };
    auto out = exec->Run({{"v0", Floats({1}, {0})}}, ro);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled)
        << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("long_loop"));
    EXPECT_LE(produced, 101);

    // From another thread while it runs: how quickly it stops.
    CancellationToken token2;
    Executor::RunOptions ro2;
    ro2.cancel = &token2;
    std::atomic<int64_t> cancelled_at{0};
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      cancelled_at =
          std::chrono::steady_clock::now().time_since_epoch().count();
      token2.Cancel();
    });
    auto out2 = exec->Run({{"v0", Floats({1}, {0})}}, ro2);
    const int64_t returned =
        std::chrono::steady_clock::now().time_since_epoch().count();
    canceller.join();
    EXPECT_EQ(out2.status().code(), absl::StatusCode::kCancelled)
        << out2.status();
    std::cout << "measured: Loop (" << (with_m ? "M = 2^40" : "endless")
              << ") returned "
              << std::chrono::duration<double, std::micro>(
                     std::chrono::steady_clock::duration(returned -
                                                         cancelled_at))
                     .count()
              << " us after Cancel()" << std::endl;
  }
}

TEST(LoopTest, ManyIterations) {
  constexpr int64_t kIterations = 100000;
  auto exec = MustCreate(CountingLoop(true, false, kIterations));
  ASSERT_NE(exec, nullptr);
  const auto start = std::chrono::steady_clock::now();
  auto out = exec->Run({{"v0", Floats({1}, {0})}});
  const double us = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<float>((*out)[0]), (std::vector<float>{kIterations}));
  std::cout << "measured: Loop with a 2-node body: " << us / kIterations
            << " us per iteration (" << kIterations << " iterations)"
            << std::endl;
}

TEST(LoopTest, ScanOutputChangingShapeIsInvalid) {
  // Scan output Range(0, i + 1): shape [i + 1] changes every iteration.
  onnx::GraphProto body =
      Graph("body",
            {N("Add", {"i", "onei"}, {"i1"}, "b_add"),
             N("Range", {"zeroi", "i1", "onei"}, {"r"}, "b_range"),
             N("Identity", {"ci"}, {"co"}, "b_id")},
            {Vi("i", TP::INT64, {{}}), Vi("ci", TP::BOOL, {{}})},
            {Vi("co", TP::BOOL, {{}}), Vi("r", TP::INT64)});
  onnx::NodeProto loop = N("Loop", {"M", ""}, {"rs"}, "grow");
  WithGraph(loop, "body", body);
  auto exec = MustCreate(Model(Graph("main", {loop}, {Vi("M", TP::INT64, {{}})},
                                     {Vi("rs", TP::INT64)},
                                     {{"onei", Tensor::Scalar<int64_t>(1)},
                                      {"zeroi", Tensor::Scalar<int64_t>(0)}})));
  ASSERT_NE(exec, nullptr);
  auto one = exec->Run({{"M", Tensor::Scalar<int64_t>(1)}});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)[0].shape(), (std::vector<int64_t>{1, 1}));
  auto out = exec->Run({{"M", Tensor::Scalar<int64_t>(3)}});
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'grow'"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("scan output 0"));
}

// torch.onnx declares a loop-carried list by its initial value ([0, 2]:
// empty) although it grows every iteration; ONNX Runtime runs such models
// (Mask R-CNN's paste-masks loop), so the body's declared dims are not held
// against the values (element type and rank still are).
TEST(LoopTest, ACarriedValueMayOutgrowItsDeclaredDims) {
  onnx::GraphProto body =
      Graph("body",
            {N("Concat", {"acc", "row"}, {"acc_out"}, "b_append"),
             N("Identity", {"ci"}, {"co"}, "b_id")},
            {Vi("i", TP::INT64, {{}}), Vi("ci", TP::BOOL, {{}}),
             Vi("acc", TP::FLOAT, {{0, 2}})},
            {Vi("co", TP::BOOL, {{}}), Vi("acc_out", TP::FLOAT, {{0, 2}})});
  WithInt(*body.mutable_node(0), "axis", 0);
  onnx::NodeProto loop = N("Loop", {"M", "", "empty"}, {"all"}, "append");
  WithGraph(loop, "body", body);
  auto exec =
      MustCreate(Model(Graph("main", {loop}, {}, {Vi("all", TP::FLOAT)},
                             {{"M", Tensor::Scalar<int64_t>(3)},
                              {"empty", Tensor::FromVector<float>({0, 2}, {})},
                              {"row", Floats({1, 2}, {1, 2})}})));
  ASSERT_NE(exec, nullptr);
  auto out = exec->Run({});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values<float>((*out)[0]), (std::vector<float>{1, 2, 1, 2, 1, 2}));
}

TEST(LoopTest, BodySignatureMismatchesAreInvalid) {
  // Carried FLOAT value comes back INT64.
  onnx::GraphProto body = Graph(
      "body",
      {N("Cast", {"v"}, {"v2"}, "b_cast"),
       N("Identity", {"ci"}, {"co"}, "b_id")},
      {Vi("i", TP::INT64, {{}}), Vi("ci", TP::BOOL, {{}}), Vi("v", TP::FLOAT)},
      {Vi("co", TP::BOOL, {{}}), Vi("v2", TP::INT64)});
  WithInt(*body.mutable_node(0), "to", TP::INT64);
  onnx::NodeProto loop = N("Loop", {"M", "", "v0"}, {"vf"}, "typed");
  WithGraph(loop, "body", body);
  onnx::ModelProto m =
      Model(Graph("main", {loop}, {Vi("v0", TP::FLOAT, {{1}})},
                  {Vi("vf", TP::FLOAT)}, {{"M", Tensor::Scalar<int64_t>(2)}}));
  auto e = Executor::Create(m);
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("'typed'"));
  EXPECT_THAT(std::string(e.status().message()),
              HasSubstr("loop-carried value 0"));

  // A scan output the node does not declare.
  onnx::GraphProto body2 = Graph(
      "body", {N("Identity", {"ci"}, {"co"}, "b_id")},
      {Vi("i", TP::INT64, {{}}), Vi("ci", TP::BOOL, {{}}), Vi("v", TP::FLOAT)},
      {Vi("co", TP::BOOL, {{}}), Vi("v", TP::FLOAT), Vi("i", TP::INT64)});
  onnx::NodeProto loop2 = N("Loop", {"M", "", "v0"}, {"vf"}, "counted");
  WithGraph(loop2, "body", body2);
  e = Executor::Create(
      Model(Graph("main", {loop2}, {Vi("v0", TP::FLOAT, {{1}})},
                  {Vi("vf", TP::FLOAT)}, {{"M", Tensor::Scalar<int64_t>(2)}})));
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("'counted'"));
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("1 scan outputs"));

  // Trip count of the wrong type, fed at run time.
  auto exec = MustCreate(LoopModel(true));
  ASSERT_NE(exec, nullptr);
  onnx::ModelProto bad_m = LoopModel(true);
  bad_m.mutable_graph()
      ->mutable_input(3)
      ->mutable_type()
      ->mutable_tensor_type()
      ->set_elem_type(TP::INT32);
  e = Executor::Create(bad_m);
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("trip count"));
}

// ------------------------------------------------------------ nesting, scope

// If(c) then Loop(3, true, x) with body v + w + x (w a main initializer, x a
// main input: both reach the Loop body through the If), else -x.
onnx::ModelProto LoopInIfModel() {
  onnx::GraphProto body =
      Graph("loop_body",
            {N("Add", {"v", "w"}, {"vw"}, "inner_add"),
             N("Add", {"vw", "x"}, {"v2"}, "inner_add_x"),
             N("Identity", {"ci"}, {"co"}, "inner_cond")},
            {Vi("i", TP::INT64, {{}}), Vi("ci", TP::BOOL, {{}}),
             Vi("v", TP::FLOAT, {{2}})},
            {Vi("co", TP::BOOL, {{}}), Vi("v2", TP::FLOAT, {{2}})});
  onnx::NodeProto loop = N("Loop", {"M", "t", "x"}, {"lf"}, "inner_loop");
  WithGraph(loop, "body", body);
  onnx::GraphProto then_g = Graph("then", {loop}, {}, {Vi("lf", TP::FLOAT)});
  onnx::GraphProto else_g = Graph("else", {N("Neg", {"x"}, {"nx"}, "else_neg")},
                                  {}, {Vi("nx", TP::FLOAT)});
  onnx::NodeProto iff = N("If", {"c"}, {"y"}, "outer_if");
  WithGraph(iff, "then_branch", then_g);
  WithGraph(iff, "else_branch", else_g);
  return Model(Graph("main", {iff},
                     {Vi("c", TP::BOOL, {{}}), Vi("x", TP::FLOAT, {{2}})},
                     {Vi("y", TP::FLOAT)},
                     {{"w", Floats({2}, {10, 20})},
                      {"M", Tensor::Scalar<int64_t>(3)},
                      {"t", Tensor::Scalar<bool>(true)}}));
}

TEST(NestingTest, LoopInsideIfReadsValuesTwoScopesOut) {
  auto exec = MustCreate(LoopInIfModel());
  ASSERT_NE(exec, nullptr);
  const Tensor x = Floats({2}, {1, -2});
  auto then_out = exec->Run({{"c", Tensor::Scalar<bool>(true)}, {"x", x}});
  ASSERT_TRUE(then_out.ok()) << then_out.status();
  // x + 3 (w + x) = 4x + 3w.
  EXPECT_EQ(Values<float>((*then_out)[0]), (std::vector<float>{34, 52}));
  auto else_out = exec->Run({{"c", Tensor::Scalar<bool>(false)}, {"x", x}});
  ASSERT_TRUE(else_out.ok()) << else_out.status();
  EXPECT_EQ(Values<float>((*else_out)[0]), (std::vector<float>{-1, 2}));
}

TEST(NestingTest, ConcurrentRunsOnThePoolAgree) {
  auto exec = MustCreate(LoopInIfModel());
  ASSERT_NE(exec, nullptr);
  ThreadPool pool(2);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 50; ++r) {
        const float v = static_cast<float>(t * 100 + r);
        Executor::RunOptions ro;
        ro.pool = &pool;
        auto out = exec->Run({{"c", Tensor::Scalar<bool>(r % 2 == 0)},
                              {"x", Floats({2}, {v, v})}},
                             ro);
        const std::vector<float> want =
            r % 2 == 0 ? std::vector<float>{4 * v + 30, 4 * v + 60}
                       : std::vector<float>{-v, -v};
        if (!out.ok() || Values<float>((*out)[0]) != want) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(NestingTest, BodiesAreValidatedAtCreate) {
  // An unsupported op two levels down names every level.
  onnx::ModelProto m = LoopInIfModel();
  onnx::NodeProto* inner = m.mutable_graph()
                               ->mutable_node(0)
                               ->mutable_attribute(0)
                               ->mutable_g()
                               ->mutable_node(0)
                               ->mutable_attribute(0)
                               ->mutable_g()
                               ->mutable_node(0);
  inner->set_op_type("TfIdfVectorizer");
  inner->clear_input();
  inner->add_input("v");
  auto e = Executor::Create(m);
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg(e.status().message());
  for (const char* part : {"'outer_if'", "then_branch", "'inner_loop'",
                           "'body'", "TfIdfVectorizer", "inner_add"}) {
    EXPECT_THAT(msg, HasSubstr(part));
  }

  // A body reading a name nothing defines.
  m = LoopInIfModel();
  m.mutable_graph()
      ->mutable_node(0)
      ->mutable_attribute(1)
      ->mutable_g()
      ->mutable_node(0)
      ->set_input(0, "nowhere");
  e = Executor::Create(m);
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("'nowhere'"));
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("'outer_if'"));
}

// -------------------------------------------------------------------- Scan

TEST(LoopTest, AnEndlessLoopStopsWhenItsScanOutputPassesTheBound) {
  // No M, a condition the body passes through unchanged (always true), and
  // a scan output of 4 floats per iteration: without a bound it stacks
  // until memory runs out.
  onnx::GraphProto body =
      Graph("body",
            {N("Identity", {"ci"}, {"co"}, "keep"),
             N("Identity", {"x"}, {"row"}, "emit")},
            {Vi("i", TP::INT64, {{}}), Vi("ci", TP::BOOL, {{}})},
            {Vi("co", TP::BOOL, {{}}), Vi("row", TP::FLOAT, {{4}})});
  onnx::NodeProto loop = N("Loop", {"", "c"}, {"rows"}, "endless");
  WithGraph(loop, "body", body);
  auto exec = MustCreate(Model(
      Graph("main", {loop}, {Vi("x", TP::FLOAT, {{4}})},
            {Vi("rows", TP::FLOAT)}, {{"c", Tensor::Scalar<bool>(true)}})));
  ASSERT_NE(exec, nullptr);
  Executor::RunOptions ro;
  ro.max_tensor_elements = 100;
  int64_t iterations = 0;
  ro.on_tensor = [&](const std::string& name, const Tensor&) {
    iterations += name == "row";
  };
  auto out = exec->Run({{"x", Floats({4}, {1, 2, 3, 4})}}, ro);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted)
      << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'endless'"));
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("more than 100 elements after 26 iterations"));
  EXPECT_EQ(iterations, 26);  // 25 rows fit, the 26th passes the bound.

  // A Scan stacking exactly the bound is fine; one element more is not.
  onnx::GraphProto scan_body =
      Graph("scan_body", {N("Neg", {"a"}, {"o"}, "s_neg")},
            {Vi("a", TP::FLOAT)}, {Vi("o", TP::FLOAT)});
  onnx::NodeProto scan = N("Scan", {"A"}, {"O"}, "stack");
  WithGraph(scan, "body", scan_body);
  WithInt(scan, "num_scan_inputs", 1);
  auto scan_exec = MustCreate(Model(
      Graph("main", {scan}, {Vi("A", TP::FLOAT)}, {Vi("O", TP::FLOAT)}), 16));
  ASSERT_NE(scan_exec, nullptr);
  Executor::RunOptions bounded;
  bounded.max_tensor_elements = 6;
  auto fits =
      scan_exec->Run({{"A", Floats({3, 2}, {1, 2, 3, 4, 5, 6})}}, bounded);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(Values<float>((*fits)[0]),
            (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  bounded.max_tensor_elements = 5;
  auto over =
      scan_exec->Run({{"A", Floats({3, 2}, {1, 2, 3, 4, 5, 6})}}, bounded);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted)
      << over.status();
}

TEST(TensorLimitTest, AKernelOutputOverTheBoundIsRefusedBeforeItIsAllocated) {
  // x [1] expanded to 2^40 floats: 4 TiB, refused by size, not by memory.
  onnx::NodeProto expand = N("Expand", {"x", "shape"}, {"y"}, "huge");
  auto exec = MustCreate(Model(Graph(
      "main", {expand}, {Vi("x", TP::FLOAT, {{1}})}, {Vi("y", TP::FLOAT)},
      {{"shape", Tensor::FromVector<int64_t>({1}, {int64_t{1} << 40})}})));
  ASSERT_NE(exec, nullptr);
  Executor::RunOptions ro;
  ro.max_tensor_elements = 1 << 20;
  auto out = exec->Run({{"x", Floats({1}, {2})}}, ro);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted)
      << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'huge'"));
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("1099511627776 elements, more than the 1048576"));
  // Within the bound the same model runs.
  ro.max_tensor_elements = 1 << 20;
  onnx::ModelProto small = Model(
      Graph("main", {expand}, {Vi("x", TP::FLOAT, {{1}})}, {Vi("y", TP::FLOAT)},
            {{"shape", Tensor::FromVector<int64_t>({1}, {1 << 20})}}));
  auto small_exec = MustCreate(small);
  ASSERT_NE(small_exec, nullptr);
  auto fits = small_exec->Run({{"x", Floats({1}, {2})}}, ro);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ((*fits)[0].size(), 1 << 20);
}

TEST(TensorLimitTest, ScopesNestToTheTighterLimitAndRestore) {
  {
    ScopedTensorLimit outer(100);
    EXPECT_THROW(Tensor(TP::FLOAT, {101}), TensorLimitExceeded);
    {
      ScopedTensorLimit looser(1000);  // Keeps 100.
      EXPECT_THROW(Tensor(TP::FLOAT, {101}), TensorLimitExceeded);
      ScopedTensorLimit tighter(10);
      EXPECT_THROW(Tensor(TP::FLOAT, {11}), TensorLimitExceeded);
      EXPECT_NO_THROW(Tensor(TP::FLOAT, {10}));
    }
    EXPECT_NO_THROW(Tensor(TP::FLOAT, {100}));
    EXPECT_THROW(Tensor(TP::FLOAT, {101}), TensorLimitExceeded);
    // Only this thread is bound.
    std::thread other([] { EXPECT_NO_THROW(Tensor(TP::FLOAT, {101})); });
    other.join();
  }
  EXPECT_NO_THROW(Tensor(TP::FLOAT, {101}));
}

// Scan-11: state s [2]; X1 [2, 3] scanned along axis 1 in reverse, X2 [3, 2]
// along axis 0; body s += a * b, outputs s (stacked on axis -1) and a - b
// (stacked on axis 0 in reverse).
TEST(ScanTest, ReverseDirectionsAndNonZeroAxes) {
  onnx::GraphProto body =
      Graph("scan_body",
            {N("Mul", {"a", "b"}, {"ab"}, "s_mul"),
             N("Add", {"s", "ab"}, {"s2"}, "s_add"),
             N("Identity", {"s2"}, {"o1"}, "s_id"),
             N("Sub", {"a", "b"}, {"o2"}, "s_sub")},
            {Vi("s", TP::FLOAT, {{2}}), Vi("a", TP::FLOAT, {{2}}),
             Vi("b", TP::FLOAT, {{2}})},
            {Vi("s2", TP::FLOAT, {{2}}), Vi("o1", TP::FLOAT, {{2}}),
             Vi("o2", TP::FLOAT, {{2}})});
  onnx::NodeProto scan =
      N("Scan", {"s0", "X1", "X2"}, {"sf", "O1", "O2"}, "scan");
  WithGraph(scan, "body", body);
  WithInt(scan, "num_scan_inputs", 2);
  WithInts(scan, "scan_input_axes", {1, 0});
  WithInts(scan, "scan_input_directions", {1, 0});
  WithInts(scan, "scan_output_axes", {-1, 0});
  WithInts(scan, "scan_output_directions", {0, 1});
  auto exec = MustCreate(Model(
      Graph("main", {scan},
            {Vi("s0", TP::FLOAT, {{2}}), Vi("X1", TP::FLOAT, {{2, 3}}),
             Vi("X2", TP::FLOAT, {{3, 2}})},
            {Vi("sf", TP::FLOAT), Vi("O1", TP::FLOAT), Vi("O2", TP::FLOAT)}),
      11));
  ASSERT_NE(exec, nullptr);
  const std::vector<float> s0 = {1, -1}, x1 = {1, 2, 3, 4, 5, 6},
                           x2 = {0.5f, 1, -1, 2, 3, -0.5f};
  auto out = exec->Run({{"s0", Floats({2}, s0)},
                        {"X1", Floats({2, 3}, x1)},
                        {"X2", Floats({3, 2}, x2)}});
  ASSERT_TRUE(out.ok()) << out.status();

  std::vector<float> s = s0, o1(6), o2(6);
  for (int t = 0; t < 3; ++t) {
    for (int k = 0; k < 2; ++k) {
      const float a = x1[k * 3 + (2 - t)];  // X1[k, L-1-t]
      const float b = x2[t * 2 + k];        // X2[t, k]
      s[k] += a * b;
      o1[k * 3 + t] = s[k];         // O1[k, t]
      o2[(2 - t) * 2 + k] = a - b;  // O2[L-1-t, k]
    }
  }
  EXPECT_EQ(Values<float>((*out)[0]), s);
  EXPECT_EQ((*out)[1].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<float>((*out)[1]), o1);
  EXPECT_EQ((*out)[2].shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values<float>((*out)[2]), o2);
}

TEST(ScanTest, MismatchedSequenceLengthsAndScan8SequenceLens) {
  onnx::GraphProto body =
      Graph("scan_body", {N("Add", {"a", "b"}, {"o"}, "s_add")},
            {Vi("a", TP::FLOAT), Vi("b", TP::FLOAT)}, {Vi("o", TP::FLOAT)});
  onnx::NodeProto scan = N("Scan", {"A", "B"}, {"O"}, "pair_scan");
  WithGraph(scan, "body", body);
  WithInt(scan, "num_scan_inputs", 2);
  auto exec = MustCreate(
      Model(Graph("main", {scan}, {Vi("A", TP::FLOAT), Vi("B", TP::FLOAT)},
                  {Vi("O", TP::FLOAT)}),
            16));
  ASSERT_NE(exec, nullptr);
  auto out = exec->Run({{"A", Floats({3, 2}, {1, 2, 3, 4, 5, 6})},
                        {"B", Floats({2, 2}, {1, 2, 3, 4})}});
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'pair_scan'"));

  // Scan-8 with sequence_lens: refused by name.
  onnx::NodeProto scan8 = N("Scan", {"lens", "A", "B"}, {"O"}, "batched");
  WithGraph(scan8, "body", body);
  WithInt(scan8, "num_scan_inputs", 2);
  auto e = Executor::Create(Model(
      Graph("main", {scan8},
            {Vi("lens", TP::INT32), Vi("A", TP::FLOAT), Vi("B", TP::FLOAT)},
            {Vi("O", TP::FLOAT)}),
      8));
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("sequence_lens"));
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("'batched'"));
}

TEST(ControlFlowMemoryTest, NoBufferOutlivesARun) {
  auto loop = MustCreate(LoopModel(true));
  auto nested = MustCreate(LoopInIfModel());
  ASSERT_NE(loop, nullptr);
  ASSERT_NE(nested, nullptr);
  const absl::flat_hash_map<std::string, Tensor> loop_feeds = {
      {"M", Tensor::Scalar<int64_t>(10)},
      {"c", Tensor::Scalar<bool>(true)},
      {"a0", Floats({2}, {1, 2})},
      {"x", Floats({2}, {3, 4})}};
  const absl::flat_hash_map<std::string, Tensor> nested_feeds = {
      {"c", Tensor::Scalar<bool>(true)}, {"x", Floats({2}, {1, 2})}};
  const int64_t before = Tensor::LiveBuffers();
  for (int r = 0; r < 3; ++r) {
    auto a = loop->Run(loop_feeds);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = nested->Run(nested_feeds);
    ASSERT_TRUE(b.ok()) << b.status();
    // Outputs only: every body and outer intermediate is gone.
    EXPECT_EQ(Tensor::LiveBuffers(), before + 3);
  }
  EXPECT_EQ(Tensor::LiveBuffers(), before);
}

// ------------------------------------------------------ ONNX Runtime parity

TEST(ControlFlowOrtParityTest, LoopIfScanModelMatchesOnnxRuntime) {
  ASSERT_TRUE(std::filesystem::exists(std::string(QUANTD_ORT_NODE_PATH) +
                                      "/onnxruntime-node"))
      << "no onnxruntime-node under " << QUANTD_ORT_NODE_PATH;
  const std::string model_path =
      testing::SourcePath("tests/data/executor/control_flow.onnx");
  testing::TempDir tmp;

  // The committed fixture is what the script writes.
  const std::string regenerated = tmp.File("control_flow.onnx");
  testing::CommandResult gen = testing::RunCommand(
      {"/usr/bin/python3",
       testing::SourcePath("scripts/make_control_flow_model.py"), regenerated});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(testing::ReadFileOrDie(regenerated),
            testing::ReadFileOrDie(model_path))
      << "tests/data/executor/control_flow.onnx is stale: rerun "
         "scripts/make_control_flow_model.py";

  absl::StatusOr<onnx::ModelProto> model =
      graph::ParseModel(testing::ReadFileOrDie(model_path));
  ASSERT_TRUE(model.ok()) << model.status();
  int control_nodes = 0;
  for (const auto& n : model->graph().node()) {
    control_nodes += n.op_type() == "Loop" || n.op_type() == "Scan";
  }
  EXPECT_EQ(control_nodes, 2);
  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(*model);
  ASSERT_TRUE(exec.ok()) << exec.status();

  Tensor x(TP::FLOAT, {6, 3, 8, 8});
  std::mt19937 gen_x(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < x.size(); ++i) x.mutable_data<float>()[i] = d(gen_x);
  const std::string x_path = tmp.File("x.npy");
  ASSERT_TRUE(WriteNpyFile(x_path, x).ok());

  ThreadPool pool(2);
  Executor::RunOptions ro;
  ro.pool = &pool;
  std::map<std::string, int> seen;
  ro.on_tensor = [&](const std::string& name, const Tensor&) { ++seen[name]; };
  absl::StatusOr<std::vector<Tensor>> ours = (*exec)->Run({{"x", x}}, ro);
  ASSERT_TRUE(ours.ok()) << ours.status();
  // Three Loop iterations; the If takes then_branch once (i == 1), else
  // twice; the Scan body runs three times.
  EXPECT_EQ(seen["conv"], 3);
  EXPECT_EQ(seen["t_out"], 1);
  EXPECT_EQ(seen["e_out"], 2);
  EXPECT_EQ(seen["s_out"], 3);

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
  ASSERT_EQ(a.shape(), (std::vector<int64_t>{6, 34}));
  double max_diff = 0, max_ref = 0;
  int nonzero = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double g = a.data<float>()[i], w = theirs->data<float>()[i];
    max_diff = std::max(max_diff, std::abs(g - w));
    max_ref = std::max(max_ref, std::abs(w));
    nonzero += w != 0;
  }
  const double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
  std::cout << "measured: control_flow.onnx vs ONNX Runtime: "
               "max|ours-ort|/max|ort| = "
            << rel << " (" << nonzero << " of " << a.size()
            << " outputs non-zero)" << std::endl;
  EXPECT_GT(nonzero, a.size() / 2);
  EXPECT_LE(rel, 1e-4);
}

}  // namespace
}  // namespace quantd::executor
