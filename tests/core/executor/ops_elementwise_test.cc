// The elementwise kernels (ops_elementwise.cc) against PyTorch / numpy golden
// values (scripts/make_activation_golden.py) and hand-computed ones: the
// unary math (rounding half to even, trigonometry, IsNaN / IsInf), Mod in
// both modes, BitShift and Bitwise*, Sum / Mean, the integer and unsigned
// types of the arithmetic and comparison ops; and 16-bit floats: Cast
// rounding to nearest even (straight from double too), FromProto's typed
// fields, and ops computing FLOAT16 / BFLOAT16 in float; the comparisons
// and logic (broadcasting, BOOL out, feeding Where), variadic Max / Min and
// Abs / Sign / Exp / Log with their error codes, against hand-computed values.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/executor/executor.h"
#include "core/numerics/float16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/core/executor/op_golden.h"
#include "tests/core/graph/test_models.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::ModelBuilder;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

std::vector<uint16_t> Bits(const Tensor& t) {
  const uint16_t* p = static_cast<const uint16_t*>(t.raw());
  return std::vector<uint16_t>(p, p + t.size());
}

// One node on `inputs`; the output or a test failure.
Tensor RunNode(OneNode n) {
  absl::StatusOr<Tensor> y = n.Run1();
  EXPECT_TRUE(y.ok()) << n.op << ": " << y.status();
  return y.ok() ? *y : Tensor();
}

absl::Status RunStatus(const OneNode& n) { return n.Run1().status(); }

// ------------------------------------------------------ unary vs torch

struct UnaryCase {
  const char* name;
  const char* op;
};

class UnaryGoldenTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryGoldenTest, FloatAndDoubleMatchTorch) {
  const UnaryCase& c = GetParam();
  const GoldenArray x = GoldenGet(c.name, "x");
  const GoldenArray want = GoldenGet(c.name, "out");
  OneNode nf(c.op, 13);
  nf.inputs = {x.As<float>()};
  const Tensor yf = RunNode(nf);
  OneNode nd(c.op, 13);
  nd.inputs = {x.As<double>()};
  const Tensor yd = RunNode(nd);
  ASSERT_EQ(yf.shape(), want.dims);
  ASSERT_EQ(yd.shape(), want.dims);
  for (int64_t i = 0; i < yf.size(); ++i) {
    const double w = want.values[i];
    EXPECT_NEAR(yf.data<float>()[i], w, 1e-6 + 2e-6 * std::abs(w))
        << c.name << " float at " << i << " x=" << x.values[i];
    EXPECT_NEAR(yd.data<double>()[i], w, 1e-6 + 2e-6 * std::abs(w))
        << c.name << " double at " << i << " x=" << x.values[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Math, UnaryGoldenTest,
    ::testing::Values(UnaryCase{"round", "Round"}, UnaryCase{"floor", "Floor"},
                      UnaryCase{"ceil", "Ceil"},
                      UnaryCase{"reciprocal", "Reciprocal"},
                      UnaryCase{"sin", "Sin"}, UnaryCase{"cos", "Cos"},
                      UnaryCase{"tan", "Tan"}, UnaryCase{"asin", "Asin"},
                      UnaryCase{"acos", "Acos"}, UnaryCase{"atan", "Atan"},
                      UnaryCase{"sinh", "Sinh"}, UnaryCase{"cosh", "Cosh"},
                      UnaryCase{"asinh", "Asinh"}, UnaryCase{"acosh", "Acosh"},
                      UnaryCase{"atanh", "Atanh"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(UnaryMathTest, RoundIsHalfToEven) {
  OneNode n("Round", 11);
  n.inputs = {T1<float>({7}, {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.6f, -0.4f})};
  EXPECT_THAT(Values<float>(RunNode(n)),
              ElementsAre(0, 2, 2, -0.0f, -2, 3, -0.0f));
}

TEST(UnaryMathTest, IsNaNAndIsInfWithDirections) {
  const Tensor x = T1<float>({5}, {1, kNan, kInf, -kInf, 0});
  OneNode nan("IsNaN", 13);
  nan.inputs = {x};
  EXPECT_THAT(Values<bool>(RunNode(nan)),
              ElementsAre(false, true, false, false, false));
  OneNode inf("IsInf", 10);
  inf.inputs = {x};
  EXPECT_THAT(Values<bool>(RunNode(inf)),
              ElementsAre(false, false, true, true, false));
  OneNode pos("IsInf", 10);
  pos.Int("detect_negative", 0);
  pos.inputs = {x};
  EXPECT_THAT(Values<bool>(RunNode(pos)),
              ElementsAre(false, false, true, false, false));
  OneNode neg("IsInf", 10);
  neg.Int("detect_positive", 0);
  neg.inputs = {T1<double>({3}, {-kInf, kInf, kNan})};
  EXPECT_THAT(Values<bool>(RunNode(neg)), ElementsAre(true, false, false));
}

TEST(UnaryMathTest, IntegerAndUnsignedUnaries) {
  OneNode neg("Neg", 13);
  neg.inputs = {T1<int16_t>({3}, {-3, 0, 32767})};
  EXPECT_THAT(Values<int16_t>(RunNode(neg)), ElementsAre(3, 0, -32767));
  OneNode abs("Abs", 13);
  abs.inputs = {T1<uint32_t>({2}, {0, 4000000000u})};
  EXPECT_THAT(Values<uint32_t>(RunNode(abs)), ElementsAre(0u, 4000000000u));
  OneNode sign("Sign", 13);
  sign.inputs = {T1<uint8_t>({3}, {0, 1, 200})};
  EXPECT_THAT(Values<uint8_t>(RunNode(sign)), ElementsAre(0, 1, 1));
  sign.inputs = {T1<int64_t>({3}, {-9, 0, 9})};
  EXPECT_THAT(Values<int64_t>(RunNode(sign)), ElementsAre(-1, 0, 1));
  OneNode relu("Relu", 14);
  relu.inputs = {T1<int8_t>({3}, {-128, 0, 127})};
  EXPECT_THAT(Values<int8_t>(RunNode(relu)), ElementsAre(0, 0, 127));
  OneNode bad("Neg", 13);
  bad.inputs = {T1<uint8_t>({1}, {1})};
  EXPECT_EQ(RunStatus(bad).code(), absl::StatusCode::kInvalidArgument);
}

// -------------------------------------------------------------------- Mod

TEST(ModTest, IntegersBothModesMatchTorch) {
  for (const auto& [name, fmod] :
       {std::pair<const char*, int>{"mod_int_python", 0},
        std::pair<const char*, int>{"mod_int_fmod", 1}}) {
    const GoldenArray want = GoldenGet(name, "out");
    for (const DataType t : {TP::INT64, TP::INT32, TP::INT8, TP::INT16}) {
      OneNode n("Mod", 13);
      n.Int("fmod", fmod);
      const Tensor a = GoldenGet(name, "x").As<int64_t>();
      const Tensor b = GoldenGet(name, "y2").As<int64_t>();
      // Narrow through Cast's own conversion.
      auto as = [t](const Tensor& v) {
        OneNode c("Cast", 13);
        c.Int("to", t);
        c.inputs = {v};
        return RunNode(c);
      };
      n.inputs = {as(a), as(b)};
      const Tensor y = RunNode(n);
      EXPECT_EQ(y.dtype(), t);
      std::vector<int64_t> w(want.values.begin(), want.values.end());
      EXPECT_THAT(y.ToInt64Vector(), ElementsAreArray(w))
          << name << " " << DataTypeName(t);
    }
  }
}

TEST(ModTest, FloatFmodMatchesTorchAndBroadcasts) {
  OneNode n("Mod", 13);
  n.Int("fmod", 1);
  n.inputs = {GoldenGet("mod_float_fmod", "x").As<float>(),
              GoldenGet("mod_float_fmod", "y2").As<float>()};
  const Tensor y = RunNode(n);
  const GoldenArray want = GoldenGet("mod_float_fmod", "out");
  for (int64_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y.data<float>()[i], want.values[i], 1e-6) << i;
  }
  // A scalar divisor broadcast over a matrix, unsigned.
  OneNode u("Mod", 10);
  u.inputs = {T1<uint64_t>({2, 2}, {7, 8, 9, 10}), T1<uint64_t>({}, {4})};
  EXPECT_THAT(Values<uint64_t>(RunNode(u)), ElementsAre(3u, 0u, 1u, 2u));
}

TEST(ModTest, DivisionByZeroAndMinByMinusOneDoNotTrap) {
  OneNode n("Mod", 13);
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  n.inputs = {T1<int64_t>({3}, {5, kMin, -7}), T1<int64_t>({3}, {0, -1, 0})};
  EXPECT_THAT(Values<int64_t>(RunNode(n)), ElementsAre(0, 0, 0));
  OneNode d("Div", 14);
  d.inputs = {T1<int64_t>({3}, {5, kMin, -7}), T1<int64_t>({3}, {0, -1, 2})};
  EXPECT_THAT(Values<int64_t>(RunNode(d)), ElementsAre(0, kMin, -3));
  OneNode f("Mod", 13);
  f.Int("fmod", 1);
  f.inputs = {T1<float>({1}, {1}), T1<float>({1}, {0})};
  EXPECT_TRUE(std::isnan(Values<float>(RunNode(f))[0]));
}

// Integer Add, Sub, Mul, Neg and Abs wrap around as numpy's do; in C++ a
// signed overflow (and a uint16 product promoted to int) is undefined
// (UBSan on the executor fuzzer: Add of INT64_MIN and itself).
TEST(IntegerArithmeticTest, OverflowWrapsAround) {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  auto binary = [](const char* op, Tensor a, Tensor b) {
    OneNode n(op, 14);
    n.inputs = {std::move(a), std::move(b)};
    return RunNode(n);
  };
  EXPECT_THAT(Values<int64_t>(binary("Add", T1<int64_t>({2}, {kMin, kMax}),
                                     T1<int64_t>({2}, {kMin, 1}))),
              ElementsAre(0, kMin));
  EXPECT_THAT(Values<int64_t>(binary("Sub", T1<int64_t>({2}, {kMin, kMax}),
                                     T1<int64_t>({2}, {1, -1}))),
              ElementsAre(kMax, kMin));
  EXPECT_THAT(Values<int64_t>(binary("Mul", T1<int64_t>({2}, {kMax, kMin}),
                                     T1<int64_t>({2}, {2, -1}))),
              ElementsAre(-2, kMin));
  EXPECT_THAT(Values<int32_t>(binary("Mul", T1<int32_t>({1}, {1 << 30}),
                                     T1<int32_t>({1}, {4}))),
              ElementsAre(0));
  EXPECT_THAT(Values<uint16_t>(binary("Mul", T1<uint16_t>({1}, {65535}),
                                      T1<uint16_t>({1}, {65535}))),
              ElementsAre(1));
  EXPECT_THAT(Values<int8_t>(
                  binary("Add", T1<int8_t>({1}, {127}), T1<int8_t>({1}, {1}))),
              ElementsAre(-128));
  for (const char* op : {"Neg", "Abs"}) {
    OneNode n(op, 13);
    n.inputs = {T1<int64_t>({2}, {kMin, -3})};
    EXPECT_THAT(Values<int64_t>(RunNode(n)), ElementsAre(kMin, 3)) << op;
  }
}

TEST(ModTest, FloatsNeedFmod) {
  OneNode n("Mod", 13);
  n.inputs = {T1<float>({1}, {1}), T1<float>({1}, {2})};
  absl::Status s = RunStatus(n);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("fmod must be 1"));
  // FLOAT16 too (its kernel is built for FLOAT).
  n.inputs = {T1<float>({1}, {1}).NarrowedTo(TP::FLOAT16),
              T1<float>({1}, {2}).NarrowedTo(TP::FLOAT16)};
  EXPECT_EQ(RunStatus(n).code(), absl::StatusCode::kInvalidArgument);
}

// --------------------------------------------------------- bit operations

TEST(BitTest, ShiftsBothWaysAndPastTheWidth) {
  OneNode l("BitShift", 11);
  l.String("direction", "LEFT");
  l.inputs = {T1<uint8_t>({4}, {1, 3, 255, 1}), T1<uint8_t>({4}, {1, 2, 1, 8})};
  EXPECT_THAT(Values<uint8_t>(RunNode(l)), ElementsAre(2, 12, 254, 0));
  OneNode r("BitShift", 11);
  r.String("direction", "RIGHT");
  r.inputs = {T1<uint64_t>({3}, {1ull << 63, 16, 16}), T1<uint64_t>({}, {4})};
  EXPECT_THAT(Values<uint64_t>(RunNode(r)), ElementsAre(1ull << 59, 1u, 1u));
  r.inputs = {T1<uint32_t>({1}, {0xffffffffu}), T1<uint32_t>({1}, {40})};
  EXPECT_THAT(Values<uint32_t>(RunNode(r)), ElementsAre(0u));
}

TEST(BitTest, ShiftNeedsADirectionAndUnsignedValues) {
  OneNode n("BitShift", 11);
  n.String("direction", "UP");
  n.inputs = {T1<uint8_t>({1}, {1}), T1<uint8_t>({1}, {1})};
  EXPECT_EQ(RunStatus(n).code(), absl::StatusCode::kInvalidArgument);
  OneNode s("BitShift", 11);
  s.String("direction", "LEFT");
  s.inputs = {T1<int32_t>({1}, {1}), T1<int32_t>({1}, {1})};
  EXPECT_EQ(RunStatus(s).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BitTest, BitwiseOpsOnSignedAndUnsigned) {
  const Tensor a = T1<int8_t>({3}, {-1, 0x0f, 0x55});
  const Tensor b = T1<int8_t>({3}, {0x12, 0x3c, 0x0f});
  OneNode band("BitwiseAnd", 18), bor("BitwiseOr", 18), bxor("BitwiseXor", 18);
  band.inputs = bor.inputs = bxor.inputs = {a, b};
  EXPECT_THAT(Values<int8_t>(RunNode(band)), ElementsAre(0x12, 0x0c, 0x05));
  EXPECT_THAT(Values<int8_t>(RunNode(bor)), ElementsAre(-1, 0x3f, 0x5f));
  EXPECT_THAT(Values<int8_t>(RunNode(bxor)), ElementsAre(~0x12, 0x33, 0x5a));
  OneNode bnot("BitwiseNot", 18);
  bnot.inputs = {T1<uint16_t>({2}, {0, 0x00ff})};
  EXPECT_THAT(Values<uint16_t>(RunNode(bnot)), ElementsAre(0xffff, 0xff00));
  OneNode bad("BitwiseAnd", 18);
  bad.inputs = {T1<float>({1}, {1}), T1<float>({1}, {1})};
  EXPECT_EQ(RunStatus(bad).code(), absl::StatusCode::kUnimplemented);
}

// ------------------------------------------------------------- Sum / Mean

TEST(VariadicTest, SumAndMeanBroadcast) {
  const Tensor a = T1<float>({2, 2}, {1, 2, 3, 4});
  const Tensor b = T1<float>({2}, {10, 20});
  const Tensor c = T1<float>({}, {100});
  OneNode sum("Sum", 13);
  sum.inputs = {a, b, c};
  EXPECT_THAT(Values<float>(RunNode(sum)), ElementsAre(111, 122, 113, 124));
  OneNode mean("Mean", 13);
  mean.inputs = {a, b, c};
  EXPECT_THAT(Values<float>(RunNode(mean)),
              ElementsAre(37, 122.0f / 3, 113.0f / 3, 124.0f / 3));
  OneNode one("Mean", 13);
  one.inputs = {T1<double>({2}, {1.5, -2})};
  EXPECT_THAT(Values<double>(RunNode(one)), ElementsAre(1.5, -2));
}

TEST(VariadicTest, OpsetSevenSumNeedsEqualShapes) {
  OneNode sum("Sum", 7);
  sum.inputs = {T1<float>({2}, {1, 2}), T1<float>({1}, {1})};
  absl::Status s = RunStatus(sum);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("equal shapes"));
}

TEST(VariadicTest, MaxMinOnWiderIntegerTypes) {
  OneNode mx("Max", 13);
  mx.inputs = {T1<int16_t>({3}, {-5, 7, 0}), T1<int16_t>({1}, {1})};
  EXPECT_THAT(Values<int16_t>(RunNode(mx)), ElementsAre(1, 7, 1));
  OneNode mn("Min", 13);
  mn.inputs = {T1<uint32_t>({2}, {4000000000u, 3}), T1<uint32_t>({2}, {5, 9})};
  EXPECT_THAT(Values<uint32_t>(RunNode(mn)), ElementsAre(5u, 3u));
}

// ----------------------------------------------- arithmetic type coverage

TEST(ArithmeticTypesTest, UnsignedAndSixteenBitIntegers) {
  OneNode add("Add", 14);
  add.inputs = {T1<uint64_t>({2}, {1ull << 63, 1}), T1<uint64_t>({}, {2})};
  EXPECT_THAT(Values<uint64_t>(RunNode(add)),
              ElementsAre((1ull << 63) + 2, 3u));
  OneNode sub("Sub", 14);
  sub.inputs = {T1<uint16_t>({1}, {1}), T1<uint16_t>({1}, {2})};
  EXPECT_THAT(Values<uint16_t>(RunNode(sub)), ElementsAre(0xffff));  // Wraps.
  OneNode mul("Mul", 14);
  mul.inputs = {T1<int16_t>({2}, {-3, 300}), T1<int16_t>({2}, {7, 100})};
  EXPECT_THAT(Values<int16_t>(RunNode(mul)), ElementsAre(-21, 30000));
  OneNode div("Div", 14);
  div.inputs = {T1<int32_t>({2}, {-7, 7}), T1<int32_t>({2}, {2, 2})};
  EXPECT_THAT(Values<int32_t>(RunNode(div)), ElementsAre(-3, 3));  // Truncates.
  OneNode eq("Equal", 13);
  eq.inputs = {T1<uint8_t>({2}, {3, 4}), T1<uint8_t>({1}, {4})};
  EXPECT_THAT(Values<bool>(RunNode(eq)), ElementsAre(false, true));
  OneNode ge("GreaterOrEqual", 16);
  ge.inputs = {T1<int16_t>({2}, {-1, 5}), T1<int16_t>({1}, {0})};
  EXPECT_THAT(Values<bool>(RunNode(ge)), ElementsAre(false, true));
}

TEST(ArithmeticTypesTest, PowRaisesIntegersAndMixedExponents) {
  OneNode p("Pow", 15);
  p.inputs = {T1<int32_t>({3}, {1, 2, 3}), T1<float>({3}, {4, 5, 6})};
  EXPECT_THAT(Values<int32_t>(RunNode(p)), ElementsAre(1, 32, 729));
  p.inputs = {T1<int64_t>({2}, {-2, 10}), T1<int64_t>({2}, {3, 2})};
  EXPECT_THAT(Values<int64_t>(RunNode(p)), ElementsAre(-8, 100));
  p.inputs = {T1<float>({2}, {2, 9}), T1<uint8_t>({1}, {2})};
  EXPECT_THAT(Values<float>(RunNode(p)), ElementsAre(4, 81));
}

TEST(ArithmeticTypesTest, ClipAndWhereOnNewTypes) {
  OneNode clip("Clip", 13);
  clip.inputs = {T1<uint16_t>({3}, {1, 50, 900}), T1<uint16_t>({}, {10}),
                 T1<uint16_t>({}, {100})};
  EXPECT_THAT(Values<uint16_t>(RunNode(clip)), ElementsAre(10, 50, 100));
  OneNode where("Where", 16);
  where.inputs = {T1<bool>({2}, {true, false}), T1<int16_t>({2}, {1, 2}),
                  T1<int16_t>({1}, {-9})};
  EXPECT_THAT(Values<int16_t>(RunNode(where)), ElementsAre(1, -9));
}

// ---------------------------------------------------- FLOAT16 / BFLOAT16

TEST(HalfTest, FloatToSixteenBitsRoundsLikeTorch) {
  for (const auto& [name, to] :
       {std::pair<const char*, DataType>{"float_to_half", TP::FLOAT16},
        std::pair<const char*, DataType>{"float_to_bfloat16", TP::BFLOAT16}}) {
    OneNode cast("Cast", 13);
    cast.Int("to", to);
    cast.inputs = {GoldenGet(name, "x").As<float>()};
    const Tensor y = RunNode(cast);
    ASSERT_EQ(y.dtype(), to);
    const GoldenArray want = GoldenGet(name, "bits");
    const std::vector<uint16_t> got = Bits(y);
    ASSERT_EQ(got.size(), want.values.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], static_cast<uint16_t>(want.values[i]))
          << name << " at " << i << " x=" << GoldenGet(name, "x").values[i];
    }
    // And back: widening is exact.
    OneNode back("Cast", 13);
    back.Int("to", TP::FLOAT);
    back.inputs = {y};
    const Tensor f = RunNode(back);
    for (size_t i = 0; i < got.size(); ++i) {
      const float w = to == TP::FLOAT16 ? numerics::HalfToFloat(got[i])
                                        : numerics::BFloat16ToFloat(got[i]);
      EXPECT_EQ(numerics::FloatToBits(f.data<float>()[i]),
                numerics::FloatToBits(w));
    }
  }
}

TEST(HalfTest, DoubleToHalfRoundsOnceLikeNumpy) {
  OneNode cast("Cast", 13);
  cast.Int("to", TP::FLOAT16);
  cast.inputs = {GoldenGet("double_to_half", "x").As<double>()};
  const std::vector<uint16_t> got = Bits(RunNode(cast));
  const GoldenArray want = GoldenGet("double_to_half", "bits");
  ASSERT_EQ(got.size(), want.values.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], static_cast<uint16_t>(want.values[i]))
        << "x=" << GoldenGet("double_to_half", "x").values[i];
  }
  // 1 + 2^-11 + 2^-40: through float it would be the tie 1 + 2^-11 and
  // round down to 1.0 (0x3C00); once, it rounds up.
  EXPECT_EQ(
      numerics::DoubleToHalf(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)),
      0x3C01);
}

