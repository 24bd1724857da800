#include "server/quantization_service.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/engine/batch_queue.h"
#include "core/engine/cancellation.h"
#include "core/engine/capabilities.h"
#include "server/status.h"

namespace quantd::server {
namespace {

using quantd::v1::CalibrateConfig;
using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeConfig;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;
using quantd::v1::TensorBatch;

// The client's x-request-id, made safe for a log line: printable ASCII
// without spaces or quotes (anything else becomes '_'), at most
// kMaxRequestIdChars; empty when the client sent none.
std::string ClientRequestId(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kRequestIdKey);
  if (it == metadata.end()) return "";
  std::string id(it->second.data(),
                 std::min(it->second.size(), kMaxRequestIdChars));
  for (char& c : id) {
    if (c < 0x21 || c > 0x7e || c == '"') c = '_';
  }
  return id;
}

// Calls with a model at least this big give the freed heap back to the OS
// when they are done (see TrimHeap).
constexpr uint64_t kTrimHeapAfterModelBytes = uint64_t{16} << 20;

// A big call's buffers (the model, its chunks, the parsed graph, the output)
// are freed when the call and its job are done, but glibc keeps freed heap
// pages in its arenas: without this, RSS ratchets up call after call
// (fragmentation, not a leak) and a replica looks like it is leaking.
void TrimHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// A fresh id for a call whose client sent none: 16 random hex digits.
std::string GenerateRequestId() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return absl::StrFormat("%016x", gen());
}

// What every call reports when it finishes: one metrics update and one log
// line, so a call seen in the logs is also counted, and vice versa.
struct CallRecord {
  // Fills in the call's identity and start, and sends its request id back
  // in the initial metadata (so must run before anything is sent).
  void Begin(const char* call_method, grpc::CallbackServerContext* call) {
    method = call_method;
    context = call;
    start = absl::Now();
    request_id = ClientRequestId(*call);
    if (request_id.empty()) request_id = GenerateRequestId();
    call->AddInitialMetadata(kRequestIdKey, request_id);
  }

  const char* method = "";
  const grpc::CallbackServerContext* context = nullptr;
  std::string request_id;
  absl::Time start;
  // Atomic: a call may finish (cancelled) on another thread while a chunk is
  // still being counted.
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> batches{0};
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
  const std::string batches =
      call.batches.load() == 0
          ? ""
          : absl::StrFormat(" calibration_batches=%d", call.batches.load());
  absl::FPrintF(stderr,
                "quantd call method=%s request_id=%s code=%s duration_s=%.3f "
                "bytes_in=%d bytes_out=%d%s peer=%s%s\n",
                call.method, call.request_id,
                StatusCodeName(status.error_code()), seconds,
                call.bytes_in.load(), call.bytes_out.load(), batches,
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

// What a message of the request stream carries, whatever the RPC.
enum class Part { kConfig, kModelChunk, kBatch, kNone };

// The machinery Quantize and Calibrate share: a request stream of one config,
// the model as chunks and then (optionally) calibration batches; a core job
// submitted once the model is complete; and a response stream of the job's
// events followed by its result.
//
// Receive side: reads are strictly sequential (one StartRead outstanding).
// Batches go into a bounded BatchQueue that the core job pops; the next read
// is started only when Push said there is room, or from the queue's on_room
// callback (on the job's thread) once the job has made room. So a client
// that sends faster than core computes stops being read, and gRPC flow
// control stops it.
//
// Send side: the job's events are queued and written one StartWrite at a
// time (the next from OnWriteDone); when the queue is empty and the job has
// finished, the subclass supplies the tail (the result), then the call
// finishes OK. An error finishes the call as soon as no write is outstanding;
// the first status wins.
//
// Lifetime: the object is reference-counted. gRPC holds one reference until
// OnDone; a submitted core job holds another until its done callback has
// returned. The job can outlive the call (the client went away, or it was
// cancelled and core has not noticed yet), so neither OnDone nor the done
// callback deletes the object alone: the last one out does. The queue's
// on_room runs inside the job's Pop, so the job's reference covers it too.
template <typename Request, typename Response>
class JobReactor : public grpc::ServerBidiReactor<Request, Response> {
 public:
  // Starts reading (and the server's clock on the call, if it has a cap).
  // Separate from the constructor: a read may complete on another thread at
  // once, and must find the subclass constructed.
  void Begin() {
    if (timer_ != nullptr) {
      refs_.fetch_add(1, std::memory_order_relaxed);  // The timer's.
      timer_id_ =
          timer_->Schedule(call_.start + options_.max_call_duration, [this] {
            OnCallTimeLimit();
            Unref();
          });
    }
    ReadNext();
  }

  void OnReadDone(bool ok) final {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
    }
    if (!ok) {
      OnHalfClose();
      return;
    }
    switch (receive_) {
      case Receive::kConfig:
        OnConfig();
        return;
      case Receive::kModel:
        OnModelPart();
        return;
      case Receive::kBatches:
        OnBatchPart();
        return;
    }
  }

  void OnWriteDone(bool ok) final {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      // The peer is gone (or the call was cancelled): nothing more can be
      // delivered, so stop the job and finish.
      // A write fails too when the client's deadline passes while it is
      // still reading: that is DEADLINE_EXCEEDED, as everywhere else.
      if (!ok && !finish_status_.has_value()) {
        finish_status_ =
            DeadlinePassed()
                ? CancelStatus(" while responses were sent")
                : grpc::Status(
                      grpc::StatusCode::CANCELLED,
                      "the client went away while responses were sent");
      }
    }
    Pump();
  }

