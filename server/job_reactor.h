// The reactor template Quantize and Calibrate share: the request stream's
// state machine (config, model chunks, batches), admission to a job slot,
// the core job's lifetime, and the response stream.
#ifndef QUANTD_SERVER_JOB_REACTOR_H_
#define QUANTD_SERVER_JOB_REACTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/cancellation.h"
#include "core/engine/batch_queue.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.pb.h"
#include "server/call_record.h"
#include "server/call_timer.h"
#include "server/call_tracker.h"
#include "server/chunk_wire.h"
#include "server/job_limits.h"
#include "server/job_runner.h"
#include "server/memory.h"
#include "server/metrics.h"
#include "server/service_options.h"

namespace quantd::server {

// What every call of the service shares; all outlive the call and its job.
struct CallDeps {
  JobRunner* jobs = nullptr;
  JobLimiter* limiter = nullptr;
  CallTimer* timer = nullptr;  // Null: no cap on a call's duration.
  Metrics* metrics = nullptr;
  CallTracker* calls = nullptr;
  UploadBudget* uploads = nullptr;
  IdleHeapTrimmer* trimmer = nullptr;
  const ServiceOptions* options = nullptr;
};

using quantd::v1::TensorBatch;

// What a message of the request stream carries, whatever the RPC.
enum class Part { kConfig, kModelChunk, kExternalChunk, kBatch, kNone };

// What a config says the upload will be.
struct DeclaredUpload {
  uint64_t model_bytes = 0;
  uint64_t external_bytes = 0;  // The external_data stream after the model.
};

// The machinery Quantize and Calibrate share: a request stream of one config,
// the model as chunks, its external_data stream (models sent with external
// data) and then (optionally) calibration batches; a core job
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
//
// Wire: the stream carries raw bytes (the service registers Quantize and
// Calibrate as raw methods) and the reactor parses each message itself. A
// message that does not parse (proto3 strings must be UTF-8) then ends the
// call with INVALID_ARGUMENT; with typed methods gRPC reports it as a
// failed read, indistinguishable from the client's half-close, and the call
// went on without it.
template <typename Request, typename Response>
class JobReactor
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Starts reading (and the server's clock on the call, if it has a cap).
  // Separate from the constructor: a read may complete on another thread at
  // once, and must find the subclass constructed.
  void Begin();

  void OnReadDone(bool ok) final;

  void OnWriteDone(bool ok) final;

  // Cancelled by the client, its deadline, or server shutdown: stop core
  // promptly (also when it waits for a batch) and finish now rather than
  // when the job notices. The status (logged and counted; the client has
  // its own) says which of the three it was.
  void OnCancel() final {
    // gRPC runs OnDone only after OnCancel returned, but counts that in
    // libgrpc++ (uninstrumented: ThreadSanitizer cannot see it, and saw
    // OnDone's delete race with FinishWith's read). Holding a reference of
    // our own says the same thing in code TSan sees; it is never the last.
    refs_.fetch_add(1, std::memory_order_relaxed);
    FinishWith(CancelStatus());  // First: the stopped job ends CANCELLED.
    StopJob();
    Unref();
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
             const CallDeps& deps)
      : jobs_(deps.jobs),
        limiter_(deps.limiter),
        timer_(deps.timer),
        metrics_(deps.metrics),
        calls_(deps.calls),
        uploads_(deps.uploads),
        trimmer_(deps.trimmer),
        options_(*deps.options) {
    call_.Begin(method, context);
  }
  ~JobReactor() override = default;

  // ---- What a subclass says about its RPC. Called on the receive side.
  // (Model chunks usually bypass Request: see TakeBytesChunk.)
  virtual Part PartOf(const Request& request) const = 0;
  // Takes the config out of `request` and returns the declared sizes.
  virtual DeclaredUpload TakeConfig(Request* request) = 0;
  virtual const std::string& Chunk(const Request& request) const = 0;
  virtual std::string* MutableExternalChunk(Request* request) = 0;
  virtual TensorBatch* MutableBatch(Request* request) = 0;
  // The batch field's name, for error messages.
  virtual const char* BatchName() const = 0;
  // Whether a stream that ends without batches still gets a (closed, empty)
  // queue, so core can say what it thinks of calibrating without data.
  virtual bool QueueWithoutBatches() const = 0;
  // Submits the job through jobs() with `model` and `batches` (null when
  // there are none); the job must call JobDone exactly once.
  virtual void Submit(ModelUpload model,
                      std::shared_ptr<BatchQueue> batches) = 0;

  // ---- Send side. Under mu_: what follows the events once they are all
  // out. kWrite with *out filled in (or a message already serialized in
  // *raw, which is then written instead); kDone once the last one was
  // written.
  virtual Tail NextTailLocked(Response* out, grpc::ByteBuffer* raw)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // ---- For subclasses.
  JobRunner* jobs() const { return jobs_; }
  Metrics* metrics() const { return metrics_; }
  const ServiceOptions& options() const { return options_; }
  CallRecord& call() { return call_; }
  std::shared_ptr<const CancellationToken> cancel() const { return cancel_; }
  double receive_seconds() const { return receive_seconds_; }

  // Queues an event for the client (from the job's thread).
  void Enqueue(Response response);

  // Call right before submitting: the job's reference and its slot.
  void JobSubmitted() {
    refs_.fetch_add(1, std::memory_order_relaxed);  // Dropped in JobDone.
    metrics_->JobStarted();
  }

  // From the job's done callback, after its last event. `store` keeps the
  // result (under mu_) when the call is still going and the job succeeded.
  void JobDone(const absl::Status& status, absl::FunctionRef<void()> store);

  absl::Mutex mu_;

 private:
  enum class Receive { kConfig, kModel, kExternal, kBatches };
  enum class Action { kNone, kWrite, kFinish };

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    const bool big = declared_ + declared_external_ >= kTrimHeapAfterModelBytes;
    IdleHeapTrimmer* const trimmer = trimmer_;
    ReleaseUpload();
    delete this;
    // A big call's buffers go back at once; anything its job frees later
    // goes back once the server is idle, so an idle replica returns to its
    // baseline.
    if (big) TrimHeap();
    trimmer->Request();
  }

