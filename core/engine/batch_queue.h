// A bounded hand-off of calibration batches from the transport (a gRPC
// reactor, which must never block) to a core job (which may). The producer
// learns when the queue is full and is called back when there is room again,
// so it can stop reading from the network meanwhile: that is how gRPC flow
// control holds back a client that sends faster than the server computes.
#ifndef QUANTD_CORE_ENGINE_BATCH_QUEUE_H_
#define QUANTD_CORE_ENGINE_BATCH_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd {

class BatchQueue {
 public:
  explicit BatchQueue(size_t capacity) : capacity_(capacity) {}

  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  // Called (on the consumer's thread, without the lock held) each time a Pop
  // makes room after a Push returned false.
  void SetOnRoom(std::function<void()> on_room);

  // Never blocks. Returns true when there is room for another batch now;
  // false means: wait for on_room before pushing again. Pushing after Close
  // or Abort drops the batch and returns false.
  bool Push(quantd::v1::TensorBatch batch);

  // The producer has no more batches.
  void Close();
  // Stops the consumer now (cancellation): Pop returns nullopt at once.
  void Abort();

  // Blocks until a batch is available (returns it) or the queue is closed
  // and drained or aborted (returns nullopt).
  std::optional<quantd::v1::TensorBatch> Pop();

  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<quantd::v1::TensorBatch> batches_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool producer_waiting_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_room_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_BATCH_QUEUE_H_
