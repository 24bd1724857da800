// Runs the real binaries (quantd, quantctl, node) from tests.
#ifndef QUANTD_TESTS_SUPPORT_SUBPROCESS_H_
#define QUANTD_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace quantd::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal.
  std::string out;
  std::string err;
};

// Runs argv to completion (with `env` entries "K=V" added to the
// environment) and captures stdout and stderr.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {});

// A quantd server started on free ports for one test; killed on destruction.
class ServerProcess {
 public:
  // Starts QUANTD_SERVER_BIN with --port=0 --metrics_port=0 plus `extra`
  // flags, and waits for its "listening on" line.
  explicit ServerProcess(const std::vector<std::string>& extra = {});
  ~ServerProcess();

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // Sends SIGTERM and returns the exit code (-1 if killed by a signal).
  int Terminate();

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  int metrics_port_ = -1;
};

// A fresh temporary directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFileOrDie(const std::string& path, const std::string& contents);

// GET http://127.0.0.1:port/path; returns the body ("" on failure).
std::string HttpGet(int port, const std::string& path);

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_SUBPROCESS_H_
