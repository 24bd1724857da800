// The index and data-movement kernels of ops_index.cc: Einsum, TopK,
// Gather/Scatter variants and CumSum against numpy / PyTorch goldens
// (scripts/make_index_golden.py), plus hand-worked cases for the rest and for
// edge behaviour (negative indices, out-of-range errors, empty tensors).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/support/test_paths.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::SourcePath;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

Tensor Golden(const std::string& name) {
  absl::StatusOr<Tensor> t =
      ReadNpyFile(SourcePath("tests/data/executor/index/" + name + ".npy"));
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  return t.ok() ? *t : Tensor();
}

// Equal shape and type; float values within tol (relative above 1), others
// exactly. Says where they first differ.
void ExpectMatches(const Tensor& got, const Tensor& want, double tol,
                   const std::string& what) {
  ASSERT_EQ(DataTypeName(got.dtype()), DataTypeName(want.dtype())) << what;
  ASSERT_EQ(ShapeString(got.shape()), ShapeString(want.shape())) << what;
  for (int64_t i = 0; i < got.size(); ++i) {
    if (got.dtype() == TP::FLOAT) {
      const double g = got.data<float>()[i], w = want.data<float>()[i];
      ASSERT_LE(std::abs(g - w), tol * std::max(1.0, std::abs(w)))
          << what << ": at flat index " << i << " got " << g << ", expected "
          << w;
    } else {
      ASSERT_EQ(got.IntAt(i), want.IntAt(i)) << what << ": at flat index " << i;
    }
  }
}

// ------------------------------------------------------------------ Einsum

struct EinsumCase {
  const char* name;
  const char* equation;
  int inputs;
};

// Mirrors EINSUM_CASES in scripts/make_index_golden.py.
constexpr EinsumCase kEinsumCases[] = {
    {"matmul", "ij,jk->ik", 2},
    {"batch_matmul", "bij,bjk->bik", 2},
    {"attention", "bhqd,bhkd->bhqk", 2},
    {"implicit_matmul", "ij,jk", 2},
    {"implicit_transpose", "ba", 1},
    {"trace", "ii", 1},
    {"diagonal", "ii->i", 1},
    {"batch_diagonal", "...ii->...i", 1},
    {"sum_all", "ij->", 1},
    {"inner", "i,i", 2},
    {"outer", "i,j->ij", 2},
    {"three_operands", "abc,cd,de->abe", 3},
    {"ellipsis_broadcast", "...ij,...jk->...ik", 2},
    {"repeated_in_two", "iij,jk->ik", 2},
    {"permute_sum", "ijk->kj", 1},
    {"bilinear", "bn,anm,bm->ba", 3},
    {"upper_labels", "Ab,bC->CA", 2},
};

OneNode EinsumNode(const std::string& eq, std::vector<Tensor> inputs,
                   int64_t opset = 12) {
  OneNode n("Einsum", opset);
  n.inputs = std::move(inputs);
  n.attrs.push_back(StrAttr("equation", eq));
  return n;
}

TEST(OpsEinsumTest, MatchesNumpyEinsum) {
  ThreadPool pool(2);
  for (const EinsumCase& c : kEinsumCases) {
    const std::string base = absl::StrCat("einsum_", c.name);
    std::vector<Tensor> xs;
    for (int i = 0; i < c.inputs; ++i) {
      xs.push_back(Golden(absl::StrCat(base, "_x", i)));
    }
    const Tensor want = Golden(base + "_y");
    absl::StatusOr<Tensor> y = EinsumNode(c.equation, xs).Run1();
    ASSERT_TRUE(y.ok()) << c.equation << ": " << y.status();
    ExpectMatches(*y, want, 1e-5, c.equation);
    // Same answer with the GEMM split over a pool.
    absl::StatusOr<Tensor> yp = EinsumNode(c.equation, xs).Run1(&pool);
    ASSERT_TRUE(yp.ok()) << c.equation << ": " << yp.status();
    ExpectMatches(*yp, want, 1e-5, absl::StrCat(c.equation, " (pool)"));
  }
}

