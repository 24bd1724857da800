// Elementwise kernels: binary arithmetic (Mod, BitShift, Bitwise* too),
// comparison and logic, variadic Max / Min / Sum / Mean (broadcasting
// through BroadcastWalk), unary math (rounding, trigonometry, IsNaN / IsInf),
// Not, Clip, Where. Each inner run is one Eigen array expression
// (elementwise.h), so the compiler vectorizes it and nothing is called per
// element through a pointer.
#include <cmath>
#include <limits>
#include <type_traits>

#include "Eigen/Core"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/base/multiversion.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/broadcast.h"
#include "core/executor/cast.h"
#include "core/executor/elementwise.h"
#include "core/executor/kernel.h"
#include "core/executor/wrapping.h"
#include "unsupported/Eigen/SpecialFunctions"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

// The float clamp behind Clip and Relu, built once per instruction set and
// picked at load time (the library targets baseline x86-64, 4 floats at a
// time): y = min(max(x, lo), hi) in std::max/std::min's order, so a NaN
// stays NaN as in the Eigen form used for the other types.
QUANTD_VECTOR_CLONES void ClampFloats(const float* __restrict x, int64_t n,
                                      float lo, float hi, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] < lo ? lo : x[i];
    y[i] = hi < v ? hi : v;
  }
}

Tensor ClampFloatTensor(const Tensor& x, float lo, float hi, ThreadPool* pool) {
  Tensor out(x.dtype(), x.shape());
  const float* in = x.data<float>();
  float* o = out.mutable_data<float>();
  ParallelRange(pool, x.size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    ClampFloats(in + b, e - b, lo, hi, o + b);
  });
  return out;
}

// ------------------------------------------------------------------ binary

// Add, Sub and Mul: Eigen's vectorised expression on floats, wrapping
// element by element on integers.
template <typename F>
struct ArithmeticOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    if constexpr (std::is_integral_v<T>) {
      return a.binaryExpr(b, [](T x, T y) { return Wrapping(x, y, F{}); });
    } else {
      return F{}(a, b);
    }
  }
};
using AddOp = ArithmeticOp<Plus>;
using SubOp = ArithmeticOp<Minus>;
using MulOp = ArithmeticOp<Times>;

// Integer x / y truncated toward zero, without the traps of C++'s `/`:
// x / 0 is 0 (numpy's answer) and MIN / -1 wraps to MIN.
template <typename T>
T IntDiv(T x, T y) {
  if (y == 0) return 0;
  if constexpr (std::is_signed_v<T>) {
    if (y == -1) {
      return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(x));
    }
  }
  return static_cast<T>(x / y);
}

struct DivOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    if constexpr (std::is_integral_v<T>) {
      return a.binaryExpr(b, [](T x, T y) { return IntDiv(x, y); });
    } else {
      return a / b;
    }
  }
};
// Float / double only; BinaryKernel brings other bases and exponents there.
struct PowOp {
  using Types = FloatTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(b, [](T x, T y) { return std::pow(x, y); });
  }
};

// Mod: with kFmod (attribute fmod = 1) C's fmod / %, the result taking the
// dividend's sign; without (integers only), Python's %, taking the
// divisor's sign. x mod 0 is 0 for integers (numpy's answer), NaN for
// floats; MIN mod -1 is 0 instead of a trap.
template <bool kFmod>
struct ModOp {
  using Types = std::conditional_t<kFmod, NumberTypes, IntTypes>;
  template <typename T>
  using Out = T;
  template <typename T>
  static T One(T x, T y) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fmod(x, y);
    } else {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (y == -1) return 0;
      }
      T r = static_cast<T>(x % y);
      if constexpr (!kFmod && std::is_signed_v<T>) {
        if (r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
      }
      return r;
    }
  }
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(b, [](T x, T y) { return One(x, y); });
  }
};

// BitShift (unsigned only): a shift by the width or more gives 0 (C++
// leaves it undefined).
template <bool kLeft>
struct BitShiftOp {
  using Types = UnsignedTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(b, [](T x, T y) -> T {
      if (y >= sizeof(T) * 8) return 0;
      return static_cast<T>(kLeft ? x << y : x >> y);
    });
  }
};

