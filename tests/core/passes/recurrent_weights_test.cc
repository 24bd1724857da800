// Weight-only quantization of LSTM/GRU/RNN weights (recurrent_weights.h),
// through both passes: W and R become INT8 per row of gates behind a
// DequantizeLinear, the bias and the op stay float, ONNX Runtime runs the
// result close to the float model; what cannot be quantized stays float
// with its reason.
#include "core/passes/recurrent_weights.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "core/graph/validate.h"
#include "core/passes/static_range_pass.h"
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

constexpr int64_t kSeq = 6, kBatch = 2, kInput = 16, kHidden = 16;

// X [seq, batch, input] -> op -> Y; W and R of `gates` x hidden rows.
onnx::ModelProto RecurrentModel(const std::string& op, int gates) {
  ModelBuilder b;
  b.Input("x", {kSeq, kBatch, kInput}).Output("y");
  b.Weight("W", {1, gates * kHidden, kInput}, 3);
  b.Weight("R", {1, gates * kHidden, kHidden}, 5);
  b.Weight("B", {1, 2 * gates * kHidden}, 7);
  b.Node(op, {"x", "W", "R", "B"}, {"y"}, "rnn").Attr("hidden_size", kHidden);
  return b.Build();
}

const onnx::TensorProto* Initializer(const onnx::GraphProto& g,
                                     const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

const onnx::NodeProto* Producer(const onnx::GraphProto& g,
                                const std::string& name) {
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (o == name) return &n;
    }
  }
  return nullptr;
}

// `name` is made by a per-channel (axis 1) DequantizeLinear of INT8 values.
void ExpectQuantizedPerRow(const onnx::GraphProto& g, const std::string& name) {
  SCOPED_TRACE(name);
  const onnx::NodeProto* dq = Producer(g, name);
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(dq->op_type(), "DequantizeLinear");
  int64_t axis = -100;
  for (const auto& a : dq->attribute()) {
    if (a.name() == "axis") axis = a.i();
  }
  EXPECT_EQ(axis, 1);
  const onnx::TensorProto* values = Initializer(g, dq->input(0));
  ASSERT_NE(values, nullptr);
  EXPECT_EQ(values->data_type(), onnx::TensorProto::INT8);
  EXPECT_EQ(Initializer(g, name), nullptr);  // The float copy is gone.
}

double OrtSqnrOf(const onnx::ModelProto& float_model,
                 const onnx::ModelProto& model) {
  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.File("a.onnx"), float_model.SerializeAsString());
  testing::WriteFileOrDie(tmp.File("b.onnx"), model.SerializeAsString());
  const std::vector<float> x = Wave(kSeq * kBatch * kInput, 11);
  EXPECT_TRUE(executor::WriteNpyFile(tmp.File("x.npy"),
                                     executor::Tensor::FromVector<float>(
                                         {kSeq, kBatch, kInput}, x))
                  .ok());
  return testing::OrtSqnr(tmp.File("a.onnx"), tmp.File("b.onnx"),
                          tmp.File("x.npy"));
}

class RecurrentWeightsTest : public ::testing::TestWithParam<const char*> {
 protected:
  int Gates() const {
    const std::string op = GetParam();
    return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  }
};

TEST_P(RecurrentWeightsTest, DynamicRangeQuantizesWAndRPerRow) {
  // RNN's 16-row matrices are 256 elements: no minimum for this test.
  WeightPassOptions options;
  options.min_num_elements = 0;
  const onnx::ModelProto original = RecurrentModel(GetParam(), Gates());
  onnx::ModelProto m = original;
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(options, {}, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->quantized_tensors, 2);
  EXPECT_EQ(stats->quantized_nodes, 1);
  EXPECT_TRUE(stats->skipped.empty());
  ExpectQuantizedPerRow(m.graph(), "W");
  ExpectQuantizedPerRow(m.graph(), "R");
  ASSERT_NE(Initializer(m.graph(), "B"), nullptr);
  EXPECT_EQ(Initializer(m.graph(), "B")->data_type(), onnx::TensorProto::FLOAT);
  // No activation is quantized: the op computes in float.
  for (const auto& n : m.graph().node()) {
    EXPECT_NE(n.op_type(), "DynamicQuantizeLinear");
  }
  EXPECT_TRUE(graph::ValidateModel(m, "quantized", nullptr).ok());
  EXPECT_GT(OrtSqnrOf(original, m), 35.0);
}