TEST(OpsEinsumTest, IntegersAndDoublesUseTheReferenceProduct) {
  const Tensor a = T1<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = T1<int64_t>({3, 2}, {1, 0, 0, 1, 2, -1});
  absl::StatusOr<Tensor> y = EinsumNode("ij,jk->ik", {a, b}).Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>(*y), ElementsAre(7, -1, 16, -1));
  // Spaces are allowed anywhere (the ONNX test writes "...ii ->...i").
  const Tensor d = T1<double>({2, 2}, {1.5, 2, 3, 4.25});
  absl::StatusOr<Tensor> tr = EinsumNode(" i i -> ", {d}).Run1();
  ASSERT_TRUE(tr.ok()) << tr.status();
  EXPECT_THAT(Values<double>(*tr), ElementsAre(5.75));
}

TEST(OpsEinsumTest, EmptyContractionIsZeros) {
  absl::StatusOr<Tensor> y =
      EinsumNode("ij,jk->ik", {T1<float>({2, 0}, {}), T1<float>({0, 3}, {})})
          .Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<float>(*y), ElementsAre(0, 0, 0, 0, 0, 0));
}

TEST(OpsEinsumTest, BadEquationsAndShapesAreInvalid) {
  const Tensor m = T1<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  ExpectError(EinsumNode("ij,jk->ik", {m}).Run1(),
              absl::StatusCode::kInvalidArgument, "2 terms for 1 inputs");
  ExpectError(EinsumNode("i1->i", {m}).Run1(),
              absl::StatusCode::kInvalidArgument, "bad term");
  ExpectError(EinsumNode("ij->iz", {m}).Run1(),
              absl::StatusCode::kInvalidArgument, "in no input");
  ExpectError(EinsumNode("ijk->i", {m}).Run1(),
              absl::StatusCode::kInvalidArgument, "does not fit its term");
  ExpectError(EinsumNode("ij,ij->i", {m, T1<float>({3, 2}, {})}).Run1(),
              absl::StatusCode::kInvalidArgument, "sizes");
  ExpectError(EinsumNode("ii->i", {m}).Run1(),
              absl::StatusCode::kInvalidArgument, "repeated in one input");
}

// -------------------------------------------------------------------- TopK

TEST(OpsTopKTest, MatchesStableNumpyArgsortTiesByLowerIndex) {
  for (const char* which : {"largest", "smallest"}) {
    for (int axis : {1, -1, 0}) {
      const std::string base = absl::StrCat("topk_", which, "_axis", axis);
      OneNode n("TopK", 11);
      n.inputs = {Golden(base + "_x"), Golden(base + "_k")};
      n.outputs = 2;
      n.Int("axis", axis).Int("largest", std::string(which) == "largest");
      absl::StatusOr<std::vector<Tensor>> r = n.Run();
      ASSERT_TRUE(r.ok()) << base << ": " << r.status();
      ExpectMatches((*r)[0], Golden(base + "_values"), 0, base);
      ExpectMatches((*r)[1], Golden(base + "_indices"), 0, base);
    }
  }
}

TEST(OpsTopKTest, AttributeKBeforeOpset10AndNanRanksHighest) {
  const float nan = std::nanf("");
  OneNode n("TopK", 9);
  n.inputs = {T1<float>({4}, {1, nan, 3, 2})};
  n.outputs = 2;
  n.Int("k", 2);
  absl::StatusOr<std::vector<Tensor>> r = n.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(std::isnan(Values<float>((*r)[0])[0]));
  EXPECT_EQ(Values<float>((*r)[0])[1], 3);
  EXPECT_THAT(Values<int64_t>((*r)[1]), ElementsAre(1, 2));
}

TEST(OpsTopKTest, KOutOfRangeIsInvalidAndZeroIsEmpty) {
  OneNode n("TopK", 11);
  n.inputs = {T1<float>({2, 3}, {1, 2, 3, 4, 5, 6}), T1<int64_t>({1}, {4})};
  n.outputs = 2;
  ExpectError(n.Run1(), absl::StatusCode::kInvalidArgument, "K 4");
  n.inputs[1] = T1<int64_t>({1}, {0});
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 0}));
  OneNode bad("TopK", 11);
  bad.inputs = {T1<float>({3}, {1, 2, 3}), T1<int64_t>({1}, {1})};
  bad.Int("axis", 1);
  ExpectError(bad.Run1(), absl::StatusCode::kInvalidArgument, "out of range");
}

// ---------------------------------------------- GatherElements / GatherND