enum class Bitwise { kAnd, kOr, kXor };
template <Bitwise kOp>
struct BitwiseOp {
  using Types = IntTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(b, [](T x, T y) -> T {
      if constexpr (kOp == Bitwise::kAnd) return x & y;
      if constexpr (kOp == Bitwise::kOr) return x | y;
      return x ^ y;
    });
  }
};

struct EqualOp {
  using Types = TypeList<bool, float, double, int64_t, int32_t, int16_t, int8_t,
                         uint64_t, uint32_t, uint16_t, uint8_t>;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a == b;
  }
};

// Comparisons: BOOL out, numeric in (Greater / Less since opset 7, ints
// since 9; GreaterOrEqual / LessOrEqual since 12).
struct GreaterOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a > b;
  }
};
struct LessOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a < b;
  }
};
struct GreaterOrEqualOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a >= b;
  }
};
struct LessOrEqualOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a <= b;
  }
};

// Logic: BOOL in and out.
struct AndOp {
  using Types = TypeList<bool>;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a && b;
  }
};
struct OrOp {
  using Types = TypeList<bool>;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a || b;
  }
};
struct XorOp {
  using Types = TypeList<bool>;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a != b;
  }
};

// The steps of variadic Max / Min. NaN wins, as in numpy's maximum /
// minimum, which ONNX's reference implementation uses.
struct MaxOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    // Eigen 3.4's ArrayBase::max has no NaN-propagation parameter; its
    // functor does (and stays vectorized).
    using T = typename A::Scalar;
    return a.binaryExpr(
        b, Eigen::internal::scalar_max_op<T, T, Eigen::PropagateNaN>());
  }
};
struct MinOp {
  using Types = NumberTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(
        b, Eigen::internal::scalar_min_op<T, T, Eigen::PropagateNaN>());
  }
};
// The step of variadic Sum and Mean (float types, as ONNX defines them).
struct SumOp {
  using Types = FloatTypes;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a + b;
  }
};

template <typename Op>
class BinaryKernel : public Kernel {
 public:
  static constexpr bool kPow = std::is_same_v<Op, PowOp>;

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() != 2) return info.Invalid("needs 2 inputs");
    // Old opsets' explicit broadcast attributes (opset < 7) are not ours.
    absl::Status s;
    if constexpr (kPow) {
      // Pow-12 and later raise integers too, to an exponent of any number
      // type.
      s = info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT32, TP::INT64});
      if (s.ok()) s = RequireTypes(info, 1, NumberTypes{});
    } else {
      s = RequireTypes(info, 0, typename Op::Types{});
      if (s.ok()) s = RequireTypes(info, 1, typename Op::Types{});
    }
    if (!s.ok()) return s;
    if (std::is_same_v<typename Op::template Out<float>, bool>) {
      info.set_output_type(0, TP::BOOL);
    }
    return std::unique_ptr<Kernel>(new BinaryKernel<Op>(info.op()));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    Tensor a = ctx.in(0);
    Tensor b = ctx.in(1);
    const DataType result_type = a.dtype();
    if constexpr (kPow) {
      // numpy's power: computed in the base's float type (double for an
      // integer base, the result then cast back like astype).
      const int32_t compute = a.dtype() == TP::FLOAT ? TP::FLOAT : TP::DOUBLE;
      for (Tensor* t : {&a, &b}) {
        QUANTD_ASSIGN_OR_RETURN(*t, CastTensor(*t, compute, ctx.pool));
      }
    } else if (a.dtype() != b.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_, " inputs have different types ", DataTypeName(a.dtype()),
          " and ", DataTypeName(b.dtype())));
    }
    const std::vector<int64_t> shapes[2] = {a.shape(), b.shape()};
    QUANTD_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                            BroadcastShapes(shapes));
    Tensor out;
    absl::Status s = DispatchImpl(
        a.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          using O = typename Op::template Out<T>;
          out = Tensor(TypeOf<O>::value, shape);
          BinaryBroadcast<Op, T>(a, b, &out, ctx.pool);
          return absl::OkStatus();
        },
        typename Op::Types{});
    if (!s.ok()) return s;
    if constexpr (kPow) {
      QUANTD_ASSIGN_OR_RETURN(out, CastTensor(out, result_type, ctx.pool));
    }
    (*ctx.outputs)[0] = std::move(out);
    return absl::OkStatus();
  }

 private:
  explicit BinaryKernel(std::string op) : op_(std::move(op)) {}

  std::string op_;
};

