// Activations with attributes (HardSigmoid, HardSwish, Gelu, Elu, Selu,
// Celu, PRelu, Softplus, Softsign, Mish, ThresholdedRelu, Shrink), the
// per-axis LogSoftmax / Hardmax, and CastLike. The attribute-free math
// (rounding, trigonometry, IsNaN / IsInf) and Sum / Mean / Mod / BitShift /
// Bitwise* extend ops_elementwise.cc's kernels instead.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/broadcast.h"
#include "core/executor/cast.h"
#include "core/executor/elementwise.h"
#include "core/executor/kernel.h"
#include "unsupported/Eigen/SpecialFunctions"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

// ------------------------------------------------------- unary activations

enum class Act {
  kHardSigmoid,
  kHardSwish,
  kGelu,
  kGeluTanh,
  kElu,
  kSelu,
  kCelu,
  kSoftplus,
  kSoftsign,
  kMish,
  kThresholdedRelu,
};

// softplus(x) = log(1 + e^x) without overflow: x + log1p(e^-x) for x > 0.
template <typename A>
auto Softplus(const A& a) {
  using T = typename A::Scalar;
  return (a > T(0)).select(a + (-a).exp().log1p(), a.exp().log1p());
}

class ActivationKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ActivationKernel>(new ActivationKernel);
    const std::string& op = info.op();
    // Defaults from the ONNX operator docs.
    if (op == "HardSigmoid") {
      k->act_ = Act::kHardSigmoid;
      k->alpha_ = info.Float("alpha", 0.2f);
      k->beta_ = info.Float("beta", 0.5f);
    } else if (op == "HardSwish") {
      k->act_ = Act::kHardSwish;  // alpha 1/6, beta 0.5, fixed.
    } else if (op == "Gelu") {
      const std::string approximate = info.String("approximate", "none");
      if (approximate == "none") {
        k->act_ = Act::kGelu;
      } else if (approximate == "tanh") {
        k->act_ = Act::kGeluTanh;
      } else {
        return info.Invalid(absl::StrCat(
            "approximate must be 'none' or 'tanh', got '", approximate, "'"));
      }
    } else if (op == "Elu") {
      k->act_ = Act::kElu;
      k->alpha_ = info.Float("alpha", 1.0f);
    } else if (op == "Selu") {
      k->act_ = Act::kSelu;
      k->alpha_ = info.Float("alpha", 1.67326319217681884765625f);
      k->gamma_ = info.Float("gamma", 1.05070102214813232421875f);
    } else if (op == "Celu") {
      k->act_ = Act::kCelu;
      k->alpha_ = info.Float("alpha", 1.0f);
      if (k->alpha_ == 0) return info.Invalid("alpha must not be 0");
    } else if (op == "Softplus") {
      k->act_ = Act::kSoftplus;
    } else if (op == "Softsign") {
      k->act_ = Act::kSoftsign;
    } else if (op == "Mish") {
      k->act_ = Act::kMish;
    } else {
      k->act_ = Act::kThresholdedRelu;
      k->alpha_ = info.Float("alpha", 1.0f);
    }
    QUANTD_RETURN_IF_ERROR(RequireTypes(info, 0, FloatTypes{}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    return DispatchImpl(
        x.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          (*ctx.outputs)[0] = Apply<T>(x, ctx.pool);
          return absl::OkStatus();
        },
        FloatTypes{});
  }

 private:
  template <typename T>
  Tensor Apply(const Tensor& x, ThreadPool* pool) const {
    const T alpha = static_cast<T>(alpha_), beta = static_cast<T>(beta_),
            gamma = static_cast<T>(gamma_);
    switch (act_) {
      case Act::kHardSigmoid:
        return UnaryMap<T>(x, pool, [alpha, beta](const auto& a) {
          return (a * alpha + beta).max(T(0)).min(T(1));
        });
      case Act::kHardSwish:
        return UnaryMap<T>(x, pool, [](const auto& a) {
          return a * (a * T(1.0 / 6.0) + T(0.5)).max(T(0)).min(T(1));
        });
      case Act::kGelu:
        return UnaryMap<T>(x, pool, [](const auto& a) {
          return T(0.5) * a * (T(1) + (a * T(M_SQRT1_2)).erf());
        });
      case Act::kGeluTanh:
        return UnaryMap<T>(x, pool, [](const auto& a) {
          const T k = static_cast<T>(std::sqrt(2.0 / M_PI));
          return T(0.5) * a *
                 (T(1) + (k * (a + T(0.044715) * a * a * a)).tanh());
        });
      case Act::kElu:
        return UnaryMap<T>(x, pool, [alpha](const auto& a) {
          return (a < T(0)).select(alpha * a.expm1(), a);
        });
      case Act::kSelu:
        return UnaryMap<T>(x, pool, [alpha, gamma](const auto& a) {
          return gamma * (a > T(0)).select(a, alpha * a.exp() - alpha);
        });
      case Act::kCelu:
        return UnaryMap<T>(x, pool, [alpha](const auto& a) {
          return a.max(T(0)) + (alpha * (a / alpha).expm1()).min(T(0));
        });
      case Act::kSoftplus:
        return UnaryMap<T>(x, pool, [](const auto& a) { return Softplus(a); });
      case Act::kSoftsign:
        return UnaryMap<T>(x, pool,
                           [](const auto& a) { return a / (T(1) + a.abs()); });
      case Act::kMish:
        return UnaryMap<T>(
            x, pool, [](const auto& a) { return a * Softplus(a).tanh(); });
      case Act::kThresholdedRelu:
        return UnaryMap<T>(x, pool, [alpha](const auto& a) {
          return (a > alpha).select(a, T(0));
        });
    }
    return Tensor();
  }

  Act act_ = Act::kElu;
  float alpha_ = 0, beta_ = 0, gamma_ = 0;
};

