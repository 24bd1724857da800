// Calibration of one model: every batch either runs the model (the batch
// holds its graph inputs) and feeds each float tensor it produces to that
// tensor's observer, or (for a training cluster that already ran the model)
// holds observed activations by name that go to their observers directly.
#ifndef QUANTD_CORE_ENGINE_CALIBRATION_SESSION_H_
#define QUANTD_CORE_ENGINE_CALIBRATION_SESSION_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "core/calibration/observers.h"
#include "core/engine/batch_queue.h"
#include "core/engine/cancellation.h"
#include "core/engine/thread_pool.h"
#include "core/executor/executor.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd {

class CalibrationSession {
 public:
  // Builds the executor (UNIMPLEMENTED naming any op or attribute it cannot
  // run, before any batch) and checks the observer config (INVALID_ARGUMENT).
  // `model` must outlive nothing: the session keeps what it needs.
  static absl::StatusOr<std::unique_ptr<CalibrationSession>> Create(
      const onnx::ModelProto& model,
      const calibration::ObserverConfig& observer_config);

  // Observes one batch. INVALID_ARGUMENT naming the tensors for: names the
  // model does not have, a batch mixing graph inputs and activations, missing
  // graph inputs, data sizes that do not match dtype and shape, and
  // non-float observed activations. Batches are observed in call order.
  absl::Status AddBatch(const quantd::v1::TensorBatch& batch, ThreadPool* pool,
                        const CancellationToken& cancel);

  int64_t batch_count() const { return batch_count_; }

  // The ranges so far, one per observed tensor, sorted by name.
  quantd::v1::CalibrationResult Result() const;

  // Tensors whose quant_delay has not elapsed yet (tf.contrib would still
  // pass them through unquantized), sorted.
  std::vector<std::string> DelayedTensors() const;

 private:
  CalibrationSession(std::unique_ptr<executor::Executor> executor,
                     calibration::ObserverConfig config,
                     absl::flat_hash_set<std::string> tensor_names)
      : executor_(std::move(executor)),
        config_(std::move(config)),
        tensor_names_(std::move(tensor_names)) {}

  absl::Status Observe(const std::string& name, const executor::Tensor& t);
  absl::Status RunModel(const quantd::v1::TensorBatch& batch, ThreadPool* pool,
                        const CancellationToken& cancel);
  absl::Status ObserveActivations(const quantd::v1::TensorBatch& batch);

  std::unique_ptr<executor::Executor> executor_;
  const calibration::ObserverConfig config_;
  // Every value name of the main graph (inputs, initializers, node outputs).
  const absl::flat_hash_set<std::string> tensor_names_;
  // Created on first sight of each float tensor; only the batch thread
  // touches the map.
  absl::flat_hash_map<std::string, std::unique_ptr<calibration::Observer>>
      observers_;
  int64_t batch_count_ = 0;
};

// Pops batches until `batches` is closed, observing each (aborting the queue
// on the first error, whose message names the batch), and returns the
// ranges (batch_count 0 when no batch came: the caller decides what that
// means); CANCELLED when cancelled.
// `on_batch` (may be empty) gets the number of batches observed so far;
// `keep` (may be empty) then gets each observed batch, moved (a Quantize call
// keeps some to measure fidelity after the pass).
absl::StatusOr<quantd::v1::CalibrationResult> CalibrateFromQueue(
    CalibrationSession* session, BatchQueue* batches,
    const std::function<void(int64_t)>& on_batch,
    const CancellationToken& cancel, ThreadPool* pool,
    const std::function<void(quantd::v1::TensorBatch)>& keep = {});

// A NamedTensor as an executor Tensor: INVALID_ARGUMENT naming the tensor for
// unknown dtypes, negative dims or a data size that does not match.
absl::StatusOr<executor::Tensor> TensorFromNamed(
    const quantd::v1::NamedTensor& named);

// The executor feeds of a batch that feeds a model's graph `inputs`: an
// unnamed tensor is the only input's. INVALID_ARGUMENT for an unnamed tensor
// when there are several inputs, a tensor given twice, or a missing input.
absl::StatusOr<absl::flat_hash_map<std::string, executor::Tensor>> BatchFeeds(
    const quantd::v1::TensorBatch& batch,
    const std::vector<std::string>& inputs);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_CALIBRATION_SESSION_H_