// Mod's fmod picks the op: fmod = 0 is for integers only (ONNX: "If the
// input type is floating point, then fmod attribute must be set to 1").
absl::StatusOr<std::unique_ptr<Kernel>> CreateMod(NodeInfo& info) {
  const int64_t fmod = info.Int("fmod", 0);
  if (fmod != 0 && fmod != 1) {
    return info.Invalid(absl::StrCat("fmod must be 0 or 1, got ", fmod));
  }
  if (fmod == 1) return BinaryKernel<ModOp<true>>::Create(info);
  const int32_t t = info.input_type(0);
  if (t == TP::FLOAT || t == TP::DOUBLE) {
    return info.Invalid("fmod must be 1 for floating-point inputs");
  }
  return BinaryKernel<ModOp<false>>::Create(info);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateBitShift(NodeInfo& info) {
  const std::string direction = info.String("direction", "");
  if (direction == "LEFT") return BinaryKernel<BitShiftOp<true>>::Create(info);
  if (direction == "RIGHT") {
    return BinaryKernel<BitShiftOp<false>>::Create(info);
  }
  return info.Invalid(
      absl::StrCat("direction must be LEFT or RIGHT, got '", direction, "'"));
}

// Max / Min / Sum / Mean: any number of inputs of one type, folded pairwise
// through BinaryBroadcast (broadcasting since opset 8; before, equal shapes
// only). Mean is Sum divided by the count.
template <typename Op>
class VariadicKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() < 1) return info.Invalid("needs at least 1 input");
    for (int i = 0; i < info.num_inputs(); ++i) {
      if (!info.has_input(i)) {
        return info.Invalid(absl::StrCat("input ", i, " is empty"));
      }
      QUANTD_RETURN_IF_ERROR(RequireTypes(info, i, typename Op::Types{}));
    }
    auto k = std::unique_ptr<VariadicKernel<Op>>(new VariadicKernel<Op>);
    k->op_ = info.op();
    k->broadcast_ = info.opset() >= 8;
    k->mean_ = info.op() == "Mean";
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    Tensor acc = ctx.in(0);
    for (size_t i = 1; i < ctx.inputs.size(); ++i) {
      const Tensor& b = ctx.in(i);
      if (b.dtype() != acc.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op_, " inputs have different types ", DataTypeName(acc.dtype()),
            " and ", DataTypeName(b.dtype())));
      }
      if (!broadcast_ && b.shape() != acc.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op_, " before opset 8 needs equal shapes, got ",
            ShapeString(acc.shape()), " and ", ShapeString(b.shape())));
      }
      const std::vector<int64_t> shapes[2] = {acc.shape(), b.shape()};
      QUANTD_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                              BroadcastShapes(shapes));
      absl::Status s = DispatchImpl(
          acc.dtype(),
          [&](auto tag) {
            using T = decltype(tag);
            Tensor out(acc.dtype(), shape);
            BinaryBroadcast<Op, T>(acc, b, &out, ctx.pool);
            acc = std::move(out);
            return absl::OkStatus();
          },
          typename Op::Types{});
      if (!s.ok()) return s;
    }
    // Also refuses a type the op does not take when there is one input.
    absl::Status s = DispatchImpl(
        acc.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>) {
            if (mean_ && ctx.inputs.size() > 1) {
              const T n = static_cast<T>(ctx.inputs.size());
              acc = UnaryMap<T>(acc, ctx.pool,
                                [n](const auto& a) { return a / n; });
            }
          }
          return absl::OkStatus();
        },
        typename Op::Types{});
    if (!s.ok()) return s;
    (*ctx.outputs)[0] = std::move(acc);
    return absl::OkStatus();
  }

 private:
  std::string op_;
  bool broadcast_ = true;
  bool mean_ = false;
};

