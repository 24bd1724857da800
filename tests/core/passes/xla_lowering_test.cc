// DYNAMIC_RANGE with op_set XLA: structure of the integer lowering
// (passes/xla_lowering.h), checked by the ONNX checker and our own checks.
#include "core/passes/xla_lowering.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/tensor_util.h"
#include "core/graph/validate.h"
#include "core/passes/dynamic_range_options.h"
#include "core/passes/dynamic_range_pass.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::passes {
namespace {

namespace tfq = tensorflow::quantization;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ModelBuilder;
using testing::Wave;

std::vector<const onnx::NodeProto*> NodesOf(const onnx::ModelProto& m,
                                            const std::string& op) {
  std::vector<const onnx::NodeProto*> out;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == op) out.push_back(&n);
  }
  return out;
}

const onnx::NodeProto* Producer(const onnx::ModelProto& m,
                                const std::string& tensor) {
  for (const auto& n : m.graph().node()) {
    for (const auto& o : n.output()) {
      if (o == tensor) return &n;
    }
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

std::vector<float> Floats(const onnx::TensorProto& t) {
  absl::StatusOr<std::vector<float>> v = graph::ReadFloatTensor(t);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

class XlaLoweringTest : public ::testing::Test {
 protected:
  XlaLoweringTest() {
    options_.min_num_elements = 0;
    options_.op_set = tfq::XLA;
  }

  absl::StatusOr<PassStats> RunPass(onnx::ModelProto* m) {
    return RunDynamicRangePass(options_, PassHooks(), m);
  }

  // Runs the pass and checks the result passes the ONNX checker (libonnx
  // 1.12) and our structural checks.
  PassStats Run(onnx::ModelProto* m) {
    absl::StatusOr<PassStats> stats = RunPass(m);
    EXPECT_TRUE(stats.ok()) << stats.status();
    absl::Status valid = graph::ValidateModel(*m, "output", nullptr);
    EXPECT_TRUE(valid.ok()) << valid;
    return stats.ok() ? *stats : PassStats();
  }

  // The chain Mul(Cast(<op>(...)), scale) ending (maybe through an Add) at
  // `output`; checks the rescale is Mul(DynamicQuantizeLinear's x_scale,
  // the weight's scale initializer) and returns the integer op.
  const onnx::NodeProto* IntegerOpFor(const onnx::ModelProto& m,
                                      const std::string& output,
                                      const std::string& op, bool has_bias) {
    const onnx::NodeProto* last = Producer(m, output);
    EXPECT_NE(last, nullptr);
    if (last == nullptr) return nullptr;
    const onnx::NodeProto* mul = last;
    if (has_bias) {
      EXPECT_EQ(last->op_type(), "Add");
      mul = Producer(m, last->input(0));
    }
    EXPECT_EQ(mul->op_type(), "Mul");
    const onnx::NodeProto* cast = Producer(m, mul->input(0));
    EXPECT_EQ(cast->op_type(), "Cast");
    EXPECT_EQ(cast->attribute(0).name(), "to");
    EXPECT_EQ(cast->attribute(0).i(), onnx::TensorProto::FLOAT);
    const onnx::NodeProto* integer = Producer(m, cast->input(0));
    EXPECT_EQ(integer->op_type(), op);
    // Rescale = x_scale * w_scale, by construction.
    const onnx::NodeProto* scale = Producer(m, mul->input(1));
    EXPECT_EQ(scale->op_type(), "Mul");
    const onnx::NodeProto* dql = Producer(m, integer->input(0));
    EXPECT_EQ(dql->op_type(), "DynamicQuantizeLinear");
    EXPECT_EQ(scale->input(0), dql->output(1));
    EXPECT_EQ(integer->input(2), dql->output(2));
    EXPECT_NE(Init(m, scale->input(1)), nullptr);
    return integer;
  }

  WeightPassOptions options_;
};

TEST_F(XlaLoweringTest, MatMulBecomesMatMulIntegerWithRescale) {
  onnx::ModelProto m = testing::MatMulModel(64, 32).Build();
  const std::vector<float> w = Wave(64 * 32);
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(stats.quantized_nodes, 1);
  EXPECT_TRUE(NodesOf(m, "MatMul").empty());
  EXPECT_TRUE(NodesOf(m, "DequantizeLinear").empty());
  EXPECT_EQ(NodesOf(m, "DynamicQuantizeLinear").size(), 1u);
  EXPECT_EQ(Init(m, "W"), nullptr);  // The float weight is gone.

  const onnx::NodeProto* op = IntegerOpFor(m, "y", "MatMulInteger", false);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->name(), "mm");
  const onnx::TensorProto* q = Init(m, op->input(1));
  const onnx::TensorProto* zp = Init(m, op->input(3));
  ASSERT_NE(q, nullptr);
  ASSERT_NE(zp, nullptr);
  EXPECT_EQ(q->data_type(), onnx::TensorProto::INT8);
  EXPECT_THAT(graph::Dims(*q), ElementsAre(64, 32));
  EXPECT_EQ(zp->data_type(), onnx::TensorProto::INT8);
  EXPECT_EQ(zp->dims_size(), 0);
  EXPECT_EQ(zp->raw_data(), std::string(1, '\0'));
  // Per-channel scale on the last axis, [N]; q * scale is the weight.
  const onnx::NodeProto* scale_mul = Producer(m, Producer(m, "y")->input(1));
  const std::vector<float> scale = Floats(*Init(m, scale_mul->input(1)));
  ASSERT_EQ(scale.size(), 32u);
  for (int64_t i = 0; i < 64 * 32; ++i) {
    const float v = static_cast<int8_t>(q->raw_data()[i]) * scale[i % 32];
    ASSERT_NEAR(v, w[i], scale[i % 32] / 2 * 1.001f) << i;
  }
}

TEST_F(XlaLoweringTest, ConvBecomesConvIntegerWithUint8WeightsAndBias) {
  onnx::ModelProto m = testing::ConvModel(8, 16).Build();
  const std::vector<float> w = Wave(16 * 8 * 9);
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_TRUE(NodesOf(m, "Conv").empty());
  EXPECT_TRUE(NodesOf(m, "DequantizeLinear").empty());
  EXPECT_EQ(NodesOf(m, "Relu").size(), 1u);

  const onnx::NodeProto* op = IntegerOpFor(m, "conv", "ConvInteger", true);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->name(), "conv0");
  ASSERT_EQ(op->attribute_size(), 1);
  EXPECT_EQ(op->attribute(0).name(), "pads");
  const onnx::TensorProto* q = Init(m, op->input(1));
  const onnx::TensorProto* zp = Init(m, op->input(3));
  EXPECT_EQ(q->data_type(), onnx::TensorProto::UINT8);
  EXPECT_THAT(graph::Dims(*q), ElementsAre(16, 8, 3, 3));
  EXPECT_EQ(zp->data_type(), onnx::TensorProto::UINT8);
  EXPECT_EQ(zp->dims_size(), 0);
  EXPECT_EQ(static_cast<uint8_t>(zp->raw_data()[0]), 128);
  // Scale broadcast on the output's channel axis: [M, 1, 1].
  const onnx::NodeProto* add = Producer(m, "conv");
  const onnx::NodeProto* scale_mul =
      Producer(m, Producer(m, add->input(0))->input(1));
  const onnx::TensorProto* scale_t = Init(m, scale_mul->input(1));
  EXPECT_THAT(graph::Dims(*scale_t), ElementsAre(16, 1, 1));
  const std::vector<float> scale = Floats(*scale_t);
  for (int64_t i = 0; i < 16 * 72; ++i) {
    const int c = static_cast<int>(i / 72);
    const int u = static_cast<uint8_t>(q->raw_data()[i]);
    ASSERT_GE(u, 1);  // Symmetric narrow int8 + 128.
    ASSERT_NEAR((u - 128) * scale[c], w[i], scale[c] / 2 * 1.001f) << i;
  }
  // The float bias, reshaped to [M, 1, 1], added after the rescale.
  const onnx::NodeProto* reshape = Producer(m, add->input(1));
  ASSERT_EQ(reshape->op_type(), "Reshape");
  EXPECT_EQ(reshape->input(0), "bias");
  EXPECT_EQ(Init(m, "bias")->data_type(), onnx::TensorProto::FLOAT);
}

TEST_F(XlaLoweringTest, GemmTransBIsStoredTransposedAndCIsAdded) {
  ModelBuilder b;
  b.Input("x", {2, 64})
      .Weight("W", {32, 64})
      .Weight("C", {32}, 5)
      .Node("Gemm", {"x", "W", "C"}, {"y"}, "fc")
      .Attr("transB", int64_t{1})
      .Output("y", {2, 32});
  onnx::ModelProto m = b.Build();
  const std::vector<float> w = Wave(32 * 64);
  Run(&m);
  EXPECT_TRUE(NodesOf(m, "Gemm").empty());
  const onnx::NodeProto* op = IntegerOpFor(m, "y", "MatMulInteger", true);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->attribute_size(), 0);
  const onnx::TensorProto* q = Init(m, op->input(1));
  EXPECT_THAT(graph::Dims(*q), ElementsAre(64, 32));
  const onnx::NodeProto* add = Producer(m, "y");
  EXPECT_EQ(add->input(1), "C");
  const std::vector<float> scale = Floats(
      *Init(m, Producer(m, Producer(m, add->input(0))->input(1))->input(1)));
  ASSERT_EQ(scale.size(), 32u);
  for (int64_t n = 0; n < 32; ++n) {
    for (int64_t k = 0; k < 64; ++k) {
      const float v = static_cast<int8_t>(q->raw_data()[k * 32 + n]) * scale[n];
      ASSERT_NEAR(v, w[n * 64 + k], scale[n] / 2 * 1.001f) << n << "," << k;
    }
  }
}

