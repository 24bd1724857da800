// quantd: the quantization server binary. The only place with flags; they map
// onto Server::Options.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/auth.h"
#include "server/server.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 50051, "gRPC port; 0 picks a free one.");
ABSL_FLAG(int, metrics_port, 9464,
          "Prometheus /metrics port; 0 picks a free one, -1 disables.");
ABSL_FLAG(int, threads, 0, "Core worker threads; 0 = one per CPU.");
ABSL_FLAG(uint64_t, max_model_bytes, uint64_t{1} << 30,
          "Largest model a client may send, in bytes, its external data "
          "stream included; a larger declared config.model_size_bytes + "
          "external_data_bytes is RESOURCE_EXHAUSTED before any model byte "
          "is read.");
ABSL_FLAG(uint64_t, max_uploading_bytes, uint64_t{2} << 30,
          "Model bytes all calls still uploading or waiting in the job queue "
          "may hold together (each call's declared config.model_size_bytes, "
          "from its config until its job starts); a call that would pass it "
          "is "
          "RESOURCE_EXHAUSTED at once. 0 = no budget.");
ABSL_FLAG(int64_t, max_observer_bytes, int64_t{256} << 20,
          "Memory one call's calibration observers may take (histograms x "
          "bins x channels, per-channel statistics); a calibration that needs "
          "more is RESOURCE_EXHAUSTED naming this flag.");
ABSL_FLAG(uint64_t, max_calibration_batches, 100000,
          "Most calibration batches one call may send.");
ABSL_FLAG(uint64_t, calibration_queue_batches, 4,
          "Calibration batches buffered per call before the server stops "
          "reading the stream (flow control).");
ABSL_FLAG(int, max_concurrent_jobs, 0,
          "Quantize/Calibrate jobs running at once. 0 = twice the core "
          "threads.");
ABSL_FLAG(int, max_queued_jobs, -1,
          "Calls (model received) waiting for a job slot when all "
          "--max_concurrent_jobs are taken, first come first served; one more "
          "is RESOURCE_EXHAUSTED at once. Each holds its model in memory, "
          "charged to --max_uploading_bytes until it gets its slot. A "
          "waiting call whose deadline passes or that is cancelled leaves the "
          "queue. -1 = twice --max_concurrent_jobs; 0 = no queue: refuse at "
          "once.");
ABSL_FLAG(int64_t, max_tensor_elements, int64_t{1} << 28,
          "Most elements of any one tensor in a model: initializers, Constant "
          "values, declared graph inputs (known dims), subgraphs and functions "
          "included; more is INVALID_ARGUMENT right after the parse. Also the "
          "most any tensor a model run makes may hold (calibration, fidelity, "
          "a Loop's stacked outputs; RESOURCE_EXHAUSTED naming the node), "
          "checked before it is allocated. 0 = no limit.");
ABSL_FLAG(int64_t, max_graph_nodes, 1000000,
          "Most nodes in a model, subgraphs and functions included; more is "
          "INVALID_ARGUMENT right after the parse. 0 = no limit.");
ABSL_FLAG(absl::Duration, max_call_duration, absl::Minutes(30),
          "Longest a Quantize/Calibrate call may take, whatever deadline the "
          "client set (or none): past it the call ends DEADLINE_EXCEEDED and "
          "its job is cancelled. 0 = no cap.");
ABSL_FLAG(absl::Duration, max_connection_age, absl::Minutes(5),
          "Connections older than this get a GOAWAY once their calls are "
          "done, so long-lived clients re-resolve DNS and spread onto "
          "replicas added since (e.g. by an autoscaler). 0 = never.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM server certificate (chain); with --tls_key_file, serve TLS.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle; when set, mutual TLS: clients must present a "
          "certificate signed by it.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the bearer token (surrounding whitespace trimmed); "
          "when set, QuantizationService calls need "
          "'authorization: Bearer <token>'. Health and reflection stay open.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long running calls get to finish.");
ABSL_FLAG(absl::Duration, shutdown_force_after, absl::Seconds(5),
          "Once the grace is over and the remaining calls are cancelled, how "
          "long their jobs get to stop before quantd exits (code 1) without "
          "them. A second SIGTERM/SIGINT while draining exits at once.");

