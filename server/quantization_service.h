// The gRPC face of the core engine: QuantizationService on the callback API.
// Receives a model (and calibration batches), runs the job in core (never on
// gRPC threads), and streams events and the result back.
#ifndef QUANTD_SERVER_QUANTIZATION_SERVICE_H_
#define QUANTD_SERVER_QUANTIZATION_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "server/auth.h"
#include "server/call_timer.h"
#include "server/job_limits.h"
#include "server/job_runner.h"
#include "server/metrics.h"

namespace quantd::server {

// The metadata key of a call's request id: taken from the client when it
// sends one (sanitized), else generated; always sent back in the initial
// metadata and logged with the call.
inline constexpr char kRequestIdKey[] = "x-request-id";
// Longest client-supplied request id kept (longer ones are truncated).
inline constexpr size_t kMaxRequestIdChars = 128;

// Quantize/Calibrate calls in progress (admitted, not yet done) and whether
// the server is draining (refusing new ones). Thread-safe.
class CallTracker {
 public:
  // Counts a new call in; false (and not counted) when draining.
  bool Enter();
  // A call counted by Enter is done.
  void Exit();
  void StartDraining();
  bool draining() const;
  int active() const;
  // Blocks until no call is in progress or `deadline`; returns the calls
  // still in progress.
  int WaitIdle(absl::Time deadline);

 private:
  mutable absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

class QuantizationServiceImpl final
    : public quantd::v1::QuantizationService::CallbackService {
 public:
  struct Options {
    // Largest model a client may declare; bigger ones are refused
    // (RESOURCE_EXHAUSTED) before any chunk is read.
    uint64_t max_model_bytes = uint64_t{1} << 30;
    // Size of the output model chunks we send.
    uint64_t model_chunk_bytes = uint64_t{1} << 20;
    // The transport's message limit, enforced by the Server; reported in
    // GetServerInfo so clients can size their chunks.
    uint64_t max_message_bytes = uint64_t{16} << 20;
    // Calibration batches one call may send (Calibrate, or Quantize with
    // inline calibration); more is RESOURCE_EXHAUSTED.
    uint64_t max_calibration_batches = 100000;
    // Batches buffered per call between the stream and the core job. The
    // next batch is read from the stream only when the queue has room, so a
    // client that sends faster than core calibrates is held back by gRPC
    // flow control, and a call holds at most this many batches (plus the
    // one being read) in memory.
    size_t calibration_queue_batches = 4;
    // Quantize/Calibrate jobs running in core at once. 0: twice the core
    // threads.
    int max_concurrent_jobs = 0;
    // Calls (model received) that wait for a job slot when all are taken,
    // first come first served; one more is refused at once with
    // RESOURCE_EXHAUSTED, and so is every call beyond the slots when 0. A
    // waiting call holds its model in memory; its deadline, a cancel or
    // max_call_duration takes it out of the queue.
    int max_queued_jobs = 0;
    // Longest a Quantize/Calibrate call may take, from its first message to
    // its status, whatever deadline the client set (or none): past it the
    // call ends DEADLINE_EXCEEDED and its job is cancelled. Zero or
    // negative: no cap.
    absl::Duration max_call_duration = absl::ZeroDuration();
    // When not empty, every call must carry `authorization: Bearer <token>`
    // (else UNAUTHENTICATED); see server/auth.h.
    std::string bearer_token;
  };

  // `engine` and `metrics` must outlive every call, including the core jobs
  // of calls the client abandoned (see Server::Shutdown).
  QuantizationServiceImpl(Engine* engine, Metrics* metrics,
                          const Options& options);
  // Runs the jobs through `jobs` instead (tests); same lifetime rule.
  QuantizationServiceImpl(JobRunner* jobs, Metrics* metrics,
                          const Options& options);

  grpc::ServerBidiReactor<quantd::v1::QuantizeRequest,
                          quantd::v1::QuantizeResponse>*
  Quantize(grpc::CallbackServerContext* context) override;

  grpc::ServerBidiReactor<quantd::v1::CalibrateRequest,
                          quantd::v1::CalibrateResponse>*
  Calibrate(grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* context,
      const quantd::v1::GetServerInfoRequest* request,
      quantd::v1::ServerInfo* response) override;

  // The job limit in force (max_concurrent_jobs resolved).
  int max_concurrent_jobs() const { return limiter_->limit(); }
  int max_queued_jobs() const { return limiter_->max_queued(); }

  // Server shutdown, first step: from now on new Quantize/Calibrate calls are
  // refused with UNAVAILABLE (so clients retry elsewhere) while the running
  // ones go on.
  void StartDraining() { calls_.StartDraining(); }
  // Waits until no Quantize/Calibrate call is in progress, or `deadline`;
  // returns how many still are.
  int WaitForCalls(absl::Time deadline) { return calls_.WaitIdle(deadline); }

 private:
  grpc::Status Admit(const grpc::CallbackServerContext& context) const;

  std::unique_ptr<JobRunner> owned_jobs_;
  JobRunner* const jobs_;
  Metrics* const metrics_;
  const Options options_;
  const BearerTokenAuth auth_;
  std::unique_ptr<JobLimiter> limiter_;
  // Fires max_call_duration; only created when there is a cap.
  std::unique_ptr<CallTimer> timer_;
  // Mutable: Admit counts the call in.
  mutable CallTracker calls_;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_QUANTIZATION_SERVICE_H_
