// Hand-computed vectors for the reductions (ops_reduce.cc): Reduce* (axes
// as attribute or input, keepdims, noop_with_empty_axes; the norms and
// log-sums too) and ArgMax / ArgMin, plus their error codes.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/executor/executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"

namespace quantd::executor {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// x[i][j][k] = 1 + 6i + 2j + k, shape [2, 3, 2].
Tensor Cube() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i + 1);
  return T1<float>({2, 3, 2}, v);
}

// ------------------------------------------------------------- reductions

TEST(OpsReduceTest, SumOverTwoAxesFromInputWithAndWithoutKeepdims) {
  for (int keep : {1, 0}) {
    absl::StatusOr<Tensor> y = OneNode("ReduceSum", 13)
                                   .In(Cube())
                                   .In(T1<int64_t>({2}, {0, 2}))
                                   .Int("keepdims", keep)
                                   .Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    const std::vector<int64_t> want =
        keep ? std::vector<int64_t>{1, 3, 1} : std::vector<int64_t>{3};
    EXPECT_EQ(y->shape(), want);
    // 1+2+7+8, 3+4+9+10, 5+6+11+12.
    EXPECT_THAT(Values<float>(*y), ElementsAre(18, 26, 34));
  }
}

TEST(OpsReduceTest, SumAxesAsConstantInputAndAsOldAttribute) {
  // Opset 13 reads axes from input 1 (here an initializer, checked at
  // Create); opset 11 from the attribute. Both reduce the middle axis.
  absl::StatusOr<Tensor> in =
      OneNode("ReduceSum", 13).In(Cube()).Const(T1<int64_t>({1}, {1})).Run1();
  absl::StatusOr<Tensor> attr =
      OneNode("ReduceSum", 11).In(Cube()).IntList("axes", {1}).Run1();
  for (const auto* y : {&in, &attr}) {
    ASSERT_TRUE(y->ok()) << y->status();
    EXPECT_EQ((*y)->shape(), (std::vector<int64_t>{2, 1, 2}));
    EXPECT_THAT(Values<float>(**y), ElementsAre(9, 12, 27, 30));
  }
}

TEST(OpsReduceTest, MaxMinAxesAttributeBefore18InputFrom18) {
  absl::StatusOr<Tensor> mx =
      OneNode("ReduceMax", 13).In(Cube()).IntList("axes", {1}).Run1();
  ASSERT_TRUE(mx.ok()) << mx.status();
  EXPECT_EQ(mx->shape(), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_THAT(Values<float>(*mx), ElementsAre(5, 6, 11, 12));

  absl::StatusOr<Tensor> mn = OneNode("ReduceMin", 18)
                                  .In(Cube())
                                  .In(T1<int64_t>({1}, {-1}))
                                  .Int("keepdims", 0)
                                  .Run1();
  ASSERT_TRUE(mn.ok()) << mn.status();
  EXPECT_EQ(mn->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<float>(*mn), ElementsAre(1, 3, 5, 7, 9, 11));

  // At 18 the attribute no longer exists: refused, not ignored.
  absl::StatusOr<std::unique_ptr<Executor>> e =
      OneNode("ReduceMax", 18).In(Cube()).IntList("axes", {1}).Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(e.status().message(), HasSubstr("'axes'"));
}

TEST(OpsReduceTest, MeanKeepsItsBehaviourThroughTheSharedHelper) {
  absl::StatusOr<Tensor> y =
      OneNode("ReduceMean", 18).In(Cube()).In(T1<int64_t>({1}, {1})).Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_THAT(Values<float>(*y), ElementsAre(3, 4, 9, 10));
  absl::StatusOr<Tensor> all =
      OneNode("ReduceMean", 13).In(Cube()).Int("keepdims", 0).Run1();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->rank(), 0);
  EXPECT_THAT(Values<float>(*all), ElementsAre(6.5f));
}

TEST(OpsReduceTest, ProdOfIntsOverAllAxesByDefault) {
  absl::StatusOr<Tensor> y =
      OneNode("ReduceProd", 13).In(T1<int64_t>({2, 2}, {1, 2, 3, 4})).Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 1}));
  EXPECT_THAT(Values<int64_t>(*y), ElementsAre(24));
  absl::StatusOr<Tensor> i32 = OneNode("ReduceSum", 13)
                                   .In(T1<int32_t>({2, 2}, {1, 2, 3, 4}))
                                   .None()
                                   .Int("keepdims", 0)
                                   .Run1();
  ASSERT_TRUE(i32.ok()) << i32.status();
  EXPECT_EQ(i32->rank(), 0);
  EXPECT_THAT(Values<int32_t>(*i32), ElementsAre(10));
}

