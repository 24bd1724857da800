// The C++ SDK of quantd: one Client per server target, with chunking,
// deadlines, client-side load balancing and retries on UNAVAILABLE.
#ifndef QUANTD_CLIENT_QUANTD_CLIENT_H_
#define QUANTD_CLIENT_QUANTD_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.grpc.pb.h"

namespace quantd::client {

struct QuantizeOutcome {
  std::string model;  // The serialized output ONNX model.
  // The output's external_data stream: not empty when the model's large
  // tensors came back beside it (always for a model sent with external
  // data). Its tensors are located at "quantd:external_data" with offsets
  // into these bytes; SaveQuantizedModel (client/external_data.h) writes
  // both as ONNX's model + data file, or inlines them. Empty when
  // QuantizeCallbacks::on_external_data took the bytes instead.
  std::string external_data;
  // The external data stream's size, whether held above or handed to
  // QuantizeCallbacks::on_external_data.
  uint64_t external_data_bytes = 0;
  std::vector<quantd::v1::TensorReport> reports;
  quantd::v1::QuantizeSummary summary;
};

// A model's external_data stream, read while it is sent (so a model of any
// size never sits in the client's memory at once): `read` fills `out` with
// stream bytes [offset, offset + size). OpenModelForStreaming
// (client/external_data.h) makes one from a model saved with external data.
struct ExternalDataSource {
  uint64_t size = 0;
  std::function<absl::Status(uint64_t offset, size_t size, char* out)> read;
};

// What Quantize and Calibrate send: the serialized ModelProto and, for a
// model sent with external data, the stream its EXTERNAL tensors are
// located in. Holds views: the bytes must outlive the call.
struct ModelInput {
  ModelInput(absl::string_view model_bytes)  // NOLINT: implicit on purpose
      : bytes(model_bytes) {}
  ModelInput(const std::string& model_bytes)  // NOLINT: implicit on purpose
      : bytes(model_bytes) {}
  ModelInput(const char* model_bytes)  // NOLINT: implicit on purpose
      : bytes(model_bytes) {}
  ModelInput(absl::string_view model_bytes, ExternalDataSource external_data)
      : bytes(model_bytes), external(std::move(external_data)) {}
  absl::string_view bytes;
  ExternalDataSource external;
};

// Called on the calling thread, as the events arrive; each may be empty.
struct QuantizeCallbacks {
  std::function<void(const quantd::v1::Progress&)> on_progress;
  std::function<void(const quantd::v1::TensorReport&)> on_tensor_report;
  // When set, the output's external data stream goes here chunk by chunk,
  // in order, instead of into QuantizeOutcome::external_data, so that a
  // model of any size never sits in the client's memory at once
  // (StreamedModelWriter in client/external_data.h writes it to the data
  // file). An error cancels the call and is returned as is. A call that has
  // started receiving results is never retried, so the chunks arrive once.
  std::function<absl::Status(absl::string_view chunk)> on_external_data;
};

// Calibration batches, pulled one at a time: the next batch, std::nullopt at
// the end, or an error (which cancels the call and is returned as is). The
// SDK asks for the next batch only once the previous one has been written to
// the stream, so a slow server holds the producer back (gRPC flow control)
// and a large dataset never sits in memory at once. Called on the calling
// thread.
using BatchSource =
    std::function<absl::StatusOr<std::optional<quantd::v1::TensorBatch>>()>;

// Restarts a BatchSource at its first batch. Given to Quantize or Calibrate,
// it lets a call whose stream broke (UNAVAILABLE) after batches were pulled
// be retried; without it such a call is only retried if no batch had been
// pulled yet, since the batches already sent are gone.
using BatchRewind = std::function<absl::Status()>;

// What the SDK tells Options::on_retry before it retries a call.
struct RetryEvent {
  const char* method;   // "Quantize", "Calibrate", "GetServerInfo", "Health".
  int failed_attempt;   // 1 for the first call.
  int max_attempts;     // 1 + Options::Retry::max_retries.
  absl::Status status;  // Why that attempt failed (UNAVAILABLE).
  std::string peer;     // Where it went, e.g. "ipv4:10.0.0.1:50051"; may be
                        // empty (no connection was made).
  absl::Duration backoff;  // How long the SDK waits before the next attempt.
};

// grpc.health.v1 serving status.
enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };
const char* ServingStatusName(ServingStatus status);

