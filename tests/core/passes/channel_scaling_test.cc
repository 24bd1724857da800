#include "core/passes/channel_scaling.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/executor/executor.h"
#include "core/graph/tensor_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

executor::Tensor Random(std::vector<int64_t> shape, uint32_t seed) {
  executor::Tensor t(onnx::TensorProto::FLOAT, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int64_t i = 0; i < t.size(); ++i) t.mutable_data<float>()[i] = u(gen);
  return t;
}

// Factors far from 1, so that a missed or doubled rescale shows.
std::vector<double> Factors(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::vector<double> s(n);
  for (double& f : s) f = std::exp(u(gen));
  return s;
}

std::vector<float> RunFirstOutput(const onnx::ModelProto& model,
                                  const std::string& input,
                                  const executor::Tensor& x) {
  auto exec = executor::Executor::Create(model);
  EXPECT_TRUE(exec.ok()) << exec.status();
  if (!exec.ok()) return {};
  auto out = (*exec)->Run({{input, x}});
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  const executor::Tensor& y = out->front();
  return std::vector<float>(y.data<float>(), y.data<float>() + y.size());
}

// The rescaled model computes what the original did, to float rounding.
void ExpectSameFunction(const onnx::ModelProto& before,
                        const onnx::ModelProto& after, const std::string& input,
                        const executor::Tensor& x) {
  const std::vector<float> a = RunFirstOutput(before, input, x);
  const std::vector<float> b = RunFirstOutput(after, input, x);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  double scale = 0;
  for (float v : a) scale = std::max(scale, std::fabs(double{v}));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + scale)) << "element " << i;
  }
}

std::vector<float> Values(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer()) {
    if (t.name() == name) return *graph::ReadFloatTensor(t);
  }
  ADD_FAILURE() << "no initializer " << name;
  return {};
}

// The weight input of the node named `node`.
std::string WeightOf(const onnx::ModelProto& m, const std::string& node) {
  for (const auto& n : m.graph().node()) {
    if (n.name() == node) return n.input(1);
  }
  return "";
}

const ScalingSite* SiteOf(const std::vector<ScalingSite>& sites,
                          const std::string& value) {
  for (const ScalingSite& s : sites) {
    if (s.value == value) return &s;
  }
  return nullptr;
}

TEST(ChannelScalingTest, ConvReluConvFoldsIntoTheFirstConv) {
  testing::ModelBuilder b(13);
  b.Input("x", {1, 3, 8, 8})
      .Weight("W1", {4, 3, 3, 3}, 1)
      .Weight("B1", {4}, 2)
      .Weight("W2", {5, 4, 1, 1}, 3);
  b.Node("Conv", {"x", "W1", "B1"}, {"c1"}, "conv1");
  b.Node("Relu", {"c1"}, {"r1"}, "relu1");
  b.Node("MaxPool", {"r1"}, {"p1"}, "pool1")
      .Attr("kernel_shape", std::vector<int64_t>{2, 2});
  b.Node("Conv", {"p1", "W2"}, {"y"}, "conv2");
  b.Output("y");
  const onnx::ModelProto before = b.Build();
  onnx::ModelProto after = before;
  std::vector<ScalingSite> sites = FindScalingSites(&after, 0);
  const ScalingSite* site = SiteOf(sites, "p1");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->axis, ChannelAxis::kSecond);
  EXPECT_EQ(site->channels, 4);
  EXPECT_EQ(site->AbsorberLabel(), "Conv 'conv1'");
  EXPECT_TRUE(site->AbsorberIsLayer());
  EXPECT_THAT(site->chain_values, ::testing::ElementsAre("c1", "r1", "p1"));
  const std::vector<double> s = Factors(4, 7);
  ModelWeights w(&after);
  auto applied = ApplyChannelScales(*site, s, &w);
  ASSERT_TRUE(applied.ok()) << applied.status();
  w.DropUnread();
  EXPECT_EQ(applied->value, "p1");
  EXPECT_EQ(applied->absorbed_by, "Conv 'conv1'");
  // Written out: conv1's output channel c and conv2's input channel c.
  const std::vector<float> w1 = Values(before, "W1"), w1s = Values(after, "W1");
  const std::vector<float> b1 = Values(before, "B1"), b1s = Values(after, "B1");
  const std::vector<float> w2 = Values(before, "W2"), w2s = Values(after, "W2");
  for (int c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(b1s[c], static_cast<float>(b1[c] / s[c]));
    for (int k = 0; k < 27; ++k) {
      EXPECT_FLOAT_EQ(w1s[c * 27 + k],
                      static_cast<float>(w1[c * 27 + k] / s[c]));
    }
    for (int o = 0; o < 5; ++o) {
      EXPECT_FLOAT_EQ(w2s[o * 4 + c], static_cast<float>(w2[o * 4 + c] * s[c]));
    }
  }
  ExpectSameFunction(before, after, "x", Random({1, 3, 8, 8}, 1));
}

