// The quantized-model kernels (core/executor/ops_quant.cc) through the whole
// executor: hand-computed vectors for rounding, saturation and every
// parameter layout (per-tensor, per-axis, blocked, INT4 / UINT4, odd counts,
// negative zero points), opset differences, refusals by name, integer
// products against slow int64 oracles (including reductions too long for
// exact float sums), and an INT4 blocked DequantizeLinear model checked by
// ONNX Runtime.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/numerics/int4.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/support/ort.h"

namespace quantd::executor {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;
constexpr int32_t kInt4 = numerics::kOnnxInt4;
constexpr int32_t kUint4 = numerics::kOnnxUint4;

// A tensor of any held type from int values (INT4 / UINT4 held one a byte).
Tensor IntTensor(int32_t type, std::vector<int64_t> shape,
                 const std::vector<int32_t>& v) {
  Tensor t(static_cast<DataType>(type), std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) {
    switch (type) {
      case TP::INT8:
      case kInt4:
        t.mutable_data<int8_t>()[i] = static_cast<int8_t>(v[i]);
        break;
      case TP::UINT8:
      case kUint4:
        t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
        break;
      case TP::INT32:
        t.mutable_data<int32_t>()[i] = v[i];
        break;
    }
  }
  return t;
}

std::vector<int64_t> Ints(const Tensor& t) { return t.ToInt64Vector(); }
std::vector<float> FloatsOf(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.size());
}

// ---------------------------------------------------------------- tensors

TEST(Int4TensorTest, PackedRawDataRoundTripsWithOddCount) {
  const std::vector<int32_t> v = {-8, 7, 0, -1, 3};
  Tensor t = IntTensor(kInt4, {5}, v);
  TP p = t.ToProto("w");
  EXPECT_EQ(p.data_type(), kInt4);
  ASSERT_EQ(p.raw_data().size(), 3u);
  // Low nibble first: (-8, 7) -> 0x78, (0, -1) -> 0xF0, (3, pad) -> 0x03.
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[0]), 0x78);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[1]), 0xF0);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[2]), 0x03);
  absl::StatusOr<Tensor> back = Tensor::FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype(), kInt4);
  EXPECT_THAT(Ints(*back), ElementsAreArray({-8, 7, 0, -1, 3}));
}

TEST(Int4TensorTest, Int32DataHoldsOnePackedBytePerEntry) {
  TP p;
  p.set_name("u");
  p.set_data_type(kUint4);
  p.add_dims(3);
  p.add_int32_data(0xF1);  // 1, 15
  p.add_int32_data(0x09);  // 9
  absl::StatusOr<Tensor> t = Tensor::FromProto(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(DataTypeName(t->dtype()), "UINT4");
  EXPECT_THAT(Ints(*t), ElementsAreArray({1, 15, 9}));
  p.add_int32_data(0);  // One entry too many.
  EXPECT_EQ(Tensor::FromProto(p).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ----------------------------------------------------------- QuantizeLinear

TEST(QuantizeLinearTest, RoundsHalfToEvenAndSaturatesUint8) {
  OneNode n{"QuantizeLinear", 10};
  n.inputs = {
      Floats({8}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 300.0f, -300.0f, 2.4f}),
      Tensor::Scalar(1.0f), IntTensor(TP::UINT8, {}, {128})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::UINT8);
  EXPECT_THAT(Ints(*y),
              ElementsAreArray({128, 130, 130, 128, 126, 255, 0, 130}));
}

TEST(QuantizeLinearTest, NoZeroPointMeansUint8ZeroPointZero) {
  OneNode n{"QuantizeLinear", 13};
  n.inputs = {Floats({3}, {-1.0f, 1.0f, 3.0f}), Tensor::Scalar(0.5f)};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::UINT8);
  EXPECT_THAT(Ints(*y), ElementsAreArray({0, 2, 6}));
}

TEST(QuantizeLinearTest, PerAxisInt8WithNegativeAxis) {
  OneNode n{"QuantizeLinear", 13};
  n.Int("axis", -1);
  n.inputs = {Floats({2, 3}, {1.0f, 1.0f, 1.0f, -100.0f, 0.25f, 10.0f}),
              Floats({3}, {0.5f, 0.25f, 0.1f}),
              IntTensor(TP::INT8, {3}, {0, -3, 120})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::INT8);
  // 1/0.5=2; 1/0.25-3=1; 1/0.1+120=130->127; -200->-128; 1-3=-2; 100+120->127.
  EXPECT_THAT(Ints(*y), ElementsAreArray({2, 1, 127, -128, -2, 127}));
}

TEST(QuantizeLinearTest, Int4BlockedAlongAxis1WithOddCount) {
  OneNode n{"QuantizeLinear", 21};
  n.Int("axis", 1).Int("block_size", 2);
  // x [2, 5]: blocks {0,1} {2,3} {4} along axis 1 -> scale [2, 3].
  n.inputs = {Floats({2, 5}, {1.0f, -1.0f, 5.0f, 100.0f, 0.5f,  //
                              -2.0f, 2.0f, -3.0f, 3.0f, -100.0f}),
              Floats({2, 3}, {0.5f, 1.0f, 0.25f,  //
                              1.0f, 2.0f, 4.0f}),
              IntTensor(kInt4, {2, 3},
                        {-1, 3, -8,  //
                         0, 0, 7})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), kInt4);
  // Row 0: 2-1=1, -2-1=-3, 5+3=8->7, 100+3->7, 2-8=-6.
  // Row 1: -2, 2, -1.5->-2, 1.5->2, -25+7=-18->-8.
  EXPECT_THAT(Ints(*y), ElementsAreArray({1, -3, 7, 7, -6, -2, 2, -2, 2, -8}));
  // And it packs for the model: 10 values in 5 bytes.
  EXPECT_EQ(y->ToProto("y").raw_data().size(), 5u);
}

