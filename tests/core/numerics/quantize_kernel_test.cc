// Tests of core/numerics/quantize_kernel: the fused quantizer against its
// reference (QuantizeTensor / QuantizeTensorBlocked + DequantizeTensor +
// MeasureError) on many shapes, layouts, grids and data, bit for bit for
// values, params and statuses, to a tight tolerance for the error stats.
#include "core/numerics/quantize_kernel.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/thread_pool.h"
#include "gtest/gtest.h"

namespace quantd::numerics {
namespace {

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

std::vector<QuantSpec> AllSpecs() {
  std::vector<QuantSpec> specs;
  for (int bits : {2, 4, 8}) {
    for (bool is_signed : {true, false}) {
      for (bool symmetric : {true, false}) {
        for (bool narrow : {true, false}) {
          specs.push_back(Spec(bits, is_signed, symmetric, narrow));
        }
      }
    }
  }
  return specs;
}

std::string SpecString(const QuantSpec& s) {
  return absl::StrCat("bits=", s.bits, " signed=", s.is_signed,
                      " symmetric=", s.symmetric, " narrow=", s.narrow_range);
}

int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// How the values of a test tensor are made.
enum class Data {
  kNormal,        // N(0, 1)
  kZeros,         // all 0
  kConstantRows,  // value depends on the channel index only
  kNegative,      // -|N(0, 1)|
  kPositive,      // |N(0, 1)| + 3 (range not touching zero)
  kHuge,          // N(0, 1) * 1e36
  kTiny,          // N(0, 1) * 1e-41 (subnormal)
  kTies,          // multiples of 0.5 in [-127, 127] (ties when scale 1)
  kMixedScales,   // each element N(0, 1) * 10^U(-20, 20)
};

std::string DataName(Data d) {
  switch (d) {
    case Data::kNormal:
      return "normal";
    case Data::kZeros:
      return "zeros";
    case Data::kConstantRows:
      return "constant-rows";
    case Data::kNegative:
      return "negative";
    case Data::kPositive:
      return "positive";
    case Data::kHuge:
      return "huge";
    case Data::kTiny:
      return "tiny";
    case Data::kTies:
      return "ties";
    case Data::kMixedScales:
      return "mixed-scales";
  }
  return "?";
}

std::vector<float> MakeData(Data kind, const std::vector<int64_t>& shape,
                            uint32_t seed) {
  const int64_t n = Count(shape);
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> exponent(-20.0f, 20.0f);
  std::uniform_int_distribution<int> half_steps(-254, 254);
  const int64_t row = shape.empty() ? 1 : shape.back();
  for (int64_t i = 0; i < n; ++i) {
    switch (kind) {
      case Data::kNormal:
        v[i] = normal(rng);
        break;
      case Data::kZeros:
        v[i] = 0.0f;
        break;
      case Data::kConstantRows:
        v[i] = 0.25f * static_cast<float>(i / row % 7) - 0.75f;
        break;
      case Data::kNegative:
        v[i] = -std::fabs(normal(rng));
        break;
      case Data::kPositive:
        v[i] = std::fabs(normal(rng)) + 3.0f;
        break;
      case Data::kHuge:
        v[i] = normal(rng) * 1e36f;
        break;
      case Data::kTiny:
        v[i] = normal(rng) * 1e-41f;
        break;
      case Data::kTies:
        v[i] = 0.5f * static_cast<float>(half_steps(rng));
        break;
      case Data::kMixedScales:
        v[i] = normal(rng) * std::pow(10.0f, exponent(rng));
        break;
    }
  }
  // Ties need scale 1: put the grid's edge in every channel.
  if (kind == Data::kTies && n > 0) v[0] = 127.0f;
  return v;
}

// Compares QuantizeAndMeasure with its reference on one case, and says
// where they first differ.
class QuantizeKernelTester {
 public:
  QuantizeKernelTester& shape(std::vector<int64_t> shape) {
    shape_ = std::move(shape);
    return *this;
  }
  QuantizeKernelTester& per_tensor() {
    per_channel_ = false;
    block_size_ = 0;
    axis_ = -1;
    return *this;
  }
  QuantizeKernelTester& per_channel(int axis) {
    per_channel_ = true;
    block_size_ = 0;
    axis_ = axis;
    return *this;
  }
  QuantizeKernelTester& blocked(int axis, int64_t block_size) {
    per_channel_ = false;
    block_size_ = block_size;
    axis_ = axis;
    return *this;
  }
  QuantizeKernelTester& spec(const QuantSpec& spec) {
    spec_ = spec;
    return *this;
  }
  QuantizeKernelTester& data(std::vector<float> data) {
    data_ = std::move(data);
    return *this;
  }
  QuantizeKernelTester& parallel_for(ParallelFor p) {
    parallel_for_ = std::move(p);
    return *this;
  }
  // Reads the values from an odd address, as raw_data may be.
  QuantizeKernelTester& unaligned(bool u) {
    unaligned_ = u;
    return *this;
  }

