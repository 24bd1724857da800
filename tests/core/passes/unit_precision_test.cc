// unit_wise_quantization_precision: resolution (node beats op beats default),
// its errors, and its effect on the DYNAMIC_RANGE and STATIC_RANGE passes.
#include "core/passes/unit_precision.h"

#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/graph/function_inline.h"
#include "core/graph/model_io.h"
#include "core/numerics/int4.h"
#include "core/passes/dynamic_range_pass.h"
#include "core/passes/static_range_pass.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/test_paths.h"

namespace quantd::passes {
namespace {

namespace tfq = tensorflow::quantization;
using ::testing::HasSubstr;
using testing::ModelBuilder;
using ::testing::Not;
using Unit = tfq::UnitWiseQuantizationPrecision;

Unit MakeUnit(Unit::UnitType type, const std::string& name,
              tfq::QuantizationPrecision p, const std::string& func = "") {
  Unit u;
  u.set_unit_type(type);
  u.set_unit_name(name);
  u.set_func_name(func);
  u.set_quantization_precision(p);
  return u;
}

// x[2,64] -> MatMul(W1[64,32]) "m1" -> h -> MatMul(W2[32,64]) "m2" -> y.
onnx::ModelProto TwoMatMuls() {
  ModelBuilder b;
  b.Input("x", {2, 64})
      .Weight("W1", {64, 32}, 1)
      .Weight("W2", {32, 64}, 2)
      .Node("MatMul", {"x", "W1"}, {"h"}, "m1")
      .Node("MatMul", {"h", "W2"}, {"y"}, "m2")
      .Output("y", {2, 64});
  return b.Build();
}

// x[2,64] -> MatMul(W) "m1" -> h -> MatMul(W) "m2" -> y: one shared weight.
onnx::ModelProto SharedWeight() {
  ModelBuilder b;
  b.Input("x", {2, 64})
      .Weight("W", {64, 64}, 3)
      .Node("MatMul", {"x", "W"}, {"h"}, "m1")
      .Node("MatMul", {"h", "W"}, {"y"}, "m2")
      .Output("y", {2, 64});
  return b.Build();
}

const onnx::NodeProto* NodeNamed(const onnx::ModelProto& m,
                                 const std::string& name) {
  for (const auto& n : m.graph().node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

const onnx::TensorProto* Init(const onnx::ModelProto& m,
                              const std::string& name) {
  for (const auto& t : m.graph().initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// The op type of the node producing `tensor`, "" when none does.
std::string ProducerOp(const onnx::ModelProto& m, const std::string& tensor) {
  for (const auto& n : m.graph().node()) {
    for (const auto& o : n.output()) {
      if (o == tensor) return n.op_type();
    }
  }
  return "";
}

int CountOp(const onnx::ModelProto& m, const std::string& op) {
  int k = 0;
  for (const auto& n : m.graph().node()) k += n.op_type() == op;
  return k;
}

void ExpectFloatWeight(const onnx::ModelProto& m, const std::string& name) {
  const onnx::TensorProto* t = Init(m, name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->data_type(), onnx::TensorProto::FLOAT) << name;
  EXPECT_EQ(ProducerOp(m, name), "") << name << " is fed by a node";
}

void ExpectQuantizedWeight(const onnx::ModelProto& m, const std::string& name) {
  EXPECT_EQ(Init(m, name), nullptr) << name << " still a float initializer";
  EXPECT_EQ(ProducerOp(m, name), "DequantizeLinear") << name;
}

const quantd::v1::SkippedTensor* SkipOf(
    const std::vector<quantd::v1::SkippedTensor>& skipped,
    const std::string& tensor) {
  for (const auto& s : skipped) {
    if (s.tensor_name() == tensor) return &s;
  }
  return nullptr;
}

WeightPassOptions Dynamic(tfq::QuantizationPrecision p,
                          std::vector<Unit> units) {
  WeightPassOptions o;
  o.precision = p;
  o.units = std::move(units);
  return o;
}

StaticRangeOptions Static(tfq::QuantizationPrecision p,
                          std::vector<Unit> units) {
  StaticRangeOptions o;
  o.precision = p;
  o.units = std::move(units);
  return o;
}

ActivationRanges Ranges() {
  ActivationRanges r;
  r["x"] = {-1.0f, 1.0f};
  r["h"] = {-4.0f, 4.0f};
  r["y"] = {-8.0f, 8.0f};
  return r;
}

TEST(UnitPrecisionTest, NodeBeatsOpBeatsDefault) {
  ModelBuilder b;
  b.Input("x", {2, 64})
      .Weight("W1", {64, 64}, 1)
      .Weight("W2", {64, 64}, 2)
      .Weight("W3", {64, 64}, 3)
      .Node("MatMul", {"x", "W1"}, {"a"}, "ma")
      .Node("MatMul", {"a", "W2"}, {"b"}, "mb")
      .Node("Gemm", {"b", "W3"}, {"y"}, "g")
      .Output("y", {2, 64});
  const onnx::ModelProto m = b.Build();
  absl::StatusOr<UnitPrecision> u = UnitPrecision::Resolve(
      m, tfq::PRECISION_UNSPECIFIED,
      {MakeUnit(Unit::UNIT_OP, "MatMul", tfq::PRECISION_FULL),
       MakeUnit(Unit::UNIT_NODE, "mb", tfq::PRECISION_W8A8)});
  ASSERT_TRUE(u.ok()) << u.status();
  const UnitPrecision::Choice a = u->For(*NodeNamed(m, "ma"));
  const UnitPrecision::Choice bb = u->For(*NodeNamed(m, "mb"));
  const UnitPrecision::Choice g = u->For(*NodeNamed(m, "g"));
  EXPECT_EQ(a.precision, tfq::PRECISION_FULL);  // Op beats default.
  EXPECT_EQ(a.entry, 0);
  EXPECT_EQ(bb.precision, tfq::PRECISION_W8A8);  // Node beats op.
  EXPECT_EQ(bb.entry, 1);
  EXPECT_EQ(g.precision, tfq::PRECISION_W8A8);  // Default (UNSPECIFIED).
  EXPECT_EQ(g.entry, -1);
  EXPECT_THAT(u->Why(*NodeNamed(m, "ma")),
              HasSubstr("unit_wise_quantization_precision[0]"));

  // Node beats a FULL default too.
  u = UnitPrecision::Resolve(
      m, tfq::PRECISION_FULL,
      {MakeUnit(Unit::UNIT_NODE, "ma", tfq::PRECISION_W8A8)});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->For(*NodeNamed(m, "ma")).precision, tfq::PRECISION_W8A8);
  EXPECT_EQ(u->For(*NodeNamed(m, "mb")).precision, tfq::PRECISION_FULL);
  // Agreeing duplicates are fine.
  u = UnitPrecision::Resolve(
      m, tfq::PRECISION_W8A8,
      {MakeUnit(Unit::UNIT_OP, "Gemm", tfq::PRECISION_FULL),
       MakeUnit(Unit::UNIT_OP, "Gemm", tfq::PRECISION_FULL)});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->IsFull(*NodeNamed(m, "g")));
}

TEST(UnitPrecisionTest, EveryInvalidEntryIsListedInOneError) {
  ModelBuilder b;
  b.Input("x", {2, 64})
      .Weight("W1", {64, 64}, 1)
      .Node("MatMul", {"x", "W1"}, {"a"}, "dup")
      .Node("Relu", {"a"}, {"y"}, "dup")
      .Output("y", {2, 64});
  const onnx::ModelProto m = b.Build();
  const std::vector<Unit> units = {
      MakeUnit(Unit::UNIT_UNSPECIFIED, "dup", tfq::PRECISION_FULL),    // 0
      MakeUnit(Unit::UNIT_OP, "", tfq::PRECISION_FULL),                // 1
      MakeUnit(Unit::UNIT_OP, "MatMul", tfq::PRECISION_UNSPECIFIED),   // 2
      MakeUnit(Unit::UNIT_NODE, "nope", tfq::PRECISION_FULL),          // 3
      MakeUnit(Unit::UNIT_OP, "Conv", tfq::PRECISION_FULL),            // 4
      MakeUnit(Unit::UNIT_OP, "Relu", tfq::PRECISION_FULL),            // 5
      MakeUnit(Unit::UNIT_OP, "Relu", tfq::PRECISION_W8A8),            // 6
      MakeUnit(Unit::UNIT_NODE, "dup", tfq::PRECISION_FULL),           // 7
      MakeUnit(Unit::UNIT_NODE, "m", tfq::PRECISION_FULL, "no_func"),  // 8
      MakeUnit(Unit::UNIT_OP, "MatMul", tfq::PRECISION_W8A8),          // 9
  };
  absl::StatusOr<UnitPrecision> u =
      UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, units);
  ASSERT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(u.status().message());
  EXPECT_THAT(msg, HasSubstr("9 unit_wise_quantization_precision entries"));
  for (int i : {0, 1, 2, 3, 4, 5, 6, 7, 8}) {
    EXPECT_THAT(msg, HasSubstr(DescribeUnitEntry(i, units[i]))) << i;
  }
  EXPECT_THAT(msg, Not(HasSubstr("unit_wise_quantization_precision[9]")));
  EXPECT_THAT(msg, HasSubstr("unit_type is UNIT_UNSPECIFIED"));
  EXPECT_THAT(msg, HasSubstr("unit_name is empty"));
  EXPECT_THAT(msg, HasSubstr("PRECISION_UNSPECIFIED"));
  EXPECT_THAT(msg, HasSubstr("no node in the main graph, local functions or "
                             "subgraphs is named 'nope'"));
  EXPECT_THAT(msg, HasSubstr("no node in the main graph, local functions or "
                             "subgraphs has op_type 'Conv'"));
  EXPECT_THAT(msg, HasSubstr("conflict: entries [5] and [6]"));
  EXPECT_THAT(msg, HasSubstr("ambiguous: 2 nodes"));
  EXPECT_THAT(msg, HasSubstr("'no_func'"));

  // The passes refuse the same way, before changing anything.
  onnx::ModelProto copy = m;
  absl::StatusOr<PassStats> d = RunDynamicRangePass(
      Dynamic(tfq::PRECISION_W8A8, units), PassHooks(), &copy);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copy.SerializeAsString(), m.SerializeAsString());
  absl::StatusOr<StaticRangeStats> s =
      RunStaticRangePass(Static(tfq::PRECISION_W8A8, units), ActivationRanges(),
                         PassHooks(), &copy);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

// TwoMatMuls plus an If "branch" whose then-branch holds a MatMul "inner"
// and a Relu "m1" (the name of a main-graph node too).
onnx::ModelProto WithSubgraph() {
  onnx::ModelProto m = TwoMatMuls();
  onnx::NodeProto* holder = m.mutable_graph()->add_node();
  holder->set_name("branch");
  holder->set_op_type("If");
  onnx::AttributeProto* a = holder->add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* g = a->mutable_g();
  g->set_name("then");
  onnx::NodeProto* inner = g->add_node();
  inner->set_name("inner");
  inner->set_op_type("MatMul");
  onnx::NodeProto* relu = g->add_node();
  relu->set_name("m1");
  relu->set_op_type("Relu");
  return m;
}

TEST(UnitPrecisionTest, SubgraphScopesMatchBodyNodes) {
  const onnx::ModelProto m = WithSubgraph();
  const std::vector<Unit> ok = {
      MakeUnit(Unit::UNIT_NODE, "inner", tfq::PRECISION_W4A8, "branch"),  // 0
      MakeUnit(Unit::UNIT_OP, "MatMul", tfq::PRECISION_FULL, "branch"),   // 1
      MakeUnit(Unit::UNIT_NODE, "inner", tfq::PRECISION_W4A8),  // 2: unique.
      MakeUnit(Unit::UNIT_NODE, "m1", tfq::PRECISION_W4A8),  // 3: main first.
      MakeUnit(Unit::UNIT_OP, "Relu", tfq::PRECISION_FULL),  // 4
  };
  absl::StatusOr<UnitPrecision> u =
      UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, ok);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->For(*NodeNamed(m, "m1")).entry, 3);
  EXPECT_EQ(u->For(*NodeNamed(m, "m2")).precision, tfq::PRECISION_W8A8);
  // Inside the branch: the node entry beats the scoped op entry, which
  // beats the unscoped one.
  const UnitPrecision body = u->InBody("branch");
  const onnx::GraphProto& then_g = m.graph().node(2).attribute(0).g();
  EXPECT_EQ(body.For(then_g.node(0)).entry, 0);  // "inner"
  onnx::NodeProto other = then_g.node(0);
  other.set_name("other_matmul");
  EXPECT_EQ(body.For(other).entry, 1);
  EXPECT_EQ(body.For(then_g.node(1)).entry, 4);  // Relu "m1" of the body.
  // The main graph's m1 entry does not reach the body's m1.
  EXPECT_NE(body.For(then_g.node(1)).entry, 3);

