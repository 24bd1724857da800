#include "server/memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/base/huge_pages.h"

namespace quantd::server {

void TrimHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

uint64_t FreeHeapBytes() {
#if defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  return mallinfo2().fordblks;
#else
  return 0;
#endif
}

bool UploadBudget::TryCharge(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (limit_ != 0 && bytes > limit_ - std::min(in_use_, limit_)) return false;
  in_use_ += bytes;
  if (on_change_) on_change_(in_use_);
  return true;
}

void UploadBudget::Release(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= std::min(bytes, in_use_);
  if (on_change_) on_change_(in_use_);
}

uint64_t UploadBudget::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

IdleHeapTrimmer::IdleHeapTrimmer(std::function<bool()> idle,
                                 absl::Duration period)
    : idle_(std::move(idle)), period_(period), thread_([this] { Loop(); }) {}

IdleHeapTrimmer::~IdleHeapTrimmer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void IdleHeapTrimmer::Request() {
  absl::MutexLock lock(&mu_);
  ticks_left_ = kTrimTicks;
}

void IdleHeapTrimmer::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    // Wakes early only to stop.
    mu_.AwaitWithTimeout(absl::Condition(&stop_), period_);
    if (stop_) continue;
    const bool requested = ticks_left_ > 0;
    mu_.Unlock();
    bool trimmed = false;
    if (idle_() &&
        (requested || FreeHeapBytes() > free_after_trim_ + kRetrimBytes)) {
      TrimHeap();
      free_after_trim_ = FreeHeapBytes();
      trimmed = true;
    }
    mu_.Lock();
    if (trimmed && ticks_left_ > 0) --ticks_left_;
  }
}

absl::Status ReserveModelBytes(std::string* buffer, uint64_t more,
                               uint64_t declared) {
  const uint64_t needed = buffer->size() + more;
  if (needed <= buffer->capacity()) return absl::OkStatus();
  try {
    buffer->reserve(std::max(declared, needed));
    AdviseHugePages(buffer->data(), buffer->capacity());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory while receiving the model (",
                     buffer->size(), " of ", declared,
                     " bytes received): the server is under memory pressure; "
                     "retry later or on another replica"));
  } catch (const std::length_error&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model of ", declared, " bytes cannot be held in memory"));
  }
  return absl::OkStatus();
}

}  // namespace quantd::server
