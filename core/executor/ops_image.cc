// Image and normalisation kernels: Resize/Upsample, ConvTranspose,
// Depth/SpaceToDepth, Instance/Group/Lp/MeanVariance normalisation, the
// global pools other than GlobalAveragePool, and LpPool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/checked_count.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/gemm.h"
#include "core/executor/kernel.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

std::string Join(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

// Product of shape[from, to).
int64_t Prod(const std::vector<int64_t>& shape, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= shape[i];
  return p;
}

// =================================================================== Resize
//
// Every mode is separable (ONNX's reference interpolates one axis at a time,
// innermost first), so the kernel resizes one axis per pass with a table of
// taps per output coordinate, skipping axes whose table is the identity.

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize,
};
// kSimple is Upsample's and Resize-10's rounding: ceil when downsampling,
// else truncation.
enum class Rounding {
  kRoundPreferFloor,
  kRoundPreferCeil,
  kFloor,
  kCeil,
  kSimple
};
enum class KeepAspect { kStretch, kNotLarger, kNotSmaller };

// The taps of one axis: output x reads n inputs idx[x*n + j] with weights
// w[x*n + j], or is the extrapolation value when extrap[x].
struct AxisTaps {
  int64_t n = 1;
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<char> extrap;
};

struct ResizeParams {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  Rounding rounding = Rounding::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
};

double CubicWeight(double x, double a) {
  x = std::abs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// Taps for resizing a length-`in` axis to `out` at `scale`, with this
// axis's roi [roi0, roi1] (tf_crop_and_resize only).
AxisTaps MakeTaps(const ResizeParams& p, int64_t in, int64_t out, double scale,
                  double roi0, double roi1) {
  AxisTaps t;
  // ONNX's reference uses the real-valued output length scale * in.
  const double out_w = scale * static_cast<double>(in);
  double sa = 1;  // Filter stretch: antialiasing widens it when shrinking.
  if (p.mode == Mode::kNearest) {
    t.n = 1;
  } else {
    if (p.antialias) sa = std::min(scale, 1.0);
    const double radius = p.mode == Mode::kLinear ? 1 : 2;
    const int64_t start = static_cast<int64_t>(std::floor(-radius / sa)) + 1;
    t.n = 2 - 2 * start;
  }
  // Taps no memory could hold are what a Tensor of that shape is.
  if (out > 0 && t.n > (int64_t{1} << 36) / out) throw std::bad_alloc();
  t.idx.assign(out * t.n, 0);
  t.w.assign(out * t.n, 0);
  t.extrap.assign(out, 0);
  for (int64_t x = 0; x < out; ++x) {
    const double xd = static_cast<double>(x);
    double xo = 0;
    switch (p.coord) {
      case Coord::kHalfPixel:
        xo = (xd + 0.5) / scale - 0.5;
        break;
      case Coord::kHalfPixelSymmetric: {
        const double adjustment = static_cast<double>(out) / out_w;
        const double center = static_cast<double>(in) / 2;
        xo = center * (1 - adjustment) + (xd + 0.5) / scale - 0.5;
        break;
      }
      case Coord::kPytorchHalfPixel:
        xo = out > 1 ? (xd + 0.5) / scale - 0.5 : 0;
        break;
      case Coord::kAlignCorners:
        xo = out_w == 1 ? 0 : xd * (in - 1) / (out_w - 1);
        break;
      case Coord::kAsymmetric:
        xo = xd / scale;
        break;
      case Coord::kTfHalfPixelForNn:
        xo = (xd + 0.5) / scale;
        break;
      case Coord::kTfCropAndResize:
        xo = out_w == 1 ? (roi1 - roi0) * (in - 1) / 2
                        : xd * (roi1 - roi0) * (in - 1) / (out_w - 1);
        xo += roi0 * (in - 1);
        if (xo < 0 || xo > in - 1) {
          t.extrap[x] = 1;
          continue;
        }
        break;
    }
    int64_t* idx = t.idx.data() + x * t.n;
    double* w = t.w.data() + x * t.n;
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    if (p.mode == Mode::kNearest) {
      int64_t i = 0;
      const double fl = std::floor(xo);
      const double ratio = xo - fl;
      switch (p.rounding) {
        case Rounding::kSimple:
          i = scale < 1 ? static_cast<int64_t>(std::ceil(xo))
                        : static_cast<int64_t>(xo);
          break;
        case Rounding::kRoundPreferFloor:
          i = static_cast<int64_t>(ratio <= 0.5 ? fl : fl + 1);
          break;
        case Rounding::kRoundPreferCeil:
          i = static_cast<int64_t>(ratio < 0.5 ? fl : fl + 1);
          break;
        case Rounding::kFloor:
          i = static_cast<int64_t>(fl);
          break;
        case Rounding::kCeil:
          i = static_cast<int64_t>(std::ceil(xo));
          break;
      }
      idx[0] = clamp(i);
      w[0] = 1;
      continue;
    }
    // The reference takes the n nearest inputs with ties to the left: an
    // integral coordinate sits at ratio 1 of the input before it.
    int64_t x0 = static_cast<int64_t>(std::floor(xo));
    double ratio = xo - static_cast<double>(x0);
    if (ratio == 0) {
      x0 -= 1;
      ratio = 1;
    }
    const int64_t start = 1 - t.n / 2;
    double sum = 0;
    for (int64_t j = 0; j < t.n; ++j) {
      const double d = sa * (static_cast<double>(start + j) - ratio);
      w[j] = p.mode == Mode::kLinear ? std::max(0.0, 1 - std::abs(d))
                                     : CubicWeight(d, p.cubic_a);
      sum += w[j];
    }
    if (p.antialias && sum != 0) {
      for (int64_t j = 0; j < t.n; ++j) w[j] /= sum;
    }
    if (p.exclude_outside) {
      sum = 0;
      for (int64_t j = 0; j < t.n; ++j) {
        const int64_t i = x0 + start + j;
        if (i < 0 || i >= in) w[j] = 0;
        sum += w[j];
      }
      if (sum != 0) {
        for (int64_t j = 0; j < t.n; ++j) w[j] /= sum;
      }
    }
    for (int64_t j = 0; j < t.n; ++j) idx[j] = clamp(x0 + start + j);
  }
  return t;
}

// True when the taps copy the axis unchanged.
bool IsIdentity(const AxisTaps& t, int64_t in) {
  const int64_t out = static_cast<int64_t>(t.extrap.size());
  if (out != in) return false;
  for (int64_t x = 0; x < out; ++x) {
    if (t.extrap[x]) return false;
    double self = 0;
    for (int64_t j = 0; j < t.n; ++j) {
      const double w = t.w[x * t.n + j];
      if (t.idx[x * t.n + j] == x) {
        self += w;
      } else if (w != 0) {
        return false;
      }
    }
    if (self != 1) return false;
  }
  return true;
}

// in [outer, len, inner] -> out [outer, taps.out, inner].
template <typename T>
void ResizeAxis(const T* in, T* out, int64_t outer, int64_t len, int64_t inner,
                const AxisTaps& taps, double extrapolation, ThreadPool* pool) {
  const int64_t olen = static_cast<int64_t>(taps.extrap.size());
  const int64_t n = taps.n;
  const T ext = static_cast<T>(extrapolation);
  const bool gather = n == 1;
  // Weights in the element type (the reference rounds to it at the end).
  std::vector<T> w(taps.w.begin(), taps.w.end());
  ParallelRange(pool, outer * olen, std::max<int64_t>(1, 4096 / (inner * n)),
                [&](int64_t r0, int64_t r1) {
                  for (int64_t r = r0; r < r1; ++r) {
                    const int64_t o = r / olen, x = r % olen;
                    T* dst = out + r * inner;
                    if (taps.extrap[x]) {
                      std::fill_n(dst, inner, ext);
                      continue;
                    }
                    const T* src = in + o * len * inner;
                    const int64_t* ix = taps.idx.data() + x * n;
                    const T* wx = w.data() + x * n;
                    if (gather) {
                      std::copy_n(src + ix[0] * inner, inner, dst);
                      continue;
                    }
                    if (inner == 1) {
                      T acc = 0;
                      for (int64_t j = 0; j < n; ++j) acc += wx[j] * src[ix[j]];
                      dst[0] = acc;
                      continue;
                    }
                    std::fill_n(dst, inner, T(0));
                    for (int64_t j = 0; j < n; ++j) {
                      if (wx[j] == T(0)) continue;
                      const T* s = src + ix[j] * inner;
                      const T wj = wx[j];
                      for (int64_t i = 0; i < inner; ++i) dst[i] += wj * s[i];
                    }
                  }
                });
}

// The output length of an axis of length `in` resized by `scale`:
// floor(scale * in), or rounded to nearest (`round`, the keep-aspect
// policies). INVALID_ARGUMENT past 2^62 (inf and NaN included): the
// double would not convert to int64.
absl::StatusOr<int64_t> ScaledAxisLength(double scale, int axis, int64_t in,
                                         bool round) {
  const double length =
      std::floor(scale * static_cast<double>(in) + (round ? 0.5 : 0.0));
  if (!(length < 4611686018427387904.0)) {  // 2^62, and not inf or NaN.
    return absl::InvalidArgumentError(
        absl::StrCat("scale ", scale, " makes axis ", axis, " of length ", in,
                     " longer than 2^62"));
  }
  return static_cast<int64_t>(length);
}

class ResizeKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ResizeKernel>(new ResizeKernel);
    QUANTD_RETURN_IF_ERROR(k->Init(info));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const int32_t dt = ctx.in(0).dtype();
    if (p_.mode != Mode::kNearest) {
      return Dispatch<float, double>(
          dt, [&](auto tag) { return Run<decltype(tag)>(ctx); });
    }
    return Dispatch<float, double, int64_t, int32_t, int8_t, uint8_t>(
        dt, [&](auto tag) { return Run<decltype(tag)>(ctx); });
  }

 private:
  absl::Status Init(NodeInfo& info);
  // Output shape, per-axis scales and roi for input shape `in`.
  absl::Status Plan(const KernelContext& ctx, const std::vector<int64_t>& in,
                    std::vector<int64_t>* out, std::vector<double>* scales,
                    std::vector<double>* roi) const;
  template <typename T>
  absl::Status Run(const KernelContext& ctx) const;

  ResizeParams p_;
  double extrapolation_ = 0;
  bool upsample_ = false;
  std::vector<float> attr_scales_;  // Upsample-7.
  int scales_input_ = -1, sizes_input_ = -1, roi_input_ = -1;
  std::vector<int64_t> axes_;  // Opset 18; empty: all.
  KeepAspect keep_ = KeepAspect::kStretch;
};