  const std::vector<Unit> bad = {
      MakeUnit(Unit::UNIT_NODE, "nope", tfq::PRECISION_FULL, "branch"),   // 0
      MakeUnit(Unit::UNIT_OP, "Conv", tfq::PRECISION_FULL, "branch"),     // 1
      MakeUnit(Unit::UNIT_NODE, "x", tfq::PRECISION_FULL, "m2"),          // 2
      MakeUnit(Unit::UNIT_NODE, "inner", tfq::PRECISION_FULL, "branch"),  // 3
      MakeUnit(Unit::UNIT_NODE, "inner", tfq::PRECISION_W8A8),            // 4
  };
  u = UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, bad);
  ASSERT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(u.status().message());
  EXPECT_THAT(msg, HasSubstr("5 unit_wise_quantization_precision entries"));
  EXPECT_THAT(msg, HasSubstr("no node in the subgraphs of node 'branch' is "
                             "named 'nope'"));
  EXPECT_THAT(msg, HasSubstr("has op_type 'Conv'"));
  EXPECT_THAT(msg, HasSubstr("no local function and no node with a subgraph "
                             "is named 'm2'"));
  // A scoped and an unscoped entry naming one node are one unit.
  EXPECT_THAT(msg, HasSubstr("conflict: entries [3] and [4]"));
}