// The one place a grpc::Status becomes an absl::Status: same code, same
// message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The gRPC target for Client::Options::target. A comma-separated list of
// IP:port ("10.0.0.1:50051,10.0.0.2:50051" or "[::1]:50051,[::1]:50052")
// becomes an "ipv4:"/"ipv6:" multi-address target; an "ipv4:"/"ipv6:" list
// is kept. With `shuffle`, the list's order is a permutation drawn from
// `seed`: round_robin sends a new channel's first calls to the first address
// that connects, which on a fast network is the first listed, so separate
// processes (one quantctl run each) would all start on the same replica.
// Any other target ("host:port", "dns:///host:port", "unix:...") is returned
// unchanged: its resolver decides the order. INVALID_ARGUMENT for an empty
// entry, a host name in a list (gRPC has no multi-name scheme: use
// dns:///NAME:PORT, whose name may resolve to several addresses), a port
// that is not 1..65535, or IPv4 and IPv6 mixed.
absl::StatusOr<std::string> ChannelTarget(absl::string_view target,
                                          bool shuffle, uint64_t seed);

class Client {
 public:
  struct Options {
    // Any gRPC target: "host:port", "dns:///host:port" (every address of a
    // headless Kubernetes service), "ipv4:10.0.0.1:50051,10.0.0.2:50051".
    std::string target;
    // Per call, retries and their backoff included; infinite means no
    // deadline.
    absl::Duration deadline = absl::InfiniteDuration();
    // Must match the server's (16 MiB by default).
    int max_message_bytes = 16 << 20;
    size_t chunk_bytes = size_t{1} << 20;
    // Spreads calls over every address the target resolves to.
    std::string load_balancing_policy = "round_robin";
    // See ChannelTarget; a fresh seed per Client.
    bool shuffle_addresses = true;
    // A call that fails with UNAVAILABLE (replica down, restarting or
    // draining; connection lost) or CANCELLED (a replica that shut down as
    // the call arrived: this client never cancels a call it retries) is
    // made again, up to max_retries more
    // times, after a backoff of initial_backoff * multiplier^(retry - 1),
    // capped at max_backoff, times a random factor in [1 - jitter,
    // 1 + jitter] (so that clients a failure hit together do not come back
    // together). Never retried: any other code; a call whose server had
    // started sending results (a tensor report, model bytes, the summary or
    // the calibration result), as the callbacks have seen them; a call whose
    // BatchSource had yielded a batch, unless a BatchRewind was given and
    // succeeds; an error of the BatchSource itself; a retry whose backoff
    // would end past the deadline. A call given up on keeps its last
    // status, its message ending in why ("(gave up after 4 attempts)",
    // "(not retried: ...)"). With round_robin a retry goes to the next
    // replica, and one whose connection broke is no longer picked.
    struct Retry {
      int max_retries = 3;
      absl::Duration initial_backoff = absl::Milliseconds(200);
      absl::Duration max_backoff = absl::Seconds(5);
      double multiplier = 2;
      double jitter = 0.2;
    } retry;
    // Called on the calling thread before each retry (may be empty).
    std::function<void(const RetryEvent&)> on_retry;
    // HTTP/2 keepalive pings, also while no call is running (to notice a
    // dead replica before a call is sent to it). The server accepts a ping
    // at most every 10 s (server/server.cc): time must not be shorter, or
    // the server closes the connection (GOAWAY "too_many_pings").
    struct Keepalive {
      absl::Duration time = absl::Seconds(30);
      absl::Duration timeout = absl::Seconds(10);
    } keepalive;
    // Transport security; PEM contents, not paths (quantctl reads the
    // files). With use_tls, the server is verified against root_certs_pem
    // (empty: the system's roots); cert_chain_pem and private_key_pem (both
    // or neither) are the client certificate for mutual TLS.
    struct Tls {
      bool use_tls = false;
      std::string root_certs_pem;
      std::string cert_chain_pem;
      std::string private_key_pem;
    } tls;
    // Sent as `authorization: Bearer <token>` on every call. With TLS, as
    // call credentials (encrypted with the call); without TLS as plain call
    // metadata, readable by anyone on the path: only for loopback or a
    // network you trust.
    std::string bearer_token;
  };