TEST(ChannelScalingTest, LayerNormFeedsSharedReaders) {
  testing::ModelBuilder b(17);
  b.Input("x", {2, 5, 8})
      .Weight("gamma", {8}, 1)
      .Weight("beta", {8}, 2)
      .Weight("Wq", {8, 6}, 3)
      .Weight("Wk", {8, 6}, 4);
  b.Node("LayerNormalization", {"x", "gamma", "beta"}, {"n"}, "ln");
  b.Node("MatMul", {"n", "Wq"}, {"q"}, "q");
  b.Node("MatMul", {"n", "Wk"}, {"k"}, "k");
  b.Node("Add", {"q", "k"}, {"y"}, "sum");
  b.Output("y");
  const onnx::ModelProto before = b.Build();
  onnx::ModelProto after = before;
  std::vector<ScalingSite> sites = FindScalingSites(&after, 0);
  const ScalingSite* site = SiteOf(sites, "n");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->axis, ChannelAxis::kLast);
  EXPECT_THAT(site->readers, SizeIs(2));
  EXPECT_EQ(site->AbsorberLabel(), "LayerNormalization 'ln'");
  EXPECT_FALSE(site->AbsorberIsLayer());
  ModelWeights w(&after);
  ASSERT_TRUE(ApplyChannelScales(*site, Factors(8, 3), &w).ok());
  w.DropUnread();
  ExpectSameFunction(before, after, "x", Random({2, 5, 8}, 2));
}

TEST(ChannelScalingTest, MulIsInsertedWhenAnotherOpReadsTheValue) {
  testing::ModelBuilder b(13);
  b.Input("x", {3, 8}).Weight("W", {8, 4}, 1).Weight("V", {4, 8}, 2);
  b.Node("Sigmoid", {"x"}, {"h"}, "act");
  b.Node("MatMul", {"h", "W"}, {"m"}, "mm");
  b.Node("MatMul", {"m", "V"}, {"back"}, "mm2");
  b.Node("Add", {"back", "h"}, {"y"}, "residual");
  b.Output("y");
  const onnx::ModelProto before = b.Build();
  onnx::ModelProto after = before;
  std::vector<ScalingSite> sites = FindScalingSites(&after, 0);
  const ScalingSite* site = SiteOf(sites, "h");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->absorber, nullptr);  // The residual Add reads h too.
  // m is read only by mm2 and made by mm: its site folds into mm.
  ASSERT_NE(SiteOf(sites, "m"), nullptr);
  EXPECT_EQ(SiteOf(sites, "m")->AbsorberLabel(), "MatMul 'mm'");
  ModelWeights w(&after);
  auto applied = ApplyChannelScales(*site, Factors(8, 4), &w);
  ASSERT_TRUE(applied.ok()) << applied.status();
  auto second = ApplyChannelScales(*SiteOf(sites, "m"), Factors(4, 5), &w);
  ASSERT_TRUE(second.ok()) << second.status();
  w.DropUnread();
  EXPECT_THAT(applied->absorbed_by, HasSubstr("inserted Mul"));
  EXPECT_NE(applied->value, "h");
  // The Mul comes right after h's producer; the residual still reads h.
  EXPECT_EQ(after.graph().node(1).op_type(), "Mul");
  EXPECT_EQ(after.graph().node(1).input(0), "h");
  EXPECT_EQ(after.graph().node(after.graph().node_size() - 1).input(1), "h");
  ExpectSameFunction(before, after, "x", Random({3, 8}, 3));
}

