#include "core/passes/static_range_pass.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/graph/model_io.h"
#include "core/graph/validate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/shape_inference/implementation.h"
#include "tests/core/graph/test_models.h"
#include "tests/core/passes/static_range_test_util.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;
using testing::Init;
using testing::ModelBuilder;
using testing::NodeNamed;
using testing::NodesOf;
using testing::ProducerOf;
using testing::Values;
using testing::Wave;

// x[1,2,4,4] -> block1/conv (W1 [4,2,3,3], B1 [4]) -> block1/relu -> r1
//            -> block2/conv (W2 [3,4,3,3], B2 [3]) -> block2/relu -> y
ModelBuilder ConvReluConv(int64_t opset = 13) {
  ModelBuilder b(opset);
  b.Input("x", {1, 2, 4, 4})
      .Weight("W1", {4, 2, 3, 3}, 1)
      .Weight("B1", {4}, 2)
      .Weight("W2", {3, 4, 3, 3}, 3)
      .Weight("B2", {3}, 4)
      .Node("Conv", {"x", "W1", "B1"}, {"c1"}, "block1/conv")
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Node("Relu", {"c1"}, {"r1"}, "block1/relu")
      .Node("Conv", {"r1", "W2", "B2"}, {"c2"}, "block2/conv")
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Node("Relu", {"c2"}, {"y"}, "block2/relu")
      .Output("y", {1, 3, 4, 4});
  return b;
}

class StaticPassTest : public ::testing::Test {
 protected:
  StaticPassTest() { options_.min_num_elements = 0; }

  void SetRange(const std::string& name, float lo, float hi) {
    ranges_[name] = ActivationRange{lo, hi, 0, 0};
  }

  absl::StatusOr<StaticRangeStats> TryRun(onnx::ModelProto* m) {
    PassHooks hooks;
    hooks.on_report = [this](const quantd::v1::TensorReport& r) {
      reports_.push_back(r);
    };
    hooks.on_planned = [this](int64_t total) { planned_ = total; };
    hooks.on_progress = [this](int64_t done, int64_t total) {
      last_progress_ = done;
      EXPECT_EQ(total, planned_);
    };
    return RunStaticRangePass(options_, ranges_, hooks, m);
  }

  // Runs the pass and checks the output with the ONNX checker and our
  // structural checks (topological order included).
  StaticRangeStats Run(onnx::ModelProto* m) {
    reports_.clear();
    planned_ = -1;
    last_progress_ = 0;
    absl::StatusOr<StaticRangeStats> stats = TryRun(m);
    EXPECT_TRUE(stats.ok()) << stats.status();
    std::vector<std::string> validations;
    absl::Status valid = graph::ValidateModel(*m, "output", &validations);
    EXPECT_TRUE(valid.ok()) << valid;
    EXPECT_THAT(absl::StrJoin(validations, "\n"), HasSubstr("onnx.checker"));
    EXPECT_EQ(last_progress_, planned_);
    // What check_model's full_check adds: strict type and shape inference
    // (catches, e.g., a zero point whose type differs from the values').
    // Test outputs declared without dims are "any shape" here.
    onnx::ModelProto copy = *m;
    for (auto& o : *copy.mutable_graph()->mutable_output()) {
      auto* t = o.mutable_type()->mutable_tensor_type();
      if (t->shape().dim_size() == 0) t->clear_shape();
    }
    try {
      onnx::shape_inference::InferShapes(
          copy, onnx::OpSchemaRegistry::Instance(),
          onnx::ShapeInferenceOptions(/*check_type_val=*/true,
                                      /*strict_mode_val=*/1));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "strict shape inference: " << e.what();
    }
    return stats.ok() ? *stats : StaticRangeStats();
  }

  // The scale and zero point of the QuantizeLinear reading `tensor`.
  struct Point {
    float scale = 0;
    int zero_point = -1000;
    int32_t zp_type = 0;
  };
  Point QuantizeParams(const onnx::ModelProto& m, const std::string& tensor) {
    Point p;
    for (const auto* q : NodesOf(m.graph(), "QuantizeLinear")) {
      if (q->input(0) != tensor) continue;
      p.scale = Values<float>(Init(m.graph(), q->input(1))).at(0);
      const onnx::TensorProto* zp = Init(m.graph(), q->input(2));
      p.zp_type = zp->data_type();
      p.zero_point = zp->data_type() == onnx::TensorProto::UINT8
                         ? static_cast<uint8_t>(zp->raw_data()[0])
                         : static_cast<int8_t>(zp->raw_data()[0]);
    }
    return p;
  }