void AddNode(onnx::GraphProto* g, const std::string& op,
             const std::string& name, std::vector<std::string> inputs,
             std::vector<std::string> outputs) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const std::string& i : inputs) n->add_input(i);
  for (const std::string& o : outputs) n->add_output(o);
}

// A spectrogram front end (stft Conv -> |X| -> log) feeding an encoder, a
// classifier head whose Log follows a Softmax, and the same front end
// inside an If branch.
onnx::ModelProto FeedsLog() {
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  AddNode(g, "Conv", "stft", {"audio", "basis"}, {"re_im"});
  AddNode(g, "Mul", "power", {"re_im", "re_im"}, {"p"});
  AddNode(g, "Sqrt", "mag", {"p"}, {"m"});
  AddNode(g, "Add", "floor", {"m", "eps"}, {"m_eps"});
  AddNode(g, "Log", "log", {"m_eps"}, {"spect"});
  AddNode(g, "Conv", "enc", {"spect", "w_enc"}, {"e"});
  AddNode(g, "MatMul", "logits", {"e", "w_head"}, {"z"});
  AddNode(g, "Softmax", "softmax", {"z"}, {"prob"});
  AddNode(g, "Log", "log_prob", {"prob"}, {"lp"});
  onnx::NodeProto* holder = g->add_node();
  holder->set_name("branch");
  holder->set_op_type("If");
  onnx::AttributeProto* a = holder->add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  AddNode(body, "Conv", "stft8k", {"audio", "basis"}, {"b_re_im"});
  AddNode(body, "Relu", "relu", {"b_re_im"}, {"b_r"});
  AddNode(body, "Log", "b_log", {"b_r"}, {"b_spect"});
  return m;
}