TEST(OpsReduceTest, NoopWithEmptyAxes) {
  const Tensor empty_axes = T1<int64_t>({0}, {});
  absl::StatusOr<Tensor> noop = OneNode("ReduceMax", 18)
                                    .In(Cube())
                                    .In(empty_axes)
                                    .Int("noop_with_empty_axes", 1)
                                    .Run1();
  ASSERT_TRUE(noop.ok()) << noop.status();
  EXPECT_EQ(noop->shape(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(Values<float>(*noop), Values<float>(Cube()));
  // Without the flag, empty axes reduce everything.
  absl::StatusOr<Tensor> all =
      OneNode("ReduceSum", 13).In(Cube()).In(empty_axes).Run1();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->shape(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_THAT(Values<float>(*all), ElementsAre(78));
  // With the flag and no axes input at all: also a no-op.
  absl::StatusOr<Tensor> omitted =
      OneNode("ReduceSum", 13).In(Cube()).Int("noop_with_empty_axes", 1).Run1();
  ASSERT_TRUE(omitted.ok()) << omitted.status();
  EXPECT_EQ(omitted->shape(), (std::vector<int64_t>{2, 3, 2}));
  // Before opset 13 ReduceSum has no such attribute.
  absl::StatusOr<std::unique_ptr<Executor>> old =
      OneNode("ReduceSum", 11)
          .In(Cube())
          .Int("noop_with_empty_axes", 1)
          .Create();
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(old.status().message(), HasSubstr("noop_with_empty_axes"));
}

TEST(OpsReduceTest, EmptySetsGiveTheIdentity) {
  const Tensor none = T1<float>({2, 0}, {});
  struct Case {
    const char* op;
    float want;
  };
  for (const Case& c : {Case{"ReduceSum", 0}, Case{"ReduceProd", 1},
                        Case{"ReduceMax", -kInf}, Case{"ReduceMin", kInf}}) {
    // Opset 18: axes is an input for every Reduce*.
    absl::StatusOr<Tensor> y = OneNode(c.op, 18)
                                   .In(none)
                                   .In(T1<int64_t>({1}, {1}))
                                   .Int("keepdims", 0)
                                   .Run1();
    ASSERT_TRUE(y.ok()) << c.op << ": " << y.status();
    EXPECT_EQ(y->shape(), (std::vector<int64_t>{2})) << c.op;
    EXPECT_THAT(Values<float>(*y), ElementsAre(c.want, c.want)) << c.op;
  }
  absl::StatusOr<Tensor> mean =
      OneNode("ReduceMean", 13).In(none).IntList("axes", {1}).Run1();
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_TRUE(std::isnan(Values<float>(*mean)[0]));
}

TEST(OpsReduceTest, MaxPropagatesNanAndTakesBoolAndInt8) {
  absl::StatusOr<Tensor> f = OneNode("ReduceMax", 13)
                                 .In(T1<float>({2, 2}, {1, kNan, 3, 2}))
                                 .IntList("axes", {1})
                                 .Int("keepdims", 0)
                                 .Run1();
  ASSERT_TRUE(f.ok()) << f.status();
  const std::vector<float> fv = Values<float>(*f);
  ASSERT_EQ(fv.size(), 2u);
  EXPECT_TRUE(std::isnan(fv[0]));
  EXPECT_EQ(fv[1], 3);
  const Tensor b = T1<bool>({2, 2}, {true, false, false, false});
  absl::StatusOr<Tensor> any = OneNode("ReduceMax", 20)
                                   .In(b)
                                   .In(T1<int64_t>({1}, {1}))
                                   .Int("keepdims", 0)
                                   .Run1();
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_THAT(Values<bool>(*any), ElementsAre(true, false));
  absl::StatusOr<Tensor> all =
      OneNode("ReduceMin", 20).In(b).In(T1<int64_t>({1}, {0})).Run1();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Values<bool>(*all), ElementsAre(false, false));
  absl::StatusOr<Tensor> i8 = OneNode("ReduceMin", 13)
                                  .In(T1<int8_t>({3}, {4, -7, 2}))
                                  .Int("keepdims", 0)
                                  .Run1();
  ASSERT_TRUE(i8.ok()) << i8.status();
  EXPECT_THAT(Values<int8_t>(*i8), ElementsAre(-7));
}

TEST(OpsReduceTest, OutOfRangeAxisIsInvalidAndNamesTheNode) {
  // Known at Create (attribute, declared rank).
  absl::StatusOr<std::unique_ptr<Executor>> e =
      OneNode("ReduceMax", 13).In(Cube()).IntList("axes", {3}).Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("node 'q'"));
  EXPECT_THAT(e.status().message(), HasSubstr("out of range"));
  // Only known at run time (axes is a graph input).
  absl::StatusOr<Tensor> y =
      OneNode("ReduceSum", 13).In(Cube()).In(T1<int64_t>({1}, {-4})).Run1();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("node 'q'"));
  EXPECT_THAT(y.status().message(), HasSubstr("out of range"));
}

