#include "core/engine/calibration_session.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/checked_count.h"
#include "core/base/onnx_names.h"
#include "core/base/serial_queue.h"
#include "core/base/status_macros.h"
#include "core/executor/cast.h"
#include "core/graph/inference.h"
#include "core/graph/model_io.h"
#include "core/graph/prepare.h"

namespace quantd {
namespace {

// Values a model run may keep alive for observation beyond what the run
// itself holds.
constexpr int64_t kObserveBacklogBytes = int64_t{64} << 20;

std::string Label(const std::string& name) {
  return name.empty() ? std::string("(unnamed input)")
                      : absl::StrCat("'", name, "'");
}

std::string DeclaredShapeString(const DeclaredTensor& d) {
  std::vector<std::string> parts;
  for (int64_t v : d.dims) {
    parts.push_back(v < 0 ? std::string("?") : absl::StrCat(v));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

DeclaredTensor FromType(const onnx::TypeProto& type) {
  DeclaredTensor d;
  if (!type.has_tensor_type()) return d;
  const auto& tt = type.tensor_type();
  d.elem_type = tt.elem_type();
  d.has_shape = tt.has_shape();
  for (const auto& dim : tt.shape().dim()) {
    d.dims.push_back(
        dim.has_dim_value() && dim.dim_value() >= 0 ? dim.dim_value() : -1);
  }
  return d;
}

// Completes `into` with what `more` knows and `into` does not.
void Merge(const DeclaredTensor& more, DeclaredTensor* into) {
  if (into->elem_type == 0) into->elem_type = more.elem_type;
  if (!more.has_shape) return;
  if (!into->has_shape) {
    into->has_shape = true;
    into->dims = more.dims;
    return;
  }
  if (into->dims.size() != more.dims.size()) return;  // Keep the declared.
  for (size_t i = 0; i < into->dims.size(); ++i) {
    if (into->dims[i] < 0) into->dims[i] = more.dims[i];
  }
}

// The model's main graph with shape inference run on it; nullopt when
// inference fails (it throws on models whose declared shapes contradict
// it).
std::optional<onnx::GraphProto> InferredGraph(const onnx::ModelProto& model) {
  onnx::ModelProto copy = graph::InferenceCopy(model);
  if (!graph::InferShapesGuarded(&copy, /*data_propagation=*/false)) {
    return std::nullopt;
  }
  return std::move(*copy.mutable_graph());
}

}  // namespace

ModelTensorTypes ModelTensorTypes::FromModel(const onnx::ModelProto& model) {
  ModelTensorTypes types;
  auto& m = types.types_;
  const onnx::GraphProto& g = model.graph();
  for (const onnx::TensorProto& init : g.initializer()) {
    DeclaredTensor d;
    d.elem_type = init.data_type();
    d.has_shape = true;
    d.dims.assign(init.dims().begin(), init.dims().end());
    m[init.name()] = std::move(d);
  }
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()}) {
    for (const onnx::ValueInfoProto& vi : *list) {
      auto [it, inserted] = m.try_emplace(vi.name(), FromType(vi.type()));
      if (!inserted) Merge(FromType(vi.type()), &it->second);
    }
  }
  if (std::optional<onnx::GraphProto> inferred = InferredGraph(model)) {
    for (const auto* list : {&inferred->value_info(), &inferred->output()}) {
      for (const onnx::ValueInfoProto& vi : *list) {
        auto [it, inserted] = m.try_emplace(vi.name(), FromType(vi.type()));
        if (!inserted) Merge(FromType(vi.type()), &it->second);
      }
    }
  }
  return types;
}

const DeclaredTensor* ModelTensorTypes::Find(const std::string& name) const {
  auto it = types_.find(name);
  return it == types_.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> ModelTensorTypes::Check(const std::string& name,
                                                int32_t dtype,
                                                absl::Span<const int64_t> shape,
                                                int64_t max_elements) const {
  const std::string label = Label(name);
  absl::StatusOr<int64_t> count = CheckedElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", label, ": ", count.status().message()));
  }
  if (const DeclaredTensor* d = Find(name)) {
    const bool widened = dtype == onnx::TensorProto::FLOAT &&
                         d->elem_type == onnx::TensorProto::DOUBLE;
    if (d->elem_type != 0 && dtype != d->elem_type && !widened) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", label, ": the model declares element type ",
                       executor::DataTypeName(d->elem_type), ", the batch has ",
                       executor::DataTypeName(dtype)));
    }
    if (d->has_shape) {
      bool ok = d->dims.size() == shape.size();
      for (size_t i = 0; ok && i < shape.size(); ++i) {
        ok = d->dims[i] < 0 || d->dims[i] == shape[i];
      }
      if (!ok) {
        // One leading axis more than the model declares: a model that takes
        // one sample with no batch axis, sent batched.
        const bool batched_for_unbatched =
            shape.size() == d->dims.size() + 1 &&
            std::equal(d->dims.begin(), d->dims.end(), shape.begin() + 1,
                       [](int64_t want, int64_t got) {
                         return want < 0 || want == got;
                       });
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", label, ": the model's shape is ",
            DeclaredShapeString(*d), " (rank ", d->dims.size(),
            ", ? = any), the batch has ", executor::ShapeString(shape),
            " (rank ", shape.size(), ")",
            batched_for_unbatched
                ? "; the model takes one sample with no batch axis: send "
                  "each sample alone without it (quantctl --unbatched, the "
                  "Python SDK's unbatched=True)"
                : ""));
      }
    }
  }
  if (max_elements > 0 && *count > max_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", label, ": shape ", executor::ShapeString(shape),
                     " has ", *count, " elements, over this server's limit of ",
                     max_elements, " elements per tensor"));
  }
  return *count;
}

