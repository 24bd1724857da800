#include "core/numerics/awq.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::numerics {
namespace {

using ::testing::HasSubstr;

// Calibration rows x (samples x cols) where channel `loud` is 30 times
// larger than the others: the activation outlier AWQ protects.
std::vector<float> Inputs(int64_t samples, int64_t cols, int64_t loud,
                          uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(samples * cols);
  for (int64_t i = 0; i < samples; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      x[i * cols + c] = normal(gen) * (c == loud ? 30.0f : 1.0f);
    }
  }
  return x;
}

std::vector<float> Gram(const std::vector<float>& x, int64_t samples,
                        int64_t cols) {
  std::vector<float> h(cols * cols, 0.0f);
  for (int64_t i = 0; i < samples; ++i) {
    for (int64_t a = 0; a < cols; ++a) {
      for (int64_t b = 0; b < cols; ++b) {
        h[a * cols + b] += x[i * cols + a] * x[i * cols + b];
      }
    }
  }
  return h;
}

std::vector<float> RandomWeights(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> w(n);
  for (float& v : w) v = normal(gen);
  return w;
}

AwqMatrix Matrix(int64_t rows, int64_t cols, const std::vector<float>& x,
                 int64_t samples, uint32_t seed) {
  AwqMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.w = RandomWeights(rows * cols, seed);
  m.h = Gram(x, samples, cols);
  for (int64_t c = 0; c < cols; ++c) m.channel.push_back(c);
  return m;
}

QuantSpec Int4() {
  QuantSpec spec;
  spec.bits = 4;
  return spec;
}

// The layer's output error written plainly: scale the columns, round each
// row (or block, or the whole matrix) on its own grid, scale back, and run
// the calibration rows through both weights.
double SlowOutputError(const AwqMatrix& m, const std::vector<double>& s,
                       const QuantSpec& spec, const std::vector<float>& x,
                       int64_t samples) {
  const QuantGrid grid = *GridFor(spec);
  std::vector<float> scaled(m.w.size());
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      scaled[r * m.cols + c] =
          m.w[r * m.cols + c] * static_cast<float>(s[m.channel[c]]);
    }
  }
  auto params_over = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float lo = 0, hi = 0;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) {
        lo = std::min(lo, scaled[r * m.cols + c]);
        hi = std::max(hi, scaled[r * m.cols + c]);
      }
    }
    return *ChooseQuantParams(lo, hi, spec);
  };
  std::vector<float> back(m.w.size());
  const QuantParams whole = params_over(0, m.rows, 0, m.cols);
  const int64_t block = m.block_size > 0 ? m.block_size : m.cols;
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      const int64_t b0 = (c / block) * block;
      const QuantParams p =
          m.per_row ? params_over(r, r + 1, b0, std::min(b0 + block, m.cols))
                    : whole;
      back[r * m.cols + c] =
          DequantizeValue(QuantizeValue(scaled[r * m.cols + c], p, grid), p) /
          static_cast<float>(s[m.channel[c]]);
    }
  }
  double error = 0;
  for (int64_t i = 0; i < samples; ++i) {
    for (int64_t r = 0; r < m.rows; ++r) {
      double y = 0, yq = 0;
      for (int64_t c = 0; c < m.cols; ++c) {
        y += double{x[i * m.cols + c]} * m.w[r * m.cols + c];
        yq += double{x[i * m.cols + c]} * back[r * m.cols + c];
      }
      error += (y - yq) * (y - yq);
    }
  }
  return error;
}

TEST(AwqScalesTest, AlphaZeroIsNoRescale) {
  EXPECT_THAT(AwqScales({3.0, 0.5, 7.0}, 0.0),
              ::testing::ElementsAre(1.0, 1.0, 1.0));
}

TEST(AwqScalesTest, FollowTheMagnitudeAndStraddleOne) {
  const std::vector<double> s = AwqScales({4.0, 1.0, 16.0}, 0.5);
  ASSERT_EQ(s.size(), 3u);
  // sqrt(a): 2, 1, 4; divided by sqrt(4 * 1) = 2.
  EXPECT_NEAR(s[0], 1.0, 1e-12);
  EXPECT_NEAR(s[1], 0.5, 1e-12);
  EXPECT_NEAR(s[2], 2.0, 1e-12);
}

TEST(AwqScalesTest, SilentChannelsGetAFiniteFactor) {
  const std::vector<double> s = AwqScales({0.0, 1.0}, 1.0);
  for (double f : s) {
    EXPECT_GT(f, 0.0);
    EXPECT_TRUE(std::isfinite(f));
  }
  EXPECT_LT(s[0], s[1]);
}

