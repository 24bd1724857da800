// STATIC_RANGE with op sets XLA and UNIFORM_QUANTIZED: the QDQ graph the
// pass writes, lowered by passes/xla_lowering.h (LowerQdqToXla) and
// passes/uniform_quantized_lowering.h. Checks the structure (ops, types, no
// QuantizeLinear -> DequantizeLinear -> QuantizeLinear chains, the ONNX
// checker) and that the lowered model computes what the QDQ model computes
// (our executor runs both; ONNX Runtime is the judge in
// tests/e2e/static_op_sets_e2e_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/executor/executor.h"
#include "core/executor/tensor.h"
#include "core/graph/tensor_util.h"
#include "core/graph/validate.h"
#include "core/passes/static_range_options.h"
#include "core/passes/static_range_pass.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/core/passes/static_range_test_util.h"

namespace quantd::passes {
namespace {

namespace tfq = tensorflow::quantization;
using ::testing::HasSubstr;
using testing::ModelBuilder;
using testing::NodesOf;
using testing::ProducerOf;

// x[2,1,8,8] -> Conv -> Relu -> Conv -> Relu -> Flatten -> Gemm -> Relu ->
// Gemm -> logits (a graph output): the digits CNN's shape, small.
onnx::ModelProto CnnModel() {
  ModelBuilder b(13);
  b.Input("x", {2, 1, 8, 8})
      .Weight("W1", {4, 1, 3, 3}, 1)
      .Weight("b1", {4}, 2)
      .Node("Conv", {"x", "W1", "b1"}, {"c1"}, "conv1")
      .Node("Relu", {"c1"}, {"r1"}, "relu1")
      .Weight("W2", {8, 4, 3, 3}, 3)
      .Weight("b2", {8}, 4)
      .Node("Conv", {"r1", "W2", "b2"}, {"c2"}, "conv2")
      .Node("Relu", {"c2"}, {"r2"}, "relu2")
      .Node("Flatten", {"r2"}, {"f"}, "flatten")
      .Weight("W3", {16, 128}, 5)
      .Weight("b3", {16}, 6)
      .Node("Gemm", {"f", "W3", "b3"}, {"g3"}, "fc3")
      .Attr("transB", 1)
      .Node("Relu", {"g3"}, {"r3"}, "relu3")
      .Weight("W4", {5, 16}, 7)
      .Weight("b4", {5}, 8)
      .Node("Gemm", {"r3", "W4", "b4"}, {"logits"}, "fc4")
      .Attr("transB", 1)
      .Output("logits", {2, 5});
  return b.Build();
}

// x[2,3,16] -> MatMul(W[16,8]) -> Sigmoid -> s; MatMul(s, sT) of two
// activations -> y: the transformer's MatMul kinds.
onnx::ModelProto MatMulModel() {
  ModelBuilder b(13);
  b.Input("x", {2, 3, 16})
      .Weight("W", {16, 8}, 3)
      .Node("MatMul", {"x", "W"}, {"m"}, "proj")
      .Node("Sigmoid", {"m"}, {"s"}, "sig")
      .Node("Transpose", {"s"}, {"st"}, "tr")
      .Attr("perm", std::vector<int64_t>{0, 2, 1})
      .Node("MatMul", {"s", "st"}, {"a"}, "attn")
      .Node("Tanh", {"a"}, {"y"}, "tanh")
      .Output("y", {2, 3, 3});
  return b.Build();
}

executor::Tensor Input(const std::vector<int64_t>& shape, int seed) {
  executor::Tensor t(onnx::TensorProto::FLOAT, shape);
  std::vector<float> v = testing::Wave(t.size(), seed);
  std::copy(v.begin(), v.end(), t.mutable_data<float>());
  return t;
}

absl::StatusOr<std::vector<executor::Tensor>> Run(
    const onnx::ModelProto& m, const executor::Tensor& x,
    executor::ExecutorRunOptions options = {}) {
  absl::StatusOr<std::unique_ptr<executor::Executor>> e =
      executor::Executor::Create(m);
  if (!e.ok()) return e.status();
  return (*e)->Run({{"x", x}}, options);
}

// Min/max of every float value of the float model on a few inputs: the
// calibration.
ActivationRanges Calibrate(const onnx::ModelProto& m,
                           const std::vector<int64_t>& shape) {
  ActivationRanges ranges;
  executor::ExecutorRunOptions o;
  o.on_tensor = [&](const std::string& name, const executor::Tensor& t) {
    if (t.dtype() != onnx::TensorProto::FLOAT || t.size() == 0) return;
    const float* p = t.data<float>();
    auto [lo, hi] = std::minmax_element(p, p + t.size());
    auto it = ranges.find(name);
    if (it == ranges.end()) {
      ranges[name] = {*lo, *hi};
    } else {
      it->second.min = std::min(it->second.min, *lo);
      it->second.max = std::max(it->second.max, *hi);
    }
  };
  for (int seed = 1; seed <= 4; ++seed) {
    EXPECT_TRUE(Run(m, Input(shape, seed), o).ok());
  }
  // Only tensors of the graph (not initializers) are activations.
  return ranges;
}

struct Lowered {
  onnx::ModelProto qdq, lowered;
  StaticRangeStats stats;
};

Lowered Quantize(const onnx::ModelProto& model,
                 const std::vector<int64_t>& shape, tfq::OpSet op_set) {
  ActivationRanges ranges = Calibrate(model, shape);
  for (const auto& t : model.graph().initializer()) ranges.erase(t.name());
  StaticRangeOptions options;
  options.min_num_elements = 0;
  Lowered out;
  out.qdq = model;
  EXPECT_TRUE(RunStaticRangePass(options, ranges, PassHooks(), &out.qdq).ok());
  options.op_set = op_set;
  out.lowered = model;
  absl::StatusOr<StaticRangeStats> stats =
      RunStaticRangePass(options, ranges, PassHooks(), &out.lowered);
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (stats.ok()) out.stats = *stats;
  absl::Status valid = graph::ValidateModel(out.lowered, "output", nullptr);
  EXPECT_TRUE(valid.ok()) << valid;
  return out;
}

int Count(const onnx::ModelProto& m, const std::string& op) {
  return static_cast<int>(NodesOf(m.graph(), op).size());
}

// No QuantizeLinear reads a DequantizeLinear output (Q -> DQ -> Q).
void ExpectNoRequantizeChains(const onnx::ModelProto& m) {
  for (const auto* q : NodesOf(m.graph(), "QuantizeLinear")) {
    const onnx::NodeProto* p = ProducerOf(m.graph(), q->input(0));
    EXPECT_TRUE(p == nullptr || p->op_type() != "DequantizeLinear")
        << q->name() << " requantizes " << p->name();
  }
}

// The lowered model computes what the QDQ model computes, up to rounding
// of intermediate results: within `steps` of the largest quantization step
// of the lowered model's outputs' ranges.
void ExpectSameOutputs(const Lowered& l, const std::vector<int64_t>& shape,
                       float tolerance) {
  for (int seed = 5; seed <= 6; ++seed) {
    const executor::Tensor x = Input(shape, seed);
    absl::StatusOr<std::vector<executor::Tensor>> a = Run(l.qdq, x);
    absl::StatusOr<std::vector<executor::Tensor>> b = Run(l.lowered, x);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->at(0).size(), b->at(0).size());
    float max_diff = 0.0f, max_abs = 0.0f;
    for (int64_t i = 0; i < a->at(0).size(); ++i) {
      const float u = a->at(0).data<float>()[i];
      const float v = b->at(0).data<float>()[i];
      max_diff = std::max(max_diff, std::fabs(u - v));
      max_abs = std::max(max_abs, std::fabs(u));
    }
    std::printf("measured: max |QDQ - lowered| = %g (max |y| %g)\n", max_diff,
                max_abs);
    EXPECT_LE(max_diff, tolerance * max_abs) << "seed " << seed;
  }
}

TEST(StaticXlaTest, CnnBecomesConvIntegerAndMatMulInteger) {
  const onnx::ModelProto m = CnnModel();
  Lowered l = Quantize(m, {2, 1, 8, 8}, tfq::XLA);
  const onnx::ModelProto& out = l.lowered;
  EXPECT_EQ(Count(out, "Conv"), 0);
  EXPECT_EQ(Count(out, "Gemm"), 0);
  EXPECT_EQ(Count(out, "ConvInteger"), 2);
  EXPECT_EQ(Count(out, "MatMulInteger"), 2);
  EXPECT_EQ(Count(out, "DynamicQuantizeLinear"), 0);
  EXPECT_EQ(l.stats.quantized_nodes, 4);
  EXPECT_THAT(l.stats.lowering_note, HasSubstr("4 node(s) lowered"));
  // Calibrated activations: each integer op reads a QuantizeLinear output
  // with initializer scale and zero point; ConvInteger weights are UINT8
  // with zero point 128, MatMulInteger weights INT8 [K, N].
  for (const auto* op : NodesOf(out.graph(), "ConvInteger")) {
    const onnx::NodeProto* q = ProducerOf(out.graph(), op->input(0));
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->op_type(), "QuantizeLinear");
    const onnx::TensorProto* w = testing::Init(out.graph(), op->input(1));
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->data_type(), onnx::TensorProto::UINT8);
    const onnx::TensorProto* zp = testing::Init(out.graph(), op->input(3));
    ASSERT_NE(zp, nullptr);
    EXPECT_EQ(zp->raw_data(), std::string(1, static_cast<char>(128)));
  }
  const onnx::NodeProto* fc3 = testing::NodeNamed(out.graph(), "fc3");
  ASSERT_NE(fc3, nullptr);
  EXPECT_EQ(fc3->op_type(), "MatMulInteger");
  const onnx::TensorProto* w3 = testing::Init(out.graph(), fc3->input(1));
  ASSERT_NE(w3, nullptr);
  EXPECT_EQ(w3->data_type(), onnx::TensorProto::INT8);
  EXPECT_THAT(std::vector<int64_t>(w3->dims().begin(), w3->dims().end()),
              ::testing::ElementsAre(128, 16));
  // The int32 bias joins the accumulator before the Cast.
  int int32_adds = 0;
  for (const auto* add : NodesOf(out.graph(), "Add")) {
    const onnx::NodeProto* p = ProducerOf(out.graph(), add->input(0));
    int32_adds += p != nullptr && (p->op_type() == "ConvInteger" ||
                                   p->op_type() == "MatMulInteger");
  }
  EXPECT_EQ(int32_adds, 4);
  // No weight or bias DequantizeLinear is left.
  for (const auto* dq : NodesOf(out.graph(), "DequantizeLinear")) {
    EXPECT_EQ(testing::Init(out.graph(), dq->input(0)), nullptr) << dq->name();
  }
  ExpectSameOutputs(l, {2, 1, 8, 8}, 0.02f);
}

