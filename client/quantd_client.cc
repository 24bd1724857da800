#include "client/quantd_client.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/generic/generic_stub.h"

namespace quantd::client {
namespace {

using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;

// round_robin over every resolved address, and transparent retries of calls
// that failed with UNAVAILABLE (a replica draining or restarting). Every
// method is safe to retry: the service is stateless.
std::string ServiceConfigJson(const std::string& lb_policy) {
  return absl::StrCat(R"({"loadBalancingConfig": [{")", lb_policy,
                      R"(": {}}],
  "methodConfig": [{
    "name": [{"service": "quantd.v1.QuantizationService"},
             {"service": "grpc.health.v1.Health"}],
    "retryPolicy": {
      "maxAttempts": 3,
      "initialBackoff": "0.2s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]})");
}

// Keepalive, agreed with the server (server/server.cc accepts pings every
// 10 s): detects a dead connection during a long job.
constexpr int kKeepaliveTimeMs = 30 * 1000;
constexpr int kKeepaliveTimeoutMs = 10 * 1000;

// grpc.health.v1 without its generated code (Debian ships none): the request
// is {string service = 1}, the response {ServingStatus status = 1}.
std::string EncodeHealthCheckRequest(const std::string& service) {
  google::protobuf::UnknownFieldSet fields;
  if (!service.empty()) fields.AddLengthDelimited(1, service);
  std::string bytes;
  fields.SerializeToString(&bytes);
  return bytes;
}

absl::StatusOr<ServingStatus> DecodeHealthCheckResponse(
    const std::string& bytes) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) {
    return absl::InternalError("unparsable grpc.health.v1 response");
  }
  uint64_t status = 0;  // UNKNOWN, also when the field is absent (proto3).
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    if (field.number() == 1 &&
        field.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      status = field.varint();
    }
  }
  switch (status) {
    case 1:
      return ServingStatus::kServing;
    case 2:
      return ServingStatus::kNotServing;
    case 3:
      return ServingStatus::kServiceUnknown;
    default:
      return ServingStatus::kUnknown;
  }
}

