// Elementwise kernels: binary arithmetic, comparison and logic, variadic
// Max / Min (broadcasting through BroadcastWalk), unary math, Not, Clip,
// Where. Each inner run is one Eigen array expression, so the compiler
// vectorizes it and nothing is called per element through a pointer.
#include <cmath>
#include <limits>
#include <type_traits>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "core/executor/broadcast.h"
#include "core/executor/kernel.h"
#include "core/executor/parallel.h"
#include "unsupported/Eigen/SpecialFunctions"

namespace quantd::executor {
namespace {

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using CMap = Eigen::Map<const Arr<T>>;
template <typename T>
using MMap = Eigen::Map<Arr<T>>;

using TP = onnx::TensorProto;

// Work below this many elements stays on the calling thread.
constexpr int64_t kElementwiseGrain = 1 << 15;

// The float clamp behind Clip and Relu, built once per instruction set and
// picked at load time (the library targets baseline x86-64, 4 floats at a
// time): y = min(max(x, lo), hi) in std::max/std::min's order, so a NaN
// stays NaN as in the Eigen form used for the other types.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#endif
void ClampFloats(const float* __restrict x, int64_t n, float lo, float hi,
                 float* __restrict y) {
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

struct AddOp {
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a + b;
  }
};
struct SubOp {
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a - b;
  }
};
struct MulOp {
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a * b;
  }
};
struct DivOp {
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a / b;
  }
};
struct PowOp {
  using Types = TypeList<float, double>;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(b, [](T x, T y) { return std::pow(x, y); });
  }
};
struct EqualOp {
  using Types = TypeList<float, double, int64_t, int32_t, bool>;
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
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a > b;
  }
};
struct LessOp {
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a < b;
  }
};
struct GreaterOrEqualOp {
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = bool;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    return a >= b;
  }
};
struct LessOrEqualOp {
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
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
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
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
  using Types = TypeList<float, double, int64_t, int32_t, int8_t, uint8_t>;
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(
        b, Eigen::internal::scalar_min_op<T, T, Eigen::PropagateNaN>());
  }
};

// out = Op(a, b) with a, b broadcast to out_shape.
template <typename Op, typename T>
void BinaryBroadcast(const Tensor& a, const Tensor& b, Tensor* out,
                     ThreadPool* pool) {
  using O = typename Op::template Out<T>;
  const std::vector<int64_t> shapes[2] = {a.shape(), b.shape()};
  BroadcastWalk walk(out->shape(), shapes);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  O* po = out->mutable_data<O>();
  const bool sa = walk.inner_stride(0) != 0, sb = walk.inner_stride(1) != 0;
  auto run = [&](int64_t o, const int64_t* off, int64_t n) {
    MMap<O> y(po + o, n);
    const T* x0 = pa + off[0];
    const T* x1 = pb + off[1];
    if (sa && sb) {
      y = Op::Apply(CMap<T>(x0, n), CMap<T>(x1, n));
    } else if (sa) {
      y = Op::Apply(CMap<T>(x0, n), Arr<T>::Constant(n, *x1));
    } else if (sb) {
      y = Op::Apply(Arr<T>::Constant(n, *x0), CMap<T>(x1, n));
    } else {
      y = Op::Apply(Arr<T>::Constant(n, *x0), Arr<T>::Constant(n, *x1));
    }
  };
  const int64_t inner = walk.inner();
  if (walk.runs() == 1) {
    // One long run (same shapes, or a scalar operand): cut it into pieces.
    ParallelRange(pool, inner, kElementwiseGrain, [&](int64_t b0, int64_t b1) {
      const int64_t off[2] = {sa ? b0 : 0, sb ? b0 : 0};
      run(b0, off, b1 - b0);
    });
    return;
  }
  ParallelRange(
      pool, walk.runs(),
      std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
      [&](int64_t r0, int64_t r1) {
        walk.ForEachRun(
            r0, r1, [&](int64_t o, const int64_t* off) { run(o, off, inner); });
      });
}