TEST(ChannelScalingTest, SharedWeightIsCopiedForTheRescaledReader) {
  testing::ModelBuilder b(13);
  b.Input("x", {3, 8}).Weight("W", {8, 8}, 1);
  b.Node("Sigmoid", {"x"}, {"h"}, "act");
  b.Node("MatMul", {"h", "W"}, {"a"}, "mm_a");
  b.Node("MatMul", {"x", "W"}, {"b"}, "mm_b");
  b.Node("Add", {"a", "b"}, {"y"}, "sum");
  b.Output("y");
  const onnx::ModelProto before = b.Build();
  onnx::ModelProto after = before;
  std::vector<ScalingSite> sites = FindScalingSites(&after, 0);
  const ScalingSite* site = SiteOf(sites, "h");
  ASSERT_NE(site, nullptr);
  ModelWeights w(&after);
  ASSERT_TRUE(ApplyChannelScales(*site, Factors(8, 6), &w).ok());
  w.DropUnread();
  EXPECT_NE(WeightOf(after, "mm_a"), "W");
  EXPECT_EQ(WeightOf(after, "mm_b"), "W");
  EXPECT_EQ(Values(after, "W"), Values(before, "W"));
  ExpectSameFunction(before, after, "x", Random({3, 8}, 4));
}

TEST(ChannelScalingTest, GroupedAndDepthwiseConvReaders) {
  testing::ModelBuilder b(13);
  b.Input("x", {1, 4, 6, 6})
      .Weight("W1", {8, 4, 1, 1}, 1)
      .Weight("Wd", {8, 1, 3, 3}, 2)
      .Weight("Wg", {4, 4, 1, 1}, 3);
  b.Node("Conv", {"x", "W1"}, {"c1"}, "expand");
  b.Node("Conv", {"c1", "Wd"}, {"d"}, "depthwise").Attr("group", 8);
  b.Node("Conv", {"d", "Wg"}, {"y"}, "grouped").Attr("group", 2);
  b.Output("y");
  const onnx::ModelProto before = b.Build();
  onnx::ModelProto after = before;
  std::vector<ScalingSite> sites = FindScalingSites(&after, 0);
  ASSERT_NE(SiteOf(sites, "c1"), nullptr);
  ASSERT_NE(SiteOf(sites, "d"), nullptr);
  EXPECT_EQ(SiteOf(sites, "d")->channels, 8);
  EXPECT_EQ(SiteOf(sites, "d")->AbsorberLabel(), "Conv 'depthwise'");
  ModelWeights w(&after);
  ASSERT_TRUE(ApplyChannelScales(*SiteOf(sites, "c1"), Factors(8, 8), &w).ok());
  ASSERT_TRUE(ApplyChannelScales(*SiteOf(sites, "d"), Factors(8, 9), &w).ok());
  w.DropUnread();
  ExpectSameFunction(before, after, "x", Random({1, 4, 6, 6}, 5));
}

TEST(ChannelScalingTest, GemmChainsWithBiasesAndAddedConstants) {
  testing::ModelBuilder b(13);
  b.Input("x", {4, 6})
      .Weight("W1", {5, 6}, 1)  // transB: [N, K].
      .Initializer("C1", {}, {0.25f})
      .Weight("shift", {5}, 2)
      .Weight("W2", {5, 3}, 3)
      .Weight("C2", {3}, 4);
  b.Node("Gemm", {"x", "W1", "C1"}, {"g1"}, "gemm1").Attr("transB", 1);
  b.Node("Add", {"g1", "shift"}, {"s1"}, "shift");
  b.Node("LeakyRelu", {"s1"}, {"r1"}, "leaky");
  b.Node("Gemm", {"r1", "W2", "C2"}, {"y"}, "gemm2");
  b.Output("y");
  const onnx::ModelProto before = b.Build();
  onnx::ModelProto after = before;
  std::vector<ScalingSite> sites = FindScalingSites(&after, 0);
  const ScalingSite* site = SiteOf(sites, "r1");
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->AbsorberLabel(), "Gemm 'gemm1'");
  EXPECT_THAT(site->chain, SizeIs(2));
  ModelWeights w(&after);
  ASSERT_TRUE(ApplyChannelScales(*site, Factors(5, 10), &w).ok());
  w.DropUnread();
  ExpectSameFunction(before, after, "x", Random({4, 6}, 6));
}

