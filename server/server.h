// The quantd server: the core engine, QuantizationService, health, reflection
// and metrics, wired together and started on a port.
#ifndef QUANTD_SERVER_SERVER_H_
#define QUANTD_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "server/metrics.h"
#include "server/quantization_service.h"

namespace quantd::server {

class Server {
 public:
  struct Options {
    struct Listen {
      std::string host = "0.0.0.0";
      int port = 50051;  // 0: pick a free port (see selected_port()).
    } listen;
    struct MetricsEndpoint {
      bool enabled = true;
      std::string host = "0.0.0.0";
      int port = 9464;  // 0: pick a free port (see metrics_port()).
    } metrics;
    struct Core {
      int threads = 0;  // 0: one per hardware thread.
    } core;
    struct Limits {
      uint64_t max_model_bytes = uint64_t{1} << 30;
      // See ServiceOptions::max_uploading_bytes.
      uint64_t max_uploading_bytes = uint64_t{2} << 30;
      // Per call; see JobLimits::max_observer_memory_bytes.
      int64_t max_observer_bytes = int64_t{256} << 20;
      uint64_t model_chunk_bytes = uint64_t{1} << 20;
      // Largest gRPC message either way: a model chunk plus framing, with
      // room for clients that send bigger chunks. Deliberately far from
      // INT_MAX so one message cannot pin gigabytes.
      int max_message_bytes = 16 << 20;
      // Calibration batches per call, and how many a call buffers before it
      // stops reading its stream (see ServiceOptions).
      uint64_t max_calibration_batches = 100000;
      size_t calibration_queue_batches = 4;
      // Quantize/Calibrate jobs running at once (0: twice the core
      // threads), calls waiting for one of them (more is
      // RESOURCE_EXHAUSTED; negative: twice the jobs), and the cap on a
      // call's duration (zero: none).
      // See ServiceOptions.
      int max_concurrent_jobs = 0;
      int max_queued_jobs = 0;
      absl::Duration max_call_duration = absl::ZeroDuration();
      // A connection older than this is asked to go away (GOAWAY) once its
      // calls are done, so long-lived clients re-resolve DNS and reach
      // replicas added since they connected (zero: never).
      absl::Duration max_connection_age = absl::ZeroDuration();
      // Checked by core right after parsing a model (0: no limit); see
      // JobLimits in core/engine/limits.h.
      int64_t max_tensor_elements = 0;
      int64_t max_graph_nodes = 0;
    } limits;
    // Transport security, as PEM contents (the binary reads the files).
    // cert_pem and key_pem: both (TLS) or neither (plaintext). With
    // client_ca_pem as well, mutual TLS: every client must present a
    // certificate signed by it.
    struct Tls {
      std::string cert_pem;
      std::string key_pem;
      std::string client_ca_pem;
    } tls;
    struct Auth {
      // Not empty: every QuantizationService call needs
      // `authorization: Bearer <token>` (server/auth.h).
      std::string bearer_token;
    } auth;
  };

  explicit Server(Options options);
  // Shuts down (with no grace period) if still running.
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Builds and starts everything. UNAVAILABLE when a port cannot be bound,
  // INVALID_ARGUMENT for inconsistent options.
  absl::Status Start();

  // The gRPC port, once started (the chosen one when port 0 was asked for).
  int selected_port() const { return selected_port_; }
  // The metrics port, once started; 0 when metrics are disabled.
  int metrics_port() const;
  int core_threads() const;
  // The job limit in force, once started.
  int max_concurrent_jobs() const;
  // Calls that may wait for a job slot (limits.max_queued_jobs resolved).
  int max_queued_jobs() const;

  // Blocks until Shutdown (called from another thread) has completed.
  void Wait();

  // Health goes NOT_SERVING (so load balancers stop sending calls) and new
  // Quantize/Calibrate calls are refused with UNAVAILABLE while the server
  // still listens; running calls get until `deadline` to finish (the
  // listener closes as soon as none is left) and are then cancelled; core
  // jobs are then waited for. Safe to call more than once and from any
  // thread; a second call waits for the first.
  void Shutdown(absl::Time deadline);

 private:
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;

  const Options options_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<QuantizationServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int selected_port_ = 0;

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification shutdown_done_;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_SERVER_H_
