#include "core/numerics/gptq.h"

#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::numerics {
namespace {

using ::testing::HasSubstr;

// Calibration inputs with correlated features (what makes GPTQ differ from
// plain rounding): x = z A with z standard normal and A a random mixing.
std::vector<float> CorrelatedH(int64_t cols, int64_t samples, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> mix(cols * cols);
  for (float& v : mix) v = normal(gen);
  std::vector<double> h(cols * cols, 0.0);
  std::vector<float> z(cols), x(cols);
  for (int64_t s = 0; s < samples; ++s) {
    for (float& v : z) v = normal(gen);
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < cols; ++k) acc += z[k] * mix[k * cols + j];
      x[j] = static_cast<float>(acc);
    }
    for (int64_t a = 0; a < cols; ++a) {
      for (int64_t b = 0; b < cols; ++b) h[a * cols + b] += x[a] * x[b];
    }
  }
  return std::vector<float>(h.begin(), h.end());
}

std::vector<float> RandomWeights(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> w(n);
  for (float& v : w) v = normal(gen);
  return w;
}

// Gauss-Jordan inverse of a small SPD matrix, written out.
std::vector<double> Inverse(std::vector<double> m, int64_t n) {
  std::vector<double> inv(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) inv[i * n + i] = 1.0;
  for (int64_t p = 0; p < n; ++p) {
    const double pivot = m[p * n + p];
    for (int64_t j = 0; j < n; ++j) {
      m[p * n + j] /= pivot;
      inv[p * n + j] /= pivot;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (i == p) continue;
      const double f = m[i * n + p];
      for (int64_t j = 0; j < n; ++j) {
        m[i * n + j] -= f * m[p * n + j];
        inv[i * n + j] -= f * inv[p * n + j];
      }
    }
  }
  return inv;
}

// The Optimal Brain Surgeon step GPTQ computes, done the slow way: before
// rounding column i, invert the damped H restricted to the columns not yet
// rounded (i..cols-1), round column i, and move every later column by
// -(w_i - q_i) / Hinv[i,i] * Hinv[i, j]. Per-channel parameters from the
// original rows.
std::vector<int32_t> SlowGptq(const std::vector<float>& w, int64_t rows,
                              int64_t cols, const std::vector<float>& h,
                              const QuantSpec& spec, double dampening) {
  const QuantGrid grid = *GridFor(spec);
  double mean = 0;
  for (int64_t i = 0; i < cols; ++i) mean += h[i * cols + i];
  mean /= static_cast<double>(cols);
  std::vector<double> work(w.begin(), w.end());
  std::vector<QuantParams> params;
  for (int64_t r = 0; r < rows; ++r) {
    float lo = 0, hi = 0;
    for (int64_t c = 0; c < cols; ++c) {
      lo = std::min(lo, w[r * cols + c]);
      hi = std::max(hi, w[r * cols + c]);
    }
    params.push_back(*ChooseQuantParams(lo, hi, spec));
  }
  std::vector<int32_t> q(rows * cols);
  for (int64_t i = 0; i < cols; ++i) {
    const int64_t n = cols - i;
    std::vector<double> sub(n * n);
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        sub[a * n + b] =
            0.5 * (h[(i + a) * cols + i + b] + h[(i + b) * cols + i + a]) +
            (a == b ? dampening * mean : 0.0);
      }
    }
    const std::vector<double> inv = Inverse(sub, n);
    for (int64_t r = 0; r < rows; ++r) {
      const float v = static_cast<float>(work[r * cols + i]);
      q[r * cols + i] = QuantizeValue(v, params[r], grid);
      const double e =
          (work[r * cols + i] - DequantizeValue(q[r * cols + i], params[r])) /
          inv[0];
      for (int64_t j = 1; j < n; ++j) work[r * cols + i + j] -= e * inv[j];
    }
  }
  return q;
}

TEST(GptqTest, MatchesTheColumnByColumnSolve) {
  const int64_t rows = 6, cols = 24;
  const std::vector<float> h = CorrelatedH(cols, 200, 1);
  const std::vector<float> w = RandomWeights(rows * cols, 2);
  for (int bits : {4, 8}) {
    QuantSpec spec;
    spec.bits = bits;
    GptqOptions options;
    options.lazy_block = 5;  // Several lazy blocks, one not full.
    absl::StatusOr<GptqResult> got =
        GptqQuantize(w, rows, cols, h, spec, GptqBlocking{}, options);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<int32_t> want =
        SlowGptq(w, rows, cols, h, spec, options.dampening);
    int same = 0;
    for (size_t i = 0; i < want.size(); ++i) same += got->values[i] == want[i];
    // Float rounding may tip a value that sits on a rounding boundary.
    EXPECT_GE(same, static_cast<int>(want.size()) - 2) << "bits " << bits;
  }
}