TEST(QuantizeLinearTest, Uint4BlockedAlongAxis0Saturates) {
  OneNode n{"QuantizeLinear", 21};
  n.Int("axis", 0).Int("block_size", 2);
  // x [3, 2]: blocks {0,1} {2} along axis 0 -> scale [2, 2].
  n.inputs = {Floats({3, 2}, {1.0f, 40.0f, -3.0f, 2.0f, 7.5f, 8.5f}),
              Floats({2, 2}, {1.0f, 2.0f, 1.0f, 1.0f}),
              IntTensor(kUint4, {2, 2}, {2, 0, 8, 15})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), kUint4);
  // 1+2=3, 20->15, -3+2=-1->0, 1, 8+8=16->15, 8+15->15 (8.5 -> 8, even).
  EXPECT_THAT(Ints(*y), ElementsAreArray({3, 15, 0, 1, 15, 15}));
}

TEST(QuantizeLinearTest, OutputDtypeAttributeOfOpset21) {
  OneNode n{"QuantizeLinear", 21};
  n.Int("output_dtype", kInt4);
  n.inputs = {Floats({3}, {-20.0f, 3.4f, 20.0f}), Tensor::Scalar(1.0f)};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), kInt4);
  EXPECT_THAT(Ints(*y), ElementsAreArray({-8, 3, 7}));

  OneNode clash{"QuantizeLinear", 21};
  clash.Int("output_dtype", TP::INT8);
  clash.inputs = {Floats({1}, {1.0f}), Tensor::Scalar(1.0f),
                  IntTensor(TP::UINT8, {}, {0})};
  EXPECT_EQ(clash.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantizeLinearTest, UnsupportedTypesAndAttributesAreRefusedByName) {
  // float8 output via output_dtype.
  OneNode f8{"QuantizeLinear", 21};
  f8.Int("output_dtype", 17);
  f8.inputs = {Floats({1}, {1.0f}), Tensor::Scalar(1.0f)};
  absl::Status s = f8.Run1().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("FLOAT8E4M3FN"));
  // INT16 output.
  OneNode i16{"QuantizeLinear", 21};
  i16.Int("output_dtype", TP::INT16);
  i16.inputs = f8.inputs;
  s = i16.Run1().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("INT16"));
  // block_size does not exist before opset 21, axis before 13.
  OneNode old{"QuantizeLinear", 19};
  old.Int("block_size", 2);
  old.inputs = f8.inputs;
  s = old.Run1().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("block_size"));
  OneNode v10{"QuantizeLinear", 10};
  v10.Int("axis", 0);
  v10.inputs = f8.inputs;
  s = v10.Run1().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("axis"));
  // saturate (opset 19) only concerns float8 and is accepted.
  OneNode sat{"QuantizeLinear", 19};
  sat.Int("saturate", 1);
  sat.inputs = f8.inputs;
  EXPECT_TRUE(sat.Run1().ok());
  // INT4 before opset 21 is an invalid model.
  OneNode early{"QuantizeLinear", 19};
  early.inputs = {Floats({1}, {1.0f}), Tensor::Scalar(1.0f),
                  IntTensor(kInt4, {}, {0})};
  s = early.Run1().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("INT4"));
}