  explicit Client(Options options);

  // Streams the model with `config` (its model_size_bytes and
  // external_data_bytes are filled in here) and collects the output. Errors
  // carry the server's code and message; a stream that breaks the protocol (no
  // summary, or several) is INTERNAL.
  //
  // With `calibration_batches`, STATIC_RANGE in one call: the batches follow
  // the model in the stream (as `calibration_batch`es) and the server
  // calibrates with config.calibration_config before quantizing.
  //
  // Retried on UNAVAILABLE as Options::Retry says; callbacks.on_progress
  // starts over with each attempt.
  absl::StatusOr<QuantizeOutcome> Quantize(
      quantd::v1::QuantizeConfig config, const ModelInput& model,
      const QuantizeCallbacks& callbacks = {},
      BatchSource calibration_batches = nullptr,
      BatchRewind rewind_batches = nullptr);

  // Streams the model with `config` (its model_size_bytes and
  // external_data_bytes are filled in here), then every batch of
  // `next_batch`, and returns the activation
  // ranges the server collected. `on_progress` (may be empty) is called on
  // the calling thread. A stream without a result, or with anything after
  // it, is INTERNAL. Retried on UNAVAILABLE as Options::Retry says (after a
  // batch was pulled, only with `rewind`).
  absl::StatusOr<quantd::v1::CalibrationResult> Calibrate(
      quantd::v1::CalibrateConfig config, const ModelInput& model,
      BatchSource next_batch,
      std::function<void(const quantd::v1::Progress&)> on_progress = nullptr,
      BatchRewind rewind = nullptr);

  absl::StatusOr<quantd::v1::ServerInfo> GetServerInfo();

  // The grpc.health.v1 status of `service` ("" is the whole server).
  absl::StatusOr<ServingStatus> Health(const std::string& service = "");

  // The gRPC target the channel was made for (see ChannelTarget).
  const std::string& channel_target() const { return channel_target_; }

  // The backoff before retry number `retry` (1-based), for `jitter_unit` in
  // [0, 1) (0.5: no jitter).
  static absl::Duration RetryBackoff(const Options::Retry& retry_options,
                                     int retry, double jitter_unit);
  // UNAVAILABLE and CANCELLED (see Options::Retry).
  static bool IsRetriedCode(absl::StatusCode code);

 private:
  // How one attempt ended: its status, and whether it may be made again.
  struct Attempt {
    absl::Status status;
    // Set when retrying is ruled out; says why (appended to the status).
    std::string not_retryable;
    // Returned unchanged, never retried (a BatchSource's own error).
    bool as_is = false;
  };

  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  void PrepareContext(grpc::ClientContext* context, absl::Time deadline) const;
  // Runs `attempt` (which gets a fresh context per attempt) until it
  // succeeds or may not be retried. `before_retry` (may be empty) runs
  // before each retry; an error from it ends the call.
  absl::Status RunWithRetries(
      const char* method,
      const std::function<Attempt(grpc::ClientContext*)>& attempt,
      const std::function<absl::Status()>& before_retry = nullptr);
  double JitterUnit();

  const Options options_;
  absl::Status target_status_;  // Not OK: every call fails with it.
  std::string channel_target_;
  absl::Mutex rng_mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(rng_mu_);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
};

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_QUANTD_CLIENT_H_