TEST(HalfTest, BFloat16FromDoubleAndIntegersRoundToNearestEven) {
  // 1 + 2^-8 is a bfloat16 tie: even is 1.0; a hair above rounds up.
  EXPECT_EQ(numerics::DoubleToBFloat16(1.0 + std::ldexp(1.0, -8)), 0x3F80);
  EXPECT_EQ(numerics::DoubleToBFloat16(1.0 + std::ldexp(1.0, -8) +
                                       std::ldexp(1.0, -40)),
            0x3F81);
  EXPECT_EQ(numerics::DoubleToBFloat16(1e39), 0x7F80);  // Overflow: inf.
  EXPECT_EQ(numerics::DoubleToBFloat16(-0.0), 0x8000);
  EXPECT_EQ(numerics::DoubleToHalf(0.0), 0x0000);
  EXPECT_EQ(numerics::DoubleToHalf(-0.0), 0x8000);
  OneNode cast("Cast", 13);
  cast.Int("to", TP::BFLOAT16);
  cast.inputs = {T1<int64_t>({3}, {257, 259, -3})};
  // 257 = 1.00000001b * 2^8: a tie, to even 256; 259 rounds up to 260.
  EXPECT_THAT(Bits(RunNode(cast)), ElementsAre(0x4380, 0x4382, 0xC040));
}

