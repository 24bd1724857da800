// Tests of core/numerics/range_search and ChooseParamsOver: with the search
// off, the searched quantizer is the reference quantizer; with it on, each
// group's integers are those of the range a plain candidate-by-candidate
// search written here picks, its scale keeps the group's projection, and the
// error stays below min/max's on heavy-tailed values.
#include "core/numerics/range_search.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::numerics {
namespace {

using ::testing::HasSubstr;

QuantSpec Spec(int bits, bool symmetric) {
  QuantSpec spec;
  spec.bits = bits;
  spec.symmetric = symmetric;
  spec.is_signed = true;
  spec.narrow_range = symmetric;
  return spec;
}

// Laplacian values (heavy tails: what clipping helps), some channels scaled
// up so channels differ.
std::vector<float> Weights(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> mag(20.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = sign(rng) ? mag(rng) : -mag(rng);
  return v;
}

// The slow reference: every candidate ratio tried in turn with
// ChooseQuantParams, QuantizeValue and DequantizeValue, the first least
// error kept.
QuantParams ReferenceSearch(const std::vector<float>& v, const QuantSpec& spec,
                            const RangeSearch& search) {
  float lo = 0.0f, hi = 0.0f;
  for (float x : v) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const QuantGrid grid = *GridFor(spec);
  QuantParams best = *ChooseQuantParams(lo, hi, spec);
  if (lo == 0.0f && hi == 0.0f) return best;
  auto error = [&](const QuantParams& p) {
    double sum = 0.0;
    for (float x : v) {
      const float d = x - DequantizeValue(QuantizeValue(x, p, grid), p);
      sum += static_cast<double>(d) * d;
    }
    return sum;
  };
  double best_error = error(best);
  for (int k = 1; k < search.steps; ++k) {
    const float ratio = 1.0f - (1.0f - search.min_ratio) /
                                   static_cast<float>(search.steps - 1) *
                                   static_cast<float>(k);
    const QuantParams p = *ChooseQuantParams(lo * ratio, hi * ratio, spec);
    const double e = error(p);
    if (e < best_error) {
      best_error = e;
      best = p;
    }
  }
  return best;
}

TEST(ChooseParamsOverTest, WithoutSearchItIsTheMinMaxParams) {
  const std::vector<float> v = {0.5f, -2.0f, 1.25f, 3.0f};
  for (const QuantSpec& spec : {Spec(8, true), Spec(4, true), Spec(4, false)}) {
    const QuantParams got = *ChooseParamsOver(v.data(), 4, 1, spec);
    const QuantParams want = *ChooseQuantParams(-2.0f, 3.0f, spec);
    EXPECT_EQ(got.scale, want.scale);
    EXPECT_EQ(got.zero_point, want.zero_point);
  }
  // Strided: every other value (0.5, 1.25): zero is still in the range.
  const QuantParams strided = *ChooseParamsOver(v.data(), 2, 2, Spec(8, true));
  EXPECT_EQ(strided.scale,
            ChooseQuantParams(0.0f, 1.25f, Spec(8, true))->scale);
}

TEST(ChooseParamsOverTest, SearchMatchesThePlainSearchAndNeverLoses) {
  for (const QuantSpec& spec : {Spec(4, true), Spec(4, false), Spec(8, true),
                                Spec(3, true), Spec(2, false)}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const std::vector<float> v = Weights(9 + 37 * seed, seed);
      const QuantParams got = *ChooseParamsOver(
          v.data(), static_cast<int64_t>(v.size()), 1, spec, kMseRangeSearch);
      const QuantParams want = ReferenceSearch(v, spec, kMseRangeSearch);
      EXPECT_EQ(got.scale, want.scale) << "seed " << seed;
      EXPECT_EQ(got.zero_point, want.zero_point) << "seed " << seed;
      EXPECT_LE(
          got.scale,
          ChooseParamsOver(v.data(), static_cast<int64_t>(v.size()), 1, spec)
              ->scale);
    }
  }
}

// A gradual tail (Laplacian) is clipped at 4 bits; one far outlier is not:
// clipping it would cost more than the finer grid saves on the rest (the
// clipped values' error counts too).
TEST(ChooseParamsOverTest, ClipsAGradualTailButNotALoneOutlier) {
  const QuantSpec spec = Spec(4, true);
  const std::vector<float> tail = Weights(256, 9);
  const QuantParams minmax = *ChooseParamsOver(tail.data(), 256, 1, spec);
  const QuantParams searched =
      *ChooseParamsOver(tail.data(), 256, 1, spec, kMseRangeSearch);
  EXPECT_LT(searched.scale, 0.95f * minmax.scale);

  std::vector<float> lone(64);
  for (size_t i = 0; i < lone.size(); ++i) {
    lone[i] = 0.01f * static_cast<float>(static_cast<int>(i % 9) - 4);
  }
  lone[17] = 1.0f;  // 25x the rest.
  EXPECT_EQ(ChooseParamsOver(lone.data(), 64, 1, spec, kMseRangeSearch)->scale,
            ChooseParamsOver(lone.data(), 64, 1, spec)->scale);
}

TEST(ChooseParamsOverTest, ZerosNaNAndInfinity) {
  const std::vector<float> zeros(16, 0.0f);
  EXPECT_EQ(
      ChooseParamsOver(zeros.data(), 16, 1, Spec(4, true), kMseRangeSearch)
          ->scale,
      1.0f);
  std::vector<float> v = Weights(16, 3);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  absl::StatusOr<QuantParams> p =
      ChooseParamsOver(v.data(), 16, 1, Spec(4, true), kMseRangeSearch);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("NaN"));
  v[5] = std::numeric_limits<float>::infinity();
  p = ChooseParamsOver(v.data(), 16, 1, Spec(4, true), kMseRangeSearch);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
}

