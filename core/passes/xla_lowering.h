// Op set XLA: integer compute in standard ops a compiler can fuse.
//
// DYNAMIC_RANGE (LowerToXla): each quantized MatMul / Gemm / Conv becomes
//
//   x -> DynamicQuantizeLinear -> (x_q uint8, x_scale, x_zp)
//   MatMulInteger(x_q, W_q int8, x_zp, W_zp)       (MatMul, Gemm)
//   ConvInteger(x_q, W_q uint8, x_zp, W_zp = 128)  (Conv)
//     -> int32 -> Cast(FLOAT) -> Mul(x_scale * w_scale) [-> Add(bias)] -> y
//
// w_scale is a scalar or per output channel: shape [N] for MatMul/Gemm (the
// last axis), [M, 1, ...] for Conv (axis 1 of the NC... output). Conv weights
// are stored UINT8 (int8 value + 128, zero point 128) because ONNX Runtime's
// CPU ConvInteger only takes uint8 x uint8 with a per-tensor weight zero
// point. Gemm is lowered only with alpha = beta = 1 and transA = 0 (a
// transB = 1 weight is stored transposed); its C is added after the rescale.
//
// STATIC_RANGE (LowerQdqToXla), from the pass's QDQ graph: the activation's
// QuantizeLinear (calibrated scale and zero point, uint8) stays and feeds
//
//   ConvInteger / MatMulInteger(x_q, W_q, x_zp, W_zp) -> int32
//     [-> Add(int32 bias)] -> Cast(FLOAT) -> Mul(x_scale * w_scale) -> y
//
// with the weights in the layouts above, x_scale * w_scale folded into one
// initializer, and the int32 bias (scale x_scale * w_scale) added to the
// accumulator before the Cast. A MatMul of two activations becomes a uint8 x
// uint8 MatMulInteger. DequantizeLinears left without readers are removed.
#ifndef QUANTD_CORE_PASSES_XLA_LOWERING_H_
#define QUANTD_CORE_PASSES_XLA_LOWERING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/graph/unique_names.h"
#include "core/numerics/quant_params.h"
#include "core/passes/qdq_pattern.h"
#include "core/passes/weight_pass_options.h"
#include "core/passes/weight_plan.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

// Before any weight is quantized: UNIMPLEMENTED, naming the node and why,
// for a planned consumer the lowering cannot express (a Gemm with alpha or
// beta != 1 or transA = 1; a weight shared by consumers wanting different
// layouts; per-channel asymmetric weights of a Conv, or of a MatMul whose
// weight is not 2-D).
absl::Status CheckXlaLowerable(const onnx::GraphProto& graph,
                               const std::vector<WeightPlan>& weights,
                               const WeightPassOptions& options);

// After QuantizePlannedWeights (values, scales and zero points are
// initializers named by `names`, `params` their parameters): rewrites the
// initializers into the layouts above, replaces every planned consumer by
// its integer form (keeping its output names), drops the Constant nodes of
// quantized weights and the emptied float initializers. Node order stays
// topological. INTERNAL if the initializers are not as expected.
absl::Status LowerToXla(
    const std::vector<WeightPlan>& weights,
    const std::vector<WeightNames>& names,
    const std::vector<std::vector<numerics::QuantParams>>& params,
    int64_t ir_version, graph::UniqueNames* unique, onnx::GraphProto* graph);

// STATIC_RANGE: rewrites the QDQ graph in place (see the top). A quantized
// node that cannot be expressed (a Gemm with alpha or beta != 1 or transA =
// 1, int8 activations, per-channel weight zero points of a Conv, ...) stays
// in QDQ form and is listed in `kept` with the reason. INTERNAL only for
// bugs.
absl::StatusOr<QdqLoweringStats> LowerQdqToXla(int64_t ir_version,
                                               onnx::GraphProto* graph);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_XLA_LOWERING_H_
