// Kernels of quantized ONNX models: QuantizeLinear, DequantizeLinear
// (opsets 10, 13, 19, 21: per-tensor, per-axis and blocked parameters,
// INT8 / UINT8 / INT4 / UINT4, INT32 input to DequantizeLinear),
// DynamicQuantizeLinear (11), and the integer products MatMulInteger,
// ConvInteger, QLinearMatMul and QLinearConv (10).
//
// Rounding is ONNX's: half to even (numerics::QuantizeValue), then saturation
// to the output type. Integer products must be exact int32 sums. The
// operands, zero points subtracted, are small integers held as floats and
// summed by the float GEMM / convolution in slices of the reduction short
// enough that every partial sum stays within 2^24, where float arithmetic on
// integers is exact whatever the summation order; the slices are added in
// int32. This reuses the fast (AVX2/AVX-512, threaded) float paths instead of
// a second, slower integer GEMM.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/broadcast.h"
#include "core/executor/gemm.h"
#include "core/executor/kernel.h"
#include "core/numerics/int4.h"
#include "core/numerics/quant_params.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;
using numerics::kOnnxInt4;
using numerics::kOnnxUint4;
using numerics::QuantGrid;

// Elements per parallel chunk of elementwise loops.
constexpr int64_t kGrain = 16384;
// Integers up to 2^24 in magnitude are exact in float.
constexpr double kExactFloatInt = 16777216.0;

// The grid of an integer type a quantized value may have; false otherwise.
bool GridOf(int32_t type, QuantGrid* grid) {
  switch (type) {
    case TP::INT8:
      *grid = {-128, 127};
      return true;
    case TP::UINT8:
      *grid = {0, 255};
      return true;
    case kOnnxInt4:
      *grid = {-8, 7};
      return true;
    case kOnnxUint4:
      *grid = {0, 15};
      return true;
    default:
      return false;
  }
}

bool IsSignedStorage(int32_t type) {
  return type == TP::INT8 || type == kOnnxInt4;
}

// Calls f(const T*) with T the storage type of an 8-bit or 4-bit tensor.
template <typename F>
void WithBytes(const Tensor& t, F&& f) {
  if (IsSignedStorage(t.dtype())) {
    f(t.data<int8_t>());
  } else {
    f(t.data<uint8_t>());
  }
}

// The opset a quantized element type first appears in QuantizeLinear /
// DequantizeLinear; 0 for types the executor does not hold (float8, INT16,
// UINT16, ...), which are refused by name.
int64_t QuantTypeOpset(int32_t type) {
  switch (type) {
    case TP::INT8:
    case TP::UINT8:
      return 10;
    case kOnnxInt4:
    case kOnnxUint4:
      return numerics::kInt4MinOpset;
    default:
      return 0;
  }
}

// OK when `type` is a quantized type the node's opset allows.
absl::Status CheckQuantType(const NodeInfo& info, const std::string& what,
                            int32_t type) {
  const int64_t since = QuantTypeOpset(type);
  if (since == 0) {
    return absl::UnimplementedError(
        absl::StrCat(what, " of node '", info.node().name(), "' (op ",
                     info.op(), ") has element type ", DataTypeName(type),
                     ", which the executor does not support for this op"));
  }
  if (info.opset() < since) {
    return info.Invalid(absl::StrCat(
        what, " has element type ", DataTypeName(type), ", which needs opset ",
        since, " (the model imports ", info.opset(), ")"));
  }
  return absl::OkStatus();
}

// Zero point i of an optional zero-point tensor (0 when absent).
int32_t ZeroPointAt(const Tensor* zp, int64_t i) {
  return zp == nullptr ? 0 : static_cast<int32_t>(zp->IntAt(i));
}

// The zero points as int32, `count` of them (zeros when absent).
std::vector<int32_t> ZeroPoints(const Tensor* zp, int64_t count) {
  std::vector<int32_t> v(count, 0);
  for (int64_t i = 0; zp != nullptr && i < count && i < zp->size(); ++i) {
    v[i] = static_cast<int32_t>(zp->IntAt(i));
  }
  return v;
}

bool IsPerTensor(const Tensor& p) { return p.rank() <= 1 && p.size() == 1; }

// ------------------------------------------------------ parameter layouts

// Where the scale / zero point of each element of x lives. x is seen as
// [outer, axis_dim, inner] around the axis: per-tensor uses one parameter,
// per-axis parameter a for slice a, blocked parameter
// [o, a / block, i] of a tensor shaped like x with ceil(axis_dim / block)
// along the axis.
struct ParamMap {
  enum class Kind { kTensor, kAxis, kBlocked } kind = Kind::kTensor;
  int64_t outer = 1, axis_dim = 1, inner = 1;
  int64_t block = 0, blocks = 1;
};

// Checks scale (and zp) against x for `axis` / `block_size` (0: none) and
// returns the layout. INVALID_ARGUMENT names the shapes that do not fit.
absl::StatusOr<ParamMap> MapParams(const Tensor& x, const Tensor& scale,
                                   const Tensor* zp, int64_t axis,
                                   int64_t block_size) {
  if (zp != nullptr && zp->shape() != scale.shape() &&
      !(IsPerTensor(*zp) && IsPerTensor(scale))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the zero point has shape ", ShapeString(zp->shape()), ", the scale ",
        ShapeString(scale.shape()), "; they must match"));
  }
  ParamMap m;
  if (block_size <= 0 && IsPerTensor(scale)) return m;
  if (x.rank() == 0) {
    return absl::InvalidArgumentError(
        "a scalar input needs a per-tensor (one-element) scale");
  }
  QUANTD_ASSIGN_OR_RETURN(int a, NormalizeAxis(axis, x.rank()));
  for (int d = 0; d < x.rank(); ++d) {
    if (d < a) m.outer *= x.dim(d);
    if (d > a) m.inner *= x.dim(d);
  }
  m.axis_dim = x.dim(a);
  if (block_size > 0) {
    m.kind = ParamMap::Kind::kBlocked;
    m.block = block_size;
    m.blocks = (m.axis_dim + block_size - 1) / block_size;
    std::vector<int64_t> want = x.shape();
    want[a] = m.blocks;
    if (scale.shape() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blocked quantization of x ", ShapeString(x.shape()), " on axis ", a,
          " with block_size ", block_size, " needs a scale of shape ",
          ShapeString(want), ", got ", ShapeString(scale.shape())));
    }
    return m;
  }
  if (scale.rank() != 1 || scale.dim(0) != m.axis_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the scale has shape ", ShapeString(scale.shape()),
        "; per-axis quantization of x ", ShapeString(x.shape()), " on axis ", a,
        " needs [", m.axis_dim, "] (or one element for per-tensor)"));
  }
  m.kind = ParamMap::Kind::kAxis;
  return m;
}

