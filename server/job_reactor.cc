#include "server/job_reactor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/base/huge_pages.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/status.h"

namespace quantd::server {

template <typename Request, typename Response>
void JobReactor<Request, Response>::Begin() {
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

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnReadDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
  }
  if (!ok) {
    OnHalfClose();
    return;
  }
  if (receive_ == Receive::kModel && TakeBytesChunk(kRequestModelChunkField)) {
    return;
  }
  if (receive_ == Receive::kExternal &&
      TakeBytesChunk(kRequestExternalChunkField)) {
    return;
  }
  request_.Clear();
  if (!grpc::SerializationTraits<Request>::Deserialize(&read_buffer_, &request_)
           .ok()) {
    FinishWith(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("message ", messages_in_ + 1, " is not a valid ",
                     Request::descriptor()->full_name(),
                     " (a truncated message, a wrong field type, or a string "
                     "field that is not UTF-8)")));
    return;
  }
  ++messages_in_;
  switch (receive_) {
    case Receive::kConfig:
      OnConfig();
      return;
    case Receive::kModel:
      OnModelPart();
      return;
    case Receive::kExternal:
      OnExternalPart();
      return;
    case Receive::kBatches:
      OnBatchPart();
      return;
  }
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnWriteDone(bool ok) {
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
              : grpc::Status(grpc::StatusCode::CANCELLED,
                             "the client went away while responses were sent");
    }
  }
  Pump();
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::Enqueue(Response response) {
  {
    absl::MutexLock lock(&mu_);
    if (finish_status_.has_value()) return;  // Nobody will read it.
    queue_.push_back(std::move(response));
  }
  Pump();
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::JobDone(const absl::Status& status,
                                            absl::FunctionRef<void()> store) {
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
      if (status.message().size() > kMaxStatusMessageBytes) {
        // The client got the head of it; the log keeps more, once.
        absl::FPrintF(
            stderr,
            "quantd status-detail method=%s request_id=%s "
            "message=\"%s\"\n",
            call_.method, call_.request_id,
            CapForLog(std::string(status.message()), kMaxLoggedMessageBytes));
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
    absl::FPrintF(
        stderr,
        "quantd job-ended method=%s request_id=%s code=%s "
        "after_call_s=%.4f message=\"%s\"\n",
        call_.method, call_.request_id,
        StatusCodeName(ToGrpcStatus(status).error_code()),
        absl::ToDoubleSeconds(absl::Now() - *call_finished_at),
        CapForLog(std::string(status.message()), kMaxLoggedMessageBytes));
  }
  Pump();
  Unref();
}

template <typename Request, typename Response>
grpc::Status JobReactor<Request, Response>::CancelStatus(
    absl::string_view during) const {
  if (DeadlinePassed()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
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

template <typename Request, typename Response>
void JobReactor<Request, Response>::ReadNext() {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    reading_ = true;
  }
  this->StartRead(&read_buffer_);
  {
    absl::MutexLock lock(&mu_);
    reading_ = false;
  }
  Pump();  // A finish may have waited for us.
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnConfig() {
  if (PartOf(request_) != Part::kConfig) {
    FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "first message must be config"));
    return;
  }
  const DeclaredUpload declared = TakeConfig(&request_);
  declared_ = declared.model_bytes;
  declared_external_ = declared.external_bytes;
  if (declared_ == 0) {
    FinishWith(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "config.model_size_bytes is required: the model's size in bytes "
        "(> 0)"));
    return;
  }
  // The model and its external data are one upload: one limit, one charge.
  const std::string what =
      declared_external_ == 0
          ? absl::StrCat("config.model_size_bytes = ", declared_)
          : absl::StrCat("config.model_size_bytes + external_data_bytes = ",
                         declared_, " + ", declared_external_);
  if (declared_ > options_.max_model_bytes ||
      declared_external_ > options_.max_model_bytes - declared_) {
    FinishWith(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(what, " is over this server's limit of ",
                     options_.max_model_bytes, " bytes (max_model_bytes)")));
    return;
  }
  const uint64_t total = declared_ + declared_external_;
  // Held until the job starts (StartJob, OnSlot) or the call ends, so calls
  // that upload slowly, never finish or wait in the queue cannot pin more
  // than the budget.
  if (!uploads_->TryCharge(total)) {
    FinishWith(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(what,
                     " does not fit in this server's budget for models being "
                     "uploaded or queued (max_uploading_bytes = ",
                     uploads_->limit(), ", ", uploads_->in_use(),
                     " in use by other calls); retry later or on another "
                     "replica")));
    return;
  }
  upload_charge_ = total;
  receive_ = Receive::kModel;
  ReadNext();
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnModelPart() {
  switch (PartOf(request_)) {
    case Part::kModelChunk:
      break;
    case Part::kBatch:
      OnFirstBatch();
      return;
    case Part::kExternalChunk:
      if (!ModelComplete("an external_data_chunk")) return;
      receive_ = Receive::kExternal;
      OnExternalPart();
      return;
    case Part::kConfig:
      FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "config must be sent exactly once"));
      return;
    case Part::kNone:
      FinishWith(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("a message after config must be a model_chunk "
                       "(or, once the model is complete, an "
                       "external_data_chunk or a ",
                       BatchName(), ")")));
      return;
  }
  const std::string& chunk = Chunk(request_);
  if (!MakeRoomForModelBytes(chunk.size())) return;
  model_.append(chunk);
  CountBytesIn();
  ReadNext();
}

