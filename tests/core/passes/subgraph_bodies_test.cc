// Quantizing inside If/Loop/Scan bodies (subgraph_bodies.h) through the
// DYNAMIC_RANGE and STATIC_RANGE passes, on the control-flow model of
// scripts/make_control_flow_quant_model.py (an If whose branches read an
// outer weight and a branch-local weight, a Loop whose body reads outer
// weight and bias), judged by ONNX Runtime: the quantized model must run
// there and agree with the float model (SQNR of the output), and the
// structure must show what was quantized where; unit-wise func_name entries
// keep named body nodes float.
#include "core/passes/subgraph_bodies.h"

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/cancellation.h"
#include "core/engine/calibration_session.h"
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
// `float_model` (null: the model file) is the reference, `inputs` (empty:
// the inputs file) the .npy fed, `opt` (empty: ort_eval's default, all) the
// graph optimization level.
double OrtSqnr(const onnx::ModelProto& quantized,
               const onnx::ModelProto* float_model = nullptr,
               const std::string& inputs = "", const std::string& opt = "") {
  ::quantd::testing::TempDir tmp;
  const std::string path = tmp.File("q.onnx");
  std::string bytes;
  EXPECT_TRUE(quantized.SerializeToString(&bytes));
  ::quantd::testing::WriteFileOrDie(path, bytes);
  std::string reference = SourcePath(kModel);
  if (float_model != nullptr) {
    reference = tmp.File("f.onnx");
    EXPECT_TRUE(float_model->SerializeToString(&bytes));
    ::quantd::testing::WriteFileOrDie(reference, bytes);
  }
  std::vector<std::string> args = {
      "compare",
      "--model",
      reference,
      "--model2",
      path,
      "--x",
      inputs.empty() ? SourcePath(kInputs) : inputs,
      "--batch",
      "1"};
  if (!opt.empty()) args.insert(args.end(), {"--opt", opt});
  const std::string json = ::quantd::testing::OrtEval(args);
  return ::quantd::testing::JsonNumber(json, "sqnr_db");
}

WeightPassOptions Dynamic() {
  WeightPassOptions o;
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
  WeightPassOptions o = Dynamic();
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

  // A body activation without a range (a loop calibration never ran)
  // stays float and is named in the note.
  onnx::ModelProto again = Load();
  ranges.erase("u");
  stats = RunStaticRangePass(o, ranges, {}, &again);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->unreached, ::testing::ElementsAre("u"));
  EXPECT_THAT(stats->unreached_note, HasSubstr("'u'"));
  // A main-graph activation without a range is still an error, also when
  // only a body reads it (then_mm's input h).
  onnx::ModelProto main_missing = Load();
  ranges.erase("h");
  absl::StatusOr<StaticRangeStats> missing =
      RunStaticRangePass(o, ranges, {}, &main_missing);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("'h'"));
}

// The control-flow model with a branch-local activation: the else branch
// computes h_else = Relu(h) and its MatMul reads that.
onnx::ModelProto LoadWithElseRelu() {
  onnx::ModelProto m = Load();
  for (onnx::NodeProto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "If") continue;
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      if (a.name() != "else_branch") continue;
      onnx::GraphProto* g = a.mutable_g();
      for (onnx::NodeProto& e : *g->mutable_node()) {
        if (e.name() == "else_mm") e.set_input(0, "h_else");
      }
      onnx::NodeProto relu;
      relu.set_op_type("Relu");
      relu.set_name("else_relu");
      relu.add_input("h");
      relu.add_output("h_else");
      g->mutable_node()->Add(std::move(relu));
      // Keep the graph order topological: the Relu first.
      for (int i = g->node_size() - 1; i > 0; --i) {
        g->mutable_node()->SwapElements(i, i - 1);
      }
    }
  }
  return m;
}

// Sample `k` of a deterministic set whose means are all negative: with
// them only the then branch (cond = mean <= 0) runs.
std::vector<float> ThenSample(int k) {
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) {
    x[i] = -0.8f + 0.6f * std::sin(0.7f * static_cast<float>(i + 16 * k));
  }
  return x;
}