// Calls fn(x_offset, n, param_offset, param_stride) over runs that cover x,
// in parallel: elements x_offset + j use parameter param_offset + j *
// param_stride for j in [0, n).
template <typename F>
void ForEachParamRun(const ParamMap& m, int64_t size, ThreadPool* pool,
                     F&& fn) {
  if (m.kind == ParamMap::Kind::kTensor) {
    ParallelRange(pool, size, kGrain,
                  [&](int64_t b, int64_t e) { fn(b, e - b, int64_t{0}, 0); });
    return;
  }
  const int64_t runs = m.outer * m.axis_dim;
  const int64_t grain =
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, m.inner));
  ParallelRange(pool, runs, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / m.axis_dim, a = r % m.axis_dim;
      if (m.kind == ParamMap::Kind::kAxis) {
        fn(r * m.inner, m.inner, a, 0);
      } else {
        fn(r * m.inner, m.inner, (o * m.blocks + a / m.block) * m.inner, 1);
      }
    }
  });
}

// Runs a kernel on constant inputs once at Create, so that every Run hands
// out the same (immutable, shared) result: DequantizeLinear of a weight is
// then free at run time.
absl::StatusOr<Tensor> FoldConstant(const Kernel& k, const NodeInfo& info) {
  std::vector<const Tensor*> ins;
  static const Tensor kOmitted;
  for (int i = 0; i < info.num_inputs(); ++i) {
    if (!info.has_input(i)) {
      ins.push_back(&kOmitted);
      continue;
    }
    const Tensor* c = info.constant_input(i);
    if (c == nullptr) return Tensor();  // Not constant: nothing to fold.
    ins.push_back(c);
  }
  std::vector<Tensor> outs(info.num_outputs());
  KernelContext ctx{ins, &outs, nullptr};
  absl::Status s = k.Compute(ctx);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("node '", info.node().name(), "' (op ",
                                     info.op(), "): ", s.message()));
  }
  return std::move(outs[0]);
}

// ----------------------------------------------------------- QuantizeLinear

class QuantizeLinearKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<QuantizeLinearKernel>(new QuantizeLinearKernel);
    if (info.num_inputs() < 2) return info.Invalid("needs x and y_scale");
    if (info.opset() >= 13) k->axis_ = info.Int("axis", 1);
    int64_t output_dtype = 0;
    if (info.opset() >= 19) {
      // saturate only applies to float8 outputs, which are refused below.
      info.Int("saturate", 1);
    }
    if (info.opset() >= 21) {
      k->block_size_ = info.Int("block_size", 0);
      output_dtype = info.Int("output_dtype", 0);
    }
    if (k->block_size_ < 0) return info.Invalid("block_size must be >= 0");
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT, TP::INT32}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::FLOAT}));
    const int32_t zp_type = info.has_input(2) ? info.input_type(2) : 0;
    if (output_dtype != 0) {
      if (QuantTypeOpset(static_cast<int32_t>(output_dtype)) == 0) {
        return info.UnsupportedAttr(
            "output_dtype", DataTypeName(static_cast<int32_t>(output_dtype)));
      }
      if (zp_type != 0 && zp_type != output_dtype) {
        return info.Invalid(absl::StrCat(
            "output_dtype ", DataTypeName(static_cast<int32_t>(output_dtype)),
            " differs from the zero point's type ", DataTypeName(zp_type)));
      }
    }
    k->out_type_ = zp_type != 0        ? zp_type
                   : output_dtype != 0 ? static_cast<int32_t>(output_dtype)
                                       : TP::UINT8;
    QUANTD_RETURN_IF_ERROR(CheckQuantType(info, "output y", k->out_type_));
    k->output_dtype_ = static_cast<int32_t>(output_dtype);
    k->opset_ = info.opset();
    info.set_output_type(0, k->out_type_);
    QUANTD_ASSIGN_OR_RETURN(k->folded_, FoldConstant(*k, info));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    if (!folded_.empty()) {
      (*ctx.outputs)[0] = folded_;
      return absl::OkStatus();
    }
    const Tensor& x = ctx.in(0);
    const Tensor& scale = ctx.in(1);
    const Tensor* zp = ctx.has(2) ? &ctx.in(2) : nullptr;
    if (x.dtype() != TP::FLOAT && x.dtype() != TP::INT32) {
      return absl::UnimplementedError(absl::StrCat(
          "x has element type ", DataTypeName(x.dtype()), "; FLOAT or INT32"));
    }
    if (scale.dtype() != TP::FLOAT) {
      return absl::UnimplementedError(
          absl::StrCat("y_scale has element type ", DataTypeName(scale.dtype()),
                       "; only FLOAT is supported"));
    }
    const int32_t out_type = zp ? zp->dtype() : out_type_;
    QuantGrid grid;
    if (!GridOf(out_type, &grid) || (QuantTypeOpset(out_type) > opset_)) {
      return absl::UnimplementedError(
          absl::StrCat("output type ", DataTypeName(out_type), " at opset ",
                       opset_, " is not supported"));
    }
    if (zp && output_dtype_ != 0 && zp->dtype() != output_dtype_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output_dtype ", DataTypeName(output_dtype_),
          " differs from the zero point's type ", DataTypeName(zp->dtype())));
    }
    QUANTD_ASSIGN_OR_RETURN(ParamMap map,
                            MapParams(x, scale, zp, axis_, block_size_));
    Tensor y(static_cast<DataType>(out_type), x.shape());
    const float* sc = scale.data<float>();
    const std::vector<int32_t> zps = ZeroPoints(zp, scale.size());
    auto run = [&](const auto* in, auto* out) {
      using Out = std::remove_pointer_t<decltype(out)>;
      ForEachParamRun(map, x.size(), ctx.pool,
                      [&](int64_t xo, int64_t n, int64_t po, int64_t ps) {
                        for (int64_t j = 0; j < n; ++j) {
                          const int64_t p = po + j * ps;
                          out[xo + j] = static_cast<Out>(
                              Quantize(in[xo + j], {sc[p], zps[p]}, grid));
                        }
                      });
    };
    auto with_out = [&](const auto* in) {
      if (IsSignedStorage(out_type)) {
        run(in, y.mutable_data<int8_t>());
      } else {
        run(in, y.mutable_data<uint8_t>());
      }
    };
    if (x.dtype() == TP::FLOAT) {
      with_out(x.data<float>());
    } else {
      with_out(x.data<int32_t>());
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  static int32_t Quantize(float x, const numerics::QuantParams& p,
                          const QuantGrid& g) {
    return numerics::QuantizeValue(x, p, g);
  }
  // ONNX divides an int32 x by the float scale in double precision (numpy
  // promotes int32 / float32 to float64), then rounds half to even.
  static int32_t Quantize(int32_t x, const numerics::QuantParams& p,
                          const QuantGrid& g) {
    const double q = std::nearbyint(static_cast<double>(x) / p.scale) +
                     static_cast<double>(p.zero_point);
    if (std::isnan(q)) return p.zero_point;
    return static_cast<int32_t>(std::clamp(q, static_cast<double>(g.quant_min),
                                           static_cast<double>(g.quant_max)));
  }

  int64_t axis_ = 1;
  int64_t block_size_ = 0;
  int64_t opset_ = 10;
  int32_t out_type_ = TP::UINT8;
  int32_t output_dtype_ = 0;
  Tensor folded_;
};

