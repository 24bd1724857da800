#include "server/status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace quantd::server {
namespace {

bool IsKnownCode(int code) {
  return code >= static_cast<int>(absl::StatusCode::kOk) &&
         code <= static_cast<int>(absl::StatusCode::kUnauthenticated);
}

// Room kept at the end of a cut message for the note saying what was cut.
constexpr size_t kCutNoteBytes = 96;

}  // namespace

std::string CapStatusMessage(absl::string_view message, size_t max_bytes) {
  if (message.size() <= max_bytes) return std::string(message);
  const size_t budget =
      max_bytes > kCutNoteBytes ? max_bytes - kCutNoteBytes : max_bytes / 2;
  // Prefer to cut between list items, as long as that keeps half the room.
  size_t cut = absl::string_view::npos;
  absl::string_view separator;
  for (absl::string_view sep : {"; ", ", ", "\n"}) {
    const size_t at = message.substr(0, budget).rfind(sep);
    if (at != absl::string_view::npos && at >= budget / 2 &&
        (cut == absl::string_view::npos || at > cut)) {
      cut = at;
      separator = sep;
    }
  }
  if (cut == absl::string_view::npos) {
    cut = budget;
    // Back up to the first byte of a UTF-8 sequence.
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
      --cut;
  }
  const absl::string_view rest = message.substr(cut);
  std::string note;
  if (!separator.empty()) {
    size_t items = 0;
    for (size_t at = rest.find(separator); at != absl::string_view::npos;
         at = rest.find(separator, at + separator.size())) {
      ++items;
    }
    note =
        absl::StrCat(" ... and ", items, " more (", rest.size(), " bytes cut)");
  } else {
    note = absl::StrCat(" ... (", rest.size(), " bytes cut)");
  }
  return absl::StrCat(message.substr(0, cut), note);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  return grpc::Status(IsKnownCode(code) ? static_cast<grpc::StatusCode>(code)
                                        : grpc::StatusCode::UNKNOWN,
                      CapStatusMessage(status.message()));
}

std::string StatusCodeName(grpc::StatusCode code) {
  const int value = static_cast<int>(code);
  if (!IsKnownCode(value)) return "UNKNOWN";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(value));
}

}  // namespace quantd::server
