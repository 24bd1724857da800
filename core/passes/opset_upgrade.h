// Making sure a model's default-domain opset has the ops a rewrite inserts,
// upgrading it with ONNX's version converter when it does not.
#ifndef QUANTD_CORE_PASSES_OPSET_UPGRADE_H_
#define QUANTD_CORE_PASSES_OPSET_UPGRADE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

// DequantizeLinear's `axis` (per-channel scales) arrived in opset 13.
inline constexpr int64_t kPerChannelOpset = 13;
// DynamicQuantizeLinear arrived in opset 11.
inline constexpr int64_t kDynamicQuantizeOpset = 11;

struct OpsetOutcome {
  enum Mode {
    kAlreadyNewEnough,
    kUpgraded,
    // The converter failed but the model has DynamicQuantizeLinear: weights
    // get one scale per tensor (DequantizeLinear without axis).
    kPerTensorFallback,
  };
  Mode mode = kAlreadyNewEnough;
  int64_t from = 0;
  int64_t to = 0;
  std::string note;  // What happened, in words, for reports and the summary.
};

// Ensures the default opset is >= `needed` (kPerChannelOpset or
// kDynamicQuantizeOpset). Below it, converts the model in place with
// onnx::version_conversion::ConvertVersion to exactly `needed`; when that
// fails, falls back to per-tensor if the opset is >= kDynamicQuantizeOpset,
// else FAILED_PRECONDITION saying why.
absl::StatusOr<OpsetOutcome> EnsureOpset(onnx::ModelProto* model,
                                         int64_t needed);

// ConvertVersion on `model` in place. The converter copies the whole model
// (twice: into its IR and back), so the initializers' values are moved aside
// while it runs and moved back by name afterwards. INVALID_ARGUMENT with the
// converter's message when it fails (the model is then unchanged).
absl::Status ConvertOpset(onnx::ModelProto* model, int64_t target);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_OPSET_UPGRADE_H_