// ------------------------------------------------------------------- unary

enum class Unary {
  kSqrt,
  kNeg,
  kRelu,
  kSigmoid,
  kTanh,
  kErf,
  kLeakyRelu,
  kAbs,
  kSign,
  kExp,
  kLog,
  kNot,
  kBitwiseNot,
  kReciprocal,
  kFloor,
  kCeil,
  kRound,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kAsinh,
  kAcosh,
  kAtanh,
  kIsNaN,
  kIsInf,
};

const absl::flat_hash_map<std::string, Unary>& UnaryKinds() {
  static const auto* kinds = new absl::flat_hash_map<std::string, Unary>{
      {"Sqrt", Unary::kSqrt},
      {"Neg", Unary::kNeg},
      {"Relu", Unary::kRelu},
      {"Sigmoid", Unary::kSigmoid},
      {"Tanh", Unary::kTanh},
      {"Erf", Unary::kErf},
      {"LeakyRelu", Unary::kLeakyRelu},
      {"Abs", Unary::kAbs},
      {"Sign", Unary::kSign},
      {"Exp", Unary::kExp},
      {"Log", Unary::kLog},
      {"Not", Unary::kNot},
      {"BitwiseNot", Unary::kBitwiseNot},
      {"Reciprocal", Unary::kReciprocal},
      {"Floor", Unary::kFloor},
      {"Ceil", Unary::kCeil},
      {"Round", Unary::kRound},
      {"Sin", Unary::kSin},
      {"Cos", Unary::kCos},
      {"Tan", Unary::kTan},
      {"Asin", Unary::kAsin},
      {"Acos", Unary::kAcos},
      {"Atan", Unary::kAtan},
      {"Sinh", Unary::kSinh},
      {"Cosh", Unary::kCosh},
      {"Asinh", Unary::kAsinh},
      {"Acosh", Unary::kAcosh},
      {"Atanh", Unary::kAtanh},
      {"IsNaN", Unary::kIsNaN},
      {"IsInf", Unary::kIsInf},
  };
  return *kinds;
}

// Which element types a kind takes: the float math takes float / double;
// these take more (ONNX's type constraints).
enum class UnaryFamily { kFloat, kSigned, kNumber, kInteger, kBool };

UnaryFamily FamilyOf(Unary kind) {
  switch (kind) {
    case Unary::kNeg:
    case Unary::kRelu:
      return UnaryFamily::kSigned;
    case Unary::kAbs:
    case Unary::kSign:
      return UnaryFamily::kNumber;
    case Unary::kBitwiseNot:
      return UnaryFamily::kInteger;
    case Unary::kNot:
      return UnaryFamily::kBool;
    default:
      return UnaryFamily::kFloat;
  }
}

class UnaryKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<UnaryKernel>(new UnaryKernel);
    k->kind_ = UnaryKinds().at(info.op());
    if (k->kind_ == Unary::kLeakyRelu) k->alpha_ = info.Float("alpha", 0.01f);
    if (k->kind_ == Unary::kIsInf) {
      k->detect_positive_ = info.Int("detect_positive", 1) != 0;
      k->detect_negative_ = info.Int("detect_negative", 1) != 0;
    }
    if (k->kind_ == Unary::kIsNaN || k->kind_ == Unary::kIsInf) {
      info.set_output_type(0, TP::BOOL);
    }
    absl::Status s;
    switch (FamilyOf(k->kind_)) {
      case UnaryFamily::kFloat:
        s = RequireTypes(info, 0, FloatTypes{});
        break;
      case UnaryFamily::kSigned:
        s = RequireTypes(info, 0, SignedTypes{});
        break;
      case UnaryFamily::kNumber:
        s = RequireTypes(info, 0, NumberTypes{});
        break;
      case UnaryFamily::kInteger:
        s = RequireTypes(info, 0, IntTypes{});
        break;
      case UnaryFamily::kBool:
        s = info.RequireType(0, {TP::BOOL});
        break;
    }
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    Tensor& y = (*ctx.outputs)[0];
    switch (FamilyOf(kind_)) {
      case UnaryFamily::kBool:
        return Dispatch<bool>(x.dtype(), [&](auto) {
          y = UnaryMap<bool>(x, ctx.pool,
                             [](const auto& a) { return a == false; });
          return absl::OkStatus();
        });
      case UnaryFamily::kInteger:
        return DispatchImpl(
            x.dtype(),
            [&](auto tag) {
              using T = decltype(tag);
              y = UnaryMap<T>(x, ctx.pool, [](const auto& a) {
                return a.unaryExpr([](T v) { return static_cast<T>(~v); });
              });
              return absl::OkStatus();
            },
            IntTypes{});
      case UnaryFamily::kSigned:
      case UnaryFamily::kNumber:
        return DispatchImpl(
            x.dtype(),
            [&](auto tag) {
              using T = decltype(tag);
              y = IntegerKind<T>(x, ctx.pool);
              return absl::OkStatus();
            },
            NumberTypes{});
      case UnaryFamily::kFloat:
        break;
    }
    return DispatchImpl(
        x.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          y = FloatKind<T>(x, ctx.pool);
          return absl::OkStatus();
        },
        FloatTypes{});
  }

 private:
  // The kinds that take integers too (Neg, Relu, Abs, Sign).
  template <typename T>
  Tensor IntegerKind(const Tensor& x, ThreadPool* pool) const {
    if constexpr (std::is_unsigned_v<T>) {
      // Abs and Relu are the identity on unsigned values, Sign is 0 or 1
      // (Neg and Relu refuse them at Create).
      if (kind_ == Unary::kSign) {
        return UnaryMap<T>(
            x, pool, [](const auto& a) { return (a > T(0)).select(T(1), a); });
      }
      return x;
    } else {
      switch (kind_) {
        case Unary::kNeg:
          if constexpr (std::is_integral_v<T>) {  // -MIN wraps to MIN.
            return UnaryMap<T>(x, pool, [](const auto& a) {
              return a.unaryExpr([](T v) { return WrappingNeg(v); });
            });
          } else {
            return UnaryMap<T>(x, pool, [](const auto& a) { return -a; });
          }
        case Unary::kAbs:
          if constexpr (std::is_integral_v<T>) {  // |MIN| wraps to MIN.
            return UnaryMap<T>(x, pool, [](const auto& a) {
              return a.unaryExpr([](T v) { return WrappingAbs(v); });
            });
          } else {
            return UnaryMap<T>(x, pool, [](const auto& a) { return a.abs(); });
          }
        case Unary::kSign:
          // Zero (and NaN) map to themselves.
          return UnaryMap<T>(x, pool, [](const auto& a) {
            return (a > T(0)).select(T(1), (a < T(0)).select(T(-1), a));
          });
        default:  // kRelu
          if constexpr (std::is_same_v<T, float>) {
            return ClampFloatTensor(
                x, 0.0f, std::numeric_limits<float>::infinity(), pool);
          }
          return UnaryMap<T>(x, pool,
                             [](const auto& a) { return a.max(T(0)); });
      }
    }
  }

  template <typename T>
  Tensor FloatKind(const Tensor& x, ThreadPool* pool) const {
    const T alpha = static_cast<T>(alpha_);
    switch (kind_) {
      case Unary::kSqrt:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.sqrt(); });
      case Unary::kSigmoid:
        // 1 / (1 + e^-x): e^-x overflows to inf for very negative x, which
        // still gives the right limit 0.
        return UnaryMap<T>(x, pool, [](const auto& a) {
          return (T(1) + (-a).exp()).inverse();
        });
      case Unary::kTanh:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.tanh(); });
      case Unary::kErf:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.erf(); });
      case Unary::kExp:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.exp(); });
      case Unary::kLog:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.log(); });
      case Unary::kLeakyRelu:
        return UnaryMap<T>(x, pool, [alpha](const auto& a) {
          return (a > T(0)).select(a, a * alpha);
        });
      case Unary::kReciprocal:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.inverse(); });
      case Unary::kFloor:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.floor(); });
      case Unary::kCeil:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.ceil(); });
      case Unary::kRound:
        // Half to even (rint in the default rounding mode), as ONNX says.
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.rint(); });
      case Unary::kSin:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.sin(); });
      case Unary::kCos:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.cos(); });
      case Unary::kTan:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.tan(); });
      case Unary::kAsin:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.asin(); });
      case Unary::kAcos:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.acos(); });
      case Unary::kAtan:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.atan(); });
      case Unary::kSinh:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.sinh(); });
      case Unary::kCosh:
        return UnaryMap<T>(x, pool, [](const auto& a) { return a.cosh(); });
      case Unary::kAsinh:
        return UnaryMap<T>(x, pool, [](const auto& a) {
          return a.unaryExpr([](T v) { return std::asinh(v); });
        });
      case Unary::kAcosh:
        return UnaryMap<T>(x, pool, [](const auto& a) {
          return a.unaryExpr([](T v) { return std::acosh(v); });
        });
      case Unary::kAtanh:
        return UnaryMap<T>(x, pool, [](const auto& a) {
          return a.unaryExpr([](T v) { return std::atanh(v); });
        });
      case Unary::kIsNaN:
        return UnaryMap<T, bool>(x, pool, [](const auto& a) { return a != a; });
      case Unary::kIsInf: {
        const T pos = detect_positive_ ? std::numeric_limits<T>::infinity()
                                       : std::numeric_limits<T>::quiet_NaN();
        const T neg = detect_negative_ ? -std::numeric_limits<T>::infinity()
                                       : std::numeric_limits<T>::quiet_NaN();
        // NaN never compares equal, so a direction not detected never is.
        return UnaryMap<T, bool>(x, pool, [pos, neg](const auto& a) {
          return a == pos || a == neg;
        });
      }
      default:
        return Tensor();  // Other families return before.
    }
  }

  Unary kind_ = Unary::kRelu;
  float alpha_ = 0;
  bool detect_positive_ = true;
  bool detect_negative_ = true;
};