// Writes samples [first, first + n) of ThenSample as a float32 [n, 16] .npy.
void WriteThenSamples(const std::string& path, int first, int n) {
  std::string header = absl::StrCat(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (", n, ", 16), }");
  // Magic, version, a 2-byte length, then the header padded to 64 bytes.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  for (int k = first; k < first + n; ++k) {
    const std::vector<float> x = ThenSample(k);
    bytes.append(reinterpret_cast<const char*>(x.data()),
                 x.size() * sizeof(float));
  }
  ::quantd::testing::WriteFileOrDie(path, bytes);
}

// Calibrates `model` on the executor with ThenSample 0..7: the else branch
// never runs.
ActivationRanges CalibrateThenBranchOnly(const onnx::ModelProto& model) {
  absl::StatusOr<std::unique_ptr<CalibrationSession>> session =
      CalibrationSession::Create(model, calibration::ObserverConfig());
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  CancellationToken cancel;
  for (int k = 0; k < 8; ++k) {
    const std::vector<float> x = ThenSample(k);
    quantd::v1::TensorBatch batch;
    auto* t = batch.add_tensors();
    t->set_name("x");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_shape(1);
    t->add_shape(16);
    t->set_data(reinterpret_cast<const char*>(x.data()),
                x.size() * sizeof(float));
    absl::Status s = (*session)->AddBatch(batch, nullptr, cancel);
    EXPECT_TRUE(s.ok()) << s;
  }
  absl::StatusOr<ActivationRanges> ranges =
      RangesFromCalibration((*session)->Result());
  EXPECT_TRUE(ranges.ok()) << ranges.status();
  return ranges.ok() ? *ranges : ActivationRanges();
}

// Runs STATIC_RANGE with `op_set` on the else-Relu model calibrated on the
// then branch only: h_else has no range and must stay float.
absl::StatusOr<StaticRangeStats> RunUnreachedElse(tfq::OpSet op_set,
                                                  onnx::ModelProto* m) {
  *m = LoadWithElseRelu();
  const ActivationRanges ranges = CalibrateThenBranchOnly(*m);
  EXPECT_TRUE(ranges.contains("t"));        // The then branch ran...
  EXPECT_FALSE(ranges.contains("h_else"));  // ...the else branch did not.
  StaticRangeOptions o;
  o.min_num_elements = 0;
  o.op_set = op_set;
  return RunStaticRangePass(o, ranges, {}, m);
}

// Where `tensor` is read by a QuantizeLinear anywhere in `g`.
bool HasPointOn(const onnx::GraphProto& g, const std::string& tensor) {
  for (const auto& n : g.node()) {
    if (n.op_type() == "QuantizeLinear" && n.input(0) == tensor) return true;
    for (const auto& a : n.attribute()) {
      if (a.has_g() && HasPointOn(a.g(), tensor)) return true;
    }
  }
  return false;
}

// ONNX Runtime runs `m` on both branches: on inputs like the calibration
// data (then branch) it agrees with the float model when it runs the QDQ
// graph as written (level basic); on the model's inputs (means of both
// signs, so the else branch too) it runs, though the shared ranges (the
// Loop's, calibrated on the then branch's Relu output) do not cover what the
// else branch makes, so there is no accuracy floor there. `then_floor` (dB;
// 0: none) is the floor on the then-branch inputs. Integer MatMuls on the
// then path give 5.5 dB there (op_set XLA, or ORT 1.30's level-all fusion of
// the TF graph), the same when h_else has a range and nothing is left
// unreached: a separate problem, so XLA gets no floor here.
void ExpectUnreachedElseRunsInOrt(const onnx::ModelProto& m,
                                  const std::string& what, double then_floor) {
  ::quantd::testing::TempDir tmp;
  const std::string then_inputs = tmp.File("then_x.npy");
  WriteThenSamples(then_inputs, 100, 16);
  const onnx::ModelProto float_model = LoadWithElseRelu();
  const double then_sqnr = OrtSqnr(m, &float_model, then_inputs, "basic");
  const double both_sqnr = OrtSqnr(m, &float_model);
  const double both_basic = OrtSqnr(m, &float_model, "", "basic");
  std::cout << "measured: unreached else branch, STATIC " << what
            << ", output SQNR in ORT: " << then_sqnr
            << " dB on then-branch inputs (level basic), " << both_sqnr
            << " dB (level all) and " << both_basic
            << " dB (basic) on inputs taking both branches" << std::endl;
  EXPECT_TRUE(std::isfinite(then_sqnr));
  if (then_floor > 0) {
    EXPECT_GT(then_sqnr, then_floor);
  }
  EXPECT_TRUE(std::isfinite(both_sqnr));
  EXPECT_TRUE(std::isfinite(both_basic));
}