  std::string Where() const {
    return absl::StrCat(
        "shape [", absl::StrJoin(shape_, ","), "] ",
        block_size_ > 0
            ? absl::StrCat("blocked axis ", axis_, " block ", block_size_)
        : per_channel_ ? absl::StrCat("per-channel axis ", axis_)
                       : "per-tensor",
        " ", SpecString(spec_));
  }

  absl::StatusOr<QuantizedWithError> Run() const {
    std::string bytes(data_.size() * sizeof(float) + 1, '\0');
    char* at = bytes.data() + (unaligned_ ? 1 : 0);
    if (!data_.empty()) {
      std::memcpy(at, data_.data(), data_.size() * sizeof(float));
    }
    return QuantizeAndMeasure(
        FloatBytes{at, static_cast<int64_t>(data_.size())}, shape_,
        per_channel_, axis_, block_size_, spec_, parallel_for_);
  }

  absl::StatusOr<QuantizedTensor> Reference() const {
    return block_size_ > 0
               ? QuantizeTensorBlocked(data_, shape_, axis_, block_size_, spec_)
               : QuantizeTensor(data_, shape_, per_channel_, axis_, spec_);
  }

  void Test() const {
    const std::string where = Where();
    const absl::StatusOr<QuantizedTensor> want = Reference();
    const absl::StatusOr<QuantizedWithError> got = Run();
    ASSERT_EQ(got.status(), want.status()) << where;
    if (!want.ok()) return;
    const QuantizedTensor& q = got->q;
    EXPECT_EQ(q.axis, want->axis) << where;
    EXPECT_EQ(q.block_size, want->block_size) << where;
    EXPECT_EQ(q.spec.bits, want->spec.bits) << where;
    ASSERT_EQ(q.params.size(), want->params.size()) << where;
    for (size_t i = 0; i < q.params.size(); ++i) {
      // Bit for bit: 0.0f == -0.0f would hide a difference.
      ASSERT_EQ(Bits(q.params[i].scale), Bits(want->params[i].scale))
          << where << ": scale " << i << " is " << q.params[i].scale
          << ", want " << want->params[i].scale;
      ASSERT_EQ(q.params[i].zero_point, want->params[i].zero_point)
          << where << ": zero point " << i;
    }
    ASSERT_EQ(q.values.size(), want->values.size()) << where;
    for (size_t i = 0; i < q.values.size(); ++i) {
      ASSERT_EQ(static_cast<int>(static_cast<uint8_t>(q.values[i])),
                static_cast<int>(static_cast<uint8_t>(want->values[i])))
          << where << ": value " << i << " (x = " << data_[i] << ")";
    }
    const ErrorStats ref = MeasureError(data_, DequantizeTensor(*want, shape_));
    ExpectClose(got->error.mse, ref.mse, where + " mse");
    ExpectClose(got->error.sqnr_db, ref.sqnr_db, where + " sqnr_db");
  }

 private:
  static uint32_t Bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, sizeof(b));
    return b;
  }

  // The same per-value terms summed in another order: equal to about the
  // double rounding of the sum.
  static void ExpectClose(double got, double want, const std::string& what) {
    if (std::isinf(want) || std::isnan(want)) {
      EXPECT_EQ(std::isinf(got), std::isinf(want)) << what;
      EXPECT_EQ(std::isnan(got), std::isnan(want)) << what;
      if (std::isinf(want)) {
        EXPECT_EQ(got > 0, want > 0) << what;
      }
      return;
    }
    EXPECT_NEAR(got, want, 1e-12 * std::fabs(want) + 1e-300)
        << what << ": got " << got << ", want " << want;
  }