  // Cancelled by the client, its deadline, or server shutdown: stop core
  // promptly (also when it waits for a batch) and finish now rather than
  // when the job notices. The status (logged and counted; the client has
  // its own) says which of the three it was.
  void OnCancel() final {
    StopJob();
    FinishWith(CancelStatus());
  }

  void OnDone() final {
    calls_->Exit();  // Entered in QuantizationServiceImpl::Admit.
    // Not the last reference: gRPC's is dropped below.
    if (timer_id_ != 0 && timer_->Cancel(timer_id_)) Unref();
    Unref();
  }

 protected:
  enum class Tail { kWait, kWrite, kDone };

  JobReactor(const char* method, grpc::CallbackServerContext* context,
             JobRunner* jobs, JobLimiter* limiter, CallTimer* timer,
             Metrics* metrics, CallTracker* calls,
             const QuantizationServiceImpl::Options& options)
      : jobs_(jobs),
        limiter_(limiter),
        timer_(timer),
        metrics_(metrics),
        calls_(calls),
        options_(options) {
    call_.Begin(method, context);
  }
  ~JobReactor() override = default;

  // ---- What a subclass says about its RPC. Called on the receive side.
  virtual Part PartOf(const Request& request) const = 0;
  // Takes the config out of `request` and returns the declared model size.
  virtual uint64_t TakeConfig(Request* request) = 0;
  virtual const std::string& Chunk(const Request& request) const = 0;
  virtual TensorBatch* MutableBatch(Request* request) = 0;
  // The batch field's name, for error messages.
  virtual const char* BatchName() const = 0;
  // Whether a stream that ends without batches still gets a (closed, empty)
  // queue, so core can say what it thinks of calibrating without data.
  virtual bool QueueWithoutBatches() const = 0;
  // Submits the job through jobs() with `model` and `batches` (null when
  // there are none); the job must call JobDone exactly once.
  virtual void Submit(std::string model,
                      std::shared_ptr<BatchQueue> batches) = 0;

