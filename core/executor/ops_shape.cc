// Data-movement and shape kernels: the glue of exported graphs (Reshape,
// Transpose, Slice, Gather, Concat, ...) plus Constant, Cast and Range. They
// move bytes, so most are written once for every element type by size.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/checked_count.h"
#include "core/base/status_macros.h"
#include "core/executor/broadcast.h"
#include "core/executor/cast.h"
#include "core/executor/kernel.h"
#include "core/executor/layout.h"
#include "core/executor/wrapping.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

std::string Join(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

absl::Status RequireInt(const Tensor& t, const char* what) {
  if (t.dtype() != TP::INT64 && t.dtype() != TP::INT32) {
    return Invalid(absl::StrCat(what, " must be INT64 (or INT32), not ",
                                DataTypeName(t.dtype())));
  }
  return absl::OkStatus();
}

// Factories for kernels whose attributes are read into the object.
#define QUANTD_SIMPLE_FACTORY(K)                                          \
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) { \
    auto k = std::unique_ptr<K>(new K);                                   \
    QUANTD_RETURN_IF_ERROR(k->Init(info));                                \
    return std::unique_ptr<Kernel>(std::move(k));                         \
  }

// ---------------------------------------------------------------- Identity

class IdentityKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(IdentityKernel)
  absl::Status Init(NodeInfo&) { return absl::OkStatus(); }
  absl::Status Compute(const KernelContext& ctx) const override {
    (*ctx.outputs)[0] = ctx.in(0);
    return absl::OkStatus();
  }
};

// ----------------------------------------------------------------- Dropout

// Inference only: the output is the input and the mask all true. A node that
// may train at run time (training_mode not a constant false, unless the ratio
// is a constant 0) would draw random masks, which calibration must not see:
// it is refused at Create.
class DropoutKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(DropoutKernel)
  absl::Status Init(NodeInfo& info) {
    if (info.opset() < 12) {
      const float ratio = info.Float("ratio", 0.5f);
      if (!(ratio >= 0.0f && ratio < 1.0f)) {
        return info.Invalid(absl::StrCat("ratio ", ratio, " is not in [0, 1)"));
      }
      // Before opset 10 the mask had the input's type.
      if (info.opset() >= 10) info.set_output_type(1, TP::BOOL);
      mask_type_ = info.opset() >= 10 ? TP::BOOL : 0;
      return absl::OkStatus();
    }
    info.Int("seed", 0);  // Only training draws random numbers.
    info.set_output_type(1, TP::BOOL);
    mask_type_ = TP::BOOL;
    if (info.num_inputs() > 3) return info.Invalid("takes at most 3 inputs");
    const Tensor* ratio = info.has_input(1) ? info.constant_input(1) : nullptr;
    if (ratio != nullptr && ratio->size() != 1) {
      return info.Invalid("ratio must be a scalar");
    }
    if (!info.has_input(2)) return absl::OkStatus();
    const Tensor* training = info.constant_input(2);
    if (training == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "node '", info.label(),
          "' (op Dropout): training_mode is a run-time input; the executor "
          "runs inference only (a constant false training_mode is "
          "supported)"));
    }
    if (training->dtype() != TP::BOOL || training->size() != 1) {
      return info.Invalid("training_mode must be a BOOL scalar");
    }
    const bool zero_ratio = ratio != nullptr && ratio->dtype() == TP::FLOAT &&
                            ratio->data<float>()[0] == 0.0f;
    if (training->data<bool>()[0] && !zero_ratio) {
      return info.UnsupportedAttr("training_mode", "true");
    }
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    (*ctx.outputs)[0] = x;
    if (ctx.outputs->size() < 2) return absl::OkStatus();
    const int32_t type = mask_type_ != 0 ? mask_type_ : x.dtype();
    Tensor mask(static_cast<DataType>(type), x.shape());
    absl::Status s =
        Dispatch<bool, float, double, int64_t, int32_t, int8_t, uint8_t>(
            type, [&](auto tag) {
              using T = decltype(tag);
              std::fill(mask.mutable_data<T>(),
                        mask.mutable_data<T>() + mask.size(), T(1));
              return absl::OkStatus();
            });
    if (!s.ok()) return s;
    (*ctx.outputs)[1] = std::move(mask);
    return absl::OkStatus();
  }

 private:
  int32_t mask_type_ = TP::BOOL;  // 0: the input's type.
};

