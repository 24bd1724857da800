// Which constant weights of a model the weight passes quantize, on which
// channel axis, and why the others stay float; and quantizing the planned
// weights into INT8 (W8A8) or packed INT4 (W4A8 / W4A4, opset 21)
// initializers behind one DequantizeLinear each (shared by the DYNAMIC_RANGE
// and STATIC_RANGE passes).
#ifndef QUANTD_CORE_PASSES_WEIGHT_PLAN_H_
#define QUANTD_CORE_PASSES_WEIGHT_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/graph/graph_index.h"
#include "core/graph/unique_names.h"
#include "core/numerics/quant_params.h"
#include "core/passes/dynamic_range_pass.h"
#include "core/passes/unit_precision.h"
#include "core/passes/weight_pass_options.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// The ONNX op types whose constant weights quantd quantizes (default
// domain), as GetServerInfo lists them.
inline constexpr const char* kQuantizableOpTypes[] = {"Conv", "Gemm", "MatMul"};

// A default-domain Conv, Gemm or MatMul: the ops whose weight (input 1) the
// passes quantize.
bool IsQuantizableOp(const onnx::NodeProto& node);

// The ONNX op types whose weights (W and R, inputs 1 and 2) quantd
// quantizes while the op itself computes in float: the DequantizeLinear
// before them only saves the bytes (recurrent_weights.h).
inline constexpr const char* kWeightOnlyOpTypes[] = {"LSTM", "GRU", "RNN"};

// A default-domain LSTM, GRU or RNN.
bool IsRecurrentOp(const onnx::NodeProto& node);

// One weight to quantize. Exactly one of `initializer` and `constant_node`
// is >= 0 (indices into the graph's initializers / nodes).
struct WeightPlan {
  std::string tensor;
  int initializer = -1;
  int constant_node = -1;
  // Distinct nodes reading the weight (all read it as input 1 of a
  // quantizable op), in graph order.
  std::vector<int> consumers;
  std::vector<int64_t> dims;
  int64_t num_elements = 0;
  // Channel axis of the scales, or -1 for one scale for the whole tensor;
  // with block_size, the axis the blocks run along (the input axis).
  int axis = -1;
  // > 0: one scale per block of this many values along `axis`
  // (DequantizeLinear-21 block_size): MatMul and Gemm weights, and INT4
  // Conv weights with more than one input channel per group (blocked along
  // axis 1, their input channels).
  int64_t block_size = 0;
  // The precision of its consumers (never FULL). When quantized consumers
  // disagree on weight bits, the 8-bit one wins: one DequantizeLinear serves
  // them all, and the finer grid costs the 4-bit readers nothing in
  // accuracy. Decides the storage: INT4 for W4A8 / W4A4, else INT8.
  tensorflow::quantization::QuantizationPrecision precision =
      tensorflow::quantization::PRECISION_W8A8;
};

// Whether a Conv weight [M, C/group, kernel...] of a blocked request is
// blocked along its input channels (axis 1): only INT4 weights (ONNX Runtime
// runs an INT4 convolution on the dequantized weights, blocked or not, while
// an INT8 one keeps the per-channel form its QLinearConv takes), and only
// with more than one input channel per group.
bool BlocksConvWeight(bool four_bit_weights, const std::vector<int64_t>& dims);

// GPTQ and AWQ see a Conv weight as rows x K, K = channels x taps in the
// tensor's order (column c * taps + t: channel c at kernel tap t). Blocked,
// they take the columns tap by tap, so that each block of channels at one
// tap is contiguous: column p of that order is the tensor's
// TapMajorColumn(p, channels, taps).
inline int64_t TapMajorColumn(int64_t p, int64_t channels, int64_t taps) {
  return p % channels * taps + p / channels;
}
// One K x K input second moment `h` (the tensor's column order) in that
// order, into `out` (K x K).
void TapMajorGram(const float* h, int64_t channels, int64_t taps, float* out);

struct WeightPlanResult {
  std::vector<WeightPlan> weights;
  std::vector<quantd::v1::SkippedTensor> skipped;
};