  // ---- Send side. Under mu_: what follows the events once they are all
  // out. kWrite with *out filled in; kDone once the last one was written.
  virtual Tail NextTailLocked(Response* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // ---- For subclasses.
  JobRunner* jobs() const { return jobs_; }
  Metrics* metrics() const { return metrics_; }
  const QuantizationServiceImpl::Options& options() const { return options_; }
  CallRecord& call() { return call_; }
  std::shared_ptr<const CancellationToken> cancel() const { return cancel_; }
  double receive_seconds() const { return receive_seconds_; }

  // Queues an event for the client (from the job's thread).
  void Enqueue(Response response) {
    {
      absl::MutexLock lock(&mu_);
      if (finish_status_.has_value()) return;  // Nobody will read it.
      queue_.push_back(std::move(response));
    }
    Pump();
  }

  // Call right before submitting: the job's reference and its slot.
  void JobSubmitted() {
    refs_.fetch_add(1, std::memory_order_relaxed);  // Dropped in JobDone.
    metrics_->JobStarted();
  }

  // From the job's done callback, after its last event. `store` keeps the
  // result (under mu_) when the call is still going and the job succeeded.
  void JobDone(const absl::Status& status, absl::FunctionRef<void()> store) {
    metrics_->JobFinished();
    limiter_->Release();  // Taken in StartJob.
    std::shared_ptr<BatchQueue> batches;
    std::optional<absl::Time> call_finished_at;
    {
      absl::MutexLock lock(&mu_);
      call_finished_at = finished_at_;
      if (!status.ok()) {
        if (!finish_status_.has_value()) {
          finish_status_ = ToGrpcStatus(status);
        }
      } else if (!finish_status_.has_value()) {
        store();
      }
      batches = batches_;
    }
    // Nobody pops any more: drop what the client sent beyond what the job
    // wanted.
    if (batches != nullptr) batches->Abort();
    // The call ended (cancelled, failed) before its job: say when the job
    // let go, so how promptly core stops is visible in the logs.
    if (call_finished_at.has_value()) {
      absl::FPrintF(stderr,
                    "quantd job-ended method=%s request_id=%s code=%s "
                    "after_call_s=%.4f message=\"%s\"\n",
                    call_.method, call_.request_id,
                    StatusCodeName(ToGrpcStatus(status).error_code()),
                    absl::ToDoubleSeconds(absl::Now() - *call_finished_at),
                    status.message());
    }
    Pump();
    Unref();
  }

  absl::Mutex mu_;

 private:
  enum class Receive { kConfig, kModel, kBatches };
  enum class Action { kNone, kWrite, kFinish };

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    const bool big = declared_ >= kTrimHeapAfterModelBytes;
    delete this;
    if (big) TrimHeap();
  }

  // Why the call was cancelled; `during` is appended to the message.
  // The client's own timer usually fires (and resets the stream) a moment
  // before ours, so a deadline that is about to pass counts as passed.
  bool DeadlinePassed() const {
    constexpr auto kDeadlineSlack = std::chrono::milliseconds(500);
    return call_.context->deadline() <=
           std::chrono::system_clock::now() + kDeadlineSlack;
  }