  int CountReading(const onnx::ModelProto& m, const std::string& op,
                   const std::string& tensor) {
    int n = 0;
    for (const auto* q : NodesOf(m.graph(), op)) n += q->input(0) == tensor;
    return n;
  }

  const quantd::v1::TensorReport* ReportFor(const std::string& tensor) {
    for (const auto& r : reports_) {
      if (r.tensor_name() == tensor) return &r;
    }
    return nullptr;
  }

  StaticRangeOptions options_;
  ActivationRanges ranges_;
  std::vector<quantd::v1::TensorReport> reports_;
  int64_t planned_ = -1;
  int64_t last_progress_ = -2;
};

TEST_F(StaticPassTest, ConvReluConvStructure) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_weights, 2);
  EXPECT_EQ(stats.quantized_activations, 2);
  EXPECT_EQ(stats.quantized_biases, 2);
  EXPECT_EQ(stats.quantized_nodes, 2);
  const onnx::GraphProto& g = m.graph();
  // x and r1 (conv1's output after its Relu, also conv2's input): one pair
  // each. y is a graph output nobody reads: no pair.
  auto qs = NodesOf(g, "QuantizeLinear");
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_EQ(CountReading(m, "QuantizeLinear", "x"), 1);
  EXPECT_EQ(CountReading(m, "QuantizeLinear", "r1"), 1);
  EXPECT_EQ(NodesOf(g, "DequantizeLinear").size(), 6u);  // 2 act, 2 W, 2 B
  EXPECT_EQ(NodeNamed(g, "block1/conv")->input(0), "x_dequantized");
  EXPECT_EQ(NodeNamed(g, "block2/conv")->input(0), "r1_dequantized");
  EXPECT_EQ(NodeNamed(g, "block1/relu")->input(0), "c1");  // Not quantized.
  EXPECT_EQ(ProducerOf(g, "W1")->op_type(), "DequantizeLinear");
  EXPECT_EQ(ProducerOf(g, "B2")->op_type(), "DequantizeLinear");
  EXPECT_EQ(Init(g, "W1"), nullptr);  // Float weights are gone.
  EXPECT_EQ(Init(g, "B1"), nullptr);
  // The pair on r1 follows its producer directly.
  const int relu = testing::IndexOf(g, NodeNamed(g, "block1/relu"));
  EXPECT_EQ(g.node(relu + 1).op_type(), "QuantizeLinear");
  EXPECT_EQ(g.node(relu + 2).op_type(), "DequantizeLinear");
  EXPECT_EQ(g.node(relu + 2).output(0), "r1_dequantized");
}

TEST_F(StaticPassTest, ScaleAndZeroPointFromRanges) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  Run(&m);
  // [-1, 3] on [0, 255]: scale 4/255, zero point -(-1)/scale = 63.75 -> 64.
  Point x = QuantizeParams(m, "x");
  EXPECT_FLOAT_EQ(x.scale, 4.0f / 255.0f);
  EXPECT_EQ(x.zero_point, 64);
  EXPECT_EQ(x.zp_type, onnx::TensorProto::UINT8);
  // [0, 6]: scale 6/255, zero point 0.
  Point r1 = QuantizeParams(m, "r1");
  EXPECT_FLOAT_EQ(r1.scale, 6.0f / 255.0f);
  EXPECT_EQ(r1.zero_point, 0);
  // The DequantizeLinear shares the QuantizeLinear's scale and zero point.
  const onnx::NodeProto* dq = ProducerOf(m.graph(), "x_dequantized");
  const onnx::NodeProto* q = ProducerOf(m.graph(), dq->input(0));
  EXPECT_EQ(q->op_type(), "QuantizeLinear");
  EXPECT_EQ(dq->input(1), q->input(1));
  EXPECT_EQ(dq->input(2), q->input(2));

  const quantd::v1::TensorReport* r = ReportFor("x");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->op_type(), "Conv");
  EXPECT_EQ(r->node_name(), "block1/conv");
  EXPECT_EQ(r->scheme().storage_type(), "UINT8");
  EXPECT_EQ(r->scheme().quant_min(), 0);
  EXPECT_EQ(r->scheme().quant_max(), 255);
  EXPECT_FALSE(r->scheme().symmetric());
  EXPECT_FLOAT_EQ(r->scale_min(), 4.0f / 255.0f);
  EXPECT_THAT(r->note(), HasSubstr("zero point 64"));
  EXPECT_EQ(r->num_elements(), 0);
}