// ------------------------------------------------------------------ Shrink

// y = x + bias below -lambd, x - bias above lambd, else 0; for every number
// type (computed in double, then converted back like ONNX Runtime).
class ShrinkKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ShrinkKernel>(new ShrinkKernel);
    k->bias_ = info.Float("bias", 0.0f);
    k->lambd_ = info.Float("lambd", 0.5f);
    QUANTD_RETURN_IF_ERROR(RequireTypes(info, 0, NumberTypes{}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    return DispatchImpl(
        x.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>) {
            const T lambd = lambd_, bias = bias_;
            (*ctx.outputs)[0] =
                UnaryMap<T>(x, ctx.pool, [lambd, bias](const auto& a) {
                  return (a < -lambd)
                      .select(a + bias, (a > lambd).select(a - bias, T(0)));
                });
          } else {
            const double lambd = lambd_, bias = bias_;
            (*ctx.outputs)[0] =
                UnaryMap<T>(x, ctx.pool, [lambd, bias](const auto& a) {
                  return a.unaryExpr([lambd, bias](T v) {
                    const double d = static_cast<double>(v);
                    // Saturating: d +- bias may leave T's range.
                    return d < -lambd  ? FloatToInteger<T>(d + bias)
                           : d > lambd ? FloatToInteger<T>(d - bias)
                                       : T(0);
                  });
                });
          }
          return absl::OkStatus();
        },
        NumberTypes{});
  }

 private:
  float bias_ = 0, lambd_ = 0.5f;
};

// ------------------------------------------------------------------- PRelu

struct PReluOp {
  template <typename T>
  using Out = T;
  template <typename A, typename B>
  static auto Apply(const A& a, const B& slope) {
    using T = typename A::Scalar;
    if constexpr (std::is_unsigned_v<T>) {
      return a;  // Never negative.
    } else {
      return (a < T(0)).select(a * slope, a);
    }
  }
};

using PReluTypes =
    TypeList<float, double, int64_t, int32_t, uint64_t, uint32_t>;

// y = x < 0 ? slope * x : x, the slope broadcast to x's shape
// (unidirectionally, since opset 7).
class PReluKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() != 2) return info.Invalid("needs 2 inputs");
    QUANTD_RETURN_IF_ERROR(RequireTypes(info, 0, PReluTypes{}));
    QUANTD_RETURN_IF_ERROR(RequireTypes(info, 1, PReluTypes{}));
    return std::unique_ptr<Kernel>(new PReluKernel);
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& slope = ctx.in(1);
    if (x.dtype() != slope.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PRelu's slope is ", DataTypeName(slope.dtype()),
                       ", its input ", DataTypeName(x.dtype())));
    }
    const std::vector<int64_t> shapes[2] = {x.shape(), slope.shape()};
    absl::StatusOr<std::vector<int64_t>> shape = BroadcastShapes(shapes);
    if (!shape.ok() || *shape != x.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PRelu's slope of shape ", ShapeString(slope.shape()),
          " does not broadcast to its input's shape ", ShapeString(x.shape())));
    }
    return DispatchImpl(
        x.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          Tensor out(x.dtype(), x.shape());
          BinaryBroadcast<PReluOp, T>(x, slope, &out, ctx.pool);
          (*ctx.outputs)[0] = std::move(out);
          return absl::OkStatus();
        },
        PReluTypes{});
  }
};

// ------------------------------------------------------ LogSoftmax, Hardmax

