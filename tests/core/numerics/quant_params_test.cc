// Tests of core/numerics/quant_params: hand-derived cases, torch goldens
// (tests/data/numerics, written by scripts/make_numerics_golden.py) and a
// slow reference quantizer as the oracle for QuantizeTensor.
#include "core/numerics/quant_params.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace quantd::numerics {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

QuantSpec Spec(int bits, bool is_signed, bool symmetric, bool narrow_range) {
  QuantSpec spec;
  spec.bits = bits;
  spec.is_signed = is_signed;
  spec.symmetric = symmetric;
  spec.narrow_range = narrow_range;
  return spec;
}

std::string SpecString(const QuantSpec& s) {
  return absl::StrCat("bits=", s.bits, " signed=", s.is_signed,
                      " symmetric=", s.symmetric, " narrow=", s.narrow_range);
}

// ---------------------------------------------------------------------------
// Golden files: '#' comments, then whitespace-separated records.

using Record = std::vector<std::string>;

std::vector<Record> ReadRecords(const std::string& name) {
  const std::string text = quantd::testing::ReadFileOrDie(
      quantd::testing::SourcePath("tests/data/numerics/" + name));
  std::vector<Record> records;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    records.push_back(
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty()));
  }
  EXPECT_FALSE(records.empty()) << name << " holds no records";
  return records;
}

float F(const std::string& s) {
  float v = kNaN;
  EXPECT_TRUE(absl::SimpleAtof(s, &v)) << "bad float '" << s << "'";
  return v;
}
int32_t I(const std::string& s) {
  int32_t v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(s, &v)) << "bad int '" << s << "'";
  return v;
}
template <typename T, typename Parse>
std::vector<T> Tail(const Record& r, Parse parse) {
  std::vector<T> out;
  for (size_t i = 1; i < r.size(); ++i) out.push_back(parse(r[i]));
  return out;
}

// One case/.../end block of quantize_per_{channel,tensor}.txt.
struct TensorGolden {
  std::string name;
  std::vector<int64_t> shape;
  int axis = -1;
  std::vector<float> data, scales, dequant;
  std::vector<int32_t> zero_points, q;
};