absl::Status ResizeKernel::Init(NodeInfo& info) {
  upsample_ = info.op() == "Upsample";
  const int64_t opset = info.opset();
  const bool legacy = upsample_ || opset < 11;  // Upsample-7/9, Resize-10.
  const std::string mode = info.String("mode", "nearest");
  if (mode == "nearest") {
    p_.mode = Mode::kNearest;
  } else if (mode == "linear" || (upsample_ && mode == "bilinear")) {
    p_.mode = Mode::kLinear;
  } else if (mode == "cubic" && !legacy) {
    p_.mode = Mode::kCubic;
  } else {
    return info.UnsupportedAttr("mode", mode);
  }
  if (legacy) {
    p_.coord = Coord::kAsymmetric;
    p_.rounding = Rounding::kSimple;
    if (upsample_ && opset < 9) {
      attr_scales_ = info.Floats("scales");
      if (attr_scales_.empty())
        return info.Invalid("needs the scales attribute");
    } else {
      scales_input_ = 1;
    }
  } else {
    roi_input_ = 1;
    scales_input_ = 2;
    sizes_input_ = 3;
    const std::string ct =
        info.String("coordinate_transformation_mode", "half_pixel");
    if (ct == "half_pixel") {
      p_.coord = Coord::kHalfPixel;
    } else if (ct == "half_pixel_symmetric" && opset >= 19) {
      p_.coord = Coord::kHalfPixelSymmetric;
    } else if (ct == "pytorch_half_pixel") {
      p_.coord = Coord::kPytorchHalfPixel;
    } else if (ct == "align_corners") {
      p_.coord = Coord::kAlignCorners;
    } else if (ct == "asymmetric") {
      p_.coord = Coord::kAsymmetric;
    } else if (ct == "tf_half_pixel_for_nn") {
      p_.coord = Coord::kTfHalfPixelForNn;
    } else if (ct == "tf_crop_and_resize") {
      p_.coord = Coord::kTfCropAndResize;
    } else {
      return info.UnsupportedAttr("coordinate_transformation_mode", ct);
    }
    p_.cubic_a = info.Float("cubic_coeff_a", -0.75f);
    const int64_t ex = info.Int("exclude_outside", 0);
    if (ex != 0 && ex != 1) {
      return info.UnsupportedAttr("exclude_outside", absl::StrCat(ex));
    }
    p_.exclude_outside = ex == 1;
    extrapolation_ = info.Float("extrapolation_value", 0.0f);
    const std::string nm = info.String("nearest_mode", "round_prefer_floor");
    if (nm == "round_prefer_floor") {
      p_.rounding = Rounding::kRoundPreferFloor;
    } else if (nm == "round_prefer_ceil") {
      p_.rounding = Rounding::kRoundPreferCeil;
    } else if (nm == "floor") {
      p_.rounding = Rounding::kFloor;
    } else if (nm == "ceil") {
      p_.rounding = Rounding::kCeil;
    } else {
      return info.UnsupportedAttr("nearest_mode", nm);
    }
    if (opset >= 18) {
      const int64_t aa = info.Int("antialias", 0);
      if (aa != 0 && aa != 1) {
        return info.UnsupportedAttr("antialias", absl::StrCat(aa));
      }
      p_.antialias = aa == 1;
      axes_ = info.Ints("axes");
      const std::string keep =
          info.String("keep_aspect_ratio_policy", "stretch");
      if (keep == "stretch") {
        keep_ = KeepAspect::kStretch;
      } else if (keep == "not_larger") {
        keep_ = KeepAspect::kNotLarger;
      } else if (keep == "not_smaller") {
        keep_ = KeepAspect::kNotSmaller;
      } else {
        return info.UnsupportedAttr("keep_aspect_ratio_policy", keep);
      }
    }
  }
  absl::Status s = p_.mode == Mode::kNearest
                       ? info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT64,
                                              TP::INT32, TP::INT8, TP::UINT8})
                       : info.RequireType(0, {TP::FLOAT, TP::DOUBLE});
  if (s.ok() && scales_input_ >= 0) {
    s = info.RequireType(scales_input_, {TP::FLOAT});
  }
  if (s.ok() && roi_input_ >= 0) {
    s = info.RequireType(roi_input_, {TP::FLOAT, TP::DOUBLE});
  }
  if (s.ok() && sizes_input_ >= 0) {
    s = info.RequireType(sizes_input_, {TP::INT64});
  }
  return s;
}