absl::StatusOr<executor::Tensor> TensorFromNamed(
    const quantd::v1::NamedTensor& named) {
  const std::string label = Label(named.name());
  const int64_t element_size = executor::ElementSize(named.data_type());
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", label, ": data_type ", named.data_type(),
                     " is not supported for calibration data (FLOAT, DOUBLE, "
                     "INT64, INT32, INT8, UINT8, BOOL are)"));
  }
  std::vector<int64_t> shape(named.shape().begin(), named.shape().end());
  // The client's shape: counted without wrapping, and its byte size
  // compared with the data that came, before anything is allocated or read.
  absl::StatusOr<int64_t> count = CheckedElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", label, ": ", count.status().message()));
  }
  absl::StatusOr<int64_t> expected = CheckedByteSize(*count, element_size);
  if (!expected.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", label, ": shape ", executor::ShapeString(shape),
                     ": ", expected.status().message()));
  }
  if (static_cast<uint64_t>(named.data().size()) !=
      static_cast<uint64_t>(*expected)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", label, ": shape ", executor::ShapeString(shape), " of ",
        executor::DataTypeName(named.data_type()), " needs ", *expected,
        " bytes of data, got ", named.data().size()));
  }
  return executor::Tensor::FromBytes(
      static_cast<executor::DataType>(named.data_type()), std::move(shape),
      named.data());
}

CalibrationSession::CalibrationSession(onnx::ModelProto model,
                                       calibration::ObserverConfig config,
                                       const JobLimits& limits)
    : model_(std::move(model)),
      config_(std::move(config)),
      limits_(limits),
      budget_(limits.max_observer_memory_bytes,
              "observer memory budget of this call") {}

