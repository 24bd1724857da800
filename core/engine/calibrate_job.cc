// RunCalibrate: one Calibrate call, from model bytes and a stream of batches
// to activation ranges.
#include <chrono>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/engine/calibration_session.h"
#include "core/engine/engine.h"
#include "core/engine/request_options.h"
#include "core/graph/function_inline.h"
#include "core/graph/model_io.h"
#include "core/graph/prepare.h"
#include "core/graph/validate.h"
#include "core/passes/fold_constants.h"

namespace quantd {
namespace {

void Report(const CalibrateEvents& events, quantd::v1::Stage stage,
            int64_t done, int64_t total, std::string message) {
  if (!events.on_progress) return;
  quantd::v1::Progress p;
  p.set_stage(stage);
  p.set_done(done);
  p.set_total(total);
  p.set_message(std::move(message));
  events.on_progress(p);
}

}  // namespace

absl::StatusOr<quantd::v1::CalibrationResult> CalibrateFromQueue(
    CalibrationSession* session, BatchQueue* batches,
    const std::function<void(int64_t)>& on_batch,
    const CancellationToken& cancel, ThreadPool* pool,
    const std::function<void(quantd::v1::TensorBatch)>& keep, int64_t holdout,
    const std::function<void(quantd::v1::TensorBatch)>& hold) {
  int64_t held = 0;
  while (std::optional<quantd::v1::TensorBatch> batch = batches->Pop()) {
    absl::Status s = cancel.Check("calibration");
    if (s.ok() && held < holdout) {
      ++held;
      if (hold) hold(*std::move(batch));
      continue;
    }
    if (s.ok()) s = session->AddBatch(*batch, pool, cancel);
    if (!s.ok()) {
      // Nobody will read the rest: let the producer's Push calls fail fast.
      batches->Abort();
      return absl::Status(
          s.code(),
          absl::StrCat("calibration batch ", held + session->batch_count() + 1,
                       ": ", s.message()));
    }
    if (on_batch) on_batch(session->batch_count());
    if (keep) keep(*std::move(batch));
  }
  QUANTD_RETURN_IF_ERROR(cancel.Check("calibration"));
  return session->Result();
}

namespace {

absl::StatusOr<quantd::v1::CalibrationResult> RunCalibrateJob(
    const quantd::v1::CalibrateConfig& config, ModelUpload upload,
    BatchQueue* batches, const CalibrateEvents& events,
    const CancellationToken& cancel, ThreadPool* pool,
    const JobLimits& limits) {
  QUANTD_ASSIGN_OR_RETURN(const calibration::ObserverConfig observer_config,
                          ResolveCalibrateRequest(config));

  Report(events, quantd::v1::STAGE_PARSE, 0, 1,
         absl::StrCat("parsing ", upload.bytes.size(), " bytes"));
  QUANTD_ASSIGN_OR_RETURN(onnx::ModelProto model,
                          graph::ParseModel(upload.bytes, &cancel));
  std::string().swap(upload.bytes);
  // Before any other work: an oversized model costs one parse, no more.
  QUANTD_RETURN_IF_ERROR(CheckJobLimits(model, limits));
  if (!upload.external.empty()) {
    QUANTD_RETURN_IF_ERROR(graph::AttachExternalData(&upload.external,
                                                     /*keep_stream=*/false,
                                                     &model)
                               .status());
  }
  Report(events, quantd::v1::STAGE_VALIDATE, 0, 1, "checking the model");
  // As Quantize does: sorted before the checks, which want node order.
  QUANTD_RETURN_IF_ERROR(
      graph::SortTopologically(model.mutable_graph(), nullptr));
  std::vector<std::string> validations;
  QUANTD_RETURN_IF_ERROR(
      graph::ValidateModel(model, "input model", &validations));
  // Quantize inlines local functions the same way before it calibrates or
  // quantizes, so the ranges' tensor names are the ones it will look up.
  QUANTD_RETURN_IF_ERROR(graph::InlineLocalFunctions(&model));
  // Prepared exactly as Quantize prepares it (same folds, same names).
  QUANTD_RETURN_IF_ERROR(
      graph::PrepareGraph(&model, passes::FullPrepareOptions(&cancel)));
  QUANTD_RETURN_IF_ERROR(cancel.Check("validate"));

  // The session keeps the model (until a batch of graph inputs needs the
  // executor, which then holds its own copy of the weights).
  QUANTD_ASSIGN_OR_RETURN(
      std::unique_ptr<CalibrationSession> session,
      CalibrationSession::Create(std::move(model), observer_config, limits));

  Report(events, quantd::v1::STAGE_CALIBRATE, 0, 0,
         absl::StrCat("observing batches with ", observer_config.method));
  absl::StatusOr<quantd::v1::CalibrationResult> result = CalibrateFromQueue(
      session.get(), batches,
      [&](int64_t n) {
        Report(events, quantd::v1::STAGE_CALIBRATE, n, 0,
               absl::StrCat(n, " batches"));
      },
      cancel, pool);
  if (result.ok() && result->batch_count() == 0) {
    return absl::InvalidArgumentError(
        "no calibration batches were sent: send at least one batch after the "
        "model");
  }
  return result;
}

}  // namespace

absl::StatusOr<quantd::v1::CalibrationResult> RunCalibrate(
    const quantd::v1::CalibrateConfig& config, ModelUpload model,
    BatchQueue* batches, const CalibrateEvents& events,
    const CancellationToken& cancel, ThreadPool* pool,
    const JobLimits& limits) {
  // Whatever happens, the producer must not wait for room that never comes.
  struct AbortOnExit {
    BatchQueue* q;
    ~AbortOnExit() { q->Abort(); }
  } abort_on_exit{batches};
  // Running out of memory fails this call, not the process (the job's
  // memory is freed by the unwinding).
  try {
    return RunCalibrateJob(config, std::move(model), batches, events, cancel,
                           pool, limits);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "the Calibrate job ran out of memory; send smaller batches, or ask "
        "the operator for more memory per call");
  }
}

}  // namespace quantd
