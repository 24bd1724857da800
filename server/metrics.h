// Prometheus metrics of the server, exposed over HTTP for scraping. Label
// values are bounded: method names of our service, gRPC code names, and the
// names of QuantizationOptions enum values.
#ifndef QUANTD_SERVER_METRICS_H_
#define QUANTD_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace quantd::server {

class Metrics {
 public:
  struct Options {
    // "host:port" to serve /metrics on; port 0 picks a free port. Empty: no
    // HTTP endpoint (the metrics are still recorded, e.g. for tests).
    std::string bind_address = "0.0.0.0:9464";
  };

  // Fails (UNAVAILABLE) when the HTTP endpoint cannot bind.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(
      const Options& options);

  // One finished call: counts it under its final code and observes its
  // duration.
  void RecordCall(absl::string_view method, grpc::StatusCode code,
                  double seconds);
  void AddModelBytesIn(uint64_t bytes);
  void AddModelBytesOut(uint64_t bytes);
  // Calibration batches read from a call's stream (Calibrate, or Quantize
  // with inline calibration).
  void AddCalibrationBatches(absl::string_view method, uint64_t batches);
  void JobStarted();
  void JobFinished();
  // Calls with their model received, waiting for a job slot.
  void SetQueuedJobs(int queued);
  // Declared model bytes of calls still uploading (the upload budget).
  void SetUploadingBytes(uint64_t bytes);
  // A Quantize job's quantized tensors, by the options' precision and op
  // set (enum names, e.g. "PRECISION_W8A8", "TF").
  void AddQuantizedTensors(absl::string_view precision,
                           absl::string_view op_set, uint64_t tensors);

  // The port /metrics is served on (the chosen one when 0 was asked for);
  // 0 when there is no endpoint.
  int port() const { return port_; }
  prometheus::Registry& registry() { return *registry_; }

 private:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& durations_;
  prometheus::Family<prometheus::Counter>& model_bytes_;
  prometheus::Counter& bytes_in_;
  prometheus::Counter& bytes_out_;
  prometheus::Gauge& inflight_jobs_;
  prometheus::Gauge& queued_jobs_;
  prometheus::Gauge& uploading_bytes_;
  prometheus::Family<prometheus::Counter>& quantized_tensors_;
  prometheus::Family<prometheus::Counter>& calibration_batches_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_METRICS_H_
