#include "server/job_limits.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace quantd::server {

JobLimiter::JobLimiter(int limit, int max_queued,
                       std::function<void(int)> on_queued)
    : limit_(limit < 1 ? 1 : limit),
      max_queued_(max_queued < 0 ? 0 : max_queued),
      on_queued_(std::move(on_queued)) {}

bool JobLimiter::TryAcquire() {
  absl::MutexLock lock(&mu_);
  if (in_flight_ >= limit_ || !waiting_.empty()) return false;
  ++in_flight_;
  return true;
}

void JobLimiter::Release() {
  std::function<void()> next;
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.empty()) {
      --in_flight_;
      return;
    }
    // The slot passes to the first waiter as it is: in_flight_ unchanged.
    next = std::move(waiting_.front().on_slot);
    waiting_.pop_front();
    ReportQueued(static_cast<int>(waiting_.size()));
  }
  next();
}

JobLimiter::Admission JobLimiter::AcquireOrQueue(
    std::function<void()> on_slot, std::atomic<uint64_t>* wait_id) {
  {
    absl::MutexLock lock(&mu_);
    if (in_flight_ < limit_ && waiting_.empty()) {
      ++in_flight_;
      return Admission::kAcquired;
    }
    if (static_cast<int>(waiting_.size()) >= max_queued_) {
      return Admission::kRefused;
    }
    const uint64_t id = next_id_++;
    wait_id->store(id);
    waiting_.push_back({id, std::move(on_slot)});
    ReportQueued(static_cast<int>(waiting_.size()));
  }
  return Admission::kQueued;
}

bool JobLimiter::CancelWait(uint64_t wait_id) {
  absl::MutexLock lock(&mu_);
  auto it = waiting_.begin();
  while (it != waiting_.end() && it->id != wait_id) ++it;
  if (it == waiting_.end()) return false;
  waiting_.erase(it);
  ReportQueued(static_cast<int>(waiting_.size()));
  return true;
}

bool JobLimiter::HasRoom() const {
  absl::MutexLock lock(&mu_);
  return (in_flight_ < limit_ && waiting_.empty()) ||
         static_cast<int>(waiting_.size()) < max_queued_;
}

int JobLimiter::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

int JobLimiter::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiting_.size());
}

grpc::Status JobLimiter::BusyStatus() const {
  absl::MutexLock lock(&mu_);
  std::string message = absl::StrCat("server busy: ", in_flight_,
                                     " jobs in flight (limit ", limit_, ")");
  if (max_queued_ > 0) {
    absl::StrAppend(&message, ", ", waiting_.size(), " queued (limit ",
                    max_queued_, ")");
  }
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message);
}

}  // namespace quantd::server