// ----------------------------------------------------------------- Flatten

class FlattenKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(FlattenKernel)
  absl::Status Init(NodeInfo& info) {
    axis_ = info.Int("axis", 1);
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    int64_t axis = axis_ < 0 ? axis_ + x.rank() : axis_;
    if (axis < 0 || axis > x.rank()) return Invalid("axis out of range");
    int64_t outer = 1;
    for (int i = 0; i < axis; ++i) outer *= x.dim(i);
    int64_t inner = 1;
    for (int i = axis; i < x.rank(); ++i) inner *= x.dim(i);
    (*ctx.outputs)[0] = x.Reshaped({outer, inner});
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 1;
};

// ----------------------------------------------------------------- Reshape

class ReshapeKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(ReshapeKernel)
  absl::Status Init(NodeInfo& info) {
    if (info.opset() >= 14) allowzero_ = info.Int("allowzero", 0) != 0;
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (!ctx.has(1)) return Invalid("needs the shape input");
    QUANTD_RETURN_IF_ERROR(RequireInt(ctx.in(1), "shape"));
    std::vector<int64_t> shape = ctx.in(1).ToInt64Vector();
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !allowzero_) {
        if (i >= x.shape().size()) return Invalid("0 past the input's rank");
        shape[i] = x.dim(i);
      }
      if (shape[i] == -1) {
        if (infer >= 0) return Invalid("more than one -1 in shape");
        infer = static_cast<int>(i);
      } else if (shape[i] < 0) {
        return Invalid(absl::StrCat("bad shape ", Join(shape)));
      } else {
        known = SaturatingMul(known, shape[i]);  // Never equals x.size().
      }
    }
    if (infer >= 0) {
      if (known == 0 || x.size() % known != 0) {
        return Invalid(absl::StrCat("cannot reshape ", ShapeString(x.shape()),
                                    " to ", Join(shape)));
      }
      shape[infer] = x.size() / known;
    }
    if (NumElements(shape) != x.size()) {
      return Invalid(absl::StrCat("cannot reshape ", ShapeString(x.shape()),
                                  " to ", Join(shape)));
    }
    (*ctx.outputs)[0] = x.Reshaped(shape);
    return absl::OkStatus();
  }

 private:
  bool allowzero_ = false;
};

// --------------------------------------------------------------- Transpose

class TransposeKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(TransposeKernel)
  absl::Status Init(NodeInfo& info) {
    perm_ = info.Ints("perm");
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> perm = perm_;
    if (perm.empty()) {
      for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
    }
    if (static_cast<int>(perm.size()) != x.rank()) {
      return Invalid("perm does not match the input rank");
    }
    std::vector<bool> seen(x.rank(), false);
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    std::vector<int64_t> shape, strides;
    for (int64_t p : perm) {
      if (p < 0 || p >= x.rank() || seen[p]) return Invalid("bad perm");
      seen[p] = true;
      shape.push_back(x.dim(p));
      strides.push_back(in_strides[p]);
    }
    Tensor y(x.dtype(), shape);
    StridedCopy(x.raw(), ElementSize(x.dtype()), strides, shape, y.raw());
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> perm_;
};

// ------------------------------------------------------------------ Concat

class ConcatKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(ConcatKernel)
  absl::Status Init(NodeInfo& info) {
    if (!info.HasAttr("axis")) return info.Invalid("needs axis");
    axis_ = info.Int("axis", 0);
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& first = ctx.in(0);
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, first.rank()));
    std::vector<int64_t> shape = first.shape();
    shape[axis] = 0;
    for (const Tensor* t : ctx.inputs) {
      if (t->dtype() != first.dtype() || t->rank() != first.rank()) {
        return Invalid("inputs differ in type or rank");
      }
      for (int d = 0; d < t->rank(); ++d) {
        if (d != axis && t->dim(d) != first.dim(d)) {
          return Invalid(absl::StrCat("shapes ", ShapeString(first.shape()),
                                      " and ", ShapeString(t->shape()),
                                      " do not concatenate on axis ", axis));
        }
      }
      shape[axis] = SaturatingAdd(shape[axis], t->dim(axis));
    }
    Tensor y(first.dtype(), shape);
    const int64_t esize = ElementSize(first.dtype());
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d) outer *= shape[d];
    const int64_t out_block = y.size() / std::max<int64_t>(outer, 1) * esize;
    char* out = static_cast<char*>(y.raw());
    int64_t at = 0;
    for (const Tensor* t : ctx.inputs) {
      const int64_t block = t->size() / std::max<int64_t>(outer, 1) * esize;
      const char* in = static_cast<const char*>(t->raw());
      for (int64_t o = 0; o < outer && block > 0; ++o) {
        std::memcpy(out + o * out_block + at, in + o * block, block);
      }
      at += block;
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0;
};

// ------------------------------------------------------------------- Split

class SplitKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(SplitKernel)
  absl::Status Init(NodeInfo& info) {
    axis_ = info.Int("axis", 0);
    if (info.opset() < 13) split_ = info.Ints("split");
    if (info.opset() >= 18) {
      num_outputs_ = info.Int("num_outputs", 0);
      if (num_outputs_ > 0 && num_outputs_ != info.num_outputs()) {
        return info.Invalid("num_outputs does not match the outputs");
      }
    }
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    const int64_t outs = static_cast<int64_t>(ctx.outputs->size());
    const int64_t len = x.dim(axis);
    std::vector<int64_t> split = split_;
    if (ctx.has(1)) split = ctx.in(1).ToInt64Vector();
    if (split.empty()) {
      // Equal parts; from opset 18 the last may be smaller.
      const int64_t part = (len + outs - 1) / outs;
      if (num_outputs_ == 0 && len % outs != 0) {
        return Invalid(
            absl::StrCat("cannot split ", len, " into ", outs, " equal parts"));
      }
      for (int64_t i = 0; i < outs; ++i) {
        split.push_back(std::max<int64_t>(0, std::min(part, len - i * part)));
      }
    }
    // Sizes come from the model: negative ones are refused, and the sum
    // saturates rather than wrap into a match.
    int64_t total = 0;
    for (int64_t v : split) {
      if (v < 0) {
        return Invalid(
            absl::StrCat("split ", Join(split), " has a negative size"));
      }
      total = SaturatingAdd(total, v);
    }
    if (static_cast<int64_t>(split.size()) != outs || total != len) {
      return Invalid(absl::StrCat("split ", Join(split), " does not cover ",
                                  len, " with ", outs, " outputs"));
    }
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dim(d);
    const int64_t esize = ElementSize(x.dtype());
    const int64_t inner = x.size() / std::max<int64_t>(outer * len, 1) * esize;
    const char* in = static_cast<const char*>(x.raw());
    int64_t at = 0;
    for (int64_t i = 0; i < outs; ++i) {
      std::vector<int64_t> shape = x.shape();
      shape[axis] = split[i];
      Tensor y(x.dtype(), shape);
      const int64_t block = split[i] * inner;
      for (int64_t o = 0; o < outer && block > 0; ++o) {
        std::memcpy(static_cast<char*>(y.raw()) + o * block,
                    in + o * len * inner + at, block);
      }
      at += block;
      (*ctx.outputs)[i] = std::move(y);
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0;
  int64_t num_outputs_ = 0;
  std::vector<int64_t> split_;
};

// ------------------------------------------------------------------- Slice

class SliceKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(SliceKernel)
  absl::Status Init(NodeInfo& info) {
    // Before opset 10 starts/ends/axes were attributes.
    if (info.opset() < 10) {
      starts_ = info.Ints("starts");
      ends_ = info.Ints("ends");
      axes_ = info.Ints("axes");
      attrs_ = true;
    }
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> starts = starts_, ends = ends_, axes = axes_, steps;
    if (!attrs_) {
      if (!ctx.has(1) || !ctx.has(2)) return Invalid("needs starts and ends");
      for (int i = 1; i <= 4; ++i) {
        if (!ctx.has(i)) continue;
        QUANTD_RETURN_IF_ERROR(RequireInt(ctx.in(i), "starts/ends/axes/steps"));
      }
      starts = ctx.in(1).ToInt64Vector();
      ends = ctx.in(2).ToInt64Vector();
      if (ctx.has(3)) axes = ctx.in(3).ToInt64Vector();
      if (ctx.has(4)) steps = ctx.in(4).ToInt64Vector();
    }
    if (axes.empty()) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(i);
    }
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() ||
        steps.size() != starts.size()) {
      return Invalid("starts, ends, axes and steps differ in length");
    }
    const int rank = x.rank();
    std::vector<int64_t> begin(rank, 0), step(rank, 1), shape = x.shape();
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < starts.size(); ++i) {
      QUANTD_ASSIGN_OR_RETURN(int ax, NormalizeAxis(axes[i], rank));
      if (seen[ax]) return Invalid("repeated axis");
      seen[ax] = true;
      const int64_t dim = x.dim(ax);
      if (steps[i] == 0) return Invalid("step 0");
      // A step longer than the dim takes at most one element, as a step of
      // the dim does; clamped, the count and stride products below cannot
      // overflow (a step of INT64_MAX or INT64_MIN is legal).
      const int64_t longest = std::max<int64_t>(dim, 1);
      const int64_t st = std::clamp<int64_t>(steps[i], -longest, longest);
      int64_t s = starts[i], e = ends[i];
      if (s < 0) s += dim;
      if (e < 0) e += dim;
      if (st > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
      } else {
        s = std::clamp<int64_t>(s, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
      }
      // Huge sentinels (INT64_MAX) are common: compute the count safely.
      const int64_t count = st > 0 ? (e > s ? (e - s + st - 1) / st : 0)
                                   : (s > e ? (s - e + (-st) - 1) / (-st) : 0);
      begin[ax] = s;
      step[ax] = st;
      shape[ax] = count;
    }
    Tensor y(x.dtype(), shape);
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    std::vector<int64_t> strides(rank);
    int64_t base = 0;
    for (int d = 0; d < rank; ++d) {
      strides[d] = in_strides[d] * step[d];
      if (shape[d] > 0) base += begin[d] * in_strides[d];
    }
    const int64_t esize = ElementSize(x.dtype());
    StridedCopy(static_cast<const char*>(x.raw()) + base * esize, esize,
                strides, shape, y.raw());
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  bool attrs_ = false;
  std::vector<int64_t> starts_, ends_, axes_;
};

