// A byte budget that memory is charged against before it is allocated, so a
// request that would need too much fails cleanly instead of exhausting the
// process (one per call: the observers of one calibration share it).
#ifndef QUANTD_CORE_CALIBRATION_MEMORY_BUDGET_H_
#define QUANTD_CORE_CALIBRATION_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace quantd::calibration {

// "1.5 GiB", "256 MiB", "12 KiB", "100 bytes": for messages.
std::string ByteText(int64_t bytes);

class MemoryBudget {
 public:
  // `limit_bytes` <= 0: no limit (charges are still counted). `name` says
  // in messages which setting the limit comes from.
  MemoryBudget(int64_t limit_bytes, std::string name)
      : limit_(limit_bytes), name_(std::move(name)) {}

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserves `bytes` for `what` (a phrase such as "observer of tensor 'x'
  // (...)"); RESOURCE_EXHAUSTED naming the budget, what asked and how much
  // when it would go over, and then nothing is reserved. Thread-safe.
  absl::Status Charge(int64_t bytes, absl::string_view what)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back bytes charged earlier.
  void Release(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t used() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  const std::string name_;
  mutable absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace quantd::calibration

#endif  // QUANTD_CORE_CALIBRATION_MEMORY_BUDGET_H_