TEST_F(XlaLoweringTest, ConstantWeightAndSharedActivation) {
  ModelBuilder b;
  b.Input("x", {2, 64})
      .ConstantWeight("W1", {64, 32}, 2)
      .Weight("W2", {64, 16}, 3)
      .Node("MatMul", {"x", "W1"}, {"y1"}, "mm1")
      .Node("MatMul", {"x", "W2"}, {"y2"}, "mm2")
      .Output("y1", {2, 32})
      .Output("y2", {2, 16});
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 2);
  EXPECT_EQ(stats.quantized_nodes, 2);
  EXPECT_TRUE(NodesOf(m, "Constant").empty());
  EXPECT_EQ(NodesOf(m, "DynamicQuantizeLinear").size(), 1u);
  EXPECT_EQ(NodesOf(m, "MatMulInteger").size(), 2u);
}

TEST_F(XlaLoweringTest, AsymmetricPerChannelMatMulHasZeroPointPerColumn) {
  options_.weights.spec.symmetric = false;
  onnx::ModelProto m = testing::MatMulModel(64, 32).Build();
  Run(&m);
  const onnx::NodeProto* op = IntegerOpFor(m, "y", "MatMulInteger", false);
  ASSERT_NE(op, nullptr);
  EXPECT_THAT(graph::Dims(*Init(m, op->input(3))), ElementsAre(32));
}

