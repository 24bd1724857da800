#include "core/engine/fidelity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/engine/calibration_session.h"
#include "core/numerics/decibels.h"

namespace quantd {

void ErrorSums::Add(absl::Span<const float> ref, absl::Span<const float> q) {
  double signal_sum = 0, noise_sum = 0, max_abs = max_abs_error;
  const size_t n = std::min(ref.size(), q.size());
  for (size_t i = 0; i < n; ++i) {
    const double r = ref[i];
    // An infinity is no signal; kept (the same infinity on both sides: an
    // attention mask that stayed float) it is no error either, and lost it
    // is an infinite one.
    const bool finite = std::isfinite(r);
    if (!finite && ref[i] == q[i]) continue;
    const double d = r - static_cast<double>(q[i]);
    signal_sum += finite ? r * r : 0.0;
    noise_sum += d * d;
    const double a = std::fabs(d);
    // A NaN difference sticks: nothing compares greater than NaN, and
    // std::max would drop it.
    if (std::isnan(a) || a > max_abs) max_abs = a;
  }
  signal += signal_sum;
  noise += noise_sum;
  max_abs_error = max_abs;
  elements += static_cast<int64_t>(n);
}

bool HasClassAxis(absl::Span<const int64_t> shape) {
  if (shape.size() < 2 || shape.back() < 2) return false;
  // Rank 4 and up: channels last ([N, H, W, classes]) only. In an NCHW map
  // ([1, 1, 1024, 1024] masks, feature maps) the last axis is the width, and
  // an argmax along it measures nothing.
  return shape.size() <= 3 || shape.back() < shape[1];
}

namespace {

// First index of the largest non-NaN value; -1 when the row is all NaN.
int64_t ArgMax(const float* row, int64_t n) {
  int64_t best = -1;
  for (int64_t j = 0; j < n; ++j) {
    if (std::isnan(row[j])) continue;
    if (best < 0 || row[j] > row[best]) best = j;
  }
  return best;
}

void VisitComparedNodes(
    const onnx::GraphProto& graph, const onnx::NodeProto* owner,
    const std::function<void(const onnx::NodeProto&, const onnx::NodeProto*)>&
        visit) {
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() == "If" && IsDefaultDomain(node)) {
      for (const onnx::AttributeProto& a : node.attribute()) {
        if (a.has_g()) VisitComparedNodes(a.g(), &node, visit);
      }
    }
    visit(node, owner);
  }
}

}  // namespace

void ForEachComparedNode(
    const onnx::GraphProto& graph,
    const std::function<void(const onnx::NodeProto&, const onnx::NodeProto*)>&
        visit) {
  VisitComparedNodes(graph, nullptr, visit);
}

void Top1Counts::Add(const float* ref, const float* q, int64_t n_rows,
                     int64_t classes) {
  for (int64_t r = 0; r < n_rows; ++r) {
    agree +=
        ArgMax(ref + r * classes, classes) == ArgMax(q + r * classes, classes);
  }
  rows += n_rows;
}

absl::StatusOr<std::unique_ptr<FidelityEvaluator>> FidelityEvaluator::Create(
    const onnx::ModelProto& float_model, int64_t max_tensor_elements) {
  QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<executor::Executor> ex,
                          executor::Executor::Create(float_model));
  std::unique_ptr<FidelityEvaluator> e(new FidelityEvaluator);
  e->max_tensor_elements_ = max_tensor_elements;
  e->float_ = std::move(ex);
  absl::flat_hash_set<std::string> inputs;
  for (const auto& i : float_model.graph().input()) inputs.insert(i.name());
  ForEachComparedNode(float_model.graph(), [&](const onnx::NodeProto& node,
                                               const onnx::NodeProto*) {
    for (const std::string& out : node.output()) {
      if (out.empty() || inputs.contains(out)) continue;
      if (!e->layer_names_.insert(out).second) continue;
      e->layers_.push_back({out, node.name(), node.op_type()});
    }
  });
  e->output_names_ = e->float_->output_names();
  return e;
}

absl::Status FidelityEvaluator::SetQuantizedModel(
    const onnx::ModelProto& quantized_model) {
  QUANTD_ASSIGN_OR_RETURN(quantized_,
                          executor::Executor::Create(quantized_model));
  return absl::OkStatus();
}

bool FidelityEvaluator::FeedsGraphInputs(
    const quantd::v1::TensorBatch& batch) const {
  const std::vector<std::string>& inputs = float_->input_names();
  for (const auto& named : batch.tensors()) {
    if (named.name().empty() ||
        std::find(inputs.begin(), inputs.end(), named.name()) != inputs.end()) {
      return true;
    }
  }
  return false;
}

