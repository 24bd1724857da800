#include "server/quantization_service.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/engine/cancellation.h"
#include "core/engine/capabilities.h"
#include "server/status.h"

namespace quantd::server {
namespace {

using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeConfig;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;

// What every call reports when it finishes: one metrics update and one log
// line, so a call seen in the logs is also counted, and vice versa.
struct CallRecord {
  const char* method = "";
  const grpc::CallbackServerContext* context = nullptr;
  absl::Time start;
  // Atomic: a Quantize call may finish (cancelled) on another thread while
  // a chunk is still being counted.
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
};

void RecordCall(Metrics* metrics, const CallRecord& call,
                const grpc::Status& status) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - call.start);
  metrics->RecordCall(call.method, status.error_code(), seconds);
  metrics->AddModelBytesIn(call.bytes_in);
  metrics->AddModelBytesOut(call.bytes_out);
  const std::string detail =
      status.ok() ? ""
                  : absl::StrFormat(" message=\"%s\"", status.error_message());
  absl::FPrintF(stderr,
                "quantd call method=%s code=%s duration_s=%.3f bytes_in=%d "
                "bytes_out=%d peer=%s%s\n",
                call.method, StatusCodeName(status.error_code()), seconds,
                call.bytes_in.load(), call.bytes_out.load(),
                call.context->peer(), detail);
}

// Core timed the stages it ran; the call adds receiving before them and
// sending after them, so the list stays in the order the stages ran.
void AddCallStages(double receive_seconds, double send_seconds,
                   quantd::v1::QuantizeSummary* summary) {
  google::protobuf::RepeatedPtrField<quantd::v1::StageDuration> stages;
  quantd::v1::StageDuration* receive = stages.Add();
  receive->set_stage(quantd::v1::STAGE_RECEIVE);
  receive->set_seconds(receive_seconds);
  stages.MergeFrom(summary->stage_durations());
  quantd::v1::StageDuration* send = stages.Add();
  send->set_stage(quantd::v1::STAGE_SEND);
  send->set_seconds(send_seconds);
  summary->mutable_stage_durations()->Swap(&stages);
}

