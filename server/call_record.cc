#include "server/call_record.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/status.h"

namespace quantd::server {
namespace {

// The client's x-request-id, made safe for a log line: printable ASCII
// without spaces or quotes (anything else becomes '_'), at most
// kMaxRequestIdChars; empty when the client sent none.
std::string ClientRequestId(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kRequestIdKey);
  if (it == metadata.end()) return "";
  std::string id(it->second.data(),
                 std::min(it->second.size(), kMaxRequestIdChars));
  for (char& c : id) {
    if (c < 0x21 || c > 0x7e || c == '"') c = '_';
  }
  return id;
}

// A fresh id for a call whose client sent none: 16 random hex digits.
std::string GenerateRequestId() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return absl::StrFormat("%016x", gen());
}

}  // namespace

void CallRecord::Begin(const char* call_method,
                       grpc::CallbackServerContext* call) {
  method = call_method;
  context = call;
  start = absl::Now();
  request_id = ClientRequestId(*call);
  if (request_id.empty()) request_id = GenerateRequestId();
  call->AddInitialMetadata(kRequestIdKey, request_id);
}

std::string CapForLog(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  return absl::StrCat(text.substr(0, max_bytes), "... [",
                      text.size() - max_bytes, " more bytes cut]");
}

void RecordCall(Metrics* metrics, const CallRecord& call,
                const grpc::Status& status) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - call.start);
  metrics->RecordCall(call.method, status.error_code(), seconds);
  metrics->AddModelBytesIn(call.bytes_in);
  metrics->AddModelBytesOut(call.bytes_out);
  const std::string detail =
      status.ok() ? ""
                  : absl::StrFormat(" message=\"%s\"",
                                    CapForLog(status.error_message(),
                                              kMaxLoggedMessageBytes));
  const std::string batches =
      call.batches.load() == 0
          ? ""
          : absl::StrFormat(" calibration_batches=%d", call.batches.load());
  absl::FPrintF(stderr,
                "quantd call method=%s request_id=%s code=%s duration_s=%.3f "
                "bytes_in=%d bytes_out=%d%s peer=%s%s\n",
                call.method, call.request_id,
                StatusCodeName(status.error_code()), seconds,
                call.bytes_in.load(), call.bytes_out.load(), batches,
                call.context->peer(), detail);
}

}  // namespace quantd::server