TEST(OpsGatherTest, GatherElementsMatchesTorchGatherWithNegativeIndices) {
  for (int axis : {0, 1, 2}) {
    const std::string base = absl::StrCat("gather_elements_axis", axis);
    OneNode n("GatherElements", 13);
    n.inputs = {Golden(base + "_data"), Golden(base + "_indices")};
    n.Int("axis", axis);
    absl::StatusOr<Tensor> y = n.Run1();
    ASSERT_TRUE(y.ok()) << base << ": " << y.status();
    ExpectMatches(*y, Golden(base + "_y"), 0, base);
  }
}

TEST(OpsGatherTest, GatherNDMatchesNumpyWithBatchDims) {
  for (int b : {0, 1}) {
    const std::string base = absl::StrCat("gathernd_b", b);
    OneNode n("GatherND", 13);
    n.inputs = {Golden(base + "_data"), Golden(base + "_indices")};
    n.Int("batch_dims", b);
    absl::StatusOr<Tensor> y = n.Run1();
    ASSERT_TRUE(y.ok()) << base << ": " << y.status();
    ExpectMatches(*y, Golden(base + "_y"), 0, base);
  }
}

TEST(OpsGatherTest, OutOfRangeIndicesAreInvalidNotWildReads) {
  const Tensor data = T1<float>({2, 2}, {1, 2, 3, 4});
  OneNode ge("GatherElements", 13);
  ge.inputs = {data, T1<int64_t>({1, 2}, {0, 2})};
  ExpectError(ge.Run1(), absl::StatusCode::kInvalidArgument,
              "index 2 is out of range for a dim of 2");
  ge.inputs[1] = T1<int64_t>({1, 1}, {-3});
  ExpectError(ge.Run1(), absl::StatusCode::kInvalidArgument, "index -3");
  OneNode nd("GatherND", 13);
  nd.inputs = {data, T1<int64_t>({1, 2}, {1, 5})};
  ExpectError(nd.Run1(), absl::StatusCode::kInvalidArgument, "index 5");
  nd.inputs[1] = T1<int64_t>({1, 3}, {0, 0, 0});
  ExpectError(nd.Run1(), absl::StatusCode::kInvalidArgument, "address 3 dims");
  // batch_dims 2^32 - 1 narrowed to int was -1, and read shape[-1] (UBSan,
  // libFuzzer run 10 through constant folding).
  OneNode wide("GatherND", 13);
  wide.inputs = {data, T1<int64_t>({1, 1}, {0})};
  wide.Int("batch_dims", (int64_t{1} << 32) - 1);
  ExpectError(wide.Run1(), absl::StatusCode::kInvalidArgument,
              "batch_dims 4294967295 needs");
}

TEST(OpsGatherTest, EmptyIndicesGiveEmptyOutputs) {
  const Tensor data = T1<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  OneNode ge("GatherElements", 13);
  ge.inputs = {data, T1<int64_t>({0, 3}, {})};
  absl::StatusOr<Tensor> y = ge.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{0, 3}));
  OneNode nd("GatherND", 13);
  nd.inputs = {data, T1<int64_t>({0, 1}, {})};
  absl::StatusOr<Tensor> z = nd.Run1();
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), (std::vector<int64_t>{0, 3}));
}

// ------------------------------------------------------- Scatter variants

TEST(OpsScatterTest, ScatterElementsMatchesTorchScatterReduce) {
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    const std::string base = absl::StrCat("scatter_elements_", red);
    OneNode n("ScatterElements", 18);
    n.inputs = {Golden(base + "_data"), Golden(base + "_indices"),
                Golden(base + "_updates")};
    n.attrs.push_back(StrAttr("reduction", red));
    n.Int("axis", std::string(red) == "none" ? 1 : 0);
    absl::StatusOr<Tensor> y = n.Run1();
    ASSERT_TRUE(y.ok()) << base << ": " << y.status();
    ExpectMatches(*y, Golden(base + "_y"), 0, base);
  }
}

TEST(OpsScatterTest, ScatterNDMatchesNumpyForEveryReduction) {
  for (const char* red : {"add", "mul", "max", "min"}) {
    const std::string base = absl::StrCat("scatternd_", red);
    OneNode n("ScatterND", 18);
    n.inputs = {Golden(base + "_data"), Golden(base + "_indices"),
                Golden(base + "_updates")};
    n.attrs.push_back(StrAttr("reduction", red));
    absl::StatusOr<Tensor> y = n.Run1();
    ASSERT_TRUE(y.ok()) << base << ": " << y.status();
    ExpectMatches(*y, Golden(base + "_y"), 0, base);
  }
}

