#include "core/passes/input_moments.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;

executor::Tensor Random(std::vector<int64_t> shape, uint32_t seed) {
  executor::Tensor t(onnx::TensorProto::FLOAT, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.size(); ++i) t.mutable_data<float>()[i] = u(gen);
  return t;
}

// H = sum over rows of x x^T, from rows written out one by one.
std::vector<double> Moments(const std::vector<std::vector<float>>& rows,
                            int64_t k) {
  std::vector<double> h(k * k, 0.0);
  for (const auto& x : rows) {
    for (int64_t a = 0; a < k; ++a) {
      for (int64_t b = 0; b < k; ++b) h[a * k + b] += double{x[a]} * x[b];
    }
  }
  return h;
}

// Group `group` of `h` (k x k matrices one after the other) against `want`.
void ExpectNearMatrix(const std::vector<float>& h, int64_t k, int64_t group,
                      const std::vector<double>& want) {
  ASSERT_EQ(static_cast<int64_t>(want.size()), k * k);
  ASSERT_GE(static_cast<int64_t>(h.size()), (group + 1) * k * k);
  for (int64_t i = 0; i < k * k; ++i) {
    EXPECT_NEAR(h[group * k * k + i], want[i], 1e-4 * (1 + std::abs(want[i])))
        << "entry " << i;
  }
}

void ExpectNear(const LayerMoments& got, int64_t group,
                const std::vector<double>& want) {
  ExpectNearMatrix(got.h, got.k, group, want);
}

TEST(InputMomentsTest, MatMulRowsAreTheLastAxis) {
  testing::ModelBuilder m(13);
  m.Input("x", {2, 3, 4}).Weight("W", {4, 5});
  m.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  m.Output("y");
  auto moments = InputMoments::Create(m.Build().graph(), 0, nullptr);
  ASSERT_TRUE(moments.ok()) << moments.status();
  const executor::Tensor x = Random({2, 3, 4}, 1);
  ASSERT_TRUE((*moments)->Observe("x", x).ok());
  ASSERT_TRUE((*moments)->Observe("unrelated", x).ok());
  EXPECT_EQ((*moments)->Find("y"), nullptr);  // Not finished yet.
  (*moments)->Finish();
  const LayerMoments* got = (*moments)->Find("y");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->rows, 6);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 6; ++r) {
    rows.emplace_back(x.data<float>() + r * 4, x.data<float>() + r * 4 + 4);
  }
  ExpectNear(*got, 0, Moments(rows, 4));
}

void ExpectNearFold(const LayerMoments& got, const std::vector<double>& want) {
  ASSERT_EQ(got.h_fold.size(), want.size());
  ExpectNearMatrix(got.h_fold, got.k, 0, want);
}

// Samples (the first axis) alternate between the folds across calls; h
// holds both after Finish, and more rows may come after it.
TEST(InputMomentsTest, FoldsTakeAlternateSamplesAndAddUpToH) {
  testing::ModelBuilder m(13);
  m.Input("x", {3, 2, 4}).Weight("W", {4, 5});
  m.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  m.Output("y");
  auto moments = InputMoments::Create(m.Build().graph(), 0, nullptr,
                                      /*folds=*/true);
  ASSERT_TRUE(moments.ok()) << moments.status();
  std::vector<std::vector<float>> all, even;
  auto feed = [&](uint32_t seed, int64_t first_sample) {
    const executor::Tensor x = Random({3, 2, 4}, seed);
    ASSERT_TRUE((*moments)->Observe("x", x).ok());
    for (int64_t s = 0; s < 3; ++s) {
      for (int64_t r = 0; r < 2; ++r) {
        const float* row = x.data<float>() + (s * 2 + r) * 4;
        all.emplace_back(row, row + 4);
        if ((first_sample + s) % 2 == 0) even.emplace_back(row, row + 4);
      }
    }
  };
  feed(4, 0);
  feed(5, 3);  // Samples 3, 4, 5: sample 4 is even.
  (*moments)->Finish();
  const LayerMoments* got = (*moments)->Find("y");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->rows, 12);
  EXPECT_EQ(got->fold_rows, 6);
  ExpectNear(*got, 0, Moments(all, 4));
  ExpectNearFold(*got, Moments(even, 4));
  feed(6, 6);  // After Finish: h is taken apart and merged again.
  (*moments)->Finish();
  (*moments)->Finish();  // Twice changes nothing.
  got = (*moments)->Find("y");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->fold_rows, 10);
  ExpectNear(*got, 0, Moments(all, 4));
  ExpectNearFold(*got, Moments(even, 4));
}

