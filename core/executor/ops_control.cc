// Control flow: If (1, 11, 13, 16), Loop (1, 11, 13, 16), Scan (8 without
// sequence_lens, 9, 11, 16), tensor values only. Each body is a child
// Executor built at Create from the node's graph attribute; it reads outer
// values through the node's implicit inputs (see ScopeValue) and runs with
// the caller's run options, so on_tensor, cancellation and the thread pool
// reach into it. Kernels hold only immutable state (the bodies), so
// concurrent runs share them safely.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/checked_count.h"
#include "core/base/status_macros.h"
#include "core/executor/executor.h"
#include "core/executor/kernel.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

const ExecutorRunOptions& RunOptionsOf(const KernelContext& ctx) {
  static const ExecutorRunOptions* const kDefault = new ExecutorRunOptions;
  return ctx.run_options != nullptr ? *ctx.run_options : *kDefault;
}

absl::Status Prefixed(const absl::Status& s, const std::string& prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

std::string NodeName(const NodeInfo& info) {
  return absl::StrCat("node '", info.label(), "' (op ", info.op(), ")");
}

// Builds the body held by graph attribute `attr`; errors name the node and
// the attribute (the body's own message names the inner node).
absl::StatusOr<std::unique_ptr<Executor>> BuildBody(NodeInfo& info,
                                                    const std::string& attr) {
  const onnx::GraphProto* g = info.GraphAttr(attr);
  if (g == nullptr) {
    return info.Invalid(
        absl::StrCat("graph attribute '", attr, "' is missing"));
  }
  absl::StatusOr<std::unique_ptr<Executor>> body =
      Executor::CreateBody(*g, info.opset(), info.scope());
  if (!body.ok()) {
    return Prefixed(body.status(),
                    absl::StrCat(NodeName(info), ", attribute '", attr,
                                 "' (graph '", g->name(), "'): "));
  }
  return body;
}

// The shape graph output i of `g` declares, when every dim is known: what a
// scan output with zero iterations is shaped like.
std::optional<std::vector<int64_t>> StaticOutputShape(const onnx::GraphProto& g,
                                                      int i) {
  if (i >= g.output_size()) return std::nullopt;
  const onnx::TypeProto& t = g.output(i).type();
  if (!t.has_tensor_type() || !t.tensor_type().has_shape()) {
    return std::nullopt;
  }
  std::vector<int64_t> dims;
  for (const auto& d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return std::nullopt;
    dims.push_back(d.dim_value());
  }
  return dims;
}

// A single-element BOOL / INT64 control value (If / Loop condition, trip
// count); INVALID_ARGUMENT naming `what` otherwise.
absl::StatusOr<bool> BoolScalar(const Tensor& t, const std::string& what) {
  if (t.dtype() != TP::BOOL || t.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a single BOOL element, got ",
                     DataTypeName(t.dtype()), " ", ShapeString(t.shape())));
  }
  return t.data<bool>()[0];
}

absl::StatusOr<int64_t> Int64Scalar(const Tensor& t, const std::string& what) {
  if (t.dtype() != TP::INT64 || t.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a single INT64 element, got ",
                     DataTypeName(t.dtype()), " ", ShapeString(t.shape())));
  }
  return t.data<int64_t>()[0];
}

// Slice `index` of t along `axis`, that axis removed (a copy).
Tensor TakeSlice(const Tensor& t, int axis, int64_t index) {
  std::vector<int64_t> shape = t.shape();
  const int64_t n = shape[axis];
  shape.erase(shape.begin() + axis);
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= t.dim(d);
  const int64_t inner = NumElements(absl::MakeConstSpan(shape).subspan(axis)) *
                        ElementSize(t.dtype());
  Tensor out(t.dtype(), std::move(shape));
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + o * inner, src + (o * n + index) * inner, inner);
  }
  return out;
}

