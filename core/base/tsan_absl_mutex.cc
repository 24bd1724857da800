// ThreadSanitizer builds only: tells TSan about absl::Mutex, absl::CondVar and
// absl::Notification, which Debian's uninstrumented Abseil hides from it.
//
// Debian ships libabsl_synchronization.so built without -fsanitize=thread, so
// TSan never sees a Mutex being locked or unlocked and reports every access
// the Mutex orders as a race. This file defines the library's out-of-line
// member functions again, in the executable (CMakeLists.txt links it into
// every executable of a TSan build, and nowhere else). The dynamic linker
// binds every call to them to these definitions: calls from our code, from
// gRPC (which uses absl::Mutex and absl::CondVar too) and the library's own
// calls through its PLT (Notification::Notify calls Mutex::Lock that way).
// Each definition calls the library's original, found with dlsym(RTLD_NEXT),
// and adds the happens-before edge the operation implies:
//   - after a lock is obtained: __tsan_acquire. Lock, successful TryLock,
//     LockWhen*, and the relock at the end of Await* and CondVar::Wait*.
//   - before a lock is given up: __tsan_release. Unlock, and Await* and
//     CondVar::Wait*, which unlock inside.
// As TSan's own mutexes do, a writer releases to the Mutex's address and a
// reader to a second address (the Mutex's second byte): a reader acquires
// only what writers released, a writer both, so two readers are not ordered.
//
// absl evaluates a waiter's Condition in whichever thread holds the Mutex at
// the time: the waiter in Await/LockWhen before it returns, or another thread
// inside Unlock (UnlockSlow hands the Mutex to a waiter whose Condition holds)
// or inside CondVar::Wait. The evaluation is always under the lock, but TSan
// would see it before our acquire or after our release. So each original is
// called with the thread's memory accesses ignored: the only instrumented
// code the library runs is Condition functions, which only read, under the
// lock. This is what an instrumented Abseil does (EvalConditionIgnored).
//
// Kept simple on purpose:
//   - Await* and CondVar::Wait* treat the Mutex as held for writing (a reader
//     waiting would order readers among themselves): more order, never less.
//   - Notification::HasBeenNotified is inline and reads an atomic the library
//     writes, so it gives no edge; our code only uses WaitForNotification*.
//   - CondVar::Signal needs nothing: the Mutex orders the waiter.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#if !defined(__SANITIZE_THREAD__)
#error "tsan_absl_mutex.cc belongs only in a -fsanitize=thread build"
#endif
#if !ABSL_OPTION_USE_INLINE_NAMESPACE
#error "the mangled names below assume Abseil's inline namespace"
#endif

// Exported by the TSan runtime, not declared in GCC 12's tsan_interface.h:
// ignore (or stop ignoring) this thread's memory accesses; synchronisation
// is still seen.
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();

namespace {

#define QUANTD_TSAN_STR2(x) #x
#define QUANTD_TSAN_STR(x) QUANTD_TSAN_STR2(x)

// The library's definition of a member, by its mangled name without the
// leading "_ZN4absl<namespace>" (substitutions such as NS0_ do not depend on
// the namespace's name); a const member starts with "K", which the mangling
// puts right after "_ZN". Aborts if it is missing: running on silently
// without the annotations would make every report unreadable again.
void* Original(const char* member) {
  const std::string ns = QUANTD_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const bool is_const = member[0] == 'K';
  const std::string name = std::string(is_const ? "_ZNK" : "_ZN") + "4absl" +
                           std::to_string(ns.size()) + ns +
                           (is_const ? member + 1 : member);
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found after the executable\n",
                 name.c_str());
    std::abort();
  }
  return fn;
}

// Resolved once, on first use (possibly before main: gRPC locks early).
#define QUANTD_TSAN_ORIGINAL(type, member)                           \
  ([]() -> type {                                                    \
    static const type fn = reinterpret_cast<type>(Original(member)); \
    return fn;                                                       \
  }())

// The TSan sync objects of a Mutex: writers release to the first, readers to
// the second.
void* WriterClock(const absl::Mutex* mu) {
  return const_cast<absl::Mutex*>(mu);
}
void* ReaderClock(const absl::Mutex* mu) {
  static_assert(sizeof(absl::Mutex) >= 2, "the reader clock is byte 1");
  return reinterpret_cast<char*>(const_cast<absl::Mutex*>(mu)) + 1;
}