// One Quantize call. Reads the config and the model on gRPC threads, runs the
// job on the core pool, and writes what the job reports from whichever thread
// produced it (one StartWrite outstanding at a time, the next from
// OnWriteDone).
//
// Lifetime: the object is reference-counted. gRPC holds one reference until
// OnDone; a submitted core job holds another until its done callback has
// returned. The job can outlive the call (the client went away, or it was
// cancelled and core has not noticed yet), so neither OnDone nor the done
// callback deletes the object alone: the last one out does.
class QuantizeReactor final
    : public grpc::ServerBidiReactor<QuantizeRequest, QuantizeResponse> {
 public:
  QuantizeReactor(grpc::CallbackServerContext* context, Engine* engine,
                  Metrics* metrics,
                  const QuantizationServiceImpl::Options& options)
      : engine_(engine), metrics_(metrics), options_(options) {
    call_.method = "Quantize";
    call_.context = context;
    call_.start = absl::Now();
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (IsFinished()) return;
    if (!ok) {
      OnHalfClose();
      return;
    }
    if (!has_config_) {
      OnConfig();
    } else {
      OnChunk();
    }
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      // The peer is gone (or the call was cancelled): nothing more can be
      // delivered, so stop the job and finish.
      if (!ok && !finish_status_.has_value()) {
        finish_status_ =
            grpc::Status(grpc::StatusCode::CANCELLED,
                         "the client went away while responses were sent");
      }
    }
    Pump();
  }

  // Cancelled by the client, its deadline, or server shutdown: stop core
  // promptly and finish now rather than when the job notices.
  void OnCancel() override {
    cancel_->Cancel();
    FinishWith(grpc::Status(grpc::StatusCode::CANCELLED,
                            "call cancelled (client, deadline or shutdown)"));
  }

  void OnDone() override { Unref(); }

 private:
  ~QuantizeReactor() override = default;

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  void OnConfig() {
    if (request_.payload_case() != QuantizeRequest::kConfig) {
      FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "first message must be config"));
      return;
    }
    has_config_ = true;
    config_ = std::move(*request_.mutable_config());
    const uint64_t declared = config_.model_size_bytes();
    if (declared == 0) {
      FinishWith(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          "config.model_size_bytes is required: the model's size in bytes "
          "(> 0)"));
      return;
    }
    if (declared > options_.max_model_bytes) {
      FinishWith(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("config.model_size_bytes = ", declared,
                                    " is over this server's limit of ",
                                    options_.max_model_bytes, " bytes")));
      return;
    }
    // Reserved up front so appending chunks never copies the model; the
    // size is bounded by max_model_bytes above.
    model_.reserve(declared);
    StartRead(&request_);
  }

  void OnChunk() {
    if (request_.payload_case() != QuantizeRequest::kModelChunk) {
      FinishWith(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       request_.payload_case() == QuantizeRequest::kConfig
                           ? "config must be sent exactly once"
                           : "a message after config must be a model_chunk"));
      return;
    }
    const std::string& chunk = request_.model_chunk();
    const uint64_t declared = config_.model_size_bytes();
    if (chunk.size() > declared - model_.size()) {
      FinishWith(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("received more model bytes than "
                                    "config.model_size_bytes = ",
                                    declared, " (",
                                    model_.size() + chunk.size(), " so far)")));
      return;
    }
    model_.append(chunk);
    call_.bytes_in = model_.size();
    StartRead(&request_);
  }

  void OnHalfClose() {
    if (call_.context->IsCancelled()) {
      FinishWith(grpc::Status(grpc::StatusCode::CANCELLED,
                              "call cancelled while receiving the model"));
      return;
    }
    if (!has_config_) {
      FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "empty stream: expected a config message"));
      return;
    }
    if (model_.size() != config_.model_size_bytes()) {
      FinishWith(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("the stream ended after ", model_.size(),
                       " model bytes; config.model_size_bytes declared ",
                       config_.model_size_bytes())));
      return;
    }
    SubmitJob();
  }

  void SubmitJob() {
    receive_seconds_ = absl::ToDoubleSeconds(absl::Now() - call_.start);
    quantd::QuantizeEvents events;
    events.on_progress = [this](const quantd::v1::Progress& progress) {
      QuantizeResponse response;
      *response.mutable_progress() = progress;
      Enqueue(std::move(response));
    };
    events.on_tensor_report = [this](const quantd::v1::TensorReport& report) {
      QuantizeResponse response;
      *response.mutable_tensor_report() = report;
      Enqueue(std::move(response));
    };
    refs_.fetch_add(1, std::memory_order_relaxed);  // Dropped in OnJobDone.
    metrics_->JobStarted();
    engine_->SubmitQuantize(std::move(config_), std::move(model_),
                            std::move(events), cancel_,
                            [this](absl::StatusOr<QuantizeResult> result) {
                              OnJobDone(std::move(result));
                            });
  }

  // On a core pool thread, after the job's last event.
  void OnJobDone(absl::StatusOr<QuantizeResult> result) {
    metrics_->JobFinished();
    {
      absl::MutexLock lock(&mu_);
      if (!result.ok()) {
        if (!finish_status_.has_value()) {
          finish_status_ = ToGrpcStatus(result.status());
        }
      } else if (!finish_status_.has_value()) {
        result_ = std::move(*result);
      }
    }
    Pump();
    Unref();
  }

  void Enqueue(QuantizeResponse response) {
    {
      absl::MutexLock lock(&mu_);
      if (finish_status_.has_value()) return;  // Nobody will read it.
      queue_.push_back(std::move(response));
    }
    Pump();
  }

  // Finishes the call with `status` as soon as no write is outstanding;
  // whatever is still queued is dropped. The first status wins.
  void FinishWith(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      if (!finish_status_.has_value()) finish_status_ = std::move(status);
    }
    Pump();
  }

  bool IsFinished() {
    absl::MutexLock lock(&mu_);
    return finish_status_.has_value();
  }

  enum class Action { kNone, kWrite, kFinish };

  // Decides the next step under the lock; the gRPC call is made outside it,
  // so a reaction that runs inline cannot deadlock on mu_.
  void Pump() {
    Action action;
    {
      absl::MutexLock lock(&mu_);
      action = NextActionLocked();
    }
    if (action == Action::kWrite) {
      StartWrite(&current_);
    } else if (action == Action::kFinish) {
      if (!final_status_.ok()) cancel_->Cancel();
      RecordCall(metrics_, call_, final_status_);
      Finish(final_status_);
    }
  }

  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return Action::kNone;
    if (finish_status_.has_value() && !finish_status_->ok()) {
      return FinishLocked(*finish_status_);
    }
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      return WriteLocked();
    }
    if (summary_sent_) return FinishLocked(grpc::Status::OK);
    if (!result_.has_value()) return Action::kNone;  // Job still running.
    const std::string& model = result_->model;
    if (send_offset_ < model.size()) {
      if (send_offset_ == 0) send_start_ = absl::Now();
      // One chunk at a time, sliced from the result: the output model is
      // never copied whole.
      const size_t n = std::min<uint64_t>(options_.model_chunk_bytes,
                                          model.size() - send_offset_);
      current_.set_model_chunk(model.data() + send_offset_, n);
      send_offset_ += n;
      call_.bytes_out += n;
      return WriteLocked();
    }
    // Everything else is out: the summary goes last.
    summary_sent_ = true;
    quantd::v1::QuantizeSummary* summary = &result_->summary;
    AddCallStages(
        receive_seconds_,
        model.empty() ? 0.0 : absl::ToDoubleSeconds(absl::Now() - send_start_),
        summary);
    *current_.mutable_summary() = std::move(*summary);
    result_.reset();  // Frees the output model.
    return WriteLocked();
  }

  Action WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    return Action::kWrite;
  }

  Action FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    final_status_ = std::move(status);
    if (!finish_status_.has_value()) finish_status_ = final_status_;
    return Action::kFinish;
  }

  Engine* const engine_;
  Metrics* const metrics_;
  const QuantizationServiceImpl::Options options_;
  const std::shared_ptr<CancellationToken> cancel_ =
      std::make_shared<CancellationToken>();
  std::atomic<int> refs_{1};  // gRPC's, dropped in OnDone.
  CallRecord call_;

  // Receive side: only touched by OnReadDone, which gRPC serializes, and
  // handed to the job when the stream half-closes.
  QuantizeRequest request_;
  bool has_config_ = false;
  QuantizeConfig config_;
  std::string model_;
  double receive_seconds_ = 0;

  // Send side: touched by gRPC reactions and core threads.
  absl::Mutex mu_;
  std::deque<QuantizeResponse> queue_ ABSL_GUARDED_BY(mu_);
  std::optional<QuantizeResult> result_ ABSL_GUARDED_BY(mu_);
  uint64_t send_offset_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time send_start_ ABSL_GUARDED_BY(mu_);
  bool summary_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Set once the call must end: an error, or OK once everything is sent.
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Owned by the one writer / the one finisher (writing_ / finished_).
  QuantizeResponse current_;
  grpc::Status final_status_;
};