absl::Status ResizeKernel::Plan(const KernelContext& ctx,
                                const std::vector<int64_t>& in,
                                std::vector<int64_t>* out,
                                std::vector<double>* scales,
                                std::vector<double>* roi) const {
  const int rank = static_cast<int>(in.size());
  std::vector<int> axes;
  if (axes_.empty()) {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  } else {
    for (int64_t a : axes_) {
      QUANTD_ASSIGN_OR_RETURN(int ax, NormalizeAxis(a, rank));
      if (std::find(axes.begin(), axes.end(), ax) != axes.end()) {
        return absl::InvalidArgumentError("axes repeats an axis");
      }
      axes.push_back(ax);
    }
  }
  const size_t na = axes.size();
  *out = in;
  scales->assign(rank, 1.0);
  roi->assign(2 * rank, 0.0);
  for (int d = 0; d < rank; ++d) (*roi)[rank + d] = 1.0;

  std::vector<double> given_scales;
  if (!attr_scales_.empty()) {
    given_scales.assign(attr_scales_.begin(), attr_scales_.end());
  } else if (scales_input_ >= 0 && ctx.has(scales_input_) &&
             ctx.in(scales_input_).size() > 0) {
    const Tensor& st = ctx.in(scales_input_);
    if (st.dtype() != TP::FLOAT) {
      return absl::InvalidArgumentError("scales must be FLOAT");
    }
    given_scales.assign(st.data<float>(), st.data<float>() + st.size());
  }
  std::vector<int64_t> sizes;
  if (sizes_input_ >= 0 && ctx.has(sizes_input_) &&
      ctx.in(sizes_input_).size() > 0) {
    const Tensor& sz = ctx.in(sizes_input_);
    if (sz.dtype() != TP::INT64) {
      return absl::InvalidArgumentError("sizes must be INT64");
    }
    sizes = sz.ToInt64Vector();
  }
  if (given_scales.empty() == sizes.empty()) {
    return absl::InvalidArgumentError(
        "exactly one of scales and sizes must be given");
  }
  if (!given_scales.empty()) {
    if (given_scales.size() != na) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scales has ", given_scales.size(), " values for ", na, " axes"));
    }
    for (size_t i = 0; i < na; ++i) {
      const double s = given_scales[i];
      if (!(s > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("scales must be positive, got ", s));
      }
      QUANTD_ASSIGN_OR_RETURN(
          (*out)[axes[i]],
          ScaledAxisLength(s, axes[i], in[axes[i]], /*round=*/false));
      (*scales)[axes[i]] = s;
    }
  } else {
    if (sizes.size() != na) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sizes has ", sizes.size(), " values for ", na, " axes"));
    }
    for (size_t i = 0; i < na; ++i) {
      if (sizes[i] < 0) {
        return absl::InvalidArgumentError("sizes must not be negative");
      }
      if (in[axes[i]] == 0) {
        return absl::InvalidArgumentError("cannot resize an empty axis");
      }
      (*scales)[axes[i]] =
          static_cast<double>(sizes[i]) / static_cast<double>(in[axes[i]]);
      (*out)[axes[i]] = sizes[i];
    }
    if (keep_ != KeepAspect::kStretch) {
      double s = keep_ == KeepAspect::kNotLarger
                     ? std::numeric_limits<double>::infinity()
                     : 0;
      for (int a : axes) {
        s = keep_ == KeepAspect::kNotLarger ? std::min(s, (*scales)[a])
                                            : std::max(s, (*scales)[a]);
      }
      for (int a : axes) {
        // not_smaller scales every axis by the largest ratio: another
        // axis's size can make this one longer than int64.
        QUANTD_ASSIGN_OR_RETURN((*out)[a],
                                ScaledAxisLength(s, a, in[a], /*round=*/true));
        (*scales)[a] = s;
      }
    }
  }
  if (p_.coord == Coord::kTfCropAndResize) {
    if (roi_input_ < 0 || !ctx.has(roi_input_)) {
      return absl::InvalidArgumentError("tf_crop_and_resize needs roi");
    }
    const Tensor& rt = ctx.in(roi_input_);
    if (rt.size() != static_cast<int64_t>(2 * na)) {
      return absl::InvalidArgumentError(
          absl::StrCat("roi has ", rt.size(), " values, expected ", 2 * na));
    }
    for (size_t i = 0; i < na; ++i) {
      auto at = [&](size_t j) {
        return rt.dtype() == TP::DOUBLE
                   ? rt.data<double>()[j]
                   : static_cast<double>(rt.data<float>()[j]);
      };
      (*roi)[axes[i]] = at(i);
      (*roi)[rank + axes[i]] = at(na + i);
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status ResizeKernel::Run(const KernelContext& ctx) const {
  const Tensor& x = ctx.in(0);
  const int rank = x.rank();
  std::vector<int64_t> out_shape;
  std::vector<double> scales, roi;
  QUANTD_RETURN_IF_ERROR(Plan(ctx, x.shape(), &out_shape, &scales, &roi));
  if (p_.mode != Mode::kNearest) {
    for (int d = 0; d < rank; ++d) {
      if (out_shape[d] > 0 && x.dim(d) == 0) {
        return absl::InvalidArgumentError("cannot resize an empty axis");
      }
    }
  }
  // An empty output computes nothing. Its scale may be anything (a scale
  // of 1e-300 shrinks every axis to 0), and an antialiased filter stretched
  // by 1 / scale would have more taps than int64 counts. With an output,
  // scale >= 1 / in, so the taps stay within a few times the input.
  absl::StatusOr<int64_t> out_count = CheckedElementCount(out_shape);
  if (!out_count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("output shape ", ShapeString(out_shape), ": ",
                     out_count.status().message()));
  }
  if (*out_count == 0) {
    (*ctx.outputs)[0] = Tensor(x.dtype(), out_shape);
    return absl::OkStatus();
  }
  Tensor cur = x;
  std::vector<int64_t> shape = x.shape();
  // Innermost axis first, as ONNX's reference does.
  for (int d = rank - 1; d >= 0; --d) {
    if (NumElements(shape) == 0) break;
    const AxisTaps taps =
        MakeTaps(p_, shape[d], out_shape[d], scales[d], roi[d], roi[rank + d]);
    if (IsIdentity(taps, shape[d])) continue;
    std::vector<int64_t> next = shape;
    next[d] = out_shape[d];
    Tensor t(x.dtype(), next);
    ResizeAxis<T>(cur.data<T>(), t.mutable_data<T>(), Prod(shape, 0, d),
                  shape[d], Prod(shape, d + 1, rank), taps, extrapolation_,
                  ctx.pool);
    cur = std::move(t);
    shape = std::move(next);
  }
  if (shape != out_shape) cur = Tensor(x.dtype(), out_shape);  // Empty.
  (*ctx.outputs)[0] = std::move(cur);
  return absl::OkStatus();
}

// ============================================================ ConvTranspose

class ConvTransposeKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ConvTransposeKernel>(new ConvTransposeKernel);
    QUANTD_RETURN_IF_ERROR(k->Init(info));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(
        ctx.in(0).dtype(), [&](auto tag) { return Run<decltype(tag)>(ctx); });
  }

 private:
  enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

  absl::Status Init(NodeInfo& info) {
    const std::string ap = info.String("auto_pad", "NOTSET");
    if (ap == "NOTSET" || ap.empty()) {
      auto_pad_ = AutoPad::kNotSet;
    } else if (ap == "SAME_UPPER") {
      auto_pad_ = AutoPad::kSameUpper;
    } else if (ap == "SAME_LOWER") {
      auto_pad_ = AutoPad::kSameLower;
    } else if (ap == "VALID") {
      auto_pad_ = AutoPad::kValid;
    } else {
      return info.UnsupportedAttr("auto_pad", ap);
    }
    group_ = info.Int("group", 1);
    if (group_ < 1) return info.Invalid("group must be positive");
    kernel_ = info.Ints("kernel_shape");
    strides_ = info.Ints("strides");
    dilations_ = info.Ints("dilations");
    pads_ = info.Ints("pads");
    output_padding_ = info.Ints("output_padding");
    output_shape_ = info.Ints("output_shape");
    for (int64_t v : strides_) {
      if (v < 1) return info.Invalid("strides must be positive");
    }
    for (int64_t v : dilations_) {
      if (v < 1) return info.Invalid("dilations must be positive");
    }
    for (int64_t v : pads_) {
      if (v < 0) return info.UnsupportedAttr("pads", Join(pads_));
    }
    for (int64_t v : output_padding_) {
      if (v < 0) return info.Invalid("output_padding must not be negative");
    }
    for (int i = 0; i < 2; ++i) {
      const int r = info.input_rank(i);
      if (r >= 0 && (r < 3 || r > 5)) {
        return absl::UnimplementedError(absl::StrCat(
            "node '", info.label(),
            "' (op ConvTranspose): only 1-D, 2-D and 3-D convolutions are "
            "supported (input ",
            i, " has rank ", r, ")"));
      }
    }
    if (info.num_inputs() < 2) return info.Invalid("needs X and W");
    absl::Status s;
    for (int i = 0; i < 3 && s.ok(); ++i) {
      s = info.RequireType(i, {TP::FLOAT, TP::DOUBLE});
    }
    return s;
  }

  template <typename T>
  absl::Status Run(const KernelContext& ctx) const;

  AutoPad auto_pad_ = AutoPad::kNotSet;
  int64_t group_ = 1;
  std::vector<int64_t> kernel_, strides_, dilations_, pads_, output_padding_,
      output_shape_;
};