// ------------------------------------------------------------------ Gather

class GatherKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(GatherKernel)
  absl::Status Init(NodeInfo& info) {
    axis_ = info.Int("axis", 0);
    return info.RequireType(1, {TP::INT64, TP::INT32});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& idx = ctx.in(1);
    QUANTD_RETURN_IF_ERROR(RequireInt(idx, "indices"));
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + axis);
    shape.insert(shape.end(), idx.shape().begin(), idx.shape().end());
    shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
    Tensor y(x.dtype(), shape);
    const int64_t dim = x.dim(axis);
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dim(d);
    const int64_t esize = ElementSize(x.dtype());
    const int64_t block = x.size() / std::max<int64_t>(outer * dim, 1) * esize;
    const char* in = static_cast<const char*>(x.raw());
    char* out = static_cast<char*>(y.raw());
    const int64_t n = idx.size();
    for (int64_t i = 0; i < n; ++i) {
      int64_t j = idx.IntAt(i);
      if (j < 0) j += dim;
      if (j < 0 || j >= dim) {
        return Invalid(absl::StrCat("index ", idx.IntAt(i),
                                    " is out of range for a dim of ", dim));
      }
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(out + (o * n + i) * block, in + (o * dim + j) * block,
                    block);
      }
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0;
};

