#include "client/quantd_client.h"

#include <arpa/inet.h>

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/base/huge_pages.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/generic/generic_stub.h"

namespace quantd::client {
namespace {

using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;

// round_robin over every resolved address. Retries are the SDK's own
// (Client::RunWithRetries), not a gRPC retryPolicy: gRPC stops retrying a
// stream once its 256 KiB replay buffer is full, i.e. for any real model,
// and knows nothing of results already handed to callbacks or of batch
// sources; both together would also multiply the attempts.
std::string ServiceConfigJson(const std::string& lb_policy) {
  return absl::StrCat(R"({"loadBalancingConfig": [{")", lb_policy,
                      R"(": {}}]})");
}

// "1.2.3.4:80" or "[::1]:80" -> AF_INET or AF_INET6; 0 when `entry` is not
// an IP literal with a port in 1..65535.
int AddressFamily(absl::string_view entry) {
  absl::string_view host, port;
  const bool bracketed = absl::ConsumePrefix(&entry, "[");
  if (bracketed) {
    const size_t close = entry.find("]:");
    if (close == absl::string_view::npos) return 0;
    host = entry.substr(0, close);
    port = entry.substr(close + 2);
  } else {
    const size_t colon = entry.rfind(':');
    if (colon == absl::string_view::npos) return 0;
    host = entry.substr(0, colon);
    port = entry.substr(colon + 1);
  }
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 1 ||
      port_number > 65535) {
    return 0;
  }
  // IPv6 only in brackets: "::1:80" could be read two ways.
  const int family = bracketed ? AF_INET6 : AF_INET;
  const std::string host_string(host);
  unsigned char address[16];
  return inet_pton(family, host_string.c_str(), address) == 1 ? family : 0;
}

absl::Status WithNote(const absl::Status& status, absl::string_view note) {
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (", note, ")"));
}

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
// its external data in chunks, then the batches of `batches` (if any).
class RequestSequence {
 public:
  RequestSequence(const ModelInput& model, size_t chunk_bytes,
                  const BatchSource* batches)
      : model_(model.bytes),
        external_(model.external),
        chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
        batches_(batches) {}

  enum class Kind { kConfig, kChunk, kExternalChunk, kBatch, kEnd };

  // What comes next; for kChunk and kExternalChunk, *chunk is set (valid
  // until the next call); for kBatch, *batch.
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
    if (external_offset_ < external_.size) {
      const size_t n = static_cast<size_t>(
          std::min<uint64_t>(chunk_bytes_, external_.size - external_offset_));
      buffer_.resize(n);
      if (absl::Status s = external_.read(external_offset_, n, buffer_.data());
          !s.ok()) {
        return s;
      }
      external_offset_ += n;
      *chunk = buffer_;
      return Kind::kExternalChunk;
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
    pulled_batches_ = true;
    return Kind::kBatch;
  }

  // Whether the source has yielded a batch (which a retry would need again).
  bool pulled_batches() const { return pulled_batches_; }

 private:
  const absl::string_view model_;
  const ExternalDataSource& external_;
  uint64_t external_offset_ = 0;
  std::string buffer_;  // The external chunk being sent.
  const size_t chunk_bytes_;
  const BatchSource* const batches_;
  bool config_sent_ = false;
  size_t offset_ = 0;
  bool batches_done_ = false;
  bool pulled_batches_ = false;
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
    case RequestSequence::Kind::kExternalChunk:
      request->set_external_data_chunk(chunk.data(), chunk.size());
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

absl::StatusOr<std::string> ChannelTarget(absl::string_view target,
                                          bool shuffle, uint64_t seed) {
  absl::string_view list = absl::StripAsciiWhitespace(target);
  std::string scheme;
  if (absl::StrContains(list, "://")) return std::string(list);
  if (absl::ConsumePrefix(&list, "ipv4:")) {
    scheme = "ipv4";
  } else if (absl::ConsumePrefix(&list, "ipv6:")) {
    scheme = "ipv6";
  } else if (!absl::StrContains(list, ',')) {
    return std::string(list);
  }
  std::vector<std::string> entries;
  int family = 0;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const int entry_family = AddressFamily(entry);
    if (entry_family == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server list '", target, "': '", entry,
          "' is not IP:PORT ('10.0.0.1:50051' or '[::1]:50051'); a list "
          "takes IP addresses only, for a host name use dns:///NAME:PORT"));
    }
    if (family != 0 && entry_family != family) {
      return absl::InvalidArgumentError(
          absl::StrCat("server list '", target,
                       "' mixes IPv4 and IPv6 addresses; gRPC takes one "
                       "family per list"));
    }
    family = entry_family;
    entries.emplace_back(entry);
  }
  const std::string family_scheme = family == AF_INET ? "ipv4" : "ipv6";
  if (!scheme.empty() && scheme != family_scheme) {
    return absl::InvalidArgumentError(
        absl::StrCat("server list '", target, "' is an ", scheme,
                     ": list but holds ", family_scheme, " addresses"));
  }
  if (shuffle) {
    std::shuffle(entries.begin(), entries.end(), std::mt19937_64(seed));
  }
  return absl::StrCat(family_scheme, ":", absl::StrJoin(entries, ","));
}

