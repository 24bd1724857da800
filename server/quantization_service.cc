#include "server/quantization_service.h"

#include <algorithm>
#include <memory>

#include "core/engine/capabilities.h"
#include "server/calibrate_call.h"
#include "server/quantize_call.h"
#include "server/refused_call.h"

namespace quantd::server {

using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;

namespace {

int JobSlots(const ServiceOptions& options, const JobRunner& jobs) {
  return options.max_concurrent_jobs > 0 ? options.max_concurrent_jobs
                                         : 2 * std::max(jobs.threads(), 1);
}

// Enough to queue a burst of CI clients rather than refuse it; the upload
// budget still bounds the memory the waiting models hold.
int QueuedJobs(const ServiceOptions& options, const JobRunner& jobs) {
  return options.max_queued_jobs >= 0 ? options.max_queued_jobs
                                      : 2 * JobSlots(options, jobs);
}

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
          JobSlots(options, *jobs), QueuedJobs(options, *jobs),
          [metrics](int queued) { metrics->SetQueuedJobs(queued); })),
      uploads_(
          options.max_uploading_bytes,
          [metrics](uint64_t bytes) { metrics->SetUploadingBytes(bytes); }),
      trimmer_([this] { return calls_.active() == 0; },
               absl::Milliseconds(500)) {
  if (options.max_call_duration > absl::ZeroDuration()) {
    timer_ = std::make_unique<CallTimer>();
  }
  deps_.jobs = jobs_;
  deps_.limiter = limiter_.get();
  deps_.timer = timer_.get();
  deps_.metrics = metrics_;
  deps_.calls = &calls_;
  deps_.uploads = &uploads_;
  deps_.trimmer = &trimmer_;
  deps_.options = &options_;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
QuantizationServiceImpl::Quantize(grpc::CallbackServerContext* context) {
  if (grpc::Status status = Admit(*context); !status.ok()) {
    return new RefusedReactor("Quantize", context, metrics_, status);
  }
  return StartQuantizeCall(context, deps_);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
QuantizationServiceImpl::Calibrate(grpc::CallbackServerContext* context) {
  if (grpc::Status status = Admit(*context); !status.ok()) {
    return new RefusedReactor("Calibrate", context, metrics_, status);
  }
  return StartCalibrateCall(context, deps_);
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
  limits->set_max_uploading_bytes(options_.max_uploading_bytes);
  limits->set_max_observer_bytes(static_cast<uint64_t>(
      std::max<int64_t>(jobs_->limits().max_observer_memory_bytes, 0)));
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