TEST_F(StaticPassTest, BiasIsInt32WithInputTimesWeightScale) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  Run(&m);
  const onnx::GraphProto& g = m.graph();
  struct Case {
    std::string bias, weight;
    float s_in;
    int channels, seed, weight_seed;
  };
  for (const Case& c : {Case{"B1", "W1", 4.0f / 255.0f, 4, 2, 1},
                        Case{"B2", "W2", 6.0f / 255.0f, 3, 4, 3}}) {
    SCOPED_TRACE(c.bias);
    const onnx::NodeProto* dq = ProducerOf(g, c.bias);
    ASSERT_NE(dq, nullptr);
    EXPECT_EQ(dq->op_type(), "DequantizeLinear");
    EXPECT_EQ(testing::AxisAttr(*dq), 0);
    const onnx::TensorProto* q = Init(g, dq->input(0));
    ASSERT_EQ(q->data_type(), onnx::TensorProto::INT32);
    std::vector<int32_t> qv = Values<int32_t>(q);
    std::vector<float> bias_scale = Values<float>(Init(g, dq->input(1)));
    std::vector<int32_t> zp = Values<int32_t>(Init(g, dq->input(2)));
    ASSERT_EQ(qv.size(), static_cast<size_t>(c.channels));
    // Weight scales by hand: max |W[c]| / 127 (int8 narrow symmetric).
    const std::vector<float> w =
        Wave(c.channels * (c.weight == "W1" ? 18 : 36), c.weight_seed);
    const size_t per = w.size() / c.channels;
    const std::vector<float> b = Wave(c.channels, c.seed);
    for (int ch = 0; ch < c.channels; ++ch) {
      float m_abs = 0;
      for (size_t i = 0; i < per; ++i) {
        m_abs = std::max(m_abs, std::abs(w[ch * per + i]));
      }
      const float s_w = m_abs / 127.0f;
      EXPECT_NEAR(bias_scale[ch], c.s_in * s_w, 1e-6f * c.s_in * s_w);
      EXPECT_EQ(qv[ch],
                static_cast<int32_t>(std::nearbyint(b[ch] / (c.s_in * s_w))))
          << "channel " << ch;
      EXPECT_EQ(zp[ch], 0);
    }
    const quantd::v1::TensorReport* r = ReportFor(c.bias);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->scheme().storage_type(), "INT32");
    EXPECT_EQ(r->scheme().bits(), 32);
  }
}

// A BN-folded channel with near-zero weights and a real bias: at
// s_in * s_w the bias would be ~1e13 steps, far past int32. The channel's
// weight scale is raised until it fits (as ONNX Runtime's quantizer does);
// the bias then dequantizes to itself and the weights stay near zero.
TEST_F(StaticPassTest, BiasThatOverflowsInt32WidensItsWeightChannel) {
  ModelBuilder b(13);
  std::vector<float> w = Wave(2 * 2 * 3 * 3, 5);
  for (size_t i = 18; i < w.size(); ++i) w[i] *= 1e-9f;  // Channel 1.
  b.Input("x", {1, 2, 4, 4})
      .Initializer("W", {2, 2, 3, 3}, w)
      .Initializer("B", {2}, {0.25f, 1.5f})
      .Node("Conv", {"x", "W", "B"}, {"y"}, "conv")
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Output("y", {1, 2, 4, 4});
  onnx::ModelProto m = b.Build();
  SetRange("x", -1.0f, 3.0f);
  const float s_in = 4.0f / 255.0f;
  Run(&m);
  const onnx::GraphProto& g = m.graph();
  const onnx::NodeProto* bias_dq = ProducerOf(g, "B");
  ASSERT_NE(bias_dq, nullptr);
  const std::vector<int32_t> qb = Values<int32_t>(Init(g, bias_dq->input(0)));
  const std::vector<float> sb = Values<float>(Init(g, bias_dq->input(1)));
  ASSERT_EQ(qb.size(), 2u);
  EXPECT_LT(std::abs(qb[1]), std::numeric_limits<int32_t>::max());
  EXPECT_NEAR(qb[0] * sb[0], 0.25f, sb[0]);
  EXPECT_NEAR(qb[1] * sb[1], 1.5f, 1e-6f);

  const onnx::NodeProto* w_dq = ProducerOf(g, "W");
  ASSERT_NE(w_dq, nullptr);
  const std::vector<int8_t> qw = Values<int8_t>(Init(g, w_dq->input(0)));
  const std::vector<float> sw = Values<float>(Init(g, w_dq->input(1)));
  ASSERT_EQ(sw.size(), 2u);
  // The bias scale is still s_in * s_w, with the raised s_w.
  EXPECT_NEAR(sb[1], s_in * sw[1], 1e-6f * sb[1]);
  EXPECT_GE(static_cast<double>(s_in) * sw[1] * 2147483647.0, 1.5);
  for (int i = 0; i < 18; ++i) {  // Channel 0 untouched: max |w| at 127.
    EXPECT_NEAR(qw[i] * sw[0], w[i], sw[0]) << i;
  }
  for (int i = 18; i < 36; ++i) {  // Channel 1: near zero, and stays so.
    EXPECT_NEAR(qw[i] * sw[1], w[i], sw[1]) << i;
    EXPECT_LE(std::abs(qw[i] * sw[1]), 1e-8f) << i;
  }
  const quantd::v1::TensorReport* r = ReportFor("B");
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->note(), HasSubstr("weight scale of 1 channel was raised"));
  EXPECT_THAT(r->note(), ::testing::Not(HasSubstr("saturated")));
}