absl::StatusOr<std::unique_ptr<CalibrationSession>> CalibrationSession::Create(
    onnx::ModelProto model, const calibration::ObserverConfig& observer_config,
    const JobLimits& limits) {
  QUANTD_RETURN_IF_ERROR(calibration::ValidateObserverConfig(observer_config));
  std::unique_ptr<CalibrationSession> session(
      new CalibrationSession(std::move(model), observer_config, limits));
  const onnx::GraphProto& g = session->model_.graph();
  for (const auto& i : g.input()) {
    session->input_names_.push_back(i.name());
    session->tensor_names_.insert(i.name());
  }
  for (const auto& i : g.initializer()) session->tensor_names_.insert(i.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (!o.empty()) session->tensor_names_.insert(o);
    }
  }
  session->types_ = ModelTensorTypes::FromModel(session->model_);
  if (!calibration::IsHistogramMethod(observer_config.method)) {
    session->clamps_ = FindClamps(session->model_);
  }
  return session;
}

absl::flat_hash_map<std::string, CalibrationSession::Clamp>
CalibrationSession::FindClamps(const onnx::ModelProto& model) {
  const onnx::GraphProto& g = model.graph();
  const int64_t opset = graph::DefaultOpset(model);
  // One-element constants a Clip bound may name (copied: they are tiny);
  // not graph inputs, which a batch may override.
  absl::flat_hash_set<std::string> inputs;
  for (const auto& i : g.input()) inputs.insert(i.name());
  absl::flat_hash_map<std::string, onnx::TensorProto> constants;
  for (const auto& t : g.initializer()) {
    const bool one = std::all_of(t.dims().begin(), t.dims().end(),
                                 [](int64_t d) { return d == 1; });
    if (one && !inputs.contains(t.name())) constants[t.name()] = t;
  }
  for (const auto& n : g.node()) {
    onnx::TensorProto t;
    if (IsOp(n, "Constant") && graph::ConstantTensor(n, &t)) {
      constants[n.output(0)] = std::move(t);
    }
  }
  auto scalar = [&](const std::string& name) -> std::optional<float> {
    auto it = constants.find(name);
    if (it == constants.end() ||
        it->second.data_type() != onnx::TensorProto::FLOAT) {
      return std::nullopt;
    }
    absl::StatusOr<executor::Tensor> t =
        executor::Tensor::FromProto(it->second);
    if (!t.ok() || t->size() != 1) return std::nullopt;
    return t->data<float>()[0];
  };
  constexpr float kInf = std::numeric_limits<float>::infinity();
  absl::flat_hash_map<std::string, Clamp> clamps;
  for (const auto& n : g.node()) {
    if (n.input_size() < 1 || n.input(0).empty() || n.output_size() != 1 ||
        n.output(0).empty()) {
      continue;
    }
    Clamp c{n.input(0), -kInf, kInf};
    if (IsOp(n, "Relu")) {
      c.lo = 0.0f;
    } else if (IsOp(n, "Clip") && opset < 11) {
      for (const auto& a : n.attribute()) {
        if (a.name() == "min") c.lo = a.f();
        if (a.name() == "max") c.hi = a.f();
      }
    } else if (IsOp(n, "Clip")) {
      bool constant = true;
      for (int i = 1; i < n.input_size() && i < 3; ++i) {
        if (n.input(i).empty()) continue;
        std::optional<float> v = scalar(n.input(i));
        if (!v.has_value()) {
          constant = false;
          break;
        }
        (i == 1 ? c.lo : c.hi) = *v;
      }
      if (!constant) continue;
    } else {
      continue;
    }
    if (!(c.lo <= c.hi)) continue;  // NaN or crossed bounds: observe.
    clamps.emplace(n.output(0), std::move(c));
  }
  return clamps;
}

absl::StatusOr<const executor::Executor*> CalibrationSession::GetExecutor() {
  if (executor_ != nullptr) return executor_.get();
  QUANTD_RETURN_IF_ERROR(executor_status_);
  absl::StatusOr<std::unique_ptr<executor::Executor>> ex =
      executor::Executor::Create(model_);
  if (!ex.ok()) {
    executor_status_ = absl::Status(
        ex.status().code(),
        absl::StrCat("batches of graph inputs need the model to run: ",
                     ex.status().message()));
    return executor_status_;
  }
  executor_ = std::move(*ex);
  // The executor holds its own copy of the weights.
  onnx::ModelProto().Swap(&model_);
  return executor_.get();
}