// --------------------------------------------------------- DequantizeLinear

class DequantizeLinearKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k =
        std::unique_ptr<DequantizeLinearKernel>(new DequantizeLinearKernel);
    if (info.num_inputs() < 2) return info.Invalid("needs x and x_scale");
    if (info.opset() >= 13) k->axis_ = info.Int("axis", 1);
    if (info.opset() >= 21) k->block_size_ = info.Int("block_size", 0);
    if (k->block_size_ < 0) return info.Invalid("block_size must be >= 0");
    k->opset_ = info.opset();
    for (int i : {0, 2}) {
      const int32_t t = info.has_input(i) ? info.input_type(i) : 0;
      if (t == 0 || t == TP::INT32) continue;
      QUANTD_RETURN_IF_ERROR(
          CheckQuantType(info, i == 0 ? "input x" : "x_zero_point", t));
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::FLOAT}));
    info.set_output_type(0, TP::FLOAT);
    QUANTD_ASSIGN_OR_RETURN(k->folded_, FoldConstant(*k, info));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    if (!folded_.empty()) {
      (*ctx.outputs)[0] = folded_;
      return absl::OkStatus();
    }
    const Tensor& x = ctx.in(0);
    const Tensor& scale = ctx.in(1);
    const Tensor* zp = ctx.has(2) ? &ctx.in(2) : nullptr;
    QuantGrid grid;
    const bool int32_x = x.dtype() == TP::INT32;
    if (!int32_x &&
        (!GridOf(x.dtype(), &grid) || QuantTypeOpset(x.dtype()) > opset_)) {
      return absl::UnimplementedError(
          absl::StrCat("x of element type ", DataTypeName(x.dtype()),
                       " at opset ", opset_, " is not supported"));
    }
    if (zp && zp->dtype() != x.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("x is ", DataTypeName(x.dtype()),
                       " but x_zero_point is ", DataTypeName(zp->dtype())));
    }
    if (scale.dtype() != TP::FLOAT) {
      return absl::UnimplementedError(
          absl::StrCat("x_scale has element type ", DataTypeName(scale.dtype()),
                       "; only FLOAT is supported"));
    }
    QUANTD_ASSIGN_OR_RETURN(ParamMap map,
                            MapParams(x, scale, zp, axis_, block_size_));
    Tensor y(TP::FLOAT, x.shape());
    float* out = y.mutable_data<float>();
    const float* sc = scale.data<float>();
    const std::vector<int32_t> zps = ZeroPoints(zp, scale.size());
    auto run = [&](const auto* in) {
      ForEachParamRun(map, x.size(), ctx.pool,
                      [&](int64_t xo, int64_t n, int64_t po, int64_t ps) {
                        for (int64_t j = 0; j < n; ++j) {
                          const int64_t p = po + j * ps;
                          // (x - zp) * scale, the difference in float as the
                          // ONNX reference does (exact for 8-bit values).
                          out[xo + j] = (static_cast<float>(in[xo + j]) -
                                         static_cast<float>(zps[p])) *
                                        sc[p];
                        }
                      });
    };
    if (int32_x) {
      run(x.data<int32_t>());
    } else {
      WithBytes(x, run);
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 1;
  int64_t block_size_ = 0;
  int64_t opset_ = 10;
  Tensor folded_;
};

// ---------------------------------------------------- DynamicQuantizeLinear

class DynamicQuantizeLinearKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT}));
    info.set_output_type(0, TP::UINT8);
    info.set_output_type(1, TP::FLOAT);
    info.set_output_type(2, TP::UINT8);
    return std::unique_ptr<Kernel>(new DynamicQuantizeLinearKernel);
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != TP::FLOAT) {
      return absl::UnimplementedError(absl::StrCat(
          "x has element type ", DataTypeName(x.dtype()), "; only FLOAT"));
    }
    const float* in = x.data<float>();
    // The range always includes 0 (ONNX: min(0, min(x)), max(0, max(x))).
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < x.size(); ++i) {
      lo = std::min(lo, in[i]);
      hi = std::max(hi, in[i]);
    }
    // As the ONNX reference: scale = (hi - lo) / 255, or 1 / 255 when the
    // range is empty (all zeros), which avoids dividing by zero.
    const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    const QuantGrid grid{0, 255};
    const float zp_real = 0.0f - lo / scale;
    // An infinite x (or a range wider than float) leaves no finite scale or
    // zero point: ONNX defines no result, and the zero point's conversion
    // to an integer would be undefined.
    if (!std::isfinite(scale) || !std::isfinite(zp_real)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DynamicQuantizeLinear: x spans [", lo, ", ", hi,
          "], which has no finite scale"));
    }
    const auto zp =
        static_cast<int32_t>(std::clamp(std::nearbyint(zp_real), 0.0f, 255.0f));
    const numerics::QuantParams qp{scale, zp};
    Tensor y(TP::UINT8, x.shape());
    uint8_t* out = y.mutable_data<uint8_t>();
    ParallelRange(ctx.pool, x.size(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        out[i] = static_cast<uint8_t>(numerics::QuantizeValue(in[i], qp, grid));
      }
    });
    (*ctx.outputs)[0] = std::move(y);
    if (ctx.outputs->size() > 1) (*ctx.outputs)[1] = Tensor::Scalar(scale);
    if (ctx.outputs->size() > 2) {
      (*ctx.outputs)[2] = Tensor::Scalar(static_cast<uint8_t>(zp));
    }
    return absl::OkStatus();
  }
};

// --------------------------------------------------- exact integer products

// The longest slice of a reduction whose partial sums stay exact in float,
// given the largest |a| * |b| of its terms.
int64_t ExactSlice(double max_product) {
  if (max_product <= 0) return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(1,
                           static_cast<int64_t>(kExactFloatInt / max_product));
}

// c (+)= scratch as int32 (exact: scratch holds integers within 2^24). The
// sum wraps like ONNX's int32 accumulator instead of being undefined.
void AddToInt32(const float* scratch, int64_t n, bool first, int32_t* c,
                ThreadPool* pool) {
  ParallelRange(pool, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto v = static_cast<int32_t>(scratch[i]);
      c[i] = first ? v
                   : static_cast<int32_t>(static_cast<uint32_t>(c[i]) +
                                          static_cast<uint32_t>(v));
    }
  });
}

// Row-major c[m,n] = a[m,k] * b[k,n] in exact int32, where a and b hold
// integers (as floats) whose products are at most max_product in magnitude.
void ExactGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, double max_product, int32_t* c,
               ThreadPool* pool) {
  if (k == 0) {
    std::fill(c, c + m * n, 0);
    return;
  }
  const int64_t slice = ExactSlice(max_product);
  // Equal slices: no short last one.
  const int64_t slices = k <= slice ? 1 : (k + slice - 1) / slice;
  std::vector<float> scratch(m * n);
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t k0 = k * s / slices, k1 = k * (s + 1) / slices;
    Gemm(false, false, m, n, k1 - k0, 1.0f, a + k0, lda, b + k0 * ldb, ldb,
         0.0f, scratch.data(), n, pool);
    AddToInt32(scratch.data(), m * n, s == 0, c, pool);
  }
}

// Values of an 8-bit tensor minus zero points, as floats: element i uses
// zero point zp[(i / inner) % count] (count 1: per-tensor). Returns the
// largest magnitude.
float ShiftToFloat(const Tensor& t, const Tensor* zp, int64_t inner,
                   int64_t count, float* out, ThreadPool* pool) {
  std::vector<float> zf(std::max<int64_t>(count, 1));
  for (int64_t i = 0; i < count; ++i) {
    zf[i] = static_cast<float>(ZeroPointAt(zp, zp && zp->size() == 1 ? 0 : i));
  }
  float max_abs = 0.0f;
  absl::Mutex mu;
  WithBytes(t, [&](const auto* in) {
    ParallelRange(pool, t.size(), kGrain, [&](int64_t b, int64_t e) {
      float mx = 0.0f;
      for (int64_t i = b; i < e; ++i) {
        const float v = static_cast<float>(in[i]) -
                        zf[count == 1 ? 0 : (i / inner) % count];
        out[i] = v;
        mx = std::max(mx, std::abs(v));
      }
      absl::MutexLock lock(&mu);
      max_abs = std::max(max_abs, mx);
    });
  });
  return max_abs;
}

// An integer operand shifted by its zero points, as floats, with its largest
// magnitude (what ExactSlice needs).
struct FloatOperand {
  Tensor values;  // FLOAT, the operand's shape.
  float max_abs = 0.0f;
};

FloatOperand MakeFloatOperand(const Tensor& t, const Tensor* zp, int64_t inner,
                              int64_t count, ThreadPool* pool) {
  FloatOperand f;
  f.values = Tensor(TP::FLOAT, t.shape());
  f.max_abs =
      ShiftToFloat(t, zp, inner, count, f.values.mutable_data<float>(), pool);
  return f;
}

absl::Status Require8Bit(const Tensor& t, const char* what) {
  if (t.dtype() == TP::INT8 || t.dtype() == TP::UINT8) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(what, " has element type ", DataTypeName(t.dtype()),
                   "; only INT8 and UINT8 are supported"));
}

absl::Status CheckZeroPointType(const Tensor* zp, const Tensor& of,
                                const char* what) {
  if (zp == nullptr || zp->dtype() == of.dtype()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is ", DataTypeName(zp->dtype()),
                   " but its operand is ", DataTypeName(of.dtype())));
}

// A quantization parameter that is per-tensor or a 1-D vector of `count`
// (per row of A, per column of B, per output channel of W). The spec's
// batched forms ([..., M, 1], [..., 1, N]) are refused by name.
absl::Status CheckVectorParam(const Tensor* p, int64_t count, const char* what,
                              const char* per) {
  if (p == nullptr || IsPerTensor(*p)) return absl::OkStatus();
  if (p->rank() == 1 && p->dim(0) == count) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      what, " of shape ", ShapeString(p->shape()),
      " is not supported: one value, or [", count, "] (per ", per, ")"));
}

// Element i of a per-tensor or per-index parameter.
float FloatParamAt(const Tensor& p, int64_t i) {
  return p.data<float>()[p.size() == 1 ? 0 : i];
}