  // Gives the model bytes this call charged to the upload budget back.
  void ReleaseUpload() {
    if (const uint64_t bytes = upload_charge_.exchange(0); bytes != 0) {
      uploads_->Release(bytes);
    }
  }
  // Why the call was cancelled; `during` is appended to the message.
  // The client's own timer usually fires (and resets the stream) a moment
  // before ours, so a deadline that is about to pass counts as passed.
  bool DeadlinePassed() const {
    constexpr auto kDeadlineSlack = std::chrono::milliseconds(500);
    return call_.context->deadline() <=
           std::chrono::system_clock::now() + kDeadlineSlack;
  }

  grpc::Status CancelStatus(absl::string_view during = "") const;

  // Starts the next read unless the call is over. `reading_` keeps Finish
  // from being called while StartRead is being issued (possibly from the
  // job's thread, through on_room): gRPC must not see a read after the call
  // is done.
  void ReadNext();

  void OnConfig();

  void OnModelPart();
  // A message that is just a model_chunk or an external_data_chunk (the
  // request field `field`; every SDK's upload): its bytes go from gRPC's
  // slices straight into model_ or external_, one copy instead of two
  // (through request_ and then on). False, having done nothing, for any
  // other message, which then goes through the full parse.
  bool TakeBytesChunk(int field);
  // Checks `bytes` more fit the declared size and makes room for them;
  // false (the call finishing) when not.
  bool MakeRoomForModelBytes(uint64_t bytes);

  // The first external_data_chunk (model complete, a stream declared),
  // then each one after it.
  void OnExternalPart();
  // Checks a piece of `bytes` fits the declared stream; false (the call
  // finishing) when not.
  bool FitsExternal(uint64_t bytes);
  // The model is complete; otherwise finishes the call with
  // INVALID_ARGUMENT (`before` says what came too early) and returns false.
  bool ModelComplete(absl::string_view before);
  // The model, and its stream if one was declared, are complete: what a
  // batch or the end of the stream may follow. Otherwise finishes the call
  // with INVALID_ARGUMENT saying what is missing (`before` says what came
  // too early) and returns false.
  bool UploadComplete(absl::string_view before);
  ModelUpload TakeUpload() {
    ModelUpload upload(std::move(model_));
    external_.Append(std::move(external_tail_));
    upload.external = std::move(external_);
    return upload;
  }
  uint64_t ExternalReceived() const {
    return external_.size() + external_tail_.size();
  }
  // Where the next `bytes` of external data go: the tail piece, or a new
  // one (of up to kExternalPieceBytes) when it is full. Pieces much larger
  // than a message, on huge pages: received bytes are written once into
  // memory that faults in 2 MiB at a time.
  std::string* ExternalRoom(uint64_t bytes);
  // Everything received so far, for the call's record.
  void CountBytesIn() { call_.bytes_in = model_.size() + ExternalReceived(); }

  // A batch after the upload: it must be complete; the job starts and the
  // batch goes to it.
  void OnFirstBatch();
  void OnBatchPart();

  void OnHalfClose();

  // Submits the job if a slot is free, or queues the call for one (OnSlot
  // submits it) if the queue has room; otherwise finishes the call with
  // RESOURCE_EXHAUSTED and returns false. The slot goes back in JobDone.
  // While the call waits its batches still flow into the BatchQueue, up to
  // its capacity; then gRPC flow control holds the client back.
  bool StartJob(bool with_queue);

  // A queued call got its slot (on the thread of the job that gave it back).
  // A call that ended meanwhile hands the slot on.
  void OnSlot();

  // The server's cap on the call's duration has passed.
  void OnCallTimeLimit();

  void StopJob();

  // Finishes the call with `status` as soon as no write is outstanding;
  // whatever is still queued is dropped. The first status wins.
  void FinishWith(grpc::Status status);

  // Decides the next step under the lock; the gRPC call is made outside it,
  // so a reaction that runs inline cannot deadlock on mu_.
  void Pump();

  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Action FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobRunner* const jobs_;
  JobLimiter* const limiter_;
  CallTimer* const timer_;  // Null: no cap on the call's duration.
  Metrics* const metrics_;
  CallTracker* const calls_;
  UploadBudget* const uploads_;
  IdleHeapTrimmer* const trimmer_;
  const ServiceOptions options_;
  // Model bytes charged to uploads_ and not yet given back.
  std::atomic<uint64_t> upload_charge_{0};
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
  grpc::ByteBuffer read_buffer_;
  Request request_;
  uint64_t messages_in_ = 0;  // Parsed so far, for messages.
  Receive receive_ = Receive::kConfig;
  uint64_t declared_ = 0;
  uint64_t declared_external_ = 0;
  std::string model_;
  graph::ExternalDataStream external_;
  std::string external_tail_;  // The piece being filled.
  static constexpr uint64_t kExternalPieceBytes = uint64_t{64} << 20;
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
  // A serialized tail message (NextTailLocked's `raw`), or empty.
  grpc::ByteBuffer raw_current_;
  grpc::ByteBuffer write_buffer_;
  grpc::Status final_status_;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_JOB_REACTOR_H_