TEST(QuantizeLinearTest, MismatchedScaleShapeIsInvalid) {
  OneNode n{"QuantizeLinear", 21};
  n.Int("axis", 1).Int("block_size", 2);
  n.inputs = {Floats({2, 5}, std::vector<float>(10, 1.0f)),
              Floats({2, 2}, {1, 1, 1, 1})};  // Needs [2, 3].
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode a{"QuantizeLinear", 13};
  a.inputs = {Floats({2, 5}, std::vector<float>(10, 1.0f)),
              Floats({4}, {1, 1, 1, 1})};  // axis 1 has 5.
  EXPECT_EQ(a.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantizeLinearTest, Int32InputDividesInDouble) {
  OneNode n{"QuantizeLinear", 13};
  n.inputs = {IntTensor(TP::INT32, {3}, {7, -7, 1000}), Tensor::Scalar(2.0f),
              IntTensor(TP::INT8, {}, {0})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Ints(*y), ElementsAreArray({4, -4, 127}));  // 3.5 -> 4 (even).
}

// --------------------------------------------------------- DequantizeLinear

TEST(DequantizeLinearTest, Int4PerAxisAndBlockedBothAxes) {
  const Tensor x = IntTensor(kInt4, {3, 2}, {-8, 7, 0, -1, 3, 5});
  // Per-axis on axis 0 with negative zero points.
  OneNode pa{"DequantizeLinear", 21};
  pa.Int("axis", 0);
  pa.inputs = {x, Floats({3}, {0.5f, 2.0f, 1.0f}),
               IntTensor(kInt4, {3}, {-2, 0, -8})};
  absl::StatusOr<Tensor> y = pa.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(FloatsOf(*y),
              ElementsAreArray({-3.0f, 4.5f, 0.0f, -2.0f, 11.0f, 13.0f}));
  // Blocked along axis 0, block 2 (rows {0,1} {2}).
  OneNode b0{"DequantizeLinear", 21};
  b0.Int("axis", 0).Int("block_size", 2);
  b0.inputs = {x, Floats({2, 2}, {1.0f, 0.5f, 2.0f, 4.0f}),
               IntTensor(kInt4, {2, 2}, {-1, 1, 3, -3})};
  y = b0.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(FloatsOf(*y),
              ElementsAreArray({-7.0f, 3.0f, 1.0f, -1.0f, 0.0f, 32.0f}));
  // Blocked along axis 1, block 1 (one scale per element) with UINT4.
  OneNode b1{"DequantizeLinear", 21};
  b1.Int("axis", 1).Int("block_size", 1);
  b1.inputs = {IntTensor(kUint4, {1, 3}, {0, 15, 8}),
               Floats({1, 3}, {1.0f, 0.5f, 0.25f}),
               IntTensor(kUint4, {1, 3}, {8, 8, 8})};
  y = b1.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(FloatsOf(*y), ElementsAreArray({-8.0f, 3.5f, 0.0f}));
}

TEST(DequantizeLinearTest, Int32InputAndConstantFoldingAgree) {
  for (bool constant : {false, true}) {
    OneNode n{"DequantizeLinear", 13};
    n.inputs = {IntTensor(TP::INT32, {3}, {-1000000, 0, 123456}),
                Tensor::Scalar(0.5f)};
    n.constant = {constant, constant};
    absl::StatusOr<Tensor> y = n.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_THAT(FloatsOf(*y), ElementsAreArray({-500000.0f, 0.0f, 61728.0f}));
  }
}

TEST(DequantizeLinearTest, Int4NeedsOpset21AndZeroPointTypeMustMatch) {
  OneNode n{"DequantizeLinear", 19};
  n.inputs = {IntTensor(kInt4, {1}, {1}), Tensor::Scalar(1.0f)};
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode m{"DequantizeLinear", 13};
  m.inputs = {IntTensor(TP::INT8, {1}, {1}), Tensor::Scalar(1.0f),
              IntTensor(TP::UINT8, {}, {1})};
  EXPECT_EQ(m.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------- DynamicQuantizeLinear

TEST(DynamicQuantizeLinearTest, OnnxExampleAndAllZeros) {
  OneNode n{"DynamicQuantizeLinear", 11};
  n.outputs = 3;
  n.inputs = {Floats({6}, {0.0f, 2.0f, -3.0f, -2.5f, 1.34f, 0.5f})};
  absl::StatusOr<std::vector<Tensor>> r = n.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // ONNX's documented expectation: scale 5/255, zero point 153.
  EXPECT_FLOAT_EQ((*r)[1].data<float>()[0], 5.0f / 255.0f);
  EXPECT_EQ((*r)[2].IntAt(0), 153);
  EXPECT_THAT(Ints((*r)[0]), ElementsAreArray({153, 255, 0, 26, 221, 179}));
  n.inputs = {Floats({2}, {0.0f, 0.0f})};
  r = n.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ((*r)[1].data<float>()[0], 1.0f / 255.0f);
  EXPECT_EQ((*r)[2].IntAt(0), 0);
  EXPECT_THAT(Ints((*r)[0]), ElementsAreArray({0, 0}));
}

// An infinite x leaves no finite scale: refused, not a zero point converted
// from NaN (found by the executor fuzzer under UBSan).
TEST(DynamicQuantizeLinearTest, InfiniteInputIsInvalidArgument) {
  const float inf = std::numeric_limits<float>::infinity();
  OneNode n{"DynamicQuantizeLinear", 11};
  n.outputs = 3;
  for (const std::vector<float>& x :
       {std::vector<float>{1.0f, -inf}, std::vector<float>{inf, 1.0f},
        std::vector<float>{-inf, inf},
        std::vector<float>{-3e38f, 3e38f}}) {
    n.inputs = {Floats({2}, x)};
    absl::StatusOr<std::vector<Tensor>> r = n.Run();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << x[0] << ", " << x[1];
  }
}

// ------------------------------------------------------ integer products

Tensor RandomBytes(int32_t type, std::vector<int64_t> shape, std::mt19937* rng,
                   int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(NumElements(shape));
  for (auto& x : v) x = d(*rng);
  return IntTensor(type, std::move(shape), v);
}

// Slow oracle: (a - azp[row]) x (b - bzp[col]) in int64, 2-D.
std::vector<int64_t> RefIntMatMul(const Tensor& a, const Tensor& b,
                                  const std::vector<int64_t>& azp,
                                  const std::vector<int64_t>& bzp) {
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  std::vector<int64_t> c(m * n, 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t t = 0; t < k; ++t) {
        s += (a.IntAt(i * k + t) - azp[azp.size() == 1 ? 0 : i]) *
             (b.IntAt(t * n + j) - bzp[bzp.size() == 1 ? 0 : j]);
      }
      c[i * n + j] = s;
    }
  }
  return c;
}

TEST(MatMulIntegerTest, ExactOnLongReductionsWithPerRowAndColumnZeroPoints) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  // K = 3000 with full-range values: sums reach ~1.9e8, far past 2^24.
  for (bool constant_b : {false, true}) {
    const Tensor a = RandomBytes(TP::UINT8, {5, 3000}, &rng, 0, 255);
    const Tensor b = RandomBytes(TP::INT8, {3000, 7}, &rng, -128, 127);
    const Tensor azp = RandomBytes(TP::UINT8, {5}, &rng, 0, 255);
    const Tensor bzp = RandomBytes(TP::INT8, {7}, &rng, -128, 127);
    OneNode n{"MatMulInteger", 13};
    n.inputs = {a, b, azp, bzp};
    n.constant = {false, constant_b, false, constant_b};
    absl::StatusOr<Tensor> y = n.Run1(&pool);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->dtype(), TP::INT32);
    EXPECT_THAT(Ints(*y),
                ElementsAreArray(RefIntMatMul(a, b, Ints(azp), Ints(bzp))));
  }
}

