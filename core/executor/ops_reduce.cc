// Reductions: ReduceSum, ReduceMean, ReduceProd, ReduceMax, ReduceMin and
// the sums behind them, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum,
// ReduceLogSumExp (one kernel: axes as an attribute or, from the opset that
// moved them, as input 1, keepdims, noop_with_empty_axes) and ArgMax /
// ArgMin.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/executor/broadcast.h"
#include "core/executor/cast.h"
#include "core/executor/kernel.h"
#include "core/executor/wrapping.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

template <typename T>
using CMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using MMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// How values fold. The norms and log-sums are sums of mapped values (see
// ReduceKernel::Reduced), so they fold as kSum.
enum class Reduce { kSum, kMean, kProd, kMax, kMin };

// What a Reduce* op computes around its fold: y = post(fold(pre(x))).
enum class Op {
  kSum,
  kMean,
  kProd,
  kMax,
  kMin,
  kL1,         // sum |x|
  kL2,         // sqrt(sum x^2)
  kSumSquare,  // sum x^2
  kLogSum,     // log(sum x)
  kLogSumExp,  // log(sum exp(x - m)) + m, m the max (for range)
};

template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// The value a reduction over no elements yields (ONNX: 0 for sums, 1 for
// products, -inf / +inf for max / min, or the type's lowest / highest value
// where it has no infinity).
template <typename T>
T ReduceIdentity(Reduce kind) {
  using L = std::numeric_limits<T>;
  switch (kind) {
    case Reduce::kProd:
      return T(1);
    case Reduce::kMax:
      return L::has_infinity ? -L::infinity() : L::lowest();
    case Reduce::kMin:
      return L::has_infinity ? L::infinity() : L::max();
    default:
      return T(0);
  }
}

// Max / min of two values, NaN winning as in numpy's maximum / minimum
// (which the ONNX reference implementation uses).
template <typename T>
T Pick(Reduce kind, T a, T b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  return kind == Reduce::kMax ? (a < b ? b : a) : (b < a ? b : a);
}

// Integer sums and products wrap (numpy), which Eigen's arithmetic on the
// type (or on int, for the small types) does not guarantee: true when `kind`
// folds values of T that way.
template <typename T>
bool FoldsWrapping(Reduce kind) {
  return std::is_integral_v<T> && !std::is_same_v<T, bool> &&
         (kind == Reduce::kSum || kind == Reduce::kMean ||
          kind == Reduce::kProd);
}

template <typename T>
T FoldWrapping(Reduce kind, T acc, T v) {
  return kind == Reduce::kProd ? ValueMul(acc, v) : ValueAdd(acc, v);
}

// y[i] = y[i] (op) x[i] for n values.
template <typename T>
void FoldRow(Reduce kind, const T* x, int64_t n, T* y) {
  if (FoldsWrapping<T>(kind)) {
    for (int64_t i = 0; i < n; ++i) y[i] = FoldWrapping(kind, y[i], x[i]);
    return;
  }
  if constexpr (std::is_same_v<T, bool>) {
    // Only max (any) and min (all) take BOOL.
    for (int64_t i = 0; i < n; ++i) y[i] = Pick(kind, y[i], x[i]);
  } else {
    MMap<T> out(y, n);
    CMap<T> in(x, n);
    switch (kind) {
      case Reduce::kSum:
      case Reduce::kMean:
        out += in;
        break;
      case Reduce::kProd:
        out *= in;
        break;
      case Reduce::kMax:
        // (ArrayBase::max has no NaN-propagation parameter in Eigen 3.4.)
        out = out.binaryExpr(
            in, Eigen::internal::scalar_max_op<T, T, Eigen::PropagateNaN>());
        break;
      case Reduce::kMin:
        out = out.binaryExpr(
            in, Eigen::internal::scalar_min_op<T, T, Eigen::PropagateNaN>());
        break;
    }
  }
}

