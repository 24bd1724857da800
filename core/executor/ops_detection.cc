// Detection and sampling ops: NonMaxSuppression, RoiAlign, GridSample,
// MaxUnpool and LRN. Their semantics follow the ONNX spec as ONNX's reference
// and ONNX Runtime implement it (including the quirks real models were
// exported against, e.g. RoiAlign's max mode).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/checked_count.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/executor.h"
#include "core/executor/kernel.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// A scalar or one-element input, as a double; `dflt` when omitted.
absl::StatusOr<double> ScalarInput(const KernelContext& ctx, int i,
                                   const char* name, double dflt) {
  if (!ctx.has(i)) return dflt;
  const Tensor& t = ctx.in(i);
  if (t.size() != 1) {
    return Invalid(absl::StrCat(name, " must hold one value, got shape ",
                                ShapeString(t.shape())));
  }
  switch (t.dtype()) {
    case TP::FLOAT:
      return static_cast<double>(t.data<float>()[0]);
    case TP::DOUBLE:
      return t.data<double>()[0];
    case TP::INT64:
    case TP::INT32:
      return static_cast<double>(t.IntAt(0));
    default:
      return Invalid(absl::StrCat(name, " has unsupported type ",
                                  DataTypeName(t.dtype())));
  }
}

// ======================================================== NonMaxSuppression

class NmsKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<NmsKernel>(new NmsKernel);
    const int64_t cpb = info.Int("center_point_box", 0);
    if (cpb != 0 && cpb != 1) {
      return info.UnsupportedAttr("center_point_box", absl::StrCat(cpb));
    }
    k->center_ = cpb == 1;
    if (info.num_inputs() < 2) return info.Invalid("needs boxes and scores");
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::FLOAT}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(2, {TP::INT64}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(3, {TP::FLOAT}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(4, {TP::FLOAT}));
    info.set_output_type(0, TP::INT64);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& boxes = ctx.in(0);
    const Tensor& scores = ctx.in(1);
    if (boxes.dtype() != TP::FLOAT || scores.dtype() != TP::FLOAT) {
      return absl::UnimplementedError(
          "NonMaxSuppression supports FLOAT boxes and scores only");
    }
    if (boxes.rank() != 3 || boxes.dim(2) != 4) {
      return Invalid(absl::StrCat("boxes must be [batches, boxes, 4], got ",
                                  ShapeString(boxes.shape())));
    }
    if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) ||
        scores.dim(2) != boxes.dim(1)) {
      return Invalid(absl::StrCat("scores ", ShapeString(scores.shape()),
                                  " must be [batches, classes, boxes] for "
                                  "boxes ",
                                  ShapeString(boxes.shape())));
    }
    int64_t max_out = 0;
    if (ctx.has(2)) {
      const Tensor& m = ctx.in(2);
      if (m.size() != 1 || (m.dtype() != TP::INT64 && m.dtype() != TP::INT32)) {
        return Invalid("max_output_boxes_per_class must be one INT64 value");
      }
      // ONNX Runtime reads a negative count as 0.
      max_out = std::max<int64_t>(0, m.IntAt(0));
    }
    QUANTD_ASSIGN_OR_RETURN(double iou,
                            ScalarInput(ctx, 3, "iou_threshold", 0.0));
    if (!(iou >= 0 && iou <= 1)) {
      return Invalid(
          absl::StrCat("iou_threshold must be in [0, 1], got ", iou));
    }
    QUANTD_ASSIGN_OR_RETURN(double score_thr,
                            ScalarInput(ctx, 4, "score_threshold", 0.0));
    const bool has_score_thr = ctx.has(4);
    const float iou_thr = static_cast<float>(iou);
    const float s_thr = static_cast<float>(score_thr);

    const int64_t batches = boxes.dim(0), nboxes = boxes.dim(1),
                  classes = scores.dim(1);
    const float* bdata = boxes.data<float>();
    const float* sdata = scores.data<float>();
    std::vector<int64_t> selected;  // Triples.
    std::vector<int64_t> order, kept;
    for (int64_t b = 0; b < batches && max_out > 0; ++b) {
      const float* bb = bdata + b * nboxes * 4;
      for (int64_t c = 0; c < classes; ++c) {
        const float* sc = sdata + (b * classes + c) * nboxes;
        order.clear();
        for (int64_t i = 0; i < nboxes; ++i) {
          // A NaN score is never selected (it compares with nothing).
          if (std::isnan(sc[i])) continue;
          if (has_score_thr && !(sc[i] > s_thr)) continue;
          order.push_back(i);
        }
        // Highest score first; ties go to the lower box index.
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t x, int64_t y) { return sc[x] > sc[y]; });
        kept.clear();
        for (int64_t i : order) {
          bool keep = true;
          for (int64_t j : kept) {
            if (Suppresses(bb + i * 4, bb + j * 4, iou_thr)) {
              keep = false;
              break;
            }
          }
          if (!keep) continue;
          kept.push_back(i);
          selected.insert(selected.end(), {b, c, i});
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
        }
      }
    }
    const int64_t n = static_cast<int64_t>(selected.size()) / 3;
    Tensor out(TP::INT64, {n, 3});
    std::copy(selected.begin(), selected.end(), out.mutable_data<int64_t>());
    (*ctx.outputs)[0] = std::move(out);
    return absl::OkStatus();
  }

 private:
  // Box corners as [x_min, y_min, x_max, y_max].
  void Corners(const float* b, float* r) const {
    if (center_) {  // [x_center, y_center, width, height]
      const float hw = b[2] / 2, hh = b[3] / 2;
      r[0] = b[0] - hw;
      r[2] = b[0] + hw;
      r[1] = b[1] - hh;
      r[3] = b[1] + hh;
    } else {  // [y1, x1, y2, x2], either diagonal.
      r[0] = std::min(b[1], b[3]);
      r[2] = std::max(b[1], b[3]);
      r[1] = std::min(b[0], b[2]);
      r[3] = std::max(b[0], b[2]);
    }
  }

  // Whether a box overlaps an already selected one by more than the
  // threshold; disjoint or degenerate boxes never suppress (even at 0).
  bool Suppresses(const float* a, const float* b, float thr) const {
    float ra[4], rb[4];
    Corners(a, ra);
    Corners(b, rb);
    const float ix0 = std::max(ra[0], rb[0]), ix1 = std::min(ra[2], rb[2]);
    if (!(ix1 > ix0)) return false;
    const float iy0 = std::max(ra[1], rb[1]), iy1 = std::min(ra[3], rb[3]);
    if (!(iy1 > iy0)) return false;
    const float inter = (ix1 - ix0) * (iy1 - iy0);
    if (!(inter > 0)) return false;
    const float area_a = (ra[2] - ra[0]) * (ra[3] - ra[1]);
    const float area_b = (rb[2] - rb[0]) * (rb[3] - rb[1]);
    const float uni = area_a + area_b - inter;
    if (!(area_a > 0) || !(area_b > 0) || !(uni > 0)) return false;
    return inter / uni > thr;
  }

  bool center_ = false;
};