TEST(MatMulIntegerTest, BatchedBroadcastAndRankOneOperands) {
  std::mt19937 rng(8);
  // A [2, 3, 4] x B [4, 5] (folded batch) and A [3, 4] x B [2, 4, 5].
  const Tensor a3 = RandomBytes(TP::INT8, {2, 3, 4}, &rng, -128, 127);
  const Tensor b2 = RandomBytes(TP::UINT8, {4, 5}, &rng, 0, 255);
  OneNode n{"MatMulInteger", 10};
  n.inputs = {a3, b2, IntTensor(TP::INT8, {}, {-3}),
              IntTensor(TP::UINT8, {}, {200})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{2, 3, 5}));
  for (int bi = 0; bi < 2; ++bi) {
    std::vector<int32_t> slice(12);
    for (int i = 0; i < 12; ++i) slice[i] = a3.IntAt(bi * 12 + i);
    const auto want =
        RefIntMatMul(IntTensor(TP::INT8, {3, 4}, slice), b2, {-3}, {200});
    for (int i = 0; i < 15; ++i) EXPECT_EQ(y->IntAt(bi * 15 + i), want[i]);
  }
  // Rank-1 A: [4] x [4, 5] -> [5].
  OneNode v{"MatMulInteger", 10};
  v.inputs = {IntTensor(TP::UINT8, {4}, {1, 2, 3, 4}), b2};
  y = v.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{5}));
  EXPECT_THAT(Ints(*y),
              ElementsAreArray(RefIntMatMul(
                  IntTensor(TP::UINT8, {1, 4}, {1, 2, 3, 4}), b2, {0}, {0})));
}

