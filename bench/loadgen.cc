// quantd_loadgen: drives a running quantd with concurrent Quantize and
// Calibrate calls for a while and prints what happened per (rpc, size):
// calls, errors by code, throughput and latency. Exits 1 when a call failed
// with a code outside --allowed_codes (a server under too much load should
// refuse calls with RESOURCE_EXHAUSTED, never fail them otherwise), 2 on a
// usage error. scripts/load.sh starts a server and runs it.
#include <cstdio>
#include <set>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/loadgen_lib.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "quantd's host:port.");
ABSL_FLAG(int, clients, 4,
          "Concurrent client threads, each with its own SDK Client.");
ABSL_FLAG(bool, shared_connection, false,
          "All clients on one HTTP/2 connection (default: one each, as "
          "separate processes would).");
ABSL_FLAG(double, seconds, 10, "How long to start new calls.");
ABSL_FLAG(std::string, mix, "3:1", "QUANTIZE:CALIBRATE call weights.");
ABSL_FLAG(std::string, sizes, "small=64x2,medium=512x3,large=2048x3",
          "NAME=DIMxLAYERS,...: MatMul chains of LAYERS dim x dim float "
          "weights (2048x3 is 48 MB); each call picks one uniformly.");
ABSL_FLAG(double, static, 0.25,
          "Fraction of Quantize calls that are STATIC_RANGE with inline "
          "calibration batches (the others DYNAMIC_RANGE).");
ABSL_FLAG(int, batches, 4,
          "Calibration batches per Calibrate and STATIC_RANGE Quantize call.");
ABSL_FLAG(std::string, calibrate_method, "min_max",
          "Observer of Calibrate and STATIC_RANGE calls.");
ABSL_FLAG(uint64_t, seed, 1, "Seeds the call mix and the model weights.");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(120),
          "Per-call deadline: a hung call ends DEADLINE_EXCEEDED.");
ABSL_FLAG(int, retries, 0,
          "SDK retries on UNAVAILABLE (0: count every failure as is).");
ABSL_FLAG(absl::Duration, busy_backoff, absl::Milliseconds(50),
          "Pause (+-50% jitter) after a failed call (e.g. "
          "RESOURCE_EXHAUSTED).");
ABSL_FLAG(std::string, allowed_codes, "OK,RESOURCE_EXHAUSTED",
          "Codes a call may end with without failing the run.");
ABSL_FLAG(double, progress_seconds, 10,
          "Running totals on stderr every this many seconds (0: none).");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "quantd_loadgen --target=HOST:PORT [--clients=N] [--seconds=T] "
      "[--mix=3:1] [--sizes=small=64x2,...] [--static=0.25] [--seed=S]");
  absl::ParseCommandLine(argc, argv);

  quantd::loadgen::LoadOptions options;
  auto sizes = quantd::loadgen::ParseSizes(absl::GetFlag(FLAGS_sizes));
  auto mix = quantd::loadgen::ParseMix(absl::GetFlag(FLAGS_mix));
  auto allowed =
      quantd::loadgen::ParseCodes(absl::GetFlag(FLAGS_allowed_codes));
  for (const absl::Status& status :
       {sizes.status(), mix.status(), allowed.status()}) {
    if (!status.ok()) {
      absl::FPrintF(stderr, "quantd_loadgen: %s\n", status.message());
      return 2;
    }
  }
  const double static_fraction = absl::GetFlag(FLAGS_static);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (absl::GetFlag(FLAGS_clients) < 1 || !(seconds > 0) ||
      !(static_fraction >= 0 && static_fraction <= 1) ||
      absl::GetFlag(FLAGS_batches) < 1 || absl::GetFlag(FLAGS_retries) < 0 ||
      absl::GetFlag(FLAGS_target).empty()) {
    absl::FPrintF(stderr,
                  "quantd_loadgen: --target is required; --clients and "
                  "--batches must be >= 1, --seconds > 0, --static in "
                  "[0, 1], --retries >= 0\n");
    return 2;
  }
  options.target = absl::GetFlag(FLAGS_target);
  options.clients = absl::GetFlag(FLAGS_clients);
  options.connection_per_client = !absl::GetFlag(FLAGS_shared_connection);
  options.duration = absl::Seconds(seconds);
  options.quantize_weight = mix->first;
  options.calibrate_weight = mix->second;
  options.sizes = *sizes;
  options.static_fraction = static_fraction;
  options.batches = absl::GetFlag(FLAGS_batches);
  options.calibrate_method = absl::GetFlag(FLAGS_calibrate_method);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.deadline = absl::GetFlag(FLAGS_deadline);
  options.max_retries = absl::GetFlag(FLAGS_retries);
  options.busy_backoff = absl::GetFlag(FLAGS_busy_backoff);
  if (const double every = absl::GetFlag(FLAGS_progress_seconds); every > 0) {
    options.progress_every = absl::Seconds(every);
    options.on_progress = [](absl::Duration elapsed, int64_t calls,
                             int64_t ok) {
      absl::FPrintF(stderr, "quantd_loadgen: %.0f s: %d calls, %d OK\n",
                    absl::ToDoubleSeconds(elapsed), calls, ok);
    };
  }

  const quantd::loadgen::LoadReport report = quantd::loadgen::RunLoad(options);
  absl::PrintF("%s", quantd::loadgen::FormatTable(report));
  absl::PrintF("%s", quantd::loadgen::FormatErrors(report));
  absl::PrintF("%s\n", quantd::loadgen::SummaryLine(report));
  std::fflush(stdout);

  const int64_t disallowed = quantd::loadgen::DisallowedCalls(report, *allowed);
  if (disallowed > 0) {
    absl::FPrintF(stderr,
                  "quantd_loadgen: %d calls failed with a code outside "
                  "--allowed_codes=%s\n",
                  disallowed, absl::GetFlag(FLAGS_allowed_codes));
    return 1;
  }
  return 0;
}
