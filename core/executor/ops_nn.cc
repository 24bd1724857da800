// Neural-network kernels: Conv, pools, Gemm, MatMul, BatchNormalization,
// Softmax, LayerNormalization (the reductions are in ops_reduce.cc).
#include <algorithm>
#include <cmath>
#include <limits>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/broadcast.h"
#include "core/executor/conv.h"
#include "core/executor/gemm.h"
#include "core/executor/kernel.h"
#include "core/executor/window.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

std::string Join(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

std::vector<int64_t> OutShape(int64_t n, int64_t c, const Conv2DShape& s,
                              int spatial) {
  if (spatial == 1) return {n, c, s.ow};
  return {n, c, s.oh, s.ow};
}

absl::Status CheckSpatialRank(int rank) {
  if (rank >= 3 && rank <= 5) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      "only 1-D, 2-D and 3-D windows are supported (input rank ", rank, ")"));
}

// -------------------------------------------------------------------- Conv

class ConvKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<ConvKernel>(new ConvKernel);
    absl::Status s =
        ReadWindow(info, /*dilations=*/true, /*ceil_mode=*/false, &k->window_);
    if (!s.ok()) return s;
    k->group_ = info.Int("group", 1);
    if (k->group_ < 1) return info.Invalid("group must be positive");
    for (int i = 0; i < 3 && s.ok(); ++i) s = info.RequireType(i, {TP::FLOAT});
    if (!s.ok()) return s;
    for (int i = 0; i < 2; ++i) {
      const int r = info.input_rank(i);
      if (r >= 0 && (r < 3 || r > 5)) {
        return absl::UnimplementedError(
            absl::StrCat("node '", info.node().name(),
                         "' (op Conv): only 1-D, 2-D and 3-D "
                         "convolutions are supported (input ",
                         i, " has rank ", r, ")"));
      }
    }
    if (info.num_inputs() < 2) return info.Invalid("needs X and W");
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& w = ctx.in(1);
    if (x.dtype() != TP::FLOAT || w.dtype() != TP::FLOAT) {
      return absl::UnimplementedError("only FLOAT convolutions are supported");
    }
    QUANTD_RETURN_IF_ERROR(CheckSpatialRank(x.rank()));
    if (w.rank() != x.rank()) {
      return absl::InvalidArgumentError("X and W ranks differ");
    }
    const int spatial = x.rank() - 2;
    const int64_t c = x.dim(1), m = w.dim(0);
    if (c != w.dim(1) * group_ || m % group_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("X has ", c, " channels, W is ", ShapeString(w.shape()),
                       " with group ", group_));
    }
    std::vector<int64_t> in(x.shape().begin() + 2, x.shape().end());
    std::vector<int64_t> k(w.shape().begin() + 2, w.shape().end());
    if (!window_.kernel.empty() && window_.kernel != k) {
      return absl::InvalidArgumentError("kernel_shape does not match W");
    }
    DepthWindow depth;
    QUANTD_ASSIGN_OR_RETURN(
        Conv2DShape s,
        ResolveWindow(window_, in, k, spatial == 3 ? &depth : nullptr));
    s.n = x.dim(0);
    s.c = c;
    s.m = m;
    s.group = group_;
    const float* bias = nullptr;
    if (ctx.has(2)) {
      const Tensor& b = ctx.in(2);
      if (b.dtype() != TP::FLOAT || b.size() != m) {
        return absl::InvalidArgumentError("B must be FLOAT [M]");
      }
      bias = b.data<float>();
    }
    if (spatial == 3) {
      Tensor y(TP::FLOAT, {s.n, m, depth.od, s.oh, s.ow});
      Conv3D(x.data<float>(), w.data<float>(), bias, y.mutable_data<float>(), s,
             depth, ctx.pool);
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    }
    Tensor y(TP::FLOAT, OutShape(s.n, m, s, spatial));
    Conv2D(x.data<float>(), w.data<float>(), bias, y.mutable_data<float>(), s,
           ctx.pool);
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  ConvWindow window_;
  int64_t group_ = 1;
};

// ------------------------------------------------------------------- pools

class PoolKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<PoolKernel>(new PoolKernel);
    k->max_ = info.op() == "MaxPool";
    QUANTD_RETURN_IF_ERROR(ReadWindow(info, /*dilations=*/k->max_,
                                      /*ceil_mode=*/true, &k->window_));
    if (k->window_.kernel.empty()) return info.Invalid("needs kernel_shape");
    if (k->window_.kernel.size() > 3) {
      return info.UnsupportedAttr("kernel_shape", Join(k->window_.kernel));
    }
    if (k->max_) {
      // storage_order only changes the Indices output, which is refused.
      const int64_t order = info.Int("storage_order", 0);
      if (order != 0 && order != 1) {
        return info.UnsupportedAttr("storage_order", absl::StrCat(order));
      }
      if (info.has_output(1)) {
        return absl::UnimplementedError(absl::StrCat(
            "node '", info.node().name(),
            "' (op MaxPool): the Indices output is not supported"));
      }
    } else {
      const int64_t cip = info.Int("count_include_pad", 0);
      if (cip != 0 && cip != 1) {
        return info.UnsupportedAttr("count_include_pad", absl::StrCat(cip));
      }
      k->count_include_pad_ = cip == 1;
    }
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != TP::FLOAT) {
      return absl::UnimplementedError("only FLOAT pooling is supported");
    }
    QUANTD_RETURN_IF_ERROR(CheckSpatialRank(x.rank()));
    const int spatial = x.rank() - 2;
    std::vector<int64_t> in(x.shape().begin() + 2, x.shape().end());
    DepthWindow depth;
    QUANTD_ASSIGN_OR_RETURN(Conv2DShape s,
                            ResolveWindow(window_, in, window_.kernel,
                                          spatial == 3 ? &depth : nullptr));
    s.n = x.dim(0);
    s.c = s.m = s.group = x.dim(1);
    if (spatial == 3) {
      Tensor y(TP::FLOAT, {s.n, s.c, depth.od, s.oh, s.ow});
      if (max_) {
        MaxPool3D(x.data<float>(), y.mutable_data<float>(), s, depth, ctx.pool);
      } else {
        AveragePool3D(x.data<float>(), y.mutable_data<float>(), s, depth,
                      count_include_pad_, ctx.pool);
      }
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    }
    Tensor y(TP::FLOAT, OutShape(s.n, s.c, s, spatial));
    if (max_) {
      MaxPool2D(x.data<float>(), y.mutable_data<float>(), s, ctx.pool);
    } else {
      AveragePool2D(x.data<float>(), y.mutable_data<float>(), s,
                    count_include_pad_, ctx.pool);
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  ConvWindow window_;
  bool max_ = true;
  bool count_include_pad_ = false;
};

class GlobalAveragePoolKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT}));
    return std::unique_ptr<Kernel>(new GlobalAveragePoolKernel);
  }
  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != TP::FLOAT || x.rank() < 3) {
      return absl::InvalidArgumentError("needs FLOAT [N, C, spatial...]");
    }
    std::vector<int64_t> shape = x.shape();
    const int64_t rows = shape[0] * shape[1];
    const int64_t cols = x.size() / std::max<int64_t>(rows, 1);
    for (size_t i = 2; i < shape.size(); ++i) shape[i] = 1;
    Tensor y(TP::FLOAT, shape);
    const float* in = x.data<float>();
    float* out = y.mutable_data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      out[r] = Eigen::Map<const Eigen::ArrayXf>(in + r * cols, cols).mean();
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }
};

// -------------------------------------------------------------------- Gemm

class GemmKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<GemmKernel>(new GemmKernel);
    k->alpha_ = info.Float("alpha", 1.0f);
    k->beta_ = info.Float("beta", 1.0f);
    k->trans_a_ = info.Int("transA", 0) != 0;
    k->trans_b_ = info.Int("transB", 0) != 0;
    if (info.opset() < 7 && info.HasAttr("broadcast")) info.Int("broadcast", 0);
    absl::Status s;
    for (int i = 0; i < 3 && s.ok(); ++i) s = info.RequireType(i, {TP::FLOAT});
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    if (a.dtype() != TP::FLOAT || b.dtype() != TP::FLOAT || a.rank() != 2 ||
        b.rank() != 2) {
      return absl::InvalidArgumentError("Gemm needs FLOAT matrices");
    }
    const int64_t m = trans_a_ ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b_ ? b.dim(1) : b.dim(0);
    const int64_t n = trans_b_ ? b.dim(0) : b.dim(1);
    if (k != kb) {
      return absl::InvalidArgumentError(
          absl::StrCat("A ", ShapeString(a.shape()), " and B ",
                       ShapeString(b.shape()), " do not multiply"));
    }
    Tensor y(TP::FLOAT, {m, n});
    float beta = 0.0f;
    if (ctx.has(2) && beta_ != 0.0f) {
      const Tensor& c = ctx.in(2);
      const std::vector<int64_t> shapes[2] = {{m, n}, c.shape()};
      absl::StatusOr<std::vector<int64_t>> bs = BroadcastShapes(shapes);
      if (c.dtype() != TP::FLOAT || !bs.ok() || *bs != shapes[0]) {
        return absl::InvalidArgumentError(
            absl::StrCat("C ", ShapeString(c.shape()),
                         " does not broadcast to [", m, ",", n, "]"));
      }
      y = ExpandTo(c, {m, n});
      beta = beta_;
    }
    Gemm(trans_a_, trans_b_, m, n, k, alpha_, a.data<float>(), a.dim(1),
         b.data<float>(), b.dim(1), beta, y.mutable_data<float>(), n, ctx.pool);
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  float alpha_ = 1, beta_ = 1;
  bool trans_a_ = false, trans_b_ = false;
};