TEST(ChannelScalingTest, RefusesFactorsThatDoNotFit) {
  testing::ModelBuilder b(13);
  b.Input("x", {3, 8}).Weight("W", {8, 4}, 1);
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  b.Output("y");
  onnx::ModelProto m = b.Build();
  std::vector<ScalingSite> sites = FindScalingSites(&m, 0);
  ASSERT_THAT(sites, SizeIs(1));
  EXPECT_EQ(sites[0].absorber, nullptr);  // A graph input has no producer.
  ModelWeights w(&m);
  EXPECT_EQ(ApplyChannelScales(sites[0], {1.0, 2.0}, &w).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<double> bad(8, 1.0);
  bad[3] = 0;
  EXPECT_THAT(ApplyChannelScales(sites[0], bad, &w).status().message(),
              HasSubstr("factor"));
}

TEST(ChannelScalingTest, SmallReadersAreNoSite) {
  testing::ModelBuilder b(13);
  b.Input("x", {3, 8}).Weight("W", {8, 4}, 1);
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  b.Output("y");
  onnx::ModelProto m = b.Build();
  EXPECT_THAT(FindScalingSites(&m, 33), SizeIs(0));
  EXPECT_THAT(FindScalingSites(&m, 32), SizeIs(1));
}

TEST(ChannelScalingTest, ExtremesPerChannelOnEachAxis) {
  ChannelExtremes e;
  e.Track("nc", ChannelAxis::kSecond, 3);
  e.Track("last", ChannelAxis::kLast, 4);
  e.Track("first", ChannelAxis::kFirst, 2);
  const executor::Tensor nc = Random({2, 3, 5}, 1);
  const executor::Tensor last = Random({2, 3, 4}, 2);
  const executor::Tensor first = Random({2, 7}, 3);
  ASSERT_TRUE(e.Observe("nc", nc).ok());
  ASSERT_TRUE(e.Observe("last", last).ok());
  ASSERT_TRUE(e.Observe("first", first).ok());
  ASSERT_TRUE(e.Observe("other", first).ok());
  EXPECT_EQ(e.Find("other"), nullptr);
  // Written out with plain loops.
  auto check = [](const ChannelExtremes::Extremes* got,
                  const executor::Tensor& t, auto channel_of) {
    ASSERT_NE(got, nullptr);
    std::vector<float> lo(got->min.size(), 1e30f), hi(got->min.size(), -1e30f);
    for (int64_t i = 0; i < t.size(); ++i) {
      const int64_t c = channel_of(i);
      lo[c] = std::min(lo[c], t.data<float>()[i]);
      hi[c] = std::max(hi[c], t.data<float>()[i]);
    }
    EXPECT_EQ(got->min, lo);
    EXPECT_EQ(got->max, hi);
  };
  check(e.Find("nc"), nc, [](int64_t i) { return (i / 5) % 3; });
  check(e.Find("last"), last, [](int64_t i) { return i % 4; });
  check(e.Find("first"), first, [](int64_t i) { return i / 7; });
  EXPECT_TRUE(e.Observe("last", Random({2, 5}, 4)).ok());
  EXPECT_EQ(e.Find("last"), nullptr);  // Unusable from now on.
}

TEST(ChannelScalingTest, SmoothQuantScalesBalanceActivationsAndWeights) {
  const std::vector<double> act = {8.0, 0.5, 0.0, 2.0};
  const std::vector<double> wmax = {0.5, 2.0, 1.0, 0.0};
  const std::vector<double> s = SmoothQuantScales(act, wmax, 0.5);
  ASSERT_THAT(s, SizeIs(4));
  EXPECT_DOUBLE_EQ(s[0], std::sqrt(8.0) / std::sqrt(0.5));
  EXPECT_DOUBLE_EQ(s[1], std::sqrt(0.5) / std::sqrt(2.0));
  EXPECT_EQ(s[2], 1.0);  // A silent channel keeps its weights.
  EXPECT_EQ(s[3], 1.0);
  // With alpha 0.5 both sides end at sqrt(a * w).
  EXPECT_DOUBLE_EQ(act[0] / s[0], wmax[0] * s[0]);
  const std::vector<double> all_w = SmoothQuantScales(act, wmax, 1.0);
  EXPECT_DOUBLE_EQ(all_w[0], 8.0);
  const std::vector<double> none = SmoothQuantScales(act, wmax, 0.0);
  EXPECT_DOUBLE_EQ(none[0], 2.0);  // 1 / 0.5: only the weights flatten.
}

// x [rows, 4] -> MatMul W [4, 3]: the predicted noise written out for
// s = 1 and for other factors.
TEST(ChannelScalingTest, PredictedNoiseIsTheUniformRoundingModel) {
  testing::ModelBuilder b(13);
  b.Input("x", {2, 4})
      .Initializer("W", {4, 3},
                   {0.5f, -1.0f, 0.25f, 2.0f, 0.1f, -0.3f, 0.7f, 0.2f, 0.0f,
                    -0.4f, 0.9f, 1.5f});
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  b.Output("y");
  onnx::ModelProto m = b.Build();
  std::vector<ScalingSite> sites = FindScalingSites(&m, 0);
  ASSERT_THAT(sites, SizeIs(1));
  ChannelExtremes e;
  e.Track("x", ChannelAxis::kLast, 4);
  executor::Tensor x(onnx::TensorProto::FLOAT, {2, 4});
  const float xv[] = {8.0f, -0.5f, 1.0f, 0.25f, -2.0f, 0.5f, -1.0f, 0.75f};
  std::copy(xv, xv + 8, x.mutable_data<float>());
  ASSERT_TRUE(e.Observe("x", x).ok());
  QuantGrids grids;
  grids.min_elements = 0;
  ModelWeights w(&m);
  auto noise = SiteNoise::Create(sites[0], w, *e.Find("x"), grids);
  ASSERT_TRUE(noise.ok()) << noise.status();
  const float* wv = nullptr;
  std::vector<float> weights = Values(m, "W");
  wv = weights.data();
  for (const std::vector<double>& s :
       {std::vector<double>{1, 1, 1, 1}, std::vector<double>{4, 0.5, 2, 1}}) {
    // Activation: uint8 over [min(0, lo), max(0, hi)] of x / s.
    double lo = 0, hi = 0;
    for (int i = 0; i < 8; ++i) {
      lo = std::min(lo, xv[i] / s[i % 4]);
      hi = std::max(hi, xv[i] / s[i % 4]);
    }
    const double step = (hi - lo) / 255;
    double want = 0;
    for (int c = 0; c < 4; ++c) {
      // Clipping at s_c * hi and s_c * lo of a Gaussian with the channel's
      // mean square, by numerical integration.
      const double ms = (xv[c] * xv[c] + xv[4 + c] * xv[4 + c]) / 2;
      const double sigma = std::sqrt(ms);
      const float cmin = std::min(xv[c], xv[4 + c]);
      const float cmax = std::max(xv[c], xv[4 + c]);
      double clip = 0;
      const double dx = sigma * 1e-4;
      for (double t = -12 * sigma; t <= 12 * sigma; t += dx) {
        const double pdf =
            std::exp(-t * t / (2 * ms)) / (sigma * std::sqrt(2 * M_PI));
        if (cmax > 0 && t > s[c] * hi) {
          clip += std::pow(t - s[c] * hi, 2) * pdf * dx;
        }
        if (cmin < 0 && t < s[c] * lo) {
          clip += std::pow(t - s[c] * lo, 2) * pdf * dx;
        }
      }
      for (int o = 0; o < 3; ++o) {
        want += (step * step / 12 * s[c] * s[c] + clip) *
                std::pow(wv[c * 3 + o], 2);
      }
    }
    // Weights: int8 narrow per output column of W s.
    for (int o = 0; o < 3; ++o) {
      double wmax = 0, power = 0;
      for (int c = 0; c < 4; ++c) {
        wmax = std::max(wmax, std::fabs(wv[c * 3 + o] * s[c]));
        const double ms = (xv[c] * xv[c] + xv[4 + c] * xv[4 + c]) / 2;
        power += ms / (s[c] * s[c]);
      }
      want += std::pow(wmax / 127, 2) / 12 * power;
    }
    EXPECT_NEAR(noise->Predict(s), want, 1e-4 * want);
  }
}

TEST(ChannelScalingTest, ChooseSmoothingRescalesOnlyWhereItPays) {
  testing::ModelBuilder b(13);
  b.Input("x", {64, 8}).Weight("W", {8, 8}, 1);
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  b.Output("y");
  onnx::ModelProto m = b.Build();
  std::vector<ScalingSite> sites = FindScalingSites(&m, 0);
  ASSERT_THAT(sites, SizeIs(1));
  QuantGrids grids;
  grids.min_elements = 0;
  ModelWeights w(&m);
  for (bool outlier : {false, true}) {
    SCOPED_TRACE(outlier ? "outlier channel" : "even channels");
    ChannelExtremes e;
    e.Track("x", ChannelAxis::kLast, 8);
    executor::Tensor x(onnx::TensorProto::FLOAT, {64, 8});
    std::mt19937 gen(11);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < x.size(); ++i)
      x.mutable_data<float>()[i] = normal(gen);
    if (outlier) {
      for (int r = 0; r < 64; ++r) x.mutable_data<float>()[r * 8 + 5] *= 50;
    }
    ASSERT_TRUE(e.Observe("x", x).ok());
    auto choice = ChooseSmoothing(sites[0], w, *e.Find("x"), grids);
    ASSERT_TRUE(choice.ok()) << choice.status();
    if (outlier) {
      EXPECT_TRUE(choice->rescale);
      EXPECT_GT(choice->alpha, 0.0);
      EXPECT_LT(choice->noise, choice->noise_unscaled / 1.5);
    } else {
      // Factors that are nearly one common number change nothing much; the
      // choice never predicts more noise than leaving the value alone.
      EXPECT_LE(choice->noise, choice->noise_unscaled);
    }
  }
}