// Responses read on a helper thread, handed to the calling thread.
template <typename Response>
class Inbox {
 public:
  void Put(Response response) {
    absl::MutexLock lock(&mu_);
    responses_.push_back(std::move(response));
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  // Handles what has arrived; with `until_closed`, also waits for the rest.
  void Drain(absl::FunctionRef<void(Response*)> handle, bool until_closed) {
    while (true) {
      std::deque<Response> ready;
      bool closed;
      {
        absl::MutexLock lock(&mu_);
        if (until_closed) {
          mu_.Await(absl::Condition(
              +[](Inbox* inbox) ABSL_EXCLUSIVE_LOCKS_REQUIRED(inbox->mu_) {
                return inbox->closed_ || !inbox->responses_.empty();
              },
              this));
        }
        ready.swap(responses_);
        closed = closed_;
      }
      for (Response& response : ready) handle(&response);
      if (!until_closed || (closed && ready.empty())) return;
    }
  }

 private:
  absl::Mutex mu_;
  std::deque<Response> responses_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// One bidi call. `next` fills in the next request (returns false when there
// is none left); requests are written on the calling thread one at a time, so
// each is produced only once the previous write has completed (gRPC flow
// control paces the producer). A helper thread reads the responses, and
// `handle` sees them on the calling thread, between writes and after the
// last one. An error from `next` cancels the call and is returned as is;
// otherwise the call's own status is.
template <typename Request, typename Response>
absl::Status Exchange(grpc::ClientContext* context,
                      grpc::ClientReaderWriter<Request, Response>* stream,
                      absl::FunctionRef<absl::StatusOr<bool>(Request*)> next,
                      absl::FunctionRef<void(Response*)> handle) {
  Inbox<Response> inbox;
  std::thread reader([stream, &inbox] {
    Response response;
    while (stream->Read(&response)) inbox.Put(std::move(response));
    inbox.Close();
  });
  absl::Status source_status;
  Request request;
  // A failed write means the server has finished (usually refusing the
  // call); Finish below says why.
  for (bool open = true; open;) {
    inbox.Drain(handle, /*until_closed=*/false);
    request.Clear();
    absl::StatusOr<bool> more = next(&request);
    if (!more.ok()) {
      source_status = more.status();
      context->TryCancel();
      break;
    }
    if (!*more) {
      stream->WritesDone();
      break;
    }
    open = stream->Write(request);
  }
  request.Clear();
  inbox.Drain(handle, /*until_closed=*/true);
  reader.join();
  const grpc::Status status = stream->Finish();
  if (!source_status.ok()) return source_status;
  return FromGrpcStatus(status);
}

// The request sequence both RPCs share: the config, the model in chunks,
// then the batches of `batches` (if any).
class RequestSequence {
 public:
  RequestSequence(absl::string_view model, size_t chunk_bytes,
                  const BatchSource* batches)
      : model_(model),
        chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
        batches_(batches) {}

  enum class Kind { kConfig, kChunk, kBatch, kEnd };

  // What comes next; for kChunk, *chunk is set; for kBatch, *batch.
  absl::StatusOr<Kind> Next(absl::string_view* chunk,
                            quantd::v1::TensorBatch* batch) {
    if (!config_sent_) {
      config_sent_ = true;
      return Kind::kConfig;
    }
    if (offset_ < model_.size()) {
      *chunk = model_.substr(offset_, chunk_bytes_);
      offset_ += chunk->size();
      return Kind::kChunk;
    }
    if (batches_ == nullptr || *batches_ == nullptr || batches_done_) {
      return Kind::kEnd;
    }
    absl::StatusOr<std::optional<quantd::v1::TensorBatch>> next = (*batches_)();
    if (!next.ok()) return next.status();
    if (!next->has_value()) {
      batches_done_ = true;
      return Kind::kEnd;
    }
    *batch = std::move(**next);
    return Kind::kBatch;
  }

 private:
  const absl::string_view model_;
  const size_t chunk_bytes_;
  const BatchSource* const batches_;
  bool config_sent_ = false;
  size_t offset_ = 0;
  bool batches_done_ = false;
};

// Fills `request` with the next part of a Quantize or Calibrate stream: the
// config, a model chunk, or a batch (which `sequence` writes into `batch`, a
// field of `request`). False once the stream is complete.
template <typename Request, typename Config>
absl::StatusOr<bool> FillNextRequest(RequestSequence* sequence,
                                     const Config& config, Request* request,
                                     quantd::v1::TensorBatch* batch) {
  absl::string_view chunk;
  absl::StatusOr<RequestSequence::Kind> kind = sequence->Next(&chunk, batch);
  if (!kind.ok()) return kind.status();
  switch (*kind) {
    case RequestSequence::Kind::kConfig:
      *request->mutable_config() = config;
      return true;
    case RequestSequence::Kind::kChunk:
      request->set_model_chunk(chunk.data(), chunk.size());
      return true;
    case RequestSequence::Kind::kBatch:
      return true;
    case RequestSequence::Kind::kEnd:
      break;
  }
  return false;
}

}  // namespace

const char* ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // Both follow google.rpc.Code, so the numbers carry over unchanged.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

Client::Client(Options options) : options_(std::move(options)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  args.SetServiceConfigJSON(ServiceConfigJson(options_.load_balancing_policy));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  channel_ =
      grpc::CreateCustomChannel(options_.target, ChannelCredentials(), args);
  stub_ = quantd::v1::QuantizationService::NewStub(channel_);
}

std::shared_ptr<grpc::ChannelCredentials> Client::ChannelCredentials() const {
  const Options::Tls& tls = options_.tls;
  if (!tls.use_tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.root_certs_pem;
  ssl.pem_cert_chain = tls.cert_chain_pem;
  ssl.pem_private_key = tls.private_key_pem;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(ssl);
  if (options_.bearer_token.empty()) return credentials;
  // "authorization: Bearer <token>", only ever sent over this TLS channel.
  return grpc::CompositeChannelCredentials(
      credentials, grpc::AccessTokenCredentials(options_.bearer_token));
}

void Client::PrepareContext(grpc::ClientContext* context) const {
  // Without TLS, call credentials would be refused by gRPC (they need a
  // secure channel): plain metadata instead (see Options::bearer_token).
  if (!options_.tls.use_tls && !options_.bearer_token.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options_.bearer_token));
  }
  if (options_.deadline != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + options_.deadline));
  }
}

