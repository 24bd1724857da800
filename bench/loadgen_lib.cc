#include "bench/loadgen_lib.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/quantd_client.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::loadgen {
namespace {

using quantd::client::BatchRewind;
using quantd::client::BatchSource;
using quantd::client::Client;
using tensorflow::quantization::QuantizationMethod;

// Row keys sort in this order; the names are the table's.
enum RpcKind { kQuantize = 0, kQuantizeStatic = 1, kCalibrate = 2 };
constexpr const char* kRpcNames[] = {"quantize", "quantize_static",
                                     "calibrate"};

// A size's model and calibration batches, built once and shared read-only by
// every client thread.
struct Workload {
  ModelSize size;
  std::string model;
  std::vector<quantd::v1::TensorBatch> batches;
};

// Batch `index` of a size: a ramp over the input, scaled differently per
// batch so that the observers see ranges move.
quantd::v1::TensorBatch InputBatch(int dim, int index) {
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* x = batch.add_tensors();
  x->set_name("x");
  x->set_data_type(onnx::TensorProto::FLOAT);
  x->add_shape(1);
  x->add_shape(dim);
  std::vector<float> values(dim);
  const float scale = 0.01f * (1 + index % 4);
  for (int i = 0; i < dim; ++i) values[i] = scale * (i - dim / 2) / dim * 64;
  x->set_data(values.data(), values.size() * sizeof(float));
  return batch;
}

// What one call ended with: a code name ("OK", a gRPC code, kBadResult) and,
// when not OK, why.
struct CallResult {
  std::string code;
  std::string message;
};

CallResult FromStatus(const absl::Status& status) {
  return {absl::StatusCodeToString(status.code()),
          std::string(status.message())};
}

CallResult BadResult(std::string why) { return {kBadResult, std::move(why)}; }

// A BatchSource over `batches`, with the rewind that restarts it.
std::pair<BatchSource, BatchRewind> BatchesOf(
    const std::vector<quantd::v1::TensorBatch>& batches) {
  auto next = std::make_shared<size_t>(0);
  BatchSource source =
      [&batches,
       next]() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
    if (*next == batches.size()) return std::nullopt;
    return batches[(*next)++];
  };
  BatchRewind rewind = [next] {
    *next = 0;
    return absl::OkStatus();
  };
  return {std::move(source), std::move(rewind)};
}

CallResult Quantize(Client& client, const Workload& work, bool is_static,
                    const LoadOptions& options) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(is_static ? QuantizationMethod::STATIC_RANGE
                                          : QuantizationMethod::DYNAMIC_RANGE);
  BatchSource source;
  BatchRewind rewind;
  if (is_static) {
    config.mutable_calibration_config()->set_method(options.calibrate_method);
    std::tie(source, rewind) = BatchesOf(work.batches);
  }
  absl::StatusOr<quantd::client::QuantizeOutcome> outcome = client.Quantize(
      std::move(config), work.model, {}, std::move(source), std::move(rewind));
  if (!outcome.ok()) return FromStatus(outcome.status());
  // A response mixed up with another call's, or cut short, would still be OK.
  const quantd::v1::QuantizeSummary& summary = outcome->summary;
  if (outcome->model.empty() ||
      summary.output_bytes() != outcome->model.size()) {
    return BadResult(absl::StrFormat("%d model bytes back, summary says %d",
                                     outcome->model.size(),
                                     summary.output_bytes()));
  }
  // Every weight is quantized or reported skipped (a small one, as too
  // few elements); STATIC_RANGE also quantizes activations.
  const int accounted = summary.quantized_tensors() + summary.skipped_tensors();
  const bool all_weights =
      is_static ? accounted >= work.size.layers : accounted == work.size.layers;
  if (summary.input_bytes() != work.model.size() || !all_weights) {
    return BadResult(absl::StrFormat(
        "summary says %d input bytes (sent %d), %d quantized and %d skipped "
        "tensors (%d weights)",
        summary.input_bytes(), work.model.size(), summary.quantized_tensors(),
        summary.skipped_tensors(), work.size.layers));
  }
  return {"OK", ""};
}