// ------------------------------------- ReduceL1 / L2 / LogSum / ... family

// Hand-computed on Cube() (values 1..12, shape [2, 3, 2]) over axis 1:
// column sets {1,3,5} {2,4,6} {7,9,11} {8,10,12}.
TEST(OpsReduceTest, NormsAndLogSumsOverOneAxisAttributeAndInput) {
  struct Case {
    const char* op;
    std::vector<float> want;
  };
  const std::vector<Case> cases = {
      {"ReduceL1", {9, 12, 27, 30}},
      {"ReduceSumSquare", {35, 56, 251, 308}},
      {"ReduceL2",
       {std::sqrt(35.0f), std::sqrt(56.0f), std::sqrt(251.0f),
        std::sqrt(308.0f)}},
      {"ReduceLogSum",
       {std::log(9.0f), std::log(12.0f), std::log(27.0f), std::log(30.0f)}},
      {"ReduceLogSumExp",
       {static_cast<float>(
            std::log(std::exp(1.0) + std::exp(3.0) + std::exp(5.0))),
        static_cast<float>(
            std::log(std::exp(2.0) + std::exp(4.0) + std::exp(6.0))),
        static_cast<float>(
            std::log(std::exp(7.0) + std::exp(9.0) + std::exp(11.0))),
        static_cast<float>(
            std::log(std::exp(8.0) + std::exp(10.0) + std::exp(12.0)))}},
  };
  for (const Case& c : cases) {
    // Opset 13: axes attribute, keepdims 0.
    absl::StatusOr<Tensor> attr = OneNode(c.op, 13)
                                      .In(Cube())
                                      .IntList("axes", {1})
                                      .Int("keepdims", 0)
                                      .Run1();
    ASSERT_TRUE(attr.ok()) << c.op << ": " << attr.status();
    EXPECT_EQ(attr->shape(), (std::vector<int64_t>{2, 2})) << c.op;
    EXPECT_THAT(Values<float>(*attr),
                ElementsAre(::testing::FloatNear(c.want[0], 1e-5f * c.want[0]),
                            ::testing::FloatNear(c.want[1], 1e-5f * c.want[1]),
                            ::testing::FloatNear(c.want[2], 1e-5f * c.want[2]),
                            ::testing::FloatNear(c.want[3], 1e-5f * c.want[3])))
        << c.op;
    // Opset 18: axes input (negative), keepdims default 1.
    absl::StatusOr<Tensor> in =
        OneNode(c.op, 18).In(Cube()).In(T1<int64_t>({1}, {-2})).Run1();
    ASSERT_TRUE(in.ok()) << c.op << ": " << in.status();
    EXPECT_EQ(in->shape(), (std::vector<int64_t>{2, 1, 2})) << c.op;
    EXPECT_NEAR(Values<float>(*in)[3], c.want[3], 1e-5f * c.want[3]) << c.op;
  }
}