TEST(StaticXlaTest, MatMulOfTwoActivationsIsUint8TimesUint8) {
  Lowered l = Quantize(MatMulModel(), {2, 3, 16}, tfq::XLA);
  const onnx::ModelProto& out = l.lowered;
  EXPECT_EQ(Count(out, "MatMul"), 0);
  EXPECT_EQ(Count(out, "MatMulInteger"), 2);
  const onnx::NodeProto* attn = testing::NodeNamed(out.graph(), "attn");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->op_type(), "MatMulInteger");
  const onnx::NodeProto* b = ProducerOf(out.graph(), attn->input(1));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->op_type(), "QuantizeLinear");
  ExpectSameOutputs(l, {2, 3, 16}, 0.02f);
}

TEST(StaticUniformQuantizedTest, CnnBecomesQLinearOpsWithUint8Between) {
  Lowered l = Quantize(CnnModel(), {2, 1, 8, 8}, tfq::UNIFORM_QUANTIZED);
  const onnx::ModelProto& out = l.lowered;
  // conv1, conv2, and fc3 (a Gemm with a bias, as a 1x1 QLinearConv) with
  // their Relus folded; fc4 writes a graph output, so no output scale: QDQ.
  EXPECT_EQ(Count(out, "QLinearConv"), 3);
  EXPECT_EQ(Count(out, "Relu"), 0);
  EXPECT_EQ(Count(out, "Conv"), 0);
  EXPECT_EQ(Count(out, "Gemm"), 1);
  EXPECT_EQ(l.stats.quantized_nodes, 4);
  EXPECT_THAT(l.stats.lowering_note, HasSubstr("Gemm 'fc4' stays QDQ"));
  // conv1 feeds conv2 directly, and Flatten runs on uint8.
  const onnx::NodeProto* conv2 = testing::NodeNamed(out.graph(), "conv2");
  ASSERT_NE(conv2, nullptr);
  EXPECT_EQ(ProducerOf(out.graph(), conv2->input(0))->name(), "conv1");
  const onnx::NodeProto* flatten = testing::NodeNamed(out.graph(), "flatten");
  ASSERT_NE(flatten, nullptr);
  EXPECT_EQ(ProducerOf(out.graph(), flatten->input(0))->name(), "conv2");
  // One QuantizeLinear (the input) and one DequantizeLinear per input of
  // the float Gemm that is left (activation, weight, bias).
  EXPECT_EQ(Count(out, "QuantizeLinear"), 1);
  EXPECT_EQ(Count(out, "DequantizeLinear"), 3);
  ExpectNoRequantizeChains(out);
  // The QLinearConv bias is the pass's int32 bias.
  const onnx::TensorProto* b1 = testing::Init(
      out.graph(), testing::NodeNamed(out.graph(), "conv1")->input(8));
  ASSERT_NE(b1, nullptr);
  EXPECT_EQ(b1->data_type(), onnx::TensorProto::INT32);
  ExpectSameOutputs(l, {2, 1, 8, 8}, 0.05f);
}