  grpc::Status CancelStatus(absl::string_view during = "") const {
    if (DeadlinePassed()) {
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("the client's deadline expired", during));
    }
    if (calls_->draining()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          absl::StrCat("server shutting down: the call "
                                       "outlived the shutdown grace period",
                                       during));
    }
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        absl::StrCat("the client cancelled the call", during));
  }

  // Starts the next read unless the call is over. `reading_` keeps Finish
  // from being called while StartRead is being issued (possibly from the
  // job's thread, through on_room): gRPC must not see a read after the call
  // is done.
  void ReadNext() {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      reading_ = true;
    }
    this->StartRead(&request_);
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
    }
    Pump();  // A finish may have waited for us.
  }

  void OnConfig() {
    if (PartOf(request_) != Part::kConfig) {
      FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "first message must be config"));
      return;
    }
    declared_ = TakeConfig(&request_);
    if (declared_ == 0) {
      FinishWith(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          "config.model_size_bytes is required: the model's size in bytes "
          "(> 0)"));
      return;
    }
    if (declared_ > options_.max_model_bytes) {
      FinishWith(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("config.model_size_bytes = ", declared_,
                                    " is over this server's limit of ",
                                    options_.max_model_bytes, " bytes")));
      return;
    }
    // Reserved up front so appending chunks never copies the model; the
    // size is bounded by max_model_bytes above.
    model_.reserve(declared_);
    receive_ = Receive::kModel;
    ReadNext();
  }

  void OnModelPart() {
    switch (PartOf(request_)) {
      case Part::kModelChunk:
        break;
      case Part::kBatch:
        if (model_.size() != declared_) {
          FinishWith(grpc::Status(
              grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat(
                  "a ", BatchName(), " before the model is complete: received ",
                  model_.size(), " of config.model_size_bytes = ", declared_,
                  " bytes")));
          return;
        }
        if (!StartJob(/*with_queue=*/true)) return;
        receive_ = Receive::kBatches;
        OnBatchPart();
        return;
      case Part::kConfig:
        FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "config must be sent exactly once"));
        return;
      case Part::kNone:
        FinishWith(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("a message after config must be a model_chunk "
                         "(or, once the model is complete, a ",
                         BatchName(), ")")));
        return;
    }
    const std::string& chunk = Chunk(request_);
    if (chunk.size() > declared_ - model_.size()) {
      FinishWith(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("received more model bytes than "
                                    "config.model_size_bytes = ",
                                    declared_, " (",
                                    model_.size() + chunk.size(), " so far)")));
      return;
    }
    model_.append(chunk);
    call_.bytes_in = model_.size();
    ReadNext();
  }

  void OnBatchPart() {
    switch (PartOf(request_)) {
      case Part::kBatch:
        break;
      case Part::kModelChunk:
        FinishWith(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("a model_chunk after a ", BatchName(),
                                      ": the whole model must come first")));
        return;
      case Part::kConfig:
        FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "config must be sent exactly once"));
        return;
      case Part::kNone:
        FinishWith(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("a message after the model must be a ", BatchName())));
        return;
    }
    const uint64_t count = ++call_.batches;
    metrics_->AddCalibrationBatches(call_.method, 1);
    if (count > options_.max_calibration_batches) {
      FinishWith(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("more than ", options_.max_calibration_batches, " ",
                       BatchName(), "es in one call (this server's limit)")));
      return;
    }
    TensorBatch batch = std::move(*MutableBatch(&request_));
    // request_ must not be touched after the Push: when it says "full", the
    // job's next Pop may start the next read into request_ at once.
    if (queue_for_reads_->Push(std::move(batch))) ReadNext();
  }

  void OnHalfClose() {
    if (call_.context->IsCancelled()) {
      FinishWith(CancelStatus(" while receiving the request"));
      return;
    }
    // The client's reset at its deadline can reach us as a failed read
    // before gRPC marks the call cancelled: a request cut short then is an
    // expired call, not a malformed one.
    const bool cut_short =
        receive_ == Receive::kConfig ||
        (receive_ == Receive::kModel && model_.size() != declared_);
    if (cut_short && DeadlinePassed()) {
      FinishWith(CancelStatus(" while receiving the request"));
      return;
    }
    switch (receive_) {
      case Receive::kConfig:
        FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "empty stream: expected a config message"));
        return;
      case Receive::kModel:
        if (model_.size() != declared_) {
          FinishWith(grpc::Status(
              grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("the stream ended after ", model_.size(),
                           " model bytes; config.model_size_bytes declared ",
                           declared_)));
          return;
        }
        if (!StartJob(/*with_queue=*/QueueWithoutBatches())) return;
        if (queue_for_reads_ != nullptr) queue_for_reads_->Close();
        return;
      case Receive::kBatches:
        queue_for_reads_->Close();
        return;
    }
  }

  // Submits the job if a slot is free, or queues the call for one (OnSlot
  // submits it) if the queue has room; otherwise finishes the call with
  // RESOURCE_EXHAUSTED and returns false. The slot goes back in JobDone.
  // While the call waits its batches still flow into the BatchQueue, up to
  // its capacity; then gRPC flow control holds the client back.
  bool StartJob(bool with_queue) {
    receive_seconds_ = absl::ToDoubleSeconds(absl::Now() - call_.start);
    if (with_queue) {
      queue_for_reads_ =
          std::make_shared<BatchQueue>(options_.calibration_queue_batches);
      queue_for_reads_->SetOnRoom([this] { ReadNext(); });
      absl::MutexLock lock(&mu_);
      batches_ = queue_for_reads_;
    }
    // The wait's reference, taken before a Release on another thread can
    // run OnSlot; not the last one when dropped here (gRPC's is held).
    refs_.fetch_add(1, std::memory_order_relaxed);
    switch (limiter_->AcquireOrQueue([this] { OnSlot(); }, &wait_id_)) {
      case JobLimiter::Admission::kAcquired:
        refs_.fetch_sub(1, std::memory_order_relaxed);
        Submit(std::move(model_), queue_for_reads_);
        return true;
      case JobLimiter::Admission::kQueued:
        return true;
      case JobLimiter::Admission::kRefused:
        break;
    }
    refs_.fetch_sub(1, std::memory_order_relaxed);
    FinishWith(limiter_->BusyStatus());
    return false;
  }

  // A queued call got its slot (on the thread of the job that gave it back).
  // A call that ended meanwhile hands the slot on.
  void OnSlot() {
    wait_id_.store(0);
    bool over;
    {
      absl::MutexLock lock(&mu_);
      over = finish_status_.has_value();
    }
    if (over) {
      limiter_->Release();
    } else {
      Submit(std::move(model_), queue_for_reads_);
    }
    Unref();  // The wait's.
  }

  // The server's cap on the call's duration has passed.
  void OnCallTimeLimit() {
    StopJob();
    // A write the client never reads would hold the finish back; the
    // transport's keepalive and flow control deal with such peers.
    FinishWith(grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("the call took longer than this server's limit of ",
                     absl::FormatDuration(options_.max_call_duration),
                     " per call")));
  }

  void StopJob() {
    cancel_->Cancel();
    // A queued call leaves the queue; the caller holds a reference, so the
    // wait's is not the last.
    if (const uint64_t wait = wait_id_.exchange(0);
        wait != 0 && limiter_->CancelWait(wait)) {
      Unref();
    }
    std::shared_ptr<BatchQueue> batches;
    {
      absl::MutexLock lock(&mu_);
      batches = batches_;
    }
    if (batches != nullptr) batches->Abort();
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

  // Decides the next step under the lock; the gRPC call is made outside it,
  // so a reaction that runs inline cannot deadlock on mu_.
  void Pump() {
    Action action;
    {
      absl::MutexLock lock(&mu_);
      action = NextActionLocked();
    }
    if (action == Action::kWrite) {
      this->StartWrite(&current_);
    } else if (action == Action::kFinish) {
      if (!final_status_.ok()) StopJob();
      RecordCall(metrics_, call_, final_status_);
      this->Finish(final_status_);
    }
  }

  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return Action::kNone;
    if (finish_status_.has_value() && !finish_status_->ok()) {
      if (reading_) return Action::kNone;  // ReadNext pumps again.
      return FinishLocked(*finish_status_);
    }
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      return Action::kWrite;
    }
    switch (NextTailLocked(&current_)) {
      case Tail::kWait:
        return Action::kNone;
      case Tail::kWrite:
        writing_ = true;
        return Action::kWrite;
      case Tail::kDone:
        if (reading_) return Action::kNone;
        return FinishLocked(grpc::Status::OK);
    }
    return Action::kNone;
  }

  Action FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    // Only a job still running cares (see JobDone).
    if (refs_.load(std::memory_order_relaxed) > 1) finished_at_ = absl::Now();
    final_status_ = std::move(status);
    if (!finish_status_.has_value()) finish_status_ = final_status_;
    return Action::kFinish;
  }

  JobRunner* const jobs_;
  JobLimiter* const limiter_;
  CallTimer* const timer_;  // Null: no cap on the call's duration.
  Metrics* const metrics_;
  CallTracker* const calls_;
  const QuantizationServiceImpl::Options options_;
  // Set once in Begin, read in OnDone.
  uint64_t timer_id_ = 0;
  // The call's place in the limiter's queue while it waits for a slot.
  std::atomic<uint64_t> wait_id_{0};
  const std::shared_ptr<CancellationToken> cancel_ =
      std::make_shared<CancellationToken>();
  std::atomic<int> refs_{1};  // gRPC's, dropped in OnDone.
  CallRecord call_;

  // Receive side: only touched by OnReadDone, which gRPC serializes (one
  // read outstanding at a time, whoever started it).
  Request request_;
  Receive receive_ = Receive::kConfig;
  uint64_t declared_ = 0;
  std::string model_;
  double receive_seconds_ = 0;
  std::shared_ptr<BatchQueue> queue_for_reads_;

  // Shared with gRPC reactions on other threads and with the job.
  std::shared_ptr<BatchQueue> batches_ ABSL_GUARDED_BY(mu_);
  std::deque<Response> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // A StartRead is being issued: do not Finish until it has been.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  // Set once the call must end: an error, or OK once everything is sent.
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // When the call finished, if its job was still running then.
  std::optional<absl::Time> finished_at_ ABSL_GUARDED_BY(mu_);
  // Owned by the one writer / the one finisher (writing_ / finished_).
  Response current_;
  grpc::Status final_status_;
};

