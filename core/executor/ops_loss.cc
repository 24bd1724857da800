// Losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), the signal
// windows (HannWindow, HammingWindow, BlackmanWindow) and Det.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/base/checked_count.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/cast.h"
#include "core/executor/elementwise.h"
#include "core/executor/kernel.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

// ------------------------------------------------------------------ losses

enum class Reduction { kNone, kSum, kMean };

// The shapes of a loss: input [N, C, d1..dk] seen as [N, C, D], target
// [N, d1..dk].
struct LossDims {
  int64_t n = 0, c = 0, d = 1;
};

absl::StatusOr<LossDims> CheckLossShapes(const Tensor& x, const Tensor& target,
                                         const Tensor* weight) {
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the input must be [N, C, d1, ..., dk], got shape ",
                     ShapeString(x.shape())));
  }
  std::vector<int64_t> want = {x.dim(0)};
  for (int i = 2; i < x.rank(); ++i) want.push_back(x.dim(i));
  if (target.shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the target's shape ", ShapeString(target.shape()),
        " does not match the input's shape ", ShapeString(x.shape()),
        " (expected ", ShapeString(want), ")"));
  }
  if (target.dtype() != TP::INT32 && target.dtype() != TP::INT64) {
    return absl::UnimplementedError(
        absl::StrCat("the target must be INT32 or INT64, got ",
                     DataTypeName(target.dtype())));
  }
  if (weight != nullptr) {
    if (weight->dtype() != x.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the weight is ", DataTypeName(weight->dtype()),
                       ", the input ", DataTypeName(x.dtype())));
    }
    if (weight->shape() != std::vector<int64_t>{x.dim(1)}) {
      return absl::InvalidArgumentError(
          absl::StrCat("the weight's shape ", ShapeString(weight->shape()),
                       " is not [C] for C = ", x.dim(1)));
    }
  }
  LossDims dims;
  dims.n = x.dim(0);
  dims.c = x.dim(1);
  for (int i = 2; i < x.rank(); ++i) dims.d *= x.dim(i);
  return dims;
}

// The negative log-likelihood of log-probabilities `x` ([N, C, D]) picking
// `target` ([N, D]), scaled by weight[target] when there is a weight; a
// target equal to ignore_index contributes nothing (not even to the mean's
// divisor). Sums accumulate in double.
template <typename T, typename I>
absl::Status Nll(const T* x, const I* target, const T* weight,
                 const LossDims& dims, bool has_ignore, int64_t ignore_index,
                 Reduction reduction, const std::vector<int64_t>& target_shape,
                 Tensor* out) {
  Tensor y;
  T* py = nullptr;
  if (reduction == Reduction::kNone) {
    y = Tensor(TypeOf<T>::value, target_shape);
    py = y.mutable_data<T>();
  }
  double sum = 0, weight_sum = 0;
  for (int64_t i = 0; i < dims.n; ++i) {
    for (int64_t j = 0; j < dims.d; ++j) {
      const int64_t at = i * dims.d + j;
      const int64_t t = static_cast<int64_t>(target[at]);
      if (has_ignore && t == ignore_index) {
        if (py != nullptr) py[at] = T(0);
        continue;
      }
      if (t < 0 || t >= dims.c) {
        return absl::InvalidArgumentError(absl::StrCat(
            "target ", t, " at flat index ", at, " is outside [0, ", dims.c,
            ")",
            has_ignore ? absl::StrCat(" and is not ignore_index ", ignore_index)
                       : std::string()));
      }
      const double w = weight != nullptr ? static_cast<double>(weight[t]) : 1;
      const double loss =
          -static_cast<double>(x[(i * dims.c + t) * dims.d + j]) * w;
      if (py != nullptr) py[at] = static_cast<T>(loss);
      sum += loss;
      weight_sum += w;
    }
  }
  if (reduction == Reduction::kSum) {
    y = Tensor::Scalar<T>(static_cast<T>(sum));
  } else if (reduction == Reduction::kMean) {
    // As the spec says: over the summed weights of the targets not ignored
    // (their count without a weight), so 0 / 0 = NaN when all are ignored.
    y = Tensor::Scalar<T>(static_cast<T>(sum / weight_sum));
  }
  *out = std::move(y);
  return absl::OkStatus();
}