TEST_F(XlaLoweringTest, AsymmetricPerChannelConvIsUnimplemented) {
  options_.weights.spec.symmetric = false;
  onnx::ModelProto m = testing::ConvModel().Build();
  absl::StatusOr<PassStats> s = RunPass(&m);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.status().message(), HasSubstr("Conv 'conv0'"));
  // Per tensor it is fine: one zero point.
  options_.weights.per_channel = false;
  m = testing::ConvModel().Build();
  Run(&m);
  EXPECT_EQ(NodesOf(m, "ConvInteger").size(), 1u);
}

TEST_F(XlaLoweringTest, OtherGemmsAreUnimplementedByName) {
  for (const char* attr : {"alpha", "beta", "transA"}) {
    ModelBuilder b;
    b.Input("x", {64, 2})
        .Weight("W", {64, 32})
        .Weight("C", {32}, 5)
        .Node("Gemm", {"x", "W", "C"}, {"y"}, "fc7");
    if (std::string(attr) == "transA") {
      b.Attr("transA", int64_t{1});
    } else {
      onnx::NodeProto* n = b.model().mutable_graph()->mutable_node(0);
      auto* a = n->add_attribute();
      a->set_name(attr);
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(0.5f);
    }
    b.Output("y", {2, 32});
    onnx::ModelProto m = b.Build();
    const std::string before = m.SerializeAsString();
    absl::StatusOr<PassStats> s = RunPass(&m);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented) << attr;
    EXPECT_THAT(s.status().message(), HasSubstr("Gemm 'fc7'"));
    EXPECT_THAT(s.status().message(), HasSubstr(attr));
    EXPECT_EQ(m.SerializeAsString(), before) << "model left unchanged";
  }
}

TEST_F(XlaLoweringTest, OldOpsetIsUpgradedAndChecked) {
  onnx::ModelProto m = testing::MatMulModel(64, 32, 9).Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(NodesOf(m, "MatMulInteger").size(), 1u);
}

TEST(XlaOptionsTest, OpSetIsCarriedFromTheRequest) {
  quantd::v1::QuantizeConfig c;
  absl::StatusOr<WeightPassOptions> o = ResolveDynamicRangeOptions(c);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->op_set, tfq::TF);
  c.mutable_options()->set_op_set(tfq::XLA);
  o = ResolveDynamicRangeOptions(c);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->op_set, tfq::XLA);
}

}  // namespace
}  // namespace quantd::passes
