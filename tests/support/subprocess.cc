#include "tests/support/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace quantd::testing {
namespace {

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> EnvWith(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Reads both pipes until EOF without deadlocking on a full pipe.
void Drain(int out_fd, int err_fd, std::string* out, std::string* err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {out, err};
  int open = 2;
  char buf[65536];
  while (open > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  CommandResult result;
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return result;
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = EnvWith(env);
  std::vector<char*> cargs = CStrings(args);
  std::vector<char*> cenv = CStrings(envs);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execvpe(cargs[0], cargs.data(), cenv.data());
    perror("execvpe");
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Drain(out_pipe[0], err_pipe[0], &result.out, &result.err);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

ServerProcess::ServerProcess(const std::vector<std::string>& extra,
                             const std::string& binary,
                             const std::string& stderr_file) {
  int out_pipe[2];
  if (pipe(out_pipe) != 0) return;
  std::vector<std::string> args = {binary, "--port=0", "--metrics_port=0",
                                   "--host=127.0.0.1"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> cargs = CStrings(args);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out_pipe[1], 1);
    close(out_pipe[0]);
    if (!stderr_file.empty()) {
      int err = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, 2);
    }
    execv(cargs[0], cargs.data());
    perror("execv");
    _exit(127);
  }
  close(out_pipe[1]);
  // Wait (bounded) for "quantd listening on HOST:PORT (metrics on :MPORT".
  std::string text;
  const std::regex re(
      "listening on [^ ]*:([0-9]+) \\(metrics on [^ ]*:([0-9]+)");
  std::smatch m;
  pollfd fd = {out_pipe[0], POLLIN, 0};
  for (int waited_ms = 0; waited_ms < 30000;) {
    if (poll(&fd, 1, 100) > 0) {
      char buf[4096];
      ssize_t n = read(out_pipe[0], buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, n);
      if (std::regex_search(text, m, re)) {
        port_ = std::stoi(m[1]);
        metrics_port_ = std::stoi(m[2]);
        break;
      }
    } else {
      waited_ms += 100;
    }
  }
  // Keep the pipe's read end open in a thread that discards later output so
  // the server never blocks on a full stdout pipe.
  std::thread([fd = out_pipe[0]] {
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    close(fd);
  }).detach();
  startup_output_ = text;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

int ServerProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return Wait();
}

int ServerProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TempDir::TempDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "quantd-test-XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  if (dir == nullptr) std::perror("mkdtemp");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFileOrDie(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoll(line.substr(field.size() + 1)) * 1024;  // kB.
    }
  }
  return -1;
}

int64_t SettledRssBytes(pid_t pid, absl::Duration limit) {
  int64_t lowest = ProcStatusBytes(pid, "VmRSS");
  absl::Time lowest_at = absl::Now();
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end &&
         absl::Now() - lowest_at < absl::Milliseconds(3500)) {
    absl::SleepFor(absl::Milliseconds(100));
    const int64_t rss = ProcStatusBytes(pid, "VmRSS");
    if (rss < lowest) {
      lowest = rss;
      lowest_at = absl::Now();
    }
  }
  return lowest;
}

std::string TopMappings(pid_t pid, int count) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  std::vector<std::pair<int64_t, std::string>> rows;
  std::string line, mapping;
  while (std::getline(in, line)) {
    if (line.rfind("Rss:", 0) == 0) {
      rows.emplace_back(std::stoll(line.substr(4)), mapping);
    } else if (!line.empty() &&
               std::isxdigit(static_cast<unsigned char>(line[0])) &&
               line.find('-') < line.find(' ')) {
      mapping = line;
    }
  }
  std::sort(rows.begin(), rows.end(), std::greater<>());
  std::string out;
  for (int i = 0; i < count && i < static_cast<int>(rows.size()); ++i) {
    out += std::to_string(rows[i].first) + " kB  " + rows[i].second + "\n";
  }
  return out;
}

bool ResetPeakRss(pid_t pid) {
  // Writing 5 to clear_refs resets VmHWM (Linux >= 4.0).
  std::ofstream out("/proc/" + std::to_string(pid) + "/clear_refs");
  out << "5";
  return static_cast<bool>(out.flush());
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string req =
        "GET " + path +
        " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) body.append(buf, n);
    }
  }
  close(fd);
  size_t header_end = body.find("\r\n\r\n");
  return header_end == std::string::npos ? "" : body.substr(header_end + 4);
}

}  // namespace quantd::testing