// ----------------------------------------------------------- integer MatMul

// numpy matmul geometry (rank-1 operands become a row / a column).
struct MatMulDims {
  int64_t m = 1, k = 1, n = 1;
  std::vector<int64_t> abatch, bbatch, batch, out_shape;
};

absl::StatusOr<MatMulDims> MatMulShape(const Tensor& a, const Tensor& b) {
  if (a.rank() == 0 || b.rank() == 0) {
    return absl::InvalidArgumentError("MatMul inputs must not be scalars");
  }
  std::vector<int64_t> as = a.shape(), bs = b.shape();
  if (a.rank() == 1) as.insert(as.begin(), 1);
  if (b.rank() == 1) bs.push_back(1);
  MatMulDims d;
  d.m = as[as.size() - 2];
  d.k = as.back();
  d.n = bs.back();
  if (bs[bs.size() - 2] != d.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("shapes ", ShapeString(a.shape()), " and ",
                     ShapeString(b.shape()), " do not multiply"));
  }
  d.abatch.assign(as.begin(), as.end() - 2);
  d.bbatch.assign(bs.begin(), bs.end() - 2);
  const std::vector<int64_t> batches[2] = {d.abatch, d.bbatch};
  QUANTD_ASSIGN_OR_RETURN(std::vector<int64_t> batch, BroadcastShapes(batches));
  d.batch = batch;
  d.out_shape = d.batch;
  if (a.rank() > 1) d.out_shape.push_back(d.m);
  if (b.rank() > 1) d.out_shape.push_back(d.n);
  return d;
}

// B shifted by its per-tensor or per-column zero points.
FloatOperand ShiftB(const Tensor& b, const Tensor* bzp, ThreadPool* pool) {
  const int64_t n = b.rank() == 1 ? 1 : b.dim(b.rank() - 1);
  return MakeFloatOperand(b, bzp, 1, bzp == nullptr || bzp->size() == 1 ? 1 : n,
                          pool);
}

// Shifts a constant B (with a constant or absent zero point) once at Create;
// false when B is not constant or not of a form IntegerMatMul takes (then
// it is shifted, and refused with the right error, at run time).
bool PrepareB(const NodeInfo& info, int b_in, int bzp_in, FloatOperand* out) {
  const Tensor* b = info.constant_input(b_in);
  const Tensor* bzp =
      info.has_input(bzp_in) ? info.constant_input(bzp_in) : nullptr;
  if (b == nullptr || b->rank() == 0 || !Require8Bit(*b, "").ok()) {
    return false;
  }
  if (info.has_input(bzp_in) && bzp == nullptr) return false;
  const int64_t n = b->rank() == 1 ? 1 : b->dim(b->rank() - 1);
  if (!CheckZeroPointType(bzp, *b, "").ok() ||
      !CheckVectorParam(bzp, n, "", "").ok()) {
    return false;
  }
  *out = ShiftB(*b, bzp, nullptr);
  return true;
}

// acc = (a - a_zp) x (b - b_zp) in exact int32 (numpy matmul shapes).
// `bpre` is B already shifted (a constant weight), or null.
absl::StatusOr<Tensor> IntegerMatMul(const Tensor& a, const Tensor* azp,
                                     const Tensor& b, const Tensor* bzp,
                                     const FloatOperand* bpre, ThreadPool* pool,
                                     MatMulDims* dims) {
  QUANTD_RETURN_IF_ERROR(Require8Bit(a, "A"));
  QUANTD_RETURN_IF_ERROR(Require8Bit(b, "B"));
  QUANTD_RETURN_IF_ERROR(CheckZeroPointType(azp, a, "a_zero_point"));
  QUANTD_RETURN_IF_ERROR(CheckZeroPointType(bzp, b, "b_zero_point"));
  QUANTD_ASSIGN_OR_RETURN(MatMulDims d, MatMulShape(a, b));
  QUANTD_RETURN_IF_ERROR(
      CheckVectorParam(azp, d.m, "a_zero_point", "row of A"));
  QUANTD_RETURN_IF_ERROR(
      CheckVectorParam(bzp, d.n, "b_zero_point", "column of B"));
  *dims = d;
  const int64_t m = d.m, k = d.k, n = d.n;
  FloatOperand af = MakeFloatOperand(
      a, azp, k, azp == nullptr || azp->size() == 1 ? 1 : m, pool);
  FloatOperand local_b;
  if (bpre == nullptr) {
    local_b = ShiftB(b, bzp, pool);
    bpre = &local_b;
  }
  const double max_product =
      static_cast<double>(af.max_abs) * static_cast<double>(bpre->max_abs);
  const float* pa = af.values.data<float>();
  const float* pb = bpre->values.data<float>();
  Tensor acc(TP::INT32, d.out_shape);
  int32_t* pc = acc.mutable_data<int32_t>();
  const int64_t nbatch = NumElements(d.batch);
  if (NumElements(d.bbatch) == 1 && NumElements(d.abatch) == nbatch) {
    // One B (a weight): A's batch folds into its rows.
    ExactGemm(nbatch * m, n, k, pa, k, pb, n, max_product, pc, pool);
  } else {
    const std::vector<int64_t> shapes[2] = {d.abatch, d.bbatch};
    BroadcastWalk walk(d.batch, shapes);
    int64_t i = 0;
    walk.ForEachRun(0, walk.runs(), [&](int64_t, const int64_t* off) {
      for (int64_t j = 0; j < walk.inner(); ++j, ++i) {
        ExactGemm(m, n, k, pa + (off[0] + j * walk.inner_stride(0)) * m * k, k,
                  pb + (off[1] + j * walk.inner_stride(1)) * k * n, n,
                  max_product, pc + i * m * n, pool);
      }
    });
  }
  return acc;
}

class MatMulIntegerKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() < 2) return info.Invalid("needs A and B");
    absl::Status s;
    for (int i = 0; i < 4 && s.ok(); ++i) {
      s = info.RequireType(i, {TP::INT8, TP::UINT8});
    }
    if (!s.ok()) return s;
    info.set_output_type(0, TP::INT32);
    auto k = std::unique_ptr<MatMulIntegerKernel>(new MatMulIntegerKernel);
    k->prepared_ = PrepareB(info, 1, 3, &k->b_);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    MatMulDims dims;
    QUANTD_ASSIGN_OR_RETURN(
        (*ctx.outputs)[0],
        IntegerMatMul(ctx.in(0), ctx.has(2) ? &ctx.in(2) : nullptr, ctx.in(1),
                      ctx.has(3) ? &ctx.in(3) : nullptr,
                      prepared_ ? &b_ : nullptr, ctx.pool, &dims));
    return absl::OkStatus();
  }

 private:
  bool prepared_ = false;
  FloatOperand b_;
};

// y = saturate(round(acc * scale) + zp): the requantization of QLinearMatMul
// and QLinearConv, half to even like QuantizeLinear.
inline int32_t Requantize(int32_t acc, float scale, int32_t zp,
                          const QuantGrid& grid) {
  return numerics::QuantizeValue(static_cast<float>(acc) * scale, {1.0f, zp},
                                 grid);
}

absl::Status CheckOutputZeroPoint(const Tensor& yzp, QuantGrid* grid) {
  if ((yzp.dtype() != TP::INT8 && yzp.dtype() != TP::UINT8) ||
      !GridOf(yzp.dtype(), grid)) {
    return absl::UnimplementedError(absl::StrCat(
        "y_zero_point has element type ", DataTypeName(yzp.dtype()),
        "; only INT8 and UINT8 are supported"));
  }
  return absl::OkStatus();
}

absl::Status CheckFloatParam(const Tensor& p, const char* what) {
  if (p.dtype() == TP::FLOAT) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      what, " has element type ", DataTypeName(p.dtype()), "; only FLOAT"));
}

class QLinearMatMulKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() < 8) {
      return info.Invalid(
          "needs a, a_scale, a_zero_point, b, b_scale, "
          "b_zero_point, y_scale and y_zero_point");
    }
    absl::Status s;
    for (int i : {0, 2, 3, 5, 7}) {
      if (s.ok()) s = info.RequireType(i, {TP::INT8, TP::UINT8});
    }
    for (int i : {1, 4, 6}) {
      if (s.ok()) s = info.RequireType(i, {TP::FLOAT});
    }
    if (!s.ok()) return s;
    if (info.input_type(7) != 0) info.set_output_type(0, info.input_type(7));
    auto k = std::unique_ptr<QLinearMatMulKernel>(new QLinearMatMulKernel);
    k->prepared_ = PrepareB(info, 3, 5, &k->b_);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor &a_scale = ctx.in(1), &b_scale = ctx.in(4);
    const Tensor &y_scale = ctx.in(6), &yzp = ctx.in(7);
    QuantGrid grid;
    absl::Status s = CheckOutputZeroPoint(yzp, &grid);
    if (s.ok()) s = CheckFloatParam(a_scale, "a_scale");
    if (s.ok()) s = CheckFloatParam(b_scale, "b_scale");
    if (s.ok()) s = CheckFloatParam(y_scale, "y_scale");
    if (!s.ok()) return s;
    MatMulDims d;
    QUANTD_ASSIGN_OR_RETURN(
        Tensor acc, IntegerMatMul(ctx.in(0), ctx.has(2) ? &ctx.in(2) : nullptr,
                                  ctx.in(3), ctx.has(5) ? &ctx.in(5) : nullptr,
                                  prepared_ ? &b_ : nullptr, ctx.pool, &d));
    s = CheckVectorParam(&a_scale, d.m, "a_scale", "row of A");
    if (s.ok()) s = CheckVectorParam(&b_scale, d.n, "b_scale", "column of B");
    if (s.ok() && (!IsPerTensor(y_scale) || !IsPerTensor(yzp))) {
      s = absl::UnimplementedError(absl::StrCat(
          "y_scale ", ShapeString(y_scale.shape()), " / y_zero_point ",
          ShapeString(yzp.shape()), ": only per-tensor outputs are supported"));
    }
    if (!s.ok()) return s;
    // ONNX: (a_scale * b_scale / y_scale) in float, per row and column.
    const float ys = y_scale.data<float>()[0];
    std::vector<float> mult(d.m * d.n);
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        mult[i * d.n + j] =
            FloatParamAt(a_scale, i) * FloatParamAt(b_scale, j) / ys;
      }
    }
    const int32_t zp = ZeroPointAt(&yzp, 0);
    Tensor y(yzp.dtype(), acc.shape());
    const int32_t* in = acc.data<int32_t>();
    const int64_t mn = d.m * d.n;
    auto run = [&](auto* out) {
      using Out = std::remove_pointer_t<decltype(out)>;
      ParallelRange(ctx.pool, y.size(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          out[i] = static_cast<Out>(Requantize(in[i], mult[i % mn], zp, grid));
        }
      });
    };
    if (IsSignedStorage(yzp.dtype())) {
      run(y.mutable_data<int8_t>());
    } else {
      run(y.mutable_data<uint8_t>());
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  bool prepared_ = false;
  FloatOperand b_;
};

// ------------------------------------------------------------- integer Conv

