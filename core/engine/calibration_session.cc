#include "core/engine/calibration_session.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quantd {

absl::StatusOr<executor::Tensor> TensorFromNamed(
    const quantd::v1::NamedTensor& named) {
  const std::string label =
      named.name().empty() ? std::string("(unnamed input)") : named.name();
  const int64_t element_size = executor::ElementSize(named.data_type());
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", label, ": data_type ", named.data_type(),
                     " is not supported for calibration data (FLOAT, DOUBLE, "
                     "INT64, INT32, INT8, UINT8, BOOL are)"));
  }
  std::vector<int64_t> shape(named.shape().begin(), named.shape().end());
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", label, ": negative dimension in shape ",
                       executor::ShapeString(shape)));
    }
  }
  const int64_t expected = executor::NumElements(shape) * element_size;
  if (static_cast<int64_t>(named.data().size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", label, ": shape ", executor::ShapeString(shape), " of ",
        executor::DataTypeName(named.data_type()), " needs ", expected,
        " bytes of data, got ", named.data().size()));
  }
  executor::Tensor t(static_cast<executor::DataType>(named.data_type()),
                     std::move(shape));
  if (expected > 0) {
    std::memcpy(t.mutable_data<uint8_t>(), named.data().data(), expected);
  }
  return t;
}

absl::StatusOr<std::unique_ptr<CalibrationSession>> CalibrationSession::Create(
    const onnx::ModelProto& model,
    const calibration::ObserverConfig& observer_config) {
  absl::Status s = calibration::ValidateObserverConfig(observer_config);
  if (!s.ok()) return s;
  absl::StatusOr<std::unique_ptr<executor::Executor>> ex =
      executor::Executor::Create(model);
  if (!ex.ok()) return ex.status();
  absl::flat_hash_set<std::string> names;
  const onnx::GraphProto& g = model.graph();
  for (const auto& i : g.input()) names.insert(i.name());
  for (const auto& i : g.initializer()) names.insert(i.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (!o.empty()) names.insert(o);
    }
  }
  return std::unique_ptr<CalibrationSession>(new CalibrationSession(
      std::move(*ex), observer_config, std::move(names)));
}

absl::Status CalibrationSession::Observe(const std::string& name,
                                         const executor::Tensor& t) {
  // Ranges are for float activations; shapes, indices and masks are not
  // quantized.
  if (t.dtype() != onnx::TensorProto::FLOAT || t.size() == 0) {
    return absl::OkStatus();
  }
  auto& observer = observers_[name];
  if (observer == nullptr) {
    absl::StatusOr<std::unique_ptr<calibration::Observer>> made =
        calibration::MakeObserver(config_);
    if (!made.ok()) return made.status();
    observer = std::move(*made);
  }
  absl::Status s = observer->Observe(
      absl::MakeConstSpan(t.data<float>(), t.size()), t.shape());
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("tensor ", name, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::flat_hash_map<std::string, executor::Tensor>> BatchFeeds(
    const quantd::v1::TensorBatch& batch,
    const std::vector<std::string>& inputs) {
  absl::flat_hash_map<std::string, executor::Tensor> feeds;
  for (const auto& named : batch.tensors()) {
    std::string name = named.name();
    if (name.empty()) {
      if (inputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "an unnamed batch tensor means the model's only input, but the "
            "model has ",
            inputs.size(), " inputs (", absl::StrJoin(inputs, ", "),
            "): name each tensor"));
      }
      name = inputs[0];
    }
    absl::StatusOr<executor::Tensor> t = TensorFromNamed(named);
    if (!t.ok()) return t.status();
    if (!feeds.emplace(name, std::move(*t)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch has tensor ", name, " twice"));
    }
  }
  std::vector<std::string> missing;
  for (const auto& i : inputs) {
    if (!feeds.contains(i)) missing.push_back(i);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch lacks graph input(s) ", absl::StrJoin(missing, ", "),
        " (a batch either feeds every graph input or holds "
        "observed activations only)"));
  }
  return feeds;
}

absl::Status CalibrationSession::RunModel(const quantd::v1::TensorBatch& batch,
                                          ThreadPool* pool,
                                          const CancellationToken& cancel) {
  absl::StatusOr<absl::flat_hash_map<std::string, executor::Tensor>> feeds =
      BatchFeeds(batch, executor_->input_names());
  if (!feeds.ok()) return feeds.status();
  executor::Executor::RunOptions options;
  options.pool = pool;
  options.cancel = &cancel;
  absl::Status observed = absl::OkStatus();
  options.on_tensor = [&](const std::string& name, const executor::Tensor& t) {
    if (observed.ok()) observed = Observe(name, t);
  };
  absl::StatusOr<std::vector<executor::Tensor>> out =
      executor_->Run(*feeds, options);
  if (!out.ok()) return out.status();
  return observed;
}

absl::Status CalibrationSession::ObserveActivations(
    const quantd::v1::TensorBatch& batch) {
  for (const auto& named : batch.tensors()) {
    if (named.data_type() != onnx::TensorProto::FLOAT) {
      return absl::InvalidArgumentError(
          absl::StrCat("observed activation ", named.name(), " has data_type ",
                       executor::DataTypeName(named.data_type()),
                       "; observed activations must be FLOAT"));
    }
    absl::StatusOr<executor::Tensor> t = TensorFromNamed(named);
    if (!t.ok()) return t.status();
    absl::Status s = Observe(named.name(), *t);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CalibrationSession::AddBatch(const quantd::v1::TensorBatch& batch,
                                          ThreadPool* pool,
                                          const CancellationToken& cancel) {
  if (batch.tensors_size() == 0) {
    return absl::InvalidArgumentError("calibration batch has no tensors");
  }
  const auto& inputs = executor_->input_names();
  int graph_inputs = 0;
  std::vector<std::string> unknown;
  for (const auto& named : batch.tensors()) {
    const bool is_input =
        named.name().empty() ||
        std::find(inputs.begin(), inputs.end(), named.name()) != inputs.end();
    graph_inputs += is_input;
    if (!is_input && !tensor_names_.contains(named.name())) {
      unknown.push_back(named.name());
    }
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch names tensor(s) the model does not have: ",
                     absl::StrJoin(unknown, ", ")));
  }
  if (graph_inputs > 0 && graph_inputs < batch.tensors_size()) {
    return absl::InvalidArgumentError(
        "batch mixes graph inputs and observed activations; send one kind per "
        "batch");
  }
  absl::Status s = graph_inputs > 0 ? RunModel(batch, pool, cancel)
                                    : ObserveActivations(batch);
  if (s.ok()) ++batch_count_;
  return s;
}

quantd::v1::CalibrationResult CalibrationSession::Result() const {
  std::vector<std::string> names;
  names.reserve(observers_.size());
  for (const auto& [name, observer] : observers_) names.push_back(name);
  std::sort(names.begin(), names.end());
  quantd::v1::CalibrationResult result;
  result.set_method(config_.method);
  result.set_batch_count(batch_count_);
  for (const auto& name : names) {
    calibration::ToTensorRange(observers_.at(name)->Result(), name,
                               result.add_ranges());
  }
  return result;
}

std::vector<std::string> CalibrationSession::DelayedTensors() const {
  std::vector<std::string> delayed;
  for (const auto& [name, observer] : observers_) {
    if (!observer->quantize_active()) delayed.push_back(name);
  }
  std::sort(delayed.begin(), delayed.end());
  return delayed;
}

}  // namespace quantd