// ================================================================= RoiAlign

// Samples times channels one RoiAlign node may compute: with adaptive
// sampling (sampling_ratio 0) the sample count grows with the RoI size, which
// comes from an input, so a crafted RoI could otherwise stall the run (or
// constant folding, which no deadline stops). Mask R-CNN's 1000 RoIs x 256
// channels x 7x7 bins x 2x2 samples are 2^25.6; 2^30 takes seconds.
constexpr double kRoiAlignWorkBudget = 1073741824.0;  // 2^30
// Samples one bin may hold (they are gathered before the channels read
// them): a 1024x1024 RoI in 7x7 bins samples 147x147 = 2^14.4 per bin.
constexpr double kRoiAlignBinSamples = 1048576.0;  // 2^20

class RoiAlignKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<RoiAlignKernel>(new RoiAlignKernel);
    const std::string mode = info.String("mode", "avg");
    if (mode == "avg") {
      k->max_ = false;
    } else if (mode == "max") {
      k->max_ = true;
    } else {
      return info.UnsupportedAttr("mode", mode);
    }
    // Opset 10 has no attribute: it always behaved as output_half_pixel.
    if (info.opset() >= 16) {
      const std::string ct =
          info.String("coordinate_transformation_mode", "half_pixel");
      if (ct == "half_pixel") {
        k->half_pixel_ = true;
      } else if (ct == "output_half_pixel") {
        k->half_pixel_ = false;
      } else {
        return info.UnsupportedAttr("coordinate_transformation_mode", ct);
      }
    }
    k->out_h_ = info.Int("output_height", 1);
    k->out_w_ = info.Int("output_width", 1);
    k->sampling_ratio_ = info.Int("sampling_ratio", 0);
    k->spatial_scale_ = info.Float("spatial_scale", 1.0f);
    if (k->out_h_ < 1 || k->out_w_ < 1) {
      return info.Invalid("output_height and output_width must be positive");
    }
    if (k->sampling_ratio_ < 0) {
      return info.Invalid("sampling_ratio must not be negative");
    }
    if (!std::isfinite(k->spatial_scale_)) {
      return info.Invalid("spatial_scale must be finite");
    }
    if (info.num_inputs() < 3) {
      return info.Invalid("needs X, rois and batch_indices");
    }
    if (info.input_rank(0) >= 0 && info.input_rank(0) != 4) {
      return info.Invalid("X must be 4-D");
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::DOUBLE}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::FLOAT, TP::DOUBLE}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(2, {TP::INT64, TP::INT32}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(
        ctx.in(0).dtype(), [&](auto tag) { return Run<decltype(tag)>(ctx); });
  }

 private:
  // One bilinear sample: four flat offsets into a channel plane and their
  // weights (all zero for a sample outside the map).
  template <typename T>
  struct Sample {
    int64_t pos[4];
    T w[4];
  };

  template <typename T>
  absl::Status Run(const KernelContext& ctx) const {
    const Tensor& x = ctx.in(0);
    const Tensor& rois = ctx.in(1);
    const Tensor& bidx = ctx.in(2);
    if (x.rank() != 4) {
      return Invalid(
          absl::StrCat("X must be 4-D, got ", ShapeString(x.shape())));
    }
    if (rois.dtype() != x.dtype()) {
      return Invalid("rois must have X's element type");
    }
    if (rois.rank() != 2 || rois.dim(1) != 4) {
      return Invalid(absl::StrCat("rois must be [num_rois, 4], got ",
                                  ShapeString(rois.shape())));
    }
    const int64_t nr = rois.dim(0);
    if (bidx.rank() != 1 || bidx.dim(0) != nr ||
        (bidx.dtype() != TP::INT64 && bidx.dtype() != TP::INT32)) {
      return Invalid(absl::StrCat("batch_indices must be INT64 [", nr,
                                  "], got ", DataTypeName(bidx.dtype()), " ",
                                  ShapeString(bidx.shape())));
    }
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    const std::vector<int64_t> y_shape = {nr, c, out_h_, out_w_};
    QUANTD_RETURN_IF_ERROR(CheckedElementCount(y_shape));

    // Per RoI: its batch and the sampling grid, checked before any work.
    const T* r = rois.data<T>();
    std::vector<int64_t> grid(2 * nr);
    double work = 0;
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t b = bidx.IntAt(i);
      if (b < 0 || b >= n) {
        return Invalid(absl::StrCat("batch_indices[", i, "] = ", b,
                                    " is out of range for a batch of ", n));
      }
      for (int j = 0; j < 4; ++j) {
        if (!std::isfinite(static_cast<double>(r[i * 4 + j]))) {
          return Invalid(absl::StrCat("rois[", i, "] is not finite"));
        }
      }
      T rh, rw;
      Extent(r + i * 4, &rh, &rw);
      for (int a = 0; a < 2; ++a) {
        double g = static_cast<double>(sampling_ratio_);
        if (sampling_ratio_ == 0) {
          const T len = a == 0 ? rh : rw;
          const T bins = static_cast<T>(a == 0 ? out_h_ : out_w_);
          g = std::max(0.0, std::ceil(static_cast<double>(len / bins)));
        }
        if (!(g <= kRoiAlignWorkBudget)) g = kRoiAlignWorkBudget + 1;
        grid[2 * i + a] = static_cast<int64_t>(g);
      }
      work += static_cast<double>(grid[2 * i]) *
              static_cast<double>(grid[2 * i + 1]) *
              static_cast<double>(out_h_) * static_cast<double>(out_w_) *
              static_cast<double>(std::max<int64_t>(c, 1));
      if (work > kRoiAlignWorkBudget ||
          static_cast<double>(grid[2 * i]) *
                  static_cast<double>(grid[2 * i + 1]) >
              kRoiAlignBinSamples) {
        return Invalid(absl::StrCat(
            "the RoIs need more than 2^30 samples times channels, or 2^20 "
            "samples per bin (RoI ",
            i, " samples a ", grid[2 * i], "x", grid[2 * i + 1],
            " grid per bin); refused as unbounded work"));
      }
    }

    Tensor y(x.dtype(), y_shape);
    const T* xd = x.data<T>();
    T* yd = y.mutable_data<T>();
    const int64_t plane = h * w, bins = out_h_ * out_w_;
    if (plane == 0) {
      // Every sample of an empty map is outside it: zeros, and nothing to
      // read.
      std::fill_n(yd, y.size(), T(0));
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    }
    // Up to 2^30 samples: a cancelled run (a deadline) stops between RoIs.
    const quantd::CancellationToken* cancel =
        ctx.run_options != nullptr ? ctx.run_options->cancel : nullptr;
    std::atomic<bool> cancelled{false};
    ParallelRange(ctx.pool, nr, 1, [&](int64_t r0, int64_t r1) {
      std::vector<Sample<T>> samples;
      for (int64_t i = r0; i < r1; ++i) {
        if (cancel != nullptr && cancel->IsCancelled()) {
          cancelled = true;
          return;
        }
        const T* roi = r + i * 4;
        const T off = half_pixel_ ? T(0.5) : T(0);
        const T ss = static_cast<T>(spatial_scale_);
        const T start_w = roi[0] * ss - off, start_h = roi[1] * ss - off;
        T rh, rw;
        Extent(roi, &rh, &rw);
        const T bin_h = rh / static_cast<T>(out_h_);
        const T bin_w = rw / static_cast<T>(out_w_);
        const int64_t gh = grid[2 * i], gw = grid[2 * i + 1];
        const T inv_count =
            T(1) / static_cast<T>(std::max<int64_t>(gh * gw, 1));
        const T* xb = xd + bidx.IntAt(i) * c * plane;
        T* yr = yd + i * c * bins;
        for (int64_t ph = 0; ph < out_h_; ++ph) {
          for (int64_t pw = 0; pw < out_w_; ++pw) {
            samples.clear();
            for (int64_t iy = 0; iy < gh; ++iy) {
              const T yy =
                  start_h + static_cast<T>(ph) * bin_h +
                  (static_cast<T>(iy) + T(0.5)) * bin_h / static_cast<T>(gh);
              for (int64_t ix = 0; ix < gw; ++ix) {
                const T xx =
                    start_w + static_cast<T>(pw) * bin_w +
                    (static_cast<T>(ix) + T(0.5)) * bin_w / static_cast<T>(gw);
                samples.push_back(Bilinear<T>(yy, xx, h, w));
              }
            }
            for (int64_t ch = 0; ch < c; ++ch) {
              const T* p = xb + ch * plane;
              T acc = 0;
              bool first = true;
              for (const Sample<T>& s : samples) {
                if (max_) {
                  // ONNX Runtime's max mode: the largest weighted corner.
                  const T v = std::max(
                      std::max(s.w[0] * p[s.pos[0]], s.w[1] * p[s.pos[1]]),
                      std::max(s.w[2] * p[s.pos[2]], s.w[3] * p[s.pos[3]]));
                  acc = first ? v : std::max(acc, v);
                  first = false;
                } else {
                  acc += s.w[0] * p[s.pos[0]] + s.w[1] * p[s.pos[1]] +
                         s.w[2] * p[s.pos[2]] + s.w[3] * p[s.pos[3]];
                }
              }
              yr[ch * bins + ph * out_w_ + pw] = max_ ? acc : acc * inv_count;
            }
          }
        }
      }
    });
    if (cancelled) return cancel->Check("RoiAlign");
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

  // The RoI's height and width on the feature map.
  template <typename T>
  void Extent(const T* roi, T* rh, T* rw) const {
    const T ss = static_cast<T>(spatial_scale_);
    const T off = half_pixel_ ? T(0.5) : T(0);
    // Corner differences exactly as ONNX Runtime rounds them.
    *rw = (roi[2] * ss - off) - (roi[0] * ss - off);
    *rh = (roi[3] * ss - off) - (roi[1] * ss - off);
    if (!half_pixel_) {
      // output_half_pixel (the legacy behaviour) forces at least one pixel.
      *rw = std::max(*rw, T(1));
      *rh = std::max(*rh, T(1));
    }
  }

  template <typename T>
  static Sample<T> Bilinear(T y, T x, int64_t h, int64_t w) {
    Sample<T> s{};
    // Outside (or NaN: finite RoIs scaled past float range give inf - inf)
    // contributes zero.
    if (!(y >= T(-1) && y <= static_cast<T>(h) && x >= T(-1) &&
          x <= static_cast<T>(w)) ||
        h == 0 || w == 0) {
      return s;
    }
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x);
    int64_t y1, x1;
    if (y0 >= h - 1) {
      y0 = y1 = h - 1;
      y = static_cast<T>(y0);
    } else {
      y1 = y0 + 1;
    }
    if (x0 >= w - 1) {
      x0 = x1 = w - 1;
      x = static_cast<T>(x0);
    } else {
      x1 = x0 + 1;
    }
    const T ly = y - static_cast<T>(y0), lx = x - static_cast<T>(x0);
    const T hy = 1 - ly, hx = 1 - lx;
    s.pos[0] = y0 * w + x0;
    s.pos[1] = y0 * w + x1;
    s.pos[2] = y1 * w + x0;
    s.pos[3] = y1 * w + x1;
    s.w[0] = hy * hx;
    s.w[1] = hy * lx;
    s.w[2] = ly * hx;
    s.w[3] = ly * lx;
    return s;
  }

  bool max_ = false;
  bool half_pixel_ = false;
  int64_t out_h_ = 1, out_w_ = 1, sampling_ratio_ = 0;
  float spatial_scale_ = 1;
};