absl::Status FidelityEvaluator::AddBatch(const quantd::v1::TensorBatch& batch,
                                         ThreadPool* pool,
                                         const CancellationToken& cancel) {
  if (quantized_ == nullptr) {
    return absl::FailedPreconditionError(
        "fidelity: SetQuantizedModel must come before AddBatch");
  }
  // The batch already ran through calibration, which checked it the same way.
  QUANTD_ASSIGN_OR_RETURN(auto feeds, BatchFeeds(batch, float_->input_names()));
  QUANTD_RETURN_IF_ERROR(WidenFloatFeeds(*float_, &feeds));

  executor::Executor::RunOptions options;
  options.pool = pool;
  options.cancel = &cancel;
  options.max_tensor_elements = max_tensor_elements_;
  // The float activations of this batch only: each is dropped as soon as the
  // quantized run has produced its counterpart.
  absl::flat_hash_map<std::string, executor::Tensor> reference;
  options.on_tensor = [&](const std::string& name, const executor::Tensor& t) {
    if (t.dtype() == onnx::TensorProto::FLOAT && layer_names_.contains(name)) {
      reference.insert_or_assign(name, t);  // Shares the buffer, no copy.
    }
  };
  absl::StatusOr<std::vector<executor::Tensor>> ref_out =
      float_->Run(feeds, options);
  if (!ref_out.ok()) {
    return absl::Status(
        ref_out.status().code(),
        absl::StrCat("float model: ", ref_out.status().message()));
  }

  options.on_tensor = [&](const std::string& name, const executor::Tensor& t) {
    auto it = reference.find(name);
    if (it == reference.end()) return;
    const executor::Tensor& r = it->second;
    if (t.dtype() == onnx::TensorProto::FLOAT && t.shape() == r.shape()) {
      layer_sums_[name].Add(absl::MakeConstSpan(r.data<float>(), r.size()),
                            absl::MakeConstSpan(t.data<float>(), t.size()));
    }
    reference.erase(it);
  };
  absl::StatusOr<std::vector<executor::Tensor>> q_out =
      quantized_->Run(feeds, options);
  if (!q_out.ok()) {
    return absl::Status(
        q_out.status().code(),
        absl::StrCat("quantized model: ", q_out.status().message()));
  }

  const std::vector<std::string>& q_names = quantized_->output_names();
  for (size_t i = 0; i < output_names_.size(); ++i) {
    const executor::Tensor& r = (*ref_out)[i];
    if (r.dtype() != onnx::TensorProto::FLOAT) continue;
    const auto q_it =
        std::find(q_names.begin(), q_names.end(), output_names_[i]);
    if (q_it == q_names.end()) continue;
    const executor::Tensor& q = (*q_out)[q_it - q_names.begin()];
    if (q.dtype() != onnx::TensorProto::FLOAT || q.shape() != r.shape()) {
      continue;
    }
    Output& o = outputs_[output_names_[i]];
    o.compared = true;
    o.sums.Add(absl::MakeConstSpan(r.data<float>(), r.size()),
               absl::MakeConstSpan(q.data<float>(), q.size()));
    if (!HasClassAxis(r.shape())) {
      o.has_top1 = false;
    } else if (o.has_top1) {
      const int64_t classes = r.shape().back();
      o.top1.Add(r.data<float>(), q.data<float>(), r.size() / classes, classes);
    }
  }
  ++batch_count_;
  return absl::OkStatus();
}

quantd::v1::FidelityReport FidelityEvaluator::Report() const {
  quantd::v1::FidelityReport report;
  report.set_evaluated(true);
  report.set_batches_evaluated(batch_count_);
  for (const std::string& name : output_names_) {
    auto it = outputs_.find(name);
    if (it == outputs_.end() || !it->second.compared) continue;
    const Output& o = it->second;
    quantd::v1::OutputFidelity* f = report.add_outputs();
    f->set_name(name);
    f->set_sqnr_db(numerics::SqnrDb(o.sums.signal, o.sums.noise));
    f->set_max_abs_error(o.sums.max_abs_error);
    f->set_elements(o.sums.elements);
    f->set_has_top1(o.has_top1 && o.top1.rows > 0);
    if (f->has_top1()) {
      f->set_top1_agreement(static_cast<double>(o.top1.agree) / o.top1.rows);
      f->set_top1_rows(o.top1.rows);
    }
  }
  for (const Layer& layer : layers_) {
    auto it = layer_sums_.find(layer.tensor);
    if (it == layer_sums_.end()) continue;
    quantd::v1::LayerFidelity* f = report.add_layers();
    f->set_tensor_name(layer.tensor);
    f->set_node_name(layer.node);
    f->set_op_type(layer.op);
    f->set_sqnr_db(numerics::SqnrDb(it->second.signal, it->second.noise));
    f->set_max_abs_error(it->second.max_abs_error);
    f->set_elements(it->second.elements);
  }
  return report;
}

}  // namespace quantd