// --------------------------------------------------- Squeeze / Unsqueeze

class SqueezeKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(SqueezeKernel)
  absl::Status Init(NodeInfo& info) {
    unsqueeze_ = info.op() == "Unsqueeze";
    // Opset 13 moved axes from an attribute to an input.
    if (info.opset() < 13) {
      axes_ = info.Ints("axes");
      attr_ = true;
      if (unsqueeze_ && axes_.empty()) return info.Invalid("needs axes");
    }
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> axes = axes_;
    if (!attr_ && ctx.has(1)) {
      QUANTD_RETURN_IF_ERROR(RequireInt(ctx.in(1), "axes"));
      axes = ctx.in(1).ToInt64Vector();
    }
    if (unsqueeze_) {
      const int rank = x.rank() + static_cast<int>(axes.size());
      std::vector<bool> add(rank, false);
      for (int64_t a : axes) {
        QUANTD_ASSIGN_OR_RETURN(int ax, NormalizeAxis(a, rank));
        if (add[ax]) return Invalid("repeated axis");
        add[ax] = true;
      }
      std::vector<int64_t> shape;
      int j = 0;
      for (int i = 0; i < rank; ++i) shape.push_back(add[i] ? 1 : x.dim(j++));
      (*ctx.outputs)[0] = x.Reshaped(shape);
      return absl::OkStatus();
    }
    std::vector<bool> drop(x.rank(), axes.empty());
    if (axes.empty()) {
      for (int i = 0; i < x.rank(); ++i) drop[i] = x.dim(i) == 1;
    }
    for (int64_t a : axes) {
      QUANTD_ASSIGN_OR_RETURN(int ax, NormalizeAxis(a, x.rank()));
      if (x.dim(ax) != 1) {
        return Invalid(absl::StrCat("cannot squeeze axis ", a, " of ",
                                    ShapeString(x.shape())));
      }
      drop[ax] = true;
    }
    std::vector<int64_t> shape;
    for (int i = 0; i < x.rank(); ++i) {
      if (!drop[i]) shape.push_back(x.dim(i));
    }
    (*ctx.outputs)[0] = x.Reshaped(shape);
    return absl::OkStatus();
  }

 private:
  bool unsqueeze_ = false;
  bool attr_ = false;
  std::vector<int64_t> axes_;
};

// ------------------------------------------------------------------- Shape

class ShapeKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(ShapeKernel)
  absl::Status Init(NodeInfo& info) {
    if (info.opset() >= 15) {
      start_ = info.Int("start", 0);
      if (info.HasAttr("end")) end_ = info.Int("end", 0);
      has_end_ = info.HasAttr("end");
    }
    info.set_output_type(0, TP::INT64);
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    auto clamp = [r](int64_t v) {
      if (v < 0) v += r;
      return std::clamp<int64_t>(v, 0, r);
    };
    const int64_t s = clamp(start_), e = has_end_ ? clamp(end_) : r;
    std::vector<int64_t> dims;
    for (int64_t i = s; i < e; ++i) dims.push_back(x.dim(i));
    (*ctx.outputs)[0] =
        Tensor::FromVector<int64_t>({static_cast<int64_t>(dims.size())}, dims);
    return absl::OkStatus();
  }

 private:
  int64_t start_ = 0, end_ = 0;
  bool has_end_ = false;
};

// -------------------------------------------------------------------- Cast

class CastKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(CastKernel)
  absl::Status Init(NodeInfo& info) {
    to_ = static_cast<int32_t>(info.Int("to", 0));
    // Opset 19's saturate only changes casts to the 8-bit floats, which are
    // refused below.
    if (info.opset() >= 19) info.Int("saturate", 1);
    if (!CastableType(to_)) {
      return info.UnsupportedAttr("to", DataTypeName(to_));
    }
    info.set_output_type(0, to_);
    if (info.input_type(0) != 0 && !CastableType(info.input_type(0))) {
      return info.RequireType(0, {});
    }
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    QUANTD_ASSIGN_OR_RETURN((*ctx.outputs)[0],
                            CastTensor(ctx.in(0), to_, ctx.pool));
    return absl::OkStatus();
  }

 private:
  int32_t to_ = 0;
};