template <typename T>
absl::Status ConvTransposeKernel::Run(const KernelContext& ctx) const {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  constexpr auto kType = TypeOf<T>::value;
  if (x.rank() < 3 || x.rank() > 5) {
    return absl::UnimplementedError(
        absl::StrCat("only 1-D, 2-D and 3-D ConvTranspose is supported (X is ",
                     ShapeString(x.shape()), ")"));
  }
  if (w.dtype() != kType || w.rank() != x.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("W must be ", DataTypeName(kType), " of rank ", x.rank()));
  }
  const int r = x.rank() - 2;
  const int64_t n = x.dim(0), c = x.dim(1);
  if (w.dim(0) != c || c % group_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("X has ", c, " channels, W is ", ShapeString(w.shape()),
                     " with group ", group_));
  }
  const int64_t cg = c / group_, mg = w.dim(1), m = mg * group_;
  std::vector<int64_t> k(w.shape().begin() + 2, w.shape().end());
  if (!kernel_.empty() && kernel_ != k) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel_shape ", Join(kernel_), " does not match W ",
                     ShapeString(w.shape())));
  }
  auto sized = [&](const std::vector<int64_t>& v, size_t want) {
    return v.empty() || v.size() == want;
  };
  std::vector<int64_t> oshape = output_shape_;
  if (oshape.size() == static_cast<size_t>(r + 2)) {
    oshape.erase(oshape.begin(), oshape.begin() + 2);
  }
  if (!sized(strides_, r) || !sized(dilations_, r) || !sized(pads_, 2 * r) ||
      !sized(output_padding_, r) || !sized(oshape, r)) {
    return absl::InvalidArgumentError(
        "strides, dilations, pads, output_padding or output_shape do not "
        "match the input rank");
  }
  auto get = [](const std::vector<int64_t>& v, int i, int64_t dflt) {
    return v.empty() ? dflt : v[i];
  };
  // Three spatial dims, the missing leading ones of size 1.
  int64_t in3[3] = {1, 1, 1}, k3[3] = {1, 1, 1}, s3[3] = {1, 1, 1},
          d3[3] = {1, 1, 1}, pb3[3] = {0, 0, 0}, out3[3] = {1, 1, 1};
  std::vector<int64_t> y_shape = {n, m};
  for (int i = 0; i < r; ++i) {
    const int j = 3 - r + i;
    in3[j] = x.dim(2 + i);
    k3[j] = k[i];
    s3[j] = get(strides_, i, 1);
    d3[j] = get(dilations_, i, 1);
    const int64_t op = get(output_padding_, i, 0);
    const int64_t full = s3[j] * (in3[j] - 1) + op + (k3[j] - 1) * d3[j] + 1;
    int64_t begin = 0, end = 0, out;
    if (!oshape.empty() || auto_pad_ == AutoPad::kSameUpper ||
        auto_pad_ == AutoPad::kSameLower) {
      out = !oshape.empty() ? oshape[i] : in3[j] * s3[j];
      const int64_t total = full - out;
      // ONNX: SAME_UPPER puts the smaller half first; NOTSET and
      // SAME_LOWER the larger. A negative total (an output_shape larger
      // than the full result) extends it with zeros at the end, as ONNX's
      // test data and ONNX Runtime do.
      if (total < 0) {
        end = total;
      } else if (auto_pad_ == AutoPad::kSameUpper) {
        begin = total / 2;
        end = total - begin;
      } else {
        end = total / 2;
        begin = total - end;
      }
    } else {
      if (auto_pad_ == AutoPad::kNotSet) {
        begin = get(pads_, i, 0);
        end = get(pads_, i + r, 0);
      }
      out = full - begin - end;
    }
    if (out < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("ConvTranspose output dim ", i, " would be ", out));
    }
    pb3[j] = begin;
    out3[j] = out;
    y_shape.push_back(out);
  }
  const T* bias = nullptr;
  if (ctx.has(2)) {
    const Tensor& b = ctx.in(2);
    if (b.dtype() != kType || b.size() != m) {
      return absl::InvalidArgumentError(
          absl::StrCat("B must be ", DataTypeName(kType), " [", m, "]"));
    }
    bias = b.data<T>();
  }
  Tensor y(kType, y_shape);
  const int64_t p_in = in3[0] * in3[1] * in3[2];
  const int64_t p_out = out3[0] * out3[1] * out3[2];
  const int64_t kk = k3[0] * k3[1] * k3[2];
  T* yd = y.mutable_data<T>();
  const T* xd = x.data<T>();
  const T* wd = w.data<T>();
  // col[mg*kk, p_in] = W_gᵀ · X_g, then each column scatters into Y.
  std::vector<T> col(static_cast<size_t>(mg * kk * p_in));
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < group_; ++g) {
      Gemm(true, false, mg * kk, p_in, cg, T(1), wd + g * cg * mg * kk, mg * kk,
           xd + (b * c + g * cg) * p_in, p_in, T(0), col.data(), p_in,
           ctx.pool);
      ParallelRange(ctx.pool, mg, 1, [&](int64_t m0, int64_t m1) {
        for (int64_t mi = m0; mi < m1; ++mi) {
          const int64_t oc = g * mg + mi;
          T* ym = yd + (b * m + oc) * p_out;
          std::fill_n(ym, p_out, bias ? bias[oc] : T(0));
          for (int64_t ka = 0; ka < k3[0]; ++ka) {
            for (int64_t kb = 0; kb < k3[1]; ++kb) {
              for (int64_t kc = 0; kc < k3[2]; ++kc) {
                const T* row = col.data() +
                               ((mi * k3[0] + ka) * k3[1] + kb) * k3[2] * p_in +
                               kc * p_in;
                // Input columns whose output column lands inside Y.
                const int64_t shift = kc * d3[2] - pb3[2];
                int64_t lo = 0, hi = in3[2];
                while (lo < hi && lo * s3[2] + shift < 0) ++lo;
                while (hi > lo && (hi - 1) * s3[2] + shift >= out3[2]) --hi;
                for (int64_t ia = 0; ia < in3[0]; ++ia) {
                  const int64_t oa = ia * s3[0] - pb3[0] + ka * d3[0];
                  if (oa < 0 || oa >= out3[0]) continue;
                  for (int64_t ib = 0; ib < in3[1]; ++ib) {
                    const int64_t ob = ib * s3[1] - pb3[1] + kb * d3[1];
                    if (ob < 0 || ob >= out3[1]) continue;
                    const T* src = row + (ia * in3[1] + ib) * in3[2];
                    T* dst = ym + (oa * out3[1] + ob) * out3[2] + shift;
                    const int64_t st = s3[2];
                    for (int64_t ic = lo; ic < hi; ++ic) {
                      dst[ic * st] += src[ic];
                    }
                  }
                }
              }
            }
          }
        }
      });
    }
  }
  (*ctx.outputs)[0] = std::move(y);
  return absl::OkStatus();
}