TEST(OpsReduceTest, NormsOverAllAxesByDefaultAndOfNegatives) {
  const Tensor x = T1<float>({2, 2}, {-3, 4, 0, -12});
  absl::StatusOr<Tensor> l1 = OneNode("ReduceL1", 18).In(x).Run1();
  ASSERT_TRUE(l1.ok()) << l1.status();
  EXPECT_EQ(l1->shape(), (std::vector<int64_t>{1, 1}));
  EXPECT_THAT(Values<float>(*l1), ElementsAre(19));
  absl::StatusOr<Tensor> l2 =
      OneNode("ReduceL2", 11).In(x).Int("keepdims", 0).Run1();
  ASSERT_TRUE(l2.ok()) << l2.status();
  EXPECT_EQ(l2->shape(), (std::vector<int64_t>{}));
  EXPECT_THAT(Values<float>(*l2), ElementsAre(13));
  // Integers stay integers: sum |x| and sum x^2 exactly, sqrt truncated.
  const Tensor xi = T1<int64_t>({3}, {-3, 4, -1});
  absl::StatusOr<Tensor> l1i = OneNode("ReduceL1", 13).In(xi).Run1();
  ASSERT_TRUE(l1i.ok()) << l1i.status();
  EXPECT_THAT(Values<int64_t>(*l1i), ElementsAre(8));
  absl::StatusOr<Tensor> ssi =
      OneNode("ReduceSumSquare", 13).In(T1<int32_t>({3}, {-3, 4, -1})).Run1();
  ASSERT_TRUE(ssi.ok()) << ssi.status();
  EXPECT_THAT(Values<int32_t>(*ssi), ElementsAre(26));
  absl::StatusOr<Tensor> l2i = OneNode("ReduceL2", 13).In(xi).Run1();
  ASSERT_TRUE(l2i.ok()) << l2i.status();
  EXPECT_THAT(Values<int64_t>(*l2i), ElementsAre(5));  // sqrt(26)
}

TEST(OpsReduceTest, LogSumExpIsStableForLargeValuesAndEmptyIsMinusInf) {
  absl::StatusOr<Tensor> big =
      OneNode("ReduceLogSumExp", 13)
          .In(T1<float>({2, 2}, {1000, 1000, -kInf, -kInf}))
          .IntList("axes", {1})
          .Int("keepdims", 0)
          .Run1();
  ASSERT_TRUE(big.ok()) << big.status();
  const std::vector<float> v = Values<float>(*big);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_NEAR(v[0], 1000 + std::log(2.0f), 1e-3);
  EXPECT_EQ(v[1], -kInf);  // log(0), not NaN.
  for (const char* op : {"ReduceLogSumExp", "ReduceLogSum"}) {
    absl::StatusOr<Tensor> empty = OneNode(op, 18)
                                       .In(T1<float>({2, 0}, {}))
                                       .In(T1<int64_t>({1}, {1}))
                                       .Int("keepdims", 0)
                                       .Run1();
    ASSERT_TRUE(empty.ok()) << op << ": " << empty.status();
    EXPECT_THAT(Values<float>(*empty), ElementsAre(-kInf, -kInf)) << op;
  }
  absl::StatusOr<Tensor> l2 = OneNode("ReduceL2", 18)
                                  .In(T1<float>({2, 0}, {}))
                                  .In(T1<int64_t>({1}, {1}))
                                  .Run1();
  ASSERT_TRUE(l2.ok()) << l2.status();
  EXPECT_THAT(Values<float>(*l2), ElementsAre(0, 0));
}

TEST(OpsReduceTest, NoopWithEmptyAxesStillMapsEachElement) {
  // As the ONNX reference: reducing no axes leaves sum(f(x)) = f(x).
  const Tensor x = T1<float>({3}, {-2, 1, 3});
  const Tensor no_axes = T1<int64_t>({0}, {});
  struct Case {
    const char* op;
    std::vector<float> want;
  };
  for (const Case& c :
       {Case{"ReduceSumSquare", {4, 1, 9}}, Case{"ReduceL1", {2, 1, 3}},
        Case{"ReduceL2", {2, 1, 3}}, Case{"ReduceSum", {-2, 1, 3}}}) {
    absl::StatusOr<Tensor> y = OneNode(c.op, 18)
                                   .In(x)
                                   .In(no_axes)
                                   .Int("noop_with_empty_axes", 1)
                                   .Run1();
    ASSERT_TRUE(y.ok()) << c.op << ": " << y.status();
    EXPECT_EQ(y->shape(), (std::vector<int64_t>{3})) << c.op;
    EXPECT_THAT(Values<float>(*y), ElementsAreArray(c.want)) << c.op;
  }
}

TEST(OpsReduceTest, LogSumsOfIntsAndOldInputAxesAreRefused) {
  absl::StatusOr<std::unique_ptr<Executor>> ints =
      OneNode("ReduceLogSumExp", 13).In(T1<int64_t>({2}, {1, 2})).Create();
  ASSERT_FALSE(ints.ok());
  EXPECT_EQ(ints.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ints.status().message(), HasSubstr("INT64"));
  // Before opset 18 these take axes only as an attribute.
  absl::StatusOr<std::unique_ptr<Executor>> old =
      OneNode("ReduceL2", 13).In(Cube()).In(T1<int64_t>({1}, {1})).Create();
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(old.status().message(), HasSubstr("attribute"));
}