// One Quantize call: config, model chunks, then optional calibration_batches
// (STATIC_RANGE in one call); events, the output model in chunks and the
// summary back.
class QuantizeReactor final
    : public JobReactor<QuantizeRequest, QuantizeResponse> {
 public:
  QuantizeReactor(grpc::CallbackServerContext* context, JobRunner* jobs,
                  JobLimiter* limiter, CallTimer* timer, Metrics* metrics,
                  CallTracker* calls,
                  const QuantizationServiceImpl::Options& options)
      : JobReactor("Quantize", context, jobs, limiter, timer, metrics, calls,
                   options) {}

 private:
  Part PartOf(const QuantizeRequest& request) const override {
    switch (request.payload_case()) {
      case QuantizeRequest::kConfig:
        return Part::kConfig;
      case QuantizeRequest::kModelChunk:
        return Part::kModelChunk;
      case QuantizeRequest::kCalibrationBatch:
        return Part::kBatch;
      case QuantizeRequest::PAYLOAD_NOT_SET:
        break;
    }
    return Part::kNone;
  }
  uint64_t TakeConfig(QuantizeRequest* request) override {
    config_ = std::move(*request->mutable_config());
    return config_.model_size_bytes();
  }
  const std::string& Chunk(const QuantizeRequest& request) const override {
    return request.model_chunk();
  }
  TensorBatch* MutableBatch(QuantizeRequest* request) override {
    return request->mutable_calibration_batch();
  }
  const char* BatchName() const override { return "calibration_batch"; }
  // STATIC_RANGE with neither ranges nor batches: core explains what is
  // missing (FAILED_PRECONDITION) rather than us guessing.
  bool QueueWithoutBatches() const override {
    const auto& method = config_.options().quantization_method();
    return method.has_experimental_method() &&
           method.experimental_method() ==
               tensorflow::quantization::QuantizationMethod::STATIC_RANGE &&
           config_.calibration().ranges().empty();
  }

  void Submit(std::string model, std::shared_ptr<BatchQueue> batches) override {
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
    JobSubmitted();
    jobs()->SubmitQuantize(
        std::move(config_), std::move(model), std::move(events), cancel(),
        [this](absl::StatusOr<QuantizeResult> result) {
          if (result.ok()) {
            const quantd::v1::QuantizeSummary& summary = result->summary;
            metrics()->AddQuantizedTensors(summary.precision(),
                                           summary.op_set(),
                                           summary.quantized_tensors());
          }
          JobDone(result.status(), [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            result_ = std::move(*result);
          });
        },
        std::move(batches));
  }

  Tail NextTailLocked(QuantizeResponse* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (summary_sent_) return Tail::kDone;
    if (!result_.has_value()) return Tail::kWait;  // Job still running.
    const std::string& model = result_->model;
    if (send_offset_ < model.size()) {
      if (send_offset_ == 0) send_start_ = absl::Now();
      // One chunk at a time, sliced from the result: the output model is
      // never copied whole.
      const size_t n = std::min<uint64_t>(options().model_chunk_bytes,
                                          model.size() - send_offset_);
      out->set_model_chunk(model.data() + send_offset_, n);
      send_offset_ += n;
      call().bytes_out += n;
      return Tail::kWrite;
    }
    // Everything else is out: the summary goes last.
    summary_sent_ = true;
    quantd::v1::QuantizeSummary* summary = &result_->summary;
    AddCallStages(
        receive_seconds(),
        model.empty() ? 0.0 : absl::ToDoubleSeconds(absl::Now() - send_start_),
        summary);
    *out->mutable_summary() = std::move(*summary);
    result_.reset();  // Frees the output model.
    return Tail::kWrite;
  }

  // Receive side, handed to the job at submission.
  QuantizeConfig config_;

  std::optional<QuantizeResult> result_ ABSL_GUARDED_BY(mu_);
  uint64_t send_offset_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time send_start_ ABSL_GUARDED_BY(mu_);
  bool summary_sent_ ABSL_GUARDED_BY(mu_) = false;
};