// ============================================== DepthToSpace / SpaceToDepth

template <typename U>
void DepthSpaceCopy(const U* in, U* out, int64_t n, int64_t c, int64_t h,
                    int64_t w, int64_t bs, bool to_space, bool crd) {
  // Shapes named for DepthToSpace: in [n, c, h, w] -> out [n, c/bs², h*bs,
  // w*bs]; SpaceToDepth is its DCR inverse, so one index map serves both.
  const int64_t oc = c / (bs * bs), oh = h * bs, ow = w * bs;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < oc; ++ch) {
      for (int64_t i = 0; i < bs; ++i) {
        for (int64_t j = 0; j < bs; ++j) {
          const int64_t ic =
              crd ? (ch * bs + i) * bs + j : (i * bs + j) * oc + ch;
          for (int64_t y = 0; y < h; ++y) {
            const int64_t deep = ((b * c + ic) * h + y) * w;
            const int64_t flat = ((b * oc + ch) * oh + y * bs + i) * ow + j;
            for (int64_t x = 0; x < w; ++x) {
              if (to_space) {
                out[flat + x * bs] = in[deep + x];
              } else {
                out[deep + x] = in[flat + x * bs];
              }
            }
          }
        }
      }
    }
  }
}

class DepthSpaceKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<DepthSpaceKernel>(new DepthSpaceKernel);
    k->to_space_ = info.op() == "DepthToSpace";
    k->block_ = info.Int("blocksize", 0);
    if (k->block_ < 1) return info.Invalid("blocksize must be positive");
    if (k->to_space_ && info.opset() >= 11) {
      const std::string mode = info.String("mode", "DCR");
      if (mode != "DCR" && mode != "CRD") {
        return info.UnsupportedAttr("mode", mode);
      }
      k->crd_ = mode == "CRD";
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.rank() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("needs a rank-4 input, got ", ShapeString(x.shape())));
    }
    const int64_t b = block_;
    int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    std::vector<int64_t> out;
    if (to_space_) {
      if (c % (b * b) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(c, " channels do not divide by blocksize² = ", b * b));
      }
      out = {n, c / (b * b), h * b, w * b};
    } else {
      if (h % b != 0 || w % b != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "H and W (", h, ", ", w, ") do not divide by blocksize ", b));
      }
      out = {n, c * b * b, h / b, w / b};
      // Name the sizes from the deep side, as DepthSpaceCopy expects.
      c = c * b * b;
      h /= b;
      w /= b;
    }
    Tensor y(x.dtype(), out);
    switch (ElementSize(x.dtype())) {
      case 1:
        DepthSpaceCopy(static_cast<const uint8_t*>(x.raw()),
                       static_cast<uint8_t*>(y.raw()), n, c, h, w, b, to_space_,
                       crd_);
        break;
      case 2:
        DepthSpaceCopy(static_cast<const uint16_t*>(x.raw()),
                       static_cast<uint16_t*>(y.raw()), n, c, h, w, b,
                       to_space_, crd_);
        break;
      case 4:
        DepthSpaceCopy(static_cast<const uint32_t*>(x.raw()),
                       static_cast<uint32_t*>(y.raw()), n, c, h, w, b,
                       to_space_, crd_);
        break;
      case 8:
        DepthSpaceCopy(static_cast<const uint64_t*>(x.raw()),
                       static_cast<uint64_t*>(y.raw()), n, c, h, w, b,
                       to_space_, crd_);
        break;
      default:
        return absl::UnimplementedError("element type " +
                                        DataTypeName(x.dtype()) +
                                        " is not supported by this op");
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  bool to_space_ = true;
  bool crd_ = false;
  int64_t block_ = 1;
};