namespace {

constexpr int kExitUsage = 2;

// The whole file, or nullopt (with a message on stderr) when unreadable.
std::optional<std::string> ReadFlagFile(const char* flag,
                                        const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  if (in) contents << in.rdbuf();
  if (!in || in.bad()) {
    absl::FPrintF(stderr, "quantd: --%s=%s: cannot read the file\n", flag,
                  path);
    return std::nullopt;
  }
  return contents.str();
}

// Set once Server::Shutdown has returned: the process is exiting cleanly.
std::atomic<bool> drained{false};

// The drain's backstop, run after the first signal: waits for a second
// SIGTERM/SIGINT or for `deadline`, then ends the process without waiting
// for the calls still running. Server::Shutdown waits for every job it
// cancelled, and a job inside a library call that never returns (or never
// polls its cancellation) would otherwise keep a terminating replica alive
// until the kubelet's SIGKILL, serving nothing. Returns only if sigtimedwait
// fails for a reason other than a timeout or an interruption.
void ExitOnSecondSignalOrAt(sigset_t signals, absl::Time deadline) {
  for (;;) {
    int signal = 0;
    if (deadline == absl::InfiniteFuture()) {
      if (sigwait(&signals, &signal) != 0) return;
    } else {
      const absl::Duration left =
          std::max(deadline - absl::Now(), absl::ZeroDuration());
      const timespec wait = absl::ToTimespec(left);
      signal = sigtimedwait(&signals, nullptr, &wait);
      if (signal < 0 && errno == EINTR) continue;
      if (signal < 0 && errno != EAGAIN) return;
    }
    if (drained.load()) return;
    if (signal > 0) {
      absl::FPrintF(stderr,
                    "quantd: signal %d while draining: exiting without "
                    "waiting for the running calls\n",
                    signal);
    } else {
      absl::FPrintF(stderr,
                    "quantd: calls still running past the grace period "
                    "and --shutdown_force_after: exiting without them\n");
    }
    std::_Exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "quantd: quantizes ONNX models over gRPC "
      "(quantd.v1.QuantizationService)");
  absl::ParseCommandLine(argc, argv);

#if defined(__GLIBC__)
  // One malloc arena instead of glibc's eight per core. A call's big buffers
  // (model chunks, tensors) are freed on other threads than the ones that
  // allocated them; with many arenas each keeps its own freed pages, and
  // malloc_trim cannot give back the top of any arena but the main one, so
  // an idle replica kept 35-40 MB it no longer used after a 48 MB call
  // (hostile_e2e_test's IdleServerGivesMemoryBack, 2 of 6 runs; with one
  // arena its RSS settles within 3 MB of the baseline). Small allocations
  // come from per-thread caches and never take the arena lock; ResNet-18
  // Quantize times did not move (docs/benchmarks.md). A fixed
  // M_MMAP_THRESHOLD of 1-4 MiB also kept RSS flat but made ResNet-18 calls
  // 30-50% slower (page faults on every big buffer).
  mallopt(M_ARENA_MAX, 1);
#endif

  // Blocked before any thread starts, so every thread inherits the mask and
  // the signals are only ever taken by sigwait below: no work in a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  quantd::server::Server::Options options;
  options.listen.host = absl::GetFlag(FLAGS_host);
  options.listen.port = absl::GetFlag(FLAGS_port);
  options.metrics.enabled = absl::GetFlag(FLAGS_metrics_port) >= 0;
  options.metrics.host = options.listen.host;
  options.metrics.port = absl::GetFlag(FLAGS_metrics_port);
  options.core.threads = absl::GetFlag(FLAGS_threads);
  options.limits.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  options.limits.max_uploading_bytes = absl::GetFlag(FLAGS_max_uploading_bytes);
  options.limits.max_observer_bytes = absl::GetFlag(FLAGS_max_observer_bytes);
  options.limits.max_calibration_batches =
      absl::GetFlag(FLAGS_max_calibration_batches);
  options.limits.calibration_queue_batches =
      absl::GetFlag(FLAGS_calibration_queue_batches);

  options.limits.max_concurrent_jobs = absl::GetFlag(FLAGS_max_concurrent_jobs);
  if (options.limits.max_concurrent_jobs < 0) {
    absl::FPrintF(stderr,
                  "quantd: --max_concurrent_jobs must be >= 0 (0: twice the "
                  "core threads)\n");
    return kExitUsage;
  }
  options.limits.max_queued_jobs = absl::GetFlag(FLAGS_max_queued_jobs);
  options.limits.max_tensor_elements = absl::GetFlag(FLAGS_max_tensor_elements);
  options.limits.max_graph_nodes = absl::GetFlag(FLAGS_max_graph_nodes);
  options.limits.max_call_duration = absl::GetFlag(FLAGS_max_call_duration);
  options.limits.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  if (options.limits.max_queued_jobs < -1) {
    absl::FPrintF(stderr,
                  "quantd: --max_queued_jobs must be >= -1 (-1: twice "
                  "--max_concurrent_jobs, 0: no queue)\n");
    return kExitUsage;
  }
  if (options.limits.max_connection_age < absl::ZeroDuration() ||
      options.limits.max_tensor_elements < 0 ||
      options.limits.max_graph_nodes < 0 ||
      options.limits.max_call_duration < absl::ZeroDuration()) {
    absl::FPrintF(stderr,
                  "quantd: --max_tensor_elements, "
                  "--max_graph_nodes, --max_call_duration and "
                  "--max_connection_age must be >= 0 "
                  "(0: none / no limit)\n");
    return kExitUsage;
  }
  if (absl::GetFlag(FLAGS_shutdown_grace) < absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_shutdown_force_after) < absl::ZeroDuration()) {
    absl::FPrintF(stderr,
                  "quantd: --shutdown_grace and --shutdown_force_after must "
                  "be >= 0\n");
    return kExitUsage;
  }

