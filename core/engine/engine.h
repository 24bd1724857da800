// The core engine: runs quantization jobs on a fixed thread pool, never on
// the caller's (gRPC's) threads, and streams their events to the caller.
#ifndef QUANTD_CORE_ENGINE_ENGINE_H_
#define QUANTD_CORE_ENGINE_ENGINE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/cancellation.h"
#include "core/base/thread_pool.h"
#include "core/engine/batch_queue.h"
#include "core/engine/limits.h"
#include "core/graph/external_stream.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd {

// Callbacks for what a job reports while it runs. Called on the job's
// thread, in order; may be empty.
struct QuantizeEvents {
  std::function<void(const quantd::v1::Progress&)> on_progress;
  std::function<void(const quantd::v1::TensorReport&)> on_tensor_report;
};

// A model as a request carries it: the serialized ModelProto and, for a
// model sent with external data (one over 2 GB), the stream its EXTERNAL
// tensors are located in (see core/graph/external_stream.h).
struct ModelUpload {
  ModelUpload() = default;
  // Implicit: most models are just their bytes.
  ModelUpload(std::string model_bytes)  // NOLINT(google-explicit-constructor)
      : bytes(std::move(model_bytes)) {}
  std::string bytes;
  graph::ExternalDataStream external;
};

struct QuantizeResult {
  std::string model;  // The serialized output ONNX model.
  // Not empty when the output's large tensors travel beside it: always when
  // the input came with external data, and when the output would not fit in
  // one protobuf message.
  graph::ExternalDataStream external;
  quantd::v1::QuantizeSummary summary;
};

// One Quantize job, start to end, on the calling thread. Takes ownership of
// the model bytes so it can free them as soon as they are parsed (and the
// external data stream as its tensors are attached). `pool` (may
// be null) is used for per-tensor parallelism; the calling thread takes part,
// so calling this from a pool thread cannot deadlock. For STATIC_RANGE,
// `calibration_batches` (may be null) streams calibration batches that follow
// the model in the same call; otherwise config.calibration must hold ranges.
// A model over `limits` is INVALID_ARGUMENT right after the parse. Once
// `cancel` is set the job stops within a piece of work (a MiB of parsing or
// serializing, a group of weights, a node of a calibration run) and returns
// CANCELLED. Running out of memory (std::bad_alloc anywhere in the job) is
// RESOURCE_EXHAUSTED for this call; the process carries on.
absl::StatusOr<QuantizeResult> RunQuantize(
    const quantd::v1::QuantizeConfig& config, ModelUpload model,
    const QuantizeEvents& events, const CancellationToken& cancel,
    ThreadPool* pool, BatchQueue* calibration_batches = nullptr,
    const JobLimits& limits = JobLimits());

struct CalibrateEvents {
  std::function<void(const quantd::v1::Progress&)> on_progress;
};

// One Calibrate job: parse and check the model, then observe every batch
// popped from `batches` until it is closed, and return the ranges. Limits,
// cancellation and out-of-memory as for RunQuantize.
absl::StatusOr<quantd::v1::CalibrationResult> RunCalibrate(
    const quantd::v1::CalibrateConfig& config, ModelUpload model,
    BatchQueue* batches, const CalibrateEvents& events,
    const CancellationToken& cancel, ThreadPool* pool,
    const JobLimits& limits = JobLimits());

class Engine {
 public:
  struct Options {
    int threads = 0;  // 0: one per hardware thread.
    // Applied to every job's model.
    JobLimits limits;
  };
  explicit Engine(const Options& options);
  ~Engine();  // Waits for submitted jobs to finish.

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  using QuantizeDone = std::function<void(absl::StatusOr<QuantizeResult>)>;
  // Runs RunQuantize. `done` is called exactly once, after the last event.
  // Without calibration batches the job runs on the pool. A job fed by
  // `calibration_batches` may wait on its client, so it runs on a thread of
  // its own (its heavy work still fans out over the pool): a slow client
  // never holds a pool thread.
  void SubmitQuantize(
      quantd::v1::QuantizeConfig config, ModelUpload model,
      QuantizeEvents events, std::shared_ptr<const CancellationToken> cancel,
      QuantizeDone done,
      std::shared_ptr<BatchQueue> calibration_batches = nullptr);

  using CalibrateDone =
      std::function<void(absl::StatusOr<quantd::v1::CalibrationResult>)>;
  // Runs RunCalibrate on a thread of its own (it waits on `batches`);
  // `done` is called exactly once.
  void SubmitCalibrate(quantd::v1::CalibrateConfig config, ModelUpload model,
                       std::shared_ptr<BatchQueue> batches,
                       CalibrateEvents events,
                       std::shared_ptr<const CancellationToken> cancel,
                       CalibrateDone done);

  int threads() const;
  const JobLimits& limits() const { return limits_; }

 private:
  // Starts `job` on a dedicated thread, joined by the destructor. The
  // thread is a ThreadPool::Member of the pool while the job runs.
  void RunOnOwnThread(std::function<void()> job);

  const JobLimits limits_;
  std::unique_ptr<ThreadPool> pool_;
  absl::Mutex threads_mu_;
  struct JobThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::vector<JobThread> job_threads_ ABSL_GUARDED_BY(threads_mu_);
};

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_ENGINE_H_