TEST(OpsScatterTest, OldScatterAndReductionsTheOpsetDoesNotHave) {
  // Scatter (opset 9) is ScatterElements without reduction.
  OneNode old("Scatter", 9);
  old.inputs = {T1<int32_t>({1, 5}, {1, 2, 3, 4, 5}),
                T1<int64_t>({1, 2}, {1, -2}), T1<int32_t>({1, 2}, {10, 20})};
  old.Int("axis", 1);
  absl::StatusOr<Tensor> y = old.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int32_t>(*y), ElementsAre(1, 10, 3, 20, 5));
  // max / min arrived at opset 18; reduction at all at 16.
  OneNode max16("ScatterElements", 16);
  max16.inputs = old.inputs;
  max16.attrs.push_back(StrAttr("reduction", "max"));
  ExpectError(max16.Run1(), absl::StatusCode::kUnimplemented,
              "'reduction' = max");
  OneNode add13("ScatterND", 13);
  add13.inputs = {T1<float>({2}, {1, 2}), T1<int64_t>({1, 1}, {0}),
                  T1<float>({1}, {5})};
  add13.attrs.push_back(StrAttr("reduction", "add"));
  ExpectError(add13.Run1(), absl::StatusCode::kUnimplemented, "reduction");
}

TEST(OpsScatterTest, OutOfRangeIndicesAndBadUpdatesAreInvalid) {
  OneNode se("ScatterElements", 13);
  se.inputs = {T1<float>({2, 2}, {1, 2, 3, 4}), T1<int64_t>({1, 1}, {2}),
               T1<float>({1, 1}, {9})};
  ExpectError(se.Run1(), absl::StatusCode::kInvalidArgument, "index 2");
  se.inputs[2] = T1<float>({1, 2}, {9, 9});
  ExpectError(se.Run1(), absl::StatusCode::kInvalidArgument, "updates");
  OneNode nd("ScatterND", 13);
  nd.inputs = {T1<float>({2, 2}, {1, 2, 3, 4}), T1<int64_t>({1, 2}, {0, -3}),
               T1<float>({1}, {9})};
  ExpectError(nd.Run1(), absl::StatusCode::kInvalidArgument, "index -3");
  nd.inputs[1] = T1<int64_t>({1, 2}, {1, -1});
  absl::StatusOr<Tensor> y = nd.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<float>(*y), ElementsAre(1, 2, 3, 9));
}

// ------------------------------------------------------------------ CumSum

TEST(OpsCumSumTest, MatchesNumpyForEveryAxisExclusiveAndReverse) {
  for (int axis : {0, 1, -1}) {
    for (int exclusive : {0, 1}) {
      for (int reverse : {0, 1}) {
        const std::string base =
            absl::StrCat("cumsum_axis", axis, "_e", exclusive, "_r", reverse);
        OneNode n("CumSum", 14);
        n.inputs = {Golden(base + "_x"), Tensor::Scalar<int32_t>(axis)};
        n.Int("exclusive", exclusive).Int("reverse", reverse);
        absl::StatusOr<Tensor> y = n.Run1();
        ASSERT_TRUE(y.ok()) << base << ": " << y.status();
        ExpectMatches(*y, Golden(base + "_y"), 1e-5, base);
      }
    }
  }
}

TEST(OpsCumSumTest, IntegersAndBadAxis) {
  OneNode n("CumSum", 11);
  n.inputs = {T1<int64_t>({4}, {1, 2, 3, 4}), Tensor::Scalar<int64_t>(0)};
  n.Int("exclusive", 1).Int("reverse", 1);
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>(*y), ElementsAre(9, 7, 4, 0));
  n.inputs[1] = Tensor::Scalar<int64_t>(1);
  ExpectError(n.Run1(), absl::StatusCode::kInvalidArgument, "out of range");
}

// ------------------------------------------------- Size, Tile, NonZero

TEST(OpsIndexTest, SizeCountsElements) {
  OneNode n("Size", 13);
  n.inputs = {Tensor(TP::FLOAT, {2, 3, 4})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->rank(), 0);
  EXPECT_THAT(Values<int64_t>(*y), ElementsAre(24));
}

