// Tests of the executor-backed preparation steps
// (core/passes/fold_constants.h): constant subgraphs folded into initializers,
// quantized-model structure left alone, and opset 9 models upgraded to 13
// (Softmax on a non-last axis included) with the same results in ONNX Runtime.
#include "core/passes/fold_constants.h"

#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/cancellation.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "core/graph/model_io.h"
#include "core/graph/prepare.h"
#include "core/graph/validate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"

namespace quantd::passes {
namespace {

using ::quantd::testing::ModelBuilder;
using ::quantd::testing::Wave;
using ::testing::HasSubstr;

int CountOps(const onnx::GraphProto& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.node()) n += node.op_type() == op;
  return n;
}

// y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) with a
// static x: the shape chain exporters leave behind.
TEST(FoldConstantNodes, FoldsStaticShapeChainAndCasts) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4}).Output("y").Output("z");
  b.Node("Shape", {"x"}, {"s"}, "shape");
  onnx::TensorProto zero;
  zero.set_name("zero");
  zero.set_data_type(onnx::TensorProto::INT64);
  zero.add_int64_data(0);
  *b.model().mutable_graph()->add_initializer() = zero;
  onnx::TensorProto minus_one = zero;
  minus_one.set_name("minus_one");
  minus_one.set_int64_data(0, -1);
  minus_one.add_dims(1);
  *b.model().mutable_graph()->add_initializer() = minus_one;
  b.Node("Gather", {"s", "zero"}, {"n"}, "gather").Attr("axis", int64_t{0});
  b.Node("Unsqueeze", {"n"}, {"n1"}, "unsqueeze")
      .Attr("axes", std::vector<int64_t>{0});
  b.Node("Concat", {"n1", "minus_one"}, {"target"}, "concat")
      .Attr("axis", int64_t{0});
  b.Node("Reshape", {"x", "target"}, {"y"}, "reshape");
  // Cast of a constant: folded too; DequantizeLinear of one: kept.
  b.Initializer("d", {4}, Wave(4, 2));
  b.Node("Cast", {"d"}, {"d64"}, "cast").Attr("to", onnx::TensorProto::DOUBLE);
  b.Node("Cast", {"d64"}, {"d32"}, "cast_back")
      .Attr("to", onnx::TensorProto::FLOAT);
  onnx::TensorProto q;
  q.set_name("q");
  q.set_data_type(onnx::TensorProto::INT8);
  q.add_dims(4);
  q.set_raw_data(std::string("\x01\x02\x03\x04", 4));
  *b.model().mutable_graph()->add_initializer() = q;
  b.Initializer("qs", {}, {0.5f});
  b.Node("DequantizeLinear", {"q", "qs"}, {"dq"}, "dq");
  b.Node("Add", {"d32", "dq"}, {"sum"}, "add");
  b.Node("Add", {"x", "sum"}, {"z"}, "add_x");
  // Opset 12: Unsqueeze takes axes as an attribute.
  b.model().mutable_opset_import(0)->set_version(12);
  onnx::ModelProto m = b.Build();
  const onnx::ModelProto original = m;

  absl::StatusOr<int64_t> folded = FoldConstantNodes(&m);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 6);  // Shape, Gather, Unsqueeze, Concat, two Casts.
  EXPECT_EQ(CountOps(m.graph(), "Shape"), 0);
  EXPECT_EQ(CountOps(m.graph(), "Concat"), 0);
  EXPECT_EQ(CountOps(m.graph(), "Cast"), 0);
  EXPECT_EQ(CountOps(m.graph(), "DequantizeLinear"), 1);
  EXPECT_EQ(CountOps(m.graph(), "Reshape"), 1);
  // Only what the remaining nodes read is kept.
  std::vector<std::string> names;
  for (const auto& t : m.graph().initializer()) names.push_back(t.name());
  EXPECT_THAT(names,
              ::testing::UnorderedElementsAre("target", "d32", "q", "qs"));
  EXPECT_TRUE(graph::ValidateModel(m, "folded", nullptr).ok());

  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.File("a.onnx"), original.SerializeAsString());
  testing::WriteFileOrDie(tmp.File("b.onnx"), m.SerializeAsString());
  ASSERT_TRUE(executor::WriteNpyFile(
                  tmp.File("x.npy"),
                  executor::Tensor::FromVector<float>({2, 3, 4}, Wave(24, 4)))
                  .ok());
  const std::string json =
      testing::OrtEval({"compare", "--model", tmp.File("a.onnx"), "--model2",
                        tmp.File("b.onnx"), "--x", tmp.File("x.npy")});
  EXPECT_THAT(json, HasSubstr("\"identical\":true"));
}

