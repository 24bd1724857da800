// Calibration of one model: every batch either runs the model (the batch
// holds its graph inputs) and feeds each float tensor it produces to that
// tensor's observer, or (for a training cluster that already ran the model)
// holds observed activations by name that go to their observers directly.
#ifndef QUANTD_CORE_ENGINE_CALIBRATION_SESSION_H_
#define QUANTD_CORE_ENGINE_CALIBRATION_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/base/cancellation.h"
#include "core/base/thread_pool.h"
#include "core/calibration/memory_budget.h"
#include "core/calibration/observers.h"
#include "core/engine/batch_queue.h"
#include "core/engine/limits.h"
#include "core/executor/executor.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd {

// What the model says about one of its main-graph values.
struct DeclaredTensor {
  int32_t elem_type = 0;  // 0: unknown.
  bool has_shape = false;
  std::vector<int64_t> dims;  // -1 for a symbolic or unknown dim.
};

// The declared types of a model's main-graph values (graph inputs and
// outputs, value_info, initializers), completed by ONNX shape inference
// where it knows more: what a calibration batch is checked against.
class ModelTensorTypes {
 public:
  ModelTensorTypes() = default;
  // Shape inference runs on a copy without the large initializers' data
  // (shape computations only read small ones); when it fails, the declared
  // types alone are used.
  static ModelTensorTypes FromModel(const onnx::ModelProto& model);

  // Null when the model says nothing about `name`.
  const DeclaredTensor* Find(const std::string& name) const;

  // Checks a batch tensor `name` of `dtype` and `shape` before any of its
  // data is read: INVALID_ARGUMENT naming the tensor, the expected and the
  // got for a negative or overflowing shape, an element type, rank or
  // known dim that differs from the model's, or (max_elements > 0) more
  // elements than that. FLOAT is accepted where the model declares DOUBLE
  // (the SDKs send floating data as float32; WidenFloatFeeds widens it
  // exactly). Returns the element count.
  absl::StatusOr<int64_t> Check(const std::string& name, int32_t dtype,
                                absl::Span<const int64_t> shape,
                                int64_t max_elements) const;

 private:
  absl::flat_hash_map<std::string, DeclaredTensor> types_;
};

class CalibrationSession {
 public:
  // Checks the observer config (INVALID_ARGUMENT) and notes the model's
  // value names and types. The executor is built only when a batch of graph
  // inputs needs the model to run (UNIMPLEMENTED then, naming any op or
  // attribute it cannot run): batches of observed activations never need
  // it. Until then the session keeps `model` (move it in to avoid a copy).
  // `limits`: max_tensor_elements bounds each batch tensor,
  // max_observer_memory_bytes the observers' state.
  static absl::StatusOr<std::unique_ptr<CalibrationSession>> Create(
      onnx::ModelProto model,
      const calibration::ObserverConfig& observer_config,
      const JobLimits& limits = JobLimits());

  // Observes one batch. INVALID_ARGUMENT naming the tensors for: names the
  // model does not have, a batch mixing graph inputs and activations, missing
  // graph inputs, shapes that are negative or overflow, data sizes that do
  // not match dtype and shape, dtypes, ranks or known dims that differ from
  // the model's (declared or inferred), more elements than
  // limits.max_tensor_elements, non-float observed activations, and
  // zero-size tensors (nothing to calibrate with), all checked before any
  // data is read. RESOURCE_EXHAUSTED when the observers' state would go over
  // limits.max_observer_memory_bytes. Batches are observed in call order.
  absl::Status AddBatch(const quantd::v1::TensorBatch& batch, ThreadPool* pool,
                        const CancellationToken& cancel);

  int64_t batch_count() const { return batch_count_; }

  // The ranges so far, one per observed tensor, sorted by name.
  quantd::v1::CalibrationResult Result() const;
  // Observer "auto": the ranges `candidate` (calibration::kAutoCandidates)
  // reads from the same histograms, method set to it. Otherwise Result().
  // Either way widened by `headroom` on top of the config's.
  quantd::v1::CalibrationResult ResultAs(const std::string& candidate,
                                         double headroom = 1.0) const;

  // Tensors whose quant_delay has not elapsed yet (tf.contrib would still
  // pass them through unquantized), sorted.
  std::vector<std::string> DelayedTensors() const;

  // Also hands every float value a batch produces (or holds, for batches of
  // observed activations) to `sink`, after its observer; an error from the
  // sink fails the batch. Set before the first batch.
  using TensorSink =
      std::function<absl::Status(const std::string&, const executor::Tensor&)>;
  void set_tensor_sink(TensorSink sink) { sink_ = std::move(sink); }

  // A Relu or Clip output of the main graph: its value is `input`'s clamped
  // to [lo, hi], and so are its extremes (Observer::ObserveClamped).
  struct Clamp {
    std::string input;
    float lo;
    float hi;
  };
  // Output name -> its clamp, for the Relu nodes and the Clip nodes with
  // constant bounds of the main graph. Sessions whose observers keep only
  // extremes observe those outputs through their input's extremes.
  static absl::flat_hash_map<std::string, Clamp> FindClamps(
      const onnx::ModelProto& model);