TEST_F(StaticPassTest, RunningTwiceInsertsNothing) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  Run(&m);
  const std::string once = m.SerializeAsString();
  StaticRangeStats again = Run(&m);
  EXPECT_EQ(again.quantized_activations, 0);
  EXPECT_EQ(again.quantized_weights, 0);
  EXPECT_EQ(again.quantized_biases, 0);
  EXPECT_EQ(m.SerializeAsString(), once);
  EXPECT_EQ(NodesOf(m.graph(), "QuantizeLinear").size(), 2u);
}

TEST_F(StaticPassTest, OneQuantPointForQuantizableAndOtherConsumers) {
  ModelBuilder b(13);
  b.Input("in", {2, 8}).Weight("W", {8, 4});
  b.Node("Relu", {"in"}, {"a"}, "relu");
  b.Node("MatMul", {"a", "W"}, {"y1"}, "mm");
  b.Node("Neg", {"a"}, {"y2"}, "neg");
  b.Output("y1").Output("y2");
  onnx::ModelProto m = b.Build();
  SetRange("a", 0.0f, 2.0f);
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_activations, 1);
  EXPECT_EQ(NodesOf(m.graph(), "QuantizeLinear").size(), 1u);
  // _InsertQuantOp: every consumer reads the one dequantized tensor.
  EXPECT_EQ(NodeNamed(m.graph(), "mm")->input(0), "a_dequantized");
  EXPECT_EQ(NodeNamed(m.graph(), "neg")->input(0), "a_dequantized");
  // y1 is a graph output nobody reads: it stays float.
  EXPECT_EQ(CountReading(m, "QuantizeLinear", "y1"), 0);
}

TEST_F(StaticPassTest, MatMulOfTwoActivationsQuantizesBoth) {
  ModelBuilder b(13);
  b.Input("a", {2, 3}).Input("b", {3, 4});
  b.Node("MatMul", {"a", "b"}, {"y"}, "mm");
  b.Node("Sigmoid", {"y"}, {"z"}, "sig");
  b.Output("z");
  onnx::ModelProto m = b.Build();
  SetRange("a", -1.0f, 1.0f);
  SetRange("b", -1.0f, 1.55f);
  SetRange("y", -5.0f, 5.0f);
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_activations, 3);  // a, b, and the output y.
  EXPECT_EQ(stats.quantized_weights, 0);
  const onnx::NodeProto* mm = NodeNamed(m.graph(), "mm");
  EXPECT_EQ(mm->input(0), "a_dequantized");
  EXPECT_EQ(mm->input(1), "b_dequantized");
  // No Relu/Clip after it: the MatMul output itself is quantized.
  EXPECT_EQ(NodeNamed(m.graph(), "sig")->input(0), "y_dequantized");
  // [-1, 1.55]: scale 2.55/255 = 0.01, zero point 1/0.01 = 100.
  EXPECT_EQ(QuantizeParams(m, "b").zero_point, 100);
  EXPECT_FLOAT_EQ(QuantizeParams(m, "b").scale, 0.01f);
}