TEST(HalfTest, CastFromSixteenBitsToIntegersAndBool) {
  OneNode cast("Cast", 13);
  cast.Int("to", TP::INT32);
  cast.inputs = {T1<float>({3}, {-2.75f, 3.5f, 1000}).NarrowedTo(TP::FLOAT16)};
  EXPECT_THAT(Values<int32_t>(RunNode(cast)), ElementsAre(-2, 3, 1000));
  OneNode to_bool("Cast", 13);
  to_bool.Int("to", TP::BOOL);
  to_bool.inputs = {T1<float>({3}, {0, -0.0f, 0.5f}).NarrowedTo(TP::BFLOAT16)};
  EXPECT_THAT(Values<bool>(RunNode(to_bool)), ElementsAre(false, false, true));
  OneNode h2b("Cast", 13);
  h2b.Int("to", TP::BFLOAT16);
  h2b.inputs = {T1<float>({1}, {65504}).NarrowedTo(TP::FLOAT16)};
  EXPECT_THAT(Bits(RunNode(h2b)), ElementsAre(0x4780));  // 65536, to even.
}

// Float to integer outside the type's range or NaN: undefined in C++ and
// unspecified in ONNX; the executor saturates and maps NaN to 0 (the
// executor fuzzer's UBSan finding).
TEST(CastTest, FloatOutOfRangeSaturatesAndNanIsZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OneNode to_i64("Cast", 13);
  to_i64.Int("to", TP::INT64);
  to_i64.inputs = {T1<float>({5}, {nan, inf, -inf, 1e30f, -7.9f})};
  EXPECT_THAT(Values<int64_t>(RunNode(to_i64)),
              ElementsAre(0, std::numeric_limits<int64_t>::max(),
                          std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max(), -7));
  OneNode to_u8("Cast", 13);
  to_u8.Int("to", TP::UINT8);
  to_u8.inputs = {T1<double>({4}, {-1.0, 300.0, 255.9, std::nan("")})};
  EXPECT_THAT(Values<uint8_t>(RunNode(to_u8)), ElementsAre(0, 255, 255, 0));
  // Doubles convert without going through float.
  OneNode exact("Cast", 13);
  exact.Int("to", TP::INT64);
  exact.inputs = {T1<double>({1}, {1099511627777.0})};  // 2^40 + 1.
  EXPECT_THAT(Values<int64_t>(RunNode(exact)), ElementsAre(1099511627777));
  OneNode half("Cast", 13);
  half.Int("to", TP::INT8);
  half.inputs = {T1<float>({2}, {1000, -1000}).NarrowedTo(TP::FLOAT16)};
  EXPECT_THAT(Values<int8_t>(RunNode(half)), ElementsAre(127, -128));
}