// Along one axis: before opset 13 the input is coerced to 2-D at `axis`
// (default 1) and the op runs over each row of the flattened trailing dims;
// from 13 it runs along `axis` alone (default -1).
class AxisKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<AxisKernel>(new AxisKernel);
    k->hardmax_ = info.op() == "Hardmax";
    k->coerce_2d_ = info.opset() < 13;
    k->axis_ = info.Int("axis", k->coerce_2d_ ? 1 : -1);
    const int rank = info.input_rank(0);
    if (rank >= 0) {
      absl::StatusOr<int> axis = NormalizeAxis(k->axis_, std::max(rank, 1));
      if (!axis.ok()) return info.Invalid(std::string(axis.status().message()));
    }
    QUANTD_RETURN_IF_ERROR(RequireTypes(info, 0, FloatTypes{}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_ASSIGN_OR_RETURN(int axis,
                            NormalizeAxis(axis_, std::max(x.rank(), 1)));
    const auto& sh = x.shape();
    int64_t outer = 1, len = 1, inner = 1;
    for (int i = 0; i < axis && i < x.rank(); ++i) outer *= sh[i];
    if (coerce_2d_) {
      for (int i = axis; i < x.rank(); ++i) len *= sh[i];
    } else {
      len = x.rank() == 0 ? 1 : sh[axis];
      for (int i = axis + 1; i < x.rank(); ++i) inner *= sh[i];
    }
    return DispatchImpl(
        x.dtype(),
        [&](auto tag) {
          using T = decltype(tag);
          Tensor y(x.dtype(), sh);
          // An empty line has no maximum to subtract.
          if (y.size() == 0) {
            (*ctx.outputs)[0] = std::move(y);
            return absl::OkStatus();
          }
          const T* in = x.data<T>();
          T* out = y.mutable_data<T>();
          const int64_t grain = std::max<int64_t>(
              1, kElementwiseGrain / std::max<int64_t>(len * inner, 1));
          ParallelRange(ctx.pool, outer, grain, [&](int64_t b, int64_t e) {
            for (int64_t o = b; o < e; ++o) {
              for (int64_t j = 0; j < inner; ++j) {
                const int64_t base = o * len * inner + j;
                if (hardmax_) {
                  HardmaxLine(in + base, inner, len, out + base);
                } else {
                  LogSoftmaxLine(in + base, inner, len, out + base);
                }
              }
            }
          });
          (*ctx.outputs)[0] = std::move(y);
          return absl::OkStatus();
        },
        FloatTypes{});
  }

 private:
  using Stride = Eigen::InnerStride<Eigen::Dynamic>;

  // y = x - max - log(sum(exp(x - max))): exact for large inputs.
  template <typename T>
  static void LogSoftmaxLine(const T* x, int64_t stride, int64_t n, T* y) {
    Eigen::Map<const Arr<T>, 0, Stride> xs(x, n, Stride(stride));
    Eigen::Map<Arr<T>, 0, Stride> ys(y, n, Stride(stride));
    const T mx = xs.maxCoeff();
    const T lse = std::log((xs - mx).exp().sum());
    ys = xs - mx - lse;
  }

  // One-hot of the first maximum.
  template <typename T>
  static void HardmaxLine(const T* x, int64_t stride, int64_t n, T* y) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (x[i * stride] > x[best * stride]) best = i;
    }
    for (int64_t i = 0; i < n; ++i) y[i * stride] = i == best ? T(1) : T(0);
  }

  bool hardmax_ = false;
  bool coerce_2d_ = false;
  int64_t axis_ = -1;
};

// ---------------------------------------------------------------- CastLike

// Cast to the element type of the second input (whose values are unused).
class CastLikeKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() != 2) return info.Invalid("needs 2 inputs");
    // Opset 19's saturate only changes casts to the 8-bit floats, which are
    // refused below.
    if (info.opset() >= 19) info.Int("saturate", 1);
    for (int i = 0; i < 2; ++i) {
      const int32_t t = info.input_type(i);
      if (t != 0 && !CastableType(t)) return info.RequireType(i, {});
    }
    info.set_output_type(0, info.input_type(1));
    return std::unique_ptr<Kernel>(new CastLikeKernel);
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    QUANTD_ASSIGN_OR_RETURN((*ctx.outputs)[0],
                            CastTensor(ctx.in(0), ctx.in(1).dtype(), ctx.pool));
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterActivationOps(OpRegistry* r) {
  for (const char* op :
       {"HardSigmoid", "HardSwish", "Gelu", "Elu", "Selu", "Celu", "Softplus",
        "Softsign", "Mish", "ThresholdedRelu"}) {
    r->Register(op, &ActivationKernel::Create);
  }
  r->Register("Shrink", &ShrinkKernel::Create);
  r->Register("PRelu", &PReluKernel::Create);
  r->Register("LogSoftmax", &AxisKernel::Create);
  r->Register("Hardmax", &AxisKernel::Create);
  r->Register("CastLike", &CastLikeKernel::Create);
}

}  // namespace quantd::executor
