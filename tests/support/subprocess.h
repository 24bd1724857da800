// Runs the real binaries (quantd, quantctl, node) from tests and benchmarks.
// No GoogleTest assertions here: callers decide what a failure means.
#ifndef QUANTD_TESTS_SUPPORT_SUBPROCESS_H_
#define QUANTD_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

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
  // Starts `binary` (default: QUANTD_SERVER_BIN) with --port=0
  // --metrics_port=0 plus `extra` flags, and waits (up to 30 s) for its
  // "listening on" line. ok() tells whether it came up. The server's stderr
  // goes to the test's stderr, or to the file `stderr_file` (created or
  // truncated) when not empty.
  explicit ServerProcess(const std::vector<std::string>& extra = {},
                         const std::string& binary = QUANTD_SERVER_BIN,
                         const std::string& stderr_file = "");
  ~ServerProcess();

  bool ok() const { return port_ > 0; }
  // What the server printed before it was ready (or before it failed).
  const std::string& startup_output() const { return startup_output_; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // Sends SIGTERM and returns the exit code (-1 if killed by a signal).
  int Terminate();
  // Waits for the server to exit on its own; the same return value.
  int Wait();

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  int metrics_port_ = -1;
  std::string startup_output_;
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

// A field of /proc/<pid>/status in bytes (e.g. "VmRSS", "VmHWM"); -1 if
// unreadable.
int64_t ProcStatusBytes(pid_t pid, const std::string& field);
// Resets the peak resident set size (VmHWM) of `pid` to its current RSS.
bool ResetPeakRss(pid_t pid);

// The RSS an idle process settles at: sampled every 100 ms until it has not
// fallen for 3.5 s, for at most `limit`. quantd's idle trimmer trims twice a
// second for 3 s after the last call ends (server/memory.h); memory a job
// frees a moment after its call must be counted only once a trim has had
// the chance to return it (a 1 s window read a loaded CI machine too early).
int64_t SettledRssBytes(pid_t pid, absl::Duration limit);

// The `count` mappings of `pid` holding the most resident memory, largest
// first, one per line: what an RSS failure needs to be understood (a malloc
// arena, code pages, ...).
std::string TopMappings(pid_t pid, int count);

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_SUBPROCESS_H_