// =============================================================== GridSample

enum class GsMode { kNearest, kLinear, kCubic };
enum class GsPad { kZeros, kBorder, kReflection };

// Folds x into [lo, hi] by mirroring at the ends (ONNX Runtime's GsReflect,
// without its int overflow for far-away coordinates). A finite grid value
// can map to an infinite coordinate (beyond float range once scaled by the
// image size), which has no mirror position: it folds to lo.
double GsReflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (!(range > 0) || !std::isfinite(x)) return lo;
  if (x >= lo && x <= hi) return x;
  const double d = x < lo ? lo - x : x - hi;
  const double k = std::floor(d / range);
  const double rem = std::fmod(d, range);
  const bool even = std::fmod(k, 2.0) == 0;
  if (x < lo) return even ? lo + rem : hi - rem;
  return even ? hi - rem : lo + rem;
}

class GridSampleKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<GridSampleKernel>(new GridSampleKernel);
    const bool v20 = info.opset() >= 20;
    if (info.opset() < 16) {
      return info.Invalid("GridSample needs opset 16 or later");
    }
    const std::string mode = info.String("mode", v20 ? "linear" : "bilinear");
    if (mode == "nearest") {
      k->mode_ = GsMode::kNearest;
    } else if (mode == (v20 ? "linear" : "bilinear")) {
      k->mode_ = GsMode::kLinear;
    } else if (mode == (v20 ? "cubic" : "bicubic")) {
      k->mode_ = GsMode::kCubic;
    } else {
      return info.UnsupportedAttr("mode", mode);
    }
    const std::string pad = info.String("padding_mode", "zeros");
    if (pad == "zeros") {
      k->pad_ = GsPad::kZeros;
    } else if (pad == "border") {
      k->pad_ = GsPad::kBorder;
    } else if (pad == "reflection") {
      k->pad_ = GsPad::kReflection;
    } else {
      return info.UnsupportedAttr("padding_mode", pad);
    }
    const int64_t ac = info.Int("align_corners", 0);
    if (ac != 0 && ac != 1) {
      return info.UnsupportedAttr("align_corners", absl::StrCat(ac));
    }
    k->align_ = ac == 1;
    if (info.num_inputs() < 2) return info.Invalid("needs X and grid");
    for (int i = 0; i < 2; ++i) {
      const int r = info.input_rank(i);
      if (r >= 0 && r != 4) {
        if (v20) return NotNd(info.label());
        return info.Invalid("X and grid must be 4-D");
      }
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::DOUBLE}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::FLOAT, TP::DOUBLE}));
    k->v20_ = v20;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(
        ctx.in(0).dtype(), [&](auto tag) { return Run<decltype(tag)>(ctx); });
  }

 private:
  static constexpr char kNotNd[] =
      "only 4-D inputs (2-D sampling) are supported, not opset 20's N-D "
      "GridSample";
  static absl::Status NotNd(const std::string& label) {
    return absl::UnimplementedError(
        absl::StrCat("node '", label, "' (op GridSample): ", kNotNd));
  }

  // Up to 16 taps of one output location: flat offsets into a channel plane
  // (-1: a zero from padding) and weights.
  template <typename T>
  struct Taps {
    int n = 0;
    int64_t pos[16];
    T w[16];
  };

  // The offset of pixel (row, col) under the padding mode; -1 for zero.
  int64_t PixelAt(int64_t row, int64_t col, int64_t h, int64_t w,
                  const double* border) const {
    switch (pad_) {
      case GsPad::kZeros:
        if (row < 0 || row >= h || col < 0 || col >= w) return -1;
        break;
      case GsPad::kBorder:
        row = std::clamp<int64_t>(row, 0, h - 1);
        col = std::clamp<int64_t>(col, 0, w - 1);
        break;
      case GsPad::kReflection:
        col = static_cast<int64_t>(
            GsReflect(static_cast<double>(col), border[0], border[2]));
        row = static_cast<int64_t>(
            GsReflect(static_cast<double>(row), border[1], border[3]));
        row = std::clamp<int64_t>(row, 0, h - 1);
        col = std::clamp<int64_t>(col, 0, w - 1);
        break;
    }
    return row * w + col;
  }

  template <typename T>
  static void CubicCoeffs(T t, T* c) {
    constexpr T a = T(-0.75);
    const T t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
    c[0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
    c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    c[2] = ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1;
    c[3] = ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a;
  }

  // Taps for the grid point (gx, gy) in [-1, 1] coordinates; false when the
  // point is not finite (its output is NaN).
  template <typename T>
  bool MakeTaps(T gx, T gy, int64_t h, int64_t w, const double* border,
                Taps<T>* t) const {
    if (!std::isfinite(static_cast<double>(gx)) ||
        !std::isfinite(static_cast<double>(gy))) {
      return false;
    }
    const T fw = static_cast<T>(w), fh = static_cast<T>(h);
    T x = align_ ? (gx + 1) / 2 * (fw - 1) : ((gx + 1) * fw - 1) / 2;
    T y = align_ ? (gy + 1) / 2 * (fh - 1) : ((gy + 1) * fh - 1) / 2;
    if (mode_ == GsMode::kNearest) {
      x = std::nearbyint(x);  // Ties to even, as ONNX's reference rounds.
      y = std::nearbyint(y);
    }
    auto fix = [&](T v, T lo, T hi, T len) -> T {
      if (v >= lo && v <= hi) return v;
      switch (pad_) {
        case GsPad::kBorder:
          // Bicubic clamps each tap, not the point (as PyTorch and ONNX
          // Runtime do); beyond a few pixels every tap is the edge pixel,
          // so clamping there changes nothing.
          if (mode_ == GsMode::kCubic) return std::clamp<T>(v, -8, len + 8);
          return std::clamp<T>(v, 0, len - 1);
        case GsPad::kReflection:
          return static_cast<T>(GsReflect(static_cast<double>(v),
                                          static_cast<double>(lo),
                                          static_cast<double>(hi)));
        case GsPad::kZeros:
          // Every tap is already outside beyond a few pixels: clamping
          // there changes nothing and keeps the integer casts defined.
          return std::clamp<T>(v, -16, len + 16);
      }
      return v;
    };
    x = fix(x, static_cast<T>(border[0]), static_cast<T>(border[2]), fw);
    y = fix(y, static_cast<T>(border[1]), static_cast<T>(border[3]), fh);
    switch (mode_) {
      case GsMode::kNearest:
        t->n = 1;
        t->pos[0] = PixelAt(static_cast<int64_t>(y), static_cast<int64_t>(x), h,
                            w, border);
        t->w[0] = 1;
        break;
      case GsMode::kLinear: {
        const T x0 = std::floor(x), y0 = std::floor(y);
        const T dx = x - x0, dy = y - y0;
        const int64_t c0 = static_cast<int64_t>(x0),
                      r0 = static_cast<int64_t>(y0);
        t->n = 4;
        t->pos[0] = PixelAt(r0, c0, h, w, border);
        t->pos[1] = PixelAt(r0, c0 + 1, h, w, border);
        t->pos[2] = PixelAt(r0 + 1, c0, h, w, border);
        t->pos[3] = PixelAt(r0 + 1, c0 + 1, h, w, border);
        t->w[0] = (1 - dy) * (1 - dx);
        t->w[1] = (1 - dy) * dx;
        t->w[2] = dy * (1 - dx);
        t->w[3] = dy * dx;
        break;
      }
      case GsMode::kCubic: {
        const T x0 = std::floor(x), y0 = std::floor(y);
        T cx[4], cy[4];
        CubicCoeffs(x - x0, cx);
        CubicCoeffs(y - y0, cy);
        const int64_t c0 = static_cast<int64_t>(x0) - 1,
                      r0 = static_cast<int64_t>(y0) - 1;
        t->n = 16;
        for (int i = 0; i < 4; ++i) {
          for (int j = 0; j < 4; ++j) {
            t->pos[i * 4 + j] = PixelAt(r0 + i, c0 + j, h, w, border);
            t->w[i * 4 + j] = cy[i] * cx[j];
          }
        }
        break;
      }
    }
    return true;
  }

  template <typename T>
  absl::Status Run(const KernelContext& ctx) const {
    const Tensor& x = ctx.in(0);
    const Tensor& g = ctx.in(1);
    if (x.rank() != 4 || g.rank() != 4) {
      if (v20_) return absl::UnimplementedError(kNotNd);
      return Invalid(absl::StrCat("X and grid must be 4-D, got ",
                                  ShapeString(x.shape()), " and ",
                                  ShapeString(g.shape())));
    }
    if (g.dtype() != x.dtype()) {
      return absl::UnimplementedError(
          "GridSample supports a grid of X's element type only");
    }
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    if (g.dim(0) != n || g.dim(3) != 2) {
      return Invalid(absl::StrCat("grid must be [", n,
                                  ", H_out, W_out, 2], got ",
                                  ShapeString(g.shape())));
    }
    const int64_t oh = g.dim(1), ow = g.dim(2);
    Tensor y(x.dtype(), {n, c, oh, ow});
    if (y.size() == 0) {
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    }
    if (h == 0 || w == 0) return Invalid("cannot sample an empty image");
    // The range a coordinate may take before padding applies.
    const double border[4] = {
        align_ ? 0.0 : -0.5, align_ ? 0.0 : -0.5,
        align_ ? static_cast<double>(w - 1) : static_cast<double>(w) - 0.5,
        align_ ? static_cast<double>(h - 1) : static_cast<double>(h) - 0.5};
    const T* xd = x.data<T>();
    const T* gd = g.data<T>();
    T* yd = y.mutable_data<T>();
    const int64_t plane = h * w, oplane = oh * ow;
    ParallelRange(ctx.pool, n * oh, 1, [&](int64_t r0, int64_t r1) {
      Taps<T> t;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / oh, row = r % oh;
        for (int64_t col = 0; col < ow; ++col) {
          const T* gp = gd + ((b * oh + row) * ow + col) * 2;
          const bool ok = MakeTaps(gp[0], gp[1], h, w, border, &t);
          T* out = yd + b * c * oplane + row * ow + col;
          for (int64_t ch = 0; ch < c; ++ch) {
            const T* p = xd + (b * c + ch) * plane;
            T acc = 0;
            if (!ok) {
              acc = std::numeric_limits<T>::quiet_NaN();
            } else {
              for (int k = 0; k < t.n; ++k) {
                if (t.pos[k] >= 0) acc += t.w[k] * p[t.pos[k]];
              }
            }
            out[ch * oplane] = acc;
          }
        }
      }
    });
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

  GsMode mode_ = GsMode::kLinear;
  GsPad pad_ = GsPad::kZeros;
  bool align_ = false;
  bool v20_ = false;
};