TEST(InputMomentsTest, ConvFoldsAreWholeImages) {
  testing::ModelBuilder m(13);
  m.Input("x", {3, 1, 2, 2}).Weight("W", {2, 1, 1, 1});
  m.Node("Conv", {"x", "W"}, {"y"}, "conv");
  m.Output("y");
  auto moments = InputMoments::Create(m.Build().graph(), 0, nullptr,
                                      /*folds=*/true);
  ASSERT_TRUE(moments.ok()) << moments.status();
  const executor::Tensor x = Random({3, 1, 2, 2}, 7);
  ASSERT_TRUE((*moments)->Observe("x", x).ok());
  (*moments)->Finish();
  const LayerMoments* got = (*moments)->Find("y");
  ASSERT_NE(got, nullptr);
  double all = 0, even = 0;
  for (int64_t i = 0; i < 12; ++i) {
    const double v = x.data<float>()[i];
    all += v * v;
    if (i / 4 != 1) even += v * v;  // Images 0 and 2.
  }
  EXPECT_EQ(got->fold_rows, 8);
  EXPECT_NEAR(got->h[0], all, 1e-5);
  EXPECT_NEAR(got->h_fold[0], even, 1e-5);
}

TEST(InputMomentsTest, FoldsDoubleTheBudgetCharge) {
  testing::ModelBuilder m(13);
  m.Input("x", {1, 8}).Weight("W", {8, 2});
  m.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  m.Output("y");
  const onnx::GraphProto g = m.Build().graph();
  auto plain = InputMoments::Create(g, 0, nullptr);
  auto folded = InputMoments::Create(g, 0, nullptr, /*folds=*/true);
  ASSERT_TRUE(plain.ok() && folded.ok());
  EXPECT_EQ((*plain)->bytes(), 8 * 8 * 4);
  EXPECT_EQ((*folded)->bytes(), 2 * 8 * 8 * 4);
}

TEST(InputMomentsTest, GemmTransAReadsColumns) {
  testing::ModelBuilder m(13);
  m.Input("a", {3, 5}).Weight("B", {6, 3});  // A^T is [5, 3]; B^T is [3, 6].
  m.Node("Gemm", {"a", "B"}, {"y"}, "gemm").Attr("transA", 1).Attr("transB", 1);
  m.Output("y");
  auto moments = InputMoments::Create(m.Build().graph(), 0, nullptr);
  ASSERT_TRUE(moments.ok()) << moments.status();
  const executor::Tensor a = Random({3, 5}, 2);
  ASSERT_TRUE((*moments)->Observe("a", a).ok());
  (*moments)->Finish();
  const LayerMoments* got = (*moments)->Find("y");
  ASSERT_NE(got, nullptr);
  std::vector<std::vector<float>> rows(5, std::vector<float>(3));
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 3; ++j) rows[i][j] = a.data<float>()[j * 5 + i];
  }
  ExpectNear(*got, 0, Moments(rows, 3));
}

// A grouped, strided, padded, dilated Conv against patches read one by one.
TEST(InputMomentsTest, ConvPatchesPerGroup) {
  const int64_t n = 2, c = 4, h = 6, w = 5, group = 2, m_out = 6;
  testing::ModelBuilder m(13);
  m.Input("x", {n, c, h, w}).Weight("W", {m_out, c / group, 3, 2});
  m.Node("Conv", {"x", "W"}, {"y"}, "conv")
      .Attr("group", group)
      .Attr("strides", std::vector<int64_t>{2, 1})
      .Attr("pads", std::vector<int64_t>{1, 0, 2, 1})
      .Attr("dilations", std::vector<int64_t>{1, 2});
  m.Output("y");
  auto moments = InputMoments::Create(m.Build().graph(), 0, nullptr);
  ASSERT_TRUE(moments.ok()) << moments.status();
  const executor::Tensor x = Random({n, c, h, w}, 3);
  ASSERT_TRUE((*moments)->Observe("x", x).ok());
  (*moments)->Finish();
  const LayerMoments* got = (*moments)->Find("y");
  ASSERT_NE(got, nullptr);
  const int64_t cg = c / group, kh = 3, kw = 2, k = cg * kh * kw;
  ASSERT_EQ(got->k, k);
  ASSERT_EQ(got->groups, group);
  // Output size: H (6 + 1 + 2 - 3) / 2 + 1 = 4; W (5 + 0 + 1 - 3) / 1 + 1 = 4.
  const int64_t oh = 4, ow = 4;
  EXPECT_EQ(got->rows, n * oh * ow);
  auto at = [&](int64_t b, int64_t ch, int64_t y, int64_t xx) {
    if (y < 0 || y >= h || xx < 0 || xx >= w) return 0.0f;
    return x.data<float>()[((b * c + ch) * h + y) * w + xx];
  };
  for (int64_t g = 0; g < group; ++g) {
    std::vector<std::vector<float>> rows;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          std::vector<float> row;
          for (int64_t ch = 0; ch < cg; ++ch) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                row.push_back(
                    at(b, g * cg + ch, oy * 2 - 1 + i, ox * 1 - 0 + j * 2));
              }
            }
          }
          rows.push_back(row);
        }
      }
    }
    ExpectNear(*got, g, Moments(rows, k));
  }
}