TEST(SubgraphBodiesTest, StaticRangeLeavesUnreachedBranchTensorsFloat) {
  onnx::ModelProto m;
  absl::StatusOr<StaticRangeStats> stats = RunUnreachedElse(tfq::TF, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->unreached, ::testing::ElementsAre("h_else"));
  EXPECT_THAT(stats->unreached_note,
              ::testing::AllOf(HasSubstr("1 tensor(s) in If/Loop/Scan bodies "
                                         "were never reached by calibration"),
                               HasSubstr("'h_else'")));
  EXPECT_FALSE(HasPointOn(m.graph(), "h_else"));
  // else_mm reads the float tensor with its weight still quantized (the
  // TF/QDQ form allows that); then_mm reads a dequantized input.
  const onnx::GraphProto* else_g = nullptr;
  const onnx::NodeProto* else_mm = Find(m.graph(), "else_mm", &else_g);
  ASSERT_NE(else_mm, nullptr);
  EXPECT_EQ(else_mm->input(0), "h_else");
  ExpectQuantizedWeight(m, "else_mm");
  const onnx::GraphProto* then_g = nullptr;
  const onnx::NodeProto* then_mm = Find(m.graph(), "then_mm", &then_g);
  ASSERT_NE(then_mm, nullptr);
  EXPECT_EQ(ProducerIn(*then_g, then_mm->input(0)), "DequantizeLinear");
  std::vector<std::string> notes;
  EXPECT_TRUE(graph::ValidateModel(m, "quantized", &notes).ok());

  ExpectUnreachedElseRunsInOrt(m, "TF", 25.0);
}

TEST(SubgraphBodiesTest, UnreachedBranchTensorsWithXlaAndUniformQuantized) {
  for (tfq::OpSet op_set : {tfq::XLA, tfq::UNIFORM_QUANTIZED}) {
    SCOPED_TRACE(tfq::OpSet_Name(op_set));
    onnx::ModelProto m;
    absl::StatusOr<StaticRangeStats> stats = RunUnreachedElse(op_set, &m);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_THAT(stats->unreached, ::testing::ElementsAre("h_else"));
    EXPECT_FALSE(HasPointOn(m.graph(), "h_else"));
    // The lowering cannot express else_mm (float input) and names it.
    EXPECT_THAT(stats->lowering_note,
                ::testing::AllOf(HasSubstr("else_mm"), HasSubstr("h_else")));
    const onnx::NodeProto* else_mm = Find(m.graph(), "else_mm");
    ASSERT_NE(else_mm, nullptr);
    EXPECT_EQ(else_mm->op_type(), "MatMul");
    EXPECT_EQ(else_mm->input(0), "h_else");
    std::vector<std::string> notes;
    EXPECT_TRUE(graph::ValidateModel(m, "quantized", &notes).ok());
    ExpectUnreachedElseRunsInOrt(m, tfq::OpSet_Name(op_set),
                                 op_set == tfq::XLA ? 0.0 : 20.0);
  }
}

TEST(SubgraphBodiesTest, MainGraphTensorWithoutRangeIsStillAnError) {
  onnx::ModelProto m = LoadWithElseRelu();
  ActivationRanges ranges = CalibrateThenBranchOnly(m);
  ASSERT_TRUE(ranges.contains("x"));
  ranges.erase("x");  // m0's input, in the main graph.
  StaticRangeOptions o;
  o.min_num_elements = 0;
  absl::StatusOr<StaticRangeStats> stats =
      RunStaticRangePass(o, ranges, {}, &m);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      stats.status().message(),
      ::testing::AllOf(HasSubstr("'x'"), ::testing::Not(HasSubstr("h_else"))));
}

}  // namespace
}  // namespace quantd::passes
