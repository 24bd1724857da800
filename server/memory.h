// How a call holds memory the client asked for: the shared budget of model
// bytes still being uploaded, the model buffer grown in steps (never one
// allocation of whatever size the client declared), and giving freed heap
// back to the OS.
#ifndef QUANTD_SERVER_MEMORY_H_
#define QUANTD_SERVER_MEMORY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace quantd::server {

// Calls with a model at least this big give the freed heap back to the OS
// when they are done (see TrimHeap).
inline constexpr uint64_t kTrimHeapAfterModelBytes = uint64_t{16} << 20;

// Gives the heap pages freed by a finished call back to the OS. glibc keeps
// them in its arenas otherwise, and RSS ratchets up call after call
// (fragmentation, not a leak) until a replica looks like it is leaking.
void TrimHeap();

// Free bytes glibc's malloc holds in its arenas (mallinfo2's fordblks: free
// chunks and the unused top, whether or not a trim has returned their pages
// already); 0 where that is unknown.
uint64_t FreeHeapBytes();

// Bytes held by calls still uploading their model, against an operator's
// cap. Thread-safe.
class UploadBudget {
 public:
  // 0: unlimited. `on_change`, when set, is told the bytes in use after
  // every change (under the budget's lock, so in order).
  explicit UploadBudget(uint64_t limit,
                        std::function<void(uint64_t)> on_change = nullptr)
      : limit_(limit), on_change_(std::move(on_change)) {}

  // Charges `bytes`; false (nothing charged) when that would pass the limit.
  bool TryCharge(uint64_t bytes);
  void Release(uint64_t bytes);
  uint64_t in_use() const;
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  const std::function<void(uint64_t)> on_change_;
  mutable absl::Mutex mu_;
  uint64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

// Gives freed heap back once the server is idle: a finished call asks for
// it, and a background thread trims whenever `idle()` says no call is in
// progress, once per `period`, for kTrimTicks periods after the last
// request. Deferred and repeated because a call's core job and gRPC's
// write buffers may free memory (the parsed model, observers, response
// chunks) a moment after the call itself ended. Memory freed later still
// (a job thread descheduled for seconds on a loaded machine) is caught by
// the same thread: while idle it trims again whenever the heap's free bytes
// have grown by kRetrimBytes since its last trim, so an idle replica does
// not keep it until some later call.
// Thread-safe; the destructor stops the thread.
class IdleHeapTrimmer {
 public:
  IdleHeapTrimmer(std::function<bool()> idle, absl::Duration period);
  ~IdleHeapTrimmer();
  IdleHeapTrimmer(const IdleHeapTrimmer&) = delete;
  IdleHeapTrimmer& operator=(const IdleHeapTrimmer&) = delete;

  void Request();

 private:
  void Loop();

  static constexpr int kTrimTicks = 6;
  static constexpr uint64_t kRetrimBytes = uint64_t{1} << 20;

  const std::function<bool()> idle_;
  const absl::Duration period_;
  absl::Mutex mu_;
  int ticks_left_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // FreeHeapBytes() after the last trim; the loop thread's own.
  uint64_t free_after_trim_ = 0;
  std::thread thread_;
};

// Makes room in `buffer` for `more` bytes of a model of `declared` bytes:
// the whole declared size at once, when the first bytes arrive, so the
// model is never copied as it grows (growing by doubling copied it up to
// twice more and faulted in each new buffer). That takes address space,
// not memory: a buffer this size is a fresh mapping (or the untouched top
// of the heap) whose pages the kernel commits as bytes are written, so
// resident memory still follows the bytes that actually arrived; the
// upload budget bounds the declared sizes. RESOURCE_EXHAUSTED when the
// allocation fails (the process stays up).
absl::Status ReserveModelBytes(std::string* buffer, uint64_t more,
                               uint64_t declared);

}  // namespace quantd::server

#endif  // QUANTD_SERVER_MEMORY_H_