struct Layout {
  std::vector<int64_t> shape;
  bool per_channel;
  int axis;
  int64_t block_size;
};

std::string Name(const Layout& l) {
  return absl::StrCat("[", absl::StrJoin(l.shape, ","),
                      "] per_channel=", l.per_channel, " axis=", l.axis,
                      " block=", l.block_size);
}

std::vector<Layout> Layouts() {
  return {{{64, 48}, false, -1, 0},   {{64, 48}, true, 1, 0},
          {{48, 64}, true, 0, 0},     {{16, 3, 3, 3}, true, 0, 0},
          {{8, 6, 5}, true, -1, 0},   {{64, 40}, false, 0, 16},
          {{100, 24}, false, 0, 32},  {{12, 20, 3, 3}, false, 1, 16},
          {{3, 50, 7}, false, 1, 16}, {{0, 8}, true, 1, 0}};
}

int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TEST(QuantizeSearchedAndMeasureTest, WithoutSearchItIsTheReferenceQuantizer) {
  for (const Layout& l : Layouts()) {
    for (const QuantSpec& spec :
         {Spec(8, true), Spec(4, true), Spec(4, false)}) {
      const std::vector<float> v = Weights(Count(l.shape), 7);
      absl::StatusOr<QuantizedWithError> got = QuantizeSearchedAndMeasure(
          v, l.shape, l.per_channel, l.axis, l.block_size, spec, RangeSearch());
      ASSERT_TRUE(got.ok()) << Name(l) << got.status();
      absl::StatusOr<QuantizedTensor> want =
          l.block_size > 0
              ? QuantizeTensorBlocked(v, l.shape, l.axis, l.block_size, spec)
              : QuantizeTensor(v, l.shape, l.per_channel, l.axis, spec);
      ASSERT_TRUE(want.ok()) << Name(l) << want.status();
      EXPECT_EQ(got->q.values, want->values) << Name(l);
      EXPECT_EQ(got->q.axis, want->axis) << Name(l);
      EXPECT_EQ(got->q.block_size, want->block_size) << Name(l);
      ASSERT_EQ(got->q.params.size(), want->params.size()) << Name(l);
      for (size_t i = 0; i < want->params.size(); ++i) {
        EXPECT_EQ(got->q.params[i].scale, want->params[i].scale) << Name(l);
        EXPECT_EQ(got->q.params[i].zero_point, want->params[i].zero_point);
      }
      const ErrorStats ref = MeasureError(v, DequantizeTensor(*want, l.shape));
      if (v.empty()) continue;
      EXPECT_NEAR(got->error.mse, ref.mse, 1e-9 * ref.mse) << Name(l);
      EXPECT_NEAR(got->error.sqnr_db, ref.sqnr_db, 1e-9) << Name(l);
    }
  }
}