  std::vector<int64_t> shape_;
  bool per_channel_ = false;
  int axis_ = -1;
  int64_t block_size_ = 0;
  QuantSpec spec_;
  std::vector<float> data_;
  ParallelFor parallel_for_;
  bool unaligned_ = true;
};

// Shapes whose lengths are not multiples of the vector width, and ones
// whose rows span several tasks and tiles.
const std::vector<std::vector<int64_t>>& SmallShapes() {
  static const auto* shapes = new std::vector<std::vector<int64_t>>{
      {1},     {7},     {8},        {9},        {1, 1},
      {5, 13}, {13, 5}, {2, 3, 17}, {3, 1, 33}, {16, 16}};
  return *shapes;
}

// Every layout a weight can have on a rank-r shape.
std::vector<std::function<void(QuantizeKernelTester&)>> Layouts(int rank) {
  std::vector<std::function<void(QuantizeKernelTester&)>> out;
  out.push_back([](QuantizeKernelTester& t) { t.per_tensor(); });
  for (int axis = 0; axis < rank; ++axis) {
    out.push_back([axis](QuantizeKernelTester& t) { t.per_channel(axis); });
    for (int64_t block : {1, 3, 8, 32}) {
      out.push_back(
          [axis, block](QuantizeKernelTester& t) { t.blocked(axis, block); });
    }
  }
  out.push_back([rank](QuantizeKernelTester& t) { t.per_channel(-rank); });
  return out;
}