template <typename Op>
class BinaryKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() != 2) return info.Invalid("needs 2 inputs");
    // Old opsets' explicit broadcast attributes (opset < 7) are not ours.
    absl::Status s = CheckTypes(info, typename Op::Types{});
    if (!s.ok()) return s;
    if (std::is_same_v<typename Op::template Out<float>, bool>) {
      info.set_output_type(0, TP::BOOL);
    }
    return std::unique_ptr<Kernel>(new BinaryKernel<Op>(info.op()));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& a = ctx.in(0);
    Tensor b = ctx.in(1);
    if (a.dtype() != b.dtype()) {
      // Pow may raise to an exponent of another type (e.g. float ^ int64).
      if (!std::is_same_v<Op, PowOp>) {
        return absl::InvalidArgumentError(absl::StrCat(
            op_, " inputs have different types ", DataTypeName(a.dtype()),
            " and ", DataTypeName(b.dtype())));
      }
      absl::StatusOr<Tensor> converted = ConvertForPow(b, a.dtype());
      if (!converted.ok()) return converted.status();
      b = *std::move(converted);
    }
    const std::vector<int64_t> shapes[2] = {a.shape(), b.shape()};
    absl::StatusOr<std::vector<int64_t>> shape = BroadcastShapes(shapes);
    if (!shape.ok()) return shape.status();
    return DispatchImpl(
        a.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          using O = typename Op::template Out<T>;
          Tensor out(TypeOf<O>::value, *shape);
          BinaryBroadcast<Op, T>(a, b, &out, ctx.pool);
          (*ctx.outputs)[0] = std::move(out);
          return absl::OkStatus();
        },
        typename Op::Types{});
  }

 private:
  explicit BinaryKernel(std::string op) : op_(std::move(op)) {}

  template <typename... Ts>
  static absl::Status CheckTypes(NodeInfo& info, TypeList<Ts...>) {
    absl::Status s = info.RequireType(0, {TypeOf<Ts>::value...});
    if (!s.ok() || std::is_same_v<Op, PowOp>) {
      if (s.ok()) {
        s = info.RequireType(1, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32});
      }
      return s;
    }
    return info.RequireType(1, {TypeOf<Ts>::value...});
  }

  static absl::StatusOr<Tensor> ConvertForPow(const Tensor& b, int32_t to) {
    Tensor out(static_cast<DataType>(to), b.shape());
    for (int64_t i = 0; i < b.size(); ++i) {
      double v = b.dtype() == TP::FLOAT    ? b.data<float>()[i]
                 : b.dtype() == TP::DOUBLE ? b.data<double>()[i]
                                           : static_cast<double>(b.IntAt(i));
      if (to == TP::FLOAT) {
        out.mutable_data<float>()[i] = static_cast<float>(v);
      } else {
        out.mutable_data<double>()[i] = v;
      }
    }
    return out;
  }

  std::string op_;
};

// Max / Min: any number of inputs of one type, folded pairwise through
// BinaryBroadcast (broadcasting since opset 8; before, equal shapes only).
template <typename Op>
class VariadicKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() < 1) return info.Invalid("needs at least 1 input");
    for (int i = 0; i < info.num_inputs(); ++i) {
      if (!info.has_input(i)) {
        return info.Invalid(absl::StrCat("input ", i, " is empty"));
      }
      absl::Status s = CheckType(info, i, typename Op::Types{});
      if (!s.ok()) return s;
    }
    auto k = std::unique_ptr<VariadicKernel<Op>>(new VariadicKernel<Op>);
    k->op_ = info.op();
    k->broadcast_ = info.opset() >= 8;
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
      absl::StatusOr<std::vector<int64_t>> shape = BroadcastShapes(shapes);
      if (!shape.ok()) return shape.status();
      absl::Status s = DispatchImpl(
          acc.dtype(),
          [&](auto tag) {
            using T = decltype(tag);
            Tensor out(acc.dtype(), *shape);
            BinaryBroadcast<Op, T>(acc, b, &out, ctx.pool);
            acc = std::move(out);
            return absl::OkStatus();
          },
          typename Op::Types{});
      if (!s.ok()) return s;
    }
    if (ctx.inputs.size() == 1) {
      // Still refuse a type the op does not take.
      absl::Status s = DispatchImpl(
          acc.dtype(), [](auto) { return absl::OkStatus(); },
          typename Op::Types{});
      if (!s.ok()) return s;
    }
    (*ctx.outputs)[0] = std::move(acc);
    return absl::OkStatus();
  }

 private:
  template <typename... Ts>
  static absl::Status CheckType(NodeInfo& info, int i, TypeList<Ts...>) {
    return info.RequireType(i, {TypeOf<Ts>::value...});
  }

  std::string op_;
  bool broadcast_ = true;
};

// ------------------------------------------------------------------- unary

// Applies f (an Eigen array expression builder) over the flat input.
template <typename T, typename F>
Tensor UnaryMap(const Tensor& x, ThreadPool* pool, F f) {
  Tensor out(x.dtype(), x.shape());
  const T* in = x.data<T>();
  T* o = out.mutable_data<T>();
  ParallelRange(pool, x.size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    MMap<T>(o + b, e - b) = f(CMap<T>(in + b, e - b));
  });
  return out;
}

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
  kNot
};

// The kinds that take integers too (the rest are float / double only, Not
// is BOOL only).
bool IntegerUnary(Unary kind) {
  return kind == Unary::kNeg || kind == Unary::kRelu || kind == Unary::kAbs ||
         kind == Unary::kSign;
}

class UnaryKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    static const absl::flat_hash_map<std::string, Unary>* kinds =
        new absl::flat_hash_map<std::string, Unary>{
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
            {"Not", Unary::kNot}};
    auto k = std::unique_ptr<UnaryKernel>(new UnaryKernel);
    k->kind_ = kinds->at(info.op());
    if (k->kind_ == Unary::kLeakyRelu) k->alpha_ = info.Float("alpha", 0.01f);
    absl::Status s = k->kind_ == Unary::kNot ? info.RequireType(0, {TP::BOOL})
                     : IntegerUnary(k->kind_)
                         ? info.RequireType(0, {TP::FLOAT, TP::DOUBLE,
                                                TP::INT32, TP::INT64, TP::INT8})
                         : info.RequireType(0, {TP::FLOAT, TP::DOUBLE});
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    Tensor& y = (*ctx.outputs)[0];
    if (kind_ == Unary::kNot) {
      return Dispatch<bool>(x.dtype(), [&](auto) {
        y = UnaryMap<bool>(x, ctx.pool,
                           [](const auto& a) { return a == false; });
        return absl::OkStatus();
      });
    }
    if (IntegerUnary(kind_)) {
      return Dispatch<float, double, int32_t, int64_t, int8_t>(
          x.dtype(), [&](auto tag) {
            using T = decltype(tag);
            if (kind_ == Unary::kNeg) {
              y = UnaryMap<T>(x, ctx.pool, [](const auto& a) { return -a; });
            } else if (kind_ == Unary::kAbs) {
              y = UnaryMap<T>(x, ctx.pool,
                              [](const auto& a) { return a.abs(); });
            } else if (kind_ == Unary::kSign) {
              // Zero (and NaN) map to themselves.
              y = UnaryMap<T>(x, ctx.pool, [](const auto& a) {
                return (a > T(0)).select(T(1), (a < T(0)).select(T(-1), a));
              });
            } else if constexpr (std::is_same_v<T, float>) {
              y = ClampFloatTensor(
                  x, 0.0f, std::numeric_limits<float>::infinity(), ctx.pool);
            } else {
              y = UnaryMap<T>(x, ctx.pool,
                              [](const auto& a) { return a.max(T(0)); });
            }
            return absl::OkStatus();
          });
    }
    return Dispatch<float, double>(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T alpha = static_cast<T>(alpha_);
      switch (kind_) {
        case Unary::kSqrt:
          y = UnaryMap<T>(x, ctx.pool, [](const auto& a) { return a.sqrt(); });
          break;
        case Unary::kSigmoid:
          // 1 / (1 + e^-x): e^-x overflows to inf for very negative x, which
          // still gives the right limit 0.
          y = UnaryMap<T>(x, ctx.pool, [](const auto& a) {
            return (T(1) + (-a).exp()).inverse();
          });
          break;
        case Unary::kTanh:
          y = UnaryMap<T>(x, ctx.pool, [](const auto& a) { return a.tanh(); });
          break;
        case Unary::kErf:
          y = UnaryMap<T>(x, ctx.pool, [](const auto& a) { return a.erf(); });
          break;
        case Unary::kExp:
          y = UnaryMap<T>(x, ctx.pool, [](const auto& a) { return a.exp(); });
          break;
        case Unary::kLog:
          y = UnaryMap<T>(x, ctx.pool, [](const auto& a) { return a.log(); });
          break;
        case Unary::kLeakyRelu:
          y = UnaryMap<T>(x, ctx.pool, [alpha](const auto& a) {
            return (a > T(0)).select(a, a * alpha);
          });
          break;
        default:
          break;
      }
      return absl::OkStatus();
    });
  }

 private:
  Unary kind_ = Unary::kRelu;
  float alpha_ = 0;
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
    absl::Status s = info.RequireType(
        0, {TP::FLOAT, TP::DOUBLE, TP::INT32, TP::INT64, TP::INT8, TP::UINT8});
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    return Dispatch<float, double, int32_t, int64_t, int8_t, uint8_t>(
        x.dtype(), [&](auto tag) -> absl::Status {
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
        });
  }

 private:
  float min_attr_ = -std::numeric_limits<float>::infinity();
  float max_attr_ = std::numeric_limits<float>::infinity();
};

// ------------------------------------------------------------------- Where

class WhereKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() != 3) return info.Invalid("needs 3 inputs");
    absl::Status s = info.RequireType(0, {TP::BOOL});
    if (s.ok()) {
      s = info.RequireType(1, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32,
                               TP::INT8, TP::UINT8, TP::BOOL});
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
    absl::StatusOr<std::vector<int64_t>> shape = BroadcastShapes(shapes);
    if (!shape.ok()) return shape.status();
    return Dispatch<float, double, int64_t, int32_t, int8_t, uint8_t, bool>(
        a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          Tensor out(a.dtype(), *shape);
          BroadcastWalk walk(*shape, shapes);
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
        });
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
  r->Register("Max", &VariadicKernel<MaxOp>::Create);
  r->Register("Min", &VariadicKernel<MinOp>::Create);
  for (const char* op : {"Sqrt", "Neg", "Relu", "Sigmoid", "Tanh", "Erf",
                         "LeakyRelu", "Abs", "Sign", "Exp", "Log", "Not"}) {
    r->Register(op, &UnaryKernel::Create);
  }
  r->Register("Clip", &ClipKernel::Create);
  r->Register("Where", &WhereKernel::Create);
}

}  // namespace quantd::executor
