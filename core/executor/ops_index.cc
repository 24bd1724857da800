// Indexing and data-movement kernels: Gather / Scatter variants, TopK,
// NonZero, CumSum, Tile, OneHot, Trilu, Einsum, Size, Compress,
// ReverseSequence, EyeLike, Unique, CenterCropPad and Col2Im. Every index
// read from a tensor is checked before it addresses memory: an index out of
// range is INVALID_ARGUMENT naming the index and the dim, never a wild read.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/checked_count.h"
#include "core/base/status_macros.h"
#include "core/executor/broadcast.h"
#include "core/executor/gemm.h"
#include "core/executor/kernel.h"
#include "core/executor/layout.h"
#include "core/executor/wrapping.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

std::string Join(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

// The element types the arithmetic kernels (CumSum, TopK, reductions of
// the scatters, ...) are compiled for.
#define QUANTD_NUMERIC_TYPES                                           \
  float, double, int64_t, int32_t, int8_t, uint8_t, int16_t, uint16_t, \
      uint32_t, uint64_t

absl::Status RequireIndexType(const Tensor& t, const char* what) {
  if (t.dtype() != TP::INT64 && t.dtype() != TP::INT32) {
    return Invalid(absl::StrCat(what, " must be INT64 or INT32, not ",
                                DataTypeName(t.dtype())));
  }
  return absl::OkStatus();
}

// `i` in [-dim, dim) made non-negative; INVALID_ARGUMENT otherwise.
absl::StatusOr<int64_t> NormalizeIndex(int64_t i, int64_t dim,
                                       const char* what = "index") {
  const int64_t j = i < 0 ? i + dim : i;
  if (j < 0 || j >= dim) {
    return Invalid(
        absl::StrCat(what, " ", i, " is out of range for a dim of ", dim));
  }
  return j;
}

// GatherElements and ScatterElements: every element i of `idx` (same rank
// as `x`, no larger off `axis`) addresses the element of `x` at its own
// position with the coordinate on `axis` replaced by its value. Calls
// visit(i, offset of that element in x) in index order; INVALID_ARGUMENT
// when idx exceeds x off the axis or an index is out of range.
absl::Status ForEachElementIndex(
    const Tensor& x, const Tensor& idx, int axis,
    absl::FunctionRef<void(int64_t i, int64_t offset)> visit) {
  const int rank = x.rank();
  for (int d = 0; d < rank; ++d) {
    if (d != axis && idx.dim(d) > x.dim(d)) {
      return Invalid(absl::StrCat("indices ", ShapeString(idx.shape()),
                                  " exceed data ", ShapeString(x.shape()),
                                  " on axis ", d));
    }
  }
  const std::vector<int64_t> strides = RowMajorStrides(x.shape());
  std::vector<int64_t> pos(rank, 0);
  for (int64_t i = 0; i < idx.size(); ++i) {
    QUANTD_ASSIGN_OR_RETURN(int64_t j,
                            NormalizeIndex(idx.IntAt(i), x.dim(axis)));
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) {
      off += (d == axis ? j : pos[d]) * strides[d];
    }
    visit(i, off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++pos[d] < idx.dim(d)) break;
      pos[d] = 0;
    }
  }
  return absl::OkStatus();
}

// The one element of a scalar (or one-element) integer input.
absl::StatusOr<int64_t> ScalarInt(const Tensor& t, const char* what) {
  QUANTD_RETURN_IF_ERROR(RequireIndexType(t, what));
  if (t.size() != 1 || t.rank() > 1) {
    return Invalid(absl::StrCat(what, " must hold one value, got shape ",
                                ShapeString(t.shape())));
  }
  return t.IntAt(0);
}

// Calls f(U{}) with U an unsigned integer as wide as one element: the kernels
// that only move elements are written once for every type by size.
template <typename F>
absl::Status BySize(int64_t esize, F&& f) {
  switch (esize) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
  return absl::UnimplementedError("element type is not supported by this op");
}

// INVALID_ARGUMENT when an output shape computed from input values (repeats,
// depth, target sizes) is negative or its element count overflows int64.
absl::Status CheckOutputShape(const std::vector<int64_t>& shape) {
  absl::StatusOr<int64_t> n = CheckedElementCount(shape);
  if (!n.ok()) {
    return Invalid(
        absl::StrCat("output shape ", Join(shape), ": ", n.status().message()));
  }
  return absl::OkStatus();
}

// Product of shape[begin, end).
int64_t Prod(const std::vector<int64_t>& shape, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= shape[i];
  return n;
}

template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// Factories for kernels whose attributes are read into the object.
#define QUANTD_INDEX_FACTORY(K)                                           \
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) { \
    auto k = std::unique_ptr<K>(new K);                                   \
    QUANTD_RETURN_IF_ERROR(k->Init(info));                                \
    return std::unique_ptr<Kernel>(std::move(k));                         \
  }

// -------------------------------------------------------------------- Size

class SizeKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(SizeKernel)
  absl::Status Init(NodeInfo& info) {
    info.set_output_type(0, TP::INT64);
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    (*ctx.outputs)[0] = Tensor::Scalar<int64_t>(ctx.in(0).size());
    return absl::OkStatus();
  }
};

// -------------------------------------------------------------------- Tile

class TileKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(TileKernel)
  absl::Status Init(NodeInfo& info) {
    return info.RequireType(1, {TP::INT64, TP::INT32});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_RETURN_IF_ERROR(RequireIndexType(ctx.in(1), "repeats"));
    const std::vector<int64_t> repeats = ctx.in(1).ToInt64Vector();
    if (ctx.in(1).rank() != 1 || static_cast<int>(repeats.size()) != x.rank()) {
      return Invalid(absl::StrCat("repeats ", Join(repeats),
                                  " must be 1-D with one value per dim of ",
                                  ShapeString(x.shape())));
    }
    std::vector<int64_t> out_shape(x.rank());
    for (int d = 0; d < x.rank(); ++d) {
      if (repeats[d] < 0) {
        return Invalid(absl::StrCat("negative repeats ", Join(repeats)));
      }
      // Every output dim must fit, even when another dim empties the
      // output: the passes below step through it.
      if (x.dim(d) > 0 && repeats[d] > kMaxCount / x.dim(d)) {
        return Invalid(absl::StrCat("repeats ", Join(repeats), " of ",
                                    ShapeString(x.shape()),
                                    " give a dim past 64 bits"));
      }
      out_shape[d] = x.dim(d) * repeats[d];
    }
    QUANTD_RETURN_IF_ERROR(CheckOutputShape(out_shape));
    // One dim at a time, outermost first: each pass repeats the blocks of
    // dims [d, rank) `repeats[d]` times within every outer index.
    const int64_t esize = ElementSize(x.dtype());
    Tensor cur = x;
    for (int d = 0; d < x.rank(); ++d) {
      if (repeats[d] == 1) continue;
      std::vector<int64_t> shape = cur.shape();
      shape[d] = out_shape[d];
      Tensor next(x.dtype(), shape);
      const int64_t outer = Prod(cur.shape(), 0, d);
      const int64_t block = Prod(cur.shape(), d, cur.rank()) * esize;
      const char* in = static_cast<const char*>(cur.raw());
      char* out = static_cast<char*>(next.raw());
      for (int64_t o = 0; o < outer && block > 0; ++o) {
        for (int64_t r = 0; r < repeats[d]; ++r) {
          std::memcpy(out + (o * repeats[d] + r) * block, in + o * block,
                      block);
        }
      }
      cur = std::move(next);
    }
    (*ctx.outputs)[0] = std::move(cur);
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------------ CumSum

class CumSumKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(CumSumKernel)
  absl::Status Init(NodeInfo& info) {
    exclusive_ = info.Int("exclusive", 0) != 0;
    reverse_ = info.Int("reverse", 0) != 0;
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::INT64, TP::INT32}));
    return info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32,
                                TP::UINT32, TP::UINT64});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_ASSIGN_OR_RETURN(int64_t a, ScalarInt(ctx.in(1), "axis"));
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a, x.rank()));
    const int64_t outer = Prod(x.shape(), 0, axis), len = x.dim(axis);
    const int64_t inner = Prod(x.shape(), axis + 1, x.rank());
    Tensor y(x.dtype(), x.shape());
    absl::Status s =
        Dispatch<float, double, int64_t, int32_t, uint32_t, uint64_t>(
            x.dtype(), [&](auto tag) {
              using T = decltype(tag);
              const T* in = x.data<T>();
              T* out = y.mutable_data<T>();
              std::vector<T> acc(inner);
              for (int64_t o = 0; o < outer; ++o) {
                std::fill(acc.begin(), acc.end(), T(0));
                for (int64_t t = 0; t < len; ++t) {
                  const int64_t i = reverse_ ? len - 1 - t : t;
                  const T* row = in + (o * len + i) * inner;
                  T* dst = out + (o * len + i) * inner;
                  for (int64_t j = 0; j < inner; ++j) {
                    if (exclusive_) dst[j] = acc[j];
                    acc[j] = ValueAdd(acc[j], row[j]);
                    if (!exclusive_) dst[j] = acc[j];
                  }
                }
              }
              return absl::OkStatus();
            });
    if (!s.ok()) return s;
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  bool exclusive_ = false;
  bool reverse_ = false;
};

