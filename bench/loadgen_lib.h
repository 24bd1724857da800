// A closed-loop load generator for quantd on the C++ SDK: N client threads,
// each sending Quantize / Calibrate calls back to back for a while, on
// MatMul-chain models of several sizes built in-process. Used by the
// quantd_loadgen binary (scripts/load.sh) and in-process by
// tests/e2e/load_e2e_test.cc.
#ifndef QUANTD_BENCH_LOADGEN_LIB_H_
#define QUANTD_BENCH_LOADGEN_LIB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace quantd::loadgen {

// One model size: a chain of `layers` MatMuls with dim x dim float weights.
struct ModelSize {
  std::string name;  // E.g. "small".
  int dim = 0;
  int layers = 0;
};

// "small=64x2,medium=512x3" -> sizes, in that order. INVALID_ARGUMENT for
// an empty list, a repeated name, or a dim / layer count out of range.
absl::StatusOr<std::vector<ModelSize>> ParseSizes(absl::string_view spec);

// "3:1" -> {3, 1}: the weights of Quantize and Calibrate calls.
absl::StatusOr<std::pair<int, int>> ParseMix(absl::string_view spec);

// "OK,RESOURCE_EXHAUSTED" -> those names, checked against the gRPC code
// names (plus kBadResult).
absl::StatusOr<std::set<std::string>> ParseCodes(absl::string_view spec);

// Counted like an error code when a call returned OK but its response is
// not what a correct server sends (empty model, no ranges, ...).
inline constexpr char kBadResult[] = "BAD_RESULT";

// The serialized ONNX model x[1, dim] -> MatMul(W0) -> ... -> y[1, dim], with
// pseudo-random weights drawn from `seed`.
std::string MatMulChainModel(int dim, int layers, uint32_t seed);

struct LoadOptions {
  std::string target;  // host:port of quantd.
  // Client threads, each with its own quantd::client::Client (see RunLoad).
  int clients = 4;
  // Whether each client gets its own TCP connection, as separate processes
  // would; otherwise gRPC multiplexes every client's calls on one HTTP/2
  // connection, where a large upload holds the small calls back.
  bool connection_per_client = true;
  // How long new calls are started; calls still running then are waited for
  // (up to `deadline`) and counted.
  absl::Duration duration = absl::Seconds(10);
  int quantize_weight = 3;
  int calibrate_weight = 1;
  std::vector<ModelSize> sizes;  // Each call picks one uniformly.
  // Fraction of Quantize calls made STATIC_RANGE with inline calibration
  // batches; the others are DYNAMIC_RANGE.
  double static_fraction = 0.25;
  // Calibration batches per Calibrate call and per STATIC_RANGE Quantize.
  int batches = 4;
  std::string calibrate_method = "min_max";
  uint64_t seed = 1;
  // Per call. A server that hangs shows up as DEADLINE_EXCEEDED instead of
  // a load generator that never ends.
  absl::Duration deadline = absl::Seconds(120);
  // SDK retries on UNAVAILABLE; 0 so that every failure is counted as is.
  int max_retries = 0;
  // A client whose call failed (refused with RESOURCE_EXHAUSTED, or a
  // server going away) waits about this long before its next call, as a
  // real client would back off, rather than spinning on refusals.
  absl::Duration busy_backoff = absl::Milliseconds(50);
  // Called about every `progress_every` from RunLoad's thread with the
  // running totals (may be empty).
  std::function<void(absl::Duration elapsed, int64_t calls, int64_t ok)>
      on_progress;
  absl::Duration progress_every = absl::Seconds(10);
};

// The calls of one (rpc, size), or of all of them.
struct Row {
  std::string rpc;   // "quantize", "quantize_static", "calibrate" or "total".
  std::string size;  // A ModelSize name, or "*" for the total.
  int64_t calls = 0;
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;  // Code name -> calls.
  uint64_t ok_model_bytes = 0;            // Model bytes sent by OK calls.
  std::vector<double> ok_latency_ms;      // Sorted; OK calls only.
};

struct LoadReport {
  std::vector<Row> rows;  // Every (rpc, size) that was called, sorted.
  Row total;
  double wall_seconds = 0;  // From the first call to the last one's end.
  // For each error code, its first call: which, when, and its message.
  std::map<std::string, std::string> first_error;
  // For each error code, its messages (digits masked as '#') and their calls.
  std::map<std::string, std::map<std::string, int64_t>> error_kinds;
};

// Runs the load. Each client thread has its own Client (own channel, retry
// state and, with connection_per_client, connection), as independent users
// of the service would; the models and batches are built once, before the
// clock starts, and shared read-only.
LoadReport RunLoad(const LoadOptions& options);

// The `q` quantile (0..1) of sorted `values`, nearest rank; 0 when empty.
double Quantile(const std::vector<double>& sorted, double q);

// The human-readable table: one line per row, then the total.
std::string FormatTable(const LoadReport& report);

// Per error code: its calls, its first call, and its most frequent
// messages (what tells a refusal for a busy server from one for the upload
// budget, or the server's drain UNAVAILABLE from a refused connection).
std::string FormatErrors(const LoadReport& report);

// "loadgen: calls=N ok=N errors={CODE:n,...} p50_ms=X p99_ms=Y".
std::string SummaryLine(const LoadReport& report);

// Calls that ended with a code not in `allowed` (never counts OK).
int64_t DisallowedCalls(const LoadReport& report,
                        const std::set<std::string>& allowed);

}  // namespace quantd::loadgen

#endif  // QUANTD_BENCH_LOADGEN_LIB_H_