absl::StatusOr<QuantizeOutcome> Client::Quantize(
    quantd::v1::QuantizeConfig config, absl::string_view model_bytes,
    const QuantizeCallbacks& callbacks, BatchSource calibration_batches) {
  grpc::ClientContext context;
  PrepareContext(&context);
  std::unique_ptr<grpc::ClientReaderWriter<QuantizeRequest, QuantizeResponse>>
      stream = stub_->Quantize(&context);

  config.set_model_size_bytes(model_bytes.size());
  RequestSequence sequence(model_bytes, options_.chunk_bytes,
                           &calibration_batches);
  auto next = [&](QuantizeRequest* request) -> absl::StatusOr<bool> {
    return FillNextRequest(&sequence, config, request,
                           request->mutable_calibration_batch());
  };

  QuantizeOutcome outcome;
  int summaries = 0;
  bool after_summary = false;
  auto handle = [&](QuantizeResponse* response) {
    if (summaries > 0) after_summary = true;
    switch (response->event_case()) {
      case QuantizeResponse::kProgress:
        if (callbacks.on_progress) callbacks.on_progress(response->progress());
        break;
      case QuantizeResponse::kTensorReport:
        if (callbacks.on_tensor_report) {
          callbacks.on_tensor_report(response->tensor_report());
        }
        outcome.reports.push_back(
            std::move(*response->mutable_tensor_report()));
        break;
      case QuantizeResponse::kModelChunk:
        outcome.model.append(response->model_chunk());
        break;
      case QuantizeResponse::kSummary:
        ++summaries;
        outcome.summary = std::move(*response->mutable_summary());
        break;
      case QuantizeResponse::EVENT_NOT_SET:
        break;  // A newer server's event we do not know: skip it.
    }
  };
  if (absl::Status status = Exchange<QuantizeRequest, QuantizeResponse>(
          &context, stream.get(), next, handle);
      !status.ok()) {
    return status;
  }
  if (summaries != 1 || after_summary) {
    return absl::InternalError(absl::StrCat(
        "protocol error: the server sent ", summaries, " summaries",
        after_summary ? " and messages after one" : "",
        "; expected exactly one, last"));
  }
  if (outcome.summary.output_bytes() != outcome.model.size()) {
    return absl::InternalError(absl::StrCat(
        "protocol error: received ", outcome.model.size(),
        " model bytes but the summary says ", outcome.summary.output_bytes()));
  }
  return outcome;
}

absl::StatusOr<quantd::v1::CalibrationResult> Client::Calibrate(
    quantd::v1::CalibrateConfig config, absl::string_view model_bytes,
    BatchSource next_batch,
    std::function<void(const quantd::v1::Progress&)> on_progress) {
  grpc::ClientContext context;
  PrepareContext(&context);
  std::unique_ptr<grpc::ClientReaderWriter<CalibrateRequest, CalibrateResponse>>
      stream = stub_->Calibrate(&context);

  config.set_model_size_bytes(model_bytes.size());
  RequestSequence sequence(model_bytes, options_.chunk_bytes, &next_batch);
  auto next = [&](CalibrateRequest* request) -> absl::StatusOr<bool> {
    return FillNextRequest(&sequence, config, request,
                           request->mutable_batch());
  };

  std::optional<quantd::v1::CalibrationResult> result;
  int results = 0;
  bool after_result = false;
  auto handle = [&](CalibrateResponse* response) {
    if (results > 0) after_result = true;
    switch (response->event_case()) {
      case CalibrateResponse::kProgress:
        if (on_progress) on_progress(response->progress());
        break;
      case CalibrateResponse::kResult:
        ++results;
        result = std::move(*response->mutable_result());
        break;
      case CalibrateResponse::EVENT_NOT_SET:
        break;  // A newer server's event we do not know: skip it.
    }
  };
  if (absl::Status status = Exchange<CalibrateRequest, CalibrateResponse>(
          &context, stream.get(), next, handle);
      !status.ok()) {
    return status;
  }
  if (results != 1 || after_result) {
    return absl::InternalError(
        absl::StrCat("protocol error: the server sent ", results, " results",
                     after_result ? " and messages after one" : "",
                     "; expected exactly one, last"));
  }
  return std::move(*result);
}

absl::StatusOr<quantd::v1::ServerInfo> Client::GetServerInfo() {
  grpc::ClientContext context;
  PrepareContext(&context);
  quantd::v1::ServerInfo info;
  if (absl::Status status = FromGrpcStatus(stub_->GetServerInfo(
          &context, quantd::v1::GetServerInfoRequest(), &info));
      !status.ok()) {
    return status;
  }
  return info;
}

absl::StatusOr<ServingStatus> Client::Health(const std::string& service) {
  grpc::ClientContext context;
  PrepareContext(&context);
  const std::string request_bytes = EncodeHealthCheckRequest(service);
  grpc::Slice request_slice(request_bytes);
  grpc::ByteBuffer request(&request_slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  grpc::GenericStub stub(channel_);
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&status, &done](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return FromGrpcStatus(status);
  grpc::Slice response_slice;
  if (!response.DumpToSingleSlice(&response_slice).ok()) {
    return absl::InternalError("unreadable grpc.health.v1 response");
  }
  return DecodeHealthCheckResponse(
      std::string(reinterpret_cast<const char*>(response_slice.begin()),
                  response_slice.size()));
}

}  // namespace quantd::client
