#include "server/server.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace quantd::server {
namespace {

constexpr char kServiceName[] = "quantd.v1.QuantizationService";

// Slack for a message's own framing on top of a chunk's bytes.
constexpr uint64_t kMessageOverheadBytes = 64 << 10;

// Keepalive, agreed with the client SDK (client/quantd_client.h,
// Options::Keepalive): clients ping every 30 s, also between calls, so
// accepting pings every 10 s (without calls too) leaves room and still stops
// a misbehaving client from flooding us.
constexpr int kMinClientPingIntervalMs = 10 * 1000;
// Our own pings: a client that vanished without closing its connection
// (host gone, network cut) is noticed within ~80 s and its job cancelled,
// rather than after the kernel's TCP timeout of hours.
constexpr int kServerPingIntervalMs = 60 * 1000;
constexpr int kServerPingTimeoutMs = 20 * 1000;

std::string HostPort(const std::string& host, int port) {
  // An IPv6 literal needs brackets before the port.
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

Server::Server(Options options) : options_(std::move(options)) {}

Server::~Server() { Shutdown(absl::Now()); }

absl::Status Server::Start() {
  const Options::Limits& limits = options_.limits;
  if (limits.model_chunk_bytes == 0 || limits.max_message_bytes <= 0 ||
      limits.model_chunk_bytes + kMessageOverheadBytes >
          static_cast<uint64_t>(limits.max_message_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.model_chunk_bytes (", limits.model_chunk_bytes,
                     ") must be > 0 and fit in limits.max_message_bytes (",
                     limits.max_message_bytes, ") with ", kMessageOverheadBytes,
                     " bytes to spare"));
  }
  if (limits.calibration_queue_batches == 0 ||
      limits.max_calibration_batches == 0) {
    return absl::InvalidArgumentError(
        "limits.calibration_queue_batches and limits.max_calibration_batches "
        "must be > 0");
  }

  const Options::Tls& tls = options_.tls;
  if (tls.cert_pem.empty() != tls.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "tls.cert_pem and tls.key_pem go together: give both or neither");
  }
  if (!tls.client_ca_pem.empty() && tls.cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "tls.client_ca_pem (mutual TLS) needs tls.cert_pem and tls.key_pem");
  }
  if (limits.max_concurrent_jobs < 0) {
    return absl::InvalidArgumentError(
        "limits.max_concurrent_jobs must be >= 0 (0: twice the core threads)");
  }
  if (limits.max_tensor_elements < 0 || limits.max_graph_nodes < 0) {
    return absl::InvalidArgumentError(
        "limits.max_tensor_elements and limits.max_graph_nodes must be >= 0");
  }

  Metrics::Options metrics_options;
  if (options_.metrics.enabled) {
    metrics_options.bind_address =
        HostPort(options_.metrics.host, options_.metrics.port);
  } else {
    metrics_options.bind_address.clear();
  }
  absl::StatusOr<std::unique_ptr<Metrics>> metrics =
      Metrics::Create(metrics_options);
  if (!metrics.ok()) return metrics.status();
  metrics_ = std::move(*metrics);

  Engine::Options engine_options;
  engine_options.threads = options_.core.threads;
  engine_options.limits.max_tensor_elements = limits.max_tensor_elements;
  engine_options.limits.max_graph_nodes = limits.max_graph_nodes;
  engine_options.limits.max_observer_memory_bytes = limits.max_observer_bytes;
  engine_ = std::make_unique<Engine>(engine_options);

  QuantizationServiceImpl::Options service_options;
  service_options.max_model_bytes = limits.max_model_bytes;
  service_options.max_uploading_bytes = limits.max_uploading_bytes;
  service_options.model_chunk_bytes = limits.model_chunk_bytes;
  service_options.max_message_bytes = limits.max_message_bytes;
  service_options.max_calibration_batches = limits.max_calibration_batches;
  service_options.calibration_queue_batches = limits.calibration_queue_batches;
  service_options.max_concurrent_jobs = limits.max_concurrent_jobs;
  service_options.max_queued_jobs = limits.max_queued_jobs;
  service_options.max_call_duration = limits.max_call_duration;
  service_options.bearer_token = options_.auth.bearer_token;
  service_ = std::make_unique<QuantizationServiceImpl>(
      engine_.get(), metrics_.get(), service_options);

  // Both are process-wide switches that take effect for servers built
  // after them.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  builder.AddListeningPort(HostPort(options_.listen.host, options_.listen.port),
                           ServerCredentials(), &selected_port_);
  builder.SetMaxReceiveMessageSize(limits.max_message_bytes);
  builder.SetMaxSendMessageSize(limits.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      kMinClientPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kServerPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             kServerPingTimeoutMs);
  if (limits.max_connection_age > absl::ZeroDuration()) {
    // In-flight calls keep running after the GOAWAY (no grace limit: calls
    // are bounded by --max_call_duration); new calls go to a new
    // connection, picked by the client's load balancer.
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_AGE_MS,
        static_cast<int>(std::min<int64_t>(
            absl::ToInt64Milliseconds(limits.max_connection_age),
            std::numeric_limits<int>::max())));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               std::numeric_limits<int>::max());
  }
  builder.RegisterService(service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || selected_port_ == 0) {
    grpc_server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ",
                     HostPort(options_.listen.host, options_.listen.port)));
  }
  grpc::HealthCheckServiceInterface* health =
      grpc_server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus(kServiceName, true);
  return absl::OkStatus();
}

int Server::metrics_port() const {
  return metrics_ == nullptr ? 0 : metrics_->port();
}

int Server::max_concurrent_jobs() const {
  return service_ == nullptr ? 0 : service_->max_concurrent_jobs();
}

int Server::max_queued_jobs() const {
  return service_ == nullptr ? 0 : service_->max_queued_jobs();
}

std::shared_ptr<grpc::ServerCredentials> Server::ServerCredentials() const {
  const Options::Tls& tls = options_.tls;
  if (tls.cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      tls.client_ca_pem.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = tls.client_ca_pem;
  ssl.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(ssl);
}

int Server::core_threads() const {
  return engine_ == nullptr ? 0 : engine_->threads();
}

void Server::Wait() {
  if (grpc_server_ == nullptr) return;
  grpc_server_->Wait();
  shutdown_done_.WaitForNotification();
}

void Server::Shutdown(absl::Time deadline) {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_ || grpc_server_ == nullptr) return;
  shut_down_ = true;
  grpc_server_->GetHealthCheckService()->SetServingStatus(false);
  // Drain while still listening: health checks (on new connections too) see
  // NOT_SERVING, new Quantize/Calibrate calls are refused with a clear
  // UNAVAILABLE (clients retry another replica), and running calls go on.
  // gRPC's own Shutdown would close the listener and refuse new streams at
  // the transport, so nobody could see NOT_SERVING.
  service_->StartDraining();
  if (const int left = service_->WaitForCalls(deadline); left > 0) {
    absl::FPrintF(stderr,
                  "quantd: shutdown grace over: cancelling %d running "
                  "call(s)\n",
                  left);
  }
  // Returns once every call has finished (calls still running at the
  // deadline are cancelled, which also cancels their core jobs).
  grpc_server_->Shutdown(absl::ToChronoTime(deadline));
  // A cancelled call finishes without waiting for its job, and the job's
  // done callback still uses the service and the metrics: wait for the jobs
  // (destroying the engine drains its pool) before anything else goes.
  engine_.reset();
  shutdown_done_.Notify();
}

}  // namespace quantd::server
