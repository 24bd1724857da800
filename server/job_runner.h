// The seam between the gRPC reactors and the core engine: the reactors submit
// jobs through a JobRunner, which is the Engine in production and a fake in
// tests that need to control when a job consumes its batches.
#ifndef QUANTD_SERVER_JOB_RUNNER_H_
#define QUANTD_SERVER_JOB_RUNNER_H_

#include <memory>
#include <string>

#include "core/base/cancellation.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::server {

// Same contracts as the Engine methods of the same names: `done` is called
// exactly once, after the job's last event, on a thread that is not gRPC's.
class JobRunner {
 public:
  virtual ~JobRunner() = default;

  virtual void SubmitQuantize(
      quantd::v1::QuantizeConfig config, ModelUpload model,
      QuantizeEvents events, std::shared_ptr<const CancellationToken> cancel,
      Engine::QuantizeDone done,
      std::shared_ptr<BatchQueue> calibration_batches) = 0;

  virtual void SubmitCalibrate(quantd::v1::CalibrateConfig config,
                               ModelUpload model,
                               std::shared_ptr<BatchQueue> batches,
                               CalibrateEvents events,
                               std::shared_ptr<const CancellationToken> cancel,
                               Engine::CalibrateDone done) = 0;

  // Core worker threads, for GetServerInfo.
  virtual int threads() const = 0;
  // The limits core enforces on each job, for GetServerInfo.
  virtual JobLimits limits() const { return JobLimits(); }
};

class EngineJobRunner final : public JobRunner {
 public:
  explicit EngineJobRunner(Engine* engine) : engine_(engine) {}

  void SubmitQuantize(
      quantd::v1::QuantizeConfig config, ModelUpload model,
      QuantizeEvents events, std::shared_ptr<const CancellationToken> cancel,
      Engine::QuantizeDone done,
      std::shared_ptr<BatchQueue> calibration_batches) override {
    engine_->SubmitQuantize(std::move(config), std::move(model),
                            std::move(events), std::move(cancel),
                            std::move(done), std::move(calibration_batches));
  }

  void SubmitCalibrate(quantd::v1::CalibrateConfig config, ModelUpload model,
                       std::shared_ptr<BatchQueue> batches,
                       CalibrateEvents events,
                       std::shared_ptr<const CancellationToken> cancel,
                       Engine::CalibrateDone done) override {
    engine_->SubmitCalibrate(std::move(config), std::move(model),
                             std::move(batches), std::move(events),
                             std::move(cancel), std::move(done));
  }

  int threads() const override { return engine_->threads(); }
  JobLimits limits() const override { return engine_->limits(); }

 private:
  Engine* const engine_;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_JOB_RUNNER_H_