// ------------------------------------------------------------------ MatMul

class MatMulKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT}));
    QUANTD_RETURN_IF_ERROR(info.RequireType(1, {TP::FLOAT}));
    return std::unique_ptr<Kernel>(new MatMulKernel);
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    if (a.dtype() != TP::FLOAT || b.dtype() != TP::FLOAT) {
      return absl::UnimplementedError("only FLOAT MatMul is supported");
    }
    if (a.rank() == 0 || b.rank() == 0) {
      return absl::InvalidArgumentError("MatMul inputs must not be scalars");
    }
    // Rank-1 operands become a row (A) or a column (B), dropped again below.
    std::vector<int64_t> as = a.shape(), bs = b.shape();
    if (a.rank() == 1) as.insert(as.begin(), 1);
    if (b.rank() == 1) bs.push_back(1);
    const int64_t m = as[as.size() - 2], k = as.back();
    const int64_t n = bs.back();
    if (bs[bs.size() - 2] != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", ShapeString(a.shape()), " and ",
                       ShapeString(b.shape()), " do not multiply"));
    }
    std::vector<int64_t> abatch(as.begin(), as.end() - 2);
    std::vector<int64_t> bbatch(bs.begin(), bs.end() - 2);
    const std::vector<int64_t> batches[2] = {abatch, bbatch};
    QUANTD_ASSIGN_OR_RETURN(std::vector<int64_t> batch,
                            BroadcastShapes(batches));
    std::vector<int64_t> out_shape = batch;
    if (a.rank() > 1) out_shape.push_back(m);
    if (b.rank() > 1) out_shape.push_back(n);
    Tensor y(TP::FLOAT, out_shape);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y.mutable_data<float>();
    const int64_t nbatch = NumElements(batch);
    if (NumElements(bbatch) == 1 && NumElements(abatch) == nbatch) {
      // B is one matrix (a weight): fold A's batch into its rows, one GEMM.
      Gemm(false, false, nbatch * m, n, k, 1.0f, pa, k, pb, n, 0.0f, py, n,
           ctx.pool);
    } else {
      // The batch walk gives each output matrix its A and B matrices.
      const std::vector<int64_t> shapes[2] = {abatch, bbatch};
      BroadcastWalk walk(batch, shapes);
      std::vector<std::pair<int64_t, int64_t>> offs;
      offs.reserve(nbatch);
      walk.ForEachRun(0, walk.runs(), [&](int64_t, const int64_t* off) {
        for (int64_t i = 0; i < walk.inner(); ++i) {
          offs.emplace_back(off[0] + i * walk.inner_stride(0),
                            off[1] + i * walk.inner_stride(1));
        }
      });
      const bool per_batch = ctx.pool != nullptr && nbatch > 1;
      ParallelRange(per_batch ? ctx.pool : nullptr, nbatch, 1,
                    [&](int64_t b0, int64_t b1) {
                      for (int64_t i = b0; i < b1; ++i) {
                        Gemm(false, false, m, n, k, 1.0f,
                             pa + offs[i].first * m * k, k,
                             pb + offs[i].second * k * n, n, 0.0f,
                             py + i * m * n, n, per_batch ? nullptr : ctx.pool);
                      }
                    });
    }
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }
};

// ------------------------------------------------------ BatchNormalization

class BatchNormKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<BatchNormKernel>(new BatchNormKernel);
    k->epsilon_ = info.Float("epsilon", 1e-5f);
    info.Float("momentum", 0.9f);  // Only used by training.
    if (info.opset() >= 14) {
      const int64_t t = info.Int("training_mode", 0);
      if (t != 0) return info.UnsupportedAttr("training_mode", absl::StrCat(t));
    }
    if (info.opset() < 9) {
      const int64_t sp = info.Int("spatial", 1);
      if (sp != 1) return info.UnsupportedAttr("spatial", absl::StrCat(sp));
    }
    if (info.num_outputs() > 1) {
      return absl::UnimplementedError(absl::StrCat(
          "node '", info.node().name(),
          "' (op BatchNormalization): training outputs are not supported"));
    }
    absl::Status s;
    for (int i = 0; i < 5 && s.ok(); ++i) s = info.RequireType(i, {TP::FLOAT});
    if (!s.ok()) return s;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != TP::FLOAT || x.rank() < 2) {
      return absl::InvalidArgumentError("needs FLOAT [N, C, ...]");
    }
    const int64_t c = x.dim(1);
    for (int i = 1; i < 5; ++i) {
      if (ctx.in(i).dtype() != TP::FLOAT || ctx.in(i).size() != c) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " must be FLOAT [", c, "]"));
      }
    }
    const float* scale = ctx.in(1).data<float>();
    const float* bias = ctx.in(2).data<float>();
    const float* mean = ctx.in(3).data<float>();
    const float* var = ctx.in(4).data<float>();
    const int64_t inner = x.size() / std::max<int64_t>(1, x.dim(0) * c);
    Tensor y(TP::FLOAT, x.shape());
    const float* in = x.data<float>();
    float* out = y.mutable_data<float>();
    ParallelRange(ctx.pool, x.dim(0) * c, 8, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t ch = r % c;
        const float mul = scale[ch] / std::sqrt(var[ch] + epsilon_);
        const float add = bias[ch] - mean[ch] * mul;
        Eigen::Map<Eigen::ArrayXf>(out + r * inner, inner) =
            Eigen::Map<const Eigen::ArrayXf>(in + r * inner, inner) * mul + add;
      }
    });
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  float epsilon_ = 1e-5f;
};

// ----------------------------------------------------------------- Softmax

class SoftmaxKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<SoftmaxKernel>(new SoftmaxKernel);
    // Opset 13 made it a per-axis softmax (default -1); before, the input
    // was flattened to 2-D at `axis` (default 1).
    k->coerce_2d_ = info.opset() < 13;
    k->axis_ = info.Int("axis", k->coerce_2d_ ? 1 : -1);
    QUANTD_RETURN_IF_ERROR(info.RequireType(0, {TP::FLOAT}));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != TP::FLOAT) {
      return absl::UnimplementedError("only FLOAT Softmax is supported");
    }
    QUANTD_ASSIGN_OR_RETURN(int axis,
                            NormalizeAxis(axis_, std::max(x.rank(), 1)));
    const auto& sh = x.shape();
    int64_t outer = 1, len = 1, inner = 1;
    for (int i = 0; i < axis && i < x.rank(); ++i) outer *= sh[i];
    if (coerce_2d_) {
      len = x.size() / std::max<int64_t>(outer, 1);
    } else {
      len = x.rank() == 0 ? 1 : sh[axis];
      for (int i = axis + 1; i < x.rank(); ++i) inner *= sh[i];
    }
    Tensor y(TP::FLOAT, sh);
    // An empty line has no maximum to subtract.
    if (y.size() == 0) {
      (*ctx.outputs)[0] = std::move(y);
      return absl::OkStatus();
    }
    const float* in = x.data<float>();
    float* out = y.mutable_data<float>();
    ParallelRange(ctx.pool, outer, 16, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const float* xi = in + o * len * inner;
        float* yi = out + o * len * inner;
        if (inner == 1) {
          Eigen::Map<const Eigen::ArrayXf> xr(xi, len);
          Eigen::Map<Eigen::ArrayXf> yr(yi, len);
          yr = (xr - xr.maxCoeff()).exp();
          yr /= yr.sum();
          continue;
        }
        for (int64_t j = 0; j < inner; ++j) {
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < len; ++i)
            mx = std::max(mx, xi[i * inner + j]);
          float sum = 0;
          for (int64_t i = 0; i < len; ++i) {
            const float v = std::exp(xi[i * inner + j] - mx);
            yi[i * inner + j] = v;
            sum += v;
          }
          for (int64_t i = 0; i < len; ++i) yi[i * inner + j] /= sum;
        }
      }
    });
    (*ctx.outputs)[0] = std::move(y);
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = -1;
  bool coerce_2d_ = false;
};