template <typename Request, typename Response>
bool JobReactor<Request, Response>::ModelComplete(absl::string_view before) {
  if (model_.size() == declared_) return true;
  FinishWith(grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      absl::StrCat(before, " before the model is complete: received ",
                   model_.size(), " of the ", declared_,
                   " bytes config.model_size_bytes declared")));
  return false;
}

template <typename Request, typename Response>
bool JobReactor<Request, Response>::UploadComplete(absl::string_view before) {
  if (!ModelComplete(before)) return false;
  if (ExternalReceived() != declared_external_) {
    FinishWith(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat(before, " before the external data is complete: received ",
                     ExternalReceived(), " of the ", declared_external_,
                     " bytes config.external_data_bytes declared")));
    return false;
  }
  return true;
}

template <typename Request, typename Response>
std::string* JobReactor<Request, Response>::ExternalRoom(uint64_t bytes) {
  if (external_tail_.capacity() - external_tail_.size() < bytes) {
    external_.Append(std::move(external_tail_));
    // Sized by what is still owed (FitsExternal checked `bytes` fits it).
    const uint64_t owed = declared_external_ - ExternalReceived();
    external_tail_ = std::string();
    external_tail_.reserve(std::max<uint64_t>(
        bytes, std::min<uint64_t>(owed, kExternalPieceBytes)));
    AdviseHugePages(external_tail_.data(), external_tail_.capacity());
  }
  return &external_tail_;
}

template <typename Request, typename Response>
bool JobReactor<Request, Response>::FitsExternal(uint64_t bytes) {
  if (declared_external_ == 0) {
    FinishWith(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "an external_data_chunk, but config.external_data_bytes is 0: "
        "declare the stream's size in the config"));
    return false;
  }
  if (bytes > declared_external_ - ExternalReceived()) {
    FinishWith(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("received more external data than "
                                  "config.external_data_bytes = ",
                                  declared_external_, " (",
                                  ExternalReceived() + bytes, " so far)")));
    return false;
  }
  return true;
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnExternalPart() {
  switch (PartOf(request_)) {
    case Part::kExternalChunk:
      break;
    case Part::kBatch:
      OnFirstBatch();
      return;
    case Part::kModelChunk:
      FinishWith(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          "a model_chunk after an external_data_chunk: the whole model must "
          "come first"));
      return;
    case Part::kConfig:
      FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "config must be sent exactly once"));
      return;
    case Part::kNone:
      FinishWith(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("a message after the model must be an "
                                    "external_data_chunk or a ",
                                    BatchName())));
      return;
  }
  const std::string& chunk = *MutableExternalChunk(&request_);
  if (!FitsExternal(chunk.size())) return;
  ExternalRoom(chunk.size())->append(chunk);
  CountBytesIn();
  ReadNext();
}