TEST(GptqTest, BeatsRoundToNearestOnCorrelatedInputs) {
  const int64_t rows = 32, cols = 64;
  const std::vector<float> h = CorrelatedH(cols, 400, 3);
  const std::vector<float> w = RandomWeights(rows * cols, 4);
  QuantSpec spec;
  spec.bits = 4;
  for (bool act_order : {false, true}) {
    for (int64_t block : {int64_t{0}, int64_t{16}}) {
      GptqOptions options;
      options.act_order = act_order;
      absl::StatusOr<GptqResult> got =
          GptqQuantize(w, rows, cols, h, spec, GptqBlocking{block}, options);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_GT(got->output_sqnr_db, got->rtn_output_sqnr_db + 2.0)
          << "act_order " << act_order << " block " << block;
      EXPECT_EQ(got->params.size(),
                static_cast<size_t>(rows * (block > 0 ? cols / block : 1)));
      for (int32_t v : got->values) {
        EXPECT_GE(v, -7);
        EXPECT_LE(v, 7);
      }
    }
  }
}

// options.range: each row's (and each static block's) params are
// ChooseParamsOver's searched ones over the original weights.
TEST(GptqTest, RangeSearchChoosesEachRowsParams) {
  const int64_t rows = 8, cols = 48;
  const std::vector<float> h = CorrelatedH(cols, 300, 5);
  const std::vector<float> w = RandomWeights(rows * cols, 6);
  QuantSpec spec;
  spec.bits = 4;
  for (bool act_order : {false, true}) {
    GptqOptions options;
    options.range = kMseRangeSearch;
    options.act_order = act_order;
    const int64_t block = act_order ? 16 : 0;
    absl::StatusOr<GptqResult> got =
        GptqQuantize(w, rows, cols, h, spec, GptqBlocking{block}, options);
    ASSERT_TRUE(got.ok()) << got.status();
    const int64_t per_row = block > 0 ? cols / block : 1;
    ASSERT_EQ(got->params.size(), static_cast<size_t>(rows * per_row));
    int clipped = 0;  // Groups whose searched range is not min/max's.
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < per_row; ++b) {
        const int64_t len = block > 0 ? block : cols;
        const float* v = &w[r * cols + b * len];
        const QuantParams want =
            *ChooseParamsOver(v, len, 1, spec, kMseRangeSearch);
        EXPECT_EQ(got->params[r * per_row + b].scale, want.scale)
            << "row " << r << " block " << b << " act_order " << act_order;
        clipped += want.scale < ChooseParamsOver(v, len, 1, spec)->scale;
      }
    }
    EXPECT_GT(clipped, 0);
  }
}

TEST(GptqTest, OutputSqnrIsTheLayerLossOnTheInputs) {
  // With H = I the layer loss is the weight error itself: GPTQ has nothing
  // to trade and rounds to nearest.
  const int64_t rows = 4, cols = 8;
  std::vector<float> h(cols * cols, 0.0f);
  for (int64_t i = 0; i < cols; ++i) h[i * cols + i] = 1.0f;
  const std::vector<float> w = RandomWeights(rows * cols, 5);
  QuantSpec spec;
  spec.bits = 3;
  GptqOptions options;
  options.dampening = 0;
  absl::StatusOr<GptqResult> got =
      GptqQuantize(w, rows, cols, h, spec, GptqBlocking{}, options);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(got->output_sqnr_db, got->rtn_output_sqnr_db, 1e-9);
  double signal = 0, noise = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = w[r * cols + c];
      const float back =
          DequantizeValue(got->values[r * cols + c], got->params[r]);
      signal += v * v;
      noise += (v - back) * (v - back);
    }
  }
  EXPECT_NEAR(got->output_sqnr_db, 10 * std::log10(signal / noise), 1e-3);
}

