#include "server/calibrate_call.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/engine/engine.h"

namespace quantd::server {
namespace {

using quantd::v1::CalibrateConfig;
using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;

// One Calibrate call: config, model chunks, then batches; progress events and
// the CalibrationResult (last) back.
class CalibrateReactor final
    : public JobReactor<CalibrateRequest, CalibrateResponse> {
 public:
  CalibrateReactor(grpc::CallbackServerContext* context, const CallDeps& deps)
      : JobReactor("Calibrate", context, deps) {}

 private:
  Part PartOf(const CalibrateRequest& request) const override {
    switch (request.payload_case()) {
      case CalibrateRequest::kConfig:
        return Part::kConfig;
      case CalibrateRequest::kModelChunk:
        return Part::kModelChunk;
      case CalibrateRequest::kBatch:
        return Part::kBatch;
      case CalibrateRequest::kExternalDataChunk:
        return Part::kExternalChunk;
      case CalibrateRequest::PAYLOAD_NOT_SET:
        break;
    }
    return Part::kNone;
  }
  DeclaredUpload TakeConfig(CalibrateRequest* request) override {
    config_ = std::move(*request->mutable_config());
    return {config_.model_size_bytes(), config_.external_data_bytes()};
  }
  std::string* MutableExternalChunk(CalibrateRequest* request) override {
    return request->mutable_external_data_chunk();
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

  void Submit(ModelUpload model, std::shared_ptr<BatchQueue> batches) override {
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

  Tail NextTailLocked(CalibrateResponse* out,
                      grpc::ByteBuffer* /*raw*/) override
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

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartCalibrateCall(
    grpc::CallbackServerContext* context, const CallDeps& deps) {
  auto* reactor = new CalibrateReactor(context, deps);
  reactor->Begin();
  return reactor;
}

}  // namespace quantd::server
