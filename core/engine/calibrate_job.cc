// RunCalibrate: one Calibrate call, from model bytes and a stream of batches
// to activation ranges.
#include "absl/status/status.h"
#include "core/engine/engine.h"

namespace quantd {

absl::StatusOr<quantd::v1::CalibrationResult> RunCalibrate(
    const quantd::v1::CalibrateConfig& config, std::string model_bytes,
    BatchQueue* batches, const CalibrateEvents& events,
    const CancellationToken& cancel, ThreadPool* pool) {
  // Drain what the client sent so its stream can end cleanly.
  while (batches->Pop().has_value()) {
  }
  return absl::UnimplementedError(
      "Calibrate is not implemented yet: the graph executor and the "
      "observers it needs are being built (STATIC_RANGE calibration)");
}

}  // namespace quantd