// Calibrate is declared in the API but not served yet: refuse every call
// with UNIMPLEMENTED (and count it like any other call).
class UnimplementedCalibrateReactor final
    : public grpc::ServerBidiReactor<CalibrateRequest, CalibrateResponse> {
 public:
  UnimplementedCalibrateReactor(grpc::CallbackServerContext* context,
                                Metrics* metrics) {
    CallRecord call;
    call.method = "Calibrate";
    call.context = context;
    call.start = absl::Now();
    const grpc::Status status(
        grpc::StatusCode::UNIMPLEMENTED,
        "Calibrate is not implemented yet: the calibration work "
        "(STATIC_RANGE) will add it");
    RecordCall(metrics, call, status);
    Finish(status);
  }
  void OnDone() override { delete this; }
};

}  // namespace

QuantizationServiceImpl::QuantizationServiceImpl(Engine* engine,
                                                 Metrics* metrics,
                                                 const Options& options)
    : engine_(engine), metrics_(metrics), options_(options) {}

grpc::ServerBidiReactor<QuantizeRequest, QuantizeResponse>*
QuantizationServiceImpl::Quantize(grpc::CallbackServerContext* context) {
  return new QuantizeReactor(context, engine_, metrics_, options_);
}

grpc::ServerBidiReactor<CalibrateRequest, CalibrateResponse>*
QuantizationServiceImpl::Calibrate(grpc::CallbackServerContext* context) {
  return new UnimplementedCalibrateReactor(context, metrics_);
}

grpc::ServerUnaryReactor* QuantizationServiceImpl::GetServerInfo(
    grpc::CallbackServerContext* context,
    const quantd::v1::GetServerInfoRequest* /*request*/,
    quantd::v1::ServerInfo* response) {
  CallRecord call;
  call.method = "GetServerInfo";
  call.context = context;
  call.start = absl::Now();
  FillServerInfo(response);
  quantd::v1::Limits* limits = response->mutable_limits();
  limits->set_max_model_bytes(options_.max_model_bytes);
  limits->set_max_message_bytes(options_.max_message_bytes);
  limits->set_model_chunk_bytes(options_.model_chunk_bytes);
  response->set_core_threads(engine_->threads());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RecordCall(metrics_, call, grpc::Status::OK);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace quantd::server