// ===================================================== channel normalisation

// Normalizes each of `rows` rows of `len` values of x into y:
// (x - mean) / sqrt(var + eps), then y * scale(row, i) + bias(row, i), with
// the statistics accumulated in double.
template <typename T, typename Affine>
void NormalizeRows(const T* x, T* y, int64_t rows, int64_t len, double eps,
                   ThreadPool* pool, Affine&& affine) {
  ParallelRange(pool, rows,
                std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)),
                [&](int64_t r0, int64_t r1) {
                  for (int64_t r = r0; r < r1; ++r) {
                    const T* xr = x + r * len;
                    T* yr = y + r * len;
                    double sum = 0;
                    for (int64_t i = 0; i < len; ++i) sum += xr[i];
                    const double mean = len > 0 ? sum / len : 0;
                    double sq = 0;
                    for (int64_t i = 0; i < len; ++i) {
                      const double d = xr[i] - mean;
                      sq += d * d;
                    }
                    const double var = len > 0 ? sq / len : 0;
                    const double inv = 1 / std::sqrt(var + eps);
                    for (int64_t i = 0; i < len; ++i) {
                      yr[i] = static_cast<T>((xr[i] - mean) * inv);
                    }
                    affine(r, yr);
                  }
                });
}

class InstanceNormKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<InstanceNormKernel>(new InstanceNormKernel);
    k->epsilon_ = info.Float("epsilon", 1e-5f);
    absl::Status s;
    for (int i = 0; i < 3 && s.ok(); ++i) {
      s = info.RequireType(i, {TP::FLOAT, TP::DOUBLE});
    }
    if (!s.ok()) return s;
    if (info.num_inputs() != 3) return info.Invalid("needs input, scale, B");
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(ctx.in(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      const Tensor& x = ctx.in(0);
      if (x.rank() < 2) {
        return absl::InvalidArgumentError("needs [N, C, ...]");
      }
      const int64_t c = x.dim(1);
      for (int i = 1; i <= 2; ++i) {
        if (ctx.in(i).dtype() != x.dtype() || ctx.in(i).size() != c ||
            ctx.in(i).rank() != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(i == 1 ? "scale" : "B", " must be ",
                           DataTypeName(x.dtype()), " [", c, "]"));
        }
      }
      const T* scale = ctx.in(1).data<T>();
      const T* bias = ctx.in(2).data<T>();
      const int64_t rows = x.dim(0) * c;
      const int64_t len = rows == 0 ? 0 : x.size() / rows;
      Tensor y(x.dtype(), x.shape());
      NormalizeRows(x.data<T>(), y.mutable_data<T>(), rows, len, epsilon_,
                    ctx.pool, [&](int64_t r, T* yr) {
                      const T s = scale[r % c], b = bias[r % c];
                      for (int64_t i = 0; i < len; ++i) yr[i] = yr[i] * s + b;
                    });
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  float epsilon_ = 1e-5f;
};

class GroupNormKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<GroupNormKernel>(new GroupNormKernel);
    k->epsilon_ = info.Float("epsilon", 1e-5f);
    if (!info.HasAttr("num_groups")) return info.Invalid("needs num_groups");
    k->groups_ = info.Int("num_groups", 1);
    if (k->groups_ < 1) return info.Invalid("num_groups must be positive");
    // Opset 18 has one scale / bias per group, opset 21 one per channel.
    k->per_channel_ = info.opset() >= 21;
    if (info.opset() >= 21) {
      // Statistics are always accumulated in double, at least as precise as
      // a float32 or float64 stash.
      const int64_t stash = info.Int("stash_type", 1);
      if (stash != TP::FLOAT && stash != TP::DOUBLE) {
        return info.UnsupportedAttr("stash_type", absl::StrCat(stash));
      }
    }
    absl::Status s;
    for (int i = 0; i < 3 && s.ok(); ++i) {
      s = info.RequireType(i, {TP::FLOAT, TP::DOUBLE});
    }
    if (!s.ok()) return s;
    if (info.num_inputs() != 3) return info.Invalid("needs X, scale, bias");
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(ctx.in(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      const Tensor& x = ctx.in(0);
      if (x.rank() < 2) {
        return absl::InvalidArgumentError("needs [N, C, ...]");
      }
      const int64_t c = x.dim(1), g = groups_;
      if (c % g != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(c, " channels do not divide into ", g, " groups"));
      }
      const int64_t want = per_channel_ ? c : g;
      for (int i = 1; i <= 2; ++i) {
        if (ctx.in(i).dtype() != x.dtype() || ctx.in(i).size() != want ||
            ctx.in(i).rank() != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(i == 1 ? "scale" : "bias", " must be ",
                           DataTypeName(x.dtype()), " [", want, "]"));
        }
      }
      if (x.size() == 0) {  // No channels or no samples: c / g may be 0.
        (*ctx.outputs)[0] = Tensor(x.dtype(), x.shape());
        return absl::OkStatus();
      }
      const T* scale = ctx.in(1).data<T>();
      const T* bias = ctx.in(2).data<T>();
      const int64_t rows = x.dim(0) * g;
      const int64_t len = rows == 0 ? 0 : x.size() / rows;
      const int64_t spatial = len / (c / g);
      Tensor y(x.dtype(), x.shape());
      NormalizeRows(x.data<T>(), y.mutable_data<T>(), rows, len, epsilon_,
                    ctx.pool, [&](int64_t r, T* yr) {
                      const int64_t gi = r % g;
                      for (int64_t i = 0; i < len; ++i) {
                        const int64_t j =
                            per_channel_ ? gi * (c / g) + i / spatial : gi;
                        yr[i] = yr[i] * scale[j] + bias[j];
                      }
                    });
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  float epsilon_ = 1e-5f;
  int64_t groups_ = 1;
  bool per_channel_ = false;
};

