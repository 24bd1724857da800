#include "core/engine/batch_queue.h"

#include <utility>

namespace quantd {

void BatchQueue::SetOnRoom(std::function<void()> on_room) {
  absl::MutexLock lock(&mu_);
  on_room_ = std::move(on_room);
}

bool BatchQueue::Push(quantd::v1::TensorBatch batch) {
  absl::MutexLock lock(&mu_);
  if (closed_ || aborted_) return false;
  batches_.push_back(std::move(batch));
  if (batches_.size() < capacity_) return true;
  producer_waiting_ = true;
  return false;
}

void BatchQueue::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

void BatchQueue::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  batches_.clear();
}

std::optional<quantd::v1::TensorBatch> BatchQueue::Pop() {
  std::function<void()> wake;
  std::optional<quantd::v1::TensorBatch> batch;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](BatchQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
          return q->aborted_ || q->closed_ || !q->batches_.empty();
        },
        this));
    if (aborted_ || batches_.empty()) return std::nullopt;
    batch = std::move(batches_.front());
    batches_.pop_front();
    if (producer_waiting_ && batches_.size() < capacity_) {
      producer_waiting_ = false;
      wake = on_room_;
    }
  }
  // Outside the lock: the producer typically starts its next read here.
  if (wake) wake();
  return batch;
}

}  // namespace quantd