// One Calibrate call: config, model chunks, then batches; progress events and
// the CalibrationResult (last) back.
class CalibrateReactor final
    : public JobReactor<CalibrateRequest, CalibrateResponse> {
 public:
  CalibrateReactor(grpc::CallbackServerContext* context, JobRunner* jobs,
                   JobLimiter* limiter, CallTimer* timer, Metrics* metrics,
                   CallTracker* calls,
                   const QuantizationServiceImpl::Options& options)
      : JobReactor("Calibrate", context, jobs, limiter, timer, metrics, calls,
                   options) {}

 private:
  Part PartOf(const CalibrateRequest& request) const override {
    switch (request.payload_case()) {
      case CalibrateRequest::kConfig:
        return Part::kConfig;
      case CalibrateRequest::kModelChunk:
        return Part::kModelChunk;
      case CalibrateRequest::kBatch:
        return Part::kBatch;
      case CalibrateRequest::PAYLOAD_NOT_SET:
        break;
    }
    return Part::kNone;
  }
  uint64_t TakeConfig(CalibrateRequest* request) override {
    config_ = std::move(*request->mutable_config());
    return config_.model_size_bytes();
  }
  const std::string& Chunk(const CalibrateRequest& request) const override {
    return request.model_chunk();
  }
  TensorBatch* MutableBatch(CalibrateRequest* request) override {
    return request->mutable_batch();
  }
  const char* BatchName() const override { return "batch"; }
  // Core says what it thinks of a calibration without data.
  bool QueueWithoutBatches() const override { return true; }

  void Submit(std::string model, std::shared_ptr<BatchQueue> batches) override {
    quantd::CalibrateEvents events;
    events.on_progress = [this](const quantd::v1::Progress& progress) {
      CalibrateResponse response;
      *response.mutable_progress() = progress;
      Enqueue(std::move(response));
    };
    JobSubmitted();
    jobs()->SubmitCalibrate(
        std::move(config_), std::move(model), std::move(batches),
        std::move(events), cancel(),
        [this](absl::StatusOr<quantd::v1::CalibrationResult> result) {
          JobDone(result.status(), [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            result_ = std::move(*result);
          });
        });
  }

  Tail NextTailLocked(CalibrateResponse* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (result_sent_) return Tail::kDone;
    if (!result_.has_value()) return Tail::kWait;
    result_sent_ = true;
    *out->mutable_result() = std::move(*result_);
    result_.reset();
    return Tail::kWrite;
  }

  CalibrateConfig config_;

  std::optional<quantd::v1::CalibrationResult> result_ ABSL_GUARDED_BY(mu_);
  bool result_sent_ ABSL_GUARDED_BY(mu_) = false;
};