TEST(QuantizeKernelTest, MatchesReferenceOnSmallShapes) {
  uint32_t seed = 1;
  for (const auto& shape : SmallShapes()) {
    for (const auto& layout : Layouts(static_cast<int>(shape.size()))) {
      for (const QuantSpec& spec : AllSpecs()) {
        for (Data d : {Data::kNormal, Data::kZeros, Data::kConstantRows,
                       Data::kNegative, Data::kPositive, Data::kHuge,
                       Data::kTiny, Data::kTies, Data::kMixedScales}) {
          QuantizeKernelTester t;
          t.shape(shape).spec(spec).data(MakeData(d, shape, ++seed));
          layout(t);
          SCOPED_TRACE(DataName(d));
          t.Test();
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// Rows long enough for several tasks and column tiles, odd lengths, one
// and several threads.
TEST(QuantizeKernelTest, MatchesReferenceOnLargeShapes) {
  ThreadPool pool(2);
  const ParallelFor threads = [&pool](int64_t n,
                                      const std::function<void(int64_t)>& f) {
    pool.ParallelFor(n, f);
  };
  uint32_t seed = 100;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {70001}, {3, 70001}, {300, 1001}, {1001, 300}, {2, 129, 517}}) {
    for (const auto& layout : Layouts(static_cast<int>(shape.size()))) {
      for (const QuantSpec& spec :
           {Spec(8, true, true, true), Spec(4, true, true, true),
            Spec(8, false, false, false), Spec(4, true, false, true)}) {
        for (const ParallelFor& p : {ParallelFor(), threads}) {
          QuantizeKernelTester t;
          t.shape(shape)
              .spec(spec)
              .data(MakeData(Data::kMixedScales, shape, ++seed))
              .parallel_for(p);
          layout(t);
          t.Test();
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The error stats do not depend on the number of threads (the sums are
// added in one order).
TEST(QuantizeKernelTest, ErrorStatsDoNotDependOnThreads) {
  ThreadPool pool(3);
  const ParallelFor threads = [&pool](int64_t n,
                                      const std::function<void(int64_t)>& f) {
    pool.ParallelFor(n, f);
  };
  const std::vector<int64_t> shape = {513, 1031};
  QuantizeKernelTester t;
  t.shape(shape)
      .spec(Spec(8, true, true, true))
      .data(MakeData(Data::kNormal, shape, 7));
  for (const auto& layout : Layouts(2)) {
    layout(t);
    const auto serial = t.parallel_for(nullptr).Run();
    const auto parallel = t.parallel_for(threads).Run();
    ASSERT_TRUE(serial.ok() && parallel.ok()) << t.Where();
    EXPECT_EQ(serial->error.mse, parallel->error.mse) << t.Where();
    EXPECT_EQ(serial->error.sqnr_db, parallel->error.sqnr_db) << t.Where();
    EXPECT_EQ(serial->q.values, parallel->q.values) << t.Where();
  }
}

// Round half to even, as nearbyintf: x / scale = k + 0.5 exactly.
TEST(QuantizeKernelTest, TiesRoundToEven) {
  const std::vector<float> data = {127.0f, 0.5f,  1.5f,   2.5f,   -0.5f,
                                   -1.5f,  -2.5f, 126.5f, -126.5f};
  QuantizeKernelTester t;
  t.shape({9}).per_tensor().spec(Spec(8, true, true, true)).data(data);
  const auto got = t.Run();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->q.params[0].scale, 1.0f);
  std::vector<int> q;
  for (char b : got->q.values) q.push_back(static_cast<int8_t>(b));
  EXPECT_EQ(q, (std::vector<int>{127, 0, 2, 2, 0, -2, -2, 126, -126}));
  t.Test();
}

TEST(QuantizeKernelTest, EmptyTensors) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{0}, {3, 0}, {0, 5}, {2, 0, 3}}) {
    for (const auto& layout : Layouts(static_cast<int>(shape.size()))) {
      QuantizeKernelTester t;
      t.shape(shape).spec(Spec(8, true, true, true)).data({});
      layout(t);
      t.Test();
      const auto got = t.Run();
      ASSERT_TRUE(got.ok()) << t.Where();
      EXPECT_EQ(got->error.mse, 0.0) << t.Where();
      EXPECT_TRUE(std::isinf(got->error.sqnr_db)) << t.Where();
    }
  }
}

// All zeros: no error, so SQNR is +inf; MeasureError's edge case.
TEST(QuantizeKernelTest, ExactTensorHasInfiniteSqnr) {
  QuantizeKernelTester t;
  t.shape({4, 9}).per_channel(0).spec(Spec(8, true, true, true));
  t.data(std::vector<float>(36, 0.0f));
  const auto got = t.Run();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->error.mse, 0.0);
  EXPECT_TRUE(std::isinf(got->error.sqnr_db) && got->error.sqnr_db > 0);
}

// The reference's statuses: NaN anywhere first, then the first bad range.
TEST(QuantizeKernelTest, SameErrorsAsReference) {
  ThreadPool pool(2);
  const ParallelFor threads = [&pool](int64_t n,
                                      const std::function<void(int64_t)>& f) {
    pool.ParallelFor(n, f);
  };
  const std::vector<int64_t> shape = {40, 3000};
  for (const ParallelFor& p : {ParallelFor(), threads}) {
    for (const auto& layout : Layouts(2)) {
      std::vector<float> data = MakeData(Data::kNormal, shape, 3);
      QuantizeKernelTester t;
      t.shape(shape).spec(Spec(8, true, false, false)).parallel_for(p);
      layout(t);
      data[2 * 3000 + 17] = kInf;
      t.data(data).Test();
      data[1 * 3000 + 5] = -kInf;
      t.data(data).Test();
      data[39 * 3000 + 2999] = kNaN;  // NaN after the infinities wins.
      t.data(data).Test();
      // A range too wide for a float scale (max - min overflows).
      std::vector<float> wide = MakeData(Data::kNormal, shape, 4);
      wide[3000 * 20 + 1] = 3e38f;
      wide[3000 * 20 + 2] = -3e38f;
      t.data(wide).Test();
    }
  }
  QuantizeKernelTester bad;
  bad.shape({4}).per_tensor().data({1, 2, 3});  // Shape does not fit.
  bad.Test();
  bad.shape({3}).per_channel(1).data({1, 2, 3});  // Bad axis.
  bad.Test();
  bad.shape({3}).per_channel(0).spec(Spec(9, true, true, true));  // Bits.
  bad.Test();
  bad.shape({3}).blocked(0, -1).spec(Spec(8, true, true, true));
  EXPECT_EQ(bad.Run().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::numerics