TEST(HalfTest, FromProtoReadsTypedFields) {
  onnx::TensorProto p;
  p.set_data_type(TP::FLOAT16);
  p.add_dims(2);
  p.add_int32_data(0x3C00);  // 1.0
  p.add_int32_data(0xC000);  // -2.0
  absl::StatusOr<Tensor> t = Tensor::FromProto(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), TP::FLOAT16);
  const Tensor f = t->WidenedToFloat();
  EXPECT_THAT(Values<float>(f), ElementsAre(1.0f, -2.0f));
  // Round trip through raw_data.
  absl::StatusOr<Tensor> again = Tensor::FromProto(t->ToProto("h"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(Bits(*again), ElementsAre(0x3C00, 0xC000));

  onnx::TensorProto u;
  u.set_data_type(TP::UINT64);
  u.add_dims(1);
  u.add_uint64_data(18446744073709551615ull);
  absl::StatusOr<Tensor> ut = Tensor::FromProto(u);
  ASSERT_TRUE(ut.ok()) << ut.status();
  EXPECT_THAT(Values<uint64_t>(*ut), ElementsAre(18446744073709551615ull));
}

TEST(HalfTest, ElementwiseOpsComputeInFloatAndRoundOnce) {
  // 1 + 2^-11 is not a half; 1 + 1 = 2 and 2^-11 + 2^-11 = 2^-10 are: each
  // op rounds its float result once.
  const Tensor a =
      T1<float>({3}, {1.0f, 0.00048828125f, 65504.0f}).NarrowedTo(TP::FLOAT16);
  const Tensor b = T1<float>({1}, {1.0f}).NarrowedTo(TP::FLOAT16);
  OneNode add("Add", 14);
  add.inputs = {a, b};
  const Tensor y = RunNode(add);
  ASSERT_EQ(y.dtype(), TP::FLOAT16);
  // 2.0; 1.00048828125 rounds to even 1.0; 65505 rounds back to 65504.
  EXPECT_THAT(Bits(y), ElementsAre(0x4000, 0x3C00, 0x7BFF));

  // Comparisons stay BOOL; BFLOAT16 works the same way.
  OneNode less("Less", 13);
  less.inputs = {a.WidenedToFloat().NarrowedTo(TP::BFLOAT16),
                 b.WidenedToFloat().NarrowedTo(TP::BFLOAT16)};
  EXPECT_THAT(Values<bool>(RunNode(less)), ElementsAre(false, true, false));
}

TEST(HalfTest, HalfInitializersAreWidenedOnceAndStayHalfOut) {
  // A FLOAT16 MatMul weight given as an initializer: the output is FLOAT16
  // and equals the float product rounded.
  OneNode mm("MatMul", 13);
  const Tensor w =
      T1<float>({2, 2}, {0.1f, 0.2f, 0.3f, 0.4f}).NarrowedTo(TP::FLOAT16);
  const Tensor x = T1<float>({1, 2}, {1.5f, -2.0f}).NarrowedTo(TP::FLOAT16);
  mm.inputs = {x, w};
  mm.constant = {false, true};
  const Tensor y = RunNode(mm);
  ASSERT_EQ(y.dtype(), TP::FLOAT16);
  const Tensor wf = w.WidenedToFloat(), xf = x.WidenedToFloat();
  const float y0 = xf.data<float>()[0] * wf.data<float>()[0] +
                   xf.data<float>()[1] * wf.data<float>()[2];
  const float y1 = xf.data<float>()[0] * wf.data<float>()[1] +
                   xf.data<float>()[1] * wf.data<float>()[3];
  EXPECT_THAT(Bits(y), ElementsAre(numerics::FloatToHalf(y0),
                                   numerics::FloatToHalf(y1)));
}

TEST(HalfTest, GraphDeclaredFloatOutputsAreNotNarrowed) {
  // LayerNormalization's Mean / InvStdDev are float (stash_type) whatever
  // X is; Y follows X.
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("LayerNormalization");
  n->add_input("x");
  n->add_input("scale");
  n->add_output("y");
  n->add_output("mean");
  n->add_output("inv");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(TP::FLOAT16);
  *g->add_initializer() =
      T1<float>({4}, {1, 1, 1, 1}).NarrowedTo(TP::FLOAT16).ToProto("scale");
  for (const char* o : {"y", "mean", "inv"}) g->add_output()->set_name(o);
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(m);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT((*e)->output_types(),
              ElementsAre(TP::FLOAT16, TP::FLOAT, TP::FLOAT));
  absl::StatusOr<std::vector<Tensor>> out = (*e)->Run(
      {{"x", T1<float>({1, 4}, {1, 2, 3, 4}).NarrowedTo(TP::FLOAT16)}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), TP::FLOAT16);
  EXPECT_EQ((*out)[1].dtype(), TP::FLOAT);
  EXPECT_EQ((*out)[2].dtype(), TP::FLOAT);
  EXPECT_FLOAT_EQ((*out)[1].data<float>()[0], 2.5f);
}

// ------------------------------------------------------------ comparisons

TEST(OpsComparisonTest, GreaterBroadcastsRowOverMatrix) {
  absl::StatusOr<Tensor> y = OneNode("Greater", 13)
                                 .In(T1<float>({2, 3}, {1, 5, 3, -1, 0, 9}))
                                 .In(T1<float>({3}, {0, 5, 2}))
                                 .Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<bool>(*y),
              ElementsAre(true, false, true, false, false, true));
}