CallResult Calibrate(Client& client, const Workload& work,
                     const LoadOptions& options) {
  quantd::v1::CalibrateConfig config;
  config.set_method(options.calibrate_method);
  auto [source, rewind] = BatchesOf(work.batches);
  absl::StatusOr<quantd::v1::CalibrationResult> result = client.Calibrate(
      std::move(config), work.model, std::move(source), nullptr, rewind);
  if (!result.ok()) return FromStatus(result.status());
  // x, y and every hidden activation between the MatMuls.
  if (result->batch_count() != static_cast<int64_t>(work.batches.size()) ||
      result->ranges_size() != work.size.layers + 1) {
    return BadResult(
        absl::StrFormat("%d batches counted (sent %d), %d ranges (expected %d)",
                        result->batch_count(), work.batches.size(),
                        result->ranges_size(), work.size.layers + 1));
  }
  return {"OK", ""};
}

// What one client thread saw, merged into the report at the end (no lock on
// the hot path).
struct ThreadStats {
  std::map<std::pair<int, int>, Row> rows;  // (RpcKind, size index) -> row.
  // Code -> when the first call failed with it (its end), and what it was.
  std::map<std::string, std::pair<absl::Time, std::string>> first_error;
  // Code -> message with its numbers masked -> calls.
  std::map<std::string, std::map<std::string, int64_t>> error_kinds;
};

// `message` with every run of digits replaced by '#', so that messages that
// differ only in their figures ("53477822 in use") count as one kind.
std::string MaskDigits(absl::string_view message) {
  std::string out;
  for (size_t i = 0; i < message.size(); ++i) {
    if (!absl::ascii_isdigit(message[i])) {
      out += message[i];
    } else if (out.empty() || out.back() != '#') {
      out += '#';
    }
  }
  return out;
}

// Distinct message kinds kept per code and thread; past it they are lumped
// together (a server that puts request ids in its messages is not a reason
// for the load generator to grow without bound).
constexpr size_t kMaxErrorKinds = 32;

struct Shared {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> ok{0};
  std::atomic<int> running{0};
};

void ClientLoop(int index, const LoadOptions& options,
                const std::vector<Workload>& work, absl::Time begin,
                absl::Time stop, Shared* shared, ThreadStats* stats) {
  Client::Options client_options;
  client_options.target = options.target;
  client_options.deadline = options.deadline;
  client_options.retry.max_retries = options.max_retries;
  if (options.connection_per_client) {
    // gRPC shares one connection among the channels of a process whose
    // target and arguments are equal, and the SDK sets no argument that
    // tells them apart: a keepalive time unique to this client (a few ms
    // above the default, still far above the server's 10 s minimum) is one.
    client_options.keepalive.time += absl::Milliseconds(index);
  }
  Client client(client_options);
  // Connected before the first call: the load measures the server's
  // answers, not how fast a fresh channel's first connect attempts come
  // back (on a busy host they can fail within milliseconds, before the
  // server is slow to accept, and the SDK does not retry them with
  // max_retries 0). A server that never accepts still fails every call.
  for (const absl::Time until = absl::Now() + absl::Seconds(5);
       absl::Now() < until && !client.Health().ok();) {
    absl::SleepFor(absl::Milliseconds(20));
  }

  std::mt19937_64 rng(options.seed * 0x9E3779B97F4A7C15ull + index);
  std::uniform_int_distribution<int> pick_rpc(
      0, options.quantize_weight + options.calibrate_weight - 1);
  std::bernoulli_distribution pick_static(options.static_fraction);
  std::uniform_int_distribution<int> pick_size(
      0, static_cast<int>(work.size()) - 1);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);

  while (absl::Now() < stop) {
    const bool quantize = pick_rpc(rng) < options.quantize_weight;
    const bool is_static = quantize && pick_static(rng);
    const int size = pick_size(rng);
    const RpcKind kind =
        quantize ? (is_static ? kQuantizeStatic : kQuantize) : kCalibrate;

    const absl::Time start = absl::Now();
    const CallResult result =
        quantize ? Quantize(client, work[size], is_static, options)
                 : Calibrate(client, work[size], options);
    const absl::Time end = absl::Now();
    const double ms = absl::ToDoubleMilliseconds(end - start);

    Row& row = stats->rows[{kind, size}];
    ++row.calls;
    shared->calls.fetch_add(1, std::memory_order_relaxed);
    if (result.code == "OK") {
      ++row.ok;
      row.ok_model_bytes += work[size].model.size();
      row.ok_latency_ms.push_back(ms);
      shared->ok.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    ++row.errors[result.code];
    std::map<std::string, int64_t>& kinds = stats->error_kinds[result.code];
    std::string kind_text = MaskDigits(result.message);
    if (kinds.size() >= kMaxErrorKinds && kinds.count(kind_text) == 0) {
      kind_text = "(other messages)";
    }
    ++kinds[kind_text];
    stats->first_error.emplace(
        result.code,
        std::make_pair(end,
                       absl::StrFormat("%s %s, ended %.3f s into the run after "
                                       "%.0f ms: %s",
                                       kRpcNames[kind], work[size].size.name,
                                       absl::ToDoubleSeconds(end - begin), ms,
                                       result.message)));
    const absl::Duration wait =
        std::min(options.busy_backoff * jitter(rng), stop - absl::Now());
    if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
  }
  shared->running.fetch_sub(1);
}