// *y = *y (op) x[0] (op) ... (op) x[n-1], n > 0.
template <typename T>
void FoldRun(Reduce kind, const T* x, int64_t n, T* y) {
  if (FoldsWrapping<T>(kind)) {
    for (int64_t i = 0; i < n; ++i) *y = FoldWrapping(kind, *y, x[i]);
    return;
  }
  if constexpr (std::is_same_v<T, bool>) {
    for (int64_t i = 0; i < n; ++i) *y = Pick(kind, *y, x[i]);
  } else {
    CMap<T> in(x, n);
    switch (kind) {
      case Reduce::kSum:
      case Reduce::kMean:
        *y += in.sum();
        break;
      case Reduce::kProd:
        *y *= in.prod();
        break;
      case Reduce::kMax:
        *y = Pick(kind, *y, in.template maxCoeff<Eigen::PropagateNaN>());
        break;
      case Reduce::kMin:
        *y = Pick(kind, *y, in.template minCoeff<Eigen::PropagateNaN>());
        break;
    }
  }
}

// The reduced axes of one run: the input shape with every reduced dim set to
// 1 (`kept`), the output shape (`kept` without those dims unless keepdims)
// and how many inputs fold into each output. `noop` when the node asked for
// nothing to be reduced (noop_with_empty_axes with empty axes).
struct ReducePlan {
  bool noop = false;
  std::vector<int64_t> kept;
  std::vector<int64_t> out_shape;
  int64_t count = 1;
};

// How a Reduce* node names its axes, read at Create.
class ReduceAxes {
 public:
  // `input_opset` is the first opset that takes axes as input 1 (13 for
  // ReduceSum, 18 for the others) and adds noop_with_empty_axes.
  absl::Status Read(NodeInfo& info, int64_t input_opset) {
    keepdims_ = info.Int("keepdims", 1) != 0;
    if (info.opset() >= input_opset) {
      from_input_ = true;
      noop_with_empty_axes_ = info.Int("noop_with_empty_axes", 0) != 0;
      if (info.num_inputs() > 2) return info.Invalid("takes at most 2 inputs");
      QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::INT64, TP::INT32}));
      if (const Tensor* c = info.constant_input(1)) {
        axes_ = c->ToInt64Vector();
        constant_ = true;
      }
    } else {
      if (info.num_inputs() > 1) {
        return info.Invalid(absl::StrCat("takes axes as an attribute at opset ",
                                         info.opset(), ", not as an input"));
      }
      axes_ = info.Ints("axes");
      constant_ = true;
    }
    if (constant_ && info.input_rank(0) >= 0) {
      absl::StatusOr<ReducePlan> plan =
          Plan(std::vector<int64_t>(info.input_rank(0), 1), axes_);
      if (!plan.ok()) return info.Invalid(std::string(plan.status().message()));
    }
    return absl::OkStatus();
  }

  // The plan for input shape `shape` in this run.
  absl::StatusOr<ReducePlan> Resolve(const KernelContext& ctx,
                                     const std::vector<int64_t>& shape) const {
    if (!from_input_ || constant_ || !ctx.has(1)) return Plan(shape, axes_);
    const Tensor& a = ctx.in(1);
    if (a.dtype() != TP::INT64 && a.dtype() != TP::INT32) {
      return absl::InvalidArgumentError(
          absl::StrCat("axes must be INT64, got ", DataTypeName(a.dtype())));
    }
    if (a.rank() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("axes must be 1-D, got shape ", ShapeString(a.shape())));
    }
    return Plan(shape, a.ToInt64Vector());
  }

 private:
  absl::StatusOr<ReducePlan> Plan(const std::vector<int64_t>& shape,
                                  const std::vector<int64_t>& axes) const {
    ReducePlan p;
    const int rank = static_cast<int>(shape.size());
    if (axes.empty() && noop_with_empty_axes_) {
      p.noop = true;
      p.kept = p.out_shape = shape;
      return p;
    }
    // Empty axes (without noop_with_empty_axes) reduce every dim.
    std::vector<bool> reduce(rank, axes.empty());
    for (int64_t a : axes) {
      absl::StatusOr<int> ax = NormalizeAxis(a, rank);
      if (!ax.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "axes [", absl::StrJoin(axes, ","), "]: ", ax.status().message()));
      }
      reduce[*ax] = true;
    }
    p.kept = shape;
    for (int i = 0; i < rank; ++i) {
      if (reduce[i]) {
        p.count *= shape[i];
        p.kept[i] = 1;
        if (keepdims_) p.out_shape.push_back(1);
      } else {
        p.out_shape.push_back(shape[i]);
      }
    }
    return p;
  }

  std::vector<int64_t> axes_;
  bool from_input_ = false;
  bool constant_ = false;  // axes_ holds the axes of every run.
  bool keepdims_ = true;
  bool noop_with_empty_axes_ = false;
};