TEST(OpsComparisonTest, LessBroadcastsColumnAgainstRowInt64) {
  absl::StatusOr<Tensor> y = OneNode("Less", 9)
                                 .In(T1<int64_t>({2, 1}, {1, 4}))
                                 .In(T1<int64_t>({1, 3}, {0, 2, 4}))
                                 .Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<bool>(*y),
              ElementsAre(false, true, true, false, false, false));
}

TEST(OpsComparisonTest, OrEqualVariantsIncludeTies) {
  absl::StatusOr<Tensor> ge = OneNode("GreaterOrEqual", 12)
                                  .In(T1<int32_t>({}, {2}))
                                  .In(T1<int32_t>({4}, {1, 2, 3, -7}))
                                  .Run1();
  ASSERT_TRUE(ge.ok()) << ge.status();
  EXPECT_EQ(ge->shape(), (std::vector<int64_t>{4}));
  EXPECT_THAT(Values<bool>(*ge), ElementsAre(true, true, false, true));
  absl::StatusOr<Tensor> le = OneNode("LessOrEqual", 16)
                                  .In(T1<double>({3}, {1.5, 2.0, 2.5}))
                                  .In(T1<double>({1}, {2.0}))
                                  .Run1();
  ASSERT_TRUE(le.ok()) << le.status();
  EXPECT_THAT(Values<bool>(*le), ElementsAre(true, true, false));
}

