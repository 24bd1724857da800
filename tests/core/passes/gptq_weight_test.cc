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
