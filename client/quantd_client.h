// The C++ SDK of quantd: one Client per server target, with chunking,
// deadlines, client-side load balancing and retries on UNAVAILABLE.
#ifndef QUANTD_CLIENT_QUANTD_CLIENT_H_
#define QUANTD_CLIENT_QUANTD_CLIENT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.grpc.pb.h"

namespace quantd::client {

struct QuantizeOutcome {
  std::string model;  // The serialized output ONNX model.
  std::vector<quantd::v1::TensorReport> reports;
  quantd::v1::QuantizeSummary summary;
};

// Called on the calling thread, as the events arrive; each may be empty.
struct QuantizeCallbacks {
  std::function<void(const quantd::v1::Progress&)> on_progress;
  std::function<void(const quantd::v1::TensorReport&)> on_tensor_report;
};

// Calibration batches, pulled one at a time: the next batch, std::nullopt at
// the end, or an error (which cancels the call and is returned as is). The
// SDK asks for the next batch only once the previous one has been written to
// the stream, so a slow server holds the producer back (gRPC flow control)
// and a large dataset never sits in memory at once. Called on the calling
// thread.
using BatchSource =
    std::function<absl::StatusOr<std::optional<quantd::v1::TensorBatch>>()>;

// grpc.health.v1 serving status.
enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };
const char* ServingStatusName(ServingStatus status);

// The one place a grpc::Status becomes an absl::Status: same code, same
// message.
absl::Status FromGrpcStatus(const grpc::Status& status);

class Client {
 public:
  struct Options {
    // Any gRPC target: "host:port", "dns:///host:port" (every address of a
    // headless Kubernetes service), "ipv4:10.0.0.1:50051,10.0.0.2:50051".
    std::string target;
    // Per call; infinite means no deadline.
    absl::Duration deadline = absl::InfiniteDuration();
    // Must match the server's (16 MiB by default).
    int max_message_bytes = 16 << 20;
    size_t chunk_bytes = size_t{1} << 20;
    // Spreads calls over every address the target resolves to.
    std::string load_balancing_policy = "round_robin";
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

  // Streams `model_bytes` with `config` (its model_size_bytes is filled in
  // here) and collects the output. Errors carry the server's code and
  // message; a stream that breaks the protocol (no summary, or several) is
  // INTERNAL.
  //
  // With `calibration_batches`, STATIC_RANGE in one call: the batches follow
  // the model in the stream (as `calibration_batch`es) and the server
  // calibrates with config.calibration_config before quantizing.
  absl::StatusOr<QuantizeOutcome> Quantize(
      quantd::v1::QuantizeConfig config, absl::string_view model_bytes,
      const QuantizeCallbacks& callbacks = {},
      BatchSource calibration_batches = nullptr);

  // Streams `model_bytes` with `config` (its model_size_bytes is filled in
  // here), then every batch of `next_batch`, and returns the activation
  // ranges the server collected. `on_progress` (may be empty) is called on
  // the calling thread. A stream without a result, or with anything after
  // it, is INTERNAL.
  absl::StatusOr<quantd::v1::CalibrationResult> Calibrate(
      quantd::v1::CalibrateConfig config, absl::string_view model_bytes,
      BatchSource next_batch,
      std::function<void(const quantd::v1::Progress&)> on_progress = nullptr);

  absl::StatusOr<quantd::v1::ServerInfo> GetServerInfo();

  // The grpc.health.v1 status of `service` ("" is the whole server).
  absl::StatusOr<ServingStatus> Health(const std::string& service = "");

 private:
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  void PrepareContext(grpc::ClientContext* context) const;

  const Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
};

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_QUANTD_CLIENT_H_
