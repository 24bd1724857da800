#include "core/base/serial_queue.h"

#include <utility>

namespace quantd {

SerialQueue::SerialQueue(ThreadPool* pool, int64_t max_pending_bytes)
    : pool_(pool),
      max_pending_bytes_(max_pending_bytes),
      inline_(pool == nullptr || pool->parallelism() <= 1),
      state_(std::make_shared<State>()) {}

SerialQueue::~SerialQueue() { Wait(); }

void SerialQueue::State::Drain() {
  if (draining) return;
  draining = true;
  while (!items.empty()) {
    Item item = std::move(items.front());
    items.pop_front();
    mu.Unlock();
    absl::Status result;
    std::exception_ptr exception;
    try {
      result = item.run();
    } catch (...) {
      exception = std::current_exception();
      result = absl::InternalError("an item threw");
    }
    // Whatever the item kept alive goes now, not under the lock.
    item.run = nullptr;
    mu.Lock();
    if (exception != nullptr && thrown == nullptr) thrown = exception;
    pending_bytes -= item.bytes;
    if (!result.ok() && status.ok()) {
      status = std::move(result);
      items.clear();
      pending_bytes = 0;
    }
    done.SignalAll();
  }
  draining = false;
  done.SignalAll();
}

void SerialQueue::Add(int64_t bytes, std::function<absl::Status()> item) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (!s.status.ok()) return;
  if (inline_) {
    s.items.push_back({bytes, std::move(item)});
    s.Drain();
    RethrowIfThrown();
    return;
  }
  // Room first: past the bound (counting the item a worker may be running)
  // this thread runs the backlog itself, or waits while a worker does.
  while (s.pending_bytes > 0 && s.pending_bytes + bytes > max_pending_bytes_) {
    if (s.draining) {
      s.done.Wait(&s.mu);
    } else {
      s.Drain();
    }
  }
  RethrowIfThrown();
  if (!s.status.ok()) return;
  s.items.push_back({bytes, std::move(item)});
  s.pending_bytes += bytes;
  if (bytes > max_pending_bytes_) {
    // Too large to wait for a worker (nothing else is pending now): it runs
    // here.
    s.Drain();
    RethrowIfThrown();
    return;
  }
  if (!s.draining && !s.scheduled) {
    s.scheduled = true;
    pool_->Schedule([state = state_] {
      absl::MutexLock task_lock(&state->mu);
      state->scheduled = false;
      state->Drain();
    });
  }
}

void SerialQueue::RethrowIfThrown() {
  if (state_->thrown == nullptr) return;
  std::exception_ptr thrown = std::exchange(state_->thrown, nullptr);
  // The lock is released by the unwinding MutexLock.
  std::rethrow_exception(thrown);
}

std::exception_ptr SerialQueue::Wait() {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  while (!s.items.empty() || s.draining) {
    if (s.draining) {
      s.done.Wait(&s.mu);
    } else {
      s.Drain();
    }
  }
  return std::exchange(s.thrown, nullptr);
}

absl::Status SerialQueue::Finish() {
  if (std::exception_ptr thrown = Wait()) std::rethrow_exception(thrown);
  absl::MutexLock lock(&state_->mu);
  return state_->status;
}

}  // namespace quantd
