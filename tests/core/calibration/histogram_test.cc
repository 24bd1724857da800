#include "core/calibration/histogram.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace quantd::calibration {
namespace {

// A magnitude histogram of `values` (as the entropy observer builds it).
StreamingHistogram Magnitudes(const std::vector<float>& values, int bins) {
  StreamingHistogram h(bins);
  float max = 0.0f;
  for (float v : values) max = std::max(max, std::fabs(v));
  h.Extend(0.0f, max);
  h.AddAbs(values.data(), static_cast<int64_t>(values.size()));
  return h;
}

struct Shape {
  const char* name;
  int count;
  int bins;
  int quantized_bins;
};

// The prefix-sum search picks exactly the threshold of the bin-by-bin
// definition, on distributions of every kind the observers meet: bell
// shapes, ReLU outputs (half exact zeros), heavy tails with far outliers,
// and sparse histograms of a few hundred values over thousands of bins
// (where smoothing moves counts the most and the search falls back to the
// bin-by-bin sum).
TEST(EntropyThresholdTest, MatchesTheBinByBinDefinition) {
  std::mt19937 rng(11);
  const Shape shapes[] = {
      {"normal", 200000, 2048, 128}, {"relu", 100000, 2048, 128},
      {"cauchy", 50000, 2048, 128},  {"outliers", 100000, 2048, 128},
      {"sparse", 300, 2048, 128},    {"tiny", 20, 1024, 128},
      {"uniform", 30000, 512, 255},  {"normal_odd_bins", 40000, 3001, 100}};
  int cases = 0;
  for (const Shape& shape : shapes) {
    for (int trial = 0; trial < 6; ++trial) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::cauchy_distribution<float> cauchy(0.0f, 0.05f);
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      std::vector<float> x(shape.count);
      for (float& v : x) {
        const std::string name = shape.name;
        if (name == "relu") {
          v = std::max(0.0f, normal(rng));
        } else if (name == "cauchy") {
          v = std::clamp(cauchy(rng), -1e4f, 1e4f);
        } else if (name == "uniform") {
          v = uniform(rng);
        } else {
          v = normal(rng);
        }
      }
      if (std::string(shape.name) == "outliers") {
        for (int k = 0; k < 10; ++k) x[rng() % x.size()] = 40.0f + k;
      }
      const StreamingHistogram h = Magnitudes(x, shape.bins);
      EXPECT_EQ(EntropyThreshold(h, shape.quantized_bins),
                internal::EntropyThresholdBinByBin(h, shape.quantized_bins))
          << shape.name << " trial " << trial;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 48);
}

TEST(EntropyThresholdTest, EdgeCasesAgreeToo) {
  StreamingHistogram empty(2048);
  EXPECT_EQ(EntropyThreshold(empty, 128),
            internal::EntropyThresholdBinByBin(empty, 128));
  // Everything in one bin apart from one far value.
  std::vector<float> spike(5000, 0.5f);
  spike.push_back(100.0f);
  const StreamingHistogram h = Magnitudes(spike, 2048);
  EXPECT_EQ(EntropyThreshold(h, 128),
            internal::EntropyThresholdBinByBin(h, 128));
  // Exact zeros and a handful of values.
  std::vector<float> zeros(1000, 0.0f);
  for (int k = 1; k <= 7; ++k) zeros.push_back(static_cast<float>(k));
  const StreamingHistogram z = Magnitudes(zeros, 2048);
  EXPECT_EQ(EntropyThreshold(z, 128),
            internal::EntropyThresholdBinByBin(z, 128));
}

// Add and AddAbs count each value in the bin BinOf names, edges, values a
// rounding outside the range and every odd length included.
TEST(StreamingHistogramTest, CountsEachValueInTheBinBinOfNames) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-3.0f, 5.0f);
  for (int bins : {1, 7, 2048}) {
    for (int n : {1, 15, 1023, 1024, 1025, 5000}) {
      StreamingHistogram h(bins);
      h.Extend(-3.0f, 5.0f);
      StreamingHistogram magnitudes(bins);
      magnitudes.Extend(0.0f, 5.0f);
      std::vector<float> x(n);
      for (float& v : x) v = uniform(rng);
      x[0] = -3.0f;
      if (n > 2) x[1] = 5.0f;
      if (n > 3) x[2] = std::nextafter(5.0f, 6.0f);
      if (n > 4) x[3] = std::nextafter(-3.0f, -4.0f);
      if (n > 5) x[4] = 0.0f;
      h.Add(x.data(), n);
      magnitudes.AddAbs(x.data(), n);
      std::vector<int64_t> want(bins, 0), want_abs(bins, 0);
      for (float v : x) {
        ++want[h.BinOf(v)];
        ++want_abs[magnitudes.BinOf(std::fabs(v))];
      }
      EXPECT_EQ(h.counts(), want) << bins << " bins, " << n << " values";
      EXPECT_EQ(magnitudes.counts(), want_abs)
          << bins << " bins, " << n << " values";
      EXPECT_EQ(h.zeros(), n > 5 ? 1 : 0);
    }
  }
}

// Not a timing test (nothing here can fail on speed): prints the two
// searches' times on one 2048-bin histogram for the notes.
TEST(ThresholdErrorTest, ClippedBinsByTheirCentreTheRestByTheStep) {
  // Bins of width 1 over [0, 4] holding {0.2, 0.7, 2.4, 3.9}: counts
  // {2, 0, 1, 1}, centres 0.5 .. 3.5.
  StreamingHistogram h(4);
  h.Extend(0.0f, 4.0f);
  const std::vector<float> v = {0.2f, 0.7f, 2.4f, 3.9f};
  h.Add(v.data(), static_cast<int64_t>(v.size()));
  // t = 2: bins 2 and 3 clip by 0.5 and 1.5; bins 0 and 1 round with
  // step 0.5.
  EXPECT_DOUBLE_EQ(ThresholdError(h, 2.0, 0.5), 0.25 + 2.25 + 2 * 0.25 / 12.0);
  // Unclipped: only rounding, over all four values.
  EXPECT_DOUBLE_EQ(ThresholdError(h, 4.0, 1.0), 4 * 1.0 / 12.0);
  // A centre exactly at t is not clipped.
  EXPECT_DOUBLE_EQ(ThresholdError(h, 3.5, 0.0), 0.0);
}

TEST(EntropyThresholdTest, ReportsTheSpeedup) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(200000);
  for (float& v : x) v = normal(rng);
  const StreamingHistogram h = Magnitudes(x, 2048);
  auto time = [&](auto&& search) {
    const auto start = std::chrono::steady_clock::now();
    const double t = search(h, 128);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    return std::make_pair(t, ms);
  };
  const auto fast = time(EntropyThreshold);
  const auto slow = time(internal::EntropyThresholdBinByBin);
  EXPECT_EQ(fast.first, slow.first);
  std::printf("measured: 2048 bins, 128 quantized: %.2f ms vs %.2f ms\n",
              fast.second, slow.second);
}

}  // namespace
}  // namespace quantd::calibration
