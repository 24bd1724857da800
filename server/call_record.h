// Who a call is and how it ended: its request id (the client's, sanitized,
// or a fresh one), byte counts, and the one metrics update and log line
// every call gets when it finishes.
#ifndef QUANTD_SERVER_CALL_RECORD_H_
#define QUANTD_SERVER_CALL_RECORD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/metrics.h"

namespace quantd::server {

// The metadata key of a call's request id: taken from the client when it
// sends one (sanitized), else generated; always sent back in the initial
// metadata and logged with the call.
inline constexpr char kRequestIdKey[] = "x-request-id";
// Longest client-supplied request id kept (longer ones are truncated).
inline constexpr size_t kMaxRequestIdChars = 128;
// Longest status message a log line repeats; the rest is cut with a count.
inline constexpr size_t kMaxLoggedMessageBytes = 4096;

struct CallRecord {
  // Fills in the call's identity and start, and sends its request id back
  // in the initial metadata (so must run before anything is sent).
  void Begin(const char* call_method, grpc::CallbackServerContext* call);

  const char* method = "";
  const grpc::CallbackServerContext* context = nullptr;
  std::string request_id;
  absl::Time start;
  // Atomic: a call may finish (cancelled) on another thread while a chunk is
  // still being counted.
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> batches{0};
};

// One metrics update and one log line (on stderr) for a finished call.
void RecordCall(Metrics* metrics, const CallRecord& call,
                const grpc::Status& status);

// `text` cut to at most `max_bytes` (plus a note of how much was cut).
std::string CapForLog(const std::string& text, size_t max_bytes);

}  // namespace quantd::server

#endif  // QUANTD_SERVER_CALL_RECORD_H_