template <typename Request, typename Response>
bool JobReactor<Request, Response>::TakeBytesChunk(int field) {
  static_assert(Request::kModelChunkFieldNumber == kRequestModelChunkField);
  static_assert(Request::kExternalDataChunkFieldNumber ==
                kRequestExternalChunkField);
  std::vector<grpc::Slice> slices;
  WireField chunk;
  if (!read_buffer_.Dump(&slices).ok() ||
      !FindSoleBytesField(slices, field, &chunk)) {
    return false;
  }
  ++messages_in_;
  const bool model = field == kRequestModelChunkField;
  if (!(model ? MakeRoomForModelBytes(chunk.size) : FitsExternal(chunk.size))) {
    return true;
  }
  AppendSliceBytes(slices, chunk.offset, chunk.size,
                   model ? &model_ : ExternalRoom(chunk.size));
  CountBytesIn();
  ReadNext();
  return true;
}

template <typename Request, typename Response>
bool JobReactor<Request, Response>::MakeRoomForModelBytes(uint64_t bytes) {
  if (bytes > declared_ - model_.size()) {
    FinishWith(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("received more model bytes than "
                     "config.model_size_bytes = ",
                     declared_, " (", model_.size() + bytes, " so far)")));
    return false;
  }
  if (absl::Status s = ReserveModelBytes(&model_, bytes, declared_); !s.ok()) {
    FinishWith(ToGrpcStatus(s));
    return false;
  }
  return true;
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnFirstBatch() {
  if (!UploadComplete(absl::StrCat("a ", BatchName()))) return;
  if (!StartJob(/*with_queue=*/true)) return;
  receive_ = Receive::kBatches;
  OnBatchPart();
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnBatchPart() {
  switch (PartOf(request_)) {
    case Part::kBatch:
      break;
    case Part::kModelChunk:
    case Part::kExternalChunk:
      FinishWith(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat(PartOf(request_) == Part::kModelChunk
                           ? "a model_chunk"
                           : "an external_data_chunk",
                       " after a ", BatchName(),
                       ": the whole model and its external data must come "
                       "first")));
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

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnHalfClose() {
  if (call_.context->IsCancelled()) {
    FinishWith(CancelStatus(" while receiving the request"));
    return;
  }
  // The client's reset at its deadline can reach us as a failed read
  // before gRPC marks the call cancelled: a request cut short then is an
  // expired call, not a malformed one.
  const bool cut_short =
      receive_ == Receive::kConfig ||
      ((receive_ == Receive::kModel || receive_ == Receive::kExternal) &&
       (model_.size() != declared_ ||
        ExternalReceived() != declared_external_));
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
    case Receive::kExternal:
      if (!UploadComplete("the end of the stream")) return;
      if (!StartJob(/*with_queue=*/QueueWithoutBatches())) return;
      if (queue_for_reads_ != nullptr) queue_for_reads_->Close();
      return;
    case Receive::kBatches:
      queue_for_reads_->Close();
      return;
  }
}

template <typename Request, typename Response>
bool JobReactor<Request, Response>::StartJob(bool with_queue) {
  receive_seconds_ = absl::ToDoubleSeconds(absl::Now() - call_.start);
  // A cancel (OnCancel, the call's time limit) sets finish_status_ and
  // then StopJob aborts batches_: one that ran before batches_ was set here
  // found nothing to abort, and the job would wait in Pop forever, holding
  // its slot. Checking under the same lock that publishes batches_ closes
  // that gap: either StopJob sees the queue, or this sees the call over.
  if (with_queue) {
    queue_for_reads_ =
        std::make_shared<BatchQueue>(options_.calibration_queue_batches);
    queue_for_reads_->SetOnRoom([this] { ReadNext(); });
  }
  bool over;
  {
    absl::MutexLock lock(&mu_);
    batches_ = queue_for_reads_;
    over = finish_status_.has_value();
  }
  if (over) {
    if (queue_for_reads_ != nullptr) queue_for_reads_->Abort();
    return false;
  }
  // The wait's reference, taken before a Release on another thread can
  // run OnSlot; not the last one when dropped here (gRPC's is held).
  refs_.fetch_add(1, std::memory_order_relaxed);
  switch (limiter_->AcquireOrQueue([this] { OnSlot(); }, &wait_id_)) {
    case JobLimiter::Admission::kAcquired:
      refs_.fetch_sub(1, std::memory_order_relaxed);
      // The job limit bounds the model from here. A queued model stays
      // charged to the upload budget, which so bounds the memory of the
      // whole queue.
      ReleaseUpload();
      Submit(TakeUpload(), queue_for_reads_);
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

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnSlot() {
  wait_id_.store(0);
  bool over;
  {
    absl::MutexLock lock(&mu_);
    over = finish_status_.has_value();
  }
  if (over) {
    limiter_->Release();
  } else {
    ReleaseUpload();
    Submit(TakeUpload(), queue_for_reads_);
  }
  Unref();  // The wait's.
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::OnCallTimeLimit() {
  // A write the client never reads would hold the finish back; the
  // transport's keepalive and flow control deal with such peers.
  FinishWith(grpc::Status(
      grpc::StatusCode::DEADLINE_EXCEEDED,
      absl::StrCat("the call took longer than this server's limit of ",
                   absl::FormatDuration(options_.max_call_duration),
                   " per call")));
  // After the status is set: the job, once stopped, ends CANCELLED, and
  // the first status wins.
  StopJob();
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::StopJob() {
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

template <typename Request, typename Response>
void JobReactor<Request, Response>::FinishWith(grpc::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (!finish_status_.has_value()) finish_status_ = std::move(status);
  }
  Pump();
}

template <typename Request, typename Response>
void JobReactor<Request, Response>::Pump() {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    action = NextActionLocked();
  }
  if (action == Action::kWrite) {
    // The last write is done with it (one write at a time).
    write_buffer_.Clear();
    bool own_buffer = false;
    if (raw_current_.Valid()) {
      write_buffer_.Swap(&raw_current_);
      raw_current_.Clear();
    } else if (!grpc::SerializationTraits<Response>::Serialize(
                    current_, &write_buffer_, &own_buffer)
                    .ok()) {
      // Serializing a message the server built cannot fail short of
      // memory; if it does, the call ends rather than sending something
      // else.
      {
        absl::MutexLock lock(&mu_);
        writing_ = false;
      }
      FinishWith(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "a response could not be serialized"));
      return;
    }
    this->StartWrite(&write_buffer_);
  } else if (action == Action::kFinish) {
    if (!final_status_.ok()) StopJob();
    RecordCall(metrics_, call_, final_status_);
    this->Finish(final_status_);
  }
}

template <typename Request, typename Response>
typename JobReactor<Request, Response>::Action
JobReactor<Request, Response>::NextActionLocked() {
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
  switch (NextTailLocked(&current_, &raw_current_)) {
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

template <typename Request, typename Response>
typename JobReactor<Request, Response>::Action
JobReactor<Request, Response>::FinishLocked(grpc::Status status) {
  finished_ = true;
  // Only a job still running cares (see JobDone).
  if (refs_.load(std::memory_order_relaxed) > 1) finished_at_ = absl::Now();
  final_status_ = std::move(status);
  if (!finish_status_.has_value()) finish_status_ = final_status_;
  return Action::kFinish;
}

// The two RPCs; the template's definitions stay in this file.
template class JobReactor<quantd::v1::QuantizeRequest,
                          quantd::v1::QuantizeResponse>;
template class JobReactor<quantd::v1::CalibrateRequest,
                          quantd::v1::CalibrateResponse>;

}  // namespace quantd::server