// The Reduce* ops by name.
const std::pair<const char*, Op> kReduceOps[] = {
    {"ReduceSum", Op::kSum},       {"ReduceMean", Op::kMean},
    {"ReduceProd", Op::kProd},     {"ReduceMax", Op::kMax},
    {"ReduceMin", Op::kMin},       {"ReduceL1", Op::kL1},
    {"ReduceL2", Op::kL2},         {"ReduceSumSquare", Op::kSumSquare},
    {"ReduceLogSum", Op::kLogSum}, {"ReduceLogSumExp", Op::kLogSumExp},
};

class ReduceKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ReduceKernel>(new ReduceKernel);
    for (const auto& [name, op] : kReduceOps) {
      if (info.op() == name) k->op_ = op;
    }
    switch (k->op_) {
      case Op::kMean:
        k->kind_ = Reduce::kMean;
        break;
      case Op::kProd:
        k->kind_ = Reduce::kProd;
        break;
      case Op::kMax:
        k->kind_ = Reduce::kMax;
        break;
      case Op::kMin:
        k->kind_ = Reduce::kMin;
        break;
      default:
        k->kind_ = Reduce::kSum;
        break;
    }
    // ReduceSum took axes as an input from opset 13, the others from 18.
    absl::Status s = k->axes_.Read(info, k->op_ == Op::kSum ? int64_t{13} : 18);
    if (!s.ok()) return s;
    switch (k->op_) {
      case Op::kMean:
      case Op::kLogSum:
      case Op::kLogSumExp:
        s = info.RequireType(0, {TP::FLOAT, TP::DOUBLE});
        break;
      case Op::kSum:
      case Op::kProd:
      case Op::kL1:
      case Op::kL2:
      case Op::kSumSquare:
        s = info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT32, TP::INT64});
        break;
      default:
        // INT8 / UINT8 since opset 12, BOOL since opset 20.
        s = info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT32, TP::INT64,
                                 TP::INT8, TP::UINT8, TP::BOOL});
        break;
    }
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_ASSIGN_OR_RETURN(ReducePlan plan, axes_.Resolve(ctx, x.shape()));
    // Reducing no axes leaves the basic folds' input unchanged; the mapped
    // ops still map each element (|x| for ReduceL1, x^2 for ReduceSumSquare,
    // ...), as in the ONNX reference.
    if (plan.noop && op_ <= Op::kMin) {
      (*ctx.outputs)[0] = x;
      return absl::OkStatus();
    }
    auto run = [&](auto tag) -> absl::Status {
      using T = decltype(tag);
      (*ctx.outputs)[0] = Reduced<T>(x, plan);
      return absl::OkStatus();
    };
    switch (op_) {
      case Op::kMean:
      case Op::kLogSum:
      case Op::kLogSumExp:
        return Dispatch<float, double>(x.dtype(), run);
      case Op::kSum:
      case Op::kProd:
      case Op::kL1:
      case Op::kL2:
      case Op::kSumSquare:
        return Dispatch<float, double, int32_t, int64_t>(x.dtype(), run);
      default:
        return Dispatch<float, double, int32_t, int64_t, int8_t, uint8_t, bool>(
            x.dtype(), run);
    }
  }

 private:
  // post(fold(pre(x))) for this op.
  template <typename T>
  Tensor Reduced(const Tensor& x, const ReducePlan& plan) const {
    // Create lets no BOOL reach a mapped op, nor integers a log-sum;
    // integers stay integers (L2 truncates the square root).
    if constexpr (!std::is_same_v<T, bool>) {
      auto square = [](T v) { return ValueMul(v, v); };
      auto abs = [](T v) { return ValueAbs(v); };
      // A wrapped integer sum of squares can be negative: its root is
      // NaN, which converts to 0.
      auto root = [](T v) {
        if constexpr (std::is_integral_v<T>) {
          return FloatToInteger<T>(std::sqrt(static_cast<double>(v)));
        } else {
          return std::sqrt(v);
        }
      };
      switch (op_) {
        case Op::kL1:
          return Fold<T>(Mapped<T>(x, abs), kind_, plan);
        case Op::kSumSquare:
          return Fold<T>(Mapped<T>(x, square), kind_, plan);
        case Op::kL2:
          return Mapped<T>(Fold<T>(Mapped<T>(x, square), kind_, plan), root);
        case Op::kLogSum:
          if constexpr (std::is_floating_point_v<T>) {
            return Mapped<T>(Fold<T>(x, kind_, plan),
                             [](T v) { return std::log(v); });
          }
          break;
        case Op::kLogSumExp:
          if constexpr (std::is_floating_point_v<T>) {
            return LogSumExp<T>(x, plan);
          }
          break;
        default:
          break;
      }
    }
    return Fold<T>(x, kind_, plan);
  }

  // f applied to every element of x.
  template <typename T, typename F>
  static Tensor Mapped(const Tensor& x, F f) {
    Tensor y(x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* out = y.mutable_data<T>();
    for (int64_t i = 0; i < x.size(); ++i) out[i] = f(in[i]);
    return y;
  }

  // log(sum(exp(x - m))) + m with m the max of each reduced set, so large
  // values do not overflow exp. An all -inf (or empty) set has no finite
  // max and shifts by 0: its result is log(0) = -inf.
  template <typename T>
  static Tensor LogSumExp(const Tensor& x, const ReducePlan& plan) {
    const Tensor mx = Fold<T>(x, Reduce::kMax, plan).Reshaped(plan.kept);
    const T* m = mx.data<T>();
    auto shift = [](T v) { return std::isfinite(v) ? v : T(0); };
    Tensor e(x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* ex = e.mutable_data<T>();
    const std::vector<int64_t> shapes[2] = {x.shape(), plan.kept};
    BroadcastWalk walk(x.shape(), shapes);
    const int64_t n = walk.inner();
    const bool row = walk.inner_stride(1) != 0;
    walk.ForEachRun(0, walk.runs(), [&](int64_t o, const int64_t* off) {
      for (int64_t i = 0; i < n; ++i) {
        ex[o + i] = std::exp(in[o + i] - shift(m[off[1] + (row ? i : 0)]));
      }
    });
    Tensor y = Fold<T>(e, Reduce::kSum, plan);
    T* out = y.mutable_data<T>();
    for (int64_t i = 0; i < y.size(); ++i)
      out[i] = std::log(out[i]) + shift(m[i]);
    return y;
  }

  template <typename T>
  static Tensor Fold(const Tensor& x, Reduce kind, const ReducePlan& plan) {
    Tensor y(x.dtype(), plan.kept);
    T* out = y.mutable_data<T>();
    std::fill(out, out + y.size(), ReduceIdentity<T>(kind));
    const T* in = x.data<T>();
    // Walk the input with the kept-dims output broadcast along it: each run
    // either folds into one output value or folds a row onto a row.
    const std::vector<int64_t> shapes[2] = {x.shape(), plan.kept};
    BroadcastWalk walk(x.shape(), shapes);
    const int64_t n = walk.inner();
    const bool row = walk.inner_stride(1) != 0;
    walk.ForEachRun(0, walk.runs(), [&](int64_t o, const int64_t* off) {
      if (row) {
        FoldRow<T>(kind, in + o, n, out + off[1]);
      } else {
        FoldRun<T>(kind, in + o, n, out + off[1]);
      }
    });
    if constexpr (std::is_floating_point_v<T>) {
      if (kind == Reduce::kMean) {
        // The mean of nothing is NaN (0 / 0).
        const T inv = plan.count > 0 ? T(1) / plan.count
                                     : std::numeric_limits<T>::quiet_NaN();
        for (int64_t i = 0; i < y.size(); ++i) out[i] *= inv;
      }
    }
    return y.Reshaped(plan.out_shape);
  }

  Op op_ = Op::kSum;
  Reduce kind_ = Reduce::kSum;
  ReduceAxes axes_;
};

// ---------------------------------------------------------- ArgMax, ArgMin

class ArgKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ArgKernel>(new ArgKernel);
    k->max_ = info.op() == "ArgMax";
    k->axis_ = info.Int("axis", 0);
    k->keepdims_ = info.Int("keepdims", 1) != 0;
    // select_last_index arrived at opset 12; earlier nodes must not have it.
    if (info.opset() >= 12) {
      k->select_last_ = info.Int("select_last_index", 0) != 0;
    }
    if (info.input_rank(0) >= 0) {
      absl::StatusOr<int> ax = NormalizeAxis(k->axis_, info.input_rank(0));
      if (!ax.ok()) return info.Invalid(std::string(ax.status().message()));
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(
        0, {TP::FLOAT, TP::DOUBLE, TP::INT32, TP::INT64, TP::INT8, TP::UINT8}));
    info.set_output_type(0, TP::INT64);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    const auto& sh = x.shape();
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i) outer *= sh[i];
    for (int i = axis + 1; i < x.rank(); ++i) inner *= sh[i];
    const int64_t len = sh[axis];
    if (len == 0 && outer * inner > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot take the ", max_ ? "ArgMax" : "ArgMin", " of an empty axis ",
          axis, " of shape ", ShapeString(sh)));
    }
    std::vector<int64_t> out_shape;
    for (int i = 0; i < x.rank(); ++i) {
      if (i != axis) {
        out_shape.push_back(sh[i]);
      } else if (keepdims_) {
        out_shape.push_back(1);
      }
    }
    Tensor y(TP::INT64, out_shape);
    int64_t* out = y.mutable_data<int64_t>();
    return Dispatch<float, double, int32_t, int64_t, int8_t, uint8_t>(
        x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* in = x.data<T>();
          for (int64_t o = 0; o < outer; ++o) {
            for (int64_t j = 0; j < inner; ++j) {
              const T* p = in + o * len * inner + j;
              int64_t best = 0;
              for (int64_t i = 1; i < len; ++i) {
                if (Better(p[i * inner], p[best * inner])) best = i;
              }
              out[o * inner + j] = best;
            }
          }
          (*ctx.outputs)[0] = std::move(y);
          return absl::OkStatus();
        });
  }

 private:
  // Whether v replaces the current best b. NaN is the extreme both ways, as
  // in numpy's argmax / argmin: the first NaN wins (the last with
  // select_last_index).
  template <typename T>
  bool Better(T v, T b) const {
    if (IsNan(b)) return select_last_ && IsNan(v);
    if (IsNan(v)) return true;
    if (v == b) return select_last_;
    return max_ ? v > b : v < b;
  }

  bool max_ = true;
  int64_t axis_ = 0;
  bool keepdims_ = true;
  bool select_last_ = false;
};

}  // namespace

void RegisterReduceOps(OpRegistry* r) {
  for (const auto& [name, op] : kReduceOps) {
    r->Register(name, &ReduceKernel::Create);
  }
  r->Register("ArgMax", &ArgKernel::Create);
  r->Register("ArgMin", &ArgKernel::Create);
}

}  // namespace quantd::executor
