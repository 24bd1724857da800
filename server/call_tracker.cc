#include "server/call_tracker.h"

namespace quantd::server {

bool CallTracker::Enter() {
  absl::MutexLock lock(&mu_);
  if (draining_) return false;
  ++active_;
  return true;
}

void CallTracker::Exit() {
  absl::MutexLock lock(&mu_);
  --active_;
}

void CallTracker::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool CallTracker::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int CallTracker::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

int CallTracker::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(
      absl::Condition(
          +[](int* active) { return *active == 0; }, &active_),
      deadline);
  return active_;
}

}  // namespace quantd::server
