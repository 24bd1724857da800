// Whole-file reads and atomic writes for quantctl.
#ifndef QUANTD_CLIENT_FILE_UTIL_H_
#define QUANTD_CLIENT_FILE_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

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

// A file written in pieces that appears at `path` whole or not at all: the
// bytes go to a temporary file next to `path` (same directory, so the rename
// cannot cross filesystems), which Commit syncs and renames over `path`.
// Destroyed without a successful Commit, it removes the temporary file.
class AtomicFile {
 public:
  // INVALID_ARGUMENT (NOT_FOUND for a missing directory) naming the path
  // when the temporary file cannot be created.
  static absl::StatusOr<std::unique_ptr<AtomicFile>> Create(
      const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends `bytes`; after a failure every later call fails too.
  absl::Status Append(absl::string_view bytes);
  // The bytes appended so far.
  uint64_t size() const { return size_; }
  // Syncs, closes and renames into place. Once.
  absl::Status Commit();

 private:
  AtomicFile(std::string path, std::string temp, int fd)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}

  std::string path_;
  std::string temp_;
  int fd_;
  uint64_t size_ = 0;
  absl::Status status_;
  bool committed_ = false;
};

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_FILE_UTIL_H_
