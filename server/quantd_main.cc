// quantd: the quantization server binary. The only place with flags; they map
// onto Server::Options.
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/server.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 50051, "gRPC port; 0 picks a free one.");
ABSL_FLAG(int, metrics_port, 9464,
          "Prometheus /metrics port; 0 picks a free one, -1 disables.");
ABSL_FLAG(int, threads, 0, "Core worker threads; 0 = one per CPU.");
ABSL_FLAG(uint64_t, max_model_bytes, uint64_t{1} << 30,
          "Largest model a client may send, in bytes.");
ABSL_FLAG(uint64_t, max_calibration_batches, 100000,
          "Most calibration batches one call may send.");
ABSL_FLAG(uint64_t, calibration_queue_batches, 4,
          "Calibration batches buffered per call before the server stops "
          "reading the stream (flow control).");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long running calls get to finish.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "quantd: quantizes ONNX models over gRPC "
      "(quantd.v1.QuantizationService)");
  absl::ParseCommandLine(argc, argv);

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
  options.limits.max_calibration_batches =
      absl::GetFlag(FLAGS_max_calibration_batches);
  options.limits.calibration_queue_batches =
      absl::GetFlag(FLAGS_calibration_queue_batches);

  quantd::server::Server server(options);
  if (absl::Status status = server.Start(); !status.ok()) {
    absl::FPrintF(stderr, "quantd: %s\n", status.ToString());
    return 1;
  }
  // Tests and scripts parse this line for the chosen port.
  absl::PrintF("quantd listening on %s:%d (metrics on :%d, %d core threads)\n",
               options.listen.host, server.selected_port(),
               server.metrics_port(), server.core_threads());
  std::fflush(stdout);

  const absl::Duration grace = absl::GetFlag(FLAGS_shutdown_grace);
  std::thread signal_waiter([&server, &signals, grace] {
    int signal = 0;
    sigwait(&signals, &signal);
    absl::FPrintF(stderr,
                  "quantd: signal %d: NOT_SERVING, draining (grace %s)\n",
                  signal, absl::FormatDuration(grace));
    server.Shutdown(absl::Now() + grace);
  });
  server.Wait();
  signal_waiter.join();
  absl::FPrintF(stderr, "quantd: stopped\n");
  return 0;
}