TEST(FoldConstantNodes, LeavesGraphOutputsAndRandomOpsAlone) {
  ModelBuilder b;
  b.Input("x", {2}).Output("c").Output("y");
  b.Initializer("k", {2}, {1.0f, 2.0f});
  b.Node("Neg", {"k"}, {"c"}, "neg");  // Writes a graph output.
  b.Node("RandomUniformLike", {"k"}, {"r"}, "random");
  b.Node("Add", {"x", "r"}, {"y"}, "add");
  onnx::ModelProto m = b.Build();
  absl::StatusOr<int64_t> folded = FoldConstantNodes(&m);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 0);
  EXPECT_EQ(m.graph().node_size(), 3);
}

// A foldable chain (Neg -> Abs of a constant) before an Add that reads the
// graph input.
onnx::ModelProto FoldableChain() {
  ModelBuilder b;
  b.Input("x", {2}).Output("y");
  b.Initializer("k", {2}, {1.0f, -2.0f});
  b.Node("Neg", {"k"}, {"n"}, "neg");
  b.Node("Abs", {"n"}, {"a"}, "abs");
  b.Node("Add", {"x", "a"}, {"y"}, "add");
  return b.Build();
}

TEST(FoldConstantNodes, ACancelledJobFoldsNothing) {
  onnx::ModelProto m = FoldableChain();
  CancellationToken cancel;
  cancel.Cancel();
  absl::StatusOr<int64_t> folded = FoldConstantNodes(&m, &cancel);
  EXPECT_EQ(folded.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(folded.status().message(), HasSubstr("constant folding"));
  EXPECT_EQ(m.graph().node_size(), 3);
  // Through the preparation Quantize and Calibrate run.
  absl::StatusOr<graph::PrepareReport> r =
      graph::PrepareGraph(&m, FullPrepareOptions(&cancel));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  // Not cancelled: the same chain folds.
  CancellationToken live;
  folded = FoldConstantNodes(&m, &live);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 2);
}

// A node whose work follows its input values: RoiAlign with 1024 RoIs of
// 2^20 samples each (2^30, the most one node may do) takes seconds to fold.
// A cancel 50 ms in stops it inside the node's run; without the token
// reaching the run the fold completes and returns OK.
TEST(FoldConstantNodes, ACancelStopsALongFoldInsideTheNode) {
  onnx::ModelProto m = quantd::testing::LongFoldModel();

  CancellationToken cancel;
  std::thread canceller([&cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel.Cancel();
  });
  absl::StatusOr<int64_t> folded = FoldConstantNodes(&m, &cancel);
  canceller.join();
  EXPECT_EQ(folded.status().code(), absl::StatusCode::kCancelled)
      << folded.status();
  EXPECT_THAT(folded.status().message(), HasSubstr("RoiAlign"));
  EXPECT_EQ(CountOps(m.graph(), "RoiAlign"), 1);
}

TEST(FoldConstantNodes, AValueTooBigToKeepIsNeverComputed) {
  // Expand of a one-element constant to 2^28 floats (1 GiB): more than a
  // folded value may be, so the node stays, and it must stay without being
  // computed first (2^31 elements peaked at 16.8 GB in a DYNAMIC call).
  ModelBuilder b;
  b.Input("x", {1}).Output("y", {-1});
  b.Initializer("one", {1}, {1.0f});
  onnx::TensorProto shape;
  shape.set_name("shape");
  shape.set_data_type(onnx::TensorProto::INT64);
  shape.add_dims(1);
  shape.add_int64_data(int64_t{1} << 28);
  onnx::ModelProto m = b.Build();
  *m.mutable_graph()->add_initializer() = shape;
  onnx::NodeProto* expand = m.mutable_graph()->add_node();
  expand->set_op_type("Expand");
  expand->set_name("big");
  expand->add_input("one");
  expand->add_input("shape");
  expand->add_output("big");
  onnx::NodeProto* add = m.mutable_graph()->add_node();
  add->set_op_type("Add");
  add->set_name("add");
  add->add_input("x");
  add->add_input("big");
  add->add_output("y");
  ASSERT_TRUE(testing::ResetPeakRss(getpid()));
  const int64_t before = testing::ProcStatusBytes(getpid(), "VmHWM");
  absl::StatusOr<int64_t> folded = FoldConstantNodes(&m);
  const int64_t peak = testing::ProcStatusBytes(getpid(), "VmHWM");
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 0);
  EXPECT_EQ(CountOps(m.graph(), "Expand"), 1);
  EXPECT_LT(peak - before, int64_t{64} << 20)
      << "folding allocated " << (peak - before) / 1e6 << " MB";
}

