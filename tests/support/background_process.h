// Long-running helper processes for end-to-end tests (Prometheus, say), and
// free loopback ports to start them on. No GoogleTest assertions here.
#ifndef QUANTD_TESTS_SUPPORT_BACKGROUND_PROCESS_H_
#define QUANTD_TESTS_SUPPORT_BACKGROUND_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace quantd::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for
// port 0), for programs that cannot pick their own; -1 on failure. Another
// process may take it before it is used, which on a test machine is rare.
int FreePort();

// Runs argv in the background with stdout and stderr appended to
// `log_file`; killed (SIGKILL) on destruction if still running.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv,
                    const std::string& log_file);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Whether it has exited (reaps it if so).
  bool Exited();
  // SIGTERM, then waits; the exit code, -1 if killed by a signal or not
  // running.
  int Terminate();

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_BACKGROUND_PROCESS_H_