TEST_P(RecurrentWeightsTest, StaticRangeQuantizesThemToo) {
  StaticRangeOptions options;
  options.min_num_elements = 0;
  // 4-bit precisions keep 8-bit recurrent weights.
  options.precision = tensorflow::quantization::PRECISION_W4A8;
  onnx::ModelProto m = RecurrentModel(GetParam(), Gates());
  absl::StatusOr<StaticRangeStats> stats =
      RunStaticRangePass(options, {}, {}, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->quantized_weights, 2);
  EXPECT_EQ(stats->quantized_activations, 0);
  ExpectQuantizedPerRow(m.graph(), "W");
  ExpectQuantizedPerRow(m.graph(), "R");
}

INSTANTIATE_TEST_SUITE_P(Ops, RecurrentWeightsTest,
                         ::testing::Values("LSTM", "GRU", "RNN"));

TEST(RecurrentWeights, WhatCannotBeQuantizedStaysFloatWithItsReason) {
  // Default minimum (1024 elements): the GRU's 48 x 16 R is too small;
  // a FULL unit keeps the LSTM's weights float.
  {
    WeightPassOptions options;
    onnx::ModelProto m = RecurrentModel("GRU", 3);
    absl::StatusOr<PassStats> stats = RunDynamicRangePass(options, {}, &m);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->quantized_tensors, 0);
    ASSERT_EQ(stats->skipped.size(), 2u);
    EXPECT_EQ(stats->skipped[0].reason(), quantd::v1::SKIP_TOO_FEW_ELEMENTS);
  }
  {
    WeightPassOptions options;
    options.min_num_elements = 0;
    tensorflow::quantization::UnitWiseQuantizationPrecision unit;
    unit.set_unit_type(
        tensorflow::quantization::UnitWiseQuantizationPrecision::UNIT_OP);
    unit.set_unit_name("LSTM");
    unit.set_quantization_precision(tensorflow::quantization::PRECISION_FULL);
    options.units.push_back(unit);
    onnx::ModelProto m = RecurrentModel("LSTM", 4);
    absl::StatusOr<PassStats> stats = RunDynamicRangePass(options, {}, &m);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->quantized_tensors, 0);
    ASSERT_EQ(stats->skipped.size(), 2u);
    EXPECT_EQ(stats->skipped[0].reason(), quantd::v1::SKIP_PRECISION_FULL);
  }
  {
    // A weight something else reads too stays float.
    WeightPassOptions options;
    options.min_num_elements = 0;
    onnx::ModelProto m = RecurrentModel("LSTM", 4);
    auto* extra = m.mutable_graph()->add_node();
    extra->set_op_type("Identity");
    extra->set_name("peek");
    extra->add_input("W");
    extra->add_output("w_copy");
    m.mutable_graph()->add_output()->set_name("w_copy");
    absl::StatusOr<PassStats> stats = RunDynamicRangePass(options, {}, &m);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->quantized_tensors, 1);  // R only.
    ASSERT_EQ(stats->skipped.size(), 1u);
    EXPECT_EQ(stats->skipped[0].tensor_name(), "W");
    EXPECT_THAT(stats->skipped[0].detail(), HasSubstr("Identity 'peek'"));
  }
}

// W held in a Constant node: replaced in place by its DequantizeLinear.
TEST(RecurrentWeights, ConstantNodeWeights) {
  WeightPassOptions options;
  options.min_num_elements = 0;
  ModelBuilder b;
  b.Input("x", {kSeq, kBatch, kInput}).Output("y");
  b.ConstantWeight("W", {1, 4 * kHidden, kInput}, 3);
  b.Weight("R", {1, 4 * kHidden, kHidden}, 5);
  b.Node("LSTM", {"x", "W", "R"}, {"y"}, "rnn").Attr("hidden_size", kHidden);
  const onnx::ModelProto original = b.Build();
  onnx::ModelProto m = original;
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(options, {}, &m);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->quantized_tensors, 2);
  ExpectQuantizedPerRow(m.graph(), "W");
  for (const auto& n : m.graph().node()) EXPECT_NE(n.op_type(), "Constant");
  EXPECT_TRUE(graph::ValidateModel(m, "quantized", nullptr).ok());
  EXPECT_GT(OrtSqnrOf(original, m), 35.0);
}

}  // namespace
}  // namespace quantd::passes