TEST(OpsIndexTest, TileRepeatsEveryDim) {
  OneNode n("Tile", 13);
  n.inputs = {T1<int32_t>({2, 2}, {1, 2, 3, 4}), T1<int64_t>({2}, {2, 3})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{4, 6}));
  EXPECT_THAT(Values<int32_t>(*y),
              ElementsAreArray({1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,  //
                                1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  n.inputs[1] = T1<int64_t>({2}, {0, 2});
  absl::StatusOr<Tensor> empty = n.Run1();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape(), (std::vector<int64_t>{0, 4}));
  n.inputs[1] = T1<int64_t>({1}, {2});
  ExpectError(n.Run1(), absl::StatusCode::kInvalidArgument,
              "one value per dim");
  n.inputs[1] = T1<int64_t>({2}, {1, -1});
  ExpectError(n.Run1(), absl::StatusCode::kInvalidArgument, "negative");
  // A dim past 64 bits is refused even when another repeat empties the
  // output (libFuzzer: the dims multiplied past int64).
  n.inputs[1] = T1<int64_t>({2}, {0, INT64_MAX});
  ExpectError(n.Run1(), absl::StatusCode::kInvalidArgument, "past 64 bits");
}

TEST(OpsIndexTest, NonZeroListsCoordinatesInRowMajorOrder) {
  OneNode n("NonZero", 13);
  n.inputs = {T1<float>({2, 2}, {1, 0, 1, -0.5f})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<int64_t>(*y), ElementsAre(0, 1, 1, 0, 0, 1));
  n.inputs = {T1<bool>({3}, {false, false, false})};
  absl::StatusOr<Tensor> none = n.Run1();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->shape(), (std::vector<int64_t>{1, 0}));
}

// ------------------------------------------------------------------ OneHot

TEST(OpsOneHotTest, NegativeIndicesCountFromTheEndFromOpset11) {
  OneNode n("OneHot", 11);
  n.inputs = {T1<int64_t>({3}, {1, -1, 5}), Tensor::Scalar<int64_t>(3),
              T1<float>({2}, {0, 7})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{3, 3}));
  // 5 is outside [-3, 3): all off.
  EXPECT_THAT(Values<float>(*y), ElementsAre(0, 7, 0, 0, 0, 7, 0, 0, 0));
  // Axis 0 puts depth first; opset 9 reads -1 as outside the range.
  OneNode old("OneHot", 9);
  old.inputs = {T1<float>({2}, {2, -1}), Tensor::Scalar<float>(3),
                T1<int32_t>({2}, {-1, 1})};
  old.Int("axis", 0);
  absl::StatusOr<Tensor> z = old.Run1();
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_THAT(Values<int32_t>(*z), ElementsAre(-1, -1, -1, -1, 1, -1));
  old.inputs[1] = Tensor::Scalar<float>(0);
  ExpectError(old.Run1(), absl::StatusCode::kInvalidArgument, "not positive");
}

// ------------------------------------------- Trilu, EyeLike, Compress

TEST(OpsIndexTest, TriluUpperAndLowerWithK) {
  const Tensor x = T1<int64_t>({2, 2, 3}, {1, 2, 3, 4, 5, 6,  //
                                           7, 8, 9, 10, 11, 12});
  OneNode up("Trilu", 14);
  up.inputs = {x, Tensor::Scalar<int64_t>(1)};
  absl::StatusOr<Tensor> u = up.Run1();
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_THAT(Values<int64_t>(*u),
              ElementsAre(0, 2, 3, 0, 0, 6, 0, 8, 9, 0, 0, 12));
  OneNode low("Trilu", 14);
  low.inputs = {x, Tensor::Scalar<int64_t>(-1)};
  low.Int("upper", 0);
  absl::StatusOr<Tensor> l = low.Run1();
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(Values<int64_t>(*l),
              ElementsAre(0, 0, 0, 4, 0, 0, 0, 0, 0, 10, 0, 0));
  // Diagonals far outside the matrix (fuzz finding 25: i + k overflowed):
  // upper with k = INT64_MAX zeroes all, with INT64_MIN keeps all; lower
  // the other way round.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  for (int upper : {1, 0}) {
    for (int64_t k : {kMax, kMin}) {
      OneNode far("Trilu", 14);
      far.inputs = {x, Tensor::Scalar<int64_t>(k)};
      far.Int("upper", upper);
      absl::StatusOr<Tensor> f = far.Run1();
      ASSERT_TRUE(f.ok()) << f.status();
      const bool keeps_all = (upper == 1) == (k == kMin);
      EXPECT_EQ(Values<int64_t>(*f),
                keeps_all ? Values<int64_t>(x) : std::vector<int64_t>(12, 0))
          << upper << " " << k;
    }
  }
  OneNode flat("Trilu", 14);
  flat.inputs = {T1<float>({3}, {1, 2, 3})};
  ExpectError(flat.Run1(), absl::StatusCode::kInvalidArgument, "rank >= 2");
}