TEST(StaticUniformQuantizedTest, MatMulsBecomeQLinearMatMul) {
  Lowered l = Quantize(MatMulModel(), {2, 3, 16}, tfq::UNIFORM_QUANTIZED);
  const onnx::ModelProto& out = l.lowered;
  EXPECT_EQ(Count(out, "QLinearMatMul"), 2);
  EXPECT_EQ(Count(out, "MatMul"), 0);
  // Per-column weight scales on the constant weight.
  const onnx::NodeProto* proj = testing::NodeNamed(out.graph(), "proj");
  ASSERT_NE(proj, nullptr);
  const onnx::TensorProto* scale = testing::Init(out.graph(), proj->input(4));
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(graph::NumElements(*scale), 8);
  ExpectNoRequantizeChains(out);
  ExpectSameOutputs(l, {2, 3, 16}, 0.05f);
}

TEST(StaticUniformQuantizedTest, ReluWithNonZeroZeroPointIsNotFolded) {
  // A Relu whose calibrated range does not start at 0 (a range we give
  // below 0) keeps QDQ around it, named in the note.
  const onnx::ModelProto m = CnnModel();
  ActivationRanges ranges = Calibrate(m, {2, 1, 8, 8});
  for (const auto& t : m.graph().initializer()) ranges.erase(t.name());
  ranges["r1"].min = -1.0f;
  StaticRangeOptions options;
  options.min_num_elements = 0;
  options.op_set = tfq::UNIFORM_QUANTIZED;
  onnx::ModelProto out = m;
  absl::StatusOr<StaticRangeStats> stats =
      RunStaticRangePass(options, ranges, PassHooks(), &out);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->lowering_note, HasSubstr("Conv 'conv1' stays QDQ"));
  EXPECT_THAT(stats->lowering_note, HasSubstr("zero point"));
  EXPECT_EQ(Count(out, "QLinearConv"), 2);
  EXPECT_EQ(Count(out, "Conv"), 1);
  ExpectNoRequantizeChains(out);
}

TEST(StaticOpSetOptionsTest, OpSetIsCarriedFromTheRequest) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()->set_op_set(tfq::UNIFORM_QUANTIZED);
  absl::StatusOr<StaticRangeOptions> o = ResolveStaticRangeOptions(config);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->op_set, tfq::UNIFORM_QUANTIZED);
  config.mutable_options()->set_op_set(tfq::OP_SET_UNSPECIFIED);
  o = ResolveStaticRangeOptions(config);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->op_set, tfq::TF);
}

}  // namespace
}  // namespace quantd::passes