// ------------------------------------------------------ LayerNormalization

class LayerNormKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<LayerNormKernel>(new LayerNormKernel);
    k->axis_ = info.Int("axis", -1);
    k->epsilon_ = info.Float("epsilon", 1e-5f);
    const int64_t stash = info.Int("stash_type", 1);
    if (stash != 1)
      return info.UnsupportedAttr("stash_type", absl::StrCat(stash));
    absl::Status s;
    for (int i = 0; i < 3 && s.ok(); ++i) s = info.RequireType(i, {TP::FLOAT});
    if (!s.ok()) return s;
    info.set_output_type(1, TP::FLOAT);
    info.set_output_type(2, TP::FLOAT);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != TP::FLOAT) {
      return absl::UnimplementedError("only FLOAT LayerNormalization");
    }
    QUANTD_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_, x.rank()));
    std::vector<int64_t> norm_shape(x.shape().begin() + axis, x.shape().end());
    const int64_t cols = NumElements(norm_shape);
    const int64_t rows = x.size() / std::max<int64_t>(cols, 1);
    // Scale and B broadcast to the normalized shape; make them flat [cols].
    Tensor scale, bias;
    for (int i = 1; i <= 2; ++i) {
      if (!ctx.has(i)) continue;
      const std::vector<int64_t> shapes[2] = {norm_shape, ctx.in(i).shape()};
      absl::StatusOr<std::vector<int64_t>> b = BroadcastShapes(shapes);
      if (!b.ok() || *b != norm_shape || ctx.in(i).dtype() != TP::FLOAT) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input ", i, " does not broadcast to ", ShapeString(norm_shape)));
      }
      (i == 1 ? scale : bias) = ctx.in(i).size() == cols
                                    ? ctx.in(i)
                                    : ExpandTo(ctx.in(i), norm_shape);
    }
    if (scale.empty()) return absl::InvalidArgumentError("needs Scale");
    std::vector<int64_t> stat_shape = x.shape();
    for (size_t i = axis; i < stat_shape.size(); ++i) stat_shape[i] = 1;
    Tensor y(TP::FLOAT, x.shape());
    Tensor mean_t(TP::FLOAT, stat_shape), inv_t(TP::FLOAT, stat_shape);
    const float* in = x.data<float>();
    float* out = y.mutable_data<float>();
    Eigen::Map<const Eigen::ArrayXf> sc(scale.data<float>(), cols);
    ParallelRange(ctx.pool, rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        Eigen::Map<const Eigen::ArrayXf> xr(in + r * cols, cols);
        Eigen::Map<Eigen::ArrayXf> yr(out + r * cols, cols);
        const float mean = xr.mean();
        const float var = (xr - mean).square().mean();
        const float inv = 1.0f / std::sqrt(var + epsilon_);
        yr = (xr - mean) * inv * sc;
        if (!bias.empty()) {
          yr += Eigen::Map<const Eigen::ArrayXf>(bias.data<float>(), cols);
        }
        mean_t.mutable_data<float>()[r] = mean;
        inv_t.mutable_data<float>()[r] = inv;
      }
    });
    (*ctx.outputs)[0] = std::move(y);
    if (ctx.outputs->size() > 1) (*ctx.outputs)[1] = std::move(mean_t);
    if (ctx.outputs->size() > 2) (*ctx.outputs)[2] = std::move(inv_t);
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = -1;
  float epsilon_ = 1e-5f;
};

}  // namespace

void RegisterNnOps(OpRegistry* r) {
  r->Register("Conv", &ConvKernel::Create);
  r->Register("MaxPool", &PoolKernel::Create);
  r->Register("AveragePool", &PoolKernel::Create);
  r->Register("GlobalAveragePool", &GlobalAveragePoolKernel::Create);
  r->Register("Gemm", &GemmKernel::Create);
  r->Register("MatMul", &MatMulKernel::Create);
  r->Register("BatchNormalization", &BatchNormKernel::Create);
  r->Register("Softmax", &SoftmaxKernel::Create);
  r->Register("LayerNormalization", &LayerNormKernel::Create);
}

}  // namespace quantd::executor
