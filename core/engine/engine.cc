#include "core/engine/engine.h"

#include <utility>

namespace quantd {

Engine::Engine(const Options& options)
    : limits_(options.limits),
      pool_(std::make_unique<ThreadPool>(options.threads)) {}

Engine::~Engine() {
  // Stream-fed jobs first (they may still use the pool), then the pool,
  // whose destructor runs every queued job to completion.
  std::vector<JobThread> threads;
  {
    absl::MutexLock lock(&threads_mu_);
    threads.swap(job_threads_);
  }
  for (JobThread& t : threads) t.thread.join();
  pool_.reset();
}

int Engine::threads() const { return pool_->size(); }

void Engine::RunOnOwnThread(std::function<void()> job) {
  absl::MutexLock lock(&threads_mu_);
  // Join the threads whose jobs are done (an unjoined thread keeps its
  // stack), so a long-lived server holds only the threads of live jobs.
  std::vector<JobThread> live;
  for (JobThread& t : job_threads_) {
    if (t.finished->load()) {
      t.thread.join();  // Returns at once: the job has returned.
    } else {
      live.push_back(std::move(t));
    }
  }
  job_threads_.swap(live);
  auto finished = std::make_shared<std::atomic<bool>>(false);
  job_threads_.push_back(
      {std::thread([job = std::move(job), finished, pool = pool_.get()] {
         // The pool has a worker per core: this thread computes in a
         // worker's stead, not beside all of them.
         ThreadPool::Member member(pool);
         job();
         finished->store(true);
       }),
       finished});
}

void Engine::SubmitQuantize(quantd::v1::QuantizeConfig config,
                            ModelUpload model, QuantizeEvents events,
                            std::shared_ptr<const CancellationToken> cancel,
                            QuantizeDone done,
                            std::shared_ptr<BatchQueue> calibration_batches) {
  ThreadPool* pool = pool_.get();
  const JobLimits limits = limits_;
  // std::function needs a copyable callable; the model bytes can be large,
  // so they travel in a shared_ptr and are moved out exactly once.
  auto bytes = std::make_shared<ModelUpload>(std::move(model));
  auto job = [config = std::move(config), bytes, events = std::move(events),
              cancel = std::move(cancel), done = std::move(done), pool,
              calibration_batches, limits] {
    absl::StatusOr<QuantizeResult> result =
        cancel->IsCancelled()
            ? absl::StatusOr<QuantizeResult>(cancel->Check("queue"))
            : RunQuantize(config, std::move(*bytes), events, *cancel, pool,
                          calibration_batches.get(), limits);
    done(std::move(result));
  };
  if (calibration_batches != nullptr) {
    RunOnOwnThread(std::move(job));
  } else {
    pool_->Schedule(std::move(job));
  }
}

void Engine::SubmitCalibrate(quantd::v1::CalibrateConfig config,
                             ModelUpload model,
                             std::shared_ptr<BatchQueue> batches,
                             CalibrateEvents events,
                             std::shared_ptr<const CancellationToken> cancel,
                             CalibrateDone done) {
  ThreadPool* pool = pool_.get();
  const JobLimits limits = limits_;
  auto bytes = std::make_shared<ModelUpload>(std::move(model));
  RunOnOwnThread([config = std::move(config), bytes,
                  batches = std::move(batches), events = std::move(events),
                  cancel = std::move(cancel), done = std::move(done), pool,
                  limits] {
    absl::StatusOr<quantd::v1::CalibrationResult> result =
        cancel->IsCancelled()
            ? absl::StatusOr<quantd::v1::CalibrationResult>(
                  cancel->Check("queue"))
            : RunCalibrate(config, std::move(*bytes), batches.get(), events,
                           *cancel, pool, limits);
    done(std::move(result));
  });
}

}  // namespace quantd