// Looks at every tensor read as input 1 (the weight) of a default-domain
// Conv, Gemm or MatMul. `ir_version` is the input model's: below 4 every
// initializer must also be a graph input, so being one does not make it
// overridable. `units` gives each consumer's precision (null: every node at
// options.precision): a weight whose consumers are all FULL stays float
// (SKIP_PRECISION_FULL, naming what made them FULL), and so does one whose
// consumers disagree (some FULL, some not: SKIP_PRECISION_FULL naming both).
WeightPlanResult PlanWeights(const onnx::GraphProto& graph,
                             const graph::GraphIndex& index,
                             const WeightPassOptions& options,
                             int64_t ir_version,
                             const UnitPrecision* units = nullptr);

// Like PlanWeights, for the W and R (inputs 1 and 2) of LSTM/GRU/RNN read by
// nothing else: channel axis 1 (a row of gates), never blocked, and 8 bits
// even where the consumers' precision has 4-bit weights (their error is fed
// back at every time step). A tensor some Conv/Gemm/MatMul reads as its
// weight is left to PlanWeights.
WeightPlanResult PlanRecurrentWeights(const onnx::GraphProto& graph,
                                      const graph::GraphIndex& index,
                                      const WeightPassOptions& options,
                                      int64_t ir_version,
                                      const UnitPrecision* units = nullptr);

// The float TensorProto a planned weight's values live in.
onnx::TensorProto* WeightTensor(onnx::GraphProto* graph,
                                const WeightPlan& plan);

// Names of what one quantized weight adds to the graph. The DequantizeLinear
// output keeps the weight's own name, so every reader (and any subgraph)
// sees the dequantized weight without being rewritten.
struct WeightNames {
  std::string values, scale, zero_point, node;
};
std::vector<WeightNames> MakeWeightNames(const std::vector<WeightPlan>& weights,
                                         graph::UniqueNames* names);

// DequantizeLinear(values, scale, zero_point) -> plan.tensor, with `axis`
// when the plan is per channel or blocked, and `block_size` when blocked.
onnx::NodeProto WeightDequantizeNode(const WeightPlan& plan,
                                     const WeightNames& names);

struct QuantizedWeights {
  int quantized = 0;
  uint64_t bytes_before = 0;  // Float bytes of the quantized weights.
  uint64_t bytes_after = 0;   // Their int8/int4 values, scales, zero points.
  // Per planned weight (same order), its scale and zero point per channel
  // (one entry when per tensor; per block, laid out as the scale tensor,
  // when the plan is blocked).
  std::vector<std::vector<numerics::QuantParams>> params;
};

// Quantizes every planned weight of `model`'s graph on the grid of its
// precision (options.weights.SpecFor(plan.precision)), stored INT8 or, for
// 4-bit precisions, INT4 packed by numerics::PackInt4 (zero points too, as
// DequantizeLinear wants them of the values' type; the caller must have
// raised the opset to 21): in groups of
// hooks.group_size run through hooks.parallel_for, polling
// hooks.check_cancelled before each group, freeing each float tensor's values
// as it goes. Adds the values, scales and zero points as initializers (named
// by `names`), and, in plan order on the calling thread, calls
// hooks.on_report (with `note` set when not empty) and
// hooks.on_progress(progress_offset + k + 1, progress_total). Adds no nodes
// and removes nothing: the caller places WeightDequantizeNode()s and then
// drops the emptied float initializers (RemoveQuantizedInitializers).
// INVALID_ARGUMENT for a weight that cannot be quantized (NaN).
absl::StatusOr<QuantizedWeights> QuantizePlannedWeights(
    const std::vector<WeightPlan>& weights,
    const std::vector<WeightNames>& names, const WeightPassOptions& options,
    const PassHooks& hooks, const std::string& note, int64_t progress_offset,
    int64_t progress_total, onnx::ModelProto* model);

// Drops the (already emptied) float initializers of quantized weights, and
// their graph-input entries (IR < 4 lists every initializer as an input).
void RemoveQuantizedInitializers(const std::vector<WeightPlan>& weights,
                                 onnx::GraphProto* graph);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_WEIGHT_PLAN_H_