Client::Client(Options options)
    : options_(std::move(options)), rng_(std::random_device()()) {
  uint64_t seed;
  {
    absl::MutexLock lock(&rng_mu_);
    seed = rng_();
  }
  absl::StatusOr<std::string> target =
      ChannelTarget(options_.target, options_.shuffle_addresses, seed);
  if (target.ok()) {
    channel_target_ = std::move(*target);
  } else {
    // Every call fails with this; the channel is never used.
    target_status_ = target.status();
    channel_target_ = options_.target;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  args.SetServiceConfigJSON(ServiceConfigJson(options_.load_balancing_policy));
  // Keepalive, agreed with the server (see Options::Keepalive). Pinging
  // without calls, and without limit while no data flows, keeps noticing a
  // dead connection both between calls (round_robin then stops picking it)
  // and during a long silent job.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              absl::ToInt64Milliseconds(options_.keepalive.time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              absl::ToInt64Milliseconds(options_.keepalive.timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  channel_ =
      grpc::CreateCustomChannel(channel_target_, ChannelCredentials(), args);
  stub_ = quantd::v1::QuantizationService::NewStub(channel_);
}

bool Client::IsRetriedCode(absl::StatusCode code) {
  // This client cancels a call only for its BatchSource's error (returned
  // as is), so a CANCELLED here came from the server's side: a replica that
  // shut down as the call arrived, before any service code saw it.
  return code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kCancelled;
}

absl::Duration Client::RetryBackoff(const Options::Retry& retry_options,
                                    int retry, double jitter_unit) {
  absl::Duration backoff = retry_options.initial_backoff;
  for (int i = 1; i < retry && backoff < retry_options.max_backoff; ++i) {
    backoff *= retry_options.multiplier;
  }
  backoff = std::min(backoff, retry_options.max_backoff);
  const double factor = 1 + retry_options.jitter * (2 * jitter_unit - 1);
  return std::max(absl::ZeroDuration(), backoff * factor);
}

double Client::JitterUnit() {
  absl::MutexLock lock(&rng_mu_);
  return std::uniform_real_distribution<double>(0, 1)(rng_);
}

absl::Status Client::RunWithRetries(
    const char* method,
    const std::function<Attempt(grpc::ClientContext*)>& attempt,
    const std::function<absl::Status()>& before_retry) {
  if (!target_status_.ok()) return target_status_;
  // One deadline for the whole call: a caller's --timeout is how long it is
  // prepared to wait, however many replicas it takes.
  const absl::Time deadline = options_.deadline == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + options_.deadline;
  const int max_attempts = 1 + std::max(0, options_.retry.max_retries);
  for (int n = 1;; ++n) {
    grpc::ClientContext context;
    PrepareContext(&context, deadline);
    const Attempt result = attempt(&context);
    if (result.as_is || !IsRetriedCode(result.status.code())) {
      return result.status;
    }
    if (!result.not_retryable.empty()) {
      return WithNote(result.status,
                      absl::StrCat("not retried: ", result.not_retryable));
    }
    if (n == max_attempts) {
      return n == 1 ? result.status
                    : WithNote(result.status,
                               absl::StrCat("gave up after ", n, " attempts"));
    }
    const absl::Duration backoff =
        RetryBackoff(options_.retry, n, JitterUnit());
    if (absl::Now() + backoff >= deadline) {
      return WithNote(result.status,
                      absl::StrCat("not retried: the deadline falls before "
                                   "the next attempt; ",
                                   n, " attempt(s) made"));
    }
    if (options_.on_retry) {
      options_.on_retry(RetryEvent{method, n, max_attempts, result.status,
                                   context.peer(), backoff});
    }
    absl::SleepFor(backoff);
    if (before_retry) {
      if (absl::Status status = before_retry(); !status.ok()) {
        return WithNote(
            result.status,
            absl::StrCat("not retried: rewinding the batch source failed: ",
                         status.ToString()));
      }
    }
  }
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

void Client::PrepareContext(grpc::ClientContext* context,
                            absl::Time deadline) const {
  // Without TLS, call credentials would be refused by gRPC (they need a
  // secure channel): plain metadata instead (see Options::bearer_token).
  if (!options_.tls.use_tls && !options_.bearer_token.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options_.bearer_token));
  }
  if (deadline != absl::InfiniteFuture()) {
    context->set_deadline(absl::ToChronoTime(deadline));
  }
}

