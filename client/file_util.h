// Whole-file reads and atomic writes for quantctl.
#ifndef QUANTD_CLIENT_FILE_UTIL_H_
#define QUANTD_CLIENT_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quantd::client {

// NOT_FOUND when the file does not exist, INVALID_ARGUMENT for other
// failures; the message names the path and the system's reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `contents` to a temporary file next to `path`, syncs it and renames
// it over `path`: readers see the old file or the whole new one, and a
// failure leaves no partial file behind.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents);

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_FILE_UTIL_H_