// -------------------------------------------------------------------- TopK

class TopKKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(TopKKernel)
  absl::Status Init(NodeInfo& info) {
    axis_ = info.Int("axis", -1);
    // Before opset 10 k was an attribute; opset 11 added largest / sorted.
    if (info.opset() < 10) {
      if (!info.HasAttr("k")) return info.Invalid("needs attribute k");
      k_ = info.Int("k", 0);
      if (k_ < 0) return info.Invalid(absl::StrCat("negative k ", k_));
    } else if (!info.has_input(1)) {
      return info.Invalid("needs input K");
    }
    if (info.opset() >= 11) {
      largest_ = info.Int("largest", 1) != 0;
      // sorted=0 leaves the order unspecified: sorted output satisfies it.
      info.Int("sorted", 1);
    }
    info.set_output_type(1, TP::INT64);
    if (info.input_rank(0) >= 0) {
      absl::StatusOr<int> ax = NormalizeAxis(axis_, info.input_rank(0));
      if (!ax.ok()) return info.Invalid(std::string(ax.status().message()));
    }
    return info.RequireType(
        0, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32, TP::INT8, TP::UINT8,
            TP::INT16, TP::UINT16, TP::UINT32, TP::UINT64});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    int64_t k = k_;
    if (k < 0) {
      QUANTD_ASSIGN_OR_RETURN(k, ScalarInt(ctx.in(1), "K"));
    }
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    const int64_t len = x.dim(axis);
    if (k < 0 || k > len) {
      return Invalid(absl::StrCat("K ", k, " is out of range for axis ", axis,
                                  " of shape ", ShapeString(x.shape())));
    }
    const int64_t outer = Prod(x.shape(), 0, axis);
    const int64_t inner = Prod(x.shape(), axis + 1, x.rank());
    std::vector<int64_t> shape = x.shape();
    shape[axis] = k;
    Tensor values(x.dtype(), shape), indices(TP::INT64, shape);
    int64_t* out_i = indices.mutable_data<int64_t>();
    absl::Status s = Dispatch<QUANTD_NUMERIC_TYPES>(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = x.data<T>();
      T* out_v = values.mutable_data<T>();
      // NaN ranks above every number (numpy's sort order); equal values
      // keep the lower index first.
      auto greater = [](T a, T b) {
        if (IsNan(a)) return !IsNan(b);
        if (IsNan(b)) return false;
        return a > b;
      };
      std::vector<int64_t> order(len);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t j = 0; j < inner; ++j) {
          const T* p = in + o * len * inner + j;
          std::iota(order.begin(), order.end(), 0);
          auto before = [&](int64_t a, int64_t b) {
            const T va = p[a * inner], vb = p[b * inner];
            if (largest_ ? greater(va, vb) : greater(vb, va)) return true;
            if (largest_ ? greater(vb, va) : greater(va, vb)) return false;
            return a < b;
          };
          std::partial_sort(order.begin(), order.begin() + k, order.end(),
                            before);
          for (int64_t r = 0; r < k; ++r) {
            const int64_t at = (o * k + r) * inner + j;
            out_v[at] = p[order[r] * inner];
            out_i[at] = order[r];
          }
        }
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    (*ctx.outputs)[0] = std::move(values);
    if (ctx.outputs->size() > 1) (*ctx.outputs)[1] = std::move(indices);
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = -1;
  int64_t k_ = -1;  // -1: from input 1.
  bool largest_ = true;
};

// ----------------------------------------------------------------- NonZero

class NonZeroKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(NonZeroKernel)
  absl::Status Init(NodeInfo& info) {
    info.set_output_type(0, TP::INT64);
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> hits;
    absl::Status s =
        Dispatch<QUANTD_NUMERIC_TYPES, bool>(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* in = x.data<T>();
          for (int64_t i = 0; i < x.size(); ++i) {
            if (in[i] != T(0)) hits.push_back(i);
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    // A scalar is read as a 1-D tensor of one element, as numpy does.
    const std::vector<int64_t> shape =
        x.rank() == 0 ? std::vector<int64_t>{1} : x.shape();
    const int rank = static_cast<int>(shape.size());
    const int64_t n = static_cast<int64_t>(hits.size());
    Tensor y(TP::INT64, {rank, n});
    int64_t* out = y.mutable_data<int64_t>();
    for (int64_t h = 0; h < n; ++h) {
      int64_t rest = hits[h];
      for (int d = rank - 1; d >= 0; --d) {
        out[d * n + h] = rest % shape[d];
        rest /= shape[d];
      }
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------- GatherElements

class GatherElementsKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(GatherElementsKernel)
  absl::Status Init(NodeInfo& info) {
    axis_ = info.Int("axis", 0);
    return info.RequireType(1, {TP::INT64, TP::INT32});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& idx = ctx.in(1);
    QUANTD_RETURN_IF_ERROR(RequireIndexType(idx, "indices"));
    if (idx.rank() != x.rank()) {
      return Invalid(absl::StrCat("indices ", ShapeString(idx.shape()),
                                  " and data ", ShapeString(x.shape()),
                                  " differ in rank"));
    }
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    Tensor y(x.dtype(), idx.shape());
    return BySize(ElementSize(x.dtype()), [&](auto tag) -> absl::Status {
      using U = decltype(tag);
      const U* in = static_cast<const U*>(x.raw());
      U* out = static_cast<U*>(y.raw());
      QUANTD_RETURN_IF_ERROR(ForEachElementIndex(
          x, idx, axis, [&](int64_t i, int64_t off) { out[i] = in[off]; }));
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  int64_t axis_ = 0;
};

// ---------------------------------------------------------------- GatherND

class GatherNDKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(GatherNDKernel)
  absl::Status Init(NodeInfo& info) {
    if (info.opset() >= 12) batch_dims_ = info.Int("batch_dims", 0);
    if (batch_dims_ < 0) {
      return info.Invalid(absl::StrCat("negative batch_dims ", batch_dims_));
    }
    return info.RequireType(1, {TP::INT64});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& idx = ctx.in(1);
    QUANTD_RETURN_IF_ERROR(RequireIndexType(idx, "indices"));
    const int r = x.rank(), q = idx.rank();
    // Compared before it is narrowed: 2^32 - 1 would become -1.
    if (q < 1 || batch_dims_ >= std::min(r, q)) {
      return Invalid(absl::StrCat(
          "batch_dims ", batch_dims_, " needs data (", ShapeString(x.shape()),
          ") and indices (", ShapeString(idx.shape()), ") of a higher rank"));
    }
    const int b = static_cast<int>(batch_dims_);
    const int64_t m = idx.dim(q - 1);
    if (m < 1 || m > r - b) {
      return Invalid(absl::StrCat("indices ", ShapeString(idx.shape()),
                                  " address ", m, " dims of data ",
                                  ShapeString(x.shape()), " after ", b,
                                  " batch dims"));
    }
    for (int d = 0; d < b; ++d) {
      if (idx.dim(d) != x.dim(d)) {
        return Invalid(absl::StrCat("batch dim ", d, " differs: data ",
                                    ShapeString(x.shape()), ", indices ",
                                    ShapeString(idx.shape())));
      }
    }
    std::vector<int64_t> shape(idx.shape().begin(), idx.shape().end() - 1);
    shape.insert(shape.end(), x.shape().begin() + b + m, x.shape().end());
    Tensor y(x.dtype(), shape);
    const std::vector<int64_t> strides = RowMajorStrides(x.shape());
    const int64_t batches = Prod(x.shape(), 0, b);
    const int64_t batch_stride = Prod(x.shape(), b, r);
    const int64_t tuples = Prod(idx.shape(), b, q - 1);
    const int64_t esize = ElementSize(x.dtype());
    const int64_t slice = Prod(x.shape(), b + m, r) * esize;
    const char* in = static_cast<const char*>(x.raw());
    char* out = static_cast<char*>(y.raw());
    for (int64_t bi = 0; bi < batches; ++bi) {
      for (int64_t t = 0; t < tuples; ++t) {
        const int64_t tuple = bi * tuples + t;
        int64_t off = bi * batch_stride;
        for (int64_t j = 0; j < m; ++j) {
          QUANTD_ASSIGN_OR_RETURN(
              int64_t v,
              NormalizeIndex(idx.IntAt(tuple * m + j), x.dim(b + j)));
          off += v * strides[b + j];
        }
        if (slice > 0) {
          std::memcpy(out + tuple * slice, in + off * esize, slice);
        }
      }
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  int64_t batch_dims_ = 0;
};

// ------------------------------------------------ Scatter reduction modes

enum class Combine { kNone, kAdd, kMul, kMax, kMin };

// Reads `reduction` as the opset allows it: add / mul from 16, max / min
// from 18.
absl::StatusOr<Combine> ReadReduction(NodeInfo& info) {
  if (info.opset() < 16) return Combine::kNone;
  const std::string r = info.String("reduction", "none");
  if (r == "none") return Combine::kNone;
  if (r == "add") return Combine::kAdd;
  if (r == "mul") return Combine::kMul;
  if (info.opset() >= 18 && r == "max") return Combine::kMax;
  if (info.opset() >= 18 && r == "min") return Combine::kMin;
  return info.UnsupportedAttr("reduction", r);
}

template <typename T>
void Apply(Combine c, T* dst, T v) {
  switch (c) {
    case Combine::kNone:
      *dst = v;
      break;
    case Combine::kAdd:
      *dst = ValueAdd(*dst, v);
      break;
    case Combine::kMul:
      *dst = ValueMul(*dst, v);
      break;
    case Combine::kMax:
      *dst = std::max(*dst, v);
      break;
    case Combine::kMin:
      *dst = std::min(*dst, v);
      break;
  }
}

// Runs f(T{}) for the element type of `dtype`: any type (as raw bits) when
// updates replace, the numeric types when they combine.
template <typename F>
absl::Status ScatterDispatch(Combine c, int32_t dtype, F&& f) {
  if (c == Combine::kNone) return BySize(ElementSize(dtype), f);
  if (dtype == TP::BOOL) {
    return absl::UnimplementedError(
        "scatter reductions do not take BOOL values");
  }
  return Dispatch<QUANTD_NUMERIC_TYPES>(dtype, f);
}

// ------------------------------------------ Scatter, ScatterElements

class ScatterElementsKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(ScatterElementsKernel)
  absl::Status Init(NodeInfo& info) {
    axis_ = info.Int("axis", 0);
    QUANTD_ASSIGN_OR_RETURN(combine_, ReadReduction(info));
    return info.RequireType(1, {TP::INT64, TP::INT32});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& idx = ctx.in(1);
    const Tensor& upd = ctx.in(2);
    QUANTD_RETURN_IF_ERROR(RequireIndexType(idx, "indices"));
    if (upd.dtype() != x.dtype() || upd.shape() != idx.shape() ||
        idx.rank() != x.rank()) {
      return Invalid(absl::StrCat(
          "updates (", DataTypeName(upd.dtype()), " ", ShapeString(upd.shape()),
          ") must match indices ", ShapeString(idx.shape()),
          " in shape and data (", DataTypeName(x.dtype()), " ",
          ShapeString(x.shape()), ") in type and rank"));
    }
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    Tensor y(x.dtype(), x.shape());
    if (x.bytes() > 0) std::memcpy(y.raw(), x.raw(), x.bytes());
    absl::Status s =
        ScatterDispatch(combine_, x.dtype(), [&](auto tag) -> absl::Status {
          using T = decltype(tag);
          const T* u = static_cast<const T*>(upd.raw());
          T* out = static_cast<T*>(y.raw());
          return ForEachElementIndex(x, idx, axis, [&](int64_t i, int64_t off) {
            Apply(combine_, out + off, u[i]);
          });
        });
    if (!s.ok()) return s;
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0;
  Combine combine_ = Combine::kNone;
};

// --------------------------------------------------------------- ScatterND

class ScatterNDKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(ScatterNDKernel)
  absl::Status Init(NodeInfo& info) {
    QUANTD_ASSIGN_OR_RETURN(combine_, ReadReduction(info));
    return info.RequireType(1, {TP::INT64});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& idx = ctx.in(1);
    const Tensor& upd = ctx.in(2);
    QUANTD_RETURN_IF_ERROR(RequireIndexType(idx, "indices"));
    const int r = x.rank(), q = idx.rank();
    const int64_t k = q > 0 ? idx.dim(q - 1) : -1;
    if (q < 1 || k < 1 || k > r) {
      return Invalid(absl::StrCat("indices ", ShapeString(idx.shape()),
                                  " do not address data ",
                                  ShapeString(x.shape())));
    }
    std::vector<int64_t> want(idx.shape().begin(), idx.shape().end() - 1);
    want.insert(want.end(), x.shape().begin() + k, x.shape().end());
    if (upd.dtype() != x.dtype() || upd.shape() != want) {
      return Invalid(absl::StrCat(
          "updates (", DataTypeName(upd.dtype()), " ", ShapeString(upd.shape()),
          ") must be ", DataTypeName(x.dtype()), " ", ShapeString(want)));
    }
    Tensor y(x.dtype(), x.shape());
    if (x.bytes() > 0) std::memcpy(y.raw(), x.raw(), x.bytes());
    const std::vector<int64_t> strides = RowMajorStrides(x.shape());
    const int64_t tuples = Prod(idx.shape(), 0, q - 1);
    const int64_t slice = Prod(x.shape(), static_cast<int>(k), r);
    absl::Status s =
        ScatterDispatch(combine_, x.dtype(), [&](auto tag) -> absl::Status {
          using T = decltype(tag);
          const T* u = static_cast<const T*>(upd.raw());
          T* out = static_cast<T*>(y.raw());
          for (int64_t t = 0; t < tuples; ++t) {
            int64_t off = 0;
            for (int64_t j = 0; j < k; ++j) {
              QUANTD_ASSIGN_OR_RETURN(
                  int64_t v, NormalizeIndex(idx.IntAt(t * k + j),
                                            x.dim(static_cast<int>(j))));
              off += v * strides[j];
            }
            for (int64_t e = 0; e < slice; ++e) {
              Apply(combine_, out + off + e, u[t * slice + e]);
            }
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  Combine combine_ = Combine::kNone;
};

// ------------------------------------------------------------------ OneHot

class OneHotKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(OneHotKernel)
  absl::Status Init(NodeInfo& info) {
    axis_ = info.Int("axis", -1);
    negative_ = info.opset() >= 11;
    info.set_output_type(0, info.input_type(2));
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& idx = ctx.in(0);
    const Tensor& depth_t = ctx.in(1);
    const Tensor& values = ctx.in(2);
    if (depth_t.size() != 1 || ElementSize(depth_t.dtype()) == 0) {
      return Invalid(absl::StrCat("depth must hold one number, got shape ",
                                  ShapeString(depth_t.shape())));
    }
    // IntAt truncates a floating depth (or index) toward zero, as a cast.
    const int64_t depth = depth_t.IntAt(0);
    if (depth < 1)
      return Invalid(absl::StrCat("depth ", depth, " is not positive"));
    if (values.size() != 2 || values.rank() != 1) {
      return Invalid(absl::StrCat("values must be [off, on], got shape ",
                                  ShapeString(values.shape())));
    }
    if (ElementSize(idx.dtype()) == 0 || idx.dtype() == TP::BOOL) {
      return Invalid(
          absl::StrCat("indices of type ", DataTypeName(idx.dtype())));
    }
    const int rank = idx.rank() + 1;
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, rank));
    std::vector<int64_t> shape = idx.shape();
    shape.insert(shape.begin() + axis, depth);
    QUANTD_RETURN_IF_ERROR(CheckOutputShape(shape));
    Tensor y(values.dtype(), shape);
    const int64_t outer = Prod(idx.shape(), 0, axis);
    const int64_t inner = Prod(idx.shape(), axis, idx.rank());
    return BySize(ElementSize(values.dtype()), [&](auto tag) -> absl::Status {
      using U = decltype(tag);
      const U off = static_cast<const U*>(values.raw())[0];
      const U on = static_cast<const U*>(values.raw())[1];
      U* out = static_cast<U*>(y.raw());
      std::fill(out, out + y.size(), off);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t j = 0; j < inner; ++j) {
          int64_t v = IndexAt(idx, o * inner + j);
          if (v < 0 && negative_) v += depth;
          // Out of [0, depth): all off, as the spec says.
          if (v < 0 || v >= depth) continue;
          out[(o * depth + v) * inner + j] = on;
        }
      }
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  // A floating index that is not a whole number is truncated, as a cast;
  // NaN and infinities match no position.
  static int64_t IndexAt(const Tensor& t, int64_t i) {
    double v = 0;
    if (t.dtype() == TP::FLOAT) {
      v = t.data<float>()[i];
    } else if (t.dtype() == TP::DOUBLE) {
      v = t.data<double>()[i];
    } else {
      return t.IntAt(i);
    }
    if (!std::isfinite(v) || std::abs(v) > 9e18) return -(int64_t{1} << 62);
    return static_cast<int64_t>(v);
  }

  int64_t axis_ = -1;
  bool negative_ = true;
};

// ------------------------------------------------------------------- Trilu

class TriluKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(TriluKernel)
  absl::Status Init(NodeInfo& info) {
    upper_ = info.Int("upper", 1) != 0;
    if (info.input_rank(0) >= 0 && info.input_rank(0) < 2) {
      return info.Invalid("input must have rank >= 2");
    }
    return info.RequireType(1, {TP::INT64});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.rank() < 2) {
      return Invalid(absl::StrCat("input ", ShapeString(x.shape()),
                                  " must have rank >= 2"));
    }
    int64_t k = 0;
    if (ctx.has(1)) {
      QUANTD_ASSIGN_OR_RETURN(k, ScalarInt(ctx.in(1), "k"));
    }
    const int64_t n = x.dim(x.rank() - 2), m = x.dim(x.rank() - 1);
    // A diagonal beyond the matrix on either side keeps all or nothing, as
    // one just past it does; clamped, i + k cannot overflow.
    k = std::clamp<int64_t>(k, -n - 1, m + 1);
    const int64_t mats = Prod(x.shape(), 0, x.rank() - 2);
    Tensor y(x.dtype(), x.shape());
    const int64_t esize = ElementSize(x.dtype());
    if (y.bytes() > 0) std::memcpy(y.raw(), x.raw(), y.bytes());
    char* out = static_cast<char*>(y.raw());
    // Zero bits are 0 for every element type.
    for (int64_t b = 0; b < mats; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        char* row = out + (b * n + i) * m * esize;
        // Upper keeps j - i >= k; lower keeps j - i <= k.
        const int64_t edge =
            std::clamp<int64_t>(upper_ ? i + k : i + k + 1, 0, m);
        if (upper_) {
          std::memset(row, 0, edge * esize);
        } else {
          std::memset(row + edge * esize, 0, (m - edge) * esize);
        }
      }
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  bool upper_ = true;
};

// ---------------------------------------------------------------- Compress

class CompressKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(CompressKernel)
  absl::Status Init(NodeInfo& info) {
    has_axis_ = info.HasAttr("axis");
    axis_ = info.Int("axis", 0);
    return info.RequireType(1, {TP::BOOL});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& input = ctx.in(0);
    const Tensor& cond = ctx.in(1);
    if (cond.dtype() != TP::BOOL || cond.rank() != 1) {
      return Invalid(absl::StrCat("condition must be 1-D BOOL, got ",
                                  DataTypeName(cond.dtype()), " ",
                                  ShapeString(cond.shape())));
    }
    // Without an axis the input is read flattened.
    const Tensor x = has_axis_ ? input : input.Reshaped({input.size()});
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    const int64_t len = x.dim(axis);
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < cond.size(); ++i) {
      if (!cond.data<bool>()[i]) continue;
      if (i >= len) {
        return Invalid(absl::StrCat("condition selects entry ", i,
                                    " of an axis of ", len));
      }
      keep.push_back(i);
    }
    std::vector<int64_t> shape = x.shape();
    shape[axis] = static_cast<int64_t>(keep.size());
    Tensor y(x.dtype(), shape);
    const int64_t outer = Prod(x.shape(), 0, axis);
    const int64_t block =
        Prod(x.shape(), axis + 1, x.rank()) * ElementSize(x.dtype());
    const char* in = static_cast<const char*>(x.raw());
    char* out = static_cast<char*>(y.raw());
    const int64_t n = static_cast<int64_t>(keep.size());
    for (int64_t o = 0; o < outer && block > 0; ++o) {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(out + (o * n + i) * block, in + (o * len + keep[i]) * block,
                    block);
      }
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  bool has_axis_ = false;
  int64_t axis_ = 0;
};

// --------------------------------------------------------- ReverseSequence

class ReverseSequenceKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(ReverseSequenceKernel)
  absl::Status Init(NodeInfo& info) {
    batch_axis_ = info.Int("batch_axis", 1);
    time_axis_ = info.Int("time_axis", 0);
    if ((batch_axis_ != 0 && batch_axis_ != 1) ||
        (time_axis_ != 0 && time_axis_ != 1) || batch_axis_ == time_axis_) {
      return info.Invalid(absl::StrCat("batch_axis ", batch_axis_,
                                       " and time_axis ", time_axis_,
                                       " must be 0 and 1 in some order"));
    }
    return info.RequireType(1, {TP::INT64});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& lens = ctx.in(1);
    QUANTD_RETURN_IF_ERROR(RequireIndexType(lens, "sequence_lens"));
    if (x.rank() < 2) {
      return Invalid(absl::StrCat("input ", ShapeString(x.shape()),
                                  " must have rank >= 2"));
    }
    const int64_t batch = x.dim(batch_axis_), time = x.dim(time_axis_);
    if (lens.rank() != 1 || lens.dim(0) != batch) {
      return Invalid(absl::StrCat("sequence_lens ", ShapeString(lens.shape()),
                                  " must be [", batch, "]"));
    }
    const int64_t esize = ElementSize(x.dtype());
    const int64_t block = Prod(x.shape(), 2, x.rank()) * esize;
    // Element (t, b) of the first two dims starts at t * ts + b * bs blocks.
    const int64_t ts = time_axis_ == 0 ? batch : 1;
    const int64_t bs = batch_axis_ == 0 ? time : 1;
    Tensor y(x.dtype(), x.shape());
    const char* in = static_cast<const char*>(x.raw());
    char* out = static_cast<char*>(y.raw());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = lens.IntAt(b);
      if (len < 0 || len > time) {
        return Invalid(absl::StrCat("sequence_lens[", b, "] = ", len,
                                    " is out of range for a time dim of ",
                                    time));
      }
      for (int64_t t = 0; t < time && block > 0; ++t) {
        const int64_t src = t < len ? len - 1 - t : t;
        std::memcpy(out + (t * ts + b * bs) * block,
                    in + (src * ts + b * bs) * block, block);
      }
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  int64_t batch_axis_ = 1;
  int64_t time_axis_ = 0;
};

// ----------------------------------------------------------------- EyeLike

class EyeLikeKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(EyeLikeKernel)
  absl::Status Init(NodeInfo& info) {
    k_ = info.Int("k", 0);
    if (info.HasAttr("dtype")) {
      dtype_ = static_cast<int32_t>(info.Int("dtype", 0));
      if (ElementSize(dtype_) == 0 || IsHalfFloat(dtype_)) {
        return info.UnsupportedAttr("dtype", DataTypeName(dtype_));
      }
      info.set_output_type(0, dtype_);
    }
    if (info.input_rank(0) >= 0 && info.input_rank(0) != 2) {
      return info.Invalid("input must be 2-D");
    }
    return absl::OkStatus();
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.rank() != 2) {
      return Invalid(
          absl::StrCat("input ", ShapeString(x.shape()), " must be 2-D"));
    }
    const int32_t dtype = dtype_ != 0 ? dtype_ : x.dtype();
    Tensor y(static_cast<DataType>(dtype), x.shape());
    return Dispatch<QUANTD_NUMERIC_TYPES, bool>(dtype, [&](auto tag) {
      using T = decltype(tag);
      T* out = y.mutable_data<T>();
      std::fill(out, out + y.size(), T(0));
      const int64_t n = x.dim(0), m = x.dim(1);
      for (int64_t i = std::max<int64_t>(0, -k_); i < n && i + k_ < m; ++i) {
        out[i * m + i + k_] = T(1);
      }
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  int64_t k_ = 0;
  int32_t dtype_ = 0;  // 0: the input's type.
};

// ------------------------------------------------------------------ Unique

class UniqueKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(UniqueKernel)
  absl::Status Init(NodeInfo& info) {
    has_axis_ = info.HasAttr("axis");
    axis_ = info.Int("axis", 0);
    sorted_ = info.Int("sorted", 1) != 0;
    for (int o = 1; o < 4; ++o) info.set_output_type(o, TP::INT64);
    return info.RequireType(
        0, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32, TP::INT8, TP::UINT8,
            TP::INT16, TP::UINT16, TP::UINT32, TP::UINT64, TP::BOOL});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& input = ctx.in(0);
    const Tensor x = has_axis_ ? input : input.Reshaped({input.size()});
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    // Move the axis to the front so every item is one contiguous slice.
    std::vector<int64_t> perm = {axis};
    for (int d = 0; d < x.rank(); ++d) {
      if (d != axis) perm.push_back(d);
    }
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    std::vector<int64_t> front_shape, front_strides;
    for (int64_t p : perm) {
      front_shape.push_back(x.dim(p));
      front_strides.push_back(in_strides[p]);
    }
    Tensor front(x.dtype(), front_shape);
    const int64_t esize = ElementSize(x.dtype());
    StridedCopy(x.raw(), esize, front_strides, front_shape, front.raw());
    const int64_t n = front_shape[0];
    const int64_t width = n == 0 ? 0 : front.size() / n;
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::vector<int64_t> group(n);  // Group of item order[i].
    absl::Status s =
        Dispatch<QUANTD_NUMERIC_TYPES, bool>(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* v = front.data<T>();
          // Lexicographic order of slices; NaN after every number and equal
          // to NaN.
          auto cmp = [&](int64_t a, int64_t b) {
            for (int64_t e = 0; e < width; ++e) {
              const T va = v[a * width + e], vb = v[b * width + e];
              const bool na = IsNan(va), nb = IsNan(vb);
              if (na || nb) {
                if (na != nb) return nb ? -1 : 1;
                continue;
              }
              if (va < vb) return -1;
              if (vb < va) return 1;
            }
            return 0;
          };
          std::stable_sort(order.begin(), order.end(),
                           [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
          for (int64_t i = 0; i < n; ++i) {
            group[i] =
                i == 0 ? 0 : group[i - 1] + (cmp(order[i - 1], order[i]) != 0);
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    // Groups in sorted order hold their items by increasing index (stable
    // sort), so the first item of a group is its first occurrence.
    const int64_t u = n == 0 ? 0 : group[n - 1] + 1;
    std::vector<int64_t> first(u, -1), counts(u, 0);
    std::vector<int64_t> item_group(n);
    for (int64_t i = 0; i < n; ++i) {
      if (first[group[i]] < 0) first[group[i]] = order[i];
      ++counts[group[i]];
      item_group[order[i]] = group[i];
    }
    // Output position of each group: sorted order, or first occurrence.
    std::vector<int64_t> groups(u);
    std::iota(groups.begin(), groups.end(), 0);
    if (!sorted_) {
      std::sort(groups.begin(), groups.end(),
                [&](int64_t a, int64_t b) { return first[a] < first[b]; });
    }
    std::vector<int64_t> slot(u);
    for (int64_t i = 0; i < u; ++i) slot[groups[i]] = i;
    std::vector<int64_t> y_shape = front_shape;
    y_shape[0] = u;
    Tensor y_front(x.dtype(), y_shape);
    const int64_t row = width * esize;
    for (int64_t i = 0; i < u && row > 0; ++i) {
      std::memcpy(
          static_cast<char*>(y_front.raw()) + i * row,
          static_cast<const char*>(front.raw()) + first[groups[i]] * row, row);
    }
    // Back from [axis, rest...] to the input's order of dims.
    std::vector<int64_t> out_shape(x.rank());
    std::vector<int64_t> back_strides(x.rank());
    const std::vector<int64_t> yf_strides = RowMajorStrides(y_shape);
    for (int i = 0; i < x.rank(); ++i) {
      out_shape[perm[i]] = y_shape[i];
      back_strides[perm[i]] = yf_strides[i];
    }
    Tensor y(x.dtype(), out_shape);
    StridedCopy(y_front.raw(), esize, back_strides, out_shape, y.raw());
    std::vector<int64_t> indices(u), inverse(n), out_counts(u);
    for (int64_t i = 0; i < u; ++i) {
      indices[i] = first[groups[i]];
      out_counts[i] = counts[groups[i]];
    }
    for (int64_t i = 0; i < n; ++i) inverse[i] = slot[item_group[i]];
    std::vector<Tensor>& outs = *ctx.outputs;
    outs[0] = std::move(y);
    if (outs.size() > 1) outs[1] = Tensor::FromVector<int64_t>({u}, indices);
    if (outs.size() > 2) outs[2] = Tensor::FromVector<int64_t>({n}, inverse);
    if (outs.size() > 3) outs[3] = Tensor::FromVector<int64_t>({u}, out_counts);
    return absl::OkStatus();
  }

 private:
  bool has_axis_ = false;
  int64_t axis_ = 0;
  bool sorted_ = true;
};

// ----------------------------------------------------------- CenterCropPad

// Copies the box `region` from `in` (at in_start) to `out` (at out_start),
// both dense row-major of the same rank.
void CopyBox(const char* in, const std::vector<int64_t>& in_shape,
             const std::vector<int64_t>& in_start, char* out,
             const std::vector<int64_t>& out_shape,
             const std::vector<int64_t>& out_start,
             const std::vector<int64_t>& region, int64_t esize) {
  const int rank = static_cast<int>(region.size());
  if (NumElements(region) == 0) return;
  if (rank == 0) {
    std::memcpy(out, in, esize);
    return;
  }
  const std::vector<int64_t> is = RowMajorStrides(in_shape);
  const std::vector<int64_t> os = RowMajorStrides(out_shape);
  const int64_t run = region[rank - 1] * esize;
  std::vector<int64_t> pos(rank, 0);
  const int64_t rows = NumElements(region) / region[rank - 1];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t io = 0, oo = 0;
    for (int d = 0; d < rank; ++d) {
      io += (in_start[d] + pos[d]) * is[d];
      oo += (out_start[d] + pos[d]) * os[d];
    }
    std::memcpy(out + oo * esize, in + io * esize, run);
    for (int d = rank - 2; d >= 0; --d) {
      if (++pos[d] < region[d]) break;
      pos[d] = 0;
    }
  }
}

class CenterCropPadKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(CenterCropPadKernel)
  absl::Status Init(NodeInfo& info) {
    axes_ = info.Ints("axes");
    return info.RequireType(1, {TP::INT64, TP::INT32});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    QUANTD_RETURN_IF_ERROR(RequireIndexType(ctx.in(1), "shape"));
    const std::vector<int64_t> target = ctx.in(1).ToInt64Vector();
    std::vector<int64_t> axes = axes_;
    if (axes.empty()) {
      for (int d = 0; d < x.rank(); ++d) axes.push_back(d);
    }
    if (target.size() != axes.size()) {
      return Invalid(absl::StrCat("shape ", Join(target), " does not match ",
                                  axes.size(), " axes"));
    }
    const int rank = x.rank();
    std::vector<int64_t> out_shape = x.shape(), region = x.shape();
    std::vector<int64_t> in_start(rank, 0), out_start(rank, 0);
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < axes.size(); ++i) {
      QUANTD_ASSIGN_OR_RETURN(int ax, NormalizeAxis(axes[i], rank));
      if (seen[ax]) return Invalid(absl::StrCat("repeated axis ", axes[i]));
      seen[ax] = true;
      const int64_t d = x.dim(ax), t = target[i];
      if (t < 0) return Invalid(absl::StrCat("negative shape ", Join(target)));
      out_shape[ax] = t;
      region[ax] = std::min(d, t);
      // Crop from (d - t) / 2, or pad (t - d) / 2 before (the rest after).
      if (t < d) in_start[ax] = (d - t) / 2;
      if (t > d) out_start[ax] = (t - d) / 2;
    }
    QUANTD_RETURN_IF_ERROR(CheckOutputShape(out_shape));
    Tensor y(x.dtype(), out_shape);
    if (y.bytes() > 0) std::memset(y.raw(), 0, y.bytes());
    CopyBox(static_cast<const char*>(x.raw()), x.shape(), in_start,
            static_cast<char*>(y.raw()), out_shape, out_start, region,
            ElementSize(x.dtype()));
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> axes_;
};

// ------------------------------------------------------------------ Col2Im

class Col2ImKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(Col2ImKernel)
  absl::Status Init(NodeInfo& info) {
    dilations_ = info.Ints("dilations");
    pads_ = info.Ints("pads");
    strides_ = info.Ints("strides");
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::INT64}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(2, {TP::INT64}));
    return info.RequireType(0, {TP::FLOAT, TP::DOUBLE});
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    for (int i = 1; i <= 2; ++i) {
      QUANTD_RETURN_IF_ERROR(
          RequireIndexType(ctx.in(i), "image_shape/block_shape"));
    }
    const std::vector<int64_t> image = ctx.in(1).ToInt64Vector();
    const std::vector<int64_t> block = ctx.in(2).ToInt64Vector();
    const size_t n = image.size();
    std::vector<int64_t> dil = dilations_, str = strides_, pads = pads_;
    if (dil.empty()) dil.assign(n, 1);
    if (str.empty()) str.assign(n, 1);
    if (pads.empty()) pads.assign(2 * n, 0);
    if (n == 0 || block.size() != n || dil.size() != n || str.size() != n ||
        pads.size() != 2 * n) {
      return Invalid(absl::StrCat(
          "image_shape ", Join(image), ", block_shape ", Join(block),
          ", dilations ", Join(dil), ", strides ", Join(str), " and pads ",
          Join(pads), " do not agree on the number of spatial dims"));
    }
    // Blocks per spatial dim, as a convolution with this geometry slides.
    std::vector<int64_t> blocks(n);
    int64_t block_size = 1, num_blocks = 1;
    for (size_t d = 0; d < n; ++d) {
      if (image[d] < 0 || block[d] < 1 || dil[d] < 1 || str[d] < 1 ||
          pads[d] < 0 || pads[d + n] < 0) {
        return Invalid(
            "image_shape, block_shape, dilations and strides must "
            "be positive, pads not negative");
      }
      // Saturating: crafted sizes must fail the checks below, not wrap.
      const int64_t span =
          SaturatingAdd(SaturatingMul(dil[d], block[d] - 1), 1);
      const int64_t padded =
          SaturatingAdd(image[d], SaturatingAdd(pads[d], pads[d + n]));
      if (padded < span) {
        return Invalid("a block is larger than the padded image");
      }
      blocks[d] = (padded - span) / str[d] + 1;
      block_size = SaturatingMul(block_size, block[d]);
      num_blocks = SaturatingMul(num_blocks, blocks[d]);
    }
    if (x.rank() != 3 || x.dim(1) % block_size != 0 || x.dim(2) != num_blocks) {
      return Invalid(absl::StrCat("input ", ShapeString(x.shape()),
                                  " must be [N, C * ", block_size, ", ",
                                  num_blocks, "]"));
    }
    const int64_t batch = x.dim(0), channels = x.dim(1) / block_size;
    std::vector<int64_t> out_shape = {batch, channels};
    out_shape.insert(out_shape.end(), image.begin(), image.end());
    QUANTD_RETURN_IF_ERROR(CheckOutputShape(out_shape));
    Tensor y(x.dtype(), out_shape);
    const int64_t plane = NumElements(image);
    return Dispatch<float, double>(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = x.data<T>();
      T* out = y.mutable_data<T>();
      std::fill(out, out + y.size(), T(0));
      std::vector<int64_t> kpos(n), bpos(n);
      for (int64_t nc = 0; nc < batch * channels; ++nc) {
        T* img = out + nc * plane;
        std::fill(kpos.begin(), kpos.end(), 0);
        for (int64_t kk = 0; kk < block_size; ++kk) {
          const T* col = in + (nc * block_size + kk) * num_blocks;
          std::fill(bpos.begin(), bpos.end(), 0);
          for (int64_t l = 0; l < num_blocks; ++l) {
            int64_t off = 0;
            bool inside = true;
            for (size_t d = 0; d < n && inside; ++d) {
              const int64_t c = bpos[d] * str[d] - pads[d] + kpos[d] * dil[d];
              inside = c >= 0 && c < image[d];
              off = off * image[d] + c;
            }
            if (inside) img[off] += col[l];
            for (int d = static_cast<int>(n) - 1; d >= 0; --d) {
              if (++bpos[d] < blocks[d]) break;
              bpos[d] = 0;
            }
          }
          for (int d = static_cast<int>(n) - 1; d >= 0; --d) {
            if (++kpos[d] < block[d]) break;
            kpos[d] = 0;
          }
        }
      }
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    });
  }

 private:
  std::vector<int64_t> dilations_, pads_, strides_;
};

// ------------------------------------------------------------------ Einsum
//
// The equation is parsed once. A run then (1) expands each operand's
// ellipsis into numbered labels (right-aligned, numpy broadcasting), (2)
// takes diagonals of labels repeated within an operand, (3) sums away the
// labels no one else needs, and (4) folds the operands left to right, each
// pair contracted as one batched matrix product [batch, m, k] x [batch, k, n]
// (float through gemm.h), and (5) permutes the result to the output order.

// Labels: 0..E-1 for the dims under the ellipsis, kLetter + c for letter c.
constexpr int kLetter = 1000;

struct EinsumTerm {
  std::vector<int> letters;  // kLetter + c, in order; -1 marks the ellipsis.
  bool ellipsis = false;
};

// A value in flight: a dense tensor and the label of each of its dims.
struct Labeled {
  Tensor t;
  std::vector<int> labels;
};

absl::StatusOr<EinsumTerm> ParseTerm(const std::string& s) {
  EinsumTerm term;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      term.letters.push_back(kLetter + c);
    } else if (c == '.' && s.compare(i, 3, "...") == 0 && !term.ellipsis) {
      term.ellipsis = true;
      term.letters.push_back(-1);
      i += 2;
    } else {
      return Invalid(absl::StrCat("bad term '", s, "'"));
    }
  }
  return term;
}

// `x` with its dims reordered to `labels` (a permutation of x.labels).
Labeled Permute(const Labeled& x, const std::vector<int>& labels) {
  if (labels == x.labels) return x;
  const std::vector<int64_t> in_strides = RowMajorStrides(x.t.shape());
  std::vector<int64_t> shape, strides;
  for (int l : labels) {
    const int d = static_cast<int>(
        std::find(x.labels.begin(), x.labels.end(), l) - x.labels.begin());
    shape.push_back(x.t.dim(d));
    strides.push_back(in_strides[d]);
  }
  Tensor y(x.t.dtype(), shape);
  StridedCopy(x.t.raw(), ElementSize(x.t.dtype()), strides, shape, y.raw());
  return {std::move(y), labels};
}

// Sums `x` over every label for which keep(label) is false.
template <typename T, typename Keep>
Labeled SumOut(const Labeled& x, Keep keep) {
  std::vector<int> kept, gone;
  for (int l : x.labels) (keep(l) ? kept : gone).push_back(l);
  if (gone.empty()) return x;
  std::vector<int> order = kept;
  order.insert(order.end(), gone.begin(), gone.end());
  const Labeled p = Permute(x, order);
  std::vector<int64_t> shape(p.t.shape().begin(),
                             p.t.shape().begin() + kept.size());
  Tensor y(x.t.dtype(), shape);
  const int64_t rows = y.size();
  const int64_t run = rows == 0 ? 0 : p.t.size() / rows;
  const T* in = p.t.data<T>();
  T* out = y.mutable_data<T>();
  for (int64_t r = 0; r < rows; ++r) {
    T acc = T(0);
    for (int64_t i = 0; i < run; ++i) {
      acc = ValueAdd(acc, in[r * run + i]);
    }
    out[r] = acc;
  }
  return {std::move(y), kept};
}

// C[b] = A[b] * B[b] for `batch` row-major [m,k] x [k,n] products.
template <typename T>
void BatchedMatMul(int64_t batch, int64_t m, int64_t n, int64_t k, const T* a,
                   const T* b, T* c, ThreadPool* pool) {
  if (k == 0) {
    std::fill(c, c + batch * m * n, T(0));
    return;
  }
  for (int64_t i = 0; i < batch; ++i) {
    const T* ai = a + i * m * k;
    const T* bi = b + i * k * n;
    T* ci = c + i * m * n;
    if constexpr (std::is_same_v<T, float>) {
      if (m > 0 && n > 0) {
        Gemm(false, false, m, n, k, 1.0f, ai, k, bi, n, 0.0f, ci, n, pool);
      }
    } else {
      // Reference loop for the types gemm.h does not take.
      for (int64_t r = 0; r < m; ++r) {
        T* row = ci + r * n;
        std::fill(row, row + n, T(0));
        for (int64_t p = 0; p < k; ++p) {
          const T av = ai[r * k + p];
          const T* brow = bi + p * n;
          for (int64_t j = 0; j < n; ++j) {
            row[j] = ValueAdd(row[j], ValueMul(av, brow[j]));
          }
        }
      }
    }
  }
}

class EinsumKernel : public Kernel {
 public:
  QUANTD_INDEX_FACTORY(EinsumKernel)
  absl::Status Init(NodeInfo& info) {
    if (!info.HasAttr("equation")) return info.Invalid("needs an equation");
    std::string eq;
    for (char c : info.String("equation", "")) {
      if (c != ' ' && c != '\t') eq.push_back(c);
    }
    const size_t arrow = eq.find("->");
    const std::string lhs = eq.substr(0, arrow);
    std::vector<std::string> terms = absl::StrSplit(lhs, ',');
    for (const std::string& t : terms) {
      absl::StatusOr<EinsumTerm> term = ParseTerm(t);
      if (!term.ok()) {
        return info.Invalid(
            absl::StrCat("equation '", eq, "': ", term.status().message()));
      }
      inputs_.push_back(*std::move(term));
    }
    if (static_cast<int>(inputs_.size()) != info.num_inputs()) {
      return info.Invalid(absl::StrCat("equation '", eq, "' has ",
                                       inputs_.size(), " terms for ",
                                       info.num_inputs(), " inputs"));
    }
    std::vector<int> count(kLetter + 128, 0);
    for (const EinsumTerm& t : inputs_) {
      for (int l : t.letters) {
        if (l >= 0) ++count[l];
      }
    }
    if (arrow != std::string::npos) {
      absl::StatusOr<EinsumTerm> out = ParseTerm(eq.substr(arrow + 2));
      if (!out.ok()) {
        return info.Invalid(
            absl::StrCat("equation '", eq, "': ", out.status().message()));
      }
      output_ = *std::move(out);
      std::vector<bool> seen(kLetter + 128, false);
      for (int l : output_.letters) {
        if (l < 0) continue;
        if (count[l] == 0 || seen[l]) {
          return info.Invalid(
              absl::StrCat("equation '", eq, "': output label '",
                           std::string(1, static_cast<char>(l - kLetter)),
                           "' is repeated or in no input"));
        }
        seen[l] = true;
      }
    } else {
      // Implicit output: the ellipsis, then the letters used once, sorted.
      output_.ellipsis = true;
      output_.letters.push_back(-1);
      for (int l = kLetter; l < kLetter + 128; ++l) {
        if (count[l] == 1) output_.letters.push_back(l);
      }
    }
    return info.RequireType(0, {TP::FLOAT, TP::DOUBLE, TP::INT64, TP::INT32});
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const int num = static_cast<int>(inputs_.size());
    const int32_t dtype = ctx.in(0).dtype();
    for (int i = 0; i < num; ++i) {
      if (ctx.in(i).dtype() != dtype) {
        return Invalid("inputs differ in element type");
      }
    }
    return Dispatch<float, double, int64_t, int32_t>(
        dtype, [&](auto tag) { return Run<decltype(tag)>(ctx); });
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& ctx) const {
    const int num = static_cast<int>(inputs_.size());
    // (1) Ellipsis ranks and the full label list of every operand.
    int ell = 0;
    std::vector<int> ell_rank(num, 0);
    for (int i = 0; i < num; ++i) {
      const int letters = static_cast<int>(inputs_[i].letters.size()) -
                          (inputs_[i].ellipsis ? 1 : 0);
      ell_rank[i] = ctx.in(i).rank() - letters;
      if (ell_rank[i] < 0 || (!inputs_[i].ellipsis && ell_rank[i] != 0)) {
        return Invalid(absl::StrCat("input ", i, " of shape ",
                                    ShapeString(ctx.in(i).shape()),
                                    " does not fit its term"));
      }
      ell = std::max(ell, ell_rank[i]);
    }
    auto expand = [ell](const EinsumTerm& t, int rank) {
      std::vector<int> labels;
      for (int l : t.letters) {
        if (l >= 0) {
          labels.push_back(l);
        } else {
          for (int j = ell - rank; j < ell; ++j) labels.push_back(j);
        }
      }
      return labels;
    };
    std::vector<Labeled> ops(num);
    for (int i = 0; i < num; ++i) {
      ops[i] = {ctx.in(i), expand(inputs_[i], ell_rank[i])};
    }
    const std::vector<int> out_labels = expand(output_, ell);
    // (2) Diagonals.
    for (Labeled& op : ops) {
      QUANTD_ASSIGN_OR_RETURN(op, Diagonal(op));
    }
    // Each label's size: equal across operands, or 1 (broadcast).
    std::vector<int64_t> size(kLetter + 128, -1);
    for (const Labeled& op : ops) {
      for (size_t d = 0; d < op.labels.size(); ++d) {
        int64_t& s = size[op.labels[d]];
        const int64_t v = op.t.dim(static_cast<int>(d));
        if (s < 0 || s == 1) {
          s = v;
        } else if (v != s && v != 1) {
          return Invalid(absl::StrCat("a label has sizes ", s, " and ", v,
                                      " in different places"));
        }
      }
    }
    auto in_list = [](const std::vector<int>& v, int l) {
      return std::find(v.begin(), v.end(), l) != v.end();
    };
    // Labels needed after operand i: the output's and those of i+1...
    auto needed_after = [&](int i, int l) {
      if (in_list(out_labels, l)) return true;
      for (int j = i + 1; j < num; ++j) {
        if (in_list(ops[j].labels, l)) return true;
      }
      return false;
    };
    // (3) + (4)
    Labeled acc = SumOut<T>(ops[0], [&](int l) { return needed_after(0, l); });
    for (int i = 1; i < num; ++i) {
      const Labeled& a_in = acc;
      Labeled b = SumOut<T>(ops[i], [&](int l) {
        return needed_after(i, l) || in_list(a_in.labels, l);
      });
      Labeled a = SumOut<T>(acc, [&](int l) {
        return needed_after(i, l) || in_list(b.labels, l);
      });
      acc = Contract<T>(
          std::move(a), std::move(b), [&](int l) { return needed_after(i, l); },
          ctx.pool);
    }
    // (5) Every output label is in some input, so in acc. (A label of size 1
    // wherever it appears stays 1.)
    acc = SumOut<T>(acc, [&](int l) { return in_list(out_labels, l); });
    (*ctx.outputs)[0] = Permute(acc, out_labels).t;
    return absl::OkStatus();
  }

  // The diagonal over every label repeated in x.
  static absl::StatusOr<Labeled> Diagonal(const Labeled& x) {
    std::vector<int> labels;
    std::vector<int64_t> shape, strides;
    const std::vector<int64_t> in_strides = RowMajorStrides(x.t.shape());
    for (size_t d = 0; d < x.labels.size(); ++d) {
      const auto it = std::find(labels.begin(), labels.end(), x.labels[d]);
      const int64_t dim = x.t.dim(static_cast<int>(d));
      if (it == labels.end()) {
        labels.push_back(x.labels[d]);
        shape.push_back(dim);
        strides.push_back(in_strides[d]);
        continue;
      }
      const size_t j = it - labels.begin();
      if (shape[j] != dim) {
        return Invalid(absl::StrCat("a label repeated in one input has sizes ",
                                    shape[j], " and ", dim));
      }
      strides[j] += in_strides[d];
    }
    if (labels.size() == x.labels.size()) return x;
    Tensor y(x.t.dtype(), shape);
    StridedCopy(x.t.raw(), ElementSize(x.t.dtype()), strides, shape, y.raw());
    return Labeled{std::move(y), labels};
  }

  // Contracts a and b over the labels they share that keep() rejects; the
  // shared labels keep() accepts are batch dims. Every label of a or b not in
  // the other is kept.
  template <typename T, typename Keep>
  static Labeled Contract(Labeled a, Labeled b, Keep keep, ThreadPool* pool) {
    std::vector<int> batch, m_l, n_l, k_l;
    for (int l : a.labels) {
      const bool shared =
          std::find(b.labels.begin(), b.labels.end(), l) != b.labels.end();
      (shared ? (keep(l) ? batch : k_l) : m_l).push_back(l);
    }
    for (int l : b.labels) {
      if (std::find(a.labels.begin(), a.labels.end(), l) == a.labels.end()) {
        n_l.push_back(l);
      }
    }
    // Broadcast shared dims of size 1 to the other side's size.
    auto dim_of = [](const Labeled& x, int l) {
      const auto it = std::find(x.labels.begin(), x.labels.end(), l);
      return x.t.dim(static_cast<int>(it - x.labels.begin()));
    };
    std::vector<int64_t> a_shape = a.t.shape(), b_shape = b.t.shape();
    for (size_t d = 0; d < a.labels.size(); ++d) {
      const auto it = std::find(b.labels.begin(), b.labels.end(), a.labels[d]);
      if (it == b.labels.end()) continue;
      const size_t e = it - b.labels.begin();
      const int64_t s = std::max(a_shape[d], b_shape[e]);
      a_shape[d] = b_shape[e] = a_shape[d] == 0 || b_shape[e] == 0 ? 0 : s;
    }
    if (a_shape != a.t.shape()) a.t = ExpandTo(a.t, a_shape);
    if (b_shape != b.t.shape()) b.t = ExpandTo(b.t, b_shape);
    std::vector<int> a_order = batch, b_order = batch, c_labels = batch;
    a_order.insert(a_order.end(), m_l.begin(), m_l.end());
    a_order.insert(a_order.end(), k_l.begin(), k_l.end());
    b_order.insert(b_order.end(), k_l.begin(), k_l.end());
    b_order.insert(b_order.end(), n_l.begin(), n_l.end());
    c_labels.insert(c_labels.end(), m_l.begin(), m_l.end());
    c_labels.insert(c_labels.end(), n_l.begin(), n_l.end());
    const Labeled ap = Permute(a, a_order), bp = Permute(b, b_order);
    int64_t nb = 1, m = 1, n = 1, k = 1;
    std::vector<int64_t> c_shape;
    for (int l : batch) nb *= dim_of(ap, l);
    for (int l : m_l) m *= dim_of(ap, l);
    for (int l : k_l) k *= dim_of(ap, l);
    for (int l : n_l) n *= dim_of(bp, l);
    for (int l : batch) c_shape.push_back(dim_of(ap, l));
    for (int l : m_l) c_shape.push_back(dim_of(ap, l));
    for (int l : n_l) c_shape.push_back(dim_of(bp, l));
    Tensor c(a.t.dtype(), c_shape);
    BatchedMatMul<T>(nb, m, n, k, ap.t.data<T>(), bp.t.data<T>(),
                     c.mutable_data<T>(), pool);
    return {std::move(c), c_labels};
  }

  std::vector<EinsumTerm> inputs_;
  EinsumTerm output_;
};

}  // namespace