// q k^T -> Softmax -> p v: the scores keep no point (a Softmax wants
// precision relative to each row's maximum, and ONNX Runtime would fuse
// DequantizeLinear -> Softmax -> QuantizeLinear into its QLinearSoftmax),
// while the probabilities the second MatMul reads keep theirs. Scores that
// something else reads too keep their point.
TEST_F(StaticPassTest, ScoresOnlyASoftmaxReadsKeepNoPoint) {
  ModelBuilder b(13);
  b.Input("q", {2, 3}).Input("k", {3, 2}).Input("v", {2, 4});
  b.Node("MatMul", {"q", "k"}, {"s"}, "scores");
  b.Node("Softmax", {"s"}, {"p"}, "softmax").Attr("axis", int64_t{-1});
  b.Node("MatMul", {"p", "v"}, {"y"}, "context");
  b.Node("MatMul", {"q", "k"}, {"s2"}, "scores2");
  b.Node("Softmax", {"s2"}, {"p2"}, "softmax2").Attr("axis", int64_t{-1});
  b.Node("Neg", {"s2"}, {"n2"}, "neg");
  b.Output("y").Output("p2").Output("n2");
  onnx::ModelProto m = b.Build();
  SetRange("q", -1.0f, 1.0f);
  SetRange("k", -1.0f, 1.0f);
  SetRange("v", -1.0f, 1.0f);
  SetRange("s", -3.0f, 3.0f);
  SetRange("s2", -3.0f, 3.0f);
  SetRange("p", 0.0f, 0.6f);
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(NodeNamed(m.graph(), "softmax")->input(0), "s");
  EXPECT_EQ(CountReading(m, "QuantizeLinear", "s"), 0);
  EXPECT_EQ(NodeNamed(m.graph(), "context")->input(0), "p_dequantized");
  EXPECT_FLOAT_EQ(QuantizeParams(m, "p").scale, 0.6f / 255.0f);
  EXPECT_EQ(NodeNamed(m.graph(), "softmax2")->input(0), "s2_dequantized");
  // q, k, v, p and s2 (y is a graph output nothing reads).
  EXPECT_EQ(stats.quantized_activations, 5);
}

TEST_F(StaticPassTest, OutputOfClipIsQuantizedButNotOfASharedOutput) {
  ModelBuilder b(13);
  b.Input("x", {2, 8}).Weight("W", {8, 4}, 1).Weight("W2", {8, 4}, 2);
  b.Initializer("lo", {}, {0.0f}).Initializer("hi", {}, {6.0f});
  b.Node("MatMul", {"x", "W"}, {"m1"}, "mm1");
  b.Node("Clip", {"m1", "lo", "hi"}, {"c1"}, "clip");  // Relu6.
  b.Node("Neg", {"c1"}, {"n1"}, "neg");
  b.Node("MatMul", {"x", "W2"}, {"m2"}, "mm2");
  b.Node("Relu", {"m2"}, {"r2"}, "relu2");  // m2 has two readers.
  b.Node("Abs", {"m2"}, {"a2"}, "abs2");
  b.Output("n1").Output("r2").Output("a2");
  onnx::ModelProto m = b.Build();
  SetRange("x", -1.0f, 1.0f);
  SetRange("c1", 0.0f, 6.0f);
  SetRange("m2", -4.0f, 4.0f);
  SetRange("m1", -3.0f, 5.0f);
  StaticRangeStats stats = Run(&m);
  // Only a float Neg reads the Clip: the point still goes after it, where
  // the range is the clamped one (finer than the MatMul output's).
  EXPECT_EQ(stats.quantized_activations, 3);
  EXPECT_EQ(NodeNamed(m.graph(), "clip")->input(0), "m1");
  EXPECT_EQ(NodeNamed(m.graph(), "neg")->input(0), "c1_dequantized");
  EXPECT_FLOAT_EQ(QuantizeParams(m, "c1").scale, 6.0f / 255.0f);
  // m2 has two readers: its own point, before both.
  EXPECT_EQ(NodeNamed(m.graph(), "relu2")->input(0), "m2_dequantized");
  EXPECT_EQ(NodeNamed(m.graph(), "abs2")->input(0), "m2_dequantized");
}

// ONNX Runtime 1.30 aborts loading a point on a Relu that only Transposes
// feeding If bodies read: there the quantized op's own output gets it.
TEST_F(StaticPassTest, ReluReadOnlyInsideAnIfBodyKeepsThePointBeforeIt) {
  ModelBuilder b(13);
  b.Input("x", {2, 8}).Input("cond", {}, onnx::TensorProto::BOOL);
  b.Weight("W", {8, 4}, 1);
  b.Node("MatMul", {"x", "W"}, {"m"}, "mm");
  b.Node("Relu", {"m"}, {"r"}, "relu");
  b.Node("Transpose", {"r"}, {"t"}, "transpose");
  b.Node("If", {"cond"}, {"y"}, "if");
  b.Output("y");
  onnx::ModelProto m = b.Build();
  onnx::NodeProto* iff = m.mutable_graph()->mutable_node(3);
  for (const char* branch : {"then_branch", "else_branch"}) {
    onnx::AttributeProto* a = iff->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* body = a->mutable_g();
    body->set_name(branch);
    onnx::NodeProto* id = body->add_node();
    id->set_op_type("Identity");
    id->set_name(std::string(branch) + "/id");
    id->add_input("t");  // The outer Transpose's output.
    id->add_output(std::string(branch) + "_y");
    body->add_output()->set_name(std::string(branch) + "_y");
  }
  SetRange("x", -1.0f, 1.0f);
  SetRange("m", -3.0f, 5.0f);
  SetRange("r", 0.0f, 5.0f);
  Run(&m);
  EXPECT_EQ(NodeNamed(m.graph(), "relu")->input(0), "m_dequantized");
  EXPECT_EQ(NodeNamed(m.graph(), "transpose")->input(0), "r");
}