// ================================================================ MaxUnpool

class MaxUnpoolKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<MaxUnpoolKernel>(new MaxUnpoolKernel);
    k->kernel_ = info.Ints("kernel_shape");
    k->strides_ = info.Ints("strides");
    k->pads_ = info.Ints("pads");
    if (k->kernel_.empty()) return info.Invalid("needs kernel_shape");
    const size_t r = k->kernel_.size();
    if (!k->strides_.empty() && k->strides_.size() != r) {
      return info.Invalid("strides must match kernel_shape");
    }
    if (!k->pads_.empty() && k->pads_.size() != 2 * r) {
      return info.Invalid("pads must have two values per kernel axis");
    }
    for (int64_t v : k->kernel_) {
      if (v < 1) return info.Invalid("kernel_shape must be positive");
    }
    for (int64_t v : k->strides_) {
      if (v < 1) return info.Invalid("strides must be positive");
    }
    for (int64_t v : k->pads_) {
      if (v < 0) return info.Invalid("pads must not be negative");
    }
    if (info.num_inputs() < 2) return info.Invalid("needs X and I");
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::DOUBLE}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::INT64}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(2, {TP::INT64}));
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
    const Tensor& idx = ctx.in(1);
    const int r = static_cast<int>(kernel_.size());
    if (x.rank() != r + 2) {
      return Invalid(absl::StrCat("X ", ShapeString(x.shape()), " needs rank ",
                                  r + 2, " for kernel_shape ",
                                  ShapeString(kernel_)));
    }
    if (idx.dtype() != TP::INT64 || idx.shape() != x.shape()) {
      return Invalid(absl::StrCat(
          "I must be INT64 of X's shape ", ShapeString(x.shape()), ", got ",
          DataTypeName(idx.dtype()), " ", ShapeString(idx.shape())));
    }
    // The indices are flat over the inferred output shape (as MaxPool's are
    // over its input); output_shape only pads that shape at the end of each
    // spatial axis, as ONNX's reference and ONNX Runtime do.
    std::vector<int64_t> inferred = {x.dim(0), x.dim(1)};
    for (int i = 0; i < r; ++i) {
      const int64_t s = strides_.empty() ? 1 : strides_[i];
      const int64_t pb = pads_.empty() ? 0 : pads_[i];
      const int64_t pe = pads_.empty() ? 0 : pads_[i + r];
      int64_t d = 0;
      if (__builtin_mul_overflow(x.dim(2 + i) - 1, s, &d) ||
          __builtin_add_overflow(d, kernel_[i], &d) ||
          __builtin_sub_overflow(d, pb, &d) ||
          __builtin_sub_overflow(d, pe, &d) || d < 0) {
        return Invalid(absl::StrCat(
            "no output size for X ", ShapeString(x.shape()),
            " with kernel_shape ", ShapeString(kernel_), ", strides and pads"));
      }
      inferred.push_back(d);
    }
    QUANTD_ASSIGN_OR_RETURN(int64_t inferred_total,
                            CheckedElementCount(inferred));
    std::vector<int64_t> y_shape = inferred;
    if (ctx.has(2)) {
      const Tensor& os = ctx.in(2);
      if (os.rank() != 1 || os.size() != x.rank() ||
          (os.dtype() != TP::INT64 && os.dtype() != TP::INT32)) {
        return Invalid(absl::StrCat("output_shape must be ", x.rank(),
                                    " INT64 values, got ",
                                    ShapeString(os.shape())));
      }
      y_shape = os.ToInt64Vector();
      bool fits = y_shape[0] == x.dim(0) && y_shape[1] == x.dim(1);
      for (int i = 2; i < x.rank(); ++i)
        fits = fits && y_shape[i] >= inferred[i];
      if (!fits) {
        return Invalid(absl::StrCat(
            "output_shape ", ShapeString(y_shape),
            " must keep X's batch and channels ", ShapeString(x.shape()),
            " and not be smaller than the inferred ", ShapeString(inferred)));
      }
    }
    QUANTD_ASSIGN_OR_RETURN(int64_t total, CheckedElementCount(y_shape));
    QUANTD_RETURN_IF_ERROR(CheckedByteSize(total, sizeof(T)));
    const int64_t* id = idx.data<int64_t>();
    for (int64_t i = 0; i < idx.size(); ++i) {
      if (id[i] < 0 || id[i] >= inferred_total) {
        return Invalid(absl::StrCat(
            "I[", i, "] = ", id[i], " is out of range for an output of ",
            inferred_total, " elements ", ShapeString(inferred)));
      }
    }
    Tensor y(x.dtype(), y_shape);
    T* yd = y.mutable_data<T>();
    std::fill_n(yd, y.size(), T(0));
    const T* xd = x.data<T>();
    const bool padded = y_shape != inferred;
    // A repeated index keeps the last value written.
    for (int64_t i = 0; i < x.size(); ++i) {
      int64_t at = id[i];
      if (padded) {
        // Re-address the inferred coordinates in the padded shape.
        int64_t rest = at, stride = 1;
        at = 0;
        for (int d = x.rank() - 1; d >= 0; --d) {
          at += (rest % inferred[d]) * stride;
          rest /= inferred[d];
          stride *= y_shape[d];
        }
      }
      yd[at] = xd[i];
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

  std::vector<int64_t> kernel_, strides_, pads_;
};