TEST(QuantizeSearchedAndMeasureTest, EachGroupGetsItsSearchedRange) {
  for (const Layout& l : Layouts()) {
    const QuantSpec spec = Spec(4, true);
    const std::vector<float> v = Weights(Count(l.shape), 11);
    absl::StatusOr<QuantizedWithError> got = QuantizeSearchedAndMeasure(
        v, l.shape, l.per_channel, l.axis, l.block_size, spec, kMseRangeSearch);
    ASSERT_TRUE(got.ok()) << Name(l) << got.status();
    if (v.empty()) continue;
    // The values stand for what DequantizeTensor makes of them, and each
    // group's params are the plain search over that group's values.
    const std::vector<float> approx = DequantizeTensor(got->q, l.shape);
    ASSERT_EQ(approx.size(), v.size());
    const ErrorStats measured = MeasureError(v, approx);
    EXPECT_NEAR(got->error.mse, measured.mse, 1e-9 * measured.mse) << Name(l);
    // Gather each group as the reference quantizer lays out its params:
    // the params tensor's index of value i.
    const int rank = static_cast<int>(l.shape.size());
    const int axis = l.axis < 0 ? l.axis + rank : l.axis;
    int64_t inner = 1;
    for (int d = axis + 1; d < rank; ++d) inner *= l.shape[d];
    const int64_t channels = rank > 0 ? l.shape[axis] : 1;
    std::vector<std::vector<float>> groups(got->q.params.size());
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
      int64_t g = 0;
      if (l.block_size > 0) {
        const int64_t o = i / (channels * inner);
        const int64_t c = i / inner % channels;
        const int64_t blocks = (channels + l.block_size - 1) / l.block_size;
        g = (o * blocks + c / l.block_size) * inner + i % inner;
      } else if (l.per_channel) {
        g = i / inner % channels;
      }
      groups[g].push_back(v[i]);
    }
    const ErrorStats minmax = MeasureError(
        v, DequantizeTensor(
               *(l.block_size > 0
                     ? QuantizeTensorBlocked(v, l.shape, l.axis, l.block_size,
                                             spec)
                     : QuantizeTensor(v, l.shape, l.per_channel, l.axis, spec)),
               l.shape));
    // Each group's integers are its searched range's; its stored scale keeps
    // the projection: sum(x^2) / sum((q - z) x).
    const QuantGrid grid = *GridFor(spec);
    for (size_t g = 0; g < groups.size(); ++g) {
      const QuantParams searched =
          ReferenceSearch(groups[g], spec, kMseRangeSearch);
      double xx = 0, qx = 0;
      for (float x : groups[g]) {
        const double q = QuantizeValue(x, searched, grid) - searched.zero_point;
        xx += static_cast<double>(x) * x;
        qx += q * x;
      }
      const float want = qx > 0 ? static_cast<float>(xx / qx) : searched.scale;
      EXPECT_FLOAT_EQ(got->q.params[g].scale, want)
          << Name(l) << " group " << g;
      EXPECT_EQ(got->q.params[g].zero_point, searched.zero_point);
      // Dequantized, the group keeps its energy along the originals.
      double along = 0;
      for (float x : groups[g]) {
        along +=
            static_cast<double>(x) *
            DequantizeValue(QuantizeValue(x, searched, grid), got->q.params[g]);
      }
      EXPECT_NEAR(along, xx, 1e-5 * xx + 1e-12) << Name(l) << " group " << g;
    }
    EXPECT_LT(got->error.mse, minmax.mse) << Name(l);
  }
}

TEST(QuantizeSearchedAndMeasureTest, ThreadsDoNotChangeTheResult) {
  ThreadPool pool(2);
  const ParallelFor threads = [&pool](int64_t n,
                                      const std::function<void(int64_t)>& f) {
    pool.ParallelFor(n, f);
  };
  const std::vector<int64_t> shape = {256, 96};
  const std::vector<float> v = Weights(Count(shape), 5);
  for (int64_t block : {int64_t{0}, int64_t{32}}) {
    auto one =
        QuantizeSearchedAndMeasure(v, shape, true, block > 0 ? 0 : 1, block,
                                   Spec(4, true), kMseRangeSearch);
    auto two =
        QuantizeSearchedAndMeasure(v, shape, true, block > 0 ? 0 : 1, block,
                                   Spec(4, true), kMseRangeSearch, threads);
    ASSERT_TRUE(one.ok() && two.ok());
    EXPECT_EQ(one->q.values, two->q.values);
    EXPECT_EQ(one->error.mse, two->error.mse);
    EXPECT_EQ(one->error.sqnr_db, two->error.sqnr_db);
  }
}

TEST(QuantizeSearchedAndMeasureTest, RefusesWhatTheReferenceRefuses) {
  std::vector<float> v = Weights(12, 2);
  v[3] = std::numeric_limits<float>::quiet_NaN();
  auto nan = QuantizeSearchedAndMeasure(v, {3, 4}, true, 0, 0, Spec(4, true),
                                        kMseRangeSearch);
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nan.status().message(), HasSubstr("tensor holds NaN"));
  auto shape = QuantizeSearchedAndMeasure(Weights(12, 2), {5, 4}, true, 0, 0,
                                          Spec(4, true), kMseRangeSearch);
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  auto axis = QuantizeSearchedAndMeasure(Weights(12, 2), {3, 4}, true, 2, 0,
                                         Spec(4, true), kMseRangeSearch);
  EXPECT_EQ(axis.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::numerics