void AcquiredForWriting(const absl::Mutex* mu) {
  __tsan_acquire(WriterClock(mu));
  __tsan_acquire(ReaderClock(mu));
}
void AcquiredForReading(const absl::Mutex* mu) {
  __tsan_acquire(WriterClock(mu));
}

// Runs the library's code with this thread's memory accesses ignored (see
// the top of the file: a Condition may run inside).
class IgnoreAccesses {
 public:
  IgnoreAccesses() { __tsan_ignore_thread_begin(); }
  ~IgnoreAccesses() { __tsan_ignore_thread_end(); }
  IgnoreAccesses(const IgnoreAccesses&) = delete;
  IgnoreAccesses& operator=(const IgnoreAccesses&) = delete;
};

using Cond = absl::Condition;
using absl::Duration;
using absl::Mutex;
using absl::Time;

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  using Fn = void (*)(Mutex*);
  // A later Mutex at this address (on the stack, say) must not inherit the
  // order this one established.
  __tsan_mutex_destroy(WriterClock(this), 0);
  __tsan_mutex_destroy(ReaderClock(this), 0);
  QUANTD_TSAN_ORIGINAL(Fn, "5MutexD1Ev")(this);
}

void Mutex::Lock() {
  using Fn = void (*)(Mutex*);
  {
    IgnoreAccesses ignore;
    QUANTD_TSAN_ORIGINAL(Fn, "5Mutex4LockEv")(this);
  }
  AcquiredForWriting(this);
}

void Mutex::ReaderLock() {
  using Fn = void (*)(Mutex*);
  {
    IgnoreAccesses ignore;
    QUANTD_TSAN_ORIGINAL(Fn, "5Mutex10ReaderLockEv")(this);
  }
  AcquiredForReading(this);
}