// A Quantize/Calibrate call refused before anything is read (bad token,
// server busy): finishes at once with `status`, counted and logged like any
// other call.
template <typename Request, typename Response>
class RefusedReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  RefusedReactor(const char* method, grpc::CallbackServerContext* context,
                 Metrics* metrics, const grpc::Status& status) {
    CallRecord call;
    call.Begin(method, context);
    RecordCall(metrics, call, status);
    this->Finish(status);
  }
  void OnDone() override { delete this; }
};

}  // namespace

QuantizationServiceImpl::QuantizationServiceImpl(Engine* engine,
                                                 Metrics* metrics,
                                                 const Options& options)
    : QuantizationServiceImpl(new EngineJobRunner(engine), metrics, options) {
  owned_jobs_.reset(jobs_);
}

QuantizationServiceImpl::QuantizationServiceImpl(JobRunner* jobs,
                                                 Metrics* metrics,
                                                 const Options& options)
    : jobs_(jobs),
      metrics_(metrics),
      options_(options),
      auth_(options.bearer_token),
      limiter_(std::make_unique<JobLimiter>(
          options.max_concurrent_jobs > 0 ? options.max_concurrent_jobs
                                          : 2 * std::max(jobs->threads(), 1),
          options.max_queued_jobs,
          [metrics](int queued) { metrics->SetQueuedJobs(queued); })) {
  if (options.max_call_duration > absl::ZeroDuration()) {
    timer_ = std::make_unique<CallTimer>();
  }
}