// ------------------------------------------------------- ArgMax / ArgMin

TEST(OpsArgTest, SelectLastIndexPicksTheLastTie) {
  const Tensor x = T1<float>({2, 3}, {2, 5, 5, 7, 1, 7});
  absl::StatusOr<Tensor> first =
      OneNode("ArgMax", 13).In(x).Int("axis", 1).Run1();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_THAT(Values<int64_t>(*first), ElementsAre(1, 0));
  absl::StatusOr<Tensor> last = OneNode("ArgMax", 13)
                                    .In(x)
                                    .Int("axis", -1)
                                    .Int("keepdims", 0)
                                    .Int("select_last_index", 1)
                                    .Run1();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->shape(), (std::vector<int64_t>{2}));
  EXPECT_THAT(Values<int64_t>(*last), ElementsAre(2, 2));
}

TEST(OpsArgTest, ArgMinAlongTheFirstAxisOfInts) {
  const Tensor x = T1<int32_t>({2, 3}, {2, 1, 3, 2, 1, 0});
  absl::StatusOr<Tensor> first =
      OneNode("ArgMin", 12).In(x).Int("keepdims", 0).Run1();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(Values<int64_t>(*first), ElementsAre(0, 0, 1));
  absl::StatusOr<Tensor> last = OneNode("ArgMin", 12)
                                    .In(x)
                                    .Int("keepdims", 0)
                                    .Int("select_last_index", 1)
                                    .Run1();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(Values<int64_t>(*last), ElementsAre(1, 1, 1));
}

TEST(OpsArgTest, NanWinsLikeNumpy) {
  absl::StatusOr<Tensor> y = OneNode("ArgMax", 13)
                                 .In(T1<float>({4}, {1, kNan, 9, kNan}))
                                 .Int("keepdims", 0)
                                 .Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>(*y), ElementsAre(1));
}

TEST(OpsArgTest, SelectLastIndexDoesNotExistBefore12) {
  absl::StatusOr<std::unique_ptr<Executor>> e = OneNode("ArgMax", 11)
                                                    .In(T1<float>({2}, {1, 2}))
                                                    .Int("select_last_index", 1)
                                                    .Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(e.status().message(), HasSubstr("select_last_index"));
}

TEST(OpsArgTest, OutOfRangeAxisIsInvalidAndNamesTheNode) {
  absl::StatusOr<std::unique_ptr<Executor>> e =
      OneNode("ArgMin", 13).In(Cube()).Int("axis", -4).Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("node 'q'"));
}

// Integer sums and products wrap around (numpy's answer) instead of the
// signed overflow C++ leaves undefined; L1 of MIN stays MIN; L2 of a sum of
// squares that wrapped below zero is 0, not an undefined conversion of NaN.
TEST(OpsReduceTest, IntegerSumsAndProductsWrapAround) {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  auto reduce = [](const char* op, Tensor x) {
    absl::StatusOr<Tensor> y =
        OneNode(op, 13).In(std::move(x)).Int("keepdims", 0).Run1();
    EXPECT_TRUE(y.ok()) << op << ": " << y.status();
    return y.ok() ? Values<int32_t>(*y) : std::vector<int32_t>{};
  };
  EXPECT_THAT(reduce("ReduceSum", T1<int32_t>({2}, {kMax, 1})),
              ElementsAre(kMin));
  EXPECT_THAT(reduce("ReduceProd", T1<int32_t>({2}, {1 << 16, 1 << 16})),
              ElementsAre(0));
  EXPECT_THAT(reduce("ReduceL1", T1<int32_t>({1}, {kMin})), ElementsAre(kMin));
  EXPECT_THAT(reduce("ReduceSumSquare", T1<int32_t>({1}, {1 << 16})),
              ElementsAre(0));
  EXPECT_THAT(reduce("ReduceL2", T1<int32_t>({1}, {46341})), ElementsAre(0));
  // Over an inner axis too (the row-wise fold).
  absl::StatusOr<Tensor> rows =
      OneNode("ReduceSum", 13)
          .In(T1<int64_t>({2, 2}, {INT64_MAX, 5, 1, 6}))
          .Const(I64({1}, {0}))
          .Int("keepdims", 0)
          .Run1();
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(Values<int64_t>(*rows), ElementsAre(INT64_MIN, 11));
}

}  // namespace
}  // namespace quantd::executor
