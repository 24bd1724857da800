// Reductions: ReduceSum, ReduceMean, ReduceProd, ReduceMax, ReduceMin (one
// kernel: axes as an attribute or, from the opset that moved them, as input
// 1, keepdims, noop_with_empty_axes) and ArgMax / ArgMin.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/executor/broadcast.h"
#include "core/executor/kernel.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

template <typename T>
using CMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using MMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

enum class Reduce { kSum, kMean, kProd, kMax, kMin };

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

// y[i] = y[i] (op) x[i] for n values.
template <typename T>
void FoldRow(Reduce kind, const T* x, int64_t n, T* y) {
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
      absl::Status s = info.RequireType(1, {TP::INT64, TP::INT32});
      if (!s.ok()) return s;
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

class ReduceKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ReduceKernel>(new ReduceKernel);
    const std::string& op = info.op();
    k->kind_ = op == "ReduceSum"    ? Reduce::kSum
               : op == "ReduceMean" ? Reduce::kMean
               : op == "ReduceProd" ? Reduce::kProd
               : op == "ReduceMax"  ? Reduce::kMax
                                    : Reduce::kMin;
    absl::Status s =
        k->axes_.Read(info, k->kind_ == Reduce::kSum ? int64_t{13} : 18);
    if (!s.ok()) return s;
    switch (k->kind_) {
      case Reduce::kMean:
        s = info.RequireType(0, {TP::FLOAT, TP::DOUBLE});
        break;
      case Reduce::kSum:
      case Reduce::kProd:
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
    absl::StatusOr<ReducePlan> plan = axes_.Resolve(ctx, x.shape());
    if (!plan.ok()) return plan.status();
    if (plan->noop) {
      (*ctx.outputs)[0] = x;
      return absl::OkStatus();
    }
    auto run = [&](auto tag) -> absl::Status {
      using T = decltype(tag);
      (*ctx.outputs)[0] = Fold<T>(x, *plan);
      return absl::OkStatus();
    };
    switch (kind_) {
      case Reduce::kMean:
        return Dispatch<float, double>(x.dtype(), run);
      case Reduce::kSum:
      case Reduce::kProd:
        return Dispatch<float, double, int32_t, int64_t>(x.dtype(), run);
      default:
        return Dispatch<float, double, int32_t, int64_t, int8_t, uint8_t, bool>(
            x.dtype(), run);
    }
  }

 private:
  template <typename T>
  Tensor Fold(const Tensor& x, const ReducePlan& plan) const {
    Tensor y(x.dtype(), plan.kept);
    T* out = y.mutable_data<T>();
    std::fill(out, out + y.size(), ReduceIdentity<T>(kind_));
    const T* in = x.data<T>();
    // Walk the input with the kept-dims output broadcast along it: each run
    // either folds into one output value or folds a row onto a row.
    const std::vector<int64_t> shapes[2] = {x.shape(), plan.kept};
    BroadcastWalk walk(x.shape(), shapes);
    const int64_t n = walk.inner();
    const bool row = walk.inner_stride(1) != 0;
    walk.ForEachRun(0, walk.runs(), [&](int64_t o, const int64_t* off) {
      if (row) {
        FoldRow<T>(kind_, in + o, n, out + off[1]);
      } else {
        FoldRun<T>(kind_, in + o, n, out + off[1]);
      }
    });
    if constexpr (std::is_floating_point_v<T>) {
      if (kind_ == Reduce::kMean) {
        // The mean of nothing is NaN (0 / 0).
        const T inv = plan.count > 0 ? T(1) / plan.count
                                     : std::numeric_limits<T>::quiet_NaN();
        for (int64_t i = 0; i < y.size(); ++i) out[i] *= inv;
      }
    }
    return y.Reshaped(plan.out_shape);
  }

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
    absl::Status s = info.RequireType(
        0, {TP::FLOAT, TP::DOUBLE, TP::INT32, TP::INT64, TP::INT8, TP::UINT8});
    if (!s.ok()) return s;
    info.set_output_type(0, TP::INT64);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    absl::StatusOr<int> axis = NormalizeAxis(axis_, x.rank());
    if (!axis.ok()) return axis.status();
    const auto& sh = x.shape();
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < *axis; ++i) outer *= sh[i];
    for (int i = *axis + 1; i < x.rank(); ++i) inner *= sh[i];
    const int64_t len = sh[*axis];
    if (len == 0 && outer * inner > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot take the ", max_ ? "ArgMax" : "ArgMin", " of an empty axis ",
          *axis, " of shape ", ShapeString(sh)));
    }
    std::vector<int64_t> out_shape;
    for (int i = 0; i < x.rank(); ++i) {
      if (i != *axis) {
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
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax", "ReduceMin"}) {
    r->Register(op, &ReduceKernel::Create);
  }
  r->Register("ArgMax", &ArgKernel::Create);
  r->Register("ArgMin", &ArgKernel::Create);
}

}  // namespace quantd::executor