TEST(OpsIndexTest, EyeLikeWithDtypeAndOffsets) {
  OneNode n("EyeLike", 9);
  n.inputs = {Tensor(TP::FLOAT, {3, 4})};
  n.Int("k", 1).Int("dtype", TP::INT64);
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>(*y),
              ElementsAre(0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1));
  OneNode neg("EyeLike", 9);
  neg.inputs = {T1<int32_t>({3, 2}, {9, 9, 9, 9, 9, 9})};
  neg.Int("k", -1);
  absl::StatusOr<Tensor> z = neg.Run1();
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_THAT(Values<int32_t>(*z), ElementsAre(0, 0, 1, 0, 0, 1));
}

TEST(OpsIndexTest, CompressWithAndWithoutAxis) {
  const Tensor x = T1<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  OneNode n("Compress", 11);
  n.inputs = {x, T1<bool>({2}, {false, true})};
  n.Int("axis", 0);
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_THAT(Values<float>(*y), ElementsAre(3, 4));
  OneNode flat("Compress", 11);
  flat.inputs = {x, T1<bool>({5}, {true, false, false, true, true})};
  absl::StatusOr<Tensor> f = flat.Run1();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(Values<float>(*f), ElementsAre(1, 4, 5));
  OneNode over("Compress", 11);
  over.inputs = {x, T1<bool>({3}, {false, false, true})};
  over.Int("axis", -1);
  ExpectError(over.Run1(), absl::StatusCode::kInvalidArgument, "entry 2");
}

TEST(OpsIndexTest, ReverseSequenceBatchMajor) {
  OneNode n("ReverseSequence", 10);
  n.inputs = {T1<int32_t>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}),
              T1<int64_t>({2}, {3, 1})};
  n.Int("batch_axis", 0).Int("time_axis", 1);
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int32_t>(*y), ElementsAre(3, 2, 1, 4, 5, 6, 7, 8));
  n.inputs[1] = T1<int64_t>({2}, {5, 1});
  ExpectError(n.Run1(), absl::StatusCode::kInvalidArgument,
              "sequence_lens[0] = 5");
}

// ------------------------------------------------------------------ Unique

TEST(OpsUniqueTest, SortedAndFirstOccurrenceOrders) {
  const Tensor x = T1<float>({6}, {2, 1, 1, 3, 4, 3});
  for (int sorted : {0, 1}) {
    OneNode n("Unique", 11);
    n.inputs = {x};
    n.outputs = 4;
    n.Int("sorted", sorted);
    absl::StatusOr<std::vector<Tensor>> r = n.Run();
    ASSERT_TRUE(r.ok()) << r.status();
    if (sorted) {
      EXPECT_THAT(Values<float>((*r)[0]), ElementsAre(1, 2, 3, 4));
      EXPECT_THAT(Values<int64_t>((*r)[1]), ElementsAre(1, 0, 3, 4));
      EXPECT_THAT(Values<int64_t>((*r)[2]), ElementsAre(1, 0, 0, 2, 3, 2));
      EXPECT_THAT(Values<int64_t>((*r)[3]), ElementsAre(2, 1, 2, 1));
    } else {
      EXPECT_THAT(Values<float>((*r)[0]), ElementsAre(2, 1, 3, 4));
      EXPECT_THAT(Values<int64_t>((*r)[1]), ElementsAre(0, 1, 3, 4));
      EXPECT_THAT(Values<int64_t>((*r)[2]), ElementsAre(0, 1, 1, 2, 3, 2));
      EXPECT_THAT(Values<int64_t>((*r)[3]), ElementsAre(1, 2, 2, 1));
    }
  }
}