void RegisterIndexOps(OpRegistry* r) {
  r->Register("Size", &SizeKernel::Create);
  r->Register("Tile", &TileKernel::Create);
  r->Register("CumSum", &CumSumKernel::Create);
  r->Register("TopK", &TopKKernel::Create);
  r->Register("NonZero", &NonZeroKernel::Create);
  r->Register("GatherElements", &GatherElementsKernel::Create);
  r->Register("GatherND", &GatherNDKernel::Create);
  r->Register("Scatter", &ScatterElementsKernel::Create);
  r->Register("ScatterElements", &ScatterElementsKernel::Create);
  r->Register("ScatterND", &ScatterNDKernel::Create);
  r->Register("OneHot", &OneHotKernel::Create);
  r->Register("Trilu", &TriluKernel::Create);
  r->Register("Compress", &CompressKernel::Create);
  r->Register("ReverseSequence", &ReverseSequenceKernel::Create);
  r->Register("EyeLike", &EyeLikeKernel::Create);
  r->Register("Unique", &UniqueKernel::Create);
  r->Register("CenterCropPad", &CenterCropPadKernel::Create);
  r->Register("Col2Im", &Col2ImKernel::Create);
  r->Register("Einsum", &EinsumKernel::Create);
}

}  // namespace quantd::executor
