// Making sure a model's default-domain opset has the ops a rewrite inserts:
// up to 13 with ONNX's version converter, and from 13 to 21 (INT4 / UINT4
// QuantizeLinear / DequantizeLinear) by our own checked raise, since
// Debian's libonnx (1.12) knows opsets only up to 17.
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

// QuantizeLinear / DequantizeLinear with INT4 / UINT4 arrived in opset 21
// (IR version 10).
inline constexpr int64_t kInt4Opset = 21;

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

// Ensures the default opset is >= `needed` (kPerChannelOpset,
// kDynamicQuantizeOpset or kInt4Opset). Below 13 it converts the model in
// place with onnx::version_conversion::ConvertVersion to exactly
// min(needed, 13); when that fails, falls back to per-tensor if the opset is
// >= kDynamicQuantizeOpset and `needed` is not kInt4Opset, else
// FAILED_PRECONDITION saying why. For kInt4Opset it then raises the model
// with RaiseOpsetForInt4 (kUpgraded whenever the opset changed: node
// indices may have moved, so plans must be redone).
absl::StatusOr<OpsetOutcome> EnsureOpset(onnx::ModelProto* model,
                                         int64_t needed);

// ConvertVersion on `model` in place. The converter copies the whole model
// (twice: into its IR and back), so the initializers' values are moved aside
// while it runs and moved back by name afterwards. INVALID_ARGUMENT with the
// converter's message when it fails (the model is then unchanged).
absl::Status ConvertOpset(onnx::ModelProto* model, int64_t target);

// Raises a model whose default opset is in [13, 21) to 21 in place, and its
// IR version to >= 10: ONNX 1.12 has no converter to 21, so every
// default-domain node (main graph, subgraphs, local functions) is checked
// against the operators whose signature or semantics changed between the
// model's opset and 21 (the ONNX Changelog), and each is either rewritten to
// mean the same at 21 or refused:
//   - opset 14 BatchNormalization: the training outputs are gone; extra
//     outputs nobody reads are dropped, read ones are refused;
//   - opset 16 RoiAlign: coordinate_transformation_mode now defaults to
//     half_pixel; the old behaviour is set explicitly (output_half_pixel);
//   - opset 18 ReduceL1/L2/LogSum/LogSumExp/Max/Mean/Min/Prod/SumSquare:
//     `axes` moved from an attribute to an input; moved (a Constant node);
//   - opset 18 Split: without a `split` input, num_outputs is now required;
//     set to the number of outputs (13 needed an even split, so the same);
//   - opset 18 Resize: coordinate_transformation_mode tf_half_pixel_for_nn
//     was removed; refused;
//   - opset 20 GridSample: modes bilinear / bicubic renamed linear / cubic;
//     renamed;
//   - opset 20 DFT: `axis` moved to an input with another default; refused;
//   - opset 21 GroupNormalization: scale and bias went from one value per
//     group to one per channel; refused.
// Every other change in 14..21 only adds types, or attributes / optional
// inputs whose defaults keep the old behaviour. UNIMPLEMENTED naming the
// node, the op and why for a refused node (nothing is changed then);
// FAILED_PRECONDITION when the opset is below 13. Returns a note listing
// what was rewritten.
absl::StatusOr<std::string> RaiseOpsetForInt4(onnx::ModelProto* model);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_OPSET_UPGRADE_H_
