#include "core/passes/gptq_weight.h"

#include <cmath>
#include <random>
#include <vector>

#include "core/graph/tensor_util.h"
#include "core/numerics/quant_params.h"
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

// A Conv weight blocked along its input channels: GPTQ sees the columns tap
// by tap and its blocks must land where DequantizeLinear-21 reads them
// ([M, blocks, kh, kw]). With H = I nothing moves, so the result must be the
// blocked rounding of the tensor itself, bit for bit, for a plain and a
// grouped Conv whose channels per group (20) leave a short block (16 + 4).
TEST(GptqQuantizeWeightTest, BlockedConvIsTheBlockedRoundingWhenHIsIdentity) {
  for (int64_t groups : {1, 2}) {
    SCOPED_TRACE(groups);
    const std::vector<int64_t> dims = {4, 20, 3, 2};
    testing::ModelBuilder m(13);
    m.Input("x", {1, 20 * groups, 5, 5}).Weight("W", dims, 11);
    m.Node("Conv", {"x", "W"}, {"y"}, "conv").Attr("group", groups);
    m.Output("y");
    const onnx::ModelProto model = m.Build();
    const onnx::GraphProto& g = model.graph();
    const std::vector<float> values = *graph::ReadFloatTensor(g.initializer(0));
    WeightPlan plan;
    plan.tensor = "W";
    plan.consumers = {0};
    plan.dims = dims;
    plan.num_elements = 4 * 20 * 3 * 2;
    plan.axis = 1;
    plan.block_size = 16;
    GptqInputs inputs;
    inputs.k = 20 * 3 * 2;
    inputs.groups = groups;
    inputs.rows = 100;
    inputs.h.assign(groups * inputs.k * inputs.k, 0.0f);
    for (int64_t i = 0; i < groups * inputs.k; ++i) {
      inputs.h[i * inputs.k + i % inputs.k] = 1.0f;
    }
    numerics::QuantSpec spec;
    spec.bits = 4;
    absl::StatusOr<GptqWeight> got = GptqQuantizeWeight(
        g.node(0), plan, values, inputs, spec, numerics::GptqOptions());
    ASSERT_TRUE(got.ok()) << got.status();
    absl::StatusOr<numerics::QuantizedTensor> want =
        numerics::QuantizeTensorBlocked(values, dims, 1, 16, spec);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->q.axis, 1);
    EXPECT_EQ(got->q.block_size, 16);
    EXPECT_EQ(got->q.values, want->values);
    ASSERT_EQ(got->q.params.size(), want->params.size());  // 4 x 2 x 3 x 2.
    for (size_t i = 0; i < want->params.size(); ++i) {
      EXPECT_EQ(got->q.params[i].scale, want->params[i].scale) << i;
      EXPECT_EQ(got->q.params[i].zero_point, want->params[i].zero_point) << i;
    }
  }
}

// With correlated inputs (a dense H) GPTQ moves the weights, so the Conv's
// tap-by-tap order matters: the result must be GptqQuantize's on the weight
// and H (and, cross-checked, each fold's H) permuted here by hand, put back
// in the tensor's order.
TEST(GptqQuantizeWeightTest, BlockedConvSolvesTheTapMajorProblem) {
  const int64_t m = 3, c = 20, taps = 4, k = c * taps;
  const std::vector<int64_t> dims = {m, c, 2, 2};
  testing::ModelBuilder b(13);
  b.Input("x", {1, c, 5, 5}).Weight("W", dims, 13);
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  const onnx::ModelProto model = b.Build();
  const onnx::GraphProto& g = model.graph();
  const std::vector<float> values = *graph::ReadFloatTensor(g.initializer(0));
  // H = X^T X of 200 correlated rows, and the even rows' part.
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::vector<float> mix(k * k);
  for (float& v : mix) v = normal(gen);
  GptqInputs inputs;
  inputs.k = k;
  inputs.rows = 200;
  inputs.fold_rows = 100;
  inputs.h.assign(k * k, 0.0f);
  inputs.h_fold.assign(k * k, 0.0f);
  std::vector<float> z(k), x(k);
  for (int64_t row = 0; row < 200; ++row) {
    for (float& v : z) v = normal(gen);
    for (int64_t a = 0; a < k; ++a) {
      x[a] = 0;
      for (int64_t j = 0; j < k; ++j) x[a] += z[j] * mix[j * k + a] / k;
    }
    for (int64_t a = 0; a < k; ++a) {
      for (int64_t j = 0; j < k; ++j) {
        inputs.h[a * k + j] += x[a] * x[j];
        if (row % 2 == 0) inputs.h_fold[a * k + j] += x[a] * x[j];
      }
    }
  }
  WeightPlan plan;
  plan.tensor = "W";
  plan.consumers = {0};
  plan.dims = dims;
  plan.num_elements = m * k;
  plan.axis = 1;
  plan.block_size = 16;
  numerics::QuantSpec spec;
  spec.bits = 4;
  absl::StatusOr<GptqWeight> got = GptqQuantizeWeight(
      g.node(0), plan, values, inputs, spec, numerics::GptqOptions());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->cross_checked);

  // Column p of the tap-major problem is channel p % c at tap p / c.
  auto source = [&](int64_t p) { return p % c * taps + p / c; };
  std::vector<float> w(m * k), h(k * k), even(k * k), odd(k * k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t p = 0; p < k; ++p) w[r * k + p] = values[r * k + source(p)];
  }
  for (int64_t a = 0; a < k; ++a) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = source(a) * k + source(j);
      h[a * k + j] = inputs.h[at];
      even[a * k + j] = inputs.h_fold[at];
      odd[a * k + j] = inputs.h[at] - inputs.h_fold[at];
    }
  }
  const numerics::GptqBlocking blocking{16, c};
  absl::StatusOr<numerics::GptqResult> want = numerics::GptqQuantize(
      w, m, k, h, spec, blocking, numerics::GptqOptions());
  ASSERT_TRUE(want.ok()) << want.status();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t p = 0; p < k; ++p) {
      ASSERT_EQ(got->q.values[r * k + source(p)],
                numerics::ToByte(want->values[r * k + p], true))
          << r << "," << p;
    }
    // Blocks per row: 2 per tap (16 + 4 channels), tap by tap.
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t blk = 0; blk < 2; ++blk) {
        EXPECT_EQ(got->q.params[(r * 2 + blk) * taps + t].scale,
                  want->params[r * 8 + t * 2 + blk].scale);
      }
    }
  }
  double signal = 0, gptq_error = 0;
  for (int fold = 0; fold < 2; ++fold) {
    absl::StatusOr<numerics::GptqResult> half =
        numerics::GptqQuantize(w, m, k, fold == 0 ? even : odd, spec, blocking,
                               numerics::GptqOptions(), fold == 0 ? odd : even);
    ASSERT_TRUE(half.ok()) << half.status();
    signal += half->held_out_signal;
    gptq_error += half->held_out_gptq_error;
  }
  EXPECT_NEAR(got->held_out_sqnr_db, 10 * std::log10(signal / gptq_error),
              1e-6);
}

}  // namespace
}  // namespace quantd::passes
