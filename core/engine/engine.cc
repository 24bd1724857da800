#include "core/engine/engine.h"

#include <utility>

namespace quantd {

Engine::Engine(const Options& options)
    : pool_(std::make_unique<ThreadPool>(options.threads)) {}

// Destroying the pool runs every queued job to completion first.
Engine::~Engine() = default;

int Engine::threads() const { return pool_->size(); }

void Engine::SubmitQuantize(quantd::v1::QuantizeConfig config,
                            std::string model_bytes, QuantizeEvents events,
                            std::shared_ptr<const CancellationToken> cancel,
                            QuantizeDone done) {
  ThreadPool* pool = pool_.get();
  // std::function needs a copyable callable; the model bytes can be large,
  // so they travel in a shared_ptr and are moved out exactly once.
  auto bytes = std::make_shared<std::string>(std::move(model_bytes));
  pool_->Schedule([config = std::move(config), bytes,
                   events = std::move(events), cancel = std::move(cancel),
                   done = std::move(done), pool] {
    absl::StatusOr<QuantizeResult> result =
        cancel->IsCancelled()
            ? absl::StatusOr<QuantizeResult>(cancel->Check("queue"))
            : RunQuantize(config, std::move(*bytes), events, *cancel, pool);
    done(std::move(result));
  });
}

}  // namespace quantd