std::vector<TensorGolden> ReadTensorGoldens(const std::string& name) {
  std::vector<TensorGolden> cases;
  TensorGolden c;
  for (const Record& r : ReadRecords(name)) {
    const std::string& key = r[0];
    if (key == "case") {
      c = TensorGolden();
      c.name = r.at(1);
    } else if (key == "shape") {
      for (int32_t d : Tail<int32_t>(r, I)) c.shape.push_back(d);
    } else if (key == "axis") {
      c.axis = I(r.at(1));
    } else if (key == "data") {
      c.data = Tail<float>(r, F);
    } else if (key == "scale") {
      c.scales = Tail<float>(r, F);
    } else if (key == "zero_point") {
      c.zero_points = Tail<int32_t>(r, I);
    } else if (key == "q") {
      c.q = Tail<int32_t>(r, I);
    } else if (key == "dequant") {
      c.dequant = Tail<float>(r, F);
    } else if (key == "end") {
      cases.push_back(c);
    } else {
      ADD_FAILURE() << name << ": unknown record " << key;
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------
// Grids.

TEST(GridForTest, MatchesClosedFormForAllBits) {
  for (int bits = 2; bits <= 8; ++bits) {
    for (bool is_signed : {false, true}) {
      for (bool narrow : {false, true}) {
        const QuantSpec spec = Spec(bits, is_signed, true, narrow);
        absl::StatusOr<QuantGrid> grid = GridFor(spec);
        ASSERT_TRUE(grid.ok()) << SpecString(spec) << ": " << grid.status();
        const int half = 1 << (bits - 1);
        const int32_t want_min = (is_signed ? -half : 0) + (narrow ? 1 : 0);
        const int32_t want_max = is_signed ? half - 1 : 2 * half - 1;
        EXPECT_EQ(grid->quant_min, want_min) << SpecString(spec);
        EXPECT_EQ(grid->quant_max, want_max) << SpecString(spec);
        // Narrow grids are symmetric around the centre the spec promises.
        if (narrow) {
          EXPECT_EQ(grid->quant_min + grid->quant_max, is_signed ? 0 : 2 * half)
              << SpecString(spec);
        }
      }
    }
  }
}

TEST(GridForTest, KnownGrids) {
  auto grid = [](int bits, bool is_signed, bool narrow) {
    absl::StatusOr<QuantGrid> g = GridFor(Spec(bits, is_signed, true, narrow));
    EXPECT_TRUE(g.ok()) << g.status();
    return std::make_pair(g->quant_min, g->quant_max);
  };
  EXPECT_THAT(grid(8, true, true), Pair(-127, 127));
  EXPECT_THAT(grid(8, true, false), Pair(-128, 127));
  EXPECT_THAT(grid(8, false, true), Pair(1, 255));
  EXPECT_THAT(grid(8, false, false), Pair(0, 255));
  EXPECT_THAT(grid(4, true, false), Pair(-8, 7));
  EXPECT_THAT(grid(4, false, true), Pair(1, 15));
  EXPECT_THAT(grid(2, true, false), Pair(-2, 1));
  EXPECT_THAT(grid(2, true, true), Pair(-1, 1));
}

TEST(GridForTest, RejectsBadBits) {
  for (int bits : {-1, 0, 1, 9, 16, 32}) {
    QuantSpec spec;
    spec.bits = bits;
    EXPECT_EQ(GridFor(spec).status().code(), absl::StatusCode::kInvalidArgument)
        << "bits " << bits;
    EXPECT_EQ(ChooseQuantParams(-1, 1, spec).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "bits " << bits;
    const std::vector<float> data = {1.0f};
    const std::vector<int64_t> shape = {1};
    EXPECT_EQ(QuantizeTensor(data, shape, false, -1, spec).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "bits " << bits;
  }
}

// ---------------------------------------------------------------------------
// Nudging. Ranges are chosen so every float operation is exact and the
// expectations can be derived by hand (docs/numerics.md).

class NudgeTester {
 public:
  NudgeTester& range(float min, float max) {
    min_ = min;
    max_ = max;
    return *this;
  }
  NudgeTester& grid(int32_t quant_min, int32_t quant_max) {
    quant_min_ = quant_min;
    quant_max_ = quant_max;
    return *this;
  }
  NudgeTester& scale(float scale) {
    scale_ = scale;
    return *this;
  }
  NudgeTester& zero_point(int32_t zero_point) {
    zero_point_ = zero_point;
    return *this;
  }
  NudgeTester& nudged(float nudged_min, float nudged_max) {
    nudged_min_ = nudged_min;
    nudged_max_ = nudged_max;
    return *this;
  }

  void Test() const {
    const NudgedRange got = Nudge(min_, max_, quant_min_, quant_max_);
    const std::string where =
        absl::StrCat("range [", min_, ", ", max_, "] grid [", quant_min_, ", ",
                     quant_max_, "]");
    EXPECT_EQ(got.scale, scale_) << where;
    EXPECT_EQ(got.nudged_zero_point, zero_point_) << where;
    EXPECT_EQ(got.nudged_min, nudged_min_) << where;
    EXPECT_EQ(got.nudged_max, nudged_max_) << where;
    // Whatever the input, zero is on the grid: FakeQuant(0) == 0 exactly.
    EXPECT_EQ(FakeQuant(0.0f, got), 0.0f) << where;
  }

 private:
  float min_ = 0, max_ = 0;
  int32_t quant_min_ = 0, quant_max_ = 255;
  float scale_ = 1;
  int32_t zero_point_ = 0;
  float nudged_min_ = 0, nudged_max_ = 0;
};

TEST(NudgeTest, ZeroPointRoundsDown) {
  // scale = 63.75 / 255 = 0.25; zero_point_from_min = 0.5625 / 0.25 = 2.25.
  NudgeTester()
      .range(-0.5625f, 63.1875f)
      .scale(0.25f)
      .zero_point(2)
      .nudged(-0.5f, 63.25f)
      .Test();
}

TEST(NudgeTest, ZeroPointRoundsUp) {
  // zero_point_from_min = 0.6875 / 0.25 = 2.75.
  NudgeTester()
      .range(-0.6875f, 63.0625f)
      .scale(0.25f)
      .zero_point(3)
      .nudged(-0.75f, 63.0f)
      .Test();
}

TEST(NudgeTest, ZeroPointTieRoundsAwayFromZero) {
  // zero_point_from_min = 2.5 exactly: TF's std::round gives 3 (torch's
  // observers, rounding half to even, would give 2).
  NudgeTester()
      .range(-0.625f, 63.125f)
      .scale(0.25f)
      .zero_point(3)
      .nudged(-0.75f, 63.0f)
      .Test();
}

TEST(NudgeTest, MinusPointOneToPointNine) {
  // In exact arithmetic 0.1 * 255 = 25.5 would round to 26, but -0.1f is
  // -0.100000001 and max - min rounds to 1.0f, so zero_point_from_min is
  // 25.4999981f and the zero point is 25 (torch's observer agrees:
  // nudge.txt).
  const float scale = 1.0f / 255.0f;
  NudgeTester()
      .range(-0.1f, 0.9f)
      .scale(scale)
      .zero_point(25)
      .nudged(-25.0f * scale, 230.0f * scale)
      .Test();
}

TEST(NudgeTest, ScaleUnderflowWithMinZero) {
  // 1e-44 / 255 underflows to 0, so min / scale is 0 / 0: the zero point is
  // quant_min (min is 0), not a NaN converted to an int.
  EXPECT_EQ(Nudge(0.0f, 1e-44f, 1, 255).nudged_zero_point, 1);
  const absl::StatusOr<QuantParams> p =
      ChooseQuantParams(0.0f, 1e-44f, Spec(8, false, false, false));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->scale, 1.0f);
  EXPECT_EQ(p->zero_point, 0);
}

TEST(NudgeTest, NarrowRange) {
  // scale = 63.5 / 254 = 0.25; zero_point_from_min = 1 + 1 / 0.25 = 5.
  NudgeTester()
      .range(-1.0f, 62.5f)
      .grid(1, 255)
      .scale(0.25f)
      .zero_point(5)
      .nudged(-1.0f, 62.5f)
      .Test();
}

TEST(NudgeTest, FourBits) {
  // scale = 3.75 / 15 = 0.25; zero_point_from_min = 1.5 / 0.25 = 6.
  NudgeTester()
      .range(-1.5f, 2.25f)
      .grid(0, 15)
      .scale(0.25f)
      .zero_point(6)
      .nudged(-1.5f, 2.25f)
      .Test();
}

TEST(NudgeTest, PositiveRangeIsPulledDownToZero) {
  // zero_point_from_min = -0.5 / 0.25 = -2 < quant_min: zero point 0.
  NudgeTester()
      .range(0.5f, 64.25f)
      .scale(0.25f)
      .zero_point(0)
      .nudged(0.0f, 63.75f)
      .Test();
}

TEST(NudgeTest, NegativeRangeIsPulledUpToZero) {
  // zero_point_from_min = 64.25 / 0.25 = 257 > quant_max: zero point 255.
  NudgeTester()
      .range(-64.25f, -0.5f)
      .scale(0.25f)
      .zero_point(255)
      .nudged(-63.75f, 0.0f)
      .Test();
}

TEST(NudgeTest, DegenerateRangeGivesZero) {
  NudgeTester().range(0.0f, 0.0f).scale(1.0f).zero_point(0).nudged(0, 0).Test();
  NudgeTester()
      .range(0.0f, 0.0f)
      .grid(1, 255)
      .scale(1.0f)
      .zero_point(1)
      .nudged(0, 0)
      .Test();
  EXPECT_EQ(FakeQuant(3.0f, Nudge(0.0f, 0.0f, 0, 255)), 0.0f);
}

TEST(NudgeTest, MatchesTorchObserverGolden) {
  int ranges = 0;
  for (const Record& r : ReadRecords("nudge.txt")) {
    if (r[0] != "range") continue;
    ++ranges;
    NudgeTester()
        .range(F(r[1]), F(r[2]))
        .grid(I(r[3]), I(r[4]))
        .scale(F(r[5]))
        .zero_point(I(r[6]))
        .nudged(F(r[7]), F(r[8]))
        .Test();
  }
  EXPECT_GE(ranges, 5);
}

// ---------------------------------------------------------------------------
// FakeQuant against torch.fake_quantize_per_tensor_affine.

// Outputs agree when they are the same grid point; the two libraries compose
// the output differently ((q - zp) * scale vs q' * scale + nudged_min), so
// the last bit may differ.
void ExpectSameGridPoint(float got, float want, float scale,
                         const std::string& where) {
  EXPECT_NEAR(got, want, 1e-3f * scale) << where;
}

TEST(FakeQuantTest, MatchesTorchAwayFromTies) {
  int ties = 0, ties_differing = 0;
  for (const Record& r : ReadRecords("fake_quant.txt")) {
    ASSERT_EQ(r.size(), 8u) << absl::StrJoin(r, " ");
    const float scale = F(r[1]);
    const int32_t zp = I(r[2]), qmin = I(r[3]), qmax = I(r[4]);
    const float x = F(r[5]), torch_y = F(r[6]);
    const int tie = I(r[7]);
    NudgedRange range;
    range.scale = scale;
    range.nudged_zero_point = zp;
    range.nudged_min = static_cast<float>(qmin - zp) * scale;
    range.nudged_max = static_cast<float>(qmax - zp) * scale;
    const float got = FakeQuant(x, range);
    const std::string where = absl::StrJoin(r, " ");
    if (tie == 0) {
      ExpectSameGridPoint(got, torch_y, scale, where);
      continue;
    }
    if (tie == 2) {  // Near tie: float rounding picks; any neighbour is fine.
      EXPECT_NEAR(std::fabs(got - torch_y), 0.5f * scale,
                  0.5f * scale + 1e-3f * scale)
          << where;
      continue;
    }
    // Ties: TF's floor(v + 0.5) goes up; torch goes to the even neighbour,
    // which is either the same point or one step below.
    ++ties;
    ExpectSameGridPoint(got, x + 0.5f * scale, scale, where);
    const float diff = got - torch_y;
    EXPECT_TRUE(std::fabs(diff) < 1e-3f * scale ||
                std::fabs(diff - scale) < 1e-3f * scale)
        << where;
    if (std::fabs(diff) > 0.5f * scale) ++ties_differing;
  }
  EXPECT_GE(ties, 10);
  EXPECT_GT(ties_differing, 0) << "no tie shows the TF/torch difference";
}

TEST(FakeQuantTest, NudgedRangeMatchesTorchGolden) {
  int rows = 0;
  for (const Record& r : ReadRecords("nudge.txt")) {
    if (r[0] != "nfq") continue;
    ++rows;
    const NudgedRange range = Nudge(F(r[1]), F(r[2]), I(r[3]), I(r[4]));
    ExpectSameGridPoint(FakeQuant(F(r[5]), range), F(r[6]), range.scale,
                        absl::StrJoin(r, " "));
  }
  EXPECT_GE(rows, 50);
}

TEST(FakeQuantTest, ClampsAndRoundsTiesUp) {
  const NudgedRange range = Nudge(-0.5625f, 63.1875f, 0, 255);  // [-0.5, 63.25]
  EXPECT_EQ(FakeQuant(-100.0f, range), -0.5f);
  EXPECT_EQ(FakeQuant(100.0f, range), 63.25f);
  EXPECT_EQ(FakeQuant(0.125f, range), 0.25f);  // 0.5 step: up.
  EXPECT_EQ(FakeQuant(-0.125f, range), 0.0f);  // -0.5 step: up, not away.
  EXPECT_EQ(FakeQuant(0.375f, range), 0.5f);   // 1.5 steps: up.
  EXPECT_EQ(FakeQuant(0.3f, range), 0.25f);
}

// ---------------------------------------------------------------------------
// AdjustRange (tf.contrib.quantize range collection).

TEST(AdjustRangeTest, AsymmetricIncludesZero) {
  EXPECT_THAT(AdjustRange(0.5f, 2.0f, 8, false, false), Pair(0.0f, 2.0f));
  EXPECT_THAT(AdjustRange(-3.0f, -1.0f, 8, false, true), Pair(-3.0f, 0.0f));
  EXPECT_THAT(AdjustRange(-1.0f, 2.0f, 8, false, false), Pair(-1.0f, 2.0f));
}

TEST(AdjustRangeTest, SymmetricNarrowMirrors) {
  // ratio = -1.
  EXPECT_THAT(AdjustRange(-1.0f, 3.0f, 8, true, true), Pair(-3.0f, 3.0f));
  EXPECT_THAT(AdjustRange(-4.0f, 1.0f, 8, true, true), Pair(-4.0f, 4.0f));
  EXPECT_THAT(AdjustRange(0.5f, 2.0f, 8, true, true), Pair(-2.0f, 2.0f));
}

TEST(AdjustRangeTest, SymmetricFullRangeAllowsTheExtraNegativeStep) {
  // ratio = -(256 - 2) / 256 = -0.9921875.
  const float ratio = -0.9921875f;
  EXPECT_THAT(AdjustRange(-1.0f, 3.0f, 8, true, false),
              Pair(3.0f / ratio, 3.0f));
  EXPECT_THAT(AdjustRange(-4.0f, 1.0f, 8, true, false), Pair(-4.0f, 3.96875f));
  // 4 bits: ratio = -14 / 16 = -0.875.
  EXPECT_THAT(AdjustRange(-1.0f, 3.5f, 4, true, false), Pair(-4.0f, 3.5f));
}

// ---------------------------------------------------------------------------
// ChooseQuantParams.

class ChooseTester {
 public:
  ChooseTester& range(float min, float max) {
    min_ = min;
    max_ = max;
    return *this;
  }
  ChooseTester& spec(QuantSpec spec) {
    spec_ = spec;
    return *this;
  }
  ChooseTester& want(float scale, int32_t zero_point) {
    scale_ = scale;
    zero_point_ = zero_point;
    return *this;
  }
  void Test() const {
    const std::string where =
        absl::StrCat("range [", min_, ", ", max_, "] ", SpecString(spec_));
    absl::StatusOr<QuantParams> got = ChooseQuantParams(min_, max_, spec_);
    ASSERT_TRUE(got.ok()) << where << ": " << got.status();
    EXPECT_EQ(got->scale, scale_) << where;
    EXPECT_EQ(got->zero_point, zero_point_) << where;
  }

 private:
  float min_ = 0, max_ = 0;
  QuantSpec spec_;
  float scale_ = 1;
  int32_t zero_point_ = 0;
};

TEST(ChooseQuantParamsTest, Symmetric) {
  const float m = 1.27f;
  ChooseTester()
      .range(-0.5f, m)
      .spec(Spec(8, true, true, true))
      .want(m / 127.0f, 0)
      .Test();
  ChooseTester()
      .range(-2.0f, 1.0f)
      .spec(Spec(8, true, true, false))
      .want(2.0f / 127.5f, 0)
      .Test();
  ChooseTester()
      .range(-2.0f, 1.0f)
      .spec(Spec(8, false, true, false))
      .want(2.0f / 127.5f, 128)
      .Test();
  ChooseTester()
      .range(-2.0f, 1.0f)
      .spec(Spec(8, false, true, true))
      .want(2.0f / 127.0f, 128)
      .Test();
  ChooseTester()
      .range(0.0f, 7.0f)
      .spec(Spec(4, true, true, true))
      .want(1.0f, 0)
      .Test();
  ChooseTester()
      .range(-3.0f, 0.0f)
      .spec(Spec(4, false, true, true))
      .want(3.0f / 7.0f, 8)
      .Test();
}

TEST(ChooseQuantParamsTest, AsymmetricNudgesOnTheUnsignedGrid) {
  // See NudgeTest.ZeroPointRoundsDown: scale 0.25, unsigned zero point 2.
  ChooseTester()
      .range(-0.5625f, 63.1875f)
      .spec(Spec(8, false, false, false))
      .want(0.25f, 2)
      .Test();
  ChooseTester()
      .range(-0.5625f, 63.1875f)
      .spec(Spec(8, true, false, false))
      .want(0.25f, 2 - 128)
      .Test();
  // Narrow: unsigned [1, 255], scale 63.5 / 254; shifted to [-127, 127].
  ChooseTester()
      .range(-1.0f, 62.5f)
      .spec(Spec(8, false, false, true))
      .want(0.25f, 5)
      .Test();
  ChooseTester()
      .range(-1.0f, 62.5f)
      .spec(Spec(8, true, false, true))
      .want(0.25f, 5 - 128)
      .Test();
  ChooseTester()
      .range(-1.5f, 2.25f)
      .spec(Spec(4, true, false, false))
      .want(0.25f, 6 - 8)
      .Test();
}

TEST(ChooseQuantParamsTest, WidensToIncludeZeroBeforeNudging) {
  // [0.5, 64.25] becomes [0, 64.25]: scale 64.25 / 255, not 63.75 / 255.
  ChooseTester()
      .range(0.5f, 64.25f)
      .spec(Spec(8, false, false, false))
      .want(64.25f / 255.0f, 0)
      .Test();
  ChooseTester()
      .range(-64.25f, -0.5f)
      .spec(Spec(8, false, false, false))
      .want(64.25f / 255.0f, 255)
      .Test();
  ChooseTester()
      .range(0.5f, 1.27f)
      .spec(Spec(8, true, true, true))
      .want(1.27f / 127.0f, 0)
      .Test();
}

TEST(ChooseQuantParamsTest, AllZeroRangeHasScaleOne) {
  ChooseTester().spec(Spec(8, true, true, true)).want(1.0f, 0).Test();
  ChooseTester().spec(Spec(8, false, true, false)).want(1.0f, 128).Test();
  ChooseTester().spec(Spec(8, false, false, false)).want(1.0f, 0).Test();
  ChooseTester().spec(Spec(8, true, false, false)).want(1.0f, -128).Test();
  ChooseTester().spec(Spec(8, true, false, true)).want(1.0f, -127).Test();
}

TEST(ChooseQuantParamsTest, RejectsBadRanges) {
  const QuantSpec spec;
  for (auto [min, max] : std::vector<std::pair<float, float>>{
           {kNaN, 1}, {-1, kNaN}, {-kInf, 1}, {-1, kInf}, {2, 1}}) {
    EXPECT_EQ(ChooseQuantParams(min, max, spec).status().code(),
              absl::StatusCode::kInvalidArgument)
        << min << " " << max;
  }
}

TEST(ChooseQuantParamsTest, ZeroIsExactForRandomRanges) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-50.0f, 50.0f);
  for (int bits = 2; bits <= 8; ++bits) {
    for (int flags = 0; flags < 8; ++flags) {
      const QuantSpec spec = Spec(bits, flags & 1, flags & 2, flags & 4);
      const QuantGrid grid = *GridFor(spec);
      for (int i = 0; i < 50; ++i) {
        float a = dist(rng), b = dist(rng);
        if (a > b) std::swap(a, b);
        const QuantParams p = *ChooseQuantParams(a, b, spec);
        const std::string where =
            absl::StrCat("[", a, ", ", b, "] ", SpecString(spec));
        EXPECT_GT(p.scale, 0.0f) << where;
        EXPECT_GE(p.zero_point, grid.quant_min) << where;
        EXPECT_LE(p.zero_point, grid.quant_max) << where;
        EXPECT_EQ(QuantizeValue(0.0f, p, grid), p.zero_point) << where;
        EXPECT_EQ(DequantizeValue(p.zero_point, p), 0.0f) << where;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// QuantizeValue.

TEST(QuantizeValueTest, RoundsHalfToEven) {
  const QuantParams p{1.0f, 0};
  const QuantGrid g{-128, 127};
  const std::vector<std::pair<float, int32_t>> cases = {
      {0.5f, 0},   {1.5f, 2},   {2.5f, 2},   {3.5f, 4},  {-0.5f, 0},
      {-1.5f, -2}, {-2.5f, -2}, {-3.5f, -4}, {0.49f, 0}, {0.51f, 1}};
  for (auto [x, q] : cases) EXPECT_EQ(QuantizeValue(x, p, g), q) << x;
  // The zero point is added after rounding: 2.5 + 10 is 12, not 13.
  EXPECT_EQ(QuantizeValue(2.5f, QuantParams{1.0f, 10}, QuantGrid{0, 255}), 12);
}

TEST(QuantizeValueTest, MatchesTorchTies) {
  int rows = 0;
  for (const Record& r : ReadRecords("half_to_even.txt")) {
    ASSERT_EQ(r.size(), 6u) << absl::StrJoin(r, " ");
    const QuantGrid grid = r[1].find("quint8") != std::string::npos
                               ? QuantGrid{0, 255}
                               : QuantGrid{-128, 127};
    const QuantParams p{F(r[2]), I(r[3])};
    const int32_t want = I(r[5]);
    // fake_quantize rows hold q - zp with zp 0, the same integer.
    EXPECT_EQ(QuantizeValue(F(r[4]), p, grid), want) << absl::StrJoin(r, " ");
    ++rows;
  }
  EXPECT_GE(rows, 50);
}

TEST(QuantizeValueTest, Saturates) {
  const QuantParams p{0.5f, 0};
  const QuantGrid narrow{-127, 127}, full{-128, 127}, u8{0, 255}, s4{-8, 7};
  EXPECT_EQ(QuantizeValue(1000.0f, p, narrow), 127);
  EXPECT_EQ(QuantizeValue(-1000.0f, p, narrow), -127);
  EXPECT_EQ(QuantizeValue(-1000.0f, p, full), -128);
  EXPECT_EQ(QuantizeValue(-64.25f, p, full), -128);  // -128.5 -> -128.
  EXPECT_EQ(QuantizeValue(1e30f, p, full), 127);
  EXPECT_EQ(QuantizeValue(kInf, p, full), 127);
  EXPECT_EQ(QuantizeValue(-kInf, p, full), -128);
  EXPECT_EQ(QuantizeValue(-1.0f, QuantParams{0.5f, 1}, u8), 0);
  EXPECT_EQ(QuantizeValue(200.0f, QuantParams{0.5f, 128}, u8), 255);
  EXPECT_EQ(QuantizeValue(4.0f, p, s4), 7);
  EXPECT_EQ(QuantizeValue(-4.25f, p, s4), -8);
  EXPECT_EQ(QuantizeValue(kNaN, QuantParams{0.5f, 3}, u8), 3);
}

// ---------------------------------------------------------------------------
// LayoutFor.

TEST(LayoutForTest, SplitsAroundTheAxis) {
  const std::vector<int64_t> shape = {2, 3, 4};
  auto layout = [&](int axis) {
    absl::StatusOr<ChannelLayout> l = LayoutFor(shape, axis);
    EXPECT_TRUE(l.ok()) << l.status();
    return std::vector<int64_t>{l->outer, l->channels, l->inner};
  };
  EXPECT_THAT(layout(0), ElementsAre(1, 2, 12));
  EXPECT_THAT(layout(1), ElementsAre(2, 3, 4));
  EXPECT_THAT(layout(2), ElementsAre(6, 4, 1));
  EXPECT_THAT(layout(-1), ElementsAre(6, 4, 1));
  EXPECT_THAT(layout(-2), ElementsAre(2, 3, 4));
  EXPECT_THAT(layout(-3), ElementsAre(1, 2, 12));
  const std::vector<int64_t> with_zero = {2, 0, 4};
  absl::StatusOr<ChannelLayout> z = LayoutFor(with_zero, 1);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->channels, 0);
  EXPECT_EQ(z->inner, 4);
}

TEST(LayoutForTest, RejectsBadAxesAndDims) {
  const std::vector<int64_t> shape = {2, 3, 4};
  for (int axis : {3, 4, -4, -100}) {
    EXPECT_EQ(LayoutFor(shape, axis).status().code(),
              absl::StatusCode::kInvalidArgument)
        << axis;
  }
  EXPECT_EQ(LayoutFor({}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutFor({}, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> negative = {2, -3};
  EXPECT_EQ(LayoutFor(negative, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// QuantizeTensor: against torch goldens and against a slow reference.

// The obvious implementation: element i has channel (i / inner) % channels.
// Slow (a range scan per channel over the whole tensor); the oracle only.
QuantizedTensor ReferenceQuantize(const std::vector<float>& data,
                                  const std::vector<int64_t>& shape,
                                  bool per_channel, int axis,
                                  const QuantSpec& spec) {
  ChannelLayout layout;
  layout.inner = static_cast<int64_t>(data.size());
  if (per_channel) layout = *LayoutFor(shape, axis);
  auto channel_of = [&](size_t i) {
    return (static_cast<int64_t>(i) / layout.inner) % layout.channels;
  };
  QuantizedTensor out;
  out.spec = spec;
  out.axis = per_channel
                 ? (axis < 0 ? axis + static_cast<int>(shape.size()) : axis)
                 : -1;
  for (int64_t c = 0; c < layout.channels; ++c) {
    float lo = 0, hi = 0;  // Widening to zero makes 0 a valid start.
    for (size_t i = 0; i < data.size(); ++i) {
      if (channel_of(i) != c) continue;
      lo = std::min(lo, data[i]);
      hi = std::max(hi, data[i]);
    }
    out.params.push_back(*ChooseQuantParams(lo, hi, spec));
  }
  const QuantGrid grid = *GridFor(spec);
  for (size_t i = 0; i < data.size(); ++i) {
    const int32_t q = QuantizeValue(data[i], out.params[channel_of(i)], grid);
    out.values.push_back(static_cast<char>(q));
  }
  return out;
}

class QuantizeTensorTester {
 public:
  QuantizeTensorTester& shape(std::vector<int64_t> shape) {
    shape_ = std::move(shape);
    return *this;
  }
  QuantizeTensorTester& per_channel(int axis) {
    per_channel_ = true;
    axis_ = axis;
    return *this;
  }
  QuantizeTensorTester& spec(QuantSpec spec) {
    spec_ = spec;
    return *this;
  }
  QuantizeTensorTester& data(std::vector<float> data) {
    data_ = std::move(data);
    return *this;
  }
  // Fills data with N(0, sigma) values from a fixed seed.
  QuantizeTensorTester& random_data(uint32_t seed, float sigma = 1.0f) {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    data_.resize(n);
    for (float& v : data_) v = dist(rng);
    return *this;
  }
  // Expected result; without it, ReferenceQuantize is the oracle.
  QuantizeTensorTester& want(std::vector<float> scales,
                             std::vector<int32_t> zero_points,
                             std::vector<int32_t> q,
                             std::vector<float> dequant) {
    want_scales_ = std::move(scales);
    want_zero_points_ = std::move(zero_points);
    want_q_ = std::move(q);
    want_dequant_ = std::move(dequant);
    has_want_ = true;
    return *this;
  }

  void Test() const {
    const std::string where =
        absl::StrCat("shape [", absl::StrJoin(shape_, ","), "] ",
                     per_channel_ ? absl::StrCat("axis ", axis_) : "per-tensor",
                     " ", SpecString(spec_));
    absl::StatusOr<QuantizedTensor> got =
        QuantizeTensor(data_, shape_, per_channel_, axis_, spec_);
    ASSERT_TRUE(got.ok()) << where << ": " << got.status();

    std::vector<float> scales = want_scales_, dequant = want_dequant_;
    std::vector<int32_t> zero_points = want_zero_points_, q = want_q_;
    if (!has_want_) {
      const QuantizedTensor ref =
          ReferenceQuantize(data_, shape_, per_channel_, axis_, spec_);
      scales.clear();
      zero_points.clear();
      for (const QuantParams& p : ref.params) {
        scales.push_back(p.scale);
        zero_points.push_back(p.zero_point);
      }
      for (char b : ref.values) q.push_back(Unpack(b));
      dequant = DequantizeTensor(ref, shape_);
    }

    const int rank = static_cast<int>(shape_.size());
    EXPECT_EQ(got->axis, per_channel_ ? (axis_ < 0 ? axis_ + rank : axis_) : -1)
        << where;
    EXPECT_EQ(got->spec.bits, spec_.bits) << where;
    ASSERT_EQ(got->params.size(), scales.size()) << where;
    for (size_t c = 0; c < scales.size(); ++c) {
      EXPECT_EQ(got->params[c].scale, scales[c]) << where << " channel " << c;
      EXPECT_EQ(got->params[c].zero_point, zero_points[c])
          << where << " channel " << c;
    }
    ASSERT_EQ(got->values.size(), q.size()) << where;
    const std::vector<float> got_dequant = DequantizeTensor(*got, shape_);
    ASSERT_EQ(got_dequant.size(), dequant.size()) << where;
    int failures = 0;
    for (size_t i = 0; i < q.size() && failures < 10; ++i) {
      const int32_t got_q = Unpack(got->values[i]);
      if (got_q != q[i] || got_dequant[i] != dequant[i]) {
        ++failures;
        ADD_FAILURE() << where << " at position " << i << ": x = " << data_[i]
                      << ", q = " << got_q << " (want " << q[i]
                      << "), dequant = " << got_dequant[i] << " (want "
                      << dequant[i] << ")";
      }
    }
  }

 private:
  int32_t Unpack(char b) const {
    return spec_.is_signed ? static_cast<int32_t>(static_cast<int8_t>(b))
                           : static_cast<int32_t>(static_cast<uint8_t>(b));
  }

  std::vector<int64_t> shape_;
  bool per_channel_ = false;
  int axis_ = -1;
  QuantSpec spec_;
  std::vector<float> data_;
  bool has_want_ = false;
  std::vector<float> want_scales_, want_dequant_;
  std::vector<int32_t> want_zero_points_, want_q_;
};

QuantizeTensorTester FromGolden(const TensorGolden& g) {
  QuantizeTensorTester t;
  t.shape(g.shape).data(g.data).want(g.scales, g.zero_points, g.q, g.dequant);
  return t;
}

TEST(QuantizeTensorTest, PerChannelSymmetricMatchesTorch) {
  const std::vector<TensorGolden> goldens =
      ReadTensorGoldens("quantize_per_channel.txt");
  ASSERT_EQ(goldens.size(), 2u);
  for (const TensorGolden& g : goldens) {
    SCOPED_TRACE(g.name);
    const QuantSpec spec = Spec(8, true, true, true);
    FromGolden(g).per_channel(g.axis).spec(spec).Test();
    // The same channels named from the end.
    FromGolden(g)
        .per_channel(g.axis - static_cast<int>(g.shape.size()))
        .spec(spec)
        .Test();
  }
}

TEST(QuantizeTensorTest, PerTensorAsymmetricMatchesTorch) {
  const std::vector<TensorGolden> goldens =
      ReadTensorGoldens("quantize_per_tensor.txt");
  ASSERT_EQ(goldens.size(), 3u);
  for (const TensorGolden& g : goldens) {
    SCOPED_TRACE(g.name);
    const bool is_signed = g.name.find("qint8") != std::string::npos &&
                           g.name.find("quint8") == std::string::npos;
    FromGolden(g).spec(Spec(8, is_signed, false, false)).Test();
  }
}

TEST(QuantizeTensorTest, MatchesReferenceOnManyShapes) {
  const std::vector<std::vector<int64_t>> shapes = {
      {7}, {3, 5}, {4, 1, 3}, {2, 3, 4, 5}, {1, 1}, {16, 9}};
  uint32_t seed = 10;
  for (const auto& shape : shapes) {
    for (int flags = 0; flags < 8; ++flags) {
      const QuantSpec spec =
          Spec(flags & 4 ? 4 : 8, flags & 1, flags & 2, flags & 1);
      QuantizeTensorTester().shape(shape).spec(spec).random_data(++seed).Test();
      for (int axis = -static_cast<int>(shape.size());
           axis < static_cast<int>(shape.size()); ++axis) {
        QuantizeTensorTester()
            .shape(shape)
            .per_channel(axis)
            .spec(spec)
            .random_data(++seed, 0.1f * (1 + axis * axis))
            .Test();
      }
    }
  }
}

TEST(QuantizeTensorTest, ChannelsHaveTheirOwnRanges) {
  // Channel 0 in [-1, 1], channel 1 all zero, channel 2 in [0, 127].
  QuantizeTensorTester()
      .shape({2, 3})
      .per_channel(1)
      .spec(Spec(8, true, true, true))
      .data({-1.0f, 0.0f, 127.0f, 0.5f, 0.0f, 63.5f})
      .want({1.0f / 127.0f, 1.0f, 1.0f}, {0, 0, 0}, {-127, 0, 127, 64, 0, 64},
            {-1.0f, 0.0f, 127.0f, 64.0f / 127.0f, 0.0f, 64.0f})
      .Test();
}

TEST(QuantizeTensorTest, EmptyTensors) {
  const QuantSpec spec = Spec(8, true, true, true);
  QuantizeTensorTester().shape({0}).spec(spec).want({1.0f}, {0}, {}, {}).Test();
  QuantizeTensorTester()
      .shape({0, 3})
      .per_channel(1)
      .spec(spec)
      .want({1.0f, 1.0f, 1.0f}, {0, 0, 0}, {}, {})
      .Test();
  QuantizeTensorTester()
      .shape({0, 3})
      .per_channel(0)
      .spec(spec)
      .want({}, {}, {}, {})
      .Test();
}

TEST(QuantizeTensorTest, RejectsBadInput) {
  const QuantSpec spec;
  const std::vector<float> six(6, 1.0f);
  auto code = [&](const std::vector<float>& data,
                  const std::vector<int64_t>& shape, bool per_channel,
                  int axis) {
    return QuantizeTensor(data, shape, per_channel, axis, spec).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(six, {2, 2}, false, -1), kInvalid);
  EXPECT_EQ(code(six, {2, 3}, true, 2), kInvalid);
  EXPECT_EQ(code(six, {2, 3}, true, -3), kInvalid);
  EXPECT_EQ(code(six, {-2, -3}, false, -1), kInvalid);
  EXPECT_EQ(code({1, kNaN, 2, 3, 4, 5}, {2, 3}, true, 0), kInvalid);
  EXPECT_EQ(code({1, kInf, 2, 3, 4, 5}, {2, 3}, false, -1), kInvalid);
  EXPECT_EQ(code(six, {2, 3}, false, 7), absl::StatusCode::kOk)
      << "per-tensor ignores the axis";
}

// ---------------------------------------------------------------------------
// MeasureError.

TEST(MeasureErrorTest, ExactCopyHasInfiniteSqnr) {
  const std::vector<float> x = {1.0f, -2.0f, 3.5f};
  const ErrorStats s = MeasureError(x, x);
  EXPECT_EQ(s.mse, 0.0);
  EXPECT_EQ(s.sqnr_db, std::numeric_limits<double>::infinity());
  const ErrorStats empty = MeasureError({}, {});
  EXPECT_EQ(empty.mse, 0.0);
  EXPECT_EQ(empty.sqnr_db, std::numeric_limits<double>::infinity());
}

TEST(MeasureErrorTest, KnownValues) {
  // Signal 1 + 4 + 9 + 16 = 30, noise 1: mse 0.25, SQNR 10 log10(30).
  const ErrorStats s = MeasureError(std::vector<float>{1, 2, 3, 4},
                                    std::vector<float>{1, 2, 3, 5});
  EXPECT_DOUBLE_EQ(s.mse, 0.25);
  EXPECT_NEAR(s.sqnr_db, 14.771212547196624, 1e-12);
  const ErrorStats silent =
      MeasureError(std::vector<float>{0, 0}, std::vector<float>{0, 1});
  EXPECT_DOUBLE_EQ(silent.mse, 0.5);
  EXPECT_EQ(silent.sqnr_db, -std::numeric_limits<double>::infinity());
  const ErrorStats mismatch =
      MeasureError(std::vector<float>{1, 2}, std::vector<float>{1});
  EXPECT_TRUE(std::isnan(mismatch.mse));
  EXPECT_TRUE(std::isnan(mismatch.sqnr_db));
}

TEST(MeasureErrorTest, QuantizationErrorIsBoundedByHalfAStep) {
  std::vector<float> data(1000);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : data) v = dist(rng);
  const std::vector<int64_t> shape = {1000};
  const QuantizedTensor q =
      *QuantizeTensor(data, shape, false, -1, Spec(8, true, true, true));
  const ErrorStats s = MeasureError(data, DequantizeTensor(q, shape));
  const double step = q.params[0].scale;
  EXPECT_GT(s.mse, 0.0);
  EXPECT_LE(s.mse, step * step / 4);
  // Uniform rounding noise has variance step^2 / 12; allow sampling slack.
  EXPECT_NEAR(s.mse, step * step / 12, step * step / 48);
}

// Blocked quantization against a plain reference: each block's own
// [min, max] through ChooseQuantParams, every value through QuantizeValue,
// the parameters in the scale tensor's row-major order. Axis 1 of a rank-3
// tensor with a short last block (7 = 3 + 3 + 1).
TEST(QuantizeTensorBlockedTest, MatchesPerBlockReference) {
  const std::vector<int64_t> shape = {2, 7, 3};
  std::vector<float> data(2 * 7 * 3);
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = std::sin(0.7f * static_cast<float>(i)) * (1.0f + (i % 5));
  }
  for (const QuantSpec& spec :
       {QuantSpec{8, true, true, true}, QuantSpec{4, true, true, true},
        QuantSpec{8, true, false, false}}) {
    absl::StatusOr<QuantizedTensor> q =
        QuantizeTensorBlocked(data, shape, 1, 3, spec);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->axis, 1);
    EXPECT_EQ(q->block_size, 3);
    EXPECT_THAT(BlockedParamShape(shape, 1, 3), ElementsAre(2, 3, 3));
    ASSERT_EQ(q->params.size(), 2u * 3 * 3);
    const QuantGrid grid = *GridFor(spec);
    for (int64_t o = 0; o < 2; ++o) {
      for (int64_t b = 0; b < 3; ++b) {
        for (int64_t i = 0; i < 3; ++i) {
          float lo = 0, hi = 0;
          bool first = true;
          for (int64_t c = 3 * b; c < std::min<int64_t>(7, 3 * b + 3); ++c) {
            const float v = data[(o * 7 + c) * 3 + i];
            lo = first ? v : std::min(lo, v);
            hi = first ? v : std::max(hi, v);
            first = false;
          }
          const QuantParams want = *ChooseQuantParams(lo, hi, spec);
          const QuantParams& got = q->params[(o * 3 + b) * 3 + i];
          EXPECT_EQ(got.scale, want.scale);
          EXPECT_EQ(got.zero_point, want.zero_point);
          for (int64_t c = 3 * b; c < std::min<int64_t>(7, 3 * b + 3); ++c) {
            const int64_t at = (o * 7 + c) * 3 + i;
            const int32_t v = QuantizeValue(data[at], want, grid);
            const int32_t stored =
                spec.is_signed
                    ? static_cast<int32_t>(static_cast<int8_t>(q->values[at]))
                    : static_cast<int32_t>(static_cast<uint8_t>(q->values[at]));
            EXPECT_EQ(stored, v) << "at " << at;
          }
        }
      }
    }
    const std::vector<float> back = DequantizeTensor(*q, shape);
    ASSERT_EQ(back.size(), data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      const int64_t o = i / 21, c = (i / 3) % 7, j = i % 3;
      const QuantParams& p = q->params[(o * 3 + c / 3) * 3 + j];
      EXPECT_NEAR(back[i], data[i], p.scale * 0.5f + 1e-6f) << "at " << i;
    }
  }
}

// Blocks pay where one channel mixes small and large values: the small
// block gets its own fine grid.
TEST(QuantizeTensorBlockedTest, FinerThanPerChannelOnMixedMagnitudes) {
  const std::vector<int64_t> shape = {64, 2};  // [K, N], blocks along K.
  std::vector<float> data(128);
  for (int k = 0; k < 64; ++k) {
    for (int n = 0; n < 2; ++n) {
      data[k * 2 + n] = (k < 32 ? 0.01f : 1.0f) * std::cos(0.3f * (k + n));
    }
  }
  const QuantSpec spec{4, true, true, true};
  absl::StatusOr<QuantizedTensor> blocked =
      QuantizeTensorBlocked(data, shape, 0, 32, spec);
  absl::StatusOr<QuantizedTensor> channel =
      QuantizeTensor(data, shape, true, 1, spec);
  ASSERT_TRUE(blocked.ok() && channel.ok());
  const ErrorStats b = MeasureError(data, DequantizeTensor(*blocked, shape));
  const ErrorStats c = MeasureError(data, DequantizeTensor(*channel, shape));
  EXPECT_LT(b.mse, c.mse);
}

TEST(QuantizeTensorBlockedTest, RefusesBadInput) {
  const std::vector<float> data(8, 1.0f);
  const QuantSpec spec{8, true, true, true};
  EXPECT_EQ(QuantizeTensorBlocked(data, {2, 4}, 1, 0, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeTensorBlocked(data, {2, 4}, 2, 2, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeTensorBlocked(data, {3, 4}, 1, 2, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> nan = data;
  nan[5] = std::nanf("");
  EXPECT_EQ(QuantizeTensorBlocked(nan, {2, 4}, 1, 2, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::numerics
