// End to end for func_name scoping: a real quantd driven by quantctl with a
// QuantizationOptions text file. On the model whose residual blocks are ONNX
// local functions, an entry scoped to the function keeps its Gemms float in
// both calls; on the If/Loop model, an entry scoped to the Loop keeps the
// loop body's MatMul float while the rest (branch bodies included) is
// quantized after calibration. Bad scopes are INVALID_ARGUMENT naming the
// entry, and the server keeps serving. ONNX Runtime runs every output.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/support/ort.h"
#include "tests/support/quantd_fixture.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;

const onnx::TensorProto* Init(const onnx::GraphProto& g,
                              const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// The node named `name` anywhere in `g`, and the graph holding it.
const onnx::NodeProto* Find(const onnx::GraphProto& g, const std::string& name,
                            const onnx::GraphProto** holder) {
  for (const auto& n : g.node()) {
    if (n.name() == name) {
      *holder = &g;
      return &n;
    }
    for (const auto& a : n.attribute()) {
      if (!a.has_g()) continue;
      if (const auto* f = Find(a.g(), name, holder)) return f;
    }
  }
  return nullptr;
}

std::string ProducerOp(const onnx::GraphProto& g, const std::string& tensor) {
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (o == tensor) return n.op_type();
    }
  }
  return "";
}

class ScopesE2eTest : public QuantdServerTest {};

TEST_F(ScopesE2eTest, FunctionScopeKeepsBothCallsFloat) {
  TempDir tmp;
  const std::string options = tmp.File("options.textproto");
  WriteFileOrDie(options, R"pb(
    quantization_method { experimental_method: STATIC_RANGE }
    min_num_elements_for_weights: -1
    unit_wise_quantization_precision {
      unit_type: UNIT_NODE
      func_name: "Block"
      unit_name: "Gemm_0"
      quantization_precision: PRECISION_FULL
    }
  )pb");
  const std::string out = tmp.File("q.onnx");
  const std::string digits = SourcePath("examples/digits");
  CommandResult r = Quantctl(
      {"quantize",
       "--model=" + SourcePath("tests/data/passes/function_digits.onnx"),
       "--output=" + out, "--options=" + options,
       "--calibration_data=" + digits + "/calib_x.npy", "--batch_size=32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("inlined 2 calls of local functions (Block)"));
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(ReadFileOrDie(out)));
  for (const char* w : {"b1.fc.weight", "b2.fc.weight"}) {
    const onnx::TensorProto* t = Init(m.graph(), w);
    ASSERT_NE(t, nullptr) << w;
    EXPECT_EQ(t->data_type(), onnx::TensorProto::FLOAT) << w;
  }
  EXPECT_EQ(Init(m.graph(), "stem.weight"), nullptr);
  const double acc =
      OrtAccuracy(out, digits + "/test_x.npy", digits + "/test_y.npy");
  std::cout << "measured: e2e local-function digits, Block/Gemm_0 FULL, ORT "
               "top-1 "
            << acc << std::endl;
  EXPECT_GE(acc, 0.97);
}

TEST_F(ScopesE2eTest, LoopScopeKeepsItsBodyFloat) {
  TempDir tmp;
  const std::string options = tmp.File("options.textproto");
  WriteFileOrDie(options, R"pb(
    quantization_method { experimental_method: STATIC_RANGE }
    min_num_elements_for_weights: -1
    unit_wise_quantization_precision {
      unit_type: UNIT_OP
      func_name: "loop"
      unit_name: "MatMul"
      quantization_precision: PRECISION_FULL
    }
  )pb");
  const std::string out = tmp.File("q.onnx");
  CommandResult r =
      Quantctl({"quantize",
                "--model=" + SourcePath("tests/data/passes/control_flow.onnx"),
                "--output=" + out, "--options=" + options,
                "--calibration_data=" +
                    SourcePath("tests/data/passes/control_flow_calib.npy"),
                "--batch_size=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(ReadFileOrDie(out)));
  // The loop body's MatMul still reads the main graph's float W3.
  const onnx::GraphProto* holder = nullptr;
  const onnx::NodeProto* loop_mm = Find(m.graph(), "loop_mm", &holder);
  ASSERT_NE(loop_mm, nullptr);
  EXPECT_EQ(loop_mm->input(1), "W3");
  ASSERT_NE(Init(m.graph(), "W3"), nullptr);
  EXPECT_NE(ProducerOp(*holder, loop_mm->input(0)), "DequantizeLinear");
  // The branches' MatMuls are quantized in their bodies.
  for (const char* name : {"then_mm", "else_mm"}) {
    const onnx::NodeProto* n = Find(m.graph(), name, &holder);
    ASSERT_NE(n, nullptr) << name;
    EXPECT_EQ(ProducerOp(*holder, n->input(0)), "DequantizeLinear") << name;
    EXPECT_EQ(ProducerOp(*holder, n->input(1)), "DequantizeLinear") << name;
  }
  const std::string json = OrtEval(
      {"compare", "--model", SourcePath("tests/data/passes/control_flow.onnx"),
       "--model2", out, "--x",
       SourcePath("tests/data/passes/control_flow_x.npy"), "--batch", "1"});
  const double sqnr = JsonNumber(json, "sqnr_db");
  std::cout << "measured: e2e control-flow model, loop body FULL, ORT SQNR "
            << sqnr << " dB" << std::endl;
  EXPECT_GT(sqnr, 22.0);
}

TEST_F(ScopesE2eTest, BadScopesAreInvalidArgumentNamingTheEntry) {
  TempDir tmp;
  const std::string options = tmp.File("options.textproto");
  WriteFileOrDie(options, R"pb(
    quantization_method { experimental_method: DYNAMIC_RANGE }
    unit_wise_quantization_precision {
      unit_type: UNIT_NODE
      func_name: "loop"
      unit_name: "then_mm"
      quantization_precision: PRECISION_FULL
    }
    unit_wise_quantization_precision {
      unit_type: UNIT_OP
      func_name: "Nope"
      unit_name: "MatMul"
      quantization_precision: PRECISION_FULL
    }
  )pb");
  CommandResult r =
      Quantctl({"quantize",
                "--model=" + SourcePath("tests/data/passes/control_flow.onnx"),
                "--output=" + tmp.File("q.onnx"), "--options=" + options});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r.err, HasSubstr("unit_wise_quantization_precision[0]"));
  EXPECT_THAT(r.err, HasSubstr("no node in the subgraphs of node 'loop' is "
                               "named 'then_mm'"));
  EXPECT_THAT(r.err, HasSubstr("unit_wise_quantization_precision[1]"));
  EXPECT_THAT(r.err, HasSubstr("'Nope' (func_name)"));
  ExpectServing();
}

}  // namespace
}  // namespace quantd::testing