  // Whether the executor has been built (a batch of graph inputs came).
  bool has_executor() const { return executor_ != nullptr; }

 private:
  CalibrationSession(onnx::ModelProto model, calibration::ObserverConfig config,
                     const JobLimits& limits);

  quantd::v1::CalibrationResult ResultOf(const std::string* candidate,
                                         double headroom) const;
  absl::Status Observe(const std::string& name, const executor::Tensor& t);
  // The observer of float tensor `name`, made on first sight (*made_now
  // then true); null for values that are not observed (not FLOAT, empty).
  absl::StatusOr<calibration::Observer*> ObserverFor(const std::string& name,
                                                     const executor::Tensor& t,
                                                     bool* made_now);
  // A clamp whose input `source` observed in the current run.
  struct ClampOf {
    const Clamp* clamp;
    const calibration::Observer* source;
  };
  // Feeds `t` (or, given `clamp`, the source's extremes clamped) to
  // `observer`, then `t` to the sink; errors name the tensor. `pool` folds
  // large values' extremes in parallel (Observer::Observe).
  absl::Status ObserveWith(calibration::Observer* observer,
                           const std::string& name, const executor::Tensor& t,
                           const ClampOf* clamp = nullptr,
                           ThreadPool* pool = nullptr) const;

  // The executor, built on first use from model_ (then freed).
  absl::StatusOr<const executor::Executor*> GetExecutor();
  absl::Status RunModel(const quantd::v1::TensorBatch& batch, ThreadPool* pool,
                        const CancellationToken& cancel);
  absl::Status ObserveActivations(const quantd::v1::TensorBatch& batch);

  // Until the executor is built; empty afterwards.
  onnx::ModelProto model_;
  std::unique_ptr<executor::Executor> executor_;
  absl::Status executor_status_;  // Why the executor could not be built.
  const calibration::ObserverConfig config_;
  const JobLimits limits_;
  // Graph inputs of the main graph, in order (what a model run is fed).
  std::vector<std::string> input_names_;
  // Every value name of the main graph (inputs, initializers, node outputs).
  absl::flat_hash_set<std::string> tensor_names_;
  absl::flat_hash_map<std::string, Clamp> clamps_;
  ModelTensorTypes types_;
  // Charged by every observer before it allocates; outlives them.
  calibration::MemoryBudget budget_;
  // Created on first sight of each float tensor; only the batch thread
  // touches the map (observations of a model run go to the pool in order,
  // SerialQueue, each holding its observer's pointer).
  absl::flat_hash_map<std::string, std::unique_ptr<calibration::Observer>>
      observers_;
  int64_t batch_count_ = 0;
  TensorSink sink_;
};

// Pops batches until `batches` is closed, observing each (aborting the queue
// on the first error, whose message names the batch), and returns the
// ranges (batch_count 0 when no batch came: the caller decides what that
// means); CANCELLED when cancelled.
// `on_batch` (may be empty) gets the number of batches observed so far;
// `keep` (may be empty) then gets each observed batch, moved (a Quantize call
// keeps some to measure fidelity after the pass). The first `holdout` batches
// are not observed: they go to `hold` (moved) instead, to judge the result
// on data the ranges were not fitted to.
absl::StatusOr<quantd::v1::CalibrationResult> CalibrateFromQueue(
    CalibrationSession* session, BatchQueue* batches,
    const std::function<void(int64_t)>& on_batch,
    const CancellationToken& cancel, ThreadPool* pool,
    const std::function<void(quantd::v1::TensorBatch)>& keep = {},
    int64_t holdout = 0,
    const std::function<void(quantd::v1::TensorBatch)>& hold = {});

// A NamedTensor as an executor Tensor: INVALID_ARGUMENT naming the tensor for
// unknown dtypes, negative or overflowing shapes, or a data size that does
// not match (all checked before the data is read or anything allocated).
absl::StatusOr<executor::Tensor> TensorFromNamed(
    const quantd::v1::NamedTensor& named);

// The executor feeds of a batch that feeds a model's graph `inputs`: an
// unnamed tensor is the only input's. INVALID_ARGUMENT for an unnamed tensor
// when there are several inputs, a tensor given twice, or a missing input;
// with `types`, each tensor is checked against them (ModelTensorTypes::Check
// with max_elements) before its data is copied.
absl::StatusOr<absl::flat_hash_map<std::string, executor::Tensor>> BatchFeeds(
    const quantd::v1::TensorBatch& batch,
    const std::vector<std::string>& inputs,
    const ModelTensorTypes* types = nullptr, int64_t max_elements = 0);

// FLOAT feeds of the inputs `executor` declares DOUBLE, widened (exactly) to
// DOUBLE, as ModelTensorTypes::Check lets them through.
absl::Status WidenFloatFeeds(
    const executor::Executor& executor,
    absl::flat_hash_map<std::string, executor::Tensor>* feeds);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_CALIBRATION_SESSION_H_
