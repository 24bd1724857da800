#include "client/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

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
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError(errno, "read", path);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return ErrnoError(errno, "read", path);
  return contents.str();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents) {
  // Same directory as the target, so the rename cannot cross filesystems.
  std::string temp = absl::StrCat(path, ".tmp.XXXXXX");
  std::vector<char> temp_buffer(temp.begin(), temp.end());
  temp_buffer.push_back('\0');
  const int fd = mkstemp(temp_buffer.data());
  if (fd < 0) return ErrnoError(errno, "create a temporary file for", path);
  temp = temp_buffer.data();
  // mkstemp creates 0600; give the output the usual permissions.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);

  absl::Status status;
  const char* data = contents.data();
  size_t left = contents.size();
  while (left > 0 && status.ok()) {
    const ssize_t n = write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = ErrnoError(errno, "write", temp);
    } else {
      data += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (status.ok() && fsync(fd) != 0) status = ErrnoError(errno, "sync", temp);
  if (close(fd) != 0 && status.ok()) status = ErrnoError(errno, "close", temp);
  if (status.ok() && std::rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno, "rename into", path);
  }
  if (!status.ok()) unlink(temp.c_str());
  return status;
}

}  // namespace quantd::client