// log_softmax of x ([N, C, D]) along C, computed in double per column.
template <typename T>
void LogSoftmaxAlongC(const T* x, const LossDims& dims, T* y) {
  for (int64_t i = 0; i < dims.n; ++i) {
    for (int64_t j = 0; j < dims.d; ++j) {
      const int64_t base = i * dims.c * dims.d + j;
      double mx = -INFINITY;
      for (int64_t k = 0; k < dims.c; ++k) {
        mx = std::max(mx, static_cast<double>(x[base + k * dims.d]));
      }
      double s = 0;
      for (int64_t k = 0; k < dims.c; ++k) {
        s += std::exp(static_cast<double>(x[base + k * dims.d]) - mx);
      }
      const double lse = mx + std::log(s);
      for (int64_t k = 0; k < dims.c; ++k) {
        y[base + k * dims.d] =
            static_cast<T>(static_cast<double>(x[base + k * dims.d]) - lse);
      }
    }
  }
}

// NegativeLogLikelihoodLoss (input: log-probabilities) and
// SoftmaxCrossEntropyLoss (input: scores; optional second output log_prob).
class LossKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<LossKernel>(new LossKernel);
    k->softmax_ = info.op() == "SoftmaxCrossEntropyLoss";
    if (info.opset() < 12) {
      return info.Invalid(absl::StrCat(
          info.op(), " needs opset 12 or later, the model has ", info.opset()));
    }
    const std::string reduction = info.String("reduction", "mean");
    if (reduction == "none") {
      k->reduction_ = Reduction::kNone;
    } else if (reduction == "sum") {
      k->reduction_ = Reduction::kSum;
    } else if (reduction == "mean") {
      k->reduction_ = Reduction::kMean;
    } else {
      return info.Invalid(absl::StrCat(
          "reduction must be 'none', 'sum' or 'mean', got '", reduction, "'"));
    }
    // Without the attribute no target is ignored.
    k->has_ignore_ = info.HasAttr("ignore_index");
    k->ignore_index_ = info.Int("ignore_index", 0);
    if (info.num_inputs() < 2 || info.num_inputs() > 3) {
      return info.Invalid("needs 2 or 3 inputs (input, target, weight)");
    }
    if (info.num_outputs() > (k->softmax_ ? 2 : 1)) {
      return info.Invalid(k->softmax_ ? "has at most 2 outputs"
                                      : "has exactly 1 output");
    }
    const int rank = info.input_rank(0);
    if (rank >= 0 && rank < 2) {
      return info.Invalid(absl::StrCat(
          "the input must have rank 2 or more ([N, C, d1, ..., dk]), got ",
          rank));
    }
    absl::Status s = RequireTypes(info, 0, FloatTypes{});
    if (s.ok()) s = info.RequireType(1, {TP::INT32, TP::INT64});
    if (s.ok() && info.has_input(2)) s = RequireTypes(info, 2, FloatTypes{});
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& target = ctx.in(1);
    const Tensor* weight = ctx.has(2) ? &ctx.in(2) : nullptr;
    QUANTD_ASSIGN_OR_RETURN(LossDims dims, CheckLossShapes(x, target, weight));
    return Dispatch<float, double>(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* logp = x.data<T>();
      Tensor log_prob;
      if (softmax_) {
        log_prob = Tensor(x.dtype(), x.shape());
        LogSoftmaxAlongC(x.data<T>(), dims, log_prob.mutable_data<T>());
        logp = log_prob.data<T>();
      }
      const T* w = weight != nullptr ? weight->data<T>() : nullptr;
      absl::Status s = Dispatch<int32_t, int64_t>(target.dtype(), [&](auto i) {
        using I = decltype(i);
        return Nll<T, I>(logp, target.data<I>(), w, dims, has_ignore_,
                         ignore_index_, reduction_, target.shape(),
                         &(*ctx.outputs)[0]);
      });
      if (!s.ok()) return s;
      if (softmax_ && ctx.outputs->size() > 1) {
        (*ctx.outputs)[1] = std::move(log_prob);
      }
      return absl::OkStatus();
    });
  }

 private:
  bool softmax_ = false;
  Reduction reduction_ = Reduction::kMean;
  bool has_ignore_ = false;
  int64_t ignore_index_ = 0;
};

