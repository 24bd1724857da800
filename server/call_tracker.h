// Quantize/Calibrate calls in progress and whether the server is draining:
// what shutdown waits on, and what tells an idle server to give memory back.
#ifndef QUANTD_SERVER_CALL_TRACKER_H_
#define QUANTD_SERVER_CALL_TRACKER_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace quantd::server {

// Thread-safe.
class CallTracker {
 public:
  // Counts a new call in; false (and not counted) when draining.
  bool Enter();
  // A call counted by Enter is done.
  void Exit();
  void StartDraining();
  bool draining() const;
  int active() const;
  // Blocks until no call is in progress or `deadline`; returns the calls
  // still in progress.
  int WaitIdle(absl::Time deadline);

 private:
  mutable absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_CALL_TRACKER_H_
