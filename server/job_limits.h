// Admission control for core jobs: at most `limit` Quantize/Calibrate jobs
// running in core at once, and at most `max_queued` more calls (their model
// received) waiting for a slot, first come first served. A slot is taken
// when a call submits its job and given back when the job's done callback
// runs, straight to the longest waiting call if any. A call that finds
// neither a slot nor room in the queue is refused with RESOURCE_EXHAUSTED
// rather than queued, so a busy server sheds load at once instead of piling
// up models in memory: the queue bounds that memory at `max_queued` models.
#ifndef QUANTD_SERVER_JOB_LIMITS_H_
#define QUANTD_SERVER_JOB_LIMITS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace quantd::server {

class JobLimiter {
 public:
  // `limit` >= 1 (less counts as 1); `max_queued` >= 0 (0: no queue, a call
  // without a free slot is refused). `on_queued` (may be empty) gets the
  // queue length after every change, under the limiter's lock so the values
  // arrive in order (for a gauge; it must not call back into the limiter).
  explicit JobLimiter(int limit, int max_queued = 0,
                      std::function<void(int)> on_queued = {});

  JobLimiter(const JobLimiter&) = delete;
  JobLimiter& operator=(const JobLimiter&) = delete;

  // Takes a slot: true, or false (and nothing taken) when all are in use.
  // Never queues (and never jumps the queue: false while calls wait).
  bool TryAcquire();
  // Gives back a slot: to the first waiting call (whose on_slot then runs
  // here, on this thread, outside the lock) or to the pool.
  void Release();

  enum class Admission {
    kAcquired,  // A slot is taken; on_slot is dropped.
    kQueued,    // on_slot runs (with the slot) when a Release hands it over.
    kRefused,   // Neither a slot nor room in the queue; nothing taken.
  };
  // Takes a slot, or queues `on_slot` when there is room. When queued,
  // `*wait_id` (set under the lock, before any Release can run on_slot)
  // identifies the wait for CancelWait.
  Admission AcquireOrQueue(std::function<void()> on_slot,
                           std::atomic<uint64_t>* wait_id);
  // Leaves the queue: true when the wait was still queued (on_slot will never
  // run), false when it had already been given its slot (on_slot runs or
  // ran).
  bool CancelWait(uint64_t wait_id);

  // Whether a call could be admitted right now, to a slot or the queue (a
  // hint for refusing a call before its model is uploaded;
  // AcquireOrQueue decides).
  bool HasRoom() const;

  // RESOURCE_EXHAUSTED "server busy: N jobs in flight (limit N)" (and, with
  // a queue, ", N queued (limit N)").
  grpc::Status BusyStatus() const;

  int limit() const { return limit_; }
  int max_queued() const { return max_queued_; }
  int in_flight() const;
  int queued() const;

 private:
  struct Waiter {
    uint64_t id;
    std::function<void()> on_slot;
  };

  void ReportQueued(int queued) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (on_queued_) on_queued_(queued);
  }

  const int limit_;
  const int max_queued_;
  const std::function<void(int)> on_queued_;
  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Waiter> waiting_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_JOB_LIMITS_H_
