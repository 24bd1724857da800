// A flag a caller sets to stop a running job; core work polls it between
// units of work (tensors, batches) and returns CANCELLED.
#ifndef QUANTD_CORE_BASE_CANCELLATION_H_
#define QUANTD_CORE_BASE_CANCELLATION_H_

#include <atomic>

#include "absl/status/status.h"

namespace quantd {

class CancellationToken {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool IsCancelled() const {
    return cancelled_.load(std::memory_order_relaxed);
  }
  // OK, or CANCELLED naming `where` (the stage the job was in).
  absl::Status Check(const char* where) const {
    return IsCancelled()
               ? absl::CancelledError(std::string("cancelled during ") + where)
               : absl::OkStatus();
  }

 private:
  std::atomic<bool> cancelled_{false};
};

}  // namespace quantd

#endif  // QUANTD_CORE_BASE_CANCELLATION_H_