TEST(OpsComparisonTest, NanComparesFalse) {
  absl::StatusOr<Tensor> y = OneNode("Greater", 13)
                                 .In(T1<float>({2}, {kNan, 1}))
                                 .In(T1<float>({2}, {0, kNan}))
                                 .Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<bool>(*y), ElementsAre(false, false));
}

TEST(OpsComparisonTest, ShapesThatDoNotBroadcastNameTheNode) {
  absl::StatusOr<Tensor> y = OneNode("Less", 13)
                                 .In(T1<float>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                 .In(T1<float>({2}, {1, 2}))
                                 .Run1();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("node 'q'"));
  EXPECT_THAT(y.status().message(), HasSubstr("do not broadcast"));
}

TEST(OpsComparisonTest, MixedInputTypesAreInvalid) {
  absl::StatusOr<Tensor> y = OneNode("Greater", 13)
                                 .In(T1<float>({1}, {1}))
                                 .In(T1<int64_t>({1}, {1}))
                                 .Run1();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("node 'q'"));
}

// ------------------------------------------------------------------ logic

TEST(OpsLogicTest, AndOrXorBroadcast) {
  const Tensor a = T1<bool>({2, 2}, {true, true, false, false});
  const Tensor b = T1<bool>({2}, {true, false});
  struct Case {
    const char* op;
    std::vector<bool> want;
  };
  for (const Case& c : {Case{"And", {true, false, false, false}},
                        Case{"Or", {true, true, true, false}},
                        Case{"Xor", {false, true, true, false}}}) {
    absl::StatusOr<Tensor> y = OneNode(c.op, 7).In(a).In(b).Run1();
    ASSERT_TRUE(y.ok()) << c.op << ": " << y.status();
    EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 2})) << c.op;
    EXPECT_THAT(Values<bool>(*y), ElementsAreArray(c.want)) << c.op;
  }
}

TEST(OpsLogicTest, NotFlips) {
  absl::StatusOr<Tensor> y =
      OneNode("Not", 7).In(T1<bool>({3}, {true, false, true})).Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<bool>(*y), ElementsAre(false, true, false));
}

TEST(OpsLogicTest, NonBoolInputIsRefusedAtCreate) {
  absl::StatusOr<std::unique_ptr<Executor>> e = OneNode("And", 7)
                                                    .In(T1<float>({1}, {1}))
                                                    .In(T1<float>({1}, {0}))
                                                    .Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("node 'q'"));
  EXPECT_THAT(e.status().message(), HasSubstr("FLOAT"));
}

