#include "server/quantize_call.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/engine/engine.h"
#include "server/chunk_wire.h"

namespace quantd::server {
namespace {

using quantd::v1::QuantizeConfig;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;

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

// One Quantize call: config, model chunks, then optional calibration_batches
// (STATIC_RANGE in one call); events, the output model in chunks and the
// summary back.
class QuantizeReactor final
    : public JobReactor<QuantizeRequest, QuantizeResponse> {
 public:
  QuantizeReactor(grpc::CallbackServerContext* context, const CallDeps& deps)
      : JobReactor("Quantize", context, deps) {}

 private:
  Part PartOf(const QuantizeRequest& request) const override {
    switch (request.payload_case()) {
      case QuantizeRequest::kConfig:
        return Part::kConfig;
      case QuantizeRequest::kModelChunk:
        return Part::kModelChunk;
      case QuantizeRequest::kCalibrationBatch:
        return Part::kBatch;
      case QuantizeRequest::kExternalDataChunk:
        return Part::kExternalChunk;
      case QuantizeRequest::PAYLOAD_NOT_SET:
        break;
    }
    return Part::kNone;
  }
  DeclaredUpload TakeConfig(QuantizeRequest* request) override {
    config_ = std::move(*request->mutable_config());
    return {config_.model_size_bytes(), config_.external_data_bytes()};
  }
  std::string* MutableExternalChunk(QuantizeRequest* request) override {
    return request->mutable_external_data_chunk();
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

  void Submit(ModelUpload model, std::shared_ptr<BatchQueue> batches) override {
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

  Tail NextTailLocked(QuantizeResponse* out, grpc::ByteBuffer* raw) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (summary_sent_) return Tail::kDone;
    if (!result_.has_value()) return Tail::kWait;  // Job still running.
    if (model_ == nullptr) {
      model_ = std::make_shared<const std::string>(std::move(result_->model));
      if (!model_->empty()) {
        // The output's size before its bytes, so that a client can hold
        // them in one buffer instead of growing one as chunks come.
        quantd::v1::Progress* send = out->mutable_progress();
        send->set_stage(quantd::v1::STAGE_SEND);
        send->set_total(static_cast<int64_t>(model_->size()));
        send->set_message("output model bytes");
        return Tail::kWrite;
      }
    }
    if (send_offset_ < model_->size()) {
      if (send_offset_ == 0) send_start_ = absl::Now();
      // One chunk at a time, each a message whose payload is a slice of the
      // output model itself: the model is not copied on its way out (gRPC
      // writes from it; the slice keeps it alive while gRPC holds it).
      const size_t n = std::min<uint64_t>(options().model_chunk_bytes,
                                          model_->size() - send_offset_);
      *raw = SoleBytesFieldMessage(QuantizeResponse::kModelChunkFieldNumber,
                                   model_, send_offset_, n);
      send_offset_ += n;
      call().bytes_out += n;
      return Tail::kWrite;
    }
    if (!external_announced_ && !result_->external.empty()) {
      external_announced_ = true;
      quantd::v1::Progress* send = out->mutable_progress();
      send->set_stage(quantd::v1::STAGE_SEND);
      send->set_total(static_cast<int64_t>(result_->external.size()));
      send->set_message("output external data bytes");
      external_pieces_ = result_->external.TakePieces();
      return Tail::kWrite;
    }
    // The external data the same way, piece by piece (a piece is a tensor's
    // bytes), each piece shared with gRPC until it is written.
    while (piece_ < external_pieces_.size()) {
      if (piece_owner_ == nullptr) {
        piece_owner_ = std::make_shared<const std::string>(
            std::move(external_pieces_[piece_]));
        piece_offset_ = 0;
      }
      if (piece_offset_ < piece_owner_->size()) {
        const size_t n = std::min<uint64_t>(
            options().model_chunk_bytes, piece_owner_->size() - piece_offset_);
        *raw = SoleBytesFieldMessage(
            QuantizeResponse::kExternalDataChunkFieldNumber, piece_owner_,
            piece_offset_, n);
        piece_offset_ += n;
        call().bytes_out += n;
        return Tail::kWrite;
      }
      piece_owner_.reset();  // Freed once gRPC lets go of it.
      ++piece_;
    }
    // Everything else is out: the summary goes last.
    summary_sent_ = true;
    quantd::v1::QuantizeSummary* summary = &result_->summary;
    AddCallStages(receive_seconds(),
                  model_->empty()
                      ? 0.0
                      : absl::ToDoubleSeconds(absl::Now() - send_start_),
                  summary);
    *out->mutable_summary() = std::move(*summary);
    result_.reset();
    model_.reset();  // Freed once gRPC lets go of its last chunk.
    return Tail::kWrite;
  }

  // Receive side, handed to the job at submission.
  QuantizeConfig config_;

  std::optional<QuantizeResult> result_ ABSL_GUARDED_BY(mu_);
  // The output model, moved out of result_ to be shared with the chunks in
  // flight.
  std::shared_ptr<const std::string> model_ ABSL_GUARDED_BY(mu_);
  uint64_t send_offset_ ABSL_GUARDED_BY(mu_) = 0;
  // The output's external_data stream: its pieces, the one being sent
  // (shared with the chunks in flight) and the position in it.
  bool external_announced_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> external_pieces_ ABSL_GUARDED_BY(mu_);
  size_t piece_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const std::string> piece_owner_ ABSL_GUARDED_BY(mu_);
  uint64_t piece_offset_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time send_start_ ABSL_GUARDED_BY(mu_);
  bool summary_sent_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartQuantizeCall(
    grpc::CallbackServerContext* context, const CallDeps& deps) {
  auto* reactor = new QuantizeReactor(context, deps);
  reactor->Begin();
  return reactor;
}

}  // namespace quantd::server