TEST(UnitPrecisionTest, LayersFeedingALogStayFloatUnlessNamed) {
  const onnx::ModelProto m = FeedsLog();
  absl::StatusOr<UnitPrecision> u = UnitPrecision::Resolve(
      m, tfq::PRECISION_W8A8,
      {MakeUnit(Unit::UNIT_OP, "Conv", tfq::PRECISION_W4A8)});
  ASSERT_TRUE(u.ok()) << u.status();
  const UnitPrecision::Choice stft = u->For(*NodeNamed(m, "stft"));
  EXPECT_EQ(stft.precision, tfq::PRECISION_FULL);
  EXPECT_EQ(stft.entry, UnitPrecision::kFeedsLog);  // Beats UNIT_OP.
  EXPECT_THAT(u->Why(*NodeNamed(m, "stft")), HasSubstr("reaches Log 'log'"));
  // After the Log, and before a Log that follows a Softmax: quantized.
  EXPECT_EQ(u->For(*NodeNamed(m, "enc")).precision, tfq::PRECISION_W4A8);
  EXPECT_EQ(u->For(*NodeNamed(m, "logits")).precision, tfq::PRECISION_W8A8);
  // Inside the branch too.
  const onnx::GraphProto& body = m.graph().node(9).attribute(0).g();
  EXPECT_EQ(u->InBody("branch").For(body.node(0)).entry,
            UnitPrecision::kFeedsLog);
  // A UNIT_NODE entry quantizes it anyway.
  u = UnitPrecision::Resolve(
      m, tfq::PRECISION_W8A8,
      {MakeUnit(Unit::UNIT_NODE, "stft", tfq::PRECISION_W8A8)});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->For(*NodeNamed(m, "stft")).entry, 0);
  // Without entries (the default alone) the rule holds as well.
  u = UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, {});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->For(*NodeNamed(m, "stft")).precision, tfq::PRECISION_FULL);
}