struct LossCase {
  bool per_row;
  int64_t block_size;
};

class ScaledRoundingLossTest : public ::testing::TestWithParam<LossCase> {};

TEST_P(ScaledRoundingLossTest, EqualsTheOutputErrorOnTheInputs) {
  constexpr int64_t kRows = 12, kCols = 16, kSamples = 64;
  const std::vector<float> x = Inputs(kSamples, kCols, 5, 1);
  AwqMatrix m = Matrix(kRows, kCols, x, kSamples, 2);
  m.per_row = GetParam().per_row;
  m.block_size = GetParam().block_size;
  for (const std::vector<double>& s :
       {std::vector<double>(kCols, 1.0),
        AwqScales(std::vector<double>(
                      {1, 2, 3, 4, 5, 30, 1, 1, 2, 2, 3, 3, 1, 1, 1, 1}),
                  0.6)}) {
    const AwqLoss loss = *ScaledRoundingLoss(m, s, Int4());
    const double slow = SlowOutputError(m, s, Int4(), x, kSamples);
    EXPECT_NEAR(loss.error, slow, 1e-3 * slow);
    double energy = 0;
    for (int64_t i = 0; i < kSamples; ++i) {
      for (int64_t r = 0; r < kRows; ++r) {
        double y = 0;
        for (int64_t c = 0; c < kCols; ++c) {
          y += double{x[i * kCols + c]} * m.w[r * kCols + c];
        }
        energy += y * y;
      }
    }
    EXPECT_NEAR(loss.energy, energy, 1e-4 * energy);
  }
}

INSTANTIATE_TEST_SUITE_P(GridRules, ScaledRoundingLossTest,
                         ::testing::Values(LossCase{true, 0}, LossCase{true, 4},
                                           LossCase{false, 0}));

TEST(SearchAwqScalesTest, ProtectsALoudChannelAt4Bits) {
  constexpr int64_t kRows = 32, kCols = 64, kSamples = 256;
  const std::vector<float> x = Inputs(kSamples, kCols, 7, 3);
  std::vector<AwqMatrix> layers = {Matrix(kRows, kCols, x, kSamples, 4),
                                   Matrix(kRows / 2, kCols, x, kSamples, 5)};
  std::vector<double> magnitude(kCols, 1.0);
  magnitude[7] = 30.0;
  const AwqChoice choice = *SearchAwqScales(layers, magnitude, Int4(), 20);
  ASSERT_TRUE(choice.rescale);
  EXPECT_GT(choice.alpha, 0.0);
  EXPECT_LT(choice.error, 0.8 * choice.rtn_error);
  // The choice's error is what its factors give, summed over the layers.
  double error = 0, rtn = 0;
  for (const AwqMatrix& m : layers) {
    error += SlowOutputError(m, choice.s, Int4(), x, kSamples);
    rtn += SlowOutputError(m, std::vector<double>(kCols, 1.0), Int4(), x,
                           kSamples);
  }
  EXPECT_NEAR(choice.error, error, 1e-3 * error);
  EXPECT_NEAR(choice.rtn_error, rtn, 1e-3 * rtn);
}

// Noise the factors cause elsewhere (the value's own grid) is weighed with
// the weights' error: a large enough cost for leaving 1 keeps the weights.
TEST(SearchAwqScalesTest, WeighsTheExtraNoise) {
  constexpr int64_t kRows = 32, kCols = 64, kSamples = 256;
  const std::vector<float> x = Inputs(kSamples, kCols, 7, 3);
  AwqMatrix m = Matrix(kRows, kCols, x, kSamples, 4);
  m.samples = kSamples;
  std::vector<double> magnitude(kCols, 1.0);
  magnitude[7] = 30.0;
  const AwqChoice free = *SearchAwqScales({m}, magnitude, Int4(), 20);
  ASSERT_TRUE(free.rescale);
  EXPECT_NEAR(free.objective, free.error / kSamples, 1e-9 * free.objective);
  auto spread = [](absl::Span<const double> s) {
    double hi = 0;
    for (double f : s) hi = std::max(hi, f);
    return hi;
  };
  const AwqChoice costly = *SearchAwqScales(
      {m}, magnitude, Int4(), 20, [&](absl::Span<const double> s) {
        return spread(s) > 1.0 ? 10 * free.rtn_objective : 0.0;
      });
  EXPECT_FALSE(costly.rescale);
  EXPECT_EQ(costly.objective, costly.rtn_objective);
}