void Merge(const Row& from, Row* into) {
  into->calls += from.calls;
  into->ok += from.ok;
  for (const auto& [code, n] : from.errors) into->errors[code] += n;
  into->ok_model_bytes += from.ok_model_bytes;
  into->ok_latency_ms.insert(into->ok_latency_ms.end(),
                             from.ok_latency_ms.begin(),
                             from.ok_latency_ms.end());
}

std::string ErrorList(const std::map<std::string, int64_t>& errors) {
  return absl::StrJoin(errors, ",", absl::PairFormatter(":"));
}

}  // namespace

absl::StatusOr<std::vector<ModelSize>> ParseSizes(absl::string_view spec) {
  std::vector<ModelSize> sizes;
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> name_shape = absl::StrSplit(entry, '=');
    std::vector<absl::string_view> shape;
    if (name_shape.size() == 2) shape = absl::StrSplit(name_shape[1], 'x');
    ModelSize size;
    if (name_shape.size() != 2 || name_shape[0].empty() || shape.size() != 2 ||
        !absl::SimpleAtoi(shape[0], &size.dim) ||
        !absl::SimpleAtoi(shape[1], &size.layers)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size '", entry, "' is not NAME=DIMxLAYERS (e.g. small=64x2)"));
    }
    // 8192 x 8192 floats is 256 MiB per layer: past that a load generator
    // is only testing the machine it runs on.
    if (size.dim < 1 || size.dim > 8192 || size.layers < 1 ||
        size.layers > 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size '", entry, "': dim must be 1..8192 and layers 1..64"));
    }
    size.name = std::string(name_shape[0]);
    for (const ModelSize& other : sizes) {
      if (other.name == size.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("size name '", size.name, "' given twice"));
      }
    }
    sizes.push_back(std::move(size));
  }
  if (sizes.empty()) return absl::InvalidArgumentError("no model size given");
  return sizes;
}

absl::StatusOr<std::pair<int, int>> ParseMix(absl::string_view spec) {
  std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  int quantize = 0, calibrate = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &quantize) ||
      !absl::SimpleAtoi(parts[1], &calibrate) || quantize < 0 ||
      calibrate < 0 || quantize + calibrate == 0 ||
      quantize + calibrate > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mix '", spec,
        "' is not QUANTIZE:CALIBRATE weights (e.g. 3:1), not both 0"));
  }
  return std::make_pair(quantize, calibrate);
}