absl::StatusOr<QuantizeOutcome> Client::Quantize(
    quantd::v1::QuantizeConfig config, const ModelInput& model,
    const QuantizeCallbacks& callbacks, BatchSource calibration_batches,
    BatchRewind rewind_batches) {
  config.set_model_size_bytes(model.bytes.size());
  config.set_external_data_bytes(model.external.size);
  QuantizeOutcome outcome;
  bool batches_pulled = false;
  auto attempt = [&](grpc::ClientContext* context) -> Attempt {
    outcome = QuantizeOutcome();
    std::unique_ptr<grpc::ClientReaderWriter<QuantizeRequest, QuantizeResponse>>
        stream = stub_->Quantize(context);
    RequestSequence sequence(model, options_.chunk_bytes, &calibration_batches);
    bool source_failed = false;
    auto next = [&](QuantizeRequest* request) -> absl::StatusOr<bool> {
      absl::StatusOr<bool> more = FillNextRequest(
          &sequence, config, request, request->mutable_calibration_batch());
      source_failed = !more.ok();
      return more;
    };
    int summaries = 0;
    bool after_summary = false;
    bool results_seen = false;
    absl::Status sink_status;  // From callbacks.on_external_data.
    auto handle = [&](QuantizeResponse* response) {
      if (summaries > 0) after_summary = true;
      switch (response->event_case()) {
        case QuantizeResponse::kProgress:
          // The output's size, announced before its chunks: one buffer.
          // Bounded: a model cannot pass protobuf's 2 GiB. The external
          // data's total is not (the bytes themselves are the bound).
          if (response->progress().stage() == quantd::v1::STAGE_SEND &&
              response->progress().total() > 0) {
            const auto total =
                static_cast<size_t>(response->progress().total());
            if (response->progress().message() ==
                "output external data bytes") {
              if (!callbacks.on_external_data &&
                  outcome.external_data.empty()) {
                outcome.external_data.reserve(total);
              }
            } else if (total <= (size_t{2} << 30) && outcome.model.empty()) {
              outcome.model.reserve(total);
              AdviseHugePages(outcome.model.data(), outcome.model.capacity());
            }
          }
          if (callbacks.on_progress) {
            callbacks.on_progress(response->progress());
          }
          break;
        case QuantizeResponse::kTensorReport:
          results_seen = true;
          if (callbacks.on_tensor_report) {
            callbacks.on_tensor_report(response->tensor_report());
          }
          outcome.reports.push_back(
              std::move(*response->mutable_tensor_report()));
          break;
        case QuantizeResponse::kModelChunk:
          results_seen = true;
          outcome.model.append(response->model_chunk());
          break;
        case QuantizeResponse::kExternalDataChunk:
          results_seen = true;
          outcome.external_data_bytes += response->external_data_chunk().size();
          if (!callbacks.on_external_data) {
            outcome.external_data.append(response->external_data_chunk());
          } else if (sink_status.ok()) {
            sink_status =
                callbacks.on_external_data(response->external_data_chunk());
            if (!sink_status.ok()) context->TryCancel();
          }
          break;
        case QuantizeResponse::kSummary:
          results_seen = true;
          ++summaries;
          outcome.summary = std::move(*response->mutable_summary());
          break;
        case QuantizeResponse::EVENT_NOT_SET:
          break;  // A newer server's event we do not know: skip it.
      }
    };
    const absl::Status status = Exchange<QuantizeRequest, QuantizeResponse>(
        context, stream.get(), next, handle);
    batches_pulled = batches_pulled || sequence.pulled_batches();
    if (!sink_status.ok()) return {sink_status, "", /*as_is=*/true};
    if (!status.ok()) {
      if (source_failed) return {status, "", /*as_is=*/true};
      if (results_seen) {
        return {status, "the server had started sending results"};
      }
      if (batches_pulled && !rewind_batches) {
        return {status,
                "calibration batches were sent and the source cannot be "
                "rewound"};
      }
      return {status, ""};
    }
    if (summaries != 1 || after_summary) {
      return {absl::InternalError(absl::StrCat(
                  "protocol error: the server sent ", summaries, " summaries",
                  after_summary ? " and messages after one" : "",
                  "; expected exactly one, last")),
              ""};
    }
    if (outcome.summary.output_bytes() !=
        outcome.model.size() + outcome.external_data_bytes) {
      return {
          absl::InternalError(absl::StrCat(
              "protocol error: received ", outcome.model.size(), " model bytes",
              outcome.external_data_bytes == 0
                  ? ""
                  : absl::StrCat(" and ", outcome.external_data_bytes,
                                 " of external data"),
              " but the summary says ", outcome.summary.output_bytes())),
          ""};
    }
    return {absl::OkStatus(), ""};
  };
  auto rewind = [&]() -> absl::Status {
    if (!batches_pulled) return absl::OkStatus();
    batches_pulled = false;
    return rewind_batches();
  };
  if (absl::Status status = RunWithRetries("Quantize", attempt, rewind);
      !status.ok()) {
    return status;
  }
  return outcome;
}