// (x - x_zp) conv (w - w_zp) in exact int32, run by the executor's float
// Conv kernel (built from this node's window attributes, so auto_pad, pads,
// strides, dilations and group mean exactly what they mean for Conv). When
// the reduction C/group * kh * kw is too long for exact float sums, the input
// channels of each group are cut into slices, each slice a smaller grouped
// convolution, and the slices are added in int32.
class IntegerConv {
 public:
  absl::Status Init(NodeInfo& info, int x_in, int w_in, int wzp_in) {
    // Read (and so claim) the window attributes on the real node; the Conv
    // kernel parses them from the copy.
    info.Ints("kernel_shape");
    info.Ints("strides");
    info.Ints("dilations");
    info.Ints("pads");
    info.String("auto_pad", "NOTSET");
    group_ = info.Int("group", 1);
    if (group_ < 1) return info.Invalid("group must be positive");
    if (!info.has_output(0)) return info.Invalid("needs an output");
    node_ = info.node();
    node_.clear_input();
    node_.add_input(info.node().input(x_in));
    node_.add_input(info.node().input(w_in));
    node_.clear_output();
    node_.add_output(info.node().output(0));
    KernelFactory conv = GlobalOpRegistry().Find("Conv");
    if (conv == nullptr) return absl::InternalError("no Conv kernel");
    NodeInfo conv_info(node_, info.opset(), {TP::FLOAT, TP::FLOAT},
                       {nullptr, nullptr});
    conv_info.set_input_ranks({info.input_rank(x_in), info.input_rank(w_in)});
    QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, conv(conv_info));
    QUANTD_RETURN_IF_ERROR(conv_info.Finish());
    conv_ = std::move(k);
    // A constant weight is shifted once.
    const Tensor* w = info.constant_input(w_in);
    const Tensor* wzp =
        info.has_input(wzp_in) ? info.constant_input(wzp_in) : nullptr;
    if (w != nullptr && w->rank() >= 3 &&
        (wzp != nullptr || !info.has_input(wzp_in)) &&
        (w->dtype() == TP::INT8 || w->dtype() == TP::UINT8) &&
        CheckZeroPointType(wzp, *w, "").ok() &&
        CheckVectorParam(wzp, w->dim(0), "", "").ok()) {
      w_ = ShiftW(*w, wzp, nullptr);
      prepared_ = true;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> Run(const Tensor& x, const Tensor* xzp,
                             const Tensor& w, const Tensor* wzp,
                             ThreadPool* pool) const {
    absl::Status s = Require8Bit(x, "x");
    if (s.ok()) s = Require8Bit(w, "w");
    if (s.ok()) s = CheckZeroPointType(xzp, x, "x_zero_point");
    if (s.ok()) s = CheckZeroPointType(wzp, w, "w_zero_point");
    if (s.ok() && xzp != nullptr && !IsPerTensor(*xzp)) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "x_zero_point must be a scalar, got ", ShapeString(xzp->shape())));
    }
    if (!s.ok()) return s;
    if (x.rank() < 3 || w.rank() != x.rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat("x ", ShapeString(x.shape()), " and w ",
                       ShapeString(w.shape()), " are not a convolution"));
    }
    const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0), cg = w.dim(1);
    if (cg * group_ != c || m % group_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("x has ", c, " channels, w is ", ShapeString(w.shape()),
                       " with group ", group_));
    }
    s = CheckVectorParam(wzp, m, "w_zero_point", "output channel");
    if (!s.ok()) return s;
    FloatOperand local_w;
    const FloatOperand* wf = &w_;
    if (!prepared_) {
      local_w = ShiftW(w, wzp, pool);
      wf = &local_w;
    }
    const int64_t khw = NumElements(
        std::vector<int64_t>(w.shape().begin() + 2, w.shape().end()));
    const int64_t plane = NumElements(
        std::vector<int64_t>(x.shape().begin() + 2, x.shape().end()));
    const float zp = static_cast<float>(ZeroPointAt(xzp, 0));
    // The largest |x - zp| bounds the products with the weights.
    float lo = zp, hi = zp;
    WithBytes(x, [&](const auto* in) {
      for (int64_t i = 0; i < x.size(); ++i) {
        lo = std::min(lo, static_cast<float>(in[i]));
        hi = std::max(hi, static_cast<float>(in[i]));
      }
    });
    const double max_x = std::max(zp - lo, hi - zp);
    const int64_t slice = ExactSlice(max_x * wf->max_abs);
    int64_t slices = 1;
    if (cg * khw > slice) {
      const int64_t per = slice / std::max<int64_t>(khw, 1);
      if (per == 0) {
        return absl::UnimplementedError(absl::StrCat(
            "a kernel window of ", khw,
            " elements is too long for the exact integer convolution"));
      }
      slices = (cg + per - 1) / per;
    }
    Tensor acc;
    for (int64_t sl = 0; sl < slices; ++sl) {
      const int64_t c0 = cg * sl / slices, c1 = cg * (sl + 1) / slices;
      const int64_t cw = c1 - c0;
      std::vector<int64_t> xshape = x.shape();
      xshape[1] = group_ * cw;
      Tensor xf(TP::FLOAT, xshape);
      float* px = xf.mutable_data<float>();
      WithBytes(x, [&](const auto* in) {
        // Plane p of the slice is input channel g * cg + c0 + ci of image ni.
        ParallelRange(
            pool, n * group_ * cw,
            std::max<int64_t>(1, kGrain / std::max<int64_t>(plane, 1)),
            [&](int64_t b, int64_t e) {
              for (int64_t p = b; p < e; ++p) {
                const int64_t ni = p / (group_ * cw);
                const int64_t g = (p / cw) % group_, ci = p % cw;
                const auto* src = in + (ni * c + g * cg + c0 + ci) * plane;
                float* dst = px + p * plane;
                for (int64_t j = 0; j < plane; ++j) {
                  dst[j] = static_cast<float>(src[j]) - zp;
                }
              }
            });
      });
      Tensor wc = wf->values;
      if (slices > 1) {
        std::vector<int64_t> wshape = w.shape();
        wshape[1] = cw;
        wc = Tensor(TP::FLOAT, wshape);
        const float* src = wf->values.data<float>();
        float* dst = wc.mutable_data<float>();
        for (int64_t mi = 0; mi < m; ++mi) {
          std::memcpy(dst + mi * cw * khw, src + (mi * cg + c0) * khw,
                      cw * khw * sizeof(float));
        }
      }
      std::vector<Tensor> outs(1);
      const Tensor* ins[2] = {&xf, &wc};
      KernelContext ctx{absl::MakeConstSpan(ins), &outs, pool};
      s = conv_->Compute(ctx);
      if (!s.ok()) return s;
      if (sl == 0) acc = Tensor(TP::INT32, outs[0].shape());
      AddToInt32(outs[0].data<float>(), outs[0].size(), sl == 0,
                 acc.mutable_data<int32_t>(), pool);
    }
    return acc;
  }

 private:
  static FloatOperand ShiftW(const Tensor& w, const Tensor* wzp,
                             ThreadPool* pool) {
    const int64_t m = w.dim(0);
    const int64_t per_m = m == 0 ? 0 : w.size() / m;
    return MakeFloatOperand(w, wzp, std::max<int64_t>(per_m, 1),
                            wzp == nullptr || wzp->size() == 1 ? 1 : m, pool);
  }

  onnx::NodeProto node_;
  std::unique_ptr<Kernel> conv_;
  int64_t group_ = 1;
  bool prepared_ = false;
  FloatOperand w_;
};

class ConvIntegerKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() < 2) return info.Invalid("needs x and w");
    absl::Status s;
    for (int i = 0; i < 4 && s.ok(); ++i) {
      s = info.RequireType(i, {TP::INT8, TP::UINT8});
    }
    if (!s.ok()) return s;
    info.set_output_type(0, TP::INT32);
    auto k = std::unique_ptr<ConvIntegerKernel>(new ConvIntegerKernel);
    s = k->conv_.Init(info, 0, 1, 3);
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    QUANTD_ASSIGN_OR_RETURN(
        (*ctx.outputs)[0],
        conv_.Run(ctx.in(0), ctx.has(2) ? &ctx.in(2) : nullptr, ctx.in(1),
                  ctx.has(3) ? &ctx.in(3) : nullptr, ctx.pool));
    return absl::OkStatus();
  }

 private:
  IntegerConv conv_;
};

class QLinearConvKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.num_inputs() < 8) {
      return info.Invalid(
          "needs x, x_scale, x_zero_point, w, w_scale, "
          "w_zero_point, y_scale and y_zero_point");
    }
    absl::Status s;
    for (int i : {0, 2, 3, 5, 7}) {
      if (s.ok()) s = info.RequireType(i, {TP::INT8, TP::UINT8});
    }
    for (int i : {1, 4, 6}) {
      if (s.ok()) s = info.RequireType(i, {TP::FLOAT});
    }
    if (s.ok()) s = info.RequireType(8, {TP::INT32});
    if (!s.ok()) return s;
    if (info.input_type(7) != 0) info.set_output_type(0, info.input_type(7));
    auto k = std::unique_ptr<QLinearConvKernel>(new QLinearConvKernel);
    s = k->conv_.Init(info, 0, 3, 5);
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor &x_scale = ctx.in(1), &w_scale = ctx.in(4);
    const Tensor &y_scale = ctx.in(6), &yzp = ctx.in(7);
    QuantGrid grid;
    absl::Status s = CheckOutputZeroPoint(yzp, &grid);
    if (s.ok()) s = CheckFloatParam(x_scale, "x_scale");
    if (s.ok()) s = CheckFloatParam(w_scale, "w_scale");
    if (s.ok()) s = CheckFloatParam(y_scale, "y_scale");
    if (s.ok() &&
        (!IsPerTensor(x_scale) || !IsPerTensor(y_scale) || !IsPerTensor(yzp))) {
      s = absl::InvalidArgumentError(
          "x_scale, y_scale and y_zero_point must be scalars");
    }
    if (!s.ok()) return s;
    QUANTD_ASSIGN_OR_RETURN(
        Tensor acc,
        conv_.Run(ctx.in(0), ctx.has(2) ? &ctx.in(2) : nullptr, ctx.in(3),
                  ctx.has(5) ? &ctx.in(5) : nullptr, ctx.pool));
    const int64_t n = acc.dim(0), m = acc.dim(1);
    const int64_t plane = n * m == 0 ? 0 : acc.size() / (n * m);
    s = CheckVectorParam(&w_scale, m, "w_scale", "output channel");
    if (!s.ok()) return s;
    const int32_t* bias = nullptr;
    if (ctx.has(8)) {
      const Tensor& b = ctx.in(8);
      if (b.dtype() != TP::INT32 || b.rank() != 1 || b.dim(0) != m) {
        return absl::InvalidArgumentError(
            absl::StrCat("B must be INT32 [", m, "], got ",
                         DataTypeName(b.dtype()), " ", ShapeString(b.shape())));
      }
      bias = b.data<int32_t>();
    }
    // ONNX: x_scale * w_scale / y_scale in float, per output channel.
    std::vector<float> mult(m);
    for (int64_t i = 0; i < m; ++i) {
      mult[i] = x_scale.data<float>()[0] * FloatParamAt(w_scale, i) /
                y_scale.data<float>()[0];
    }
    const int32_t zp = ZeroPointAt(&yzp, 0);
    Tensor y(yzp.dtype(), acc.shape());
    const int32_t* in = acc.data<int32_t>();
    auto run = [&](auto* out) {
      using Out = std::remove_pointer_t<decltype(out)>;
      ParallelRange(
          ctx.pool, n * m,
          std::max<int64_t>(1, kGrain / std::max<int64_t>(plane, 1)),
          [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) {
              const int64_t ch = r % m;
              const int32_t add = bias ? bias[ch] : 0;
              for (int64_t j = r * plane; j < (r + 1) * plane; ++j) {
                const auto v = static_cast<int32_t>(
                    static_cast<uint32_t>(in[j]) + static_cast<uint32_t>(add));
                out[j] = static_cast<Out>(Requantize(v, mult[ch], zp, grid));
              }
            }
          });
    };
    if (IsSignedStorage(yzp.dtype())) {
      run(y.mutable_data<int8_t>());
    } else {
      run(y.mutable_data<uint8_t>());
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  IntegerConv conv_;
};

}  // namespace

void RegisterQuantOps(OpRegistry* r) {
  r->Register("QuantizeLinear", &QuantizeLinearKernel::Create);
  r->Register("DequantizeLinear", &DequantizeLinearKernel::Create);
  r->Register("DynamicQuantizeLinear", &DynamicQuantizeLinearKernel::Create);
  r->Register("MatMulInteger", &MatMulIntegerKernel::Create);
  r->Register("QLinearMatMul", &QLinearMatMulKernel::Create);
  r->Register("ConvInteger", &ConvIntegerKernel::Create);
  r->Register("QLinearConv", &QLinearConvKernel::Create);
}

}  // namespace quantd::executor