TEST(UnitPrecisionTest, UnscopedNameInSeveralScopesIsAmbiguous) {
  onnx::ModelProto m = WithSubgraph();
  // A second If holding another "inner".
  onnx::NodeProto second = m.graph().node(2);
  second.set_name("other");
  *m.mutable_graph()->add_node() = second;
  const std::vector<Unit> units = {
      MakeUnit(Unit::UNIT_NODE, "inner", tfq::PRECISION_FULL)};
  absl::StatusOr<UnitPrecision> u =
      UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, units);
  ASSERT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(u.status().message(),
              HasSubstr("nodes named 'inner' are in the subgraphs of node "
                        "'branch' and the subgraphs of node 'other'; set "
                        "func_name to choose"));
  // Scoped, each is one node.
  const std::vector<Unit> scoped = {
      MakeUnit(Unit::UNIT_NODE, "inner", tfq::PRECISION_FULL, "branch"),
      MakeUnit(Unit::UNIT_NODE, "inner", tfq::PRECISION_FULL, "other")};
  EXPECT_TRUE(UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, scoped).ok());
}

// The PyTorch export with local function "Block" (two calls, /b1/Block and
// /b2/Block; body Gemm_0, Relu_1, Add_2), inlined as the engine does.
struct InlinedModel {
  onnx::ModelProto model;
  graph::InlinedFunctions inlined;
};
InlinedModel FunctionDigits() {
  InlinedModel out;
  absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(
      ::quantd::testing::ReadFileOrDie(::quantd::testing::SourcePath(
          "tests/data/passes/function_digits.onnx")));
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return out;
  out.model = std::move(*m);
  absl::StatusOr<graph::InlinedFunctions> r =
      graph::InlineLocalFunctions(&out.model);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) out.inlined = std::move(*r);
  return out;
}

TEST(UnitPrecisionTest, FuncNameScopesLocalFunctionNodes) {
  const InlinedModel f = FunctionDigits();
  const onnx::ModelProto& m = f.model;
  const std::vector<Unit> units = {
      MakeUnit(Unit::UNIT_OP, "Gemm", tfq::PRECISION_W4A8),           // 0
      MakeUnit(Unit::UNIT_OP, "Gemm", tfq::PRECISION_FULL, "Block"),  // 1
      MakeUnit(Unit::UNIT_NODE, "Relu_1", tfq::PRECISION_W8A8),       // 2
  };
  absl::StatusOr<UnitPrecision> u =
      UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, units, &f.inlined);
  ASSERT_TRUE(u.ok()) << u.status();
  // Both calls share the function's precision: the scoped op entry beats
  // the unscoped one inside Block, not outside it.
  for (const char* name : {"/b1/Block/Gemm_0", "/b2/Block/Gemm_0"}) {
    ASSERT_NE(NodeNamed(m, name), nullptr) << name;
    EXPECT_EQ(u->For(*NodeNamed(m, name)).precision, tfq::PRECISION_FULL)
        << name;
    EXPECT_EQ(u->For(*NodeNamed(m, name)).entry, 1) << name;
  }
  EXPECT_EQ(u->For(*NodeNamed(m, "/stem/Gemm")).precision, tfq::PRECISION_W4A8);
  // Unscoped and absent from the main graph: the one node of Block.
  EXPECT_EQ(u->For(*NodeNamed(m, "/b2/Block/Relu_1")).entry, 2);

  // The DYNAMIC_RANGE pass keeps both blocks' weights float.
  onnx::ModelProto q = m;
  WeightPassOptions o = Dynamic(tfq::PRECISION_W8A8, units);
  o.min_num_elements = 0;
  o.inlined = f.inlined;
  absl::StatusOr<PassStats> d = RunDynamicRangePass(o, PassHooks(), &q);
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectFloatWeight(q, "b1.fc.weight");
  ExpectFloatWeight(q, "b2.fc.weight");
  ExpectQuantizedWeight(q, "stem.weight");
  ExpectQuantizedWeight(q, "head.weight");
  const quantd::v1::SkippedTensor* skip = SkipOf(d->skipped, "b1.fc.weight");
  ASSERT_NE(skip, nullptr);
  EXPECT_THAT(skip->detail(), HasSubstr(DescribeUnitEntry(1, units[1])));

  // One node of the function, scoped.
  const std::vector<Unit> one = {
      MakeUnit(Unit::UNIT_NODE, "Gemm_0", tfq::PRECISION_FULL, "Block")};
  u = UnitPrecision::Resolve(m, tfq::PRECISION_W8A8, one, &f.inlined);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->IsFull(*NodeNamed(m, "/b1/Block/Gemm_0")));
  EXPECT_FALSE(u->IsFull(*NodeNamed(m, "/stem/Gemm")));
}