// ---------------------------------------------------------------- Constant

class ConstantKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(ConstantKernel)
  absl::Status Init(NodeInfo& info) {
    int found = 0;
    if (const onnx::TensorProto* t = info.TensorAttr("value")) {
      absl::StatusOr<Tensor> v = Tensor::FromProto(*t);
      if (!v.ok()) {
        if (v.status().code() == absl::StatusCode::kUnimplemented) {
          return info.UnsupportedAttr("value", DataTypeName(t->data_type()));
        }
        return info.Invalid(std::string(v.status().message()));
      }
      value_ = *std::move(v);
      ++found;
    }
    if (info.HasAttr("value_float")) {
      value_ = Tensor::Scalar<float>(info.Float("value_float", 0));
      ++found;
    }
    if (info.HasAttr("value_floats")) {
      std::vector<float> v = info.Floats("value_floats");
      value_ = Tensor::FromVector<float>({static_cast<int64_t>(v.size())}, v);
      ++found;
    }
    if (info.HasAttr("value_int")) {
      value_ = Tensor::Scalar<int64_t>(info.Int("value_int", 0));
      ++found;
    }
    if (info.HasAttr("value_ints")) {
      std::vector<int64_t> v = info.Ints("value_ints");
      value_ = Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
      ++found;
    }
    // sparse_value and strings are never read, so Finish() names them.
    if (found > 1) return info.Invalid("more than one value attribute");
    if (found == 0 && info.node().attribute_size() == 0) {
      return info.Invalid("needs a value attribute");
    }
    info.set_output_type(0, value_.dtype());
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    (*ctx.outputs)[0] = value_;
    return absl::OkStatus();
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(ConstantOfShapeKernel)
  absl::Status Init(NodeInfo& info) {
    value_ = Tensor::Scalar<float>(0.0f);
    if (const onnx::TensorProto* t = info.TensorAttr("value")) {
      absl::StatusOr<Tensor> v = Tensor::FromProto(*t);
      if (!v.ok()) {
        if (v.status().code() == absl::StatusCode::kUnimplemented) {
          return info.UnsupportedAttr("value", DataTypeName(t->data_type()));
        }
        return info.Invalid(std::string(v.status().message()));
      }
      if (v->size() != 1) return info.Invalid("value must hold one element");
      value_ = *std::move(v);
    }
    info.set_output_type(0, value_.dtype());
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    QUANTD_RETURN_IF_ERROR(RequireInt(ctx.in(0), "shape"));
    std::vector<int64_t> shape = ctx.in(0).ToInt64Vector();
    for (int64_t d : shape) {
      if (d < 0) return Invalid("negative dim");
    }
    Tensor y(value_.dtype(), shape);
    const int64_t esize = ElementSize(value_.dtype());
    char* out = static_cast<char*>(y.raw());
    for (int64_t i = 0; i < y.size(); ++i) {
      std::memcpy(out + i * esize, value_.raw(), esize);
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  Tensor value_;
};

// ------------------------------------------------------------------ Expand

class ExpandKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(ExpandKernel)
  absl::Status Init(NodeInfo&) { return absl::OkStatus(); }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_RETURN_IF_ERROR(RequireInt(ctx.in(1), "shape"));
    // Bidirectional: the result is the broadcast of both shapes.
    const std::vector<int64_t> shapes[2] = {x.shape(),
                                            ctx.in(1).ToInt64Vector()};
    QUANTD_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                            BroadcastShapes(shapes));
    (*ctx.outputs)[0] = ExpandTo(x, shape);
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------------- Range

class RangeKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(RangeKernel)
  absl::Status Init(NodeInfo& info) {
    return info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    for (int i = 0; i < 3; ++i) {
      if (ctx.in(i).size() != 1 || ctx.in(i).dtype() != ctx.in(0).dtype()) {
        return Invalid("start, limit and delta must be scalars of one type");
      }
    }
    return Dispatch<float, double, int64_t, int32_t>(
        ctx.in(0).dtype(), [&](auto tag) -> absl::Status {
          using T = decltype(tag);
          const T start = ctx.in(0).data<T>()[0];
          const T limit = ctx.in(1).data<T>()[0];
          const T delta = ctx.in(2).data<T>()[0];
          if (delta == T(0)) return Invalid("delta is 0");
          // ceil((limit - start) / delta) elements: exactly for integers
          // (in a double, INT64_MAX - 2 and INT64_MAX are one number).
          double count = 0;
          if constexpr (std::is_integral_v<T>) {
            const __int128 span = static_cast<__int128>(limit) - start;
            const bool up = span % delta != 0 && (span > 0) == (delta > 0);
            const __int128 steps = span / delta + (up ? 1 : 0);
            count = static_cast<double>(steps);
          } else {
            count = std::ceil((static_cast<double>(limit) - start) / delta);
          }
          // NaN or infinite bounds, or more elements than an index holds.
          if (!(count < 0x1p62)) {
            return Invalid(absl::StrCat("Range(", start, ", ", limit, ", ",
                                        delta, ") has no finite length"));
          }
          const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
          Tensor y(TypeOf<T>::value, {n});
          T* out = y.mutable_data<T>();
          for (int64_t i = 0; i < n; ++i) {
            // For integers i * delta alone may leave the type; the sum
            // does not, and both wrap.
            out[i] = ValueAdd(start, ValueMul(T(i), delta));
          }
          (*ctx.outputs)[0] = std::move(y);
          return absl::OkStatus();
        });
  }
};

