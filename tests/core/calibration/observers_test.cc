// Tests of core/calibration: golden ranges from torch and from numpy
// re-implementations of the TF formulas and histogram searches
// (tests/data/calibration, written by scripts/make_observer_golden.py), and
// hand-computed cases.
#include "core/calibration/observers.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/thread_pool.h"
#include "core/calibration/histogram.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace quantd::calibration {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::unique_ptr<Observer> Make(const ObserverConfig& config) {
  absl::StatusOr<std::unique_ptr<Observer>> o = MakeObserver(config);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? std::move(*o) : nullptr;
}

ObserverConfig Config(const std::string& method) {
  ObserverConfig c;
  c.method = method;
  return c;
}

// ---------------------------------------------------------------------------
// Batch generator shared with the script: splitmix64 -> 24-bit uniforms ->
// ((u0 + u1) + u2) + u3 - 2, in float32 (no libm, bit-identical to numpy).

struct DataSpec {
  uint64_t seed = 0;
  std::vector<int64_t> shape;
  int batches = 0;
  std::vector<float> scale, offset, gain;
  int64_t outlier_every = 0;
  float outlier = 0.0f;
  int outlier_from = 0;
};

uint64_t SplitMix(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<std::vector<float>> GenerateBatches(const DataSpec& s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  int64_t inner = 1;
  for (size_t i = 2; i < s.shape.size(); ++i) inner *= s.shape[i];
  const int64_t channels = s.shape[1];
  std::vector<std::vector<float>> out;
  for (int b = 0; b < s.batches; ++b) {
    const uint64_t seed = s.seed + 7919ull * b;
    std::vector<float> v(n);
    for (int64_t e = 0; e < n; ++e) {
      float u[4];
      for (int j = 0; j < 4; ++j) {
        u[j] = static_cast<float>(SplitMix(seed, 4 * e + j) >> 40) *
               (1.0f / 16777216.0f);
      }
      float x = ((u[0] + u[1]) + u[2]) + u[3] - 2.0f;
      x = (x * s.scale[b]) * s.gain[(e / inner) % channels] + s.offset[b];
      if (s.outlier_every > 0 && b >= s.outlier_from &&
          e % s.outlier_every == 0) {
        x = ((e / s.outlier_every) % 2 == 0 ? 1.0f : -1.0f) * s.outlier;
      }
      v[e] = x;
    }
    out.push_back(std::move(v));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Golden files.

float F(absl::string_view s) {
  float v = kNaN;
  EXPECT_TRUE(absl::SimpleAtof(s, &v)) << "bad float '" << s << "'";
  return v;
}
double D(absl::string_view s) {
  double v = kNaN;
  EXPECT_TRUE(absl::SimpleAtod(s, &v)) << "bad double '" << s << "'";
  return v;
}
int64_t I(absl::string_view s) {
  int64_t v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(s, &v)) << "bad int '" << s << "'";
  return v;
}
std::vector<float> Floats(absl::string_view csv) {
  std::vector<float> out;
  for (absl::string_view t : absl::StrSplit(csv, ',')) out.push_back(F(t));
  return out;
}

struct GoldenCase {
  std::string name;
  ObserverConfig config;
  DataSpec data;
  float min = kNaN, max = kNaN;
  std::vector<float> channel_min, channel_max;
  int kept_observed_range = -1;  // -1: not recorded (not entropy).
};

std::vector<GoldenCase> ReadGoldens(const std::string& file) {
  const std::string text = quantd::testing::ReadFileOrDie(
      quantd::testing::SourcePath("tests/data/calibration/" + file));
  std::vector<GoldenCase> cases;
  GoldenCase c;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> t = absl::StrSplit(line, ' ', absl::SkipEmpty());
    const std::string& key = t[0];
    if (key == "case") {
      c = GoldenCase();
      c.name = t.at(1);
    } else if (key == "config") {
      ObserverConfig& o = c.config;
      for (size_t i = 1; i + 1 < t.size(); i += 2) {
        const std::string& k = t[i];
        const std::string& v = t[i + 1];
        if (k == "method")
          o.method = v;
        else if (k == "bits")
          o.bits = static_cast<int>(I(v));
        else if (k == "symmetric")
          o.symmetric = I(v) != 0;
        else if (k == "narrow")
          o.narrow_range = I(v) != 0;
        else if (k == "ema_decay")
          o.ema_decay = D(v);
        else if (k == "zero_debias")
          o.zero_debias = I(v) != 0;
        else if (k == "init_min")
          o.init_min = F(v);
        else if (k == "init_max")
          o.init_max = F(v);
        else if (k == "quant_delay")
          o.quant_delay = I(v);
        else if (k == "percentile")
          o.percentile = D(v);
        else if (k == "num_bins")
          o.num_bins = static_cast<int>(I(v));
        else if (k == "nq")
          o.num_quantized_bins = static_cast<int>(I(v));
        else if (k == "per_channel")
          o.per_channel = I(v) != 0;
        else if (k == "axis")
          o.axis = static_cast<int>(I(v));
        else
          ADD_FAILURE() << file << ": unknown config key " << k;
      }
    } else if (key == "data") {
      DataSpec& d = c.data;
      for (size_t i = 1; i < t.size(); ++i) {
        const std::string& k = t[i];
        if (k == "seed") {
          d.seed = static_cast<uint64_t>(I(t.at(++i)));
        } else if (k == "shape") {
          while (i + 1 < t.size() && absl::ascii_isdigit(t[i + 1][0])) {
            d.shape.push_back(I(t[++i]));
          }
        } else if (k == "batches") {
          d.batches = static_cast<int>(I(t.at(++i)));
        } else if (k == "scale") {
          d.scale = Floats(t.at(++i));
        } else if (k == "offset") {
          d.offset = Floats(t.at(++i));
        } else if (k == "gain") {
          d.gain = Floats(t.at(++i));
        } else if (k == "outlier_every") {
          d.outlier_every = I(t.at(++i));
        } else if (k == "outlier") {
          d.outlier = F(t.at(++i));
        } else if (k == "outlier_from") {
          d.outlier_from = static_cast<int>(I(t.at(++i)));
        } else {
          ADD_FAILURE() << file << ": unknown data key " << k;
        }
      }
    } else if (key == "result") {
      c.min = F(t.at(1));
      c.max = F(t.at(2));
    } else if (key == "channel_min" || key == "channel_max") {
      std::vector<float>& dst =
          key == "channel_min" ? c.channel_min : c.channel_max;
      for (size_t i = 1; i < t.size(); ++i) dst.push_back(F(t[i]));
    } else if (key == "kept_observed_range") {
      c.kept_observed_range = static_cast<int>(I(t.at(1)));
    } else if (key == "end") {
      cases.push_back(c);
    } else {
      ADD_FAILURE() << file << ": unknown record " << key;
    }
  }
  EXPECT_FALSE(cases.empty()) << file << " holds no cases";
  return cases;
}

// Feeds a golden case's batches and compares bit for bit.
void CheckGolden(const GoldenCase& g) {
  SCOPED_TRACE(g.name);
  std::unique_ptr<Observer> o = Make(g.config);
  ASSERT_NE(o, nullptr);
  for (const std::vector<float>& batch : GenerateBatches(g.data)) {
    ASSERT_TRUE(o->Observe(batch, g.data.shape).ok());
  }
  const ObserverResult r = o->Result();
  EXPECT_EQ(r.batch_count, g.data.batches);
  EXPECT_EQ(r.min, g.min);
  EXPECT_EQ(r.max, g.max);
  if (g.kept_observed_range >= 0) {
    EXPECT_EQ(r.kept_observed_range, g.kept_observed_range == 1);
  } else {
    EXPECT_FALSE(r.kept_observed_range);
  }
  if (g.config.per_channel) {
    EXPECT_EQ(r.axis, 1);
    ASSERT_EQ(r.channel_min.size(), g.channel_min.size());
    ASSERT_EQ(r.channel_max.size(), g.channel_max.size());
    for (size_t c = 0; c < g.channel_min.size(); ++c) {
      EXPECT_EQ(r.channel_min[c], g.channel_min[c]) << "channel " << c;
      EXPECT_EQ(r.channel_max[c], g.channel_max[c]) << "channel " << c;
    }
  } else {
    EXPECT_EQ(r.axis, -1);
    EXPECT_TRUE(r.channel_min.empty());
  }
}

TEST(ObserverGoldenTest, TorchMinMaxAndMovingAverage) {
  for (const GoldenCase& g : ReadGoldens("torch_minmax.txt")) CheckGolden(g);
}

TEST(ObserverGoldenTest, TfMovingAverageAndLastValue) {
  for (const GoldenCase& g : ReadGoldens("tf_ema.txt")) CheckGolden(g);
}

TEST(ObserverGoldenTest, HistogramMethods) {
  for (const GoldenCase& g : ReadGoldens("histogram.txt")) CheckGolden(g);
}

// The generator itself: a few values computed by hand from splitmix64's
// published first output for seed 0 (0xE220A8397B1DCDAF).
TEST(ObserverGoldenTest, GeneratorMatchesSplitMix64) {
  EXPECT_EQ(SplitMix(0, 0), 0xE220A8397B1DCDAFull);
}

// ---------------------------------------------------------------------------
// Hand-computed cases.

const std::vector<int64_t> kFlat = {4};

TEST(MovingAverageTest, FirstUpdateIsFirstBatchRangeExactlyWhenArithmeticIs) {
  ObserverConfig c = Config("moving_average");
  c.ema_decay = 0.75;  // d = 0.25, 1 - 0.75^t: all exact in float.
  std::unique_ptr<Observer> o = Make(c);
  ASSERT_TRUE(o->Observe({-1.0f, 0.5f, 2.0f, 1.0f}, kFlat).ok());
  ObserverResult r = o->Result();
  EXPECT_EQ(r.min, -1.0f);
  EXPECT_EQ(r.max, 2.0f);
  // Second batch [-3, 4]: (d * decay * v1 + d * v2) / (1 - decay^2).
  ASSERT_TRUE(o->Observe({-3.0f, 4.0f, 0.0f, 0.0f}, kFlat).ok());
  r = o->Result();
  EXPECT_FLOAT_EQ(r.max, (0.25f * 0.75f * 2.0f + 0.25f * 4.0f) / 0.4375f);
  EXPECT_FLOAT_EQ(r.max, 22.0f / 7.0f);
  EXPECT_FLOAT_EQ(r.min, (0.25f * 0.75f * -1.0f + 0.25f * -3.0f) / 0.4375f);
  EXPECT_EQ(r.batch_count, 2);
}

TEST(MovingAverageTest, DefaultDecayFirstUpdateWithinFloat32Debias) {
  // TF computes 1 - (1 - d) in float32, which is not d exactly: with decay
  // 0.999 the first debiased value is v * 1.0000129 rather than v.
  std::unique_ptr<Observer> o = Make(Config("moving_average"));
  ASSERT_TRUE(o->Observe({-1.5f, 0.5f, 2.5f, 1.0f}, kFlat).ok());
  const ObserverResult r = o->Result();
  EXPECT_NEAR(r.min, -1.5f, 1.5f * 2e-5f);
  EXPECT_NEAR(r.max, 2.5f, 2.5f * 2e-5f);
  EXPECT_NE(r.max, 2.5f);  // The float32 artefact is really there.
}

TEST(MovingAverageTest, RangesIncludeZeroBeforeAveraging) {
  ObserverConfig c = Config("moving_average");
  c.ema_decay = 0.5;
  std::unique_ptr<Observer> o = Make(c);
  // [1, 3] -> [0, 3]; then [2, 5] -> [0, 5]; EMA of max: (0.5*0.5*3 +
  // 0.5*5) / 0.75.
  ASSERT_TRUE(o->Observe({1.0f, 2.0f, 3.0f, 1.5f}, kFlat).ok());
  ASSERT_TRUE(o->Observe({2.0f, 5.0f, 3.0f, 4.0f}, kFlat).ok());
  const ObserverResult r = o->Result();
  EXPECT_EQ(r.min, 0.0f);
  EXPECT_FLOAT_EQ(r.max, (0.75f + 2.5f) / 0.75f);
}

TEST(MovingAverageTest, TorchStyleWithoutDebias) {
  ObserverConfig c = Config("moving_average");
  c.zero_debias = false;
  c.ema_decay = 0.75;
  std::unique_ptr<Observer> o = Make(c);
  ASSERT_TRUE(o->Observe({-1.0f, 2.0f, 0.0f, 0.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().max, 2.0f);  // The first batch sets the range.
  ASSERT_TRUE(o->Observe({-3.0f, 4.0f, 0.0f, 0.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().max, 2.0f + 0.25f * (4.0f - 2.0f));
  EXPECT_EQ(o->Result().min, -1.0f + 0.25f * (-3.0f + 1.0f));
}

TEST(ObserverTest, InitRangeBeforeAnyBatch) {
  for (const char* m : kObserverMethods) {
    ObserverConfig c = Config(m);
    c.init_min = -6.0f;
    c.init_max = 6.0f;
    c.per_channel = true;
    std::unique_ptr<Observer> o = Make(c);
    const ObserverResult r = o->Result();
    EXPECT_EQ(r.min, -6.0f) << m;
    EXPECT_EQ(r.max, 6.0f) << m;
    EXPECT_EQ(r.batch_count, 0) << m;
    EXPECT_TRUE(r.channel_min.empty()) << m;
  }
  // The moving average starts from the batch, not from init (zero debias).
  ObserverConfig c = Config("moving_average");
  c.ema_decay = 0.5;
  c.init_min = -6.0f;
  c.init_max = 6.0f;
  std::unique_ptr<Observer> o = Make(c);
  ASSERT_TRUE(o->Observe({-1.0f, 1.0f, 0.0f, 0.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().min, -1.0f);
  EXPECT_EQ(o->Result().max, 1.0f);
}

TEST(ObserverTest, QuantDelayCountsBatchesAsTfContrib) {
  ObserverConfig c = Config("moving_average");
  c.quant_delay = 3;
  c.ema_decay = 0.5;
  std::unique_ptr<Observer> o = Make(c);
  EXPECT_FALSE(o->quantize_active());
  for (int t = 1; t <= 4; ++t) {
    const float v = static_cast<float>(t);
    ASSERT_TRUE(o->Observe({-v, v, 0.0f, 0.0f}, kFlat).ok());
    // Batch t (1-based) is quantized iff t >= quant_delay.
    EXPECT_EQ(o->quantize_active(), t >= 3) << "batch " << t;
    EXPECT_EQ(o->Result().quantize_active, t >= 3) << "batch " << t;
    EXPECT_GT(o->Result().max, 0.0f);  // Ranges update during the delay.
  }
  EXPECT_TRUE(Make(Config("min_max"))->quantize_active());  // No delay.
}

TEST(LastValueTest, EachBatchReplacesTheRange) {
  std::unique_ptr<Observer> o = Make(Config("last_value"));
  ASSERT_TRUE(o->Observe({-5.0f, 7.0f, 0.0f, 1.0f}, kFlat).ok());
  ASSERT_TRUE(o->Observe({-1.0f, 2.0f, 0.0f, 1.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().min, -1.0f);
  EXPECT_EQ(o->Result().max, 2.0f);
  std::unique_ptr<Observer> running = Make(Config("min_max"));
  ASSERT_TRUE(running->Observe({-5.0f, 7.0f, 0.0f, 1.0f}, kFlat).ok());
  ASSERT_TRUE(running->Observe({-1.0f, 2.0f, 0.0f, 1.0f}, kFlat).ok());
  EXPECT_EQ(running->Result().min, -5.0f);
  EXPECT_EQ(running->Result().max, 7.0f);
}

TEST(LastValueTest, SymmetricRatioRule) {
  ObserverConfig c = Config("last_value");
  c.symmetric = true;
  std::unique_ptr<Observer> o = Make(c);
  // Full 8-bit: ratio = -254/256, exact; 127 / ratio = -128.
  ASSERT_TRUE(o->Observe({-2.0f, 127.0f, 0.0f, 1.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().min, -128.0f);
  EXPECT_EQ(o->Result().max, 127.0f);
  ASSERT_TRUE(o->Observe({-128.0f, 1.0f, 0.0f, 1.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().min, -128.0f);
  EXPECT_EQ(o->Result().max, 127.0f);
  c.narrow_range = true;  // ratio -1.
  o = Make(c);
  ASSERT_TRUE(o->Observe({-3.0f, 2.0f, 0.0f, 1.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().min, -3.0f);
  EXPECT_EQ(o->Result().max, 3.0f);
  // Asymmetric: widened to contain zero.
  o = Make(Config("last_value"));
  ASSERT_TRUE(o->Observe({0.5f, 2.0f, 1.0f, 1.0f}, kFlat).ok());
  EXPECT_EQ(o->Result().min, 0.0f);
}

TEST(PerChannelTest, NchwAxisOne) {
  ObserverConfig c = Config("min_max");
  c.per_channel = true;  // axis 1 by default.
  std::unique_ptr<Observer> o = Make(c);
  // Shape [2, 3, 2]: value = (c + 1) * (n ? -1 : 1) * (1 + w).
  std::vector<float> x;
  for (int n = 0; n < 2; ++n) {
    for (int ch = 0; ch < 3; ++ch) {
      for (int w = 0; w < 2; ++w) {
        x.push_back((ch + 1.0f) * (n ? -1.0f : 1.0f) * (1.0f + w) +
                    (ch == 2 ? 10.0f : 0.0f));
      }
    }
  }
  ASSERT_TRUE(o->Observe(x, {2, 3, 2}).ok());
  const ObserverResult r = o->Result();
  EXPECT_EQ(r.axis, 1);
  // Channel 2 spans [4, 16]; asymmetric ranges are widened to contain 0.
  EXPECT_THAT(r.channel_min, ::testing::ElementsAre(-2.0f, -4.0f, 0.0f));
  EXPECT_THAT(r.channel_max, ::testing::ElementsAre(2.0f, 4.0f, 16.0f));
  EXPECT_EQ(r.min, -4.0f);
  EXPECT_EQ(r.max, 16.0f);
}

TEST(ObserveClampedTest, EqualsObservingTheClampedValues) {
  // Relu and Clip outputs: every observer that keeps only extremes, per
  // tensor and per channel, over batches whose ranges move, must end where
  // observing the clamped values themselves ends, bit for bit.
  const std::vector<std::pair<float, float>> clamps = {
      {0.0f, kInf}, {0.0f, 6.0f}, {-1.5f, 2.25f}, {-kInf, kInf}, {1.0f, 1.0f}};
  for (const char* method : {"min_max", "last_value", "moving_average"}) {
    for (bool per_channel : {false, true}) {
      for (const auto& [lo, hi] : clamps) {
        ObserverConfig c = Config(method);
        c.per_channel = per_channel;
        std::unique_ptr<Observer> source = Make(c);
        std::unique_ptr<Observer> derived = Make(c);
        std::unique_ptr<Observer> direct = Make(c);
        for (int b = 0; b < 5; ++b) {
          // Shape [2, 3, 4]; channel ch shifted so channels differ.
          std::vector<float> x(24), y(24);
          for (int i = 0; i < 24; ++i) {
            const int ch = (i / 4) % 3;
            x[i] = static_cast<float>((i * 7 + b * 5) % 11) * (0.5f + b) -
                   4.0f + 3.0f * ch - static_cast<float>(b);
            y[i] = std::min(std::max(x[i], lo), hi);
          }
          ASSERT_TRUE(source->Observe(x, {2, 3, 4}).ok());
          ASSERT_TRUE(derived->ObserveClamped(*source, lo, hi).ok());
          ASSERT_TRUE(direct->Observe(y, {2, 3, 4}).ok());
        }
        const ObserverResult a = derived->Result(), e = direct->Result();
        const std::string where = absl::StrCat(
            method, per_channel ? " per channel" : "", " [", lo, ", ", hi, "]");
        EXPECT_EQ(a.min, e.min) << where;
        EXPECT_EQ(a.max, e.max) << where;
        EXPECT_EQ(a.axis, e.axis) << where;
        EXPECT_EQ(a.channel_min, e.channel_min) << where;
        EXPECT_EQ(a.channel_max, e.channel_max) << where;
        EXPECT_EQ(a.batch_count, e.batch_count) << where;
      }
    }
  }
}

TEST(ObserveClampedTest, RefusedWhereExtremesDoNotSuffice) {
  std::unique_ptr<Observer> source = Make(Config("min_max"));
  std::unique_ptr<Observer> derived = Make(Config("min_max"));
  // The source has seen nothing yet.
  EXPECT_EQ(derived->ObserveClamped(*source, 0.0f, kInf).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(source->Observe({-1.0f, 2.0f}, {2}).ok());
  EXPECT_EQ(derived->ObserveClamped(*source, 2.0f, 1.0f).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(derived->ObserveClamped(*source, kNaN, 1.0f).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(derived->batch_count(), 0);
  // Histograms need the values.
  for (const char* method : {"percentile", "mse", "entropy", "auto"}) {
    std::unique_ptr<Observer> h = Make(Config(method));
    absl::Status s = h->ObserveClamped(*source, 0.0f, kInf);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << method;
    EXPECT_THAT(std::string(s.message()), HasSubstr("reads the values"));
  }
  // Per-channel against per-tensor slots.
  ObserverConfig pc = Config("min_max");
  pc.per_channel = true;
  std::unique_ptr<Observer> channels = Make(pc);
  EXPECT_EQ(channels->ObserveClamped(*source, 0.0f, kInf).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(derived->ObserveClamped(*source, 0.0f, kInf).ok());
  EXPECT_EQ(derived->Result().min, 0.0f);
  EXPECT_EQ(derived->Result().max, 2.0f);
}

TEST(PerChannelTest, ChannelsLastAsTfContrib) {
  ObserverConfig c = Config("last_value");
  c.per_channel = true;
  c.axis = -1;  // tf.contrib reduces over all dims but the last.
  std::unique_ptr<Observer> o = Make(c);
  ASSERT_TRUE(o->Observe({1, -2, 3, -4, 5, -6}, {3, 2}).ok());
  const ObserverResult r = o->Result();
  EXPECT_EQ(r.axis, 1);
  EXPECT_THAT(r.channel_min, ::testing::ElementsAre(0.0f, -6.0f));
  EXPECT_THAT(r.channel_max, ::testing::ElementsAre(5.0f, 0.0f));
}

// Values -5000 .. 4999 (uniform integers), `batches` ascending slices.
std::unique_ptr<Observer> UniformInts(const ObserverConfig& c, int batches) {
  std::unique_ptr<Observer> o = Make(c);
  const int per = 10000 / batches;
  for (int b = 0; b < batches; ++b) {
    std::vector<float> x;
    for (int i = b * per; i < (b + 1) * per; ++i) x.push_back(i - 5000.0f);
    EXPECT_TRUE(o->Observe(x, {per}).ok());
  }
  return o;
}

TEST(PercentileTest, UniformIntegers) {
  ObserverConfig c = Config("percentile");
  c.percentile = 99.0;
  // One batch: 2048 bins of width 9999 / 2048 < 5; the interpolated
  // quantiles are within one integer of q * 9999.
  ObserverResult r = UniformInts(c, 1)->Result();
  EXPECT_NEAR(r.min, -5000.0f + 0.01f * 9999.0f, 1.0f);
  EXPECT_NEAR(r.max, -5000.0f + 0.99f * 9999.0f, 1.0f);
  // Ten ascending batches: the histogram re-bins as the range grows
  // (coarser bins) and still finds them.
  r = UniformInts(c, 10)->Result();
  EXPECT_NEAR(r.min, -4900.0f, 8.0f);
  EXPECT_NEAR(r.max, 4899.0f, 8.0f);
  // Default 99.999 keeps essentially everything.
  r = UniformInts(Config("percentile"), 1)->Result();
  EXPECT_NEAR(r.min, -5000.0f, 1.0f);
  EXPECT_NEAR(r.max, 4999.0f, 1.0f);
  // Symmetric: the 99th percentile of |x| (uniform on [0, 5000]).
  c.symmetric = true;
  c.narrow_range = true;
  r = UniformInts(c, 1)->Result();
  EXPECT_NEAR(r.max, 4950.0f, 3.0f);
  EXPECT_EQ(r.min, -r.max);
}

// Irwin-Hall noise (|x| <= 2) plus a few huge outliers.
std::vector<float> NoiseWithOutliers(int n, float outlier) {
  DataSpec s;
  s.seed = 5;
  s.shape = {1, 1, n};
  s.batches = 1;
  s.scale = {1.0f};
  s.offset = {0.0f};
  s.gain = {1.0f};
  s.outlier_every = n / 8;
  s.outlier = outlier;
  return GenerateBatches(s)[0];
}

// Seeded N(0, 1) samples: Box-Muller on splitmix64 53-bit uniforms.
std::vector<float> StandardNormal(uint64_t seed, int n) {
  std::vector<float> x(n);
  const double kTwoPi = 6.283185307179586;
  for (int i = 0; i < n; ++i) {
    const double u1 =
        static_cast<double>((SplitMix(seed, 2 * i) >> 11) + 1) * 0x1p-53;
    const double u2 =
        static_cast<double>(SplitMix(seed, 2 * i + 1) >> 11) * 0x1p-53;
    x[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(kTwoPi * u2));
  }
  return x;
}

TEST(EntropyTest, ClipsOutliersWhereClippingPays) {
  // 8 outliers at +-30 among 200000 values with |x| <= 2. At 4 bits the
  // KL threshold clips them (the coarse step over [-30, 30] would cost
  // more). The smallest threshold it can pick is num_quantized_bins /
  // num_bins of the magnitude range: 30 / 16 here.
  const std::vector<float> x = NoiseWithOutliers(200000, 30.0f);
  ObserverConfig c4 = Config("entropy");
  c4.bits = 4;
  std::unique_ptr<Observer> ent4 = Make(c4);
  std::unique_ptr<Observer> mm = Make(Config("min_max"));
  ASSERT_TRUE(ent4->Observe(x, {1, 1, 200000}).ok());
  ASSERT_TRUE(mm->Observe(x, {1, 1, 200000}).ok());
  EXPECT_EQ(mm->Result().max, 30.0f);
  const ObserverResult r4 = ent4->Result();
  EXPECT_GT(r4.max, 1.0f);  // Keeps the bulk of the noise...
  EXPECT_LT(r4.max, 5.0f);  // ...and clips the outliers.
  EXPECT_EQ(r4.min, -r4.max);
  EXPECT_FALSE(r4.kept_observed_range);
  // At 8 bits the step over [-30, 30] costs less squared error than
  // clipping eight values by 28: the guard keeps the observed range and
  // says so, where TensorRT's threshold alone would clip.
  std::unique_ptr<Observer> ent8 = Make(Config("entropy"));
  ASSERT_TRUE(ent8->Observe(x, {1, 1, 200000}).ok());
  const ObserverResult r8 = ent8->Result();
  EXPECT_EQ(r8.max, 30.0f);
  EXPECT_TRUE(r8.kept_observed_range);
  std::unique_ptr<Observer> unguarded = Make(Config("entropy_unguarded"));
  ASSERT_TRUE(unguarded->Observe(x, {1, 1, 200000}).ok());
  const ObserverResult u8 = unguarded->Result();
  EXPECT_LT(u8.max, 5.0f);
  EXPECT_FALSE(u8.kept_observed_range);
  // Far outliers at 4 bits: still clipped, down to the smallest threshold.
  const std::vector<float> y = NoiseWithOutliers(200000, 1000.0f);
  std::unique_ptr<Observer> far = Make(c4);
  ASSERT_TRUE(far->Observe(y, {1, 1, 200000}).ok());
  EXPECT_LT(far->Result().max, 1000.0f / 4);
}

TEST(EntropyTest, SiluCloudKeepsItsLargeValues) {
  // SiLU of mostly negative pre-activations, as before a network's last
  // pooling: a dense cloud of magnitudes below 0.28 (the negative lobe)
  // and a sparse positive tail that carries the signal. TensorRT's KL
  // search fits the cloud and clips the tail (EfficientNet-B0: 0.9 dB on
  // that tensor, 3.9 dB at the output); the guard keeps the range, and
  // the tensor's quantization error is then no worse than min_max's.
  std::vector<float> x = StandardNormal(77, 1 << 17);
  for (float& v : x) {
    const float pre = 2.0f * v - 4.0f;
    v = pre / (1.0f + std::exp(-pre));
  }
  const float mx = *std::max_element(x.begin(), x.end());
  StreamingHistogram h(2048);
  h.Extend(0.0f, mx);
  h.AddAbs(x.data(), static_cast<int64_t>(x.size()));
  const double kl = EntropyThreshold(h, 128);
  std::printf("silu cloud: max %.4f, KL threshold %.4f\n", mx, kl);
  EXPECT_LT(kl, mx / 4);  // The misfire the guard exists for.

  std::unique_ptr<Observer> ent = Make(Config("entropy"));
  std::unique_ptr<Observer> mm = Make(Config("min_max"));
  ASSERT_TRUE(ent->Observe(x, {static_cast<int64_t>(x.size())}).ok());
  ASSERT_TRUE(mm->Observe(x, {static_cast<int64_t>(x.size())}).ok());
  const ObserverResult r = ent->Result();
  EXPECT_TRUE(r.kept_observed_range);
  std::unique_ptr<Observer> unguarded = Make(Config("entropy_unguarded"));
  ASSERT_TRUE(unguarded->Observe(x, {static_cast<int64_t>(x.size())}).ok());
  EXPECT_FLOAT_EQ(unguarded->Result().max, static_cast<float>(kl));
  auto sqnr = [&](const ObserverResult& range) {
    const float step = (range.max - range.min) / 255.0f;
    const float zero = std::nearbyint(-range.min / step);
    double signal = 0.0, noise = 0.0;
    for (float v : x) {
      const float q = std::clamp(std::nearbyint(v / step) + zero, 0.0f, 255.0f);
      const double e = static_cast<double>((q - zero) * step) - v;
      signal += static_cast<double>(v) * v;
      noise += e * e;
    }
    return 10.0 * std::log10(signal / noise);
  };
  const ObserverResult m = mm->Result();
  std::printf("silu cloud SQNR: entropy %.2f dB, min_max %.2f dB\n", sqnr(r),
              sqnr(m));
  EXPECT_GE(sqnr(r), sqnr(m) - 0.01);
}

TEST(EntropyTest, ReluZerosDoNotPullTheThresholdDown) {
  // relu(x) for x ~ N(0, 1): half the values are exactly 0 and the rest are
  // distributed as |x|, so the KL threshold must be the one of |x|. Before
  // exact zeros were left out of the search, relu gave about 1.8 against
  // about 4.5 for |x| (docs/accuracy.md).
  constexpr int kBatch = 1 << 16;
  std::unique_ptr<Observer> abs = Make(Config("entropy"));
  std::unique_ptr<Observer> relu = Make(Config("entropy"));   // Antithetic.
  std::unique_ptr<Observer> relu2 = Make(Config("entropy"));  // Independent.
  std::unique_ptr<Observer> mm = Make(Config("min_max"));
  for (uint64_t b = 0; b < 4; ++b) {
    // The N(0, 1) sample {x, -x}: relu of it is |x| plus kBatch zeros, with
    // the same batch maxima, hence the same bins.
    const std::vector<float> x = StandardNormal(1000 + b, kBatch);
    std::vector<float> a(kBatch), r(2 * kBatch);
    for (int i = 0; i < kBatch; ++i) {
      a[i] = std::fabs(x[i]);
      r[i] = std::max(x[i], 0.0f);
      r[kBatch + i] = std::max(-x[i], 0.0f);
    }
    ASSERT_TRUE(abs->Observe(a, {kBatch}).ok());
    ASSERT_TRUE(relu->Observe(r, {2 * kBatch}).ok());
    // An independent N(0, 1) sample with as many positive values (on
    // average) as |x| has values.
    std::vector<float> y = StandardNormal(2000 + b, 2 * kBatch);
    for (float& v : y) v = std::max(v, 0.0f);
    ASSERT_TRUE(relu2->Observe(y, {2 * kBatch}).ok());
    ASSERT_TRUE(mm->Observe(y, {2 * kBatch}).ok());
  }
  const float t_abs = abs->Result().max;
  const ObserverResult r = relu->Result();
  const ObserverResult r2 = relu2->Result();
  const float max2 = mm->Result().max;
  std::printf(
      "entropy: |N(0,1)| %.4f; relu(N(0,1)) antithetic %.4f, independent "
      "%.4f (max %.4f)\n",
      t_abs, r.max, r2.max, max2);
  // The zeros are ignored exactly.
  EXPECT_EQ(r.min, 0.0f);
  EXPECT_EQ(r.max, t_abs);
  // Independent samples: the KL threshold itself varies by about +-6% from
  // sample to sample near the tail (numpy, 6 seeds).
  EXPECT_EQ(r2.min, 0.0f);
  EXPECT_NEAR(r2.max, t_abs, 0.1f * t_abs);
  EXPECT_GT(r2.max, 0.5f * max2);
}

TEST(EntropyTest, ReluActivationIsNotClippedToLessThanHalfItsMax) {
  // A conv-like NCHW batch through ReLU: per-channel gains and offsets, so
  // 20-80% of each channel is exactly 0.
  const int64_t n = 8, c = 16, hw = 32 * 32;
  const std::vector<float> x = StandardNormal(77, n * c * hw);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t ch = (static_cast<int64_t>(i) / hw) % c;
    const float gain = 0.25f + 0.125f * static_cast<float>(ch);
    const float offset = -0.75f + 0.1f * static_cast<float>(ch);
    y[i] = std::max(gain * (x[i] + offset), 0.0f);
  }
  std::unique_ptr<Observer> ent = Make(Config("entropy"));
  std::unique_ptr<Observer> mm = Make(Config("min_max"));
  ASSERT_TRUE(ent->Observe(y, {n, c, 32, 32}).ok());
  ASSERT_TRUE(mm->Observe(y, {n, c, 32, 32}).ok());
  const ObserverResult r = ent->Result();
  const float max = mm->Result().max;
  std::printf("entropy: relu batch [%.4f, %.4f], min_max max %.4f\n", r.min,
              r.max, max);
  EXPECT_EQ(r.min, 0.0f);
  EXPECT_GE(r.max, 0.5f * max);
  EXPECT_LE(r.max, max);
}

TEST(EntropyTest, OnlyZerosAfterExtendGivesZeroThreshold) {
  StreamingHistogram h(256);
  const std::vector<float> zeros(10, 0.0f);
  h.Extend(0.0f, 4.0f);
  h.AddAbs(zeros.data(), 10);
  EXPECT_EQ(h.zeros(), 10);
  EXPECT_EQ(EntropyThreshold(h, 128), 0.0);
}

TEST(MseTest, ClipsOutliersWhenFewBitsMakeThemExpensive) {
  // 8 outliers at +-30 among 200000 values with |x| <= 2. At 8 bits the
  // range stays near [-30, 30] (clipping them costs more than the coarser
  // step); at 4 bits the step cost wins and they are clipped.
  const std::vector<float> x = NoiseWithOutliers(200000, 30.0f);
  ObserverConfig c = Config("mse");
  std::unique_ptr<Observer> o8 = Make(c);
  ASSERT_TRUE(o8->Observe(x, {1, 1, 200000}).ok());
  EXPECT_GT(o8->Result().max, 20.0f);
  EXPECT_LT(o8->Result().min, -20.0f);
  c.bits = 4;
  std::unique_ptr<Observer> o4 = Make(c);
  ASSERT_TRUE(o4->Observe(x, {1, 1, 200000}).ok());
  EXPECT_LT(o4->Result().max, 5.0f);
  EXPECT_GT(o4->Result().max, 0.5f);
  c.symmetric = true;
  std::unique_ptr<Observer> s4 = Make(c);
  ASSERT_TRUE(s4->Observe(x, {1, 1, 200000}).ok());
  EXPECT_LT(s4->Result().max, 5.0f);
  EXPECT_GT(s4->Result().max, 0.5f);
}

// ---------------------------------------------------------------------------
// StreamingHistogram.

// headroom multiplies every observed range, per tensor and per channel, for
// any observer (and on top of it, ResultAs's own factor); the range before
// any batch is tf.contrib's initialiser and stays as configured.
TEST(HeadroomTest, WidensEveryObservedRange) {
  for (const char* method :
       {"min_max", "moving_average", "percentile", "entropy", "auto"}) {
    for (bool symmetric : {false, true}) {
      SCOPED_TRACE(absl::StrCat(method, symmetric ? " symmetric" : ""));
      ObserverConfig plain_config = Config(method);
      plain_config.symmetric = symmetric;
      plain_config.per_channel = true;
      ObserverConfig wide_config = plain_config;
      wide_config.headroom = 1.5;
      std::unique_ptr<Observer> plain = Make(plain_config);
      std::unique_ptr<Observer> wide = Make(wide_config);
      EXPECT_EQ(wide->Result().min, plain->Result().min);
      EXPECT_EQ(wide->Result().max, plain->Result().max);
      for (int b = 0; b < 3; ++b) {
        std::vector<float> x(2 * 3 * 50);
        for (size_t i = 0; i < x.size(); ++i) {
          x[i] = static_cast<float>((i * 37 + b * 5) % 101) / 25.0f - 1.5f +
                 static_cast<float>((i / 50) % 3);
        }
        ASSERT_TRUE(plain->Observe(x, {2, 3, 50}).ok());
        ASSERT_TRUE(wide->Observe(x, {2, 3, 50}).ok());
      }
      const ObserverResult p = plain->Result();
      const ObserverResult w = wide->Result();
      EXPECT_LT(p.min, 0.0f);
      EXPECT_GT(p.max, 0.0f);
      EXPECT_EQ(w.min, p.min * 1.5f);
      EXPECT_EQ(w.max, p.max * 1.5f);
      ASSERT_EQ(w.channel_max.size(), 3u);
      for (size_t c = 0; c < 3; ++c) {
        EXPECT_EQ(w.channel_min[c], p.channel_min[c] * 1.5f);
        EXPECT_EQ(w.channel_max[c], p.channel_max[c] * 1.5f);
      }
      // ResultAs widens again, by its own factor.
      const ObserverResult twice = wide->ResultAs("min_max", 2.0);
      const ObserverResult once = plain->ResultAs("min_max");
      EXPECT_EQ(twice.max, once.max * 3.0f);
      EXPECT_EQ(twice.min, once.min * 3.0f);
    }
  }
}

TEST(HeadroomTest, OutsideOneToSixteenIsRefusedByName) {
  for (double h :
       {0.0, 0.5, 0.999, 16.5, 1e9, std::numeric_limits<double>::quiet_NaN(),
        std::numeric_limits<double>::infinity()}) {
    ObserverConfig c = Config("min_max");
    c.headroom = h;
    const absl::Status s = ValidateObserverConfig(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << h;
    EXPECT_THAT(s.message(), HasSubstr("headroom: must be in [1, 16]")) << h;
  }
  for (double h : {1.0, 1.25, 16.0}) {
    ObserverConfig c = Config("min_max");
    c.headroom = h;
    EXPECT_TRUE(ValidateObserverConfig(c).ok()) << h;
  }
  // On the wire 0 (unset) means 1.
  quantd::v1::CalibrateConfig proto;
  EXPECT_EQ(ObserverConfigFromProto(proto).headroom, 1.0);
  proto.set_headroom(0.0);
  EXPECT_EQ(ObserverConfigFromProto(proto).headroom, 1.0);
  proto.set_headroom(2.5);
  EXPECT_EQ(ObserverConfigFromProto(proto).headroom, 2.5);
  proto.set_headroom(-1.0);
  EXPECT_EQ(ValidateObserverConfig(ObserverConfigFromProto(proto)).code(),
            absl::StatusCode::kInvalidArgument);
}

// "auto" reads every candidate from one magnitude histogram: each must be
// bit-identical to the observer of that name where that observer bins the
// same way (min_max and both entropies always; percentile and mse when
// symmetric), per tensor and per channel, and Result() is min_max's.
TEST(AutoObserverTest, EachCandidateMatchesItsOwnObserver) {
  for (bool symmetric : {false, true}) {
    for (bool per_channel : {false, true}) {
      SCOPED_TRACE(absl::StrCat(symmetric ? "symmetric" : "asymmetric",
                                per_channel ? " per-channel" : ""));
      auto config = [&](const std::string& method) {
        ObserverConfig c = Config(method);
        c.symmetric = symmetric;
        c.per_channel = per_channel;
        return c;
      };
      std::unique_ptr<Observer> automatic = Make(config("auto"));
      std::vector<std::unique_ptr<Observer>> singles;
      for (const char* m : kAutoCandidates) singles.push_back(Make(config(m)));
      // Shape [4, 3, 64]: a skewed cloud per channel and an outlier in
      // some batches, so that clipping candidates differ from min_max.
      for (int b = 0; b < 5; ++b) {
        std::vector<float> x(4 * 3 * 64);
        for (size_t i = 0; i < x.size(); ++i) {
          const float u =
              static_cast<float>((i * 2654435761u + b * 97u) % 1000) / 1000.0f;
          x[i] = (u * u) * (1.0f + (i / 64) % 3) - 0.3f;
        }
        if (b % 2 == 0) x[(b * 131) % x.size()] = 40.0f + b;
        ASSERT_TRUE(automatic->Observe(x, {4, 3, 64}).ok());
        for (auto& o : singles) ASSERT_TRUE(o->Observe(x, {4, 3, 64}).ok());
      }
      int differing = 0;
      for (size_t k = 0; k < singles.size(); ++k) {
        const std::string m = kAutoCandidates[k];
        const bool same_bins = m == "min_max" || m == "entropy" ||
                               m == "entropy_unguarded" || symmetric;
        const ObserverResult want = singles[k]->Result();
        const ObserverResult got = automatic->ResultAs(m);
        if (same_bins) {
          EXPECT_EQ(got.min, want.min) << m;
          EXPECT_EQ(got.max, want.max) << m;
          EXPECT_EQ(got.channel_min, want.channel_min) << m;
          EXPECT_EQ(got.channel_max, want.channel_max) << m;
          EXPECT_EQ(got.kept_observed_range, want.kept_observed_range) << m;
        }
        // Never wider than the observed extremes.
        const ObserverResult observed = automatic->ResultAs("min_max");
        EXPECT_GE(got.min, observed.min) << m;
        EXPECT_LE(got.max, observed.max) << m;
        differing += got.max != observed.max || got.min != observed.min;
      }
      EXPECT_GT(differing, 0);
      const ObserverResult plain = automatic->Result();
      const ObserverResult min_max = singles[0]->Result();
      EXPECT_EQ(plain.min, min_max.min);
      EXPECT_EQ(plain.max, min_max.max);
      EXPECT_EQ(plain.channel_max, min_max.channel_max);
      // Its memory is one histogram observer's.
      EXPECT_EQ(automatic->StateBytes(), singles[3]->StateBytes());
    }
  }
}

TEST(StreamingHistogramTest, RebinningIsExact) {
  StreamingHistogram h(64);
  std::vector<float> all;
  for (int b = 0; b < 20; ++b) {
    std::vector<float> x;
    for (int i = 0; i < 100; ++i) {
      x.push_back((static_cast<float>((i * 37 + b * 11) % 100) - 30.0f) *
                  (1.0f + b) * 0.125f);
    }
    float mn = x[0], mx = x[0];
    for (float v : x) mn = std::min(mn, v), mx = std::max(mx, v);
    h.Extend(mn, mx);
    h.Add(x.data(), static_cast<int64_t>(x.size()));
    all.insert(all.end(), x.begin(), x.end());
    ASSERT_LE(h.lo(), mn);
    ASSERT_GE(h.Edge(64), mx);
  }
  EXPECT_EQ(h.total(), 2000);
  std::vector<int64_t> direct(64, 0);
  for (float v : all) ++direct[h.BinOf(v)];
  EXPECT_EQ(h.counts(), direct);
}

TEST(StreamingHistogramTest, NonNegativeDataKeepsLoAtZero) {
  StreamingHistogram h(16);
  for (int b = 1; b <= 5; ++b) {
    const float top = 3.0f * b;
    std::vector<float> x = {0.0f, top / 2, top};
    h.Extend(0.0f, top);
    h.Add(x.data(), 3);
    EXPECT_EQ(h.lo(), 0.0);
  }
  EXPECT_EQ(h.total(), 15);
}

TEST(StreamingHistogramTest, PointMassThenSpread) {
  StreamingHistogram h(8);
  const std::vector<float> zeros(10, 0.0f);
  h.Extend(0.0f, 0.0f);
  h.Add(zeros.data(), 10);
  EXPECT_EQ(h.width(), 0.0);
  EXPECT_EQ(HistogramQuantile(h, 0.5), 0.0);
  h.Extend(0.0f, 8.0f);
  const std::vector<float> x = {7.5f, 7.5f};
  h.Add(x.data(), 2);
  EXPECT_EQ(h.width(), 1.0);
  EXPECT_EQ(h.counts()[0], 10);
  EXPECT_EQ(h.counts()[7], 2);
}

TEST(StreamingHistogramTest, CountsExactZerosAlongsideTheBins) {
  StreamingHistogram h(8);
  const std::vector<float> x = {0.0f, -0.0f, 1e-30f, 0.5f, 7.0f, 0.0f};
  h.Extend(0.0f, 8.0f);
  h.AddAbs(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(h.zeros(), 3);      // +0 and -0; 1e-30 is not zero.
  EXPECT_EQ(h.counts()[0], 5);  // The bins still hold every value.
  EXPECT_EQ(h.total(), 6);
  StreamingHistogram s(8);  // Signed, point mass at 0 first.
  s.Extend(0.0f, 0.0f);
  s.Add(x.data(), 2);
  EXPECT_EQ(s.zeros(), 2);
  s.Extend(-4.0f, 4.0f);
  EXPECT_EQ(s.counts()[s.BinOf(0.0)], 2);
}

// ---------------------------------------------------------------------------
// Memory, errors, threads, speed.

TEST(ObserverTest, StateDoesNotGrowWithBatches) {
  for (const char* m : kObserverMethods) {
    ObserverConfig c = Config(m);
    c.per_channel = true;
    std::unique_ptr<Observer> o = Make(c);
    const std::vector<int64_t> shape = {2, 4, 8};
    std::vector<float> x(64);
    size_t after_first = 0;
    for (int b = 0; b < 1000; ++b) {
      for (size_t i = 0; i < x.size(); ++i) {  // The range keeps growing.
        x[i] = (static_cast<float>(i % 13) - 6.0f) * (1.0f + b);
      }
      ASSERT_TRUE(o->Observe(x, shape).ok());
      if (b == 0) after_first = o->StateBytes();
    }
    EXPECT_GT(after_first, 0u) << m;
    EXPECT_EQ(o->StateBytes(), after_first) << m;
    EXPECT_EQ(o->batch_count(), 1000) << m;
    const ObserverResult r = o->Result();
    EXPECT_EQ(r.channel_min.size(), 4u) << m;
    EXPECT_TRUE(std::isfinite(r.min) && std::isfinite(r.max)) << m;
  }
}

TEST(ObserverConfigTest, BadFieldsAreNamed) {
  struct Bad {
    std::function<void(ObserverConfig&)> edit;
    std::string expect;
  };
  const std::vector<Bad> bad = {
      {[](ObserverConfig& c) { c.method = "kl"; },
       "unknown observer method 'kl'; accepted: last_value, min_max, "
       "moving_average, percentile, mse, entropy"},
      {[](ObserverConfig& c) { c.bits = 9; }, "bits: must be in [2, 8], got 9"},
      {[](ObserverConfig& c) { c.init_min = 1.0f, c.init_max = 0.0f; },
       "init_min/init_max"},
      {[](ObserverConfig& c) { c.quant_delay = -1; }, "quant_delay"},
      {[](ObserverConfig& c) { c.method = "moving_average", c.ema_decay = 1; },
       "ema_decay: must be in [0, 1), got 1"},
      {[](ObserverConfig& c) { c.method = "percentile", c.percentile = 101; },
       "percentile: must be in [50, 100], got 101"},
      {[](ObserverConfig& c) { c.method = "entropy", c.num_bins = 4; },
       "num_bins: must be in [16, 1048576], got 4"},
      {[](ObserverConfig& c) {
         c.method = "entropy", c.num_bins = 64, c.num_quantized_bins = 128;
       },
       "num_quantized_bins"},
  };
  for (const Bad& b : bad) {
    ObserverConfig c;
    b.edit(c);
    absl::StatusOr<std::unique_ptr<Observer>> o = MakeObserver(c);
    ASSERT_FALSE(o.ok()) << b.expect;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status().message()), HasSubstr(b.expect));
  }
  // Histogram fields do not matter for min_max.
  ObserverConfig c;
  c.num_bins = 0;
  EXPECT_TRUE(MakeObserver(c).ok());
}

TEST(ObserverTest, BadBatchesLeaveStateUnchanged) {
  ObserverConfig c = Config("min_max");
  c.per_channel = true;
  std::unique_ptr<Observer> o = Make(c);
  ASSERT_TRUE(o->Observe({1, 2, 3, 4}, {1, 2, 2}).ok());
  auto msg = [&](std::vector<float> x, std::vector<int64_t> shape) {
    absl::Status s = o->Observe(x, shape);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_THAT(msg({1, 2, 3}, {1, 2, 2}), HasSubstr("holds 4 values"));
  EXPECT_THAT(msg({1, 2}, {2}), HasSubstr("per-channel axis"));
  EXPECT_THAT(msg({1, 2, 3, 4, 5, 6}, {1, 3, 2}), HasSubstr("3 channels"));
  EXPECT_THAT(msg({1, kNaN, 3, 4}, {1, 2, 2}), HasSubstr("NaN"));
  EXPECT_THAT(msg({1, 2, 3, 4}, {1, -2, -2}), HasSubstr("negative"));
  EXPECT_TRUE(o->Observe({}, {1, 2, 0}).ok());  // Empty: ignored.
  const ObserverResult r = o->Result();
  EXPECT_EQ(r.batch_count, 1);
  EXPECT_EQ(r.max, 4.0f);
  EXPECT_THAT(r.channel_max, ::testing::ElementsAre(2.0f, 4.0f));
}

// An additive mask (-inf for a causal mask, torch's finfo(float32).min for
// padding) is not a signal: every method counts the batch, reports the
// tensor unbounded from then on, and keeps no range; values just below the
// bound are an ordinary range.
TEST(ObserverTest, MasksMakeTheTensorUnboundedForGood) {
  const float kLowest = std::numeric_limits<float>::lowest();
  for (const char* method : {"min_max", "last_value", "moving_average",
                             "percentile", "mse", "entropy", "auto"}) {
    SCOPED_TRACE(method);
    for (float mask : {-kInf, kInf, kLowest, -1e30f, 2e30f}) {
      for (bool per_channel : {false, true}) {
        ObserverConfig c = Config(method);
        c.per_channel = per_channel;
        std::unique_ptr<Observer> o = Make(c);
        ASSERT_TRUE(o->Observe({1, 2, 3, 4}, {1, 2, 2}).ok());
        EXPECT_FALSE(o->Result().unbounded);
        ASSERT_TRUE(o->Observe({0.5f, mask, 3, 4}, {1, 2, 2}).ok()) << mask;
        ASSERT_TRUE(o->Observe({1, 2, 3, 4}, {1, 2, 2}).ok());
        const ObserverResult r = o->Result();
        EXPECT_TRUE(r.unbounded) << mask;
        EXPECT_EQ(r.batch_count, 3);
        EXPECT_EQ(r.min, 0.0f);
        EXPECT_EQ(r.max, 0.0f);
        EXPECT_TRUE(r.channel_min.empty());
        quantd::v1::TensorRange proto;
        ToTensorRange(r, "scores", &proto);
        EXPECT_TRUE(proto.unbounded());
        EXPECT_EQ(proto.tensor_name(), "scores");
      }
    }
    std::unique_ptr<Observer> big = Make(Config(method));
    ASSERT_TRUE(big->Observe({-9e29f, 1.0f, 2.0f, 3.0f}, {1, 2, 2}).ok());
    EXPECT_FALSE(big->Result().unbounded);
  }
}

// Long enough rows that the 16-lane loop runs, with a tail after it: the
// extremes and a NaN are found wherever they sit.
TEST(ObserverTest, MinMaxFindsExtremesAndNaNAnywhereInALongRow) {
  for (int n : {16, 17, 37, 64, 100}) {
    for (int at = 0; at < n; at += 7) {
      std::vector<float> x(n);
      for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 5) - 2.0f;
      x[at] = -9.0f;
      x[(at + n / 2) % n] = 11.0f;  // Never the same place as the -9.
      std::unique_ptr<Observer> o = Make(Config("min_max"));
      ASSERT_TRUE(o->Observe(x, {1, 1, n}).ok());
      EXPECT_EQ(o->Result().min, -9.0f) << n << " " << at;
      EXPECT_EQ(o->Result().max, 11.0f) << n << " " << at;
      x[at] = kNaN;
      std::unique_ptr<Observer> bad = Make(Config("min_max"));
      EXPECT_THAT(bad->Observe(x, {1, 1, n}).message(), HasSubstr("NaN"))
          << n << " " << at;
    }
  }
}

// A pool splits a large batch's fold into chunks (per tensor) or channel
// groups (per channel); the ranges, the NaN refusal and the unbounded mark
// must be those of the fold on one thread, wherever the extreme lies.
TEST(ObserverTest, FoldOverAPoolEqualsTheFoldOnOneThread) {
  ThreadPool pool(3);
  const int64_t channels = 5, inner = 70001;  // Odd sizes: uneven chunks.
  const int64_t n = 2 * channels * inner;
  for (const std::string method : {"min_max", "moving_average"}) {
    for (bool per_channel : {false, true}) {
      for (int64_t at : {int64_t{0}, n / 3, n / 2 + 1, n - 1}) {
        std::vector<float> x(n);
        for (int64_t i = 0; i < n; ++i) {
          x[i] = static_cast<float>((i * 7919) % 1001) * 0.01f - 5.0f;
        }
        x[at] = -70.0f;
        x[(at + n / 4) % n] = 90.0f;
        ObserverConfig c = Config(method);
        c.per_channel = per_channel;
        c.axis = 1;
        const std::vector<int64_t> shape = {2, channels, inner};
        std::unique_ptr<Observer> serial = Make(c);
        std::unique_ptr<Observer> pooled = Make(c);
        ASSERT_TRUE(serial->Observe(x, shape).ok());
        ASSERT_TRUE(pooled->Observe(x, shape, &pool).ok());
        const ObserverResult a = serial->Result(), b = pooled->Result();
        EXPECT_EQ(a.min, b.min) << method << per_channel << at;
        EXPECT_EQ(a.max, b.max) << method << per_channel << at;
        EXPECT_EQ(a.channel_min, b.channel_min) << method << per_channel << at;
        EXPECT_EQ(a.channel_max, b.channel_max) << method << per_channel << at;
        EXPECT_NEAR(b.min, -70.0f, 0.01f);  // Reported on the 8-bit grid.
        EXPECT_NEAR(b.max, 90.0f, 0.01f);

        x[at] = -kInf;
        std::unique_ptr<Observer> masked = Make(c);
        ASSERT_TRUE(masked->Observe(x, shape, &pool).ok());
        EXPECT_TRUE(masked->Result().unbounded) << method << per_channel << at;

        x[at] = kNaN;
        std::unique_ptr<Observer> bad = Make(c);
        EXPECT_THAT(bad->Observe(x, shape, &pool).message(), HasSubstr("NaN"))
            << method << per_channel << at;
      }
    }
  }
}

TEST(ObserverTest, ConcurrentObserveIsSerialised) {
  ObserverConfig c = Config("percentile");
  c.percentile = 100.0;
  std::unique_ptr<Observer> o = Make(c);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&o, t] {
      std::vector<float> x(1000);
      for (int b = 0; b < 50; ++b) {
        for (size_t i = 0; i < x.size(); ++i) {
          x[i] = static_cast<float>(i) * (t + 1) - 100.0f * b;
        }
        EXPECT_TRUE(o->Observe(x, {1000}).ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const ObserverResult r = o->Result();
  EXPECT_EQ(r.batch_count, 200);
  EXPECT_EQ(r.min, -4900.0f);
  EXPECT_EQ(r.max, 3996.0f);
}

TEST(ObserverTest, ThroughputAtLeastTenMillionFloatsPerSecond) {
  std::vector<float> x(1 << 20);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(SplitMix(1, i) >> 40) * 1e-6f - 8.0f;
  }
  for (const char* m : {"min_max", "moving_average", "percentile"}) {
    std::unique_ptr<Observer> o = Make(Config(m));
    double best = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (int b = 0; b < 8; ++b) ASSERT_TRUE(o->Observe(x, {1 << 20}).ok());
      const double s = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      best = std::max(best, 8.0 * x.size() / s);
    }
    std::printf("%-16s %.0f M floats/s\n", m, best / 1e6);
    EXPECT_GT(best, 10e6) << m;
  }
}

TEST(ProtoMappingTest, ConfigAndResult) {
  quantd::v1::CalibrateConfig p;
  p.set_method("percentile");
  p.set_percentile(99.9);
  p.set_num_bins(512);
  p.set_per_channel(true);
  p.mutable_activation_params()->set_bits(7);
  p.mutable_activation_params()->set_ema_decay(0.999f);
  p.mutable_activation_params()->set_quant_delay(5);
  ObserverConfig c = ObserverConfigFromProto(p);
  EXPECT_EQ(c.method, "percentile");
  EXPECT_EQ(c.percentile, 99.9);
  EXPECT_EQ(c.num_bins, 512);
  EXPECT_TRUE(c.per_channel);
  EXPECT_EQ(c.axis, 1);
  EXPECT_EQ(c.bits, 7);
  EXPECT_EQ(c.ema_decay, 0.999);  // Not 0.999f widened.
  EXPECT_EQ(c.quant_delay, 5);
  EXPECT_EQ(c.init_max, 6.0f);  // Unset: default.
  p.clear_method();
  p.mutable_activation_params()->set_moving_avg(false);
  EXPECT_EQ(ObserverConfigFromProto(p).method, "last_value");

  ObserverResult r;
  r.min = -1.0f;
  r.max = 2.0f;
  r.axis = 1;
  r.channel_min = {-1.0f, 0.0f};
  r.channel_max = {1.0f, 2.0f};
  quantd::v1::TensorRange t;
  ToTensorRange(r, "relu1", &t);
  EXPECT_EQ(t.tensor_name(), "relu1");
  EXPECT_EQ(t.min(), -1.0f);
  EXPECT_EQ(t.max(), 2.0f);
  EXPECT_EQ(t.axis(), 1);
  EXPECT_THAT(t.channel_min(), ::testing::ElementsAre(-1.0f, 0.0f));
  EXPECT_THAT(t.channel_max(), ::testing::ElementsAre(1.0f, 2.0f));
  r.axis = -1;
  ToTensorRange(r, "x", &t);
  EXPECT_EQ(t.channel_min_size(), 0);
}

}  // namespace
}  // namespace quantd::calibration