// A range ratio between the two layers of a pair, channel by channel.
std::vector<double> Ratios(const onnx::ModelProto& m) {
  onnx::ModelProto copy = m;
  std::vector<double> out;
  for (const ScalingSite& site : FindScalingSites(&copy, 0)) {
    if (!site.AbsorberIsLayer()) continue;
    ModelWeights w(&copy);
    const std::vector<double> r1 = *AbsorberChannelMax(site, w);
    const std::vector<double> r2 = *ReaderChannelMax(site, w);
    for (size_t c = 0; c < r1.size(); ++c) out.push_back(r1[c] / r2[c]);
  }
  return out;
}

TEST(ChannelScalingTest, EqualizeMatchesRangesAlongAChain) {
  testing::ModelBuilder b(13);
  b.Input("x", {1, 3, 8, 8})
      .Weight("W1", {6, 3, 3, 3}, 1)
      .Weight("W2", {6, 1, 3, 3}, 2)
      .Weight("W3", {4, 6, 1, 1}, 3);
  b.Node("Conv", {"x", "W1"}, {"c1"}, "conv1");
  b.Node("Relu", {"c1"}, {"r1"}, "relu1");
  b.Node("Conv", {"r1", "W2"}, {"c2"}, "dw").Attr("group", 6);
  b.Node("Relu", {"c2"}, {"r2"}, "relu2");
  b.Node("Conv", {"r2", "W3"}, {"y"}, "conv3");
  b.Output("y");
  onnx::ModelProto before = b.Build();
  // Uneven channels, as batch-norm folding leaves them.
  {
    onnx::TensorProto* w1 = before.mutable_graph()->mutable_initializer(0);
    std::vector<float> v = *graph::ReadFloatTensor(*w1);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] *= std::pow(4.0f, static_cast<int>(i / 27) - 2);
    *w1 = testing::ModelBuilder::FloatTensor("W1", {6, 3, 3, 3}, v);
  }
  onnx::ModelProto after = before;
  auto reports = EqualizeLayers(&after, 0);
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_THAT(*reports, SizeIs(2));
  for (const auto& r : *reports) {
    EXPECT_EQ(r.algorithm(), "equalize");
    EXPECT_GT(r.before(), 1.5);
    EXPECT_LT(r.after(), 1.01) << r.value();
    EXPECT_THAT(r.absorbed_by(), HasSubstr("Conv"));
  }
  for (double ratio : Ratios(after)) EXPECT_NEAR(ratio, 1.0, 0.01);
  ExpectSameFunction(before, after, "x", Random({1, 3, 8, 8}, 7));
}

}  // namespace
}  // namespace quantd::passes