TEST(MatMulIntegerTest, OperandEqualToItsZeroPointGivesZeros) {
  // max |a - a_zp| = 0: the exact-slice length is unbounded.
  OneNode n("MatMulInteger", 10);
  n.inputs = {IntTensor(TP::UINT8, {2, 3}, {9, 9, 9, 9, 9, 9}),
              IntTensor(TP::UINT8, {3, 1}, {1, 200, 3}),
              IntTensor(TP::UINT8, {}, {9})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Ints(*y), ElementsAreArray({0, 0}));
}

struct RefConvShape {
  int64_t n, c, h, w, m, group, kh, kw, stride, pad;
};

// Slow oracle: int64 NCHW convolution of (x - xzp) and (w - wzp[m]).
std::vector<int64_t> RefIntConv(const RefConvShape& s, const Tensor& x,
                                int64_t xzp, const Tensor& w,
                                const std::vector<int64_t>& wzp, int64_t* oh,
                                int64_t* ow) {
  *oh = (s.h + 2 * s.pad - s.kh) / s.stride + 1;
  *ow = (s.w + 2 * s.pad - s.kw) / s.stride + 1;
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  std::vector<int64_t> y(s.n * s.m * *oh * *ow);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t i = 0; i < *oh; ++i)
        for (int64_t j = 0; j < *ow; ++j) {
          int64_t acc = 0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t ki = 0; ki < s.kh; ++ki)
              for (int64_t kj = 0; kj < s.kw; ++kj) {
                const int64_t ih = i * s.stride - s.pad + ki;
                const int64_t iw = j * s.stride - s.pad + kj;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const int64_t g = m / mg;
                acc +=
                    (x.IntAt(((n * s.c + g * cg + c) * s.h + ih) * s.w + iw) -
                     xzp) *
                    (w.IntAt(((m * cg + c) * s.kh + ki) * s.kw + kj) -
                     wzp[wzp.size() == 1 ? 0 : m]);
              }
          y[((n * s.m + m) * *oh + i) * *ow + j] = acc;
        }
  return y;
}

OneNode ConvNode(const std::string& op, const RefConvShape& s) {
  OneNode n{op, 13};
  n.IntList("kernel_shape", {s.kh, s.kw})
      .IntList("strides", {s.stride, s.stride})
      .IntList("pads", {s.pad, s.pad, s.pad, s.pad})
      .Int("group", s.group);
  return n;
}

TEST(ConvIntegerTest, ExactWithChannelSlicesGroupsAndPerChannelZeroPoints) {
  std::mt19937 rng(9);
  ThreadPool pool(2);
  // C/group * 9 = 576 and 288 with full-range operands: sliced reductions.
  for (const RefConvShape& s : {RefConvShape{2, 64, 6, 5, 8, 1, 3, 3, 1, 1},
                                RefConvShape{1, 64, 7, 7, 6, 2, 3, 3, 2, 1},
                                RefConvShape{1, 3, 5, 5, 4, 1, 1, 1, 1, 0}}) {
    for (bool constant_w : {false, true}) {
      const Tensor x =
          RandomBytes(TP::UINT8, {s.n, s.c, s.h, s.w}, &rng, 0, 255);
      const Tensor w = RandomBytes(TP::INT8, {s.m, s.c / s.group, s.kh, s.kw},
                                   &rng, -128, 127);
      const Tensor wzp = RandomBytes(TP::INT8, {s.m}, &rng, -128, 127);
      OneNode n = ConvNode("ConvInteger", s);
      n.inputs = {x, w, IntTensor(TP::UINT8, {}, {37}), wzp};
      n.constant = {false, constant_w, false, constant_w};
      absl::StatusOr<Tensor> y = n.Run1(&pool);
      ASSERT_TRUE(y.ok()) << y.status();
      int64_t oh, ow;
      const auto want = RefIntConv(s, x, 37, w, Ints(wzp), &oh, &ow);
      ASSERT_EQ(y->shape(), (std::vector<int64_t>{s.n, s.m, oh, ow}));
      EXPECT_THAT(Ints(*y), ElementsAreArray(want)) << "C=" << s.c;
    }
  }
}

// The requantization rule: round half to even of acc * (sx * sw / sy), + zp.
int64_t RefRequant(int64_t acc, float mult, int64_t zp, int64_t lo,
                   int64_t hi) {
  const float v =
      std::nearbyint(static_cast<float>(acc) * mult) + static_cast<float>(zp);
  return std::clamp<int64_t>(static_cast<int64_t>(v), lo, hi);
}

