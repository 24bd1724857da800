// Quantizing inside If/Loop/Scan bodies (subgraph_bodies.h) through the
// DYNAMIC_RANGE and STATIC_RANGE passes, on the control-flow model of
// scripts/make_control_flow_quant_model.py (an If whose branches read an
// outer weight and a branch-local weight, a Loop whose body reads outer
// weight and bias), judged by ONNX Runtime: the quantized model must run
// there and agree with the float model (SQNR of the output), and the
// structure must show what was quantized where; unit-wise func_name entries
// keep named body nodes float.
#include "core/passes/subgraph_bodies.h"

#include <string>
#include <vector>

#include "core/graph/model_io.h"
#include "core/graph/validate.h"
#include "core/passes/dynamic_range_pass.h"
#include "core/passes/static_range_pass.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::passes {
namespace {

namespace tfq = tensorflow::quantization;
using ::quantd::testing::SourcePath;
using ::testing::HasSubstr;
using Unit = tfq::UnitWiseQuantizationPrecision;

const char kModel[] = "tests/data/passes/control_flow.onnx";
const char kInputs[] = "tests/data/passes/control_flow_x.npy";

onnx::ModelProto Load() {
  absl::StatusOr<onnx::ModelProto> m =
      graph::ParseModel(::quantd::testing::ReadFileOrDie(SourcePath(kModel)));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : onnx::ModelProto();
}

const onnx::NodeProto* Find(const onnx::GraphProto& g, const std::string& name,
                            const onnx::GraphProto** where = nullptr) {
  for (const auto& n : g.node()) {
    if (n.name() == name) {
      if (where != nullptr) *where = &g;
      return &n;
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g()) {
        if (const auto* f = Find(a.g(), name, where)) return f;
      }
    }
  }
  return nullptr;
}

// The op producing `tensor` in `g` (not looking into subgraphs), or "".
std::string ProducerIn(const onnx::GraphProto& g, const std::string& tensor) {
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (o == tensor) return n.op_type();
    }
  }
  return "";
}

bool HasInitializer(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return true;
  }
  return false;
}

int Count(const onnx::GraphProto& g, const std::string& op) {
  int k = 0;
  for (const auto& n : g.node()) {
    k += n.op_type() == op;
    for (const auto& a : n.attribute()) {
      if (a.has_g()) k += Count(a.g(), op);
    }
  }
  return k;
}

// The node `name`'s weight (input 1) is produced by a DequantizeLinear in
// the graph holding the node.
void ExpectQuantizedWeight(const onnx::ModelProto& m, const std::string& name) {
  const onnx::GraphProto* g = nullptr;
  const onnx::NodeProto* n = Find(m.graph(), name, &g);
  ASSERT_NE(n, nullptr) << name;
  EXPECT_EQ(ProducerIn(*g, n->input(1)), "DequantizeLinear") << name;
}

// ONNX Runtime runs both models one sample at a time; SQNR of the output.
double OrtSqnr(const onnx::ModelProto& quantized) {
  ::quantd::testing::TempDir tmp;
  const std::string path = tmp.File("q.onnx");
  std::string bytes;
  EXPECT_TRUE(quantized.SerializeToString(&bytes));
  ::quantd::testing::WriteFileOrDie(path, bytes);
  const std::string json = ::quantd::testing::OrtEval(
      {"compare", "--model", SourcePath(kModel), "--model2", path, "--x",
       SourcePath(kInputs), "--batch", "1"});
  return ::quantd::testing::JsonNumber(json, "sqnr_db");
}

DynamicRangeOptions Dynamic() {
  DynamicRangeOptions o;
  o.min_num_elements = 0;  // The 16x16 weights too.
  return o;
}

