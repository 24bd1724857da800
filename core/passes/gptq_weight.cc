#include "core/passes/gptq_weight.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/numerics/decibels.h"

namespace quantd::passes {
namespace {

// Where weight element (group g, row r, column c) lives in the tensor, for
// the three layouts GPTQ handles: K x N (MatMul, Gemm), N x K (Gemm
// transB) and M x K... (Conv, K = C/group x kernel, rows grouped).
struct MatrixView {
  int64_t groups = 1, rows = 0, cols = 0;  // rows per group.
  bool k_major = false;                    // [K, N]: element c * N + r.
  int64_t Index(int64_t g, int64_t r, int64_t c) const {
    const int64_t row = g * rows + r;
    return k_major ? c * (groups * rows) + row : row * cols + c;
  }
};

// The weight of `plan` as its consumer multiplies it, and the axes of its
// output channels and inputs in the tensor. A Conv weight [M, C/group,
// kernel...] has `taps` kernel positions per input channel (1 otherwise):
// its column c * taps + t is channel c at tap t.
struct WeightLayout {
  MatrixView view;
  int channel_axis = 0, input_axis = 0;
  int64_t taps = 1;
};
absl::StatusOr<WeightLayout> LayoutOf(const onnx::NodeProto& consumer,
                                      const WeightPlan& plan, int64_t groups) {
  const std::vector<int64_t>& dims = plan.dims;
  WeightLayout out;
  MatrixView& view = out.view;
  if (consumer.op_type() == "Conv" && dims.size() >= 3) {
    view.groups = groups;
    if (view.groups < 1 || dims[0] % view.groups != 0) {
      return absl::InvalidArgumentError("the Conv's groups do not divide M");
    }
    view.rows = dims[0] / view.groups;
    view.cols = plan.num_elements / dims[0];
    out.channel_axis = 0;
    out.input_axis = 1;
    out.taps = dims[1] > 0 ? view.cols / dims[1] : 1;
  } else if (dims.size() == 2) {
    const bool trans_b = consumer.op_type() == "Gemm" &&
                         graph::IntAttribute(consumer, "transB", 0) != 0;
    view.k_major = !trans_b;
    view.rows = trans_b ? dims[0] : dims[1];
    view.cols = trans_b ? dims[1] : dims[0];
    out.channel_axis = trans_b ? 0 : 1;
    out.input_axis = trans_b ? 1 : 0;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPTQ and bias correction take 2-D MatMul / Gemm weights and Conv "
        "weights; '",
        plan.tensor, "' has rank ", dims.size()));
  }
  return out;
}

}  // namespace

GptqInputs GptqInputsFor(const onnx::GraphProto& graph, const WeightPlan& plan,
                         const InputMoments& moments) {
  GptqInputs out;
  for (int c : plan.consumers) {
    const onnx::NodeProto& node = graph.node(c);
    const LayerMoments* m =
        node.output_size() > 0 ? moments.Find(node.output(0)) : nullptr;
    if (m == nullptr) {
      out.why_not = absl::StrCat(
          node.op_type(), " '", node.name(), "' has no input statistics: ",
          node.output_size() > 0 ? moments.WhyNone(node.output(0))
                                 : std::string("it has no output"));
      return out;
    }
    if (out.h.empty()) {
      out.h = m->h;
      out.h_fold = m->h_fold;
      out.k = m->k;
      out.groups = m->groups;
      out.rows = m->rows;
      out.fold_rows = m->fold_rows;
      continue;
    }
    if (m->k != out.k || m->groups != out.groups) {
      out.why_not = absl::StrCat("the readers of '", plan.tensor,
                                 "' multiply it with different K");
      return out;
    }
    for (size_t i = 0; i < out.h.size(); ++i) out.h[i] += m->h[i];
    out.rows += m->rows;
    if (out.h_fold.size() == m->h_fold.size()) {
      for (size_t i = 0; i < out.h_fold.size(); ++i) {
        out.h_fold[i] += m->h_fold[i];
      }
      out.fold_rows += m->fold_rows;
    } else {
      out.h_fold.clear();
      out.fold_rows = 0;
    }
  }
  if (out.h.empty()) out.why_not = "the weight has no readers";
  return out;
}

