#include "client/quantd_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/generic/generic_stub.h"

namespace quantd::client {
namespace {

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
  channel_ = grpc::CreateCustomChannel(
      options_.target, grpc::InsecureChannelCredentials(), args);
  stub_ = quantd::v1::QuantizationService::NewStub(channel_);
}

void Client::PrepareContext(grpc::ClientContext* context) const {
  if (options_.deadline != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + options_.deadline));
  }
}

absl::StatusOr<QuantizeOutcome> Client::Quantize(
    quantd::v1::QuantizeConfig config, absl::string_view model_bytes,
    const QuantizeCallbacks& callbacks) {
  grpc::ClientContext context;
  PrepareContext(&context);
  std::unique_ptr<grpc::ClientReaderWriter<QuantizeRequest, QuantizeResponse>>
      stream = stub_->Quantize(&context);

  config.set_model_size_bytes(model_bytes.size());
  QuantizeRequest request;
  *request.mutable_config() = std::move(config);
  // The server answers only after the half-close, except to refuse the call;
  // then a write fails and Finish below says why.
  bool open = stream->Write(request);
  const size_t chunk_bytes = std::max<size_t>(options_.chunk_bytes, 1);
  for (size_t offset = 0; open && offset < model_bytes.size();
       offset += chunk_bytes) {
    const absl::string_view chunk = model_bytes.substr(offset, chunk_bytes);
    request.set_model_chunk(chunk.data(), chunk.size());
    open = stream->Write(request);
  }
  request.Clear();
  if (open) stream->WritesDone();

  QuantizeOutcome outcome;
  int summaries = 0;
  bool after_summary = false;
  QuantizeResponse response;
  while (stream->Read(&response)) {
    if (summaries > 0) after_summary = true;
    switch (response.event_case()) {
      case QuantizeResponse::kProgress:
        if (callbacks.on_progress) callbacks.on_progress(response.progress());
        break;
      case QuantizeResponse::kTensorReport:
        if (callbacks.on_tensor_report) {
          callbacks.on_tensor_report(response.tensor_report());
        }
        outcome.reports.push_back(std::move(*response.mutable_tensor_report()));
        break;
      case QuantizeResponse::kModelChunk:
        outcome.model.append(response.model_chunk());
        break;
      case QuantizeResponse::kSummary:
        ++summaries;
        outcome.summary = std::move(*response.mutable_summary());
        break;
      case QuantizeResponse::EVENT_NOT_SET:
        break;  // A newer server's event we do not know: skip it.
    }
  }
  if (absl::Status status = FromGrpcStatus(stream->Finish()); !status.ok()) {
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
