#include "server/job_limits.h"

#include "absl/strings/str_cat.h"

namespace quantd::server {

bool JobLimiter::TryAcquire() {
  int current = in_flight_.load(std::memory_order_relaxed);
  while (current < limit_) {
    if (in_flight_.compare_exchange_weak(current, current + 1,
                                         std::memory_order_acq_rel)) {
      return true;
    }
  }
  return false;
}

void JobLimiter::Release() {
  in_flight_.fetch_sub(1, std::memory_order_acq_rel);
}

grpc::Status JobLimiter::BusyStatus() const {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("server busy: ", in_flight(),
                                   " jobs in flight (limit ", limit_, ")"));
}

}  // namespace quantd::server