absl::StatusOr<calibration::Observer*> CalibrationSession::ObserverFor(
    const std::string& name, const executor::Tensor& t, bool* made_now) {
  *made_now = false;
  // Ranges are for float activations; shapes, indices and masks are not
  // quantized.
  if (t.dtype() != onnx::TensorProto::FLOAT || t.size() == 0) return nullptr;
  auto it = observers_.find(name);
  if (it == observers_.end()) {
    QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<calibration::Observer> made,
                            calibration::MakeObserver(config_, &budget_));
    it = observers_.emplace(name, std::move(made)).first;
    *made_now = true;
  }
  return it->second.get();
}

absl::Status CalibrationSession::ObserveWith(calibration::Observer* observer,
                                             const std::string& name,
                                             const executor::Tensor& t,
                                             const ClampOf* clamp,
                                             ThreadPool* pool) const {
  absl::Status s =
      clamp != nullptr
          ? observer->ObserveClamped(*clamp->source, clamp->clamp->lo,
                                     clamp->clamp->hi)
          : observer->Observe(absl::MakeConstSpan(t.data<float>(), t.size()),
                              t.shape(), pool);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("tensor '", name, "': ", s.message()));
  }
  if (sink_) return sink_(name, t);
  return absl::OkStatus();
}

absl::Status CalibrationSession::Observe(const std::string& name,
                                         const executor::Tensor& t) {
  bool made_now = false;
  QUANTD_ASSIGN_OR_RETURN(calibration::Observer * observer,
                          ObserverFor(name, t, &made_now));
  if (observer == nullptr) return absl::OkStatus();
  absl::Status s = ObserveWith(observer, name, t);
  // An observer whose first batch was refused has seen nothing: it must not
  // report its initial range as if it had.
  if (!s.ok() && made_now) observers_.erase(name);
  return s;
}