bool Mutex::TryLock() {
  using Fn = bool (*)(Mutex*);
  const bool locked = QUANTD_TSAN_ORIGINAL(Fn, "5Mutex7TryLockEv")(this);
  if (locked) AcquiredForWriting(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  using Fn = bool (*)(Mutex*);
  const bool locked = QUANTD_TSAN_ORIGINAL(Fn, "5Mutex13ReaderTryLockEv")(this);
  if (locked) AcquiredForReading(this);
  return locked;
}

void Mutex::Unlock() {
  using Fn = void (*)(Mutex*);
  __tsan_release(WriterClock(this));
  IgnoreAccesses ignore;
  QUANTD_TSAN_ORIGINAL(Fn, "5Mutex6UnlockEv")(this);
}

void Mutex::ReaderUnlock() {
  using Fn = void (*)(Mutex*);
  __tsan_release(ReaderClock(this));
  IgnoreAccesses ignore;
  QUANTD_TSAN_ORIGINAL(Fn, "5Mutex12ReaderUnlockEv")(this);
}

void Mutex::LockWhen(const Cond& cond) {
  using Fn = void (*)(Mutex*, const Cond&);
  {
    IgnoreAccesses ignore;
    QUANTD_TSAN_ORIGINAL(Fn, "5Mutex8LockWhenERKNS0_9ConditionE")(this, cond);
  }
  AcquiredForWriting(this);
}

void Mutex::ReaderLockWhen(const Cond& cond) {
  using Fn = void (*)(Mutex*, const Cond&);
  {
    IgnoreAccesses ignore;
    QUANTD_TSAN_ORIGINAL(Fn, "5Mutex14ReaderLockWhenERKNS0_9ConditionE")
    (this, cond);
  }
  AcquiredForReading(this);
}

// The *WithTimeout/*WithDeadline forms hold the lock on return either way.
bool Mutex::LockWhenWithTimeout(const Cond& cond, Duration timeout) {
  using Fn = bool (*)(Mutex*, const Cond&, Duration);
  bool met;
  {
    IgnoreAccesses ignore;
    met = QUANTD_TSAN_ORIGINAL(
        Fn, "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE")(
        this, cond, timeout);
  }
  AcquiredForWriting(this);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Cond& cond, Time deadline) {
  using Fn = bool (*)(Mutex*, const Cond&, Time);
  bool met;
  {
    IgnoreAccesses ignore;
    met = QUANTD_TSAN_ORIGINAL(
        Fn, "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
        this, cond, deadline);
  }
  AcquiredForWriting(this);
  return met;
}

bool Mutex::ReaderLockWhenWithTimeout(const Cond& cond, Duration timeout) {
  using Fn = bool (*)(Mutex*, const Cond&, Duration);
  bool met;
  {
    IgnoreAccesses ignore;
    met = QUANTD_TSAN_ORIGINAL(
        Fn,
        "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE")(
        this, cond, timeout);
  }
  AcquiredForReading(this);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Cond& cond, Time deadline) {
  using Fn = bool (*)(Mutex*, const Cond&, Time);
  bool met;
  {
    IgnoreAccesses ignore;
    met = QUANTD_TSAN_ORIGINAL(
        Fn, "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
        this, cond, deadline);
  }
  AcquiredForReading(this);
  return met;
}

void Mutex::Await(const Cond& cond) {
  using Fn = void (*)(Mutex*, const Cond&);
  __tsan_release(WriterClock(this));
  {
    IgnoreAccesses ignore;
    QUANTD_TSAN_ORIGINAL(Fn, "5Mutex5AwaitERKNS0_9ConditionE")(this, cond);
  }
  AcquiredForWriting(this);
}

bool Mutex::AwaitWithTimeout(const Cond& cond, Duration timeout) {
  using Fn = bool (*)(Mutex*, const Cond&, Duration);
  __tsan_release(WriterClock(this));
  bool met;
  {
    IgnoreAccesses ignore;
    met = QUANTD_TSAN_ORIGINAL(
        Fn, "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE")(
        this, cond, timeout);
  }
  AcquiredForWriting(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Cond& cond, Time deadline) {
  using Fn = bool (*)(Mutex*, const Cond&, Time);
  __tsan_release(WriterClock(this));
  bool met;
  {
    IgnoreAccesses ignore;
    met = QUANTD_TSAN_ORIGINAL(
        Fn, "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE")(this, cond,
                                                                     deadline);
  }
  AcquiredForWriting(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  using Fn = void (*)(CondVar*, Mutex*);
  __tsan_release(WriterClock(mu));
  {
    IgnoreAccesses ignore;
    QUANTD_TSAN_ORIGINAL(Fn, "7CondVar4WaitEPNS0_5MutexE")(this, mu);
  }
  AcquiredForWriting(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  using Fn = bool (*)(CondVar*, Mutex*, Duration);
  __tsan_release(WriterClock(mu));
  bool timed_out;
  {
    IgnoreAccesses ignore;
    timed_out = QUANTD_TSAN_ORIGINAL(
        Fn, "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE")(this, mu,
                                                                    timeout);
  }
  AcquiredForWriting(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  using Fn = bool (*)(CondVar*, Mutex*, Time);
  __tsan_release(WriterClock(mu));
  bool timed_out;
  {
    IgnoreAccesses ignore;
    timed_out = QUANTD_TSAN_ORIGINAL(
        Fn, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE")(this, mu,
                                                                 deadline);
  }
  AcquiredForWriting(mu);
  return timed_out;
}

// A waiter that finds the Notification already notified returns without
// touching its Mutex (an uninstrumented atomic load), so the Mutex's edges
// do not cover that path; the Notification's own address carries the edge.
void Notification::Notify() {
  using Fn = void (*)(Notification*);
  __tsan_release(this);
  QUANTD_TSAN_ORIGINAL(Fn, "12Notification6NotifyEv")(this);
}

void Notification::WaitForNotification() const {
  using Fn = void (*)(const Notification*);
  QUANTD_TSAN_ORIGINAL(Fn, "K12Notification19WaitForNotificationEv")(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  using Fn = bool (*)(const Notification*, Duration);
  const bool notified = QUANTD_TSAN_ORIGINAL(
      Fn, "K12Notification30WaitForNotificationWithTimeoutENS0_8DurationE")(
      this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  using Fn = bool (*)(const Notification*, Time);
  const bool notified = QUANTD_TSAN_ORIGINAL(
      Fn, "K12Notification31WaitForNotificationWithDeadlineENS0_4TimeE")(
      this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