// Stacks same-shaped slices along a new axis `axis`; `reversed` puts slice i
// at position L - 1 - i. `dtype` and `slice_shape` describe the slices (used
// when there are none).
Tensor Stack(const std::vector<Tensor>& slices, int axis, bool reversed,
             DataType dtype, const std::vector<int64_t>& slice_shape) {
  const int64_t len = static_cast<int64_t>(slices.size());
  std::vector<int64_t> shape = slice_shape;
  shape.insert(shape.begin() + axis, len);
  Tensor out(dtype, shape);
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= slice_shape[d];
  const int64_t inner =
      NumElements(absl::MakeConstSpan(slice_shape).subspan(axis)) *
      ElementSize(dtype);
  char* dst = static_cast<char*>(out.raw());
  for (int64_t i = 0; i < len; ++i) {
    const int64_t p = reversed ? len - 1 - i : i;
    const char* src = static_cast<const char*>(slices[i].raw());
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + (o * len + p) * inner, src + o * inner, inner);
    }
  }
  return out;
}

// Per-iteration values of one scan output, checked to keep their type and
// shape (ONNX stacks them into one tensor).
class ScanCollector {
 public:
  explicit ScanCollector(int64_t max_elements = 0)
      : max_elements_(max_elements) {}

  absl::Status Add(Tensor t, int64_t iteration, const std::string& what) {
    if (!slices_.empty() &&
        (t.dtype() != slices_[0].dtype() || t.shape() != slices_[0].shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " changes from ", DataTypeName(slices_[0].dtype()), " ",
          ShapeString(slices_[0].shape()), " at the first iteration to ",
          DataTypeName(t.dtype()), " ", ShapeString(t.shape()),
          " at iteration ", iteration, "; scan outputs must keep their shape"));
    }
    elements_ = SaturatingAdd(elements_, t.size());
    if (max_elements_ > 0 && elements_ > max_elements_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " holds more than ", max_elements_, " elements after ",
          iteration + 1, " iterations (the most a scan output may stack)"));
    }
    slices_.push_back(std::move(t));
    return absl::OkStatus();
  }
  // The stacked output; with no iterations, shaped [0] + the declared shape
  // of the body output (UNIMPLEMENTED when it is not fully declared).
  // `axis` may be negative (counted from the end of the stacked rank).
  absl::StatusOr<Tensor> Finish(
      int64_t axis, bool reversed, int32_t declared_type,
      const std::optional<std::vector<int64_t>>& declared_shape,
      const std::string& what) const {
    DataType dtype;
    std::vector<int64_t> shape;
    if (!slices_.empty()) {
      dtype = slices_[0].dtype();
      shape = slices_[0].shape();
    } else if (declared_type != 0 && declared_shape.has_value()) {
      dtype = static_cast<DataType>(declared_type);
      shape = *declared_shape;
    } else {
      return absl::UnimplementedError(absl::StrCat(
          what,
          " has no iterations and its body output does not declare "
          "its type and full shape"));
    }
    absl::StatusOr<int> a =
        NormalizeAxis(axis, static_cast<int>(shape.size()) + 1);
    if (!a.ok()) return Prefixed(a.status(), what + ": ");
    return Stack(slices_, *a, reversed, dtype, shape);
  }

 private:
  std::vector<Tensor> slices_;
  int64_t max_elements_ = 0;
  int64_t elements_ = 0;
};

// ---------------------------------------------------------------------- If

class IfKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    if (info.input_type(0) != 0 && info.input_type(0) != TP::BOOL) {
      return info.Invalid(absl::StrCat("the condition is ",
                                       DataTypeName(info.input_type(0)),
                                       ", it must be BOOL"));
    }
    auto k = std::make_unique<IfKernel>();
    k->num_inputs_ = info.num_inputs();
    for (const char* attr : {"then_branch", "else_branch"}) {
      QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<Executor> b,
                              BuildBody(info, attr));
      if (!b->input_names().empty()) {
        return info.Invalid(absl::StrCat(attr, " has ", b->input_names().size(),
                                         " inputs; If branches take none"));
      }
      if (static_cast<int>(b->output_names().size()) != info.num_outputs()) {
        return info.Invalid(
            absl::StrCat(attr, " has ", b->output_names().size(),
                         " outputs; the node has ", info.num_outputs()));
      }
      (attr[0] == 't' ? k->then_ : k->else_) = std::move(b);
    }
    for (int i = 0; i < info.num_outputs(); ++i) {
      const int32_t t = k->then_->output_types()[i];
      const int32_t e = k->else_->output_types()[i];
      if (t != 0 && e != 0 && t != e) {
        return info.Invalid(absl::StrCat("output ", i, " is ", DataTypeName(t),
                                         " in then_branch but ",
                                         DataTypeName(e), " in else_branch"));
      }
      info.set_output_type(i, t != 0 ? t : e);
    }
    return MakeKernel(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    QUANTD_ASSIGN_OR_RETURN(bool cond, BoolScalar(ctx.in(0), "the condition"));
    const Executor& body = cond ? *then_ : *else_;
    absl::StatusOr<std::vector<Tensor>> out =
        body.RunBody({}, ctx.inputs.subspan(num_inputs_), RunOptionsOf(ctx));
    if (!out.ok()) {
      return Prefixed(out.status(), cond ? "then_branch: " : "else_branch: ");
    }
    for (size_t i = 0; i < out->size(); ++i) {
      (*ctx.outputs)[i] = std::move((*out)[i]);
    }
    return absl::OkStatus();
  }

 private:
  int num_inputs_ = 0;
  std::unique_ptr<Executor> then_, else_;
};

// -------------------------------------------------------------------- Loop

class LoopKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::make_unique<LoopKernel>();
    k->num_inputs_ = info.num_inputs();
    k->num_carried_ = info.num_inputs() - 2;
    if (k->num_carried_ < 0) {
      return info.Invalid(
          "Loop takes the trip count M and the condition (either may be "
          "empty), then the loop-carried values");
    }
    const int n = k->num_carried_;
    for (int i = 0; i < 2; ++i) {
      const int32_t want = i == 0 ? TP::INT64 : TP::BOOL;
      if (info.has_input(i) && info.input_type(i) != 0 &&
          info.input_type(i) != want) {
        return info.Invalid(
            absl::StrCat(i == 0 ? "the trip count M" : "the condition", " is ",
                         DataTypeName(info.input_type(i)), ", it must be ",
                         DataTypeName(want)));
      }
    }
    QUANTD_ASSIGN_OR_RETURN(k->body_, BuildBody(info, "body"));
    const Executor& body = *k->body_;
    const int body_in = static_cast<int>(body.input_names().size());
    const int body_out = static_cast<int>(body.output_names().size());
    if (body_in != 2 + n) {
      return info.Invalid(
          absl::StrCat("the body takes ", body_in, " inputs; with ", n,
                       " loop-carried values it must take ", 2 + n,
                       " (iteration number, condition, the values)"));
    }
    if (body_out < 1 + n) {
      return info.Invalid(
          absl::StrCat("the body returns ", body_out, " outputs; with ", n,
                       " loop-carried values it must return at least ", 1 + n,
                       " (condition, the values, then scan outputs)"));
    }
    k->num_scan_ = body_out - 1 - n;
    if (info.num_outputs() != n + k->num_scan_) {
      return info.Invalid(absl::StrCat(
          "the node has ", info.num_outputs(), " outputs; its body makes ", n,
          " loop-carried values and ", k->num_scan_, " scan outputs"));
    }
    auto check = [&](int32_t got, int32_t want,
                     const std::string& what) -> absl::Status {
      if (got == 0 || want == 0 || got == want) return absl::OkStatus();
      return info.Invalid(absl::StrCat(what, " is ", DataTypeName(got),
                                       ", expected ", DataTypeName(want)));
    };
    absl::Status s = check(body.input_types()[0], TP::INT64,
                           "body input 0 (iteration number)");
    if (s.ok()) {
      s = check(body.input_types()[1], TP::BOOL, "body input 1 (condition)");
    }
    if (s.ok()) {
      s = check(body.output_types()[0], TP::BOOL, "body output 0 (condition)");
    }
    if (!s.ok()) return s;
    for (int j = 0; j < n; ++j) {
      const int32_t in = info.input_type(2 + j);
      const int32_t bin = body.input_types()[2 + j];
      const int32_t bout = body.output_types()[1 + j];
      const std::string what = absl::StrCat("loop-carried value ", j);
      s = check(bin, in, what + " as body input");
      if (s.ok())
        s = check(bout, bin != 0 ? bin : in, what + " as body output");
      if (!s.ok()) return s;
      info.set_output_type(j, bout != 0 ? bout : (bin != 0 ? bin : in));
    }
    const onnx::GraphProto& g = *info.GraphAttr("body");
    for (int k2 = 0; k2 < k->num_scan_; ++k2) {
      info.set_output_type(n + k2, body.output_types()[1 + n + k2]);
      k->scan_types_.push_back(body.output_types()[1 + n + k2]);
      k->scan_shapes_.push_back(StaticOutputShape(g, 1 + n + k2));
    }
    return MakeKernel(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const ExecutorRunOptions& options = RunOptionsOf(ctx);
    bool bounded = false;
    int64_t trip = 0;
    if (ctx.has(0)) {
      QUANTD_ASSIGN_OR_RETURN(int64_t m,
                              Int64Scalar(ctx.in(0), "the trip count M"));
      bounded = true;
      trip = m;
    }
    bool cond = true;
    if (ctx.has(1)) {
      QUANTD_ASSIGN_OR_RETURN(cond, BoolScalar(ctx.in(1), "the condition"));
    }
    const int n = num_carried_;
    std::vector<Tensor> carried(n);
    for (int j = 0; j < n; ++j) {
      if (!ctx.has(2 + j)) {
        return absl::InvalidArgumentError(
            absl::StrCat("loop-carried value ", j, " has no initial value"));
      }
      carried[j] = ctx.in(2 + j);
    }
    const absl::Span<const Tensor* const> implicit =
        ctx.inputs.subspan(num_inputs_);
    std::vector<ScanCollector> scans(
        num_scan_, ScanCollector(options.max_tensor_elements));
    std::vector<const Tensor*> in(2 + n);
    for (int64_t i = 0; (!bounded || i < trip) && cond; ++i) {
      // The body checks between its nodes; this covers empty bodies too.
      if (options.cancel != nullptr) {
        QUANTD_RETURN_IF_ERROR(options.cancel->Check("Loop"));
      }
      const Tensor iter = Tensor::Scalar<int64_t>(i);
      const Tensor cond_in = Tensor::Scalar<bool>(cond);
      in[0] = &iter;
      in[1] = &cond_in;
      for (int j = 0; j < n; ++j) in[2 + j] = &carried[j];
      absl::StatusOr<std::vector<Tensor>> out =
          body_->RunBody(in, implicit, options);
      if (!out.ok()) {
        return Prefixed(out.status(),
                        absl::StrCat("body, iteration ", i, ": "));
      }
      QUANTD_ASSIGN_OR_RETURN(
          cond,
          BoolScalar(
              (*out)[0],
              absl::StrCat("the body's condition output (iteration ", i, ")")));
      for (int j = 0; j < n; ++j) carried[j] = std::move((*out)[1 + j]);
      for (int k = 0; k < num_scan_; ++k) {
        QUANTD_RETURN_IF_ERROR(scans[k].Add(std::move((*out)[1 + n + k]), i,
                                            absl::StrCat("scan output ", k)));
      }
    }
    for (int j = 0; j < n; ++j) (*ctx.outputs)[j] = std::move(carried[j]);
    for (int k = 0; k < num_scan_; ++k) {
      QUANTD_ASSIGN_OR_RETURN(
          (*ctx.outputs)[n + k],
          scans[k].Finish(0, false, scan_types_[k], scan_shapes_[k],
                          absl::StrCat("scan output ", k)));
    }
    return absl::OkStatus();
  }

 private:
  int num_inputs_ = 0;
  int num_carried_ = 0;
  int num_scan_ = 0;
  std::vector<int32_t> scan_types_;
  std::vector<std::optional<std::vector<int64_t>>> scan_shapes_;
  std::unique_ptr<Executor> body_;
};