absl::StatusOr<absl::flat_hash_map<std::string, executor::Tensor>> BatchFeeds(
    const quantd::v1::TensorBatch& batch,
    const std::vector<std::string>& inputs, const ModelTensorTypes* types,
    int64_t max_elements) {
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
    if (feeds.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch has tensor ", name, " twice"));
    }
    if (types != nullptr) {
      const std::vector<int64_t> shape(named.shape().begin(),
                                       named.shape().end());
      QUANTD_RETURN_IF_ERROR(
          types->Check(name, named.data_type(), shape, max_elements));
    }
    absl::StatusOr<executor::Tensor> t = TensorFromNamed(named);
    if (!t.ok()) {
      if (!named.name().empty()) return t.status();
      return absl::Status(t.status().code(),
                          absl::StrCat("for the model's only input '", name,
                                       "': ", t.status().message()));
    }
    feeds.emplace(name, std::move(*t));
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

absl::Status WidenFloatFeeds(
    const executor::Executor& executor,
    absl::flat_hash_map<std::string, executor::Tensor>* feeds) {
  const std::vector<std::string>& names = executor.input_names();
  const std::vector<int32_t>& types = executor.input_types();
  for (size_t i = 0; i < names.size() && i < types.size(); ++i) {
    if (types[i] != onnx::TensorProto::DOUBLE) continue;
    auto it = feeds->find(names[i]);
    if (it == feeds->end() || it->second.dtype() != onnx::TensorProto::FLOAT) {
      continue;
    }
    QUANTD_ASSIGN_OR_RETURN(
        it->second, executor::CastTensor(it->second, onnx::TensorProto::DOUBLE,
                                         /*pool=*/nullptr));
  }
  return absl::OkStatus();
}

absl::Status CalibrationSession::RunModel(const quantd::v1::TensorBatch& batch,
                                          ThreadPool* pool,
                                          const CancellationToken& cancel) {
  QUANTD_ASSIGN_OR_RETURN(auto feeds, BatchFeeds(batch, input_names_, &types_,
                                                 limits_.max_tensor_elements));
  // A model run on nothing produces nothing to observe, and zero-size
  // shapes are where kernels' edge cases live.
  bool any_elements = false;
  std::vector<std::string> shapes;
  for (const auto& [name, t] : feeds) {
    any_elements = any_elements || t.size() > 0;
    shapes.push_back(absl::StrCat(name, " ", executor::ShapeString(t.shape())));
  }
  if (!any_elements) {
    std::sort(shapes.begin(), shapes.end());
    return absl::InvalidArgumentError(
        absl::StrCat("every graph input of the batch has zero elements (",
                     absl::StrJoin(shapes, ", "),
                     "): a zero-size batch cannot calibrate anything"));
  }
  QUANTD_ASSIGN_OR_RETURN(const executor::Executor* executor, GetExecutor());
  QUANTD_RETURN_IF_ERROR(WidenFloatFeeds(*executor, &feeds));
  executor::Executor::RunOptions options;
  options.pool = pool;
  options.cancel = &cancel;
  // Every tensor the run makes is held to the model's bound (an Expand or
  // a Loop's stacked output of a tiny model could ask for any size).
  options.max_tensor_elements = limits_.max_tensor_elements;
  // Values for histogram observers or the sink are observed on an idle
  // worker while the next node runs, in the order the values came (an
  // observer may see a value more than once per batch, in loop bodies).
  // Queued values stay alive until observed: kObserveBacklogBytes bounds
  // that. Extremes-only observers take their values at once (below).
  SerialQueue observing(pool, kObserveBacklogBytes);
  absl::Status observed = absl::OkStatus();
  // Observers made during this run, each with whether a value reached it
  // (written by its observation, read after Finish()).
  std::vector<std::pair<std::string, std::shared_ptr<bool>>> made;
  // Values observed in this run and their observers: a clamp's input must
  // be one of them (an initializer or a folded constant is never produced,
  // and an observer of that name, from a batch of observed activations,
  // holds other extremes).
  absl::flat_hash_map<std::string, const calibration::Observer*> observed_now;
  options.on_tensor = [&](const std::string& name, const executor::Tensor& t) {
    if (!observed.ok()) return;
    bool made_now = false;
    absl::StatusOr<calibration::Observer*> observer =
        ObserverFor(name, t, &made_now);
    if (!observer.ok()) {
      observed = observer.status();
      return;
    }
    if (*observer == nullptr) return;
    observed_now[name] = *observer;
    std::shared_ptr<bool> seen;
    if (made_now) {
      seen = std::make_shared<bool>(false);
      made.emplace_back(name, seen);
    }
    // A Relu/Clip output whose input was observed earlier in this run: its
    // extremes are the input's clamped, and its values need not be read
    // (nor kept alive, unless the sink reads them).
    std::optional<ClampOf> clamp;
    if (auto c = clamps_.find(name); c != clamps_.end()) {
      if (auto o = observed_now.find(c->second.input);
          o != observed_now.end()) {
        clamp = ClampOf{&c->second, o->second};
      }
    }
    // An observer that keeps only extremes folds them right here, over the
    // whole pool, while the value is warm: queued, the fold would hold one
    // worker for most of the run (the queue drains while values keep
    // coming), and each node's parallel region would run on this thread
    // alone. Histogram observers and the sink bin and read on the queue,
    // overlapping the next nodes.
    if (!sink_ &&
        !calibration::IsHistogramMethod((*observer)->config().method)) {
      absl::Status s =
          ObserveWith(*observer, name, t, clamp ? &*clamp : nullptr, pool);
      if (!s.ok()) {
        observed = std::move(s);
      } else if (seen != nullptr) {
        *seen = true;
      }
      return;
    }
    executor::Tensor kept =
        !clamp.has_value() || sink_ ? t : executor::Tensor();
    observing.Add(
        kept.bytes(), [this, observer = *observer, seen, name, kept, clamp] {
          absl::Status s =
              ObserveWith(observer, name, kept, clamp ? &*clamp : nullptr);
          if (s.ok() && seen != nullptr) *seen = true;
          return s;
        });
  };
  absl::Status ran = executor->Run(feeds, options).status();
  absl::Status queued = observing.Finish();
  // An observer that has seen nothing (its first value refused, or dropped
  // after an earlier failure) must not report its initial range as if it
  // had.
  for (const auto& [name, seen] : made) {
    if (!*seen) observers_.erase(name);
  }
  if (ran.code() == absl::StatusCode::kResourceExhausted) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ran.message(),
        " (the server's --max_tensor_elements; a smaller batch makes smaller "
        "tensors)"));
  }
  QUANTD_RETURN_IF_ERROR(ran);
  QUANTD_RETURN_IF_ERROR(queued);
  return observed;
}