  // Secrets are read here, once, at startup; the library takes PEM strings.
  const std::string cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key_file = absl::GetFlag(FLAGS_tls_key_file);
  const std::string client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  if (cert_file.empty() != key_file.empty()) {
    absl::FPrintF(stderr,
                  "quantd: --tls_cert_file and --tls_key_file go together: "
                  "give both (TLS) or neither (plaintext)\n");
    return kExitUsage;
  }
  if (!client_ca_file.empty() && cert_file.empty()) {
    absl::FPrintF(stderr,
                  "quantd: --tls_client_ca_file (mutual TLS) needs "
                  "--tls_cert_file and --tls_key_file\n");
    return kExitUsage;
  }
  const struct {
    const char* flag;
    const std::string& path;
    std::string* out;
  } files[] = {
      {"tls_cert_file", cert_file, &options.tls.cert_pem},
      {"tls_key_file", key_file, &options.tls.key_pem},
      {"tls_client_ca_file", client_ca_file, &options.tls.client_ca_pem},
  };
  for (const auto& file : files) {
    if (file.path.empty()) continue;
    std::optional<std::string> contents = ReadFlagFile(file.flag, file.path);
    if (!contents.has_value()) return kExitUsage;
    *file.out = std::move(*contents);
  }
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file);
      !path.empty()) {
    std::optional<std::string> contents = ReadFlagFile("auth_token_file", path);
    if (!contents.has_value()) return kExitUsage;
    options.auth.bearer_token = quantd::server::TrimToken(*contents);
    if (options.auth.bearer_token.empty()) {
      absl::FPrintF(stderr, "quantd: --auth_token_file=%s is empty\n", path);
      return kExitUsage;
    }
  }

  quantd::server::Server server(options);
  if (absl::Status status = server.Start(); !status.ok()) {
    absl::FPrintF(stderr, "quantd: %s\n", status.ToString());
    return 1;
  }
  // Tests and scripts parse this line for the chosen port.
  absl::PrintF(
      "quantd listening on %s:%d (metrics on :%d, %d core threads, "
      "max %d jobs + %d queued, %s%s)\n",
      options.listen.host, server.selected_port(), server.metrics_port(),
      server.core_threads(), server.max_concurrent_jobs(),
      server.max_queued_jobs(),
      options.tls.cert_pem.empty()
          ? "plaintext"
          : (options.tls.client_ca_pem.empty() ? "TLS" : "mutual TLS"),
      options.auth.bearer_token.empty() ? "" : ", bearer token");
  std::fflush(stdout);

  const absl::Duration grace = absl::GetFlag(FLAGS_shutdown_grace);
  const absl::Duration force_after = absl::GetFlag(FLAGS_shutdown_force_after);
  std::thread signal_waiter([&server, &signals, grace, force_after] {
    int signal = 0;
    sigwait(&signals, &signal);
    absl::FPrintF(stderr,
                  "quantd: signal %d: NOT_SERVING, draining (grace %s, "
                  "forced exit %s after it)\n",
                  signal, absl::FormatDuration(grace),
                  absl::FormatDuration(force_after));
    const absl::Time grace_end = absl::Now() + grace;
    // Detached: when the drain ends in time, main returns and the process
    // exits with this thread still waiting.
    std::thread(ExitOnSecondSignalOrAt, signals, grace_end + force_after)
        .detach();
    server.Shutdown(grace_end);
    drained.store(true);
  });
  server.Wait();
  signal_waiter.join();
  absl::FPrintF(stderr, "quantd: stopped\n");
  return 0;
}