// Blocks restart at every segment: with H = I GPTQ moves nothing, so each
// value is its block's rounding, the block's parameters taken over exactly
// its columns (two segments of 20 columns in blocks of 8, 8 and 4).
TEST(GptqTest, BlocksRestartAtEverySegment) {
  const int64_t rows = 3, segment = 20, cols = 2 * segment, size = 8;
  std::vector<float> h(cols * cols, 0.0f);
  for (int64_t i = 0; i < cols; ++i) h[i * cols + i] = 1.0f;
  const std::vector<float> w = RandomWeights(rows * cols, 9);
  QuantSpec spec;
  spec.bits = 4;
  for (bool act_order : {false, true}) {
    GptqOptions options;
    options.act_order = act_order;
    absl::StatusOr<GptqResult> got = GptqQuantize(
        w, rows, cols, h, spec, GptqBlocking{size, segment}, options);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->params.size(), static_cast<size_t>(rows * 6));
    const QuantGrid grid = *GridFor(spec);
    const int64_t begins[6] = {0, 8, 16, 20, 28, 36};
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < 6; ++b) {
        const int64_t end = b == 5 ? cols : begins[b + 1];
        float lo = 0, hi = 0;
        for (int64_t c = begins[b]; c < end; ++c) {
          lo = std::min(lo, w[r * cols + c]);
          hi = std::max(hi, w[r * cols + c]);
        }
        const QuantParams want = *ChooseQuantParams(lo, hi, spec);
        const QuantParams& p = got->params[r * 6 + b];
        EXPECT_EQ(p.scale, want.scale) << r << "," << b;
        for (int64_t c = begins[b]; c < end; ++c) {
          EXPECT_EQ(got->values[r * cols + c],
                    QuantizeValue(w[r * cols + c], want, grid))
              << r << "," << c;
        }
      }
    }
    EXPECT_NEAR(got->output_sqnr_db, got->rtn_output_sqnr_db, 1e-9);
  }
}

TEST(GptqTest, DeadInputsRoundToNearestAndPassNoError) {
  const int64_t rows = 3, cols = 6;
  std::vector<float> h = CorrelatedH(cols, 50, 6);
  for (int64_t j = 0; j < cols; ++j) {  // Input 2 was always zero.
    h[2 * cols + j] = 0;
    h[j * cols + 2] = 0;
  }
  const std::vector<float> w = RandomWeights(rows * cols, 7);
  QuantSpec spec;
  spec.bits = 4;
  absl::StatusOr<GptqResult> got =
      GptqQuantize(w, rows, cols, h, spec, GptqBlocking{}, GptqOptions());
  ASSERT_TRUE(got.ok()) << got.status();
  const QuantGrid grid = *GridFor(spec);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(got->values[r * cols + 2],
              QuantizeValue(w[r * cols + 2], got->params[r], grid));
  }
}

TEST(GptqTest, IndefiniteStatisticsAreDampedUntilTheyFactor) {
  // Rank one: x is always a multiple of (1, 1, 1, 1).
  const int64_t cols = 4;
  std::vector<float> h(cols * cols, 1.0f);
  const std::vector<float> w = RandomWeights(2 * cols, 8);
  GptqOptions options;
  options.dampening = 0;
  absl::StatusOr<GptqResult> got =
      GptqQuantize(w, 2, cols, h, QuantSpec(), GptqBlocking{}, options);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->dampening, 0);
}

TEST(GptqTest, RefusesBadInputs) {
  const std::vector<float> h(4, 1.0f);
  EXPECT_THAT(GptqQuantize({1, 2, 3}, 2, 2, h, QuantSpec(), GptqBlocking{},
                           GptqOptions())
                  .status()
                  .message(),
              HasSubstr("rows x cols"));
  EXPECT_THAT(GptqQuantize({1, NAN, 3, 4}, 2, 2, h, QuantSpec(), GptqBlocking{},
                           GptqOptions())
                  .status()
                  .message(),
              HasSubstr("NaN"));
  EXPECT_THAT(GptqQuantize({1, 2, 3, 4}, 2, 2, {1, 0, 0, INFINITY}, QuantSpec(),
                           GptqBlocking{}, GptqOptions())
                  .status()
                  .message(),
              HasSubstr("overflowed"));
  QuantSpec bad;
  bad.bits = 9;
  EXPECT_FALSE(
      GptqQuantize({1, 2, 3, 4}, 2, 2, h, bad, GptqBlocking{}, GptqOptions())
          .ok());
  EXPECT_FALSE(GptqQuantize({1, 2, 3, 4}, 2, 2, h, QuantSpec(),
                            GptqBlocking{-1}, GptqOptions())
                   .ok());
  // A segment that does not divide the row.
  EXPECT_THAT(GptqQuantize({1, 2, 3, 4}, 2, 2, h, QuantSpec(),
                           GptqBlocking{1, 3}, GptqOptions())
                  .status()
                  .message(),
              HasSubstr("segments of 3"));
}

}  // namespace
}  // namespace quantd::numerics