TEST(QLinearConvTest, MatchesIntegerOracleWithBiasAndPerChannelScales) {
  std::mt19937 rng(10);
  ThreadPool pool(2);
  const RefConvShape s{1, 32, 6, 6, 4, 1, 3, 3, 1, 1};
  const Tensor x = RandomBytes(TP::UINT8, {1, 32, 6, 6}, &rng, 0, 255);
  const Tensor w = RandomBytes(TP::INT8, {4, 32, 3, 3}, &rng, -127, 127);
  const std::vector<float> ws = {0.001f, 0.002f, 0.0005f, 0.003f};
  const std::vector<int32_t> bias = {1000, -2000, 0, 123456};
  OneNode n = ConvNode("QLinearConv", s);
  n.inputs = {x,
              Tensor::Scalar(0.02f),
              IntTensor(TP::UINT8, {}, {10}),
              w,
              Floats({4}, ws),
              IntTensor(TP::INT8, {4}, {0, 0, 0, 0}),
              Tensor::Scalar(0.5f),
              IntTensor(TP::INT8, {}, {-5}),
              IntTensor(TP::INT32, {4}, bias)};
  n.constant = {false, true, true, true, true, true, true, true, true};
  absl::StatusOr<Tensor> y = n.Run1(&pool);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::INT8);
  int64_t oh, ow;
  const auto acc = RefIntConv(s, x, 10, w, {0}, &oh, &ow);
  const int64_t plane = oh * ow;
  for (int64_t i = 0; i < y->size(); ++i) {
    const int64_t m = i / plane;
    const float mult = 0.02f * ws[m] / 0.5f;
    ASSERT_EQ(y->IntAt(i), RefRequant(acc[i] + bias[m], mult, -5, -128, 127))
        << "at " << i;
  }
}

TEST(QLinearMatMulTest, PerColumnScalesMatchOracle) {
  std::mt19937 rng(11);
  const Tensor a = RandomBytes(TP::UINT8, {3, 600}, &rng, 0, 255);
  const Tensor b = RandomBytes(TP::INT8, {600, 4}, &rng, -128, 127);
  const std::vector<float> bs = {0.01f, 0.02f, 0.005f, 0.001f};
  OneNode n{"QLinearMatMul", 10};
  n.inputs = {a,
              Tensor::Scalar(0.05f),
              IntTensor(TP::UINT8, {}, {128}),
              b,
              Floats({4}, bs),
              IntTensor(TP::INT8, {4}, {0, 1, -1, 5}),
              Tensor::Scalar(20.0f),
              IntTensor(TP::UINT8, {}, {100})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), TP::UINT8);
  const auto acc = RefIntMatMul(a, b, {128}, {0, 1, -1, 5});
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(y->IntAt(i),
              RefRequant(acc[i], 0.05f * bs[i % 4] / 20.0f, 100, 0, 255));
  }
}

TEST(QLinearMatMulTest, BatchedZeroPointShapesAreRefusedByName) {
  OneNode n{"QLinearMatMul", 10};
  n.inputs = {IntTensor(TP::UINT8, {2, 2}, {1, 2, 3, 4}),
              Tensor::Scalar(1.0f),
              IntTensor(TP::UINT8, {2, 1}, {0, 0}),
              IntTensor(TP::UINT8, {2, 2}, {1, 2, 3, 4}),
              Tensor::Scalar(1.0f),
              IntTensor(TP::UINT8, {}, {0}),
              Tensor::Scalar(1.0f),
              IntTensor(TP::UINT8, {}, {0})};
  absl::Status s = n.Run1().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("a_zero_point"));
}

// Milliseconds per Run of a model (after one warm-up run).
// ------------------------------------------------------ ONNX Runtime check