// ====================================================================== LRN

class LrnKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<LrnKernel>(new LrnKernel);
    if (!info.HasAttr("size")) return info.Invalid("needs the size attribute");
    k->size_ = info.Int("size", 1);
    k->alpha_ = info.Float("alpha", 0.0001f);
    k->beta_ = info.Float("beta", 0.75f);
    k->bias_ = info.Float("bias", 1.0f);
    if (k->size_ < 1) return info.Invalid("size must be positive");
    if (info.input_rank(0) >= 0 && info.input_rank(0) < 3) {
      return info.Invalid("X must be [N, C, D1, ...]");
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
    if (x.rank() < 3) {
      return Invalid(absl::StrCat("X must be [N, C, D1, ...], got ",
                                  ShapeString(x.shape())));
    }
    const int64_t n = x.dim(0), c = x.dim(1);
    const int64_t plane = x.size() / std::max<int64_t>(1, n * c);
    // The window of channel ch is [ch - before, ch + after].
    const int64_t before = (size_ - 1) / 2, after = size_ - 1 - before;
    const double scale = static_cast<double>(alpha_) / size_;
    Tensor y(x.dtype(), x.shape());
    const T* xd = x.data<T>();
    T* yd = y.mutable_data<T>();
    ParallelRange(ctx.pool, n * c, 1, [&](int64_t p0, int64_t p1) {
      std::vector<double> sq(plane);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p / c, ch = p % c;
        std::fill(sq.begin(), sq.end(), 0.0);
        const int64_t lo = std::max<int64_t>(0, ch - before);
        const int64_t hi = std::min<int64_t>(c - 1, ch + std::min(after, c));
        for (int64_t k = lo; k <= hi; ++k) {
          const T* src = xd + (b * c + k) * plane;
          for (int64_t i = 0; i < plane; ++i) {
            const double v = static_cast<double>(src[i]);
            sq[i] += v * v;
          }
        }
        const T* src = xd + p * plane;
        T* dst = yd + p * plane;
        for (int64_t i = 0; i < plane; ++i) {
          dst[i] = static_cast<T>(
              static_cast<double>(src[i]) /
              std::pow(static_cast<double>(bias_) + scale * sq[i],
                       static_cast<double>(beta_)));
        }
      }
    });
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

  int64_t size_ = 1;
  float alpha_ = 0.0001f, beta_ = 0.75f, bias_ = 1.0f;
};

}  // namespace

void RegisterDetectionOps(OpRegistry* r) {
  r->Register("NonMaxSuppression", &NmsKernel::Create);
  r->Register("RoiAlign", &RoiAlignKernel::Create);
  r->Register("GridSample", &GridSampleKernel::Create);
  r->Register("MaxUnpool", &MaxUnpoolKernel::Create);
  r->Register("LRN", &LrnKernel::Create);
}

}  // namespace quantd::executor
