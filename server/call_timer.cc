#include "server/call_timer.h"

#include <utility>

#include "absl/time/clock.h"

namespace quantd::server {

CallTimer::CallTimer() : thread_([this] { Loop(); }) {}

CallTimer::~CallTimer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.Signal();
  }
  thread_.join();
}

uint64_t CallTimer::Schedule(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  const bool first = pending_.empty() || when < pending_.begin()->first.first;
  pending_.emplace(std::make_pair(when, id), std::move(fn));
  times_.emplace(id, when);
  if (first) changed_.Signal();  // The thread sleeps until a later time.
  return id;
}

bool CallTimer::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = times_.find(id);
  if (it == times_.end()) return false;
  pending_.erase(std::make_pair(it->second, id));
  times_.erase(it);
  return true;
}

void CallTimer::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (pending_.empty()) {
      changed_.Wait(&mu_);
      continue;
    }
    const auto next = pending_.begin();
    const absl::Time when = next->first.first;
    if (absl::Now() < when) {
      changed_.WaitWithDeadline(&mu_, when);
      continue;
    }
    std::function<void()> fn = std::move(next->second);
    times_.erase(next->first.second);
    pending_.erase(next);
    // Unlocked while it runs: the callback may Schedule or Cancel.
    mu_.Unlock();
    fn();
    fn = nullptr;  // Whatever it holds goes before the lock is retaken.
    mu_.Lock();
  }
}

}  // namespace quantd::server