TEST_F(StaticPassTest, GemmBiasFollowsTransB) {
  ModelBuilder b(13);
  b.Input("x", {2, 6}).Weight("B", {5, 6}, 1).Weight("C", {5}, 2);
  b.Node("Gemm", {"x", "B", "C"}, {"y"}, "gemm").Attr("transB", int64_t{1});
  b.Output("y", {2, 5});
  onnx::ModelProto m = b.Build();
  SetRange("x", 0.0f, 1.0f);
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_biases, 1);
  const onnx::NodeProto* dq = ProducerOf(m.graph(), "C");
  ASSERT_NE(dq, nullptr);
  std::vector<int32_t> q = Values<int32_t>(Init(m.graph(), dq->input(0)));
  ASSERT_EQ(q.size(), 5u);
  const std::vector<float> w = Wave(30, 1), c = Wave(5, 2);
  const float s_in = 1.0f / 255.0f;
  for (int n = 0; n < 5; ++n) {  // transB: channel n is row n of B.
    float m_abs = 0;
    for (int k = 0; k < 6; ++k) m_abs = std::max(m_abs, std::abs(w[n * 6 + k]));
    EXPECT_EQ(q[n], static_cast<int32_t>(
                        std::nearbyint(c[n] / (s_in * (m_abs / 127.0f)))));
  }
}

TEST_F(StaticPassTest, SharedWeightGetsOneDequantizeLinear) {
  ModelBuilder b(13);
  b.Input("x", {2, 8}).Weight("W", {8, 8});
  b.Node("MatMul", {"x", "W"}, {"h"}, "mm1");
  b.Node("MatMul", {"h", "W"}, {"y"}, "mm2");
  b.Output("y");
  onnx::ModelProto m = b.Build();
  SetRange("x", -1.0f, 1.0f);
  SetRange("h", -3.0f, 3.0f);
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_weights, 1);
  EXPECT_EQ(stats.quantized_activations, 2);
  int w_dq = 0;
  for (const auto* n : NodesOf(m.graph(), "DequantizeLinear")) {
    w_dq += n->output(0) == "W";
  }
  EXPECT_EQ(w_dq, 1);
  EXPECT_EQ(NodeNamed(m.graph(), "mm2")->input(0), "h_dequantized");
}

TEST_F(StaticPassTest, MissingRangeIsFailedPreconditionNamingIt) {
  onnx::ModelProto m = ConvReluConv().Build();
  const std::string before = m.SerializeAsString();
  SetRange("x", -1.0f, 3.0f);
  absl::StatusOr<StaticRangeStats> stats = TryRun(&m);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stats.status().message(), HasSubstr("'r1'"));
  EXPECT_THAT(stats.status().message(), ::testing::Not(HasSubstr("'x'")));
  EXPECT_EQ(m.SerializeAsString(), before);
}

TEST_F(StaticPassTest, UnboundedRangeLeavesTheTensorFloatAndSaysSo) {
  // r1 held a mask (TensorRange.unbounded): conv2 reads it in float while
  // the other points and every weight are quantized as usual.
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -1.0f, 3.0f);
  ActivationRange mask;
  mask.unbounded = true;
  ranges_["r1"] = mask;
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_activations, 1);
  EXPECT_EQ(CountReading(m, "QuantizeLinear", "x"), 1);
  EXPECT_EQ(CountReading(m, "QuantizeLinear", "r1"), 0);
  EXPECT_EQ(NodeNamed(m.graph(), "block2/conv")->input(0), "r1");
  EXPECT_EQ(stats.quantized_weights, 2);
  EXPECT_THAT(stats.unbounded, ::testing::ElementsAre("r1"));
  EXPECT_THAT(stats.unbounded_note,
              ::testing::AllOf(HasSubstr("1 tensor(s) held an infinity"),
                               HasSubstr("stay float"), HasSubstr("'r1'")));
}

TEST_F(StaticPassTest, UnknownRangeNamesAreInvalidArgumentListingAll) {
  onnx::ModelProto m = ConvReluConv().Build();
  const std::string before = m.SerializeAsString();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  SetRange("nope", 0.0f, 1.0f);
  SetRange("also_missing", 0.0f, 1.0f);
  absl::StatusOr<StaticRangeStats> stats = TryRun(&m);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stats.status().message(), HasSubstr("'also_missing', 'nope'"));
  EXPECT_EQ(m.SerializeAsString(), before);
}