absl::StatusOr<GptqWeight> GptqQuantizeWeight(
    const onnx::NodeProto& consumer, const WeightPlan& plan,
    absl::Span<const float> values, const GptqInputs& inputs,
    const numerics::QuantSpec& spec, const numerics::GptqOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  QUANTD_ASSIGN_OR_RETURN(const WeightLayout layout,
                          LayoutOf(consumer, plan, inputs.groups));
  const MatrixView& view = layout.view;
  const int channel_axis = layout.channel_axis;
  const int input_axis = layout.input_axis;
  const bool blocked = plan.block_size > 0;
  if ((blocked && plan.axis != input_axis) ||
      (!blocked && plan.axis != channel_axis)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTQ needs per-channel or blocked weights; '",
                     plan.tensor, "' is planned on axis ", plan.axis));
  }
  if (view.cols != inputs.k || inputs.groups != view.groups) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the input statistics of '", plan.tensor, "' have K = ", inputs.k,
        " in ", inputs.groups, " groups; the weight has K = ", view.cols,
        " in ", view.groups));
  }

  // Blocks run along the input channels. A Conv block is block_size
  // channels at one kernel tap, so GPTQ sees the columns (and H) tap by tap
  // (TapMajorColumn), one segment per tap. Otherwise the order is the
  // tensor's.
  const int64_t k = view.cols;
  const int64_t taps = blocked ? layout.taps : 1;
  const int64_t channels = k / taps;
  auto source_column = [&](int64_t col) {
    return TapMajorColumn(col, channels, taps);
  };
  const numerics::GptqBlocking blocking{plan.block_size,
                                        blocked ? channels : 0};
  // H (k x k per group) in GPTQ's column order.
  auto reorder = [&](absl::Span<const float> h, std::vector<float>* out) {
    if (taps == 1) return h;
    out->resize(h.size());
    for (size_t at = 0; at < h.size(); at += k * k) {
      TapMajorGram(h.data() + at, channels, taps, out->data() + at);
    }
    return absl::MakeConstSpan(*out);
  };
  std::vector<float> h_reordered, h_fold_reordered;
  const absl::Span<const float> h_all = reorder(inputs.h, &h_reordered);
  const absl::Span<const float> h_fold_all =
      reorder(inputs.h_fold, &h_fold_reordered);

  GptqWeight out;
  out.input_rows = inputs.rows;
  out.output_sqnr_db = std::numeric_limits<double>::infinity();
  out.rtn_output_sqnr_db = std::numeric_limits<double>::infinity();
  numerics::QuantizedTensor& q = out.q;
  q.spec = spec;
  q.axis = plan.axis;
  q.block_size = plan.block_size;
  q.values.resize(values.size());
  // Blocks per row per tap, and per row.
  const int64_t per_tap =
      blocked ? numerics::BlockCount(channels, plan.block_size) : 1;
  const int64_t blocks = per_tap * taps;
  q.params.resize(view.groups * view.rows * blocks);
  const bool cross_check =
      static_cast<int64_t>(h_fold_all.size()) == view.groups * k * k &&
      inputs.fold_rows > 0 && inputs.fold_rows < inputs.rows;
  double held_signal = 0, held_gptq = 0, held_rtn = 0;
  std::vector<float> w(view.rows * k);
  std::vector<float> other_fold;
  for (int64_t g = 0; g < view.groups; ++g) {
    for (int64_t r = 0; r < view.rows; ++r) {
      for (int64_t c = 0; c < k; ++c)
        w[r * k + c] = values[view.Index(g, r, source_column(c))];
    }
    QUANTD_ASSIGN_OR_RETURN(
        numerics::GptqResult result,
        numerics::GptqQuantize(w, view.rows, k, h_all.subspan(g * k * k, k * k),
                               spec, blocking, options));
    if (cross_check) {
      // Fitted on one fold, judged on the other, both ways.
      const absl::Span<const float> even = h_fold_all.subspan(g * k * k, k * k);
      other_fold.resize(k * k);
      for (int64_t i = 0; i < k * k; ++i) {
        other_fold[i] = h_all[g * k * k + i] - even[i];
      }
      for (int fold = 0; fold < 2; ++fold) {
        const absl::Span<const float> fit =
            fold == 0 ? even : absl::MakeConstSpan(other_fold);
        const absl::Span<const float> judge =
            fold == 0 ? absl::MakeConstSpan(other_fold) : even;
        QUANTD_ASSIGN_OR_RETURN(
            const numerics::GptqResult half,
            numerics::GptqQuantize(w, view.rows, k, fit, spec, blocking,
                                   options, judge));
        held_signal += half.held_out_signal;
        held_gptq += half.held_out_gptq_error;
        held_rtn += half.held_out_rtn_error;
      }
    }
    out.output_sqnr_db = std::min(out.output_sqnr_db, result.output_sqnr_db);
    out.rtn_output_sqnr_db =
        std::min(out.rtn_output_sqnr_db, result.rtn_output_sqnr_db);
    for (int64_t r = 0; r < view.rows; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        q.values[view.Index(g, r, source_column(c))] =
            numerics::ToByte(result.values[r * k + c], spec.is_signed);
      }
      const int64_t channel = g * view.rows + r;
      for (int64_t b = 0; b < blocks; ++b) {
        // The scale tensor: [C] per channel; blocked, the weight's shape
        // with the input axis cut to blocks ([blocks, N] or [N, blocks]
        // for a matrix, [M, blocks, kernel...] for a Conv, whose GPTQ
        // blocks run tap by tap).
        const int64_t tap = b / per_tap, block = b % per_tap;
        const int64_t at = !blocked ? channel
                           : view.k_major
                               ? b * view.rows + r
                               : (channel * per_tap + block) * taps + tap;
        q.params[at] = result.params[r * blocks + b];
      }
    }
  }
  if (cross_check) {
    out.cross_checked = true;
    out.held_out_sqnr_db = numerics::SqnrDb(held_signal, held_gptq);
    out.held_out_rtn_sqnr_db = numerics::SqnrDb(held_signal, held_rtn);
  }
  const std::chrono::duration<double> seconds =
      std::chrono::steady_clock::now() - start;
  out.seconds = seconds.count();
  return out;
}

absl::StatusOr<std::vector<double>> ExpectedOutputShift(
    const onnx::NodeProto& consumer, const WeightPlan& plan,
    absl::Span<const float> error, const LayerMoments& m) {
  QUANTD_ASSIGN_OR_RETURN(const WeightLayout layout,
                          LayoutOf(consumer, plan, m.groups));
  const MatrixView& view = layout.view;
  if (view.cols != m.k || m.rows == 0 ||
      static_cast<int64_t>(error.size()) != plan.num_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("the input statistics of ", consumer.op_type(), " '",
                     consumer.name(), "' do not fit its weight"));
  }
  std::vector<double> shift(view.groups * view.rows, 0.0);
  for (int64_t g = 0; g < view.groups; ++g) {
    const double* sum = m.sum.data() + g * m.k;
    for (int64_t r = 0; r < view.rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < view.cols; ++c) {
        acc += double{error[view.Index(g, r, c)]} * sum[c];
      }
      shift[g * view.rows + r] = acc / static_cast<double>(m.rows);
    }
  }
  return shift;
}

}  // namespace quantd::passes