// tf2onnx pads channels by concatenating ConstantOfShape zeros: folded, each
// would be stored in the model (BlazeFace grew by 28%). A value much larger
// than what it is made from stays a node; a small one is still folded.
TEST(FoldConstantNodes, AValueMuchLargerThanItsInputsStaysANode) {
  ModelBuilder b;
  b.Input("x", {1, 8, 32, 32}).Output("y").Output("z");
  b.Node("ConstantOfShape", {"pad_shape"}, {"pad"}, "pad");
  b.Node("Concat", {"x", "pad"}, {"y"}, "concat").Attr("axis", int64_t{1});
  b.Node("ConstantOfShape", {"small_shape"}, {"small"}, "small");
  b.Node("Neg", {"small"}, {"z"}, "neg");
  onnx::ModelProto m = b.Build();
  auto shape = [&](const std::string& name, std::vector<int64_t> dims) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_dims(static_cast<int64_t>(dims.size()));
    for (int64_t d : dims) t.add_int64_data(d);
    *m.mutable_graph()->add_initializer() = t;
  };
  shape("pad_shape", {1, 8, 32, 32});  // 32 KiB of zeros.
  shape("small_shape", {4});           // 16 bytes.
  for (auto& node : *m.mutable_graph()->mutable_node()) {
    if (node.op_type() != "ConstantOfShape") continue;
    onnx::AttributeProto* value = node.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    *value->mutable_t() = ModelBuilder::FloatTensor("", {1}, {0.0f});
  }

  absl::StatusOr<int64_t> folded = FoldConstantNodes(&m);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 1);  // The small ConstantOfShape only.
  EXPECT_EQ(CountOps(m.graph(), "ConstantOfShape"), 1);
  EXPECT_EQ(m.graph().node(0).output(0), "pad");
  int64_t stored = 0;
  for (const auto& t : m.graph().initializer()) stored += t.ByteSizeLong();
  EXPECT_LT(stored, 1024) << "the zeros were stored";
}