// --------------------------------------------------------------------- Pad

class PadKernel : public Kernel {
 public:
  QUANTD_SIMPLE_FACTORY(PadKernel)
  absl::Status Init(NodeInfo& info) {
    const std::string mode = info.String("mode", "constant");
    if (mode == "constant") {
      mode_ = Mode::kConstant;
    } else if (mode == "reflect") {
      mode_ = Mode::kReflect;
    } else if (mode == "edge") {
      mode_ = Mode::kEdge;
    } else if (mode == "wrap" && info.opset() >= 19) {
      mode_ = Mode::kWrap;
    } else {
      return info.UnsupportedAttr("mode", mode);
    }
    // Before opset 11 pads and the value were attributes.
    if (info.opset() < 11) {
      pads_ = info.Ints("pads");
      value_ = info.Float("value", 0.0f);
      attrs_ = true;
    }
    return info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32,
                                TP::INT8, TP::UINT8, TP::BOOL});
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const int rank = x.rank();
    std::vector<int64_t> pads = pads_;
    if (!attrs_) {
      QUANTD_RETURN_IF_ERROR(RequireInt(ctx.in(1), "pads"));
      pads = ctx.in(1).ToInt64Vector();
    }
    // Opset 18 may name the axes the pads apply to.
    std::vector<int64_t> axes;
    if (ctx.has(3)) {
      axes = ctx.in(3).ToInt64Vector();
    } else {
      for (int i = 0; i < rank; ++i) axes.push_back(i);
    }
    if (pads.size() != 2 * axes.size()) {
      return Invalid(
          absl::StrCat("pads ", Join(pads), " do not match rank ", rank));
    }
    // A pad past 2^40 would make a tensor far beyond any size limit; refused
    // before the sums below, which then stay far from int64 overflow.
    constexpr int64_t kMaxPad = int64_t{1} << 40;
    for (int64_t p : pads) {
      if (p > kMaxPad || p < -kMaxPad) {
        return Invalid(absl::StrCat("pad ", p, " is beyond +-2^40"));
      }
    }
    std::vector<int64_t> pb(rank, 0), pe(rank, 0);
    const int na = static_cast<int>(axes.size());
    for (int i = 0; i < na; ++i) {
      QUANTD_ASSIGN_OR_RETURN(int ax, NormalizeAxis(axes[i], rank));
      pb[ax] = pads[i];
      pe[ax] = pads[i + na];
    }
    std::vector<int64_t> shape(rank);
    for (int d = 0; d < rank; ++d) {
      shape[d] = x.dim(d) + pb[d] + pe[d];
      if (shape[d] < 0) return Invalid("pads remove more than the dim");
      if (mode_ != Mode::kConstant && shape[d] > 0 && x.dim(d) == 0) {
        return Invalid("cannot reflect, extend or wrap an empty dim");
      }
    }
    return Dispatch<float, double, int64_t, int32_t, int8_t, uint8_t, bool>(
        x.dtype(), [&](auto tag) -> absl::Status {
          using T = decltype(tag);
          T value = static_cast<T>(value_);
          if (!attrs_ && ctx.has(2)) {
            if (ctx.in(2).dtype() != x.dtype() || ctx.in(2).size() != 1) {
              return Invalid("constant_value must be a scalar of X's type");
            }
            value = ctx.in(2).data<T>()[0];
          }
          Tensor y(x.dtype(), shape);
          Fill<T>(x, pb, value, &y);
          (*ctx.outputs)[0] = std::move(y);
          return absl::OkStatus();
        });
  }

 private:
  enum class Mode { kConstant, kReflect, kEdge, kWrap };

  // Input index for output index `o` along a dim of size n with begin pad
  // p; -1 means "the constant".
  int64_t Source(int64_t o, int64_t n, int64_t p) const {
    int64_t i = o - p;
    if (i >= 0 && i < n) return i;
    switch (mode_) {
      case Mode::kConstant:
        return -1;
      case Mode::kEdge:
        return std::clamp<int64_t>(i, 0, n - 1);
      case Mode::kReflect: {
        if (n == 1) return 0;
        const int64_t period = 2 * (n - 1);
        i = ((i % period) + period) % period;
        return i < n ? i : period - i;
      }
      case Mode::kWrap:
        return ((i % n) + n) % n;
    }
    return -1;
  }

  template <typename T>
  void Fill(const Tensor& x, const std::vector<int64_t>& pb, T value,
            Tensor* y) const {
    const int rank = x.rank();
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    const T* in = x.data<T>();
    T* out = y->mutable_data<T>();
    const int64_t total = y->size();
    std::vector<int64_t> idx(rank, 0);
    for (int64_t o = 0; o < total; ++o) {
      int64_t off = 0;
      bool constant = false;
      for (int d = 0; d < rank && !constant; ++d) {
        const int64_t s = Source(idx[d], x.dim(d), pb[d]);
        if (s < 0) constant = true;
        off += s * in_strides[d];
      }
      out[o] = constant ? value : in[off];
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < y->dim(d)) break;
        idx[d] = 0;
      }
    }
  }

  Mode mode_ = Mode::kConstant;
  bool attrs_ = false;
  std::vector<int64_t> pads_;
  float value_ = 0;
};

}  // namespace

void RegisterShapeOps(OpRegistry* r) {
  r->Register("Identity", &IdentityKernel::Create);
  r->Register("Dropout", &DropoutKernel::Create);
  r->Register("Flatten", &FlattenKernel::Create);
  r->Register("Reshape", &ReshapeKernel::Create);
  r->Register("Transpose", &TransposeKernel::Create);
  r->Register("Concat", &ConcatKernel::Create);
  r->Register("Split", &SplitKernel::Create);
  r->Register("Slice", &SliceKernel::Create);
  r->Register("Gather", &GatherKernel::Create);
  r->Register("Squeeze", &SqueezeKernel::Create);
  r->Register("Unsqueeze", &SqueezeKernel::Create);
  r->Register("Shape", &ShapeKernel::Create);
  r->Register("Cast", &CastKernel::Create);
  r->Register("Constant", &ConstantKernel::Create);
  r->Register("ConstantOfShape", &ConstantOfShapeKernel::Create);
  r->Register("Expand", &ExpandKernel::Create);
  r->Register("Range", &RangeKernel::Create);
  r->Register("Pad", &PadKernel::Create);
}

}  // namespace quantd::executor