grpc::ServerBidiReactor<QuantizeRequest, QuantizeResponse>*
QuantizationServiceImpl::Quantize(grpc::CallbackServerContext* context) {
  if (grpc::Status status = Admit(*context); !status.ok()) {
    return new RefusedReactor<QuantizeRequest, QuantizeResponse>(
        "Quantize", context, metrics_, status);
  }
  auto* reactor =
      new QuantizeReactor(context, jobs_, limiter_.get(), timer_.get(),
                          metrics_, &calls_, options_);
  reactor->Begin();
  return reactor;
}

grpc::ServerBidiReactor<CalibrateRequest, CalibrateResponse>*
QuantizationServiceImpl::Calibrate(grpc::CallbackServerContext* context) {
  if (grpc::Status status = Admit(*context); !status.ok()) {
    return new RefusedReactor<CalibrateRequest, CalibrateResponse>(
        "Calibrate", context, metrics_, status);
  }
  auto* reactor =
      new CalibrateReactor(context, jobs_, limiter_.get(), timer_.get(),
                           metrics_, &calls_, options_);
  reactor->Begin();
  return reactor;
}

// The token first (an unauthenticated caller learns nothing, not even that
// the server is busy), then whether the server is draining, then a quick look
// at the job slots and the queue so a busy server refuses before the model
// is uploaded; the slot (or place in the queue) itself is taken when the
// model is complete (StartJob). An admitted call
// is counted in calls_ until its OnDone.
grpc::Status QuantizationServiceImpl::Admit(
    const grpc::CallbackServerContext& context) const {
  if (grpc::Status status = auth_.Check(context); !status.ok()) return status;
  if (!calls_.Enter()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "quantd is shutting down (draining running calls) "
                        "and takes no new calls; retry on another replica");
  }
  if (!limiter_->HasRoom()) {
    calls_.Exit();
    return limiter_->BusyStatus();
  }
  return grpc::Status::OK;
}

bool CallTracker::Enter() {
  absl::MutexLock lock(&mu_);
  if (draining_) return false;
  ++active_;
  return true;
}

void CallTracker::Exit() {
  absl::MutexLock lock(&mu_);
  --active_;
}

void CallTracker::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool CallTracker::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int CallTracker::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

int CallTracker::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(
      absl::Condition(
          +[](int* active) { return *active == 0; }, &active_),
      deadline);
  return active_;
}

grpc::ServerUnaryReactor* QuantizationServiceImpl::GetServerInfo(
    grpc::CallbackServerContext* context,
    const quantd::v1::GetServerInfoRequest* /*request*/,
    quantd::v1::ServerInfo* response) {
  CallRecord call;
  call.Begin("GetServerInfo", context);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status status = auth_.Check(*context); !status.ok()) {
    RecordCall(metrics_, call, status);
    reactor->Finish(status);
    return reactor;
  }
  FillServerInfo(response);
  quantd::v1::Limits* limits = response->mutable_limits();
  limits->set_max_model_bytes(options_.max_model_bytes);
  limits->set_max_message_bytes(options_.max_message_bytes);
  limits->set_model_chunk_bytes(options_.model_chunk_bytes);
  limits->set_max_calibration_batches(options_.max_calibration_batches);
  limits->set_calibration_queue_batches(
      static_cast<uint32_t>(options_.calibration_queue_batches));
  limits->set_max_concurrent_jobs(limiter_->limit());
  limits->set_max_queued_jobs(limiter_->max_queued());
  limits->set_max_call_duration_seconds(
      options_.max_call_duration > absl::ZeroDuration()
          ? absl::ToDoubleSeconds(options_.max_call_duration)
          : 0.0);
  response->set_core_threads(jobs_->threads());
  RecordCall(metrics_, call, grpc::Status::OK);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace quantd::server