absl::Status CalibrationSession::ObserveActivations(
    const quantd::v1::TensorBatch& batch) {
  // Every tensor is checked before any is observed: a bad batch changes no
  // observer.
  std::vector<executor::Tensor> tensors;
  for (const auto& named : batch.tensors()) {
    const std::vector<int64_t> shape(named.shape().begin(),
                                     named.shape().end());
    QUANTD_ASSIGN_OR_RETURN(int64_t count,
                            types_.Check(named.name(), named.data_type(), shape,
                                         limits_.max_tensor_elements));
    if (named.data_type() != onnx::TensorProto::FLOAT) {
      return absl::InvalidArgumentError(absl::StrCat(
          "observed activation '", named.name(), "' has data_type ",
          executor::DataTypeName(named.data_type()),
          "; observed activations must be FLOAT"));
    }
    if (count == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "observed activation '", named.name(), "' has shape ",
          executor::ShapeString(shape),
          " with zero elements: a zero-size batch cannot calibrate anything"));
    }
    QUANTD_ASSIGN_OR_RETURN(executor::Tensor t, TensorFromNamed(named));
    tensors.push_back(std::move(t));
  }
  for (int i = 0; i < batch.tensors_size(); ++i) {
    QUANTD_RETURN_IF_ERROR(Observe(batch.tensors(i).name(), tensors[i]));
  }
  return absl::OkStatus();
}

absl::Status CalibrationSession::AddBatch(const quantd::v1::TensorBatch& batch,
                                          ThreadPool* pool,
                                          const CancellationToken& cancel) {
  if (batch.tensors_size() == 0) {
    return absl::InvalidArgumentError("calibration batch has no tensors");
  }
  const auto& inputs = input_names_;
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
  return ResultOf(nullptr, 1.0);
}

quantd::v1::CalibrationResult CalibrationSession::ResultAs(
    const std::string& candidate, double headroom) const {
  return ResultOf(&candidate, headroom);
}

quantd::v1::CalibrationResult CalibrationSession::ResultOf(
    const std::string* candidate, double headroom) const {
  std::vector<std::string> names;
  names.reserve(observers_.size());
  for (const auto& [name, observer] : observers_) names.push_back(name);
  std::sort(names.begin(), names.end());
  quantd::v1::CalibrationResult result;
  result.set_method(candidate != nullptr && config_.method == "auto"
                        ? *candidate
                        : config_.method);
  result.set_batch_count(batch_count_);
  for (const auto& name : names) {
    const calibration::Observer& o = *observers_.at(name);
    calibration::ToTensorRange(
        candidate != nullptr ? o.ResultAs(*candidate, headroom) : o.Result(),
        name, result.add_ranges());
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