// The (outer, len, inner) view of x around `axis`.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisView ViewAround(const std::vector<int64_t>& shape, int axis) {
  const int rank = static_cast<int>(shape.size());
  return {Prod(shape, 0, axis), shape[axis], Prod(shape, axis + 1, rank)};
}

class LpNormKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<LpNormKernel>(new LpNormKernel);
    k->axis_ = info.Int("axis", -1);
    k->p_ = info.Int("p", 2);
    if (k->p_ != 1 && k->p_ != 2) {
      return info.UnsupportedAttr("p", absl::StrCat(k->p_));
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::DOUBLE}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(ctx.in(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      const Tensor& x = ctx.in(0);
      QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
      const AxisView v = ViewAround(x.shape(), axis);
      Tensor y(x.dtype(), x.shape());
      const T* in = x.data<T>();
      T* out = y.mutable_data<T>();
      ParallelRange(ctx.pool, v.outer * v.inner, 64,
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        const int64_t base =
                            (r / v.inner) * v.len * v.inner + r % v.inner;
                        double norm = 0;
                        for (int64_t i = 0; i < v.len; ++i) {
                          const double e = in[base + i * v.inner];
                          norm += p_ == 1 ? std::abs(e) : e * e;
                        }
                        if (p_ == 2) norm = std::sqrt(norm);
                        // A zero vector stays zero (ONNX Runtime's choice)
                        // rather than becoming NaN.
                        const double inv = norm == 0 ? 0 : 1 / norm;
                        for (int64_t i = 0; i < v.len; ++i) {
                          out[base + i * v.inner] =
                              static_cast<T>(in[base + i * v.inner] * inv);
                        }
                      }
                    });
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  int64_t axis_ = -1;
  int64_t p_ = 2;
};

// y = (x - mean) / (sqrt(var) + 1e-9) over `axes` (ONNX's function body).
class MvnKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<MvnKernel>(new MvnKernel);
    k->axes_ = info.Ints("axes", {0, 2, 3});
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::DOUBLE}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(ctx.in(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      const Tensor& x = ctx.in(0);
      const int rank = x.rank();
      std::vector<bool> reduced(rank, false);
      for (int64_t a : axes_) {
        QUANTD_ASSIGN_OR_RETURN(int ax, NormalizeAxis(a, rank));
        reduced[ax] = true;
      }
      // Each element's statistics slot: its index over the kept axes.
      std::vector<int64_t> slot_stride(rank, 0);
      int64_t slots = 1;
      for (int d = rank - 1; d >= 0; --d) {
        if (reduced[d]) continue;
        slot_stride[d] = slots;
        slots *= x.dim(d);
      }
      const int64_t total = x.size();
      std::vector<int64_t> slot_of(total);
      std::vector<int64_t> idx(rank, 0);
      int64_t s = 0;
      for (int64_t i = 0; i < total; ++i) {
        slot_of[i] = s;
        for (int d = rank - 1; d >= 0; --d) {
          s += slot_stride[d];
          if (++idx[d] < x.dim(d)) break;
          s -= slot_stride[d] * x.dim(d);
          idx[d] = 0;
        }
      }
      const int64_t count = slots == 0 ? 0 : total / slots;
      std::vector<double> mean(slots, 0), sq(slots, 0);
      const T* in = x.data<T>();
      for (int64_t i = 0; i < total; ++i) mean[slot_of[i]] += in[i];
      for (double& m : mean) m /= std::max<int64_t>(count, 1);
      for (int64_t i = 0; i < total; ++i) {
        const double d = in[i] - mean[slot_of[i]];
        sq[slot_of[i]] += d * d;
      }
      for (double& v : sq)
        v = std::sqrt(v / std::max<int64_t>(count, 1)) + 1e-9;
      Tensor y(x.dtype(), x.shape());
      T* out = y.mutable_data<T>();
      for (int64_t i = 0; i < total; ++i) {
        out[i] = static_cast<T>((in[i] - mean[slot_of[i]]) / sq[slot_of[i]]);
      }
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  std::vector<int64_t> axes_;
};

// ==================================================================== pools

// GlobalMaxPool and GlobalLpPool: one value per (n, c) over all spatial dims.
class GlobalPoolKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<GlobalPoolKernel>(new GlobalPoolKernel);
    k->max_ = info.op() == "GlobalMaxPool";
    if (!k->max_) {
      k->p_ = info.Int("p", 2);
      if (k->p_ < 1) return info.UnsupportedAttr("p", absl::StrCat(k->p_));
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::DOUBLE}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(ctx.in(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      const Tensor& x = ctx.in(0);
      if (x.rank() < 3) {
        return absl::InvalidArgumentError(absl::StrCat(
            "needs [N, C, spatial...], got ", ShapeString(x.shape())));
      }
      std::vector<int64_t> shape = x.shape();
      const int64_t rows = shape[0] * shape[1];
      const int64_t len = rows == 0 ? 0 : x.size() / rows;
      if (max_ && len == 0 && rows > 0) {
        return absl::InvalidArgumentError("empty spatial extent");
      }
      for (size_t i = 2; i < shape.size(); ++i) shape[i] = 1;
      Tensor y(x.dtype(), shape);
      const T* in = x.data<T>();
      T* out = y.mutable_data<T>();
      ParallelRange(ctx.pool, rows,
                    std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)),
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        out[r] = max_ ? MaxOf(in + r * len, len)
                                      : LpOf(in + r * len, len, p_);
                      }
                    });
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

  template <typename T>
  static T MaxOf(const T* v, int64_t n) {
    return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v, n)
        .maxCoeff();
  }
  // (sum |v|^p)^(1/p).
  template <typename T>
  static T LpOf(const T* v, int64_t n, int64_t p) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::abs(static_cast<double>(v[i]));
      sum += p == 1 ? a : p == 2 ? a * a : std::pow(a, static_cast<double>(p));
    }
    return static_cast<T>(p == 1 ? sum
                          : p == 2
                              ? std::sqrt(sum)
                              : std::pow(sum, 1.0 / static_cast<double>(p)));
  }

 private:
  bool max_ = true;
  int64_t p_ = 2;
};

