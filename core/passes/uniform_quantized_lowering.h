// Op set UNIFORM_QUANTIZED for STATIC_RANGE: dedicated quantized ops
// (QLinearConv, QLinearMatMul), rewritten from the pass's QDQ graph, with
// QuantizeLinear / DequantizeLinear left only at the edges of quantized
// regions.
//
// A quantized node (its inputs DequantizeLinear outputs) becomes a QLinear op
// when its output's only reader is the QuantizeLinear of the output's
// quantization point (which gives the static output scale and zero point a
// QLinear op needs), or a Relu whose output's only reader is that
// QuantizeLinear with zero point 0: the QLinear op's saturation at the zero
// point is then the Relu (as ONNX Runtime fuses it). The QLinear op writes
// the QuantizeLinear's output, so a QLinear op feeding another passes uint8
// directly and the DequantizeLinear -> QuantizeLinear between them goes.
//
//   Conv               -> QLinearConv(x_q, x_s, x_zp, W int8, w_s, w_zp,
//                                     y_s, y_zp, B int32)   (per channel)
//   MatMul, Gemm w/o C -> QLinearMatMul (B int8 [K, N], per column scales)
//   Gemm with C        -> Reshape(x_q, [0, -1, 1, 1]) -> 1x1 QLinearConv with
//                         W [N, K, 1, 1] and the int32 C -> Reshape([0, -1]).
//                         QLinearMatMul has no bias input, and adding C in
//                         float between two QLinear ops would need a
//                         calibrated range of the product without C, which
//                         calibration does not measure.
//
// Data-movement ops (Flatten, Reshape, Transpose, Squeeze, Unsqueeze: uint8
// in every opset) between a DequantizeLinear and a QuantizeLinear with the
// same scale and zero point run on the uint8 tensor instead (they commute
// with quantization; MaxPool would too, but takes uint8 only from opset 12).
// Anything else keeps DequantizeLinear before and QuantizeLinear after it.
#ifndef QUANTD_CORE_PASSES_UNIFORM_QUANTIZED_LOWERING_H_
#define QUANTD_CORE_PASSES_UNIFORM_QUANTIZED_LOWERING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/passes/qdq_pattern.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

// Rewrites the QDQ graph in place (see the top). A quantized node that
// cannot be expressed (its output is a graph output or has no
// QuantizeLinear, a float bias, int8 activations, per-channel weight zero
// points of a Conv, a Gemm with alpha or beta != 1 or transA = 1, ...) stays
// in QDQ form and is listed in `kept` with the reason. INTERNAL only for
// bugs.
absl::StatusOr<QdqLoweringStats> LowerQdqToUniformQuantized(
    int64_t ir_version, onnx::GraphProto* graph);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_UNIFORM_QUANTIZED_LOWERING_H_