absl::StatusOr<std::set<std::string>> ParseCodes(absl::string_view spec) {
  std::set<std::string> known = {kBadResult};
  for (int code = 0; code <= 16; ++code) {
    known.insert(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
  }
  std::set<std::string> codes;
  for (absl::string_view name : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    name = absl::StripAsciiWhitespace(name);
    if (known.count(std::string(name)) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", name, "' is not a gRPC code name (e.g. RESOURCE_EXHAUSTED)"));
    }
    codes.insert(std::string(name));
  }
  return codes;
}

std::string MatMulChainModel(int dim, int layers, uint32_t seed) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("matmul_chain");
  auto add_value = [dim](onnx::ValueInfoProto* value, const std::string& name) {
    value->set_name(name);
    onnx::TypeProto::Tensor* type =
        value->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_value(1);
    type->mutable_shape()->add_dim()->set_dim_value(dim);
  };
  add_value(graph->add_input(), "x");
  uint32_t state = seed;
  std::string previous = "x";
  for (int i = 0; i < layers; ++i) {
    const std::string w = "W" + std::to_string(i);
    const std::string out = i + 1 == layers ? "y" : "h" + std::to_string(i);
    onnx::TensorProto* init = graph->add_initializer();
    init->set_name(w);
    init->set_data_type(onnx::TensorProto::FLOAT);
    init->add_dims(dim);
    init->add_dims(dim);
    std::string* raw = init->mutable_raw_data();
    raw->resize(sizeof(float) * dim * dim);
    float* values = reinterpret_cast<float*>(raw->data());
    for (int64_t k = 0; k < int64_t{dim} * dim; ++k) {
      state = state * 1664525u + 1013904223u;
      values[k] = (static_cast<float>(state >> 8) / (1 << 24) - 0.5f) * 0.1f;
    }
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type("MatMul");
    node->set_name("matmul" + std::to_string(i));
    node->add_input(previous);
    node->add_input(w);
    node->add_output(out);
    previous = out;
  }
  add_value(graph->add_output(), "y");
  return model.SerializeAsString();
}

double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

LoadReport RunLoad(const LoadOptions& options) {
  LoadReport report;
  report.total.rpc = "total";
  report.total.size = "*";
  if (options.sizes.empty() || options.quantize_weight < 0 ||
      options.calibrate_weight < 0 ||
      options.quantize_weight + options.calibrate_weight <= 0 ||
      !(options.static_fraction >= 0 && options.static_fraction <= 1)) {
    return report;  // Nothing to call: the parsers refuse these.
  }
  std::vector<Workload> work;
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    const ModelSize& size = options.sizes[i];
    Workload w;
    w.size = size;
    w.model = MatMulChainModel(size.dim, size.layers,
                               static_cast<uint32_t>(options.seed + i));
    for (int b = 0; b < options.batches; ++b) {
      w.batches.push_back(InputBatch(size.dim, b));
    }
    work.push_back(std::move(w));
  }

  const int clients = std::max(1, options.clients);
  std::vector<ThreadStats> stats(clients);
  Shared shared;
  shared.running = clients;
  const absl::Time start = absl::Now();
  const absl::Time stop = start + options.duration;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back(ClientLoop, i, std::cref(options), std::cref(work),
                         start, stop, &shared, &stats[i]);
  }
  absl::Time next_progress = start + options.progress_every;
  while (shared.running.load() > 0) {
    absl::SleepFor(absl::Milliseconds(50));
    if (options.on_progress && absl::Now() >= next_progress) {
      options.on_progress(absl::Now() - start, shared.calls.load(),
                          shared.ok.load());
      next_progress += options.progress_every;
    }
  }
  for (std::thread& t : threads) t.join();

  report.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::map<std::pair<int, int>, Row> rows;
  std::map<std::string, std::pair<absl::Time, std::string>> first_error;
  for (const ThreadStats& s : stats) {
    for (const auto& [key, row] : s.rows) Merge(row, &rows[key]);
    for (const auto& [code, kinds] : s.error_kinds) {
      for (const auto& [text, n] : kinds) report.error_kinds[code][text] += n;
    }
    for (const auto& [code, first] : s.first_error) {
      auto [it, added] = first_error.emplace(code, first);
      if (!added && first.first < it->second.first) it->second = first;
    }
  }
  for (const auto& [code, first] : first_error) {
    report.first_error[code] = first.second;
  }
  for (auto& [key, row] : rows) {
    row.rpc = kRpcNames[key.first];
    row.size = work[key.second].size.name;
    std::sort(row.ok_latency_ms.begin(), row.ok_latency_ms.end());
    Merge(row, &report.total);
    report.rows.push_back(std::move(row));
  }
  std::sort(report.total.ok_latency_ms.begin(),
            report.total.ok_latency_ms.end());
  return report;
}