// ----------------------------------------------------------------- windows

// A window is a buffer the size of its input's value: more samples than
// this (far beyond any STFT frame) is refused rather than allocated.
constexpr int64_t kMaxWindowSize = int64_t{1} << 24;

enum class Window { kHann, kHamming, kBlackman };

// Generalized cosine windows: y[k] = sum_m (-1)^m a_m cos(2 pi m k / N), N
// the size when periodic, else size - 1 (so a symmetric window of size 1 is
// 0 / 0 = NaN, as the spec's function body computes it).
class WindowKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<WindowKernel>(new WindowKernel);
    if (info.opset() < 17) {
      return info.Invalid(absl::StrCat(
          info.op(), " needs opset 17 or later, the model has ", info.opset()));
    }
    k->window_ = info.op() == "HannWindow"      ? Window::kHann
                 : info.op() == "HammingWindow" ? Window::kHamming
                                                : Window::kBlackman;
    const int64_t periodic = info.Int("periodic", 1);
    if (periodic != 0 && periodic != 1) {
      return info.Invalid(
          absl::StrCat("periodic must be 0 or 1, got ", periodic));
    }
    k->periodic_ = periodic == 1;
    const int64_t out = info.Int("output_datatype", TP::FLOAT);
    // The spec's output types are the numbers; STRING, BOOL and the 8-bit
    // floats are not.
    if (out < 0 || out > INT32_MAX || out == TP::BOOL ||
        !CastableType(static_cast<int32_t>(out))) {
      return info.UnsupportedAttr("output_datatype",
                                  out >= 0 && out <= INT32_MAX
                                      ? DataTypeName(static_cast<int32_t>(out))
                                      : absl::StrCat(out));
    }
    k->out_type_ = static_cast<int32_t>(out);
    info.set_output_type(0, k->out_type_);
    if (info.num_inputs() != 1) return info.Invalid("needs 1 input (size)");
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::INT32, TP::INT64}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& size_in = ctx.in(0);
    if (size_in.dtype() != TP::INT32 && size_in.dtype() != TP::INT64) {
      return absl::UnimplementedError(absl::StrCat(
          "size must be INT32 or INT64, got ", DataTypeName(size_in.dtype())));
    }
    if (size_in.size() != 1 || size_in.rank() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size must be a scalar, got shape ", ShapeString(size_in.shape())));
    }
    const int64_t size = size_in.IntAt(0);
    if (size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("size must not be negative, got ", size));
    }
    if (size > kMaxWindowSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("size ", size, " is more than the ", kMaxWindowSize,
                       " samples a window may have"));
    }
    double a[3] = {0, 0, 0};
    switch (window_) {
      case Window::kHann:
        a[0] = 0.5;
        a[1] = 0.5;
        break;
      case Window::kHamming:
        a[0] = 25.0 / 46.0;
        a[1] = 1 - a[0];
        break;
      case Window::kBlackman:
        a[0] = 0.42;
        a[1] = 0.5;
        a[2] = 0.08;
        break;
    }
    const double n = static_cast<double>(periodic_ ? size : size - 1);
    Tensor y(TP::DOUBLE, {size});
    double* py = y.mutable_data<double>();
    for (int64_t k = 0; k < size; ++k) {
      const double phase = 2 * M_PI * static_cast<double>(k) / n;
      py[k] = a[0] - a[1] * std::cos(phase) + a[2] * std::cos(2 * phase);
    }
    QUANTD_ASSIGN_OR_RETURN((*ctx.outputs)[0],
                            CastTensor(y, out_type_, ctx.pool));
    return absl::OkStatus();
  }

 private:
  Window window_ = Window::kHann;
  bool periodic_ = true;
  int32_t out_type_ = TP::FLOAT;
};