TEST(SearchAwqScalesTest, KeepsTheWeightsWhenNoFactorHelps) {
  // One column per row on its own grid: a factor scales the grid with the
  // weight, so every alpha rounds alike.
  AwqMatrix m;
  m.rows = 4;
  m.cols = 1;
  m.w = {0.3f, -0.2f, 0.05f, 0.7f};
  m.h = {2.0f};
  m.channel = {1};
  const AwqChoice choice =
      *SearchAwqScales({m}, std::vector<double>({1.0, 40.0}), Int4(), 10);
  EXPECT_FALSE(choice.rescale);
  EXPECT_EQ(choice.alpha, 0.0);
  EXPECT_TRUE(choice.s.empty());
  EXPECT_EQ(choice.error, choice.rtn_error);
}

// Blocks restart at every segment: with H = I and no rescale the loss is
// the weights' rounding error, each block rounded over exactly its columns
// (two segments of 20 columns in blocks of 8, 8 and 4).
TEST(ScaledRoundingLossSegmentsTest, BlocksRestartAtEverySegment) {
  const int64_t rows = 3, cols = 40;
  AwqMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.w = RandomWeights(rows * cols, 12);
  m.h.assign(cols * cols, 0.0f);
  for (int64_t c = 0; c < cols; ++c) {
    m.h[c * cols + c] = 1.0f;
    m.channel.push_back(c);
  }
  m.block_size = 8;
  m.segment = 20;
  const QuantGrid grid = *GridFor(Int4());
  const int64_t begins[7] = {0, 8, 16, 20, 28, 36, 40};
  double want = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int b = 0; b < 6; ++b) {
      float lo = 0, hi = 0;
      for (int64_t c = begins[b]; c < begins[b + 1]; ++c) {
        lo = std::min(lo, m.w[r * cols + c]);
        hi = std::max(hi, m.w[r * cols + c]);
      }
      const QuantParams p = *ChooseQuantParams(lo, hi, Int4());
      for (int64_t c = begins[b]; c < begins[b + 1]; ++c) {
        const double e =
            m.w[r * cols + c] -
            DequantizeValue(QuantizeValue(m.w[r * cols + c], p, grid), p);
        want += e * e;
      }
    }
  }
  absl::StatusOr<AwqLoss> got =
      ScaledRoundingLoss(m, std::vector<double>(cols, 1.0), Int4());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(got->error, want, 1e-6 * want);
  // A block longer than the whole row still restarts at every segment, as
  // the weight pass blocks a Conv of few input channels (3 x 9 taps in
  // blocks of 32: one block per tap): the same grid as blocks of 20 here.
  AwqMatrix per_segment = m;
  per_segment.block_size = 20;
  m.block_size = 64;
  const double long_blocks =
      ScaledRoundingLoss(m, std::vector<double>(cols, 1.0), Int4())->error;
  EXPECT_EQ(long_blocks,
            ScaledRoundingLoss(per_segment, std::vector<double>(cols, 1.0),
                               Int4())
                ->error);
  m.segment = 30;  // Does not divide the 40 columns.
  EXPECT_THAT(ScaledRoundingLoss(m, std::vector<double>(cols, 1.0), Int4())
                  .status()
                  .message(),
              HasSubstr("segments of 30"));
}

TEST(SearchAwqScalesTest, RefusesMatricesThatDoNotFit) {
  AwqMatrix m;
  m.rows = 2;
  m.cols = 2;
  m.w = {1, 2, 3, 4};
  m.h = {1, 0, 0};  // Not 2 x 2.
  m.channel = {0, 1};
  EXPECT_THAT(SearchAwqScales({m}, {1.0, 1.0}, Int4(), 4).status().message(),
              HasSubstr("an H of 3"));
  m.h = {1, 0, 0, 1};
  m.channel = {0, 2};
  EXPECT_THAT(SearchAwqScales({m}, {1.0, 1.0}, Int4(), 4).status().message(),
              HasSubstr("channel 2 of 2"));
  m.channel = {0, 1};
  EXPECT_FALSE(SearchAwqScales({m}, {1.0, 1.0}, Int4(), 0).ok());
  EXPECT_TRUE(SearchAwqScales({m}, {1.0, 1.0}, Int4(), 4).ok());
}

}  // namespace
}  // namespace quantd::numerics