// -------------------------------------------------------------------- Clip

class ClipKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ClipKernel>(new ClipKernel);
    if (info.opset() < 11) {
      // Before opset 11 the bounds were attributes.
      k->min_attr_ = info.Float("min", -std::numeric_limits<float>::infinity());
      k->max_attr_ = info.Float("max", std::numeric_limits<float>::infinity());
    }
    QUANTD_RETURN_IF_ERROR(RequireTypes(info, 0, NumberTypes{}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    return DispatchImpl(
        x.dtype(),
        [&](auto tag) -> absl::Status {
          using T = decltype(tag);
          T lo = std::numeric_limits<T>::lowest();
          T hi = std::numeric_limits<T>::max();
          if (std::is_floating_point_v<T>) {
            lo = static_cast<T>(min_attr_);
            hi = static_cast<T>(max_attr_);
          }
          for (int i = 1; i <= 2; ++i) {
            if (!ctx.has(i)) continue;
            const Tensor& b = ctx.in(i);
            if (b.dtype() != x.dtype() || b.size() != 1) {
              return absl::InvalidArgumentError(
                  "Clip bounds must be scalars of the input's type");
            }
            (i == 1 ? lo : hi) = b.data<T>()[0];
          }
          if constexpr (std::is_same_v<T, float>) {
            (*ctx.outputs)[0] = ClampFloatTensor(x, lo, hi, ctx.pool);
            return absl::OkStatus();
          }
          (*ctx.outputs)[0] = UnaryMap<T>(x, ctx.pool, [lo, hi](const auto& a) {
            return a.max(lo).min(hi);
          });
          return absl::OkStatus();
        },
        NumberTypes{});
  }

 private:
  float min_attr_ = -std::numeric_limits<float>::infinity();
  float max_attr_ = std::numeric_limits<float>::infinity();
};