// --------------------------------------------------------------------- Det

// The determinant of an m x m row-major matrix by LU decomposition with
// partial pivoting, in double whatever T is.
template <typename T>
double Determinant(const T* a, int64_t m, std::vector<double>* scratch) {
  std::vector<double>& lu = *scratch;
  lu.assign(a, a + m * m);
  double det = 1;
  for (int64_t k = 0; k < m; ++k) {
    int64_t pivot = k;
    double best = std::abs(lu[k * m + k]);
    for (int64_t r = k + 1; r < m; ++r) {
      const double v = std::abs(lu[r * m + k]);
      if (v > best) {
        best = v;
        pivot = r;
      }
    }
    if (best == 0) return 0;  // A zero column below the diagonal: singular.
    if (pivot != k) {
      std::swap_ranges(lu.begin() + k * m, lu.begin() + (k + 1) * m,
                       lu.begin() + pivot * m);
      det = -det;
    }
    const double p = lu[k * m + k];
    det *= p;
    for (int64_t r = k + 1; r < m; ++r) {
      const double f = lu[r * m + k] / p;
      if (f == 0) continue;
      for (int64_t c = k + 1; c < m; ++c) lu[r * m + c] -= f * lu[k * m + c];
    }
  }
  return det;
}

class DetKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.opset() < 11) {
      return info.Invalid(absl::StrCat(
          "Det needs opset 11 or later, the model has ", info.opset()));
    }
    if (info.num_inputs() != 1) return info.Invalid("needs 1 input");
    const int rank = info.input_rank(0);
    if (rank >= 0 && rank < 2) {
      return info.Invalid(
          absl::StrCat("the input must be [..., M, M], got rank ", rank));
    }
    QUANTD_RETURN_IF_ERROR(RequireTypes(info, 0, FloatTypes{}));
    return std::unique_ptr<Kernel>(new DetKernel);
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const int rank = x.rank();
    if (rank < 2 || x.dim(rank - 1) != x.dim(rank - 2)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the input must be [..., M, M], got shape ", ShapeString(x.shape())));
    }
    const int64_t m = x.dim(rank - 1);
    std::vector<int64_t> out_shape(x.shape().begin(), x.shape().end() - 2);
    return Dispatch<float, double>(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      Tensor y(x.dtype(), out_shape);
      const int64_t batch = y.size();
      const T* in = x.data<T>();
      T* out = y.mutable_data<T>();
      const int64_t work = SaturatingMul(SaturatingMul(m, m), m);
      const int64_t grain =
          std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(work, 1));
      ParallelRange(ctx.pool, batch, grain, [&](int64_t b, int64_t e) {
        std::vector<double> scratch;
        for (int64_t i = b; i < e; ++i) {
          out[i] = static_cast<T>(Determinant(in + i * m * m, m, &scratch));
        }
      });
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterLossOps(OpRegistry* r) {
  r->Register("NegativeLogLikelihoodLoss", &LossKernel::Create);
  r->Register("SoftmaxCrossEntropyLoss", &LossKernel::Create);
  r->Register("HannWindow", &WindowKernel::Create);
  r->Register("HammingWindow", &WindowKernel::Create);
  r->Register("BlackmanWindow", &WindowKernel::Create);
  r->Register("Det", &DetKernel::Create);
}

}  // namespace quantd::executor
