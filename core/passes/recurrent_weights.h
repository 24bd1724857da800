// Weight-only quantization of recurrent layers: the W and R of LSTM, GRU and
// RNN become INT8 (one scale per row of gates) behind a DequantizeLinear,
// and the op computes in float as before. Neither ONNX nor ONNX Runtime has
// a default-domain recurrent op on quantized inputs, so this saves bytes
// (these matrices are most of a recurrent model's weights), not time, and
// adds no activation quantization point. Both passes run it on the main
// graph and on every If/Loop/Scan body after their own work.
#ifndef QUANTD_CORE_PASSES_RECURRENT_WEIGHTS_H_
#define QUANTD_CORE_PASSES_RECURRENT_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/passes/dynamic_range_pass.h"
#include "core/passes/subgraph_bodies.h"
#include "core/passes/unit_precision.h"
#include "core/passes/weight_pass_options.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

struct RecurrentWeightStats {
  int quantized_tensors = 0;
  int quantized_nodes = 0;  // Recurrent nodes reading a quantized W or R.
  uint64_t weight_bytes_before = 0;
  uint64_t weight_bytes_after = 0;
  std::vector<quantd::v1::SkippedTensor> skipped;
  std::string opset_note;
};

// Quantizes what PlanRecurrentWeights plans in `model`'s main graph (or, when
// `body` is given, in the body being passed, whose names must not clash with
// `body->outer_root`): rounded to nearest whatever `options` asks of the
// other weights (GPTQ, AWQ and bias correction read statistics of
// Conv/Gemm/MatMul inputs only), reports through `hooks.on_report`. Needs
// opset 13 for per-channel scales: a main graph below it is converted
// (EnsureOpset); where that cannot be done the weights get one scale each
// or, below opset 11, stay float with the reason in `skipped` rather than
// failing the call. INVALID_ARGUMENT for NaN weights, as the passes.
absl::StatusOr<RecurrentWeightStats> QuantizeRecurrentWeights(
    const WeightPassOptions& options, const UnitPrecision& units,
    const PassHooks& hooks, Body* body, onnx::ModelProto* model);

// QuantizeRecurrentWeights after a pass over `model` (or `body`), its figures
// added to the pass's own: `Stats` is PassStats or StaticRangeStats, and
// `quantized` the member counting their quantized weights.
template <typename Stats>
absl::Status AddRecurrentWeights(const WeightPassOptions& options,
                                 const UnitPrecision& units,
                                 const PassHooks& hooks, Body* body,
                                 onnx::ModelProto* model, Stats* stats,
                                 int Stats::*quantized) {
  absl::StatusOr<RecurrentWeightStats> r =
      QuantizeRecurrentWeights(options, units, hooks, body, model);
  if (!r.ok()) return r.status();
  stats->*quantized += r->quantized_tensors;
  stats->quantized_nodes += r->quantized_nodes;
  stats->weight_bytes_before += r->weight_bytes_before;
  stats->weight_bytes_after += r->weight_bytes_after;
  for (auto& skip : r->skipped) stats->skipped.push_back(std::move(skip));
  AppendNote(&stats->opset_note, r->opset_note);
  return absl::OkStatus();
}

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_RECURRENT_WEIGHTS_H_
