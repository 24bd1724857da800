// Work items that must run one at a time and in order, handed to a
// ThreadPool's idle workers so that the thread adding them goes on: a
// calibration batch observes each tensor while the model's next node runs.
#ifndef QUANTD_CORE_BASE_SERIAL_QUEUE_H_
#define QUANTD_CORE_BASE_SERIAL_QUEUE_H_

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/base/thread_pool.h"

namespace quantd {

// Add and Finish are called from one thread, the adder.
class SerialQueue {
 public:
  // Items wait on the pool's workers while their bytes (what each keeps
  // alive, the adder's estimate) stay within `max_pending_bytes`; past that
  // the adder helps until they fit. Without a pool, or when the adder's
  // ParallelFor would run on the adder alone (pool->parallelism() == 1),
  // every item runs inside Add.
  SerialQueue(ThreadPool* pool, int64_t max_pending_bytes);
  // Waits for the items still queued (Finish() without its status).
  ~SerialQueue();

  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  // Runs `item` after every item added before it, on a worker or on this
  // thread. Once an item has failed (or thrown), later ones are dropped
  // unrun.
  void Add(int64_t bytes, std::function<absl::Status()> item);

  // Runs or waits for every item added; returns the first failure. An
  // exception an item threw (std::bad_alloc) is rethrown here, or from the
  // Add that ran the item: thrown on a worker it would end the process.
  absl::Status Finish();

 private:
  struct Item {
    int64_t bytes;
    std::function<absl::Status()> run;
  };
  // Shared with the tasks scheduled on the pool, which may start after the
  // queue is gone (they then find nothing to do).
  struct State {
    absl::Mutex mu;
    std::deque<Item> items ABSL_GUARDED_BY(mu);
    int64_t pending_bytes ABSL_GUARDED_BY(mu) = 0;
    // A thread is running items: only one may, to keep their order.
    bool draining ABSL_GUARDED_BY(mu) = false;
    bool scheduled ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    std::exception_ptr thrown ABSL_GUARDED_BY(mu);
    // Signalled after every item and when draining stops.
    absl::CondVar done;

    // Runs queued items until none is left, unless another thread is.
    void Drain() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };

  // Waits for every item; the exception an item threw, if not rethrown yet.
  std::exception_ptr Wait();
  // Rethrows what an item threw, once.
  void RethrowIfThrown() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);

  ThreadPool* const pool_;
  const int64_t max_pending_bytes_;
  const bool inline_;
  std::shared_ptr<State> state_;
};

}  // namespace quantd

#endif  // QUANTD_CORE_BASE_SERIAL_QUEUE_H_