TEST(SubgraphBodiesTest, DynamicRangeQuantizesInsideIfAndLoop) {
  onnx::ModelProto m = Load();
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(Dynamic(), {}, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  // m0, m_out in the main graph; then_mm, else_mm, loop_mm in bodies.
  EXPECT_EQ(stats->quantized_tensors, 5);
  EXPECT_EQ(stats->quantized_nodes, 5);
  for (const char* n : {"m0", "m_out", "then_mm", "else_mm", "loop_mm"}) {
    ExpectQuantizedWeight(m, n);
  }
  // Outer weights now read only through the bodies' quantized copies are
  // gone; the branch-local W2 was quantized in place.
  EXPECT_FALSE(HasInitializer(m.graph(), "W1"));
  EXPECT_FALSE(HasInitializer(m.graph(), "W3"));
  EXPECT_TRUE(HasInitializer(m.graph(), "b3"));  // Add's input: not a weight.
  // One DynamicQuantizeLinear per quantized node's input.
  EXPECT_EQ(Count(m.graph(), "DynamicQuantizeLinear"), 5);
  std::vector<std::string> notes;
  EXPECT_TRUE(graph::ValidateModel(m, "quantized", &notes).ok());

  const double sqnr = OrtSqnr(m);
  std::cout << "measured: control-flow model DYNAMIC W8A8 output SQNR in ORT "
            << sqnr << " dB" << std::endl;
  EXPECT_GT(sqnr, 25.0);
}

// Below IR 4 every initializer is also a graph input: an outer weight the
// bodies now read through quantized copies leaves both lists, or the model
// would ask its caller to feed it.
TEST(SubgraphBodiesTest, OldIrOuterWeightsLeaveTheInputsToo) {
  onnx::ModelProto m = Load();
  m.set_ir_version(3);
  for (const auto& t : m.graph().initializer()) {
    onnx::ValueInfoProto* v = m.mutable_graph()->add_input();
    v->set_name(t.name());
    auto* type = v->mutable_type()->mutable_tensor_type();
    type->set_elem_type(t.data_type());
    for (int64_t d : t.dims())
      type->mutable_shape()->add_dim()->set_dim_value(d);
  }
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(Dynamic(), {}, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->quantized_tensors, 5);
  for (const auto& v : m.graph().input()) {
    EXPECT_NE(v.name(), "W1");
    EXPECT_NE(v.name(), "W3");
  }
  EXPECT_FALSE(HasInitializer(m.graph(), "W1"));
  EXPECT_TRUE(HasInitializer(m.graph(), "b3"));
}

TEST(SubgraphBodiesTest, FuncNameKeepsBodyNodesFloat) {
  onnx::ModelProto m = Load();
  DynamicRangeOptions o = Dynamic();
  Unit branch, loop;
  branch.set_unit_type(Unit::UNIT_OP);
  branch.set_func_name("branch");
  branch.set_unit_name("MatMul");
  branch.set_quantization_precision(tfq::PRECISION_FULL);
  loop.set_unit_type(Unit::UNIT_NODE);
  loop.set_func_name("loop");
  loop.set_unit_name("loop_mm");
  loop.set_quantization_precision(tfq::PRECISION_W4A8);
  o.units = {branch, loop};
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(o, {}, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->quantized_tensors, 3);  // m0, m_out, loop_mm.
  // Both branches keep float weights: W1 still the main graph's, W2 the
  // branch's own.
  EXPECT_TRUE(HasInitializer(m.graph(), "W1"));
  const onnx::NodeProto* then_mm = Find(m.graph(), "then_mm");
  ASSERT_NE(then_mm, nullptr);
  EXPECT_EQ(then_mm->input(1), "W1");
  const onnx::GraphProto* else_g = nullptr;
  const onnx::NodeProto* else_mm = Find(m.graph(), "else_mm", &else_g);
  ASSERT_NE(else_mm, nullptr);
  EXPECT_TRUE(HasInitializer(*else_g, else_mm->input(1)));
  // The loop's MatMul is 4-bit: INT4 storage at opset 21.
  ExpectQuantizedWeight(m, "loop_mm");
  EXPECT_EQ(graph::DefaultOpset(m), 21);
  const quantd::v1::SkippedTensor* skip = nullptr;
  for (const auto& s : stats->skipped) {
    if (s.node_name() == "then_mm") skip = &s;
  }
  ASSERT_NE(skip, nullptr);
  EXPECT_THAT(skip->detail(), HasSubstr("func_name: \"branch\""));

  const double sqnr = OrtSqnr(m);
  std::cout << "measured: control-flow model, branches FULL and loop W4A8, "
               "output SQNR in ORT "
            << sqnr << " dB" << std::endl;
  EXPECT_GT(sqnr, 12.0);  // 4-bit weights, fed back three times.
}

TEST(SubgraphBodiesTest, StaticRangeQuantizesBodiesWithTheirRanges) {
  onnx::ModelProto m = Load();
  StaticRangeOptions o;
  o.min_num_elements = 0;
  // Ranges wide enough for every activation of the model (the engine test
  // calibrates them; this one checks the placement).
  ActivationRanges ranges;
  for (const char* t : {"x", "h", "t_relu", "e", "branch_out", "v_in", "u",
                        "ub", "v_out", "v_final", "y", "t"}) {
    ranges[t] = {-6.0f, 6.0f};
  }
  absl::StatusOr<StaticRangeStats> stats =
      RunStaticRangePass(o, ranges, {}, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->quantized_weights, 5);
  for (const char* n : {"m0", "m_out", "then_mm", "else_mm", "loop_mm"}) {
    ExpectQuantizedWeight(m, n);
  }
  // Inside the loop body: its input v_in and output u are quantized there.
  const onnx::GraphProto* body = nullptr;
  const onnx::NodeProto* loop_mm = Find(m.graph(), "loop_mm", &body);
  ASSERT_NE(loop_mm, nullptr);
  EXPECT_EQ(ProducerIn(*body, loop_mm->input(0)), "DequantizeLinear");
  std::vector<std::string> notes;
  EXPECT_TRUE(graph::ValidateModel(m, "quantized", &notes).ok());
  const double sqnr = OrtSqnr(m);
  std::cout << "measured: control-flow model STATIC W8A8 (fixed ranges) "
               "output SQNR in ORT "
            << sqnr << " dB" << std::endl;
  // [-6, 6] is coarse (a step of 0.047 on values mostly within +-2).
  EXPECT_GT(sqnr, 10.0);

  // A body activation without a range is named.
  onnx::ModelProto again = Load();
  ranges.erase("u");
  absl::StatusOr<StaticRangeStats> missing =
      RunStaticRangePass(o, ranges, {}, &again);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("'u'"));
}

}  // namespace
}  // namespace quantd::passes