TEST(UnitPrecisionTest, FuncNameErrorsNameTheEntry) {
  const InlinedModel f = FunctionDigits();
  const std::vector<Unit> units = {
      MakeUnit(Unit::UNIT_NODE, "Nope", tfq::PRECISION_FULL, "Block"),    // 0
      MakeUnit(Unit::UNIT_OP, "Conv", tfq::PRECISION_FULL, "Block"),      // 1
      MakeUnit(Unit::UNIT_NODE, "/b1/Block", tfq::PRECISION_FULL),        // 2
      MakeUnit(Unit::UNIT_NODE, "Gemm_0", tfq::PRECISION_FULL, "Block"),  // 3
      MakeUnit(Unit::UNIT_NODE, "Gemm_0", tfq::PRECISION_W8A8),           // 4
      MakeUnit(Unit::UNIT_OP, "Gemm", tfq::PRECISION_FULL, "Blocks"),     // 5
  };
  absl::StatusOr<UnitPrecision> u =
      UnitPrecision::Resolve(f.model, tfq::PRECISION_W8A8, units, &f.inlined);
  ASSERT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(u.status().message());
  EXPECT_THAT(msg, HasSubstr("6 unit_wise_quantization_precision entries"));
  EXPECT_THAT(msg,
              HasSubstr("no node in local function 'Block' is named 'Nope'"));
  EXPECT_THAT(msg, HasSubstr("no node in local function 'Block' has op_type "
                             "'Conv'"));
  EXPECT_THAT(msg, HasSubstr("'/b1/Block' is a call of a local function"));
  EXPECT_THAT(msg, HasSubstr("conflict: entries [3] and [4]"));
  EXPECT_THAT(msg, HasSubstr("is named 'Blocks' (func_name)"));
}