TEST_F(StaticPassTest, ProducerScopeUsesNodeNamesAndInputNames) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("r1", 0.0f, 6.0f);  // x needs no range: it is out of scope.
  options_.activations.producer_scope = "block1/";
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_activations, 1);
  EXPECT_EQ(CountReading(m, "QuantizeLinear", "r1"), 1);
  EXPECT_EQ(NodeNamed(m.graph(), "block1/conv")->input(0), "x");
  bool skipped_x = false;
  for (const auto& s : stats.skipped) {
    if (s.tensor_name() == "x") {
      skipped_x = true;
      EXPECT_EQ(s.reason(), quantd::v1::SKIP_OUT_OF_SCOPE);
      EXPECT_THAT(s.detail(), HasSubstr("producer 'x'"));
    }
  }
  EXPECT_TRUE(skipped_x);
  // B1's input has no point, so B1 stays float (and is reported).
  EXPECT_NE(Init(m.graph(), "B1"), nullptr);
  EXPECT_EQ(stats.quantized_biases, 1);
}

TEST_F(StaticPassTest, ConsumerScopeSkipsWhenAnyConsumerIsOutside) {
  ModelBuilder b(13);
  b.Input("in", {2, 8}).Weight("W", {8, 4});
  b.Node("Relu", {"in"}, {"a"}, "pre/relu");
  b.Node("MatMul", {"a", "W"}, {"y1"}, "head/mm");
  b.Node("Neg", {"a"}, {"y2"}, "other/neg");
  b.Output("y1").Output("y2");
  onnx::ModelProto m = b.Build();
  options_.activations.consumer_scope = "head/";
  StaticRangeStats stats = Run(&m);  // No range needed for a.
  EXPECT_EQ(stats.quantized_activations, 0);
  EXPECT_EQ(NodeNamed(m.graph(), "head/mm")->input(0), "a");
  ASSERT_FALSE(stats.skipped.empty());
  EXPECT_THAT(stats.skipped.back().detail(), HasSubstr("other/neg"));
}

TEST_F(StaticPassTest, FourBitActivationsUseGrid0To15WithAClip) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", 0.0f, 6.0f);
  SetRange("r1", 0.0f, 6.0f);
  options_.activations.spec.bits = 4;
  Run(&m);
  Point x = QuantizeParams(m, "x_clipped");
  EXPECT_FLOAT_EQ(x.scale, 6.0f / 15.0f);
  EXPECT_EQ(x.zero_point, 0);
  const onnx::NodeProto* clip = ProducerOf(m.graph(), "x_clipped");
  ASSERT_NE(clip, nullptr);
  EXPECT_EQ(clip->op_type(), "Clip");
  EXPECT_FLOAT_EQ(Values<float>(Init(m.graph(), clip->input(1))).at(0), 0.0f);
  EXPECT_FLOAT_EQ(Values<float>(Init(m.graph(), clip->input(2))).at(0),
                  15 * (6.0f / 15.0f));
  const quantd::v1::TensorReport* r = ReportFor("x");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->scheme().quant_min(), 0);
  EXPECT_EQ(r->scheme().quant_max(), 15);
  EXPECT_EQ(r->scheme().bits(), 4);
}

TEST_F(StaticPassTest, SymmetricActivationsAreInt8WithZeroPoint0) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -2.0f, 4.0f);
  SetRange("r1", 0.0f, 6.0f);
  options_.activations.spec.symmetric = true;
  options_.activations.spec.is_signed = true;
  Run(&m);
  Point x = QuantizeParams(m, "x");
  EXPECT_EQ(x.zp_type, onnx::TensorProto::INT8);
  EXPECT_EQ(x.zero_point, 0);
  EXPECT_FLOAT_EQ(x.scale, 4.0f / 127.5f);  // Full int8 grid half-width.
  EXPECT_EQ(NodesOf(m.graph(), "Clip").size(), 0u);  // Grid = int8 range.
}

TEST_F(StaticPassTest, PerChannelRangesAreQuantizedPerTensor) {
  onnx::ModelProto m = ConvReluConv().Build();
  ranges_["x"] = ActivationRange{-1.0f, 3.0f, 1, 2};
  SetRange("r1", 0.0f, 6.0f);
  Run(&m);
  const quantd::v1::TensorReport* r = ReportFor("x");
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->scheme().per_channel());
  EXPECT_THAT(r->note(), HasSubstr("per tensor"));
  EXPECT_EQ(Values<float>(Init(m.graph(), "x_scale")).size(), 1u);
}