// ------------------------------------------------------------------- Where

using WhereTypes = TypeList<float, double, int64_t, int32_t, int16_t, int8_t,
                            uint64_t, uint32_t, uint16_t, uint8_t, bool>;

class WhereKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() != 3) return info.Invalid("needs 3 inputs");
    absl::Status s = info.RequireType(0, {TP::BOOL});
    if (s.ok()) {
      s = RequireTypes(info, 1, WhereTypes{});
    }
    if (!s.ok()) return s;
    info.set_output_type(0, info.input_type(1));
    return std::unique_ptr<Kernel>(new WhereKernel);
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& c = ctx.in(0);
    const Tensor& a = ctx.in(1);
    const Tensor& b = ctx.in(2);
    if (c.dtype() != TP::BOOL || a.dtype() != b.dtype()) {
      return absl::InvalidArgumentError(
          "Where needs a BOOL condition and two values of one type");
    }
    const std::vector<int64_t> shapes[3] = {c.shape(), a.shape(), b.shape()};
    QUANTD_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                            BroadcastShapes(shapes));
    return DispatchImpl(
        a.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          Tensor out(a.dtype(), shape);
          BroadcastWalk walk(shape, shapes);
          const int64_t n = walk.inner();
          const int64_t s0 = walk.inner_stride(0), s1 = walk.inner_stride(1),
                        s2 = walk.inner_stride(2);
          const bool* pc = c.data<bool>();
          const T* pa = a.data<T>();
          const T* pb = b.data<T>();
          T* po = out.mutable_data<T>();
          walk.ForEachRun(0, walk.runs(), [&](int64_t o, const int64_t* off) {
            for (int64_t i = 0; i < n; ++i) {
              po[o + i] = pc[off[0] + i * s0] ? pa[off[1] + i * s1]
                                              : pb[off[2] + i * s2];
            }
          });
          (*ctx.outputs)[0] = std::move(out);
          return absl::OkStatus();
        },
        WhereTypes{});
  }
};

}  // namespace

void RegisterElementwiseOps(OpRegistry* r) {
  r->Register("Add", &BinaryKernel<AddOp>::Create);
  r->Register("Sub", &BinaryKernel<SubOp>::Create);
  r->Register("Mul", &BinaryKernel<MulOp>::Create);
  r->Register("Div", &BinaryKernel<DivOp>::Create);
  r->Register("Pow", &BinaryKernel<PowOp>::Create);
  r->Register("Equal", &BinaryKernel<EqualOp>::Create);
  r->Register("Greater", &BinaryKernel<GreaterOp>::Create);
  r->Register("Less", &BinaryKernel<LessOp>::Create);
  r->Register("GreaterOrEqual", &BinaryKernel<GreaterOrEqualOp>::Create);
  r->Register("LessOrEqual", &BinaryKernel<LessOrEqualOp>::Create);
  r->Register("And", &BinaryKernel<AndOp>::Create);
  r->Register("Or", &BinaryKernel<OrOp>::Create);
  r->Register("Xor", &BinaryKernel<XorOp>::Create);
  r->Register("Mod", &CreateMod);
  r->Register("BitShift", &CreateBitShift);
  r->Register("BitwiseAnd", &BinaryKernel<BitwiseOp<Bitwise::kAnd>>::Create);
  r->Register("BitwiseOr", &BinaryKernel<BitwiseOp<Bitwise::kOr>>::Create);
  r->Register("BitwiseXor", &BinaryKernel<BitwiseOp<Bitwise::kXor>>::Create);
  r->Register("Max", &VariadicKernel<MaxOp>::Create);
  r->Register("Min", &VariadicKernel<MinOp>::Create);
  r->Register("Sum", &VariadicKernel<SumOp>::Create);
  r->Register("Mean", &VariadicKernel<SumOp>::Create);
  for (const auto& [op, kind] : UnaryKinds()) {
    r->Register(op, &UnaryKernel::Create);
  }
  r->Register("Clip", &ClipKernel::Create);
  r->Register("Where", &WhereKernel::Create);
}

}  // namespace quantd::executor