// LpPool over 1..3 spatial dims: (sum over the window of |x|^p)^(1/p), pads
// contributing zeros.
class LpPoolKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<LpPoolKernel>(new LpPoolKernel);
    k->kernel_ = info.Ints("kernel_shape");
    if (k->kernel_.empty() || k->kernel_.size() > 3) {
      return info.UnsupportedAttr("kernel_shape", Join(k->kernel_));
    }
    k->strides_ = info.Ints("strides");
    k->pads_ = info.Ints("pads");
    if (info.opset() >= 18) {
      k->dilations_ = info.Ints("dilations");
      const int64_t cm = info.Int("ceil_mode", 0);
      if (cm != 0 && cm != 1) {
        return info.UnsupportedAttr("ceil_mode", absl::StrCat(cm));
      }
      k->ceil_ = cm == 1;
    }
    k->p_ = info.Int("p", 2);
    if (k->p_ < 1) return info.UnsupportedAttr("p", absl::StrCat(k->p_));
    const std::string ap = info.String("auto_pad", "NOTSET");
    if (ap != "NOTSET" && ap != "VALID" && ap != "SAME_UPPER" &&
        ap != "SAME_LOWER" && !ap.empty()) {
      return info.UnsupportedAttr("auto_pad", ap);
    }
    k->auto_pad_ = ap.empty() ? "NOTSET" : ap;
    const size_t r = k->kernel_.size();
    if ((!k->strides_.empty() && k->strides_.size() != r) ||
        (!k->pads_.empty() && k->pads_.size() != 2 * r) ||
        (!k->dilations_.empty() && k->dilations_.size() != r)) {
      return info.Invalid(
          "strides, pads or dilations do not match kernel_shape");
    }
    for (int64_t v : k->strides_) {
      if (v < 1) return info.Invalid("strides must be positive");
    }
    for (int64_t v : k->dilations_) {
      if (v < 1) return info.Invalid("dilations must be positive");
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::DOUBLE}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(
        ctx.in(0).dtype(), [&](auto tag) { return Run<decltype(tag)>(ctx); });
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& ctx) const {
    const Tensor& x = ctx.in(0);
    const int r = static_cast<int>(kernel_.size());
    if (x.rank() != r + 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("X ", ShapeString(x.shape()), " does not match a ", r,
                       "-D kernel_shape"));
    }
    auto get = [](const std::vector<int64_t>& v, int i, int64_t d) {
      return v.empty() ? d : v[i];
    };
    int64_t in3[3] = {1, 1, 1}, k3[3] = {1, 1, 1}, s3[3] = {1, 1, 1},
            d3[3] = {1, 1, 1}, pb3[3] = {0, 0, 0}, out3[3] = {1, 1, 1};
    std::vector<int64_t> y_shape = {x.dim(0), x.dim(1)};
    for (int i = 0; i < r; ++i) {
      const int j = 3 - r + i;
      in3[j] = x.dim(2 + i);
      k3[j] = kernel_[i];
      s3[j] = get(strides_, i, 1);
      d3[j] = get(dilations_, i, 1);
      const int64_t extent = (k3[j] - 1) * d3[j] + 1;
      int64_t begin = get(pads_, i, 0), end = get(pads_, i + r, 0);
      if (auto_pad_ == "VALID") {
        begin = end = 0;
      } else if (auto_pad_ != "NOTSET") {
        const int64_t o = (in3[j] + s3[j] - 1) / s3[j];
        const int64_t total =
            std::max<int64_t>(0, (o - 1) * s3[j] + extent - in3[j]);
        const int64_t small = total / 2;
        begin = auto_pad_ == "SAME_UPPER" ? small : total - small;
        end = total - begin;
      }
      const int64_t span = in3[j] + begin + end - extent;
      if (span < 0) {
        return absl::InvalidArgumentError(
            "the window is larger than the padded input");
      }
      out3[j] = (ceil_ ? (span + s3[j] - 1) / s3[j] : span / s3[j]) + 1;
      // ceil_mode never starts a window inside the end padding.
      if (ceil_ && (out3[j] - 1) * s3[j] >= in3[j] + begin) --out3[j];
      pb3[j] = begin;
      y_shape.push_back(out3[j]);
    }
    Tensor y(x.dtype(), y_shape);
    const int64_t planes = x.dim(0) * x.dim(1);
    const int64_t p_in = in3[0] * in3[1] * in3[2];
    const int64_t p_out = out3[0] * out3[1] * out3[2];
    const T* in = x.data<T>();
    T* out = y.mutable_data<T>();
    ParallelRange(ctx.pool, planes, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t pl = c0; pl < c1; ++pl) {
        const T* xp = in + pl * p_in;
        T* yp = out + pl * p_out;
        for (int64_t oa = 0; oa < out3[0]; ++oa)
          for (int64_t ob = 0; ob < out3[1]; ++ob)
            for (int64_t oc = 0; oc < out3[2]; ++oc) {
              double sum = 0;
              for (int64_t ka = 0; ka < k3[0]; ++ka) {
                const int64_t ia = oa * s3[0] - pb3[0] + ka * d3[0];
                if (ia < 0 || ia >= in3[0]) continue;
                for (int64_t kb = 0; kb < k3[1]; ++kb) {
                  const int64_t ib = ob * s3[1] - pb3[1] + kb * d3[1];
                  if (ib < 0 || ib >= in3[1]) continue;
                  for (int64_t kc = 0; kc < k3[2]; ++kc) {
                    const int64_t ic = oc * s3[2] - pb3[2] + kc * d3[2];
                    if (ic < 0 || ic >= in3[2]) continue;
                    const double a = std::abs(static_cast<double>(
                        xp[(ia * in3[1] + ib) * in3[2] + ic]));
                    sum += p_ == 1   ? a
                           : p_ == 2 ? a * a
                                     : std::pow(a, static_cast<double>(p_));
                  }
                }
              }
              yp[(oa * out3[1] + ob) * out3[2] + oc] = static_cast<T>(
                  p_ == 1   ? sum
                  : p_ == 2 ? std::sqrt(sum)
                            : std::pow(sum, 1.0 / static_cast<double>(p_)));
            }
      }
    });
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

  std::vector<int64_t> kernel_, strides_, pads_, dilations_;
  std::string auto_pad_ = "NOTSET";
  bool ceil_ = false;
  int64_t p_ = 2;
};

}  // namespace

void RegisterImageOps(OpRegistry* r) {
  r->Register("Resize", &ResizeKernel::Create);
  r->Register("Upsample", &ResizeKernel::Create);
  r->Register("ConvTranspose", &ConvTransposeKernel::Create);
  r->Register("DepthToSpace", &DepthSpaceKernel::Create);
  r->Register("SpaceToDepth", &DepthSpaceKernel::Create);
  r->Register("InstanceNormalization", &InstanceNormKernel::Create);
  r->Register("GroupNormalization", &GroupNormKernel::Create);
  r->Register("LpNormalization", &LpNormKernel::Create);
  r->Register("MeanVarianceNormalization", &MvnKernel::Create);
  r->Register("GlobalMaxPool", &GlobalPoolKernel::Create);
  r->Register("GlobalLpPool", &GlobalPoolKernel::Create);
  r->Register("LpPool", &LpPoolKernel::Create);
}

}  // namespace quantd::executor