TEST(OpsUniqueTest, SlicesAlongAnAxis) {
  OneNode n("Unique", 11);
  n.inputs = {T1<int64_t>({2, 3}, {1, 0, 1, 2, 5, 2})};
  n.outputs = 4;
  n.Int("axis", 1);
  absl::StatusOr<std::vector<Tensor>> r = n.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // Columns (1,2) (0,5) (1,2): sorted unique columns (0,5) (1,2).
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(Values<int64_t>((*r)[0]), ElementsAre(0, 1, 5, 2));
  EXPECT_THAT(Values<int64_t>((*r)[1]), ElementsAre(1, 0));
  EXPECT_THAT(Values<int64_t>((*r)[2]), ElementsAre(1, 0, 1));
  EXPECT_THAT(Values<int64_t>((*r)[3]), ElementsAre(1, 2));
}

// --------------------------------------------- CenterCropPad, Col2Im

TEST(OpsIndexTest, CenterCropPadCropsAndPadsAroundTheCentre) {
  OneNode n("CenterCropPad", 18);
  n.inputs = {T1<float>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}),
              T1<int64_t>({2}, {3, 2})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  // Rows 2 -> 3: one zero row after (pad (3-2)/2 = 0 before); cols 4 -> 2
  // from (4-2)/2 = 1.
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_THAT(Values<float>(*y), ElementsAre(2, 3, 6, 7, 0, 0));
  OneNode ax("CenterCropPad", 18);
  ax.inputs = {T1<float>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}),
               T1<int64_t>({1}, {7})};
  ax.IntList("axes", {-1});
  absl::StatusOr<Tensor> z = ax.Run1();
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_THAT(Values<float>(*z), ElementsAre(0, 1, 2, 3, 4, 0, 0,  //
                                             0, 5, 6, 7, 8, 0, 0));
}

TEST(OpsIndexTest, Col2ImSumsOverlappingBlocks) {
  // Image [1, 4], blocks [1, 2], stride 1: three blocks, two columns each.
  OneNode n("Col2Im", 18);
  n.inputs = {T1<float>({1, 2, 3}, {1, 2, 3, 10, 20, 30}),
              T1<int64_t>({2}, {1, 4}), T1<int64_t>({2}, {1, 2})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 1, 1, 4}));
  EXPECT_THAT(Values<float>(*y), ElementsAre(1, 12, 23, 30));
  n.inputs[0] = T1<float>({1, 2, 2}, {1, 2, 3, 4});
  ExpectError(n.Run1(), absl::StatusCode::kInvalidArgument, "must be [N, C");
}

// Integer accumulation wraps around (numpy's answer) in CumSum, the add
// and mul reductions of ScatterElements and Einsum's sums and products,
// instead of C++'s undefined signed overflow.
TEST(OpsIndexTest, IntegerAccumulationWrapsAround) {
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  absl::StatusOr<Tensor> cumsum = OneNode("CumSum", 14)
                                      .In(T1<int64_t>({3}, {kMax, 1, 1}))
                                      .Const(I64({}, {0}))
                                      .Run1();
  ASSERT_TRUE(cumsum.ok()) << cumsum.status();
  EXPECT_THAT(Values<int64_t>(*cumsum), ElementsAre(kMax, kMin, kMin + 1));
  for (const auto& [reduction, expected] :
       {std::pair<std::string, int64_t>{"add", kMin}, {"mul", -2}}) {
    OneNode scatter("ScatterElements", 16);
    scatter.In(T1<int64_t>({1}, {kMax}))
        .In(I64({1}, {0}))
        .In(T1<int64_t>({1}, {reduction == "add" ? 1 : 2}));
    scatter.attrs.push_back(StrAttr("reduction", reduction));
    absl::StatusOr<Tensor> y = scatter.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_THAT(Values<int64_t>(*y), ElementsAre(expected)) << reduction;
  }
  absl::StatusOr<Tensor> dot = EinsumNode("i,i->", {T1<int64_t>({2}, {kMax, 1}),
                                                    T1<int64_t>({2}, {2, 2})})
                                   .Run1();
  ASSERT_TRUE(dot.ok()) << dot.status();
  EXPECT_THAT(Values<int64_t>(*dot), ElementsAre(0));  // -2 + 2
  absl::StatusOr<Tensor> sum =
      EinsumNode("i->", {T1<int64_t>({2}, {kMax, 1})}).Run1();
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_THAT(Values<int64_t>(*sum), ElementsAre(kMin));
}

}  // namespace
}  // namespace quantd::executor
