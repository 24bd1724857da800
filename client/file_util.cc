#include "client/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/huge_pages.h"
#include "core/base/status_macros.h"

namespace quantd::client {
namespace {

absl::Status ErrnoError(int error, absl::string_view what,
                        const std::string& path) {
  const std::string message =
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error));
  return error == ENOENT ? absl::NotFoundError(message)
                         : absl::InvalidArgumentError(message);
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, "read", path);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError(error, "read", path);
  }
  // A regular file is read straight into a string of its size (models are
  // hundreds of MB: one allocation, each page touched once). The size is
  // only a hint: a file that grows or shrinks meanwhile, or has none (a pipe,
  // /proc), is read to its end all the same.
  std::string contents;
  if (S_ISREG(info.st_mode) && info.st_size > 0) {
    contents.reserve(static_cast<size_t>(info.st_size));
    AdviseHugePages(contents.data(), contents.capacity());
    contents.resize(static_cast<size_t>(info.st_size));
  }
  size_t length = 0;
  int error = 0;
  for (;;) {
    char probe[4096];
    // Full: the next read should find the end. Into `probe`, so that a file
    // of exactly the expected size does not grow the string.
    const bool full = length == contents.size();
    const ssize_t n =
        full ? read(fd, probe, sizeof(probe))
             : read(fd, &contents[length], contents.size() - length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      break;
    }
    if (n == 0) break;
    if (full) {
      contents.resize(
          std::max(2 * contents.size(), length + (size_t{64} << 10)));
      std::memcpy(&contents[length], probe, static_cast<size_t>(n));
    }
    length += static_cast<size_t>(n);
  }
  close(fd);
  if (error != 0) return ErrnoError(error, "read", path);
  contents.resize(length);
  return contents;
}

absl::StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(
    const std::string& path) {
  std::string temp = absl::StrCat(path, ".tmp.XXXXXX");
  std::vector<char> temp_buffer(temp.begin(), temp.end());
  temp_buffer.push_back('\0');
  const int fd = mkostemp(temp_buffer.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "create a temporary file for", path);
  // mkstemp creates 0600; give the output the usual permissions.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  return std::unique_ptr<AtomicFile>(
      new AtomicFile(path, std::string(temp_buffer.data()), fd));
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) close(fd_);
  unlink(temp_.c_str());
}

absl::Status AtomicFile::Append(absl::string_view bytes) {
  if (committed_ || fd_ < 0) {
    return status_.ok() ? absl::FailedPreconditionError(
                              absl::StrCat(path_, " was already written"))
                        : status_;
  }
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0 && status_.ok()) {
    const ssize_t n = write(fd_, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status_ = ErrnoError(errno, "write", temp_);
    } else {
      data += n;
      left -= static_cast<size_t>(n);
      size_ += static_cast<uint64_t>(n);
    }
  }
  return status_;
}

absl::Status AtomicFile::Commit() {
  if (committed_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " was already written"));
  }
  if (fd_ < 0) return status_;  // A failed Commit before.
  if (status_.ok() && fsync(fd_) != 0) {
    status_ = ErrnoError(errno, "sync", temp_);
  }
  if (close(fd_) != 0 && status_.ok()) {
    status_ = ErrnoError(errno, "close", temp_);
  }
  fd_ = -1;
  if (status_.ok() && std::rename(temp_.c_str(), path_.c_str()) != 0) {
    status_ = ErrnoError(errno, "rename into", path_);
  }
  // The destructor removes the temporary file after a failure.
  committed_ = status_.ok();
  return status_;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents) {
  QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file,
                          AtomicFile::Create(path));
  QUANTD_RETURN_IF_ERROR(file->Append(contents));
  return file->Commit();
}

}  // namespace quantd::client
