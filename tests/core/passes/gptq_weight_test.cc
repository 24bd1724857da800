#include "core/passes/gptq_weight.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;

onnx::GraphProto TwoReaders() {
  testing::ModelBuilder m(13);
  m.Input("x", {4, 8})
      .Input("z", {4, 6})
      .Weight("W", {8, 3})
      .Weight("V", {6, 3});
  m.Node("MatMul", {"x", "W"}, {"a"}, "a");
  m.Node("MatMul", {"x", "W"}, {"b"}, "b");
  m.Node("MatMul", {"z", "V"}, {"c"}, "c");
  m.Output("a").Output("b").Output("c");
  return m.Build().graph();
}

WeightPlan Plan(const std::string& tensor, std::vector<int> consumers,
                std::vector<int64_t> dims) {
  WeightPlan p;
  p.tensor = tensor;
  p.consumers = std::move(consumers);
  p.num_elements = dims[0] * dims[1];
  p.dims = std::move(dims);
  p.axis = 1;
  return p;
}

executor::Tensor Ones(std::vector<int64_t> shape) {
  executor::Tensor t(onnx::TensorProto::FLOAT, std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.mutable_data<float>()[i] = 1.0f;
  return t;
}

TEST(GptqInputsForTest, SharedWeightsSumTheirReadersStatistics) {
  const onnx::GraphProto g = TwoReaders();
  auto moments = InputMoments::Create(g, 0, nullptr);
  ASSERT_TRUE(moments.ok());
  ASSERT_TRUE((*moments)->Observe("x", Ones({4, 8})).ok());
  (*moments)->Finish();
  const GptqInputs in = GptqInputsFor(g, Plan("W", {0, 1}, {8, 3}), **moments);
  EXPECT_EQ(in.why_not, "");
  EXPECT_EQ(in.k, 8);
  EXPECT_EQ(in.rows, 8);  // Both readers' 4 rows (one shared H).
  EXPECT_FLOAT_EQ(in.h[0], 8.0f);
}

TEST(GptqInputsForTest, AReaderThatSawNoInputSaysWhy) {
  const onnx::GraphProto g = TwoReaders();
  auto moments = InputMoments::Create(g, 0, nullptr);
  ASSERT_TRUE(moments.ok());
  ASSERT_TRUE((*moments)->Observe("x", Ones({4, 8})).ok());  // Not z.
  (*moments)->Finish();
  const GptqInputs in = GptqInputsFor(g, Plan("V", {2}, {6, 3}), **moments);
  EXPECT_THAT(in.why_not, HasSubstr("MatMul 'c' has no input statistics"));
  EXPECT_THAT(in.why_not, HasSubstr("never produced by a calibration batch"));
}

}  // namespace
}  // namespace quantd::passes

namespace quantd::passes {
namespace {

TEST(ExpectedOutputShiftTest, IsTheErrorTimesTheInputMean) {
  // MatMul B [K=3, N=2] (element k * 2 + n) and a mean input of (1, 2, 3).
  testing::ModelBuilder m(13);
  m.Input("x", {1, 3}).Weight("W", {3, 2});
  m.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  m.Output("y");
  const onnx::GraphProto g = m.Build().graph();
  LayerMoments moments;
  moments.k = 3;
  moments.rows = 2;
  moments.sum = {2, 4, 6};  // Mean (1, 2, 3).
  WeightPlan plan;
  plan.tensor = "W";
  plan.dims = {3, 2};
  plan.num_elements = 6;
  plan.axis = 1;
  const std::vector<float> error = {0.5f, -1.0f, 0.25f, 0.0f, 0.0f, 2.0f};
  absl::StatusOr<std::vector<double>> shift =
      ExpectedOutputShift(g.node(0), plan, error, moments);
  ASSERT_TRUE(shift.ok()) << shift.status();
  // Channel 0: 0.5*1 + 0.25*2 + 0*3 = 1; channel 1: -1*1 + 0*2 + 2*3 = 5.
  EXPECT_THAT(*shift, ::testing::ElementsAre(1.0, 5.0));
}

TEST(ExpectedOutputShiftTest, GroupedConvUsesEachGroupsMean) {
  // Conv W [M=2, C/g=1, 1, 1], group 2: channel g reads input channel g.
  testing::ModelBuilder m(13);
  m.Input("x", {1, 2, 2, 2}).Weight("W", {2, 1, 1, 1});
  m.Node("Conv", {"x", "W"}, {"y"}, "conv").Attr("group", 2);
  m.Output("y");
  const onnx::GraphProto g = m.Build().graph();
  LayerMoments moments;
  moments.k = 1;
  moments.groups = 2;
  moments.rows = 4;
  moments.sum = {4, -8};  // Means 1 and -2.
  WeightPlan plan;
  plan.tensor = "W";
  plan.dims = {2, 1, 1, 1};
  plan.num_elements = 2;
  plan.axis = 0;
  absl::StatusOr<std::vector<double>> shift =
      ExpectedOutputShift(g.node(0), plan, {0.5f, 0.25f}, moments);
  ASSERT_TRUE(shift.ok()) << shift.status();
  EXPECT_THAT(*shift, ::testing::ElementsAre(0.5, -0.5));
}

}  // namespace
}  // namespace quantd::passes