absl::StatusOr<quantd::v1::CalibrationResult> Client::Calibrate(
    quantd::v1::CalibrateConfig config, const ModelInput& model,
    BatchSource next_batch,
    std::function<void(const quantd::v1::Progress&)> on_progress,
    BatchRewind rewind) {
  config.set_model_size_bytes(model.bytes.size());
  config.set_external_data_bytes(model.external.size);
  std::optional<quantd::v1::CalibrationResult> result;
  bool batches_pulled = false;
  auto attempt = [&](grpc::ClientContext* context) -> Attempt {
    result.reset();
    std::unique_ptr<
        grpc::ClientReaderWriter<CalibrateRequest, CalibrateResponse>>
        stream = stub_->Calibrate(context);
    RequestSequence sequence(model, options_.chunk_bytes, &next_batch);
    bool source_failed = false;
    auto next = [&](CalibrateRequest* request) -> absl::StatusOr<bool> {
      absl::StatusOr<bool> more =
          FillNextRequest(&sequence, config, request, request->mutable_batch());
      source_failed = !more.ok();
      return more;
    };
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
    const absl::Status status = Exchange<CalibrateRequest, CalibrateResponse>(
        context, stream.get(), next, handle);
    batches_pulled = batches_pulled || sequence.pulled_batches();
    if (!status.ok()) {
      if (source_failed) return {status, "", /*as_is=*/true};
      if (results > 0) return {status, "the server had sent the result"};
      if (batches_pulled && !rewind) {
        return {status,
                "calibration batches were sent and the source cannot be "
                "rewound"};
      }
      return {status, ""};
    }
    if (results != 1 || after_result) {
      return {absl::InternalError(absl::StrCat(
                  "protocol error: the server sent ", results, " results",
                  after_result ? " and messages after one" : "",
                  "; expected exactly one, last")),
              ""};
    }
    return {absl::OkStatus(), ""};
  };
  auto rewind_if_pulled = [&]() -> absl::Status {
    if (!batches_pulled) return absl::OkStatus();
    batches_pulled = false;
    return rewind();
  };
  if (absl::Status status =
          RunWithRetries("Calibrate", attempt, rewind_if_pulled);
      !status.ok()) {
    return status;
  }
  return std::move(*result);
}

absl::StatusOr<quantd::v1::ServerInfo> Client::GetServerInfo() {
  quantd::v1::ServerInfo info;
  auto attempt = [&](grpc::ClientContext* context) -> Attempt {
    info.Clear();
    return {FromGrpcStatus(stub_->GetServerInfo(
                context, quantd::v1::GetServerInfoRequest(), &info)),
            ""};
  };
  if (absl::Status status = RunWithRetries("GetServerInfo", attempt);
      !status.ok()) {
    return status;
  }
  return info;
}

absl::StatusOr<ServingStatus> Client::Health(const std::string& service) {
  const std::string request_bytes = EncodeHealthCheckRequest(service);
  grpc::ByteBuffer response;
  auto attempt = [&](grpc::ClientContext* context) -> Attempt {
    grpc::Slice request_slice(request_bytes);
    grpc::ByteBuffer request(&request_slice, 1);
    response.Clear();
    grpc::Status status;
    absl::Notification done;
    grpc::GenericStub stub(channel_);
    stub.UnaryCall(context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                   &request, &response, [&status, &done](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    return {FromGrpcStatus(status), ""};
  };
  if (absl::Status status = RunWithRetries("Health", attempt); !status.ok()) {
    return status;
  }
  grpc::Slice response_slice;
  if (!response.DumpToSingleSlice(&response_slice).ok()) {
    return absl::InternalError("unreadable grpc.health.v1 response");
  }
  return DecodeHealthCheckResponse(
      std::string(reinterpret_cast<const char*>(response_slice.begin()),
                  response_slice.size()));
}

}  // namespace quantd::client