// An If whose then branch multiplies by Transpose(W) of an outer weight and
// whose else branch transposes a branch-local one: both transposes are
// folded into the bodies' initializers, the branch-local original goes, the
// outer W stays while the else branch's MatMul still reads it, and the
// results do not change.
TEST(FoldConstantNodes, FoldsConstantChainsInsideBodies) {
  ModelBuilder b;
  b.Input("x", {2, 4}).Output("y");
  b.Input("c", {}, onnx::TensorProto::BOOL);
  b.Initializer("W", {4, 4}, Wave(16, 3));
  auto branch = [](const std::string& name, bool local) {
    onnx::GraphProto g;
    g.set_name(name);
    if (local) {
      *g.add_initializer() =
          ModelBuilder::FloatTensor("V", {4, 4}, Wave(16, 5));
    }
    auto* t = g.add_node();
    t->set_op_type("Transpose");
    t->set_name(name + "_transpose");
    t->add_input(local ? "V" : "W");
    t->add_output(name + "_t");
    auto* mm = g.add_node();
    mm->set_op_type("MatMul");
    mm->set_name(name + "_matmul");
    mm->add_input("x");
    mm->add_input(name + "_t");
    mm->add_output(name + "_y");
    auto* mm2 = g.add_node();
    mm2->set_op_type("MatMul");
    mm2->set_name(name + "_matmul_w");
    mm2->add_input(name + "_y");
    mm2->add_input("W");
    mm2->add_output(name + "_out");
    auto* out = g.add_output();
    out->set_name(name + "_out");
    out->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
    return g;
  };
  b.Node("If", {"c"}, {"y"}, "if");
  auto* node = b.model().mutable_graph()->mutable_node(0);
  for (const auto& [attr, local] :
       {std::pair<const char*, bool>{"then_branch", false},
        std::pair<const char*, bool>{"else_branch", true}}) {
    auto* a = node->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = branch(attr, local);
  }
  const onnx::ModelProto original = b.Build();
  onnx::ModelProto m = original;

  absl::StatusOr<int64_t> folded = FoldConstantNodes(&m);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 2);
  for (const auto& a : m.graph().node(0).attribute()) {
    SCOPED_TRACE(a.name());
    EXPECT_EQ(CountOps(a.g(), "Transpose"), 0);
    std::vector<std::string> names;
    for (const auto& t : a.g().initializer()) names.push_back(t.name());
    EXPECT_THAT(names, ::testing::ElementsAre(a.name() + "_t"));
  }
  ASSERT_EQ(m.graph().initializer_size(), 1);
  EXPECT_EQ(m.graph().initializer(0).name(), "W");
  EXPECT_TRUE(graph::ValidateModel(m, "folded", nullptr).ok());

  for (bool c : {true, false}) {
    absl::flat_hash_map<std::string, executor::Tensor> feeds;
    feeds["x"] = executor::Tensor::FromVector<float>({2, 4}, Wave(8, 9));
    feeds["c"] = executor::Tensor::FromVector<bool>({}, {c});
    auto before = executor::Executor::Create(original);
    auto after = executor::Executor::Create(m);
    ASSERT_TRUE(before.ok()) << before.status();
    ASSERT_TRUE(after.ok()) << after.status();
    auto want = (*before)->Run(feeds);
    auto got = (*after)->Run(feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*want)[0].ToProto("y").SerializeAsString(),
              (*got)[0].ToProto("y").SerializeAsString());
  }
}

// Opset 9: Conv -> Softmax over the channel axis of a 4-D tensor (not the
// last one) and a Softmax over the last axis, upgraded to 13 with the same
// numbers in ONNX Runtime.
TEST(UpgradeOpsetForPrepare, Opset9SoftmaxUpgradesExactly) {
  ModelBuilder b(9, 4);
  b.Input("x", {2, 3, 4, 5}).Output("y").Output("z");
  b.Weight("W", {6, 3, 1, 1}, 2);
  b.Node("Conv", {"x", "W"}, {"c"}, "conv");
  b.Node("Softmax", {"c"}, {"y"}, "softmax_channels").Attr("axis", int64_t{1});
  b.Node("Softmax", {"c"}, {"z"}, "softmax_last").Attr("axis", int64_t{3});
  const onnx::ModelProto original = b.Build();
  onnx::ModelProto m = original;
  absl::StatusOr<graph::PrepareReport> r =
      graph::PrepareGraph(&m, FullPrepareOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->opset_from, 9);
  EXPECT_EQ(r->opset_to, 13);
  EXPECT_THAT(r->Summary(), HasSubstr("upgraded from 9 to 13"));
  EXPECT_TRUE(graph::ValidateModel(m, "upgraded", nullptr).ok());
  EXPECT_EQ(CountOps(m.graph(), "Flatten"), 1);

  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.File("a.onnx"), original.SerializeAsString());
  testing::WriteFileOrDie(tmp.File("b.onnx"), m.SerializeAsString());
  ASSERT_TRUE(executor::WriteNpyFile(tmp.File("x.npy"),
                                     executor::Tensor::FromVector<float>(
                                         {2, 3, 4, 5}, Wave(120, 4)))
                  .ok());
  const std::string json =
      testing::OrtEval({"compare", "--model", tmp.File("a.onnx"), "--model2",
                        tmp.File("b.onnx"), "--x", tmp.File("x.npy")});
  if (json.find("\"identical\":true") == std::string::npos) {
    EXPECT_LE(testing::JsonNumber(json, "max_abs_diff"), 1e-6) << json;
  }
}

}  // namespace
}  // namespace quantd::passes