std::string FormatTable(const LoadReport& report) {
  const double seconds = std::max(report.wall_seconds, 1e-9);
  std::string out =
      absl::StrFormat("%-16s %-8s %8s %8s %8s %8s %9s %9s %9s %9s  %s\n", "rpc",
                      "size", "calls", "ok", "ok/s", "MB/s", "p50_ms", "p90_ms",
                      "p99_ms", "max_ms", "errors");
  auto line = [&](const Row& row) {
    absl::StrAppendFormat(
        &out, "%-16s %-8s %8d %8d %8.2f %8.2f %9.1f %9.1f %9.1f %9.1f  %s\n",
        row.rpc, row.size, row.calls, row.ok, row.ok / seconds,
        row.ok_model_bytes / 1e6 / seconds, Quantile(row.ok_latency_ms, 0.5),
        Quantile(row.ok_latency_ms, 0.9), Quantile(row.ok_latency_ms, 0.99),
        Quantile(row.ok_latency_ms, 1.0),
        row.errors.empty() ? "-" : ErrorList(row.errors));
  };
  for (const Row& row : report.rows) line(row);
  line(report.total);
  absl::StrAppendFormat(&out,
                        "(%.1f s wall; MB/s: model bytes of OK calls; "
                        "latencies: OK calls only)\n",
                        report.wall_seconds);
  return out;
}

std::string FormatErrors(const LoadReport& report) {
  std::string out;
  for (const auto& [code, first] : report.first_error) {
    const auto total = report.total.errors.find(code);
    absl::StrAppendFormat(
        &out, "%s: %d calls; first: %s\n", code,
        total == report.total.errors.end() ? 0 : total->second, first);
    const auto kinds = report.error_kinds.find(code);
    if (kinds == report.error_kinds.end()) continue;
    std::vector<std::pair<int64_t, std::string>> by_count;
    for (const auto& [text, n] : kinds->second) by_count.emplace_back(n, text);
    std::sort(by_count.rbegin(), by_count.rend());
    for (size_t i = 0; i < by_count.size() && i < 5; ++i) {
      absl::StrAppendFormat(&out, "  %8d x %s\n", by_count[i].first,
                            by_count[i].second);
    }
  }
  return out;
}

std::string SummaryLine(const LoadReport& report) {
  return absl::StrFormat(
      "loadgen: calls=%d ok=%d errors={%s} p50_ms=%.1f p99_ms=%.1f",
      report.total.calls, report.total.ok, ErrorList(report.total.errors),
      Quantile(report.total.ok_latency_ms, 0.5),
      Quantile(report.total.ok_latency_ms, 0.99));
}

int64_t DisallowedCalls(const LoadReport& report,
                        const std::set<std::string>& allowed) {
  int64_t n = 0;
  for (const auto& [code, count] : report.total.errors) {
    if (allowed.count(code) == 0) n += count;
  }
  return n;
}

}  // namespace quantd::loadgen
