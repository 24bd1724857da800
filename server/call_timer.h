// Runs callbacks at given times, on one thread of its own: the server's cap
// on how long a call may take (--max_call_duration) fires from here.
#ifndef QUANTD_SERVER_CALL_TIMER_H_
#define QUANTD_SERVER_CALL_TIMER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace quantd::server {

class CallTimer {
 public:
  CallTimer();
  // Joins the thread; callbacks still pending are dropped, not run.
  ~CallTimer();

  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

  // Runs `fn` on the timer's thread at `when` (at once if past); returns an
  // id for Cancel (never 0). Callbacks run one at a time, so each should be
  // quick.
  uint64_t Schedule(absl::Time when, std::function<void()> fn);
  // True when `id` was still pending: it is removed and will never run.
  // False when it already ran, is running now, or never existed.
  bool Cancel(uint64_t id);

 private:
  void Loop();

  absl::Mutex mu_;
  absl::CondVar changed_;
  // By (time, id): the first entry is the next to run.
  std::map<std::pair<absl::Time, uint64_t>, std::function<void()>> pending_
      ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::Time> times_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_CALL_TIMER_H_
