// Admission control for core jobs: at most `limit` Quantize/Calibrate jobs
// running or queued in core at once. A slot is taken when a call submits its
// job and given back when the job's done callback runs; a call that finds no
// free slot is refused with RESOURCE_EXHAUSTED rather than queued, so a busy
// server sheds load at once instead of piling up models in memory.
#ifndef QUANTD_SERVER_JOB_LIMITS_H_
#define QUANTD_SERVER_JOB_LIMITS_H_

#include <atomic>

#include "grpcpp/grpcpp.h"

namespace quantd::server {

class JobLimiter {
 public:
  // `limit` >= 1.
  explicit JobLimiter(int limit) : limit_(limit < 1 ? 1 : limit) {}

  JobLimiter(const JobLimiter&) = delete;
  JobLimiter& operator=(const JobLimiter&) = delete;

  // Takes a slot: true, or false (and nothing taken) when all are in use.
  bool TryAcquire();
  // Gives back a slot taken by TryAcquire.
  void Release();

  // Whether a slot is free right now (a hint for refusing a call before its
  // model is uploaded; TryAcquire decides).
  bool HasRoom() const { return in_flight() < limit_; }

  // RESOURCE_EXHAUSTED "server busy: N jobs in flight (limit N)".
  grpc::Status BusyStatus() const;

  int limit() const { return limit_; }
  int in_flight() const { return in_flight_.load(std::memory_order_acquire); }

 private:
  const int limit_;
  std::atomic<int> in_flight_{0};
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_JOB_LIMITS_H_