TEST(InputMomentsTest, LayersReadingOneInputOneWayShareTheirStatistics) {
  testing::ModelBuilder m(13);
  m.Input("x", {3, 4}).Weight("Wq", {4, 4}).Weight("Wk", {4, 4}, 2);
  m.Node("MatMul", {"x", "Wq"}, {"q"}, "q");
  m.Node("MatMul", {"x", "Wk"}, {"k"}, "k");
  m.Output("q").Output("k");
  auto moments = InputMoments::Create(m.Build().graph(), 0, nullptr);
  ASSERT_TRUE(moments.ok()) << moments.status();
  EXPECT_EQ((*moments)->matrices(), 1);
  ASSERT_TRUE((*moments)->Observe("x", Random({3, 4}, 4)).ok());
  (*moments)->Finish();
  EXPECT_EQ((*moments)->Find("q"), (*moments)->Find("k"));
  EXPECT_EQ((*moments)->Find("q")->rows, 3);
}

TEST(InputMomentsTest, SmallWeightsAreNotTracked) {
  testing::ModelBuilder m(13);
  m.Input("x", {3, 4}).Weight("W", {4, 4});
  m.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  m.Output("y");
  auto moments = InputMoments::Create(m.Build().graph(), 17, nullptr);
  ASSERT_TRUE(moments.ok());
  EXPECT_EQ((*moments)->matrices(), 0);
}

TEST(InputMomentsTest, TheBudgetTakesTheSmallestFirstAndIsGivenBack) {
  testing::ModelBuilder m(13);
  m.Input("x", {3, 64}).Weight("W", {64, 8});
  m.Input("z", {3, 8}).Weight("V", {8, 8});
  m.Node("MatMul", {"x", "W"}, {"y"}, "big");
  m.Node("MatMul", {"z", "V"}, {"v"}, "small");
  m.Output("y").Output("v");
  // Room for the 8 x 8 H (256 bytes), not the 64 x 64 one (16 KiB).
  calibration::MemoryBudget budget(1000, "max_observer_memory_bytes");
  {
    auto moments = InputMoments::Create(m.Build().graph(), 0, &budget);
    ASSERT_TRUE(moments.ok()) << moments.status();
    EXPECT_EQ((*moments)->matrices(), 1);
    EXPECT_EQ((*moments)->over_budget(), 1);
    EXPECT_EQ(budget.used(), 8 * 8 * 4);
    ASSERT_TRUE((*moments)->Observe("x", Random({3, 64}, 1)).ok());
    ASSERT_TRUE((*moments)->Observe("z", Random({3, 8}, 2)).ok());
    (*moments)->Finish();
    EXPECT_NE((*moments)->Find("v"), nullptr);
    EXPECT_EQ((*moments)->Find("y"), nullptr);
    EXPECT_THAT((*moments)->WhyNone("y"),
                HasSubstr("did not fit the call's budget"));
    EXPECT_THAT((*moments)->WhyNone("nothing"), HasSubstr("layout"));
  }
  EXPECT_EQ(budget.used(), 0);
}

TEST(InputMomentsTest, RefusesAnInputThatCannotBeTheLayers) {
  testing::ModelBuilder m(13);
  m.Input("x", {3, 4}).Weight("W", {4, 4});
  m.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  m.Output("y");
  auto moments = InputMoments::Create(m.Build().graph(), 0, nullptr);
  ASSERT_TRUE(moments.ok());
  absl::Status s = (*moments)->Observe("x", Random({3, 5}, 5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("MatMul 'mm'"));
}

}  // namespace
}  // namespace quantd::passes
