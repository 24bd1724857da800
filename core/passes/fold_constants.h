// The preparation steps that need more than the graph layer: the opset
// upgrade to 13 (version converter plus shape inference) and constant
// folding through the executor, wired into graph::PrepareGraph.
#ifndef QUANTD_CORE_PASSES_FOLD_CONSTANTS_H_
#define QUANTD_CORE_PASSES_FOLD_CONSTANTS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/base/cancellation.h"
#include "core/graph/prepare.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

// Largest value a folded node may produce; bigger ones stay nodes (folding
// them would grow the model, e.g. an Expand or Tile of a scalar).
inline constexpr int64_t kMaxFoldedBytes = int64_t{1} << 20;
// How many bytes a folded node's output may exceed its inputs by: a
// ConstantOfShape, Expand, Tile or Range that makes a large value from a
// few bytes stays a node, computed when the model runs, rather than being
// stored in the model (tf2onnx pads channels with ConstantOfShape zeros:
// folded, they made BlazeFace's model 28% larger than the float original).
inline constexpr int64_t kMaxFoldGrowthBytes = 4096;

// Replaces every node whose inputs are all constants (fixed initializers of
// its graph or an enclosing one, or values folded before it) by initializers
// holding its outputs, computed by the executor: in the main graph, then in
// the If/Loop/Scan bodies (a body's folded values become its own
// initializers; exporters leave weight reshuffles such as
// Slice/Concat/Unsqueeze of an LSTM's weights there). In the main graph,
// Shape / Size of a value whose shape shape inference knows statically count
// as constant too. Left alone: nodes with subgraphs, other domains, random
// ops, QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear (they are
// the quantized model's own structure), nodes writing their graph's output,
// outputs over kMaxFoldedBytes (unless no larger than the inputs), outputs
// more than kMaxFoldGrowthBytes larger than the inputs, and nodes the
// executor cannot run. Initializers only folded nodes read are dropped.
// Returns how many nodes were folded. Once `cancel` (may be null) is set,
// CANCELLED within a node (checked before each and by the executor inside
// its run: a node's work can follow its input values, e.g. RoiAlign's
// adaptive sampling); the model is then partly folded, to be discarded.
absl::StatusOr<int64_t> FoldConstantNodes(
    onnx::ModelProto* model, const CancellationToken* cancel = nullptr);

// Upgrades a model whose default opset is in [7, 13) to 13 (ConvertOpset:
// shape inference fills the ranks the converter needs, Softmax-like ops are
// rewritten ahead of it). A model the converter cannot take is left as it
// was with a note: the passes then refuse or fall back as before.
absl::Status UpgradeOpsetForPrepare(onnx::ModelProto* model,
                                    graph::PrepareReport* report);

// PrepareOptions with every step on, the upgrade and constant folding
// included: what Quantize and Calibrate both run. Folding stops with
// CANCELLED once `cancel` (may be null; must outlive the options) is set.
graph::PrepareOptions FullPrepareOptions(
    const CancellationToken* cancel = nullptr);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_FOLD_CONSTANTS_H_