TEST(OrtCrossCheckTest, Int4BlockedDequantizeLinearMatchesOnnxRuntime) {
  // Y = DequantizeLinear(W, scale, zp) + X with X = 0: ORT's `run` mode
  // feeds the first input from .npy and writes the first output.
  std::mt19937 rng(13);
  const std::string dir = ::testing::TempDir();
  for (int axis : {0, 1}) {
    for (int32_t type : {kInt4, kUint4}) {
      const std::vector<int64_t> shape = {6, 5};
      const Tensor w = RandomBytes(type, shape, &rng, type == kInt4 ? -8 : 0,
                                   type == kInt4 ? 7 : 15);
      std::vector<int64_t> sshape = shape;
      sshape[axis] = (shape[axis] + 1) / 2;  // block_size 2, odd dim on 1.
      std::vector<float> sv(NumElements(sshape));
      std::uniform_real_distribution<float> ud(0.01f, 2.0f);
      for (float& v : sv) v = ud(rng);
      const Tensor zp = RandomBytes(type, sshape, &rng, type == kInt4 ? -8 : 0,
                                    type == kInt4 ? 7 : 15);
      onnx::ModelProto m;
      m.set_ir_version(numerics::kInt4MinIrVersion);
      m.add_opset_import()->set_version(21);
      onnx::GraphProto* g = m.mutable_graph();
      g->set_name("int4_dq");
      *g->add_initializer() = w.ToProto("w");
      *g->add_initializer() = Floats(sshape, sv).ToProto("scale");
      *g->add_initializer() = zp.ToProto("zp");
      onnx::NodeProto* dq = g->add_node();
      dq->set_op_type("DequantizeLinear");
      dq->set_name("dq");
      dq->add_input("w");
      dq->add_input("scale");
      dq->add_input("zp");
      dq->add_output("wf");
      auto* a = dq->add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(axis);
      a = dq->add_attribute();
      a->set_name("block_size");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(2);
      onnx::NodeProto* add = g->add_node();
      add->set_op_type("Add");
      add->set_name("add");
      add->add_input("wf");
      add->add_input("x");
      add->add_output("y");
      for (const char* name : {"x", "y"}) {
        onnx::ValueInfoProto* vi =
            std::string(name) == "x" ? g->add_input() : g->add_output();
        vi->set_name(name);
        auto* tt = vi->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(TP::FLOAT);
        for (int64_t d : shape)
          tt->mutable_shape()->add_dim()->set_dim_value(d);
      }
      const std::string tag = absl::StrCat(DataTypeName(type), "_axis", axis);
      const std::string model_path = dir + "/int4_dq_" + tag + ".onnx";
      const std::string x_path = dir + "/int4_dq_x.npy";
      const std::string out_path = dir + "/int4_dq_out_" + tag + ".npy";
      {
        std::ofstream f(model_path, std::ios::binary);
        f << m.SerializeAsString();
      }
      const Tensor x = Floats(shape, std::vector<float>(30, 0.0f));
      ASSERT_TRUE(WriteNpyFile(x_path, x).ok());

      absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(m);
      ASSERT_TRUE(e.ok()) << e.status();
      absl::StatusOr<std::vector<Tensor>> ours = (*e)->Run({{"x", x}});
      ASSERT_TRUE(ours.ok()) << ours.status();

      const std::string json = testing::OrtEval(
          {"run", "--model", model_path, "--x", x_path, "--out", out_path});
      absl::StatusOr<Tensor> theirs = ReadNpyFile(out_path);
      ASSERT_TRUE(theirs.ok()) << theirs.status() << " " << json;
      ASSERT_EQ(theirs->shape(), shape);
      EXPECT_THAT(FloatsOf((*ours)[0]), ElementsAreArray(FloatsOf(*theirs)))
          << tag;
      // And our values are the hand formula (x - zp) * scale.
      for (int64_t i = 0; i < 30; ++i) {
        const int64_t r = i / 5, c = i % 5;
        const int64_t pi = axis == 0 ? (r / 2) * 5 + c : r * 3 + c / 2;
        EXPECT_EQ((*ours)[0].data<float>()[i],
                  static_cast<float>(w.IntAt(i) - zp.IntAt(pi)) * sv[pi]);
      }
    }
  }
}

// A node of a hand-built graph.
void AddNode(onnx::GraphProto* g, const std::string& op,
             const std::vector<std::string>& in, const std::string& out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(out);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
}

void AddFloatValue(onnx::ValueInfoProto* vi, const std::string& name,
                   const std::vector<int64_t>& shape) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TP::FLOAT);
  for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

// Runs `m` (one float input "x", first output compared) in the executor and
// in ONNX Runtime; returns how many elements differ and the largest
// difference.
void CompareWithOrt(const onnx::ModelProto& m, const std::string& tag,
                    const Tensor& x, int64_t* mismatches, double* max_diff) {
  const std::string dir = ::testing::TempDir();
  const std::string model_path = dir + "/" + tag + ".onnx";
  const std::string x_path = dir + "/" + tag + "_x.npy";
  const std::string out_path = dir + "/" + tag + "_out.npy";
  {
    std::ofstream f(model_path, std::ios::binary);
    f << m.SerializeAsString();
  }
  ASSERT_TRUE(WriteNpyFile(x_path, x).ok());
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(m);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<std::vector<Tensor>> ours = (*e)->Run({{"x", x}});
  ASSERT_TRUE(ours.ok()) << ours.status();
  testing::OrtEval(
      {"run", "--model", model_path, "--x", x_path, "--out", out_path});
  absl::StatusOr<Tensor> theirs = ReadNpyFile(out_path);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(theirs->shape(), (*ours)[0].shape());
  *mismatches = 0;
  *max_diff = 0;
  for (int64_t i = 0; i < theirs->size(); ++i) {
    const double d = std::abs(double((*ours)[0].data<float>()[i]) -
                              theirs->data<float>()[i]);
    if (d != 0) ++*mismatches;
    *max_diff = std::max(*max_diff, d);
  }
}

