// The gRPC face of the core engine: QuantizationService on the callback API,
// a thin table of handlers. Each streaming RPC is a JobReactor of its own
// (quantize_call.h, calibrate_call.h); this class admits calls, owns what
// they share (job slots, the upload budget, the call timer) and answers
// GetServerInfo.
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
#include "server/call_record.h"
#include "server/call_timer.h"
#include "server/call_tracker.h"
#include "server/job_limits.h"
#include "server/job_reactor.h"
#include "server/job_runner.h"
#include "server/memory.h"
#include "server/metrics.h"
#include "server/service_options.h"

namespace quantd::server {

// Quantize and Calibrate are raw methods: their reactors parse each message
// themselves, so a message that does not parse is an error of its own rather
// than a failed read (job_reactor.h).
class QuantizationServiceImpl final
    : public quantd::v1::QuantizationService::WithRawCallbackMethod_Quantize<
          quantd::v1::QuantizationService::WithRawCallbackMethod_Calibrate<
              quantd::v1::QuantizationService::WithCallbackMethod_GetServerInfo<
                  quantd::v1::QuantizationService::Service>>> {
 public:
  using Options = ServiceOptions;

  // `engine` and `metrics` must outlive every call, including the core jobs
  // of calls the client abandoned (see Server::Shutdown).
  QuantizationServiceImpl(Engine* engine, Metrics* metrics,
                          const Options& options);
  // Runs the jobs through `jobs` instead (tests); same lifetime rule.
  QuantizationServiceImpl(JobRunner* jobs, Metrics* metrics,
                          const Options& options);

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Quantize(
      grpc::CallbackServerContext* context) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Calibrate(
      grpc::CallbackServerContext* context) override;

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
  UploadBudget uploads_;
  IdleHeapTrimmer trimmer_;
  CallDeps deps_;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_QUANTIZATION_SERVICE_H_