TEST(OpsLogicTest, ComparisonFeedsWhereAndLogic) {
  // The shape of a typical condition: (x > 0) and not (x > 2) selects x.
  ModelBuilder b(13);
  b.Input("x", {4})
      .Initializer("zero", {}, {0.0f})
      .Initializer("two", {}, {2.0f})
      .Node("Greater", {"x", "zero"}, {"pos"})
      .Node("Greater", {"x", "two"}, {"big"})
      .Node("Not", {"big"}, {"small"})
      .Node("And", {"pos", "small"}, {"cond"})
      .Node("Where", {"cond", "x", "zero"}, {"y"})
      .Output("y", {4});
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(b.Build());
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<std::vector<Tensor>> out =
      (*e)->Run({{"x", T1<float>({4}, {-1, 1, 2, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values<float>((*out)[0]), ElementsAre(0, 1, 2, 0));
}

// ------------------------------------------------------------ elementwise

TEST(OpsElementwiseTest, VariadicMaxMinBroadcastThreeInputs) {
  const Tensor a = T1<float>({2, 1}, {1, 6});
  const Tensor b = T1<float>({3}, {0, 4, 8});
  const Tensor c = T1<float>({}, {3});
  absl::StatusOr<Tensor> mx = OneNode("Max", 13).In(a).In(b).In(c).Run1();
  ASSERT_TRUE(mx.ok()) << mx.status();
  EXPECT_EQ(mx->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<float>(*mx), ElementsAre(3, 4, 8, 6, 6, 8));
  absl::StatusOr<Tensor> mn = OneNode("Min", 13).In(a).In(b).In(c).Run1();
  ASSERT_TRUE(mn.ok()) << mn.status();
  EXPECT_THAT(Values<float>(*mn), ElementsAre(0, 1, 1, 0, 3, 3));
  absl::StatusOr<Tensor> one =
      OneNode("Max", 13).In(T1<int64_t>({2}, {5, -5})).Run1();
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(Values<int64_t>(*one), ElementsAre(5, -5));
}

TEST(OpsElementwiseTest, MaxPropagatesNan) {
  absl::StatusOr<Tensor> y = OneNode("Max", 13)
                                 .In(T1<float>({2}, {kNan, 1}))
                                 .In(T1<float>({2}, {0, kNan}))
                                 .Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> v = Values<float>(*y);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_TRUE(std::isnan(v[1]));
}

TEST(OpsElementwiseTest, MaxBeforeOpset8NeedsEqualShapes) {
  absl::StatusOr<Tensor> y = OneNode("Max", 7)
                                 .In(T1<float>({2}, {1, 2}))
                                 .In(T1<float>({1}, {3}))
                                 .Run1();
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("node 'q'"));
  absl::StatusOr<Tensor> same = OneNode("Min", 7)
                                    .In(T1<float>({2}, {1, 2}))
                                    .In(T1<float>({2}, {3, 0}))
                                    .Run1();
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_THAT(Values<float>(*same), ElementsAre(1, 0));
}

TEST(OpsElementwiseTest, AbsSignExpLog) {
  const Tensor x = T1<float>({4}, {-2, 0, 0.5f, kNan});
  absl::StatusOr<Tensor> abs = OneNode("Abs", 13).In(x).Run1();
  ASSERT_TRUE(abs.ok()) << abs.status();
  std::vector<float> v = Values<float>(*abs);
  EXPECT_EQ(v[0], 2);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[2], 0.5f);
  EXPECT_TRUE(std::isnan(v[3]));
  absl::StatusOr<Tensor> sign = OneNode("Sign", 13).In(x).Run1();
  ASSERT_TRUE(sign.ok()) << sign.status();
  v = Values<float>(*sign);
  EXPECT_EQ(v[0], -1);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[2], 1);
  EXPECT_TRUE(std::isnan(v[3]));
  absl::StatusOr<Tensor> isign =
      OneNode("Sign", 9).In(T1<int64_t>({3}, {-9, 0, 4})).Run1();
  ASSERT_TRUE(isign.ok()) << isign.status();
  EXPECT_THAT(Values<int64_t>(*isign), ElementsAre(-1, 0, 1));
  absl::StatusOr<Tensor> iabs =
      OneNode("Abs", 13).In(T1<int32_t>({2}, {-3, 3})).Run1();
  ASSERT_TRUE(iabs.ok()) << iabs.status();
  EXPECT_THAT(Values<int32_t>(*iabs), ElementsAre(3, 3));

  absl::StatusOr<Tensor> ex =
      OneNode("Exp", 13).In(T1<float>({3}, {0, 1, -kInf})).Run1();
  ASSERT_TRUE(ex.ok()) << ex.status();
  v = Values<float>(*ex);
  EXPECT_EQ(v[0], 1);
  EXPECT_NEAR(v[1], 2.7182817f, 1e-6);
  EXPECT_EQ(v[2], 0);
  absl::StatusOr<Tensor> lg =
      OneNode("Log", 13).In(T1<double>({3}, {1, M_E, 0})).Run1();
  ASSERT_TRUE(lg.ok()) << lg.status();
  const std::vector<double> d = Values<double>(*lg);
  EXPECT_EQ(d[0], 0);
  EXPECT_NEAR(d[1], 1, 1e-15);
  EXPECT_EQ(d[2], -std::numeric_limits<double>::infinity());
}

TEST(OpsElementwiseTest, ExpOfIntsIsRefusedAtCreate) {
  absl::StatusOr<std::unique_ptr<Executor>> e =
      OneNode("Exp", 13).In(T1<int64_t>({1}, {1})).Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("INT64"));
  EXPECT_THAT(e.status().message(),
              HasSubstr("ONNX's Exp at opset 13 does not allow"));
}

// A type ONNX allows but the executor does not run stays UNIMPLEMENTED: the
// model is valid, the executor is what falls short.
TEST(OpsElementwiseTest, AValidTypeTheExecutorLacksIsUnimplemented) {
  absl::StatusOr<std::unique_ptr<Executor>> e =
      OneNode("Conv", 13)
          .In(T1<double>({1, 1, 1, 1}, {1}))
          .In(T1<double>({1, 1, 1, 1}, {1}))
          .Create();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(e.status().message(), HasSubstr("executor does not support"));
}

}  // namespace
}  // namespace quantd::executor