TEST(OrtCrossCheckTest, QLinearConvAndMatMulIntegerModelsMatchOnnxRuntime) {
  std::mt19937 rng(14);
  std::normal_distribution<float> nd;
  // x -> QuantizeLinear (uint8) -> QLinearConv (int8 per-channel weights,
  // int32 bias) -> DequantizeLinear.
  {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    onnx::GraphProto* g = m.mutable_graph();
    g->set_name("qlinearconv");
    const std::vector<int64_t> xs = {2, 8, 10, 10};
    AddFloatValue(g->add_input(), "x", xs);
    AddFloatValue(g->add_output(), "y", {2, 16, 10, 10});
    std::vector<float> ws(16);
    std::vector<int32_t> bias(16);
    for (int i = 0; i < 16; ++i) {
      ws[i] = 0.002f + 0.001f * i;
      bias[i] = i * 37 - 300;
    }
    *g->add_initializer() = Tensor::Scalar(0.03f).ToProto("xs");
    *g->add_initializer() = IntTensor(TP::UINT8, {}, {100}).ToProto("xz");
    *g->add_initializer() =
        RandomBytes(TP::INT8, {16, 8, 3, 3}, &rng, -127, 127).ToProto("w");
    *g->add_initializer() = Floats({16}, ws).ToProto("ws");
    *g->add_initializer() =
        IntTensor(TP::INT8, {16}, std::vector<int32_t>(16, 0)).ToProto("wz");
    *g->add_initializer() = Tensor::Scalar(0.05f).ToProto("ys");
    *g->add_initializer() = IntTensor(TP::UINT8, {}, {128}).ToProto("yz");
    *g->add_initializer() = IntTensor(TP::INT32, {16}, bias).ToProto("b");
    AddNode(g, "QuantizeLinear", {"x", "xs", "xz"}, "xq");
    AddNode(g, "QLinearConv",
            {"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, "yq");
    auto* pads = g->mutable_node(1)->add_attribute();
    pads->set_name("pads");
    pads->set_type(onnx::AttributeProto::INTS);
    for (int i = 0; i < 4; ++i) pads->add_ints(1);
    AddNode(g, "DequantizeLinear", {"yq", "ys", "yz"}, "y");
    std::vector<float> xv(NumElements(xs));
    for (float& v : xv) v = 2.0f * nd(rng);
    int64_t mismatches;
    double max_diff;
    CompareWithOrt(m, "qlinearconv", Floats(xs, xv), &mismatches, &max_diff);
    std::cout << "measured: QLinearConv model vs ONNX Runtime: " << mismatches
              << " of 3200 outputs differ, max |diff| " << max_diff
              << " (1 LSB = 0.05)" << std::endl;
    // Integer sums are exact on both sides; only a rounding tie of the
    // float requantization may land one step apart.
    EXPECT_LE(max_diff, 0.05 + 1e-6);
    EXPECT_LE(mismatches, 3200 / 100);
  }
  // x -> DynamicQuantizeLinear -> MatMulInteger (int8 weights, per-column
  // zero points are not in ORT's CPU kernel: per-tensor) -> Cast -> Mul.
  {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    onnx::GraphProto* g = m.mutable_graph();
    g->set_name("matmulinteger");
    AddFloatValue(g->add_input(), "x", {4, 700});
    AddFloatValue(g->add_output(), "y", {4, 9});
    *g->add_initializer() =
        RandomBytes(TP::INT8, {700, 9}, &rng, -128, 127).ToProto("w");
    *g->add_initializer() = IntTensor(TP::INT8, {}, {3}).ToProto("wz");
    AddNode(g, "DynamicQuantizeLinear", {"x"}, "xq");
    g->mutable_node(0)->add_output("xs");
    g->mutable_node(0)->add_output("xz");
    AddNode(g, "MatMulInteger", {"xq", "w", "xz", "wz"}, "acc");
    AddNode(g, "Cast", {"acc"}, "y");
    auto* to = g->mutable_node(2)->add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(TP::FLOAT);
    std::vector<float> xv(4 * 700);
    for (float& v : xv) v = nd(rng);
    int64_t mismatches;
    double max_diff;
    CompareWithOrt(m, "matmulinteger", Floats({4, 700}, xv), &mismatches,
                   &max_diff);
    EXPECT_EQ(mismatches, 0) << "max |diff| " << max_diff;
  }
}

}  // namespace
}  // namespace quantd::executor
