// The core engine: runs quantization jobs on a fixed thread pool, never on
// the caller's (gRPC's) threads, and streams their events to the caller.
#ifndef QUANTD_CORE_ENGINE_ENGINE_H_
#define QUANTD_CORE_ENGINE_ENGINE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/engine/cancellation.h"
#include "core/engine/thread_pool.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd {

// Callbacks for what a job reports while it runs. Called on the job's
// thread, in order; may be empty.
struct QuantizeEvents {
  std::function<void(const quantd::v1::Progress&)> on_progress;
  std::function<void(const quantd::v1::TensorReport&)> on_tensor_report;
};

struct QuantizeResult {
  std::string model;  // The serialized output ONNX model.
  quantd::v1::QuantizeSummary summary;
};

// One Quantize job, start to end, on the calling thread. Takes ownership of
// the model bytes so it can free them as soon as they are parsed. `pool` (may
// be null) is used for per-tensor parallelism; the calling thread takes part,
// so calling this from a pool thread cannot deadlock.
absl::StatusOr<QuantizeResult> RunQuantize(
    const quantd::v1::QuantizeConfig& config, std::string model_bytes,
    const QuantizeEvents& events, const CancellationToken& cancel,
    ThreadPool* pool);

class Engine {
 public:
  struct Options {
    int threads = 0;  // 0: one per hardware thread.
  };
  explicit Engine(const Options& options);
  ~Engine();  // Waits for submitted jobs to finish.

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  using QuantizeDone = std::function<void(absl::StatusOr<QuantizeResult>)>;
  // Runs RunQuantize on the pool. `done` is called exactly once, on a pool
  // thread, after the last event.
  void SubmitQuantize(quantd::v1::QuantizeConfig config,
                      std::string model_bytes, QuantizeEvents events,
                      std::shared_ptr<const CancellationToken> cancel,
                      QuantizeDone done);

  int threads() const;

 private:
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_ENGINE_H_
