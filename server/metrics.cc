#include "server/metrics.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/status.h"

namespace quantd::server {
namespace {

// Calls range from a GetServerInfo (milliseconds) to quantizing a large model
// (tens of seconds); buckets in seconds, Prometheus base units.
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *buckets;
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("quantd_requests_total")
                    .Help("Finished calls by method and gRPC status code.")
                    .Register(*registry_)),
      durations_(prometheus::BuildHistogram()
                     .Name("quantd_request_duration_seconds")
                     .Help("Call duration from start to the final status.")
                     .Register(*registry_)),
      model_bytes_(prometheus::BuildCounter()
                       .Name("quantd_model_bytes_total")
                       .Help("Model bytes received (in) and sent (out).")
                       .Register(*registry_)),
      bytes_in_(model_bytes_.Add({{"direction", "in"}})),
      bytes_out_(model_bytes_.Add({{"direction", "out"}})),
      inflight_jobs_(
          prometheus::BuildGauge()
              .Name("quantd_inflight_jobs")
              .Help("Jobs (Quantize, Calibrate) submitted to the core engine "
                    "and not finished yet.")
              .Register(*registry_)
              .Add({})),
      queued_jobs_(prometheus::BuildGauge()
                       .Name("quantd_queued_jobs")
                       .Help("Quantize/Calibrate calls whose model is "
                             "received, waiting for a free job slot "
                             "(--max_queued_jobs).")
                       .Register(*registry_)
                       .Add({})),
      uploading_bytes_(prometheus::BuildGauge()
                           .Name("quantd_uploading_bytes")
                           .Help("Declared model bytes of calls still "
                                 "uploading their model or waiting for a job "
                                 "slot, charged against "
                                 "--max_uploading_bytes.")
                           .Register(*registry_)
                           .Add({})),
      quantized_tensors_(
          prometheus::BuildCounter()
              .Name("quantd_quantized_tensors_total")
              .Help("Tensors quantized by finished Quantize jobs, by the "
                    "options' quantization_precision and op_set.")
              .Register(*registry_)),
      calibration_batches_(
          prometheus::BuildCounter()
              .Name("quantd_calibration_batches_total")
              .Help("Calibration batches read from the request stream, by "
                    "method.")
              .Register(*registry_)) {}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(
    const Options& options) {
  std::unique_ptr<Metrics> metrics(new Metrics());
  if (options.bind_address.empty()) return metrics;
  // prometheus-cpp reports a failed bind (civetweb) by throwing; this is the
  // one place we let an exception in, and it does not leave this function.
  try {
    metrics->exposer_ =
        std::make_unique<prometheus::Exposer>(options.bind_address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", options.bind_address, ": ", e.what()));
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  if (!ports.empty()) metrics->port_ = ports.front();
  return metrics;
}

void Metrics::RecordCall(absl::string_view method, grpc::StatusCode code,
                         double seconds) {
  const std::string method_label(method);
  requests_.Add({{"method", method_label}, {"code", StatusCodeName(code)}})
      .Increment();
  durations_.Add({{"method", method_label}}, DurationBuckets())
      .Observe(seconds);
}

void Metrics::AddModelBytesIn(uint64_t bytes) {
  bytes_in_.Increment(static_cast<double>(bytes));
}

void Metrics::AddModelBytesOut(uint64_t bytes) {
  bytes_out_.Increment(static_cast<double>(bytes));
}

void Metrics::AddCalibrationBatches(absl::string_view method,
                                    uint64_t batches) {
  calibration_batches_.Add({{"method", std::string(method)}})
      .Increment(static_cast<double>(batches));
}

void Metrics::JobStarted() { inflight_jobs_.Increment(); }
void Metrics::JobFinished() { inflight_jobs_.Decrement(); }

void Metrics::SetUploadingBytes(uint64_t bytes) {
  uploading_bytes_.Set(static_cast<double>(bytes));
}

void Metrics::SetQueuedJobs(int queued) {
  queued_jobs_.Set(static_cast<double>(queued));
}

void Metrics::AddQuantizedTensors(absl::string_view precision,
                                  absl::string_view op_set, uint64_t tensors) {
  quantized_tensors_
      .Add({{"precision", std::string(precision)},
            {"op_set", std::string(op_set)}})
      .Increment(static_cast<double>(tensors));
}

}  // namespace quantd::server