// -------------------------------------------------------------------- Scan

class ScanKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::make_unique<ScanKernel>();
    k->num_inputs_ = info.num_inputs();
    // Scan-8 has a leading sequence_lens input and a batch axis 0 on every
    // input and output.
    if (info.opset() < 8) {
      return info.Invalid(
          absl::StrCat("Scan exists from opset 8; the model "
                       "imports opset ",
                       info.opset()));
    }
    k->batched_ = info.opset() < 9;
    const int first = k->batched_ ? 1 : 0;
    if (k->batched_ && info.has_input(0)) {
      return absl::UnimplementedError(absl::StrCat(
          NodeName(info),
          ": Scan-8 with sequence_lens (per-batch lengths) is not supported "
          "by the executor"));
    }
    const int64_t m = info.Int("num_scan_inputs", -1);
    if (m < 1 || m > info.num_inputs() - first) {
      return info.Invalid(
          absl::StrCat("num_scan_inputs is ", m, "; it must be in [1, ",
                       info.num_inputs() - first, "] (the number of inputs)"));
    }
    k->num_scan_in_ = static_cast<int>(m);
    k->num_state_ = info.num_inputs() - first - k->num_scan_in_;
    QUANTD_ASSIGN_OR_RETURN(k->body_, BuildBody(info, "body"));
    const Executor& body = *k->body_;
    const int n = k->num_state_;
    const int body_in = static_cast<int>(body.input_names().size());
    const int body_out = static_cast<int>(body.output_names().size());
    if (body_in != n + k->num_scan_in_) {
      return info.Invalid(
          absl::StrCat("the body takes ", body_in, " inputs; the node has ", n,
                       " state values and ", k->num_scan_in_, " scan inputs"));
    }
    if (body_out < n) {
      return info.Invalid(absl::StrCat("the body returns ", body_out,
                                       " outputs; the node has ", n,
                                       " state values"));
    }
    k->num_scan_out_ = body_out - n;
    if (info.num_outputs() != body_out) {
      return info.Invalid(absl::StrCat(
          "the node has ", info.num_outputs(), " outputs; its body makes ", n,
          " state values and ", k->num_scan_out_, " scan outputs"));
    }
    auto flags = [&](const std::string& attr, int count,
                     std::vector<int64_t>* out,
                     bool directions) -> absl::Status {
      *out = info.Ints(attr, std::vector<int64_t>(count, 0));
      if (static_cast<int>(out->size()) != count) {
        return info.Invalid(absl::StrCat(attr, " has ", out->size(),
                                         " entries, expected ", count));
      }
      for (int64_t v : *out) {
        if (directions && v != 0 && v != 1) {
          return info.Invalid(
              absl::StrCat(attr, " holds ", v, "; directions are 0 or 1"));
        }
      }
      return absl::OkStatus();
    };
    absl::Status s;
    if (k->batched_) {
      s = flags("directions", k->num_scan_in_, &k->in_dirs_, true);
      k->in_axes_.assign(k->num_scan_in_, 0);
      k->out_axes_.assign(k->num_scan_out_, 0);
      k->out_dirs_.assign(k->num_scan_out_, 0);
    } else {
      s = flags("scan_input_axes", k->num_scan_in_, &k->in_axes_, false);
      if (s.ok()) {
        s = flags("scan_input_directions", k->num_scan_in_, &k->in_dirs_, true);
      }
      if (s.ok()) {
        s = flags("scan_output_axes", k->num_scan_out_, &k->out_axes_, false);
      }
      if (s.ok()) {
        s = flags("scan_output_directions", k->num_scan_out_, &k->out_dirs_,
                  true);
      }
    }
    if (!s.ok()) return s;
    for (int j = 0; j < n; ++j) {
      const int32_t in = info.input_type(first + j);
      const int32_t bin = body.input_types()[j];
      const int32_t bout = body.output_types()[j];
      if ((in != 0 && bin != 0 && in != bin) ||
          (bout != 0 && bin != 0 && bout != bin) ||
          (bout != 0 && in != 0 && bout != in)) {
        return info.Invalid(absl::StrCat(
            "state value ", j, " is ", DataTypeName(in), " at the node, ",
            DataTypeName(bin), " as body input and ", DataTypeName(bout),
            " as body output"));
      }
      info.set_output_type(j, bout != 0 ? bout : (bin != 0 ? bin : in));
    }
    const onnx::GraphProto& g = *info.GraphAttr("body");
    for (int q = 0; q < k->num_scan_out_; ++q) {
      info.set_output_type(n + q, body.output_types()[n + q]);
      k->scan_types_.push_back(body.output_types()[n + q]);
      k->scan_shapes_.push_back(StaticOutputShape(g, n + q));
    }
    return MakeKernel(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    const int first = batched_ ? 1 : 0;
    const int n = num_state_;
    std::vector<Tensor> states(n), scan_in(num_scan_in_);
    for (int j = 0; j < n; ++j) {
      if (!ctx.has(first + j)) {
        return absl::InvalidArgumentError(
            absl::StrCat("state value ", j, " has no initial value"));
      }
      states[j] = ctx.in(first + j);
    }
    for (int j = 0; j < num_scan_in_; ++j) {
      if (!ctx.has(first + n + j)) {
        return absl::InvalidArgumentError(
            absl::StrCat("scan input ", j, " has no value"));
      }
      scan_in[j] = ctx.in(first + n + j);
    }
    const absl::Span<const Tensor* const> implicit =
        ctx.inputs.subspan(num_inputs_);
    std::vector<Tensor> outs;
    if (!batched_) {
      QUANTD_RETURN_IF_ERROR(
          RunSequence(states, scan_in, implicit, ctx, &outs));
    } else {
      // Scan-8: every input and output has a batch axis 0; each batch entry
      // is one Scan-9 style sequence (its axis 0 = the old axis 1).
      int64_t batch = -1;
      std::vector<const Tensor*> all;
      for (const Tensor& t : states) all.push_back(&t);
      for (const Tensor& t : scan_in) all.push_back(&t);
      for (size_t i = 0; i < all.size(); ++i) {
        const Tensor& t = *all[i];
        const int64_t b = t.rank() > 0 ? t.dim(0) : -1;
        if (b < 0 || (batch >= 0 && b != batch)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input ", first + i, " has shape ", ShapeString(t.shape()),
              "; Scan-8 inputs share a leading batch axis"));
        }
        batch = b;
      }
      std::vector<std::vector<Tensor>> per_out(n + num_scan_out_);
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<Tensor> st(n), sc(num_scan_in_), o;
        for (int j = 0; j < n; ++j) st[j] = TakeSlice(states[j], 0, b);
        for (int j = 0; j < num_scan_in_; ++j) {
          sc[j] = TakeSlice(scan_in[j], 0, b);
        }
        absl::Status s = RunSequence(st, sc, implicit, ctx, &o);
        if (!s.ok()) return Prefixed(s, absl::StrCat("batch ", b, ": "));
        for (size_t i = 0; i < o.size(); ++i) {
          if (b > 0 && o[i].shape() != per_out[i][0].shape()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "output ", i, " has shape ", ShapeString(o[i].shape()),
                " for batch ", b, " but ", ShapeString(per_out[i][0].shape()),
                " for batch 0"));
          }
          per_out[i].push_back(std::move(o[i]));
        }
      }
      if (batch == 0) {
        return absl::UnimplementedError("Scan-8 with an empty batch");
      }
      for (auto& slices : per_out) {
        outs.push_back(
            Stack(slices, 0, false, slices[0].dtype(), slices[0].shape()));
      }
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      (*ctx.outputs)[i] = std::move(outs[i]);
    }
    return absl::OkStatus();
  }

 private:
  // One Scan-9 style run: iterates over the scan inputs' sequence axis.
  absl::Status RunSequence(std::vector<Tensor> states,
                           const std::vector<Tensor>& scan_in,
                           absl::Span<const Tensor* const> implicit,
                           const KernelContext& ctx,
                           std::vector<Tensor>* outs) const {
    const ExecutorRunOptions& options = RunOptionsOf(ctx);
    const int n = num_state_;
    std::vector<int> axes(num_scan_in_);
    int64_t len = -1;
    for (int j = 0; j < num_scan_in_; ++j) {
      absl::StatusOr<int> a = NormalizeAxis(in_axes_[j], scan_in[j].rank());
      if (!a.ok()) {
        return Prefixed(a.status(), absl::StrCat("scan input ", j, ": "));
      }
      axes[j] = *a;
      const int64_t l = scan_in[j].dim(*a);
      if (len >= 0 && l != len) {
        return absl::InvalidArgumentError(
            absl::StrCat("scan input ", j, " has ", l, " steps along axis ", *a,
                         ", scan input 0 has ", len));
      }
      len = l;
    }
    std::vector<ScanCollector> scans(
        num_scan_out_, ScanCollector(options.max_tensor_elements));
    std::vector<Tensor> slices(num_scan_in_);
    std::vector<const Tensor*> in(n + num_scan_in_);
    for (int64_t t = 0; t < len; ++t) {
      if (options.cancel != nullptr) {
        QUANTD_RETURN_IF_ERROR(options.cancel->Check("Scan"));
      }
      for (int j = 0; j < num_scan_in_; ++j) {
        slices[j] =
            TakeSlice(scan_in[j], axes[j], in_dirs_[j] == 1 ? len - 1 - t : t);
      }
      for (int j = 0; j < n; ++j) in[j] = &states[j];
      for (int j = 0; j < num_scan_in_; ++j) in[n + j] = &slices[j];
      absl::StatusOr<std::vector<Tensor>> out =
          body_->RunBody(in, implicit, options);
      if (!out.ok()) {
        return Prefixed(out.status(),
                        absl::StrCat("body, iteration ", t, ": "));
      }
      for (int j = 0; j < n; ++j) states[j] = std::move((*out)[j]);
      for (int q = 0; q < num_scan_out_; ++q) {
        QUANTD_RETURN_IF_ERROR(scans[q].Add(std::move((*out)[n + q]), t,
                                            absl::StrCat("scan output ", q)));
      }
    }
    outs->clear();
    for (int j = 0; j < n; ++j) outs->push_back(std::move(states[j]));
    for (int q = 0; q < num_scan_out_; ++q) {
      QUANTD_ASSIGN_OR_RETURN(
          Tensor o,
          scans[q].Finish(out_axes_[q], out_dirs_[q] == 1, scan_types_[q],
                          scan_shapes_[q], absl::StrCat("scan output ", q)));
      outs->push_back(std::move(o));
    }
    return absl::OkStatus();
  }

  int num_inputs_ = 0;
  bool batched_ = false;
  int num_state_ = 0;
  int num_scan_in_ = 0;
  int num_scan_out_ = 0;
  std::vector<int64_t> in_axes_, in_dirs_, out_axes_, out_dirs_;
  std::vector<int32_t> scan_types_;
  std::vector<std::optional<std::vector<int64_t>>> scan_shapes_;
  std::unique_ptr<Executor> body_;
};

}  // namespace

void RegisterControlOps(OpRegistry* r) {
  r->Register("If", &IfKernel::Create);
  r->Register("Loop", &LoopKernel::Create);
  r->Register("Scan", &ScanKernel::Create);
}

}  // namespace quantd::executor