TEST(UnitPrecisionTest, DynamicRangeFullNodeKeepsFloatWeightAndInput) {
  onnx::ModelProto m = TwoMatMuls();
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(
      Dynamic(tfq::PRECISION_W8A8,
              {MakeUnit(Unit::UNIT_NODE, "m1", tfq::PRECISION_FULL)}),
      PassHooks(), &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ExpectFloatWeight(m, "W1");
  ExpectQuantizedWeight(m, "W2");
  EXPECT_EQ(NodeNamed(m, "m1")->input(0), "x");  // No DynamicQuantizeLinear.
  EXPECT_EQ(ProducerOp(m, NodeNamed(m, "m2")->input(0)), "DequantizeLinear");
  EXPECT_EQ(CountOp(m, "DynamicQuantizeLinear"), 1);
  EXPECT_EQ(stats->quantized_tensors, 1);
  EXPECT_EQ(stats->quantized_nodes, 1);
  const quantd::v1::SkippedTensor* skip = SkipOf(stats->skipped, "W1");
  ASSERT_NE(skip, nullptr);
  EXPECT_EQ(skip->reason(), quantd::v1::SKIP_PRECISION_FULL);
  EXPECT_THAT(skip->detail(), HasSubstr("unit_wise_quantization_precision[0]"));
  EXPECT_THAT(skip->detail(), HasSubstr("m1"));
}

TEST(UnitPrecisionTest, StaticRangeFullNodeKeepsFloatWeightAndActivations) {
  onnx::ModelProto m = TwoMatMuls();
  absl::StatusOr<StaticRangeStats> stats = RunStaticRangePass(
      Static(tfq::PRECISION_W8A8,
             {MakeUnit(Unit::UNIT_OP, "MatMul", tfq::PRECISION_FULL),
              MakeUnit(Unit::UNIT_NODE, "m2", tfq::PRECISION_W8A8)}),
      Ranges(), PassHooks(), &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ExpectFloatWeight(m, "W1");
  ExpectQuantizedWeight(m, "W2");
  // m1 (FULL by op) reads x as it was; h feeds m2 (W8A8), so it gets a point
  // (but m1's output h itself is still produced float by m1).
  EXPECT_EQ(NodeNamed(m, "m1")->input(0), "x");
  EXPECT_EQ(NodeNamed(m, "m1")->output(0), "h");
  EXPECT_EQ(ProducerOp(m, NodeNamed(m, "m2")->input(0)), "DequantizeLinear");
  EXPECT_EQ(CountOp(m, "QuantizeLinear"), 1);  // Only h (y has no reader).
  EXPECT_EQ(stats->quantized_weights, 1);
  EXPECT_EQ(stats->quantized_activations, 1);
  EXPECT_EQ(stats->quantized_nodes, 1);
  const quantd::v1::SkippedTensor* skip = SkipOf(stats->skipped, "W1");
  ASSERT_NE(skip, nullptr);
  EXPECT_EQ(skip->reason(), quantd::v1::SKIP_PRECISION_FULL);
  EXPECT_THAT(skip->detail(), HasSubstr("unit_wise_quantization_precision[0]"));

  // The other way round: m2 FULL, so h is only read by a FULL node and
  // gets no point; x feeds m1 (W8A8) and gets one.
  m = TwoMatMuls();
  stats = RunStaticRangePass(
      Static(tfq::PRECISION_W8A8,
             {MakeUnit(Unit::UNIT_NODE, "m2", tfq::PRECISION_FULL)}),
      Ranges(), PassHooks(), &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ExpectQuantizedWeight(m, "W1");
  ExpectFloatWeight(m, "W2");
  EXPECT_EQ(NodeNamed(m, "m2")->input(0), "h");
  EXPECT_EQ(ProducerOp(m, NodeNamed(m, "m1")->input(0)), "DequantizeLinear");
  EXPECT_EQ(CountOp(m, "QuantizeLinear"), 1);  // Only x.
}

TEST(UnitPrecisionTest, DefaultFullQuantizesOnlyTheW8A8Node) {
  const std::vector<Unit> units = {
      MakeUnit(Unit::UNIT_NODE, "m2", tfq::PRECISION_W8A8)};
  onnx::ModelProto m = TwoMatMuls();
  absl::StatusOr<PassStats> d =
      RunDynamicRangePass(Dynamic(tfq::PRECISION_FULL, units), PassHooks(), &m);
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectFloatWeight(m, "W1");
  ExpectQuantizedWeight(m, "W2");
  EXPECT_EQ(d->quantized_nodes, 1);
  const quantd::v1::SkippedTensor* skip = SkipOf(d->skipped, "W1");
  ASSERT_NE(skip, nullptr);
  EXPECT_EQ(skip->reason(), quantd::v1::SKIP_PRECISION_FULL);
  EXPECT_THAT(skip->detail(), HasSubstr("model-wide quantization_precision"));

  m = TwoMatMuls();
  absl::StatusOr<StaticRangeStats> s = RunStaticRangePass(
      Static(tfq::PRECISION_FULL, units), Ranges(), PassHooks(), &m);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectFloatWeight(m, "W1");
  ExpectQuantizedWeight(m, "W2");
  EXPECT_EQ(NodeNamed(m, "m1")->input(0), "x");
  EXPECT_EQ(CountOp(m, "QuantizeLinear"), 1);
  EXPECT_EQ(s->quantized_nodes, 1);

  // Through the engine: FULL + a W8A8 unit is not a pass-through.
  quantd::v1::QuantizeConfig config;
  auto* o = config.mutable_options();
  o->mutable_quantization_method()->set_experimental_method(
      tfq::QuantizationMethod::DYNAMIC_RANGE);
  o->set_quantization_precision(tfq::PRECISION_FULL);
  *o->add_unit_wise_quantization_precision() = units[0];
  std::vector<quantd::v1::TensorReport> reports;
  QuantizeEvents events;
  events.on_tensor_report = [&](const quantd::v1::TensorReport& r) {
    reports.push_back(r);
  };
  CancellationToken cancel;
  absl::StatusOr<QuantizeResult> r = RunQuantize(
      config, TwoMatMuls().SerializeAsString(), events, cancel, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->summary.model_unchanged());
  EXPECT_EQ(r->summary.quantized_nodes(), 1);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].tensor_name(), "W2");
  EXPECT_EQ(reports[0].precision(), tfq::PRECISION_W8A8);
  absl::StatusOr<onnx::ModelProto> out = graph::ParseModel(r->model);
  ASSERT_TRUE(out.ok());
  ExpectFloatWeight(*out, "W1");
  ExpectQuantizedWeight(*out, "W2");
}

int32_t StoredType(const onnx::ModelProto& m, const std::string& weight) {
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "DequantizeLinear" && n.output(0) == weight) {
      const onnx::TensorProto* t = Init(m, n.input(0));
      return t != nullptr ? t->data_type() : -1;
    }
  }
  return -1;
}

// The zero point type of the QuantizeLinear reading `tensor`.
int32_t PointType(const onnx::ModelProto& m, const std::string& tensor) {
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "QuantizeLinear" && n.input(0) == tensor) {
      const onnx::TensorProto* t = Init(m, n.input(2));
      return t != nullptr ? t->data_type() : -1;
    }
  }
  return -1;
}