// A node whose weight stays float for its size computes in float: no point
// on its input (ONNX Runtime would quantize the weight of a Conv reading a
// DequantizeLinear itself, per tensor) and none proposed for its output; the
// quantized conv2 still gets its input point.
TEST_F(StaticPassTest, SmallWeightNodesComputeInFloat) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  options_.min_num_elements = 100;  // W1 has 72 elements, W2 108.
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_weights, 1);
  EXPECT_EQ(stats.quantized_activations, 1);  // r1 only.
  EXPECT_EQ(stats.quantized_biases, 1);       // B1's weight stays float.
  EXPECT_NE(Init(m.graph(), "W1"), nullptr);
  EXPECT_NE(Init(m.graph(), "B1"), nullptr);
  bool b1 = false;
  for (const auto& s : stats.skipped) b1 |= s.tensor_name() == "B1";
  EXPECT_TRUE(b1);
  for (const auto& n : m.graph().node()) {
    if (n.name() == "block1/conv") {
      EXPECT_EQ(n.input(0), "x");
    }
    if (n.op_type() == "QuantizeLinear") {
      EXPECT_EQ(n.input(0), "r1");
    }
  }
}

TEST_F(StaticPassTest, Opset11IsUpgradedTo13) {
  onnx::ModelProto m = ConvReluConv(11).Build();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  StaticRangeStats stats = Run(&m);
  EXPECT_EQ(graph::DefaultOpset(m), 13);
  EXPECT_FALSE(stats.opset_note.empty());
  EXPECT_EQ(stats.quantized_activations, 2);
}

TEST_F(StaticPassTest, ReportsAndProgressCoverEveryQuantizedTensor) {
  onnx::ModelProto m = ConvReluConv().Build();
  SetRange("x", -1.0f, 3.0f);
  SetRange("r1", 0.0f, 6.0f);
  Run(&m);
  EXPECT_EQ(planned_, 6);
  ASSERT_EQ(reports_.size(), 6u);
  std::vector<std::string> names;
  for (const auto& r : reports_) names.push_back(r.tensor_name());
  EXPECT_THAT(names, ::testing::ElementsAre("W1", "W2", "x", "r1", "B1", "B2"));
}

TEST_F(StaticPassTest, DigitsModelWithHandRanges) {
  std::ifstream in(
      std::string(QUANTD_SOURCE_DIR) + "/examples/digits/model.onnx",
      std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream bytes;
  bytes << in.rdbuf();
  absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(bytes.str());
  ASSERT_TRUE(m.ok()) << m.status();
  for (const auto& v : m->graph().input()) SetRange(v.name(), 0.0f, 1.0f);
  for (const auto& n : m->graph().node()) {
    for (const auto& o : n.output()) SetRange(o, 0.0f, 6.0f);
  }
  StaticRangeStats stats = Run(&*m);
  EXPECT_EQ(stats.quantized_weights, 4);
  EXPECT_EQ(stats.quantized_biases, 4);
  // input, both conv Relus, Flatten (Gemm input), the first Gemm's Relu;
  // the logits are a graph output nobody reads.
  EXPECT_EQ(stats.quantized_activations, 5);
  EXPECT_EQ(stats.quantized_nodes, 4);
  const onnx::GraphProto& g = m->graph();
  int quantizable = 0;
  for (const auto& n : g.node()) {
    if (n.op_type() != "Conv" && n.op_type() != "Gemm") continue;
    ++quantizable;
    for (int i = 0; i < 3; ++i) {
      const onnx::NodeProto* p = ProducerOf(g, n.input(i));
      ASSERT_NE(p, nullptr) << n.name() << " input " << i;
      EXPECT_EQ(p->op_type(), "DequantizeLinear") << n.name() << " input " << i;
    }
  }
  EXPECT_EQ(quantizable, 4);
  // Exactly one QuantizeLinear per quantized tensor.
  std::vector<std::string> q_inputs;
  for (const auto* q : NodesOf(g, "QuantizeLinear")) {
    q_inputs.push_back(q->input(0));
  }
  std::sort(q_inputs.begin(), q_inputs.end());
  EXPECT_EQ(std::unique(q_inputs.begin(), q_inputs.end()), q_inputs.end());
  EXPECT_EQ(q_inputs.size(), 5u);
  // Serializes and parses back.
  absl::StatusOr<std::string> out = graph::SerializeModel(*m);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(graph::ParseModel(*out).ok());
}

}  // namespace
}  // namespace quantd::passes