TEST(UnitPrecisionTest, DynamicRangeMixesW8A8AndW4A8) {
  onnx::ModelProto m = TwoMatMuls();
  WeightPassOptions o =
      Dynamic(tfq::PRECISION_W8A8,
              {MakeUnit(Unit::UNIT_NODE, "m1", tfq::PRECISION_W4A8)});
  o.min_num_elements = 0;
  std::vector<quantd::v1::TensorReport> reports;
  PassHooks hooks;
  hooks.on_report = [&](const quantd::v1::TensorReport& r) {
    reports.push_back(r);
  };
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(o, hooks, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(StoredType(m, "W1"), numerics::kOnnxInt4);
  EXPECT_EQ(StoredType(m, "W2"), onnx::TensorProto::INT8);
  EXPECT_EQ(graph::DefaultOpset(m), 21);
  EXPECT_GE(m.ir_version(), 10);
  EXPECT_THAT(stats->opset_note, HasSubstr("opset raised from 13 to 21"));
  // Activations are uint8 either way (DynamicQuantizeLinear).
  EXPECT_EQ(CountOp(m, "DynamicQuantizeLinear"), 2);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].precision(), tfq::PRECISION_W4A8);
  EXPECT_EQ(reports[0].scheme().storage_type(), "INT4");
  EXPECT_EQ(reports[0].scheme().bits(), 4);
  EXPECT_EQ(reports[0].scheme().quant_min(), -7);
  EXPECT_EQ(reports[0].scheme().quant_max(), 7);
  EXPECT_EQ(reports[1].scheme().storage_type(), "INT8");
  // 64 x 32 INT4 values are 1024 bytes, plus 32 scales and 16 zero-point
  // bytes; W2 is 2048 int8 values + 64 scales + 64 zero points.
  EXPECT_EQ(stats->weight_bytes_after,
            (1024u + 32 * 4 + 16) + (2048u + 64 * 4 + 64));
}

TEST(UnitPrecisionTest, StaticRangeW4A4UnitGetsUint4Points) {
  onnx::ModelProto m = TwoMatMuls();
  StaticRangeOptions o =
      Static(tfq::PRECISION_W8A8,
             {MakeUnit(Unit::UNIT_NODE, "m1", tfq::PRECISION_W4A4)});
  o.min_num_elements = 0;
  absl::StatusOr<StaticRangeStats> s =
      RunStaticRangePass(o, Ranges(), PassHooks(), &m);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(StoredType(m, "W1"), numerics::kOnnxInt4);
  EXPECT_EQ(StoredType(m, "W2"), onnx::TensorProto::INT8);
  // x is read by the W4A4 node only: 4-bit. h joins m1 (W4A4) and m2
  // (W8A8): the 8-bit grid.
  EXPECT_EQ(PointType(m, "x"), numerics::kOnnxUint4);
  EXPECT_EQ(PointType(m, "h"), onnx::TensorProto::UINT8);
  EXPECT_EQ(graph::DefaultOpset(m), 21);

  // A DYNAMIC_RANGE request cannot have 4-bit activations at all.
  quantd::v1::QuantizeConfig config;
  auto* unit = config.mutable_options()->add_unit_wise_quantization_precision();
  *unit = MakeUnit(Unit::UNIT_NODE, "m1", tfq::PRECISION_W4A4);
  EXPECT_EQ(ResolveDynamicRangeOptions(config).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(UnitPrecisionTest, SharedWeightWithDisagreeingConsumersStaysFloat) {
  const std::vector<Unit> units = {
      MakeUnit(Unit::UNIT_NODE, "m1", tfq::PRECISION_FULL)};
  onnx::ModelProto m = SharedWeight();
  absl::StatusOr<PassStats> d =
      RunDynamicRangePass(Dynamic(tfq::PRECISION_W8A8, units), PassHooks(), &m);
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectFloatWeight(m, "W");
  EXPECT_EQ(d->quantized_tensors, 0);
  EXPECT_EQ(CountOp(m, "DynamicQuantizeLinear"), 0);
  const quantd::v1::SkippedTensor* skip = SkipOf(d->skipped, "W");
  ASSERT_NE(skip, nullptr);
  EXPECT_EQ(skip->reason(), quantd::v1::SKIP_PRECISION_FULL);
  EXPECT_THAT(skip->detail(), HasSubstr("disagree"));
  EXPECT_THAT(skip->detail(), HasSubstr("MatMul 'm1' is PRECISION_FULL"));
  EXPECT_THAT(skip->detail(), HasSubstr("MatMul 'm2' is PRECISION_W8A8"));

  m = SharedWeight();
  absl::StatusOr<StaticRangeStats> s = RunStaticRangePass(
      Static(tfq::PRECISION_W8A8, units), Ranges(), PassHooks(), &m);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectFloatWeight(m, "W");
  skip = SkipOf(s->skipped, "W");
  ASSERT_NE(skip, nullptr);
  EXPECT_EQ(skip->reason(), quantd::v1::SKIP_PRECISION_FULL);
  EXPECT_THAT(skip->detail(), HasSubstr("'m2'"));
}

}  // namespace
}  // namespace quantd::passes
