// Prepares a parsed model the way a runtime would run it, so the passes see
// the graph they expect: nodes sorted, Constant nodes lifted to initializers,
// fp16 weights behind Cast made float32, BatchNormalization folded into the
// Conv/Gemm before it; the steps needing the executor (opset upgrade helpers,
// constant folding) come in through PrepareOptions' callbacks.
#ifndef QUANTD_CORE_GRAPH_PREPARE_H_
#define QUANTD_CORE_GRAPH_PREPARE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// The graph inputs and outputs of a model that computed in FLOAT16 /
// BFLOAT16 before WidenHalfCompute made it compute in float32, with their
// half types, for RestoreHalfInterface.
struct HalfInterface {
  struct Value {
    std::string name;
    int32_t elem_type = 0;
  };
  std::vector<Value> inputs;
  std::vector<Value> outputs;
};

// What PrepareGraph did, in counts, for the call summary.
struct PrepareReport {
  int64_t opset_from = 0;
  int64_t opset_to = 0;
  // Nodes that changed position (main graph and bodies) when sorting.
  int64_t reordered_nodes = 0;
  int64_t lifted_constants = 0;
  int64_t folded_weight_casts = 0;
  int64_t folded_batch_norms = 0;
  int64_t folded_constant_nodes = 0;
  // Free-form notes from the steps (e.g. the opset upgrade).
  std::vector<std::string> notes;
  // A model that computed in FLOAT16 / BFLOAT16 now computes in float32
  // (WidenHalfCompute): what was widened, and its half interface.
  int64_t widened_half_tensors = 0;
  HalfInterface half_interface;

  // One line for the summary ("prepared: ..."); empty when nothing was done.
  std::string Summary() const;
};

// A preparation step implemented in a higher layer (passes), e.g. constant
// folding with the executor. It may add to the report.
using PrepareStep =
    std::function<absl::Status(onnx::ModelProto*, PrepareReport*)>;

struct PrepareOptions {
  bool sort = true;
  bool lift_constants = true;
  bool fold_weight_casts = true;
  bool widen_half_compute = true;
  bool fold_batch_norms = true;
  // Runs after lifting Constants and before the weight / BatchNorm folds
  // (e.g. the opset upgrade to 13). Null: skipped.
  PrepareStep upgrade;
  // Runs last (e.g. constant folding through the executor). Null: skipped.
  PrepareStep fold_constants;
};

// Runs, in order: topological sort (every graph, bodies included), lifting
// of Constant nodes, `upgrade`, folding of Cast(fp16 initializer -> FLOAT)
// feeding Conv/ConvTranspose/Gemm/MatMul, WidenHalfCompute,
// BatchNormalization folding, then `fold_constants`. INVALID_ARGUMENT when the
// graph has a cycle (naming a node on it); other step errors pass through. The
// model's meaning (what ONNX Runtime computes) is unchanged, except that a half
// model computes in float32 (more precisely).
absl::StatusOr<PrepareReport> PrepareGraph(onnx::ModelProto* model,
                                           const PrepareOptions& options);

// A model that computes in FLOAT16 or BFLOAT16 (a half graph input, output
// or initializer left after the weight-Cast fold) is made to compute in
// float32, as quantd's executor computes half tensors anyway: half
// initializers, Constant values and ConstantOfShape values become float32,
// Casts and the dtype of EyeLike / Random* to a half type become FLOAT, and
// every declared half type (graph inputs and outputs included, bodies too)
// becomes FLOAT. Calibration batches then feed float32. `report` gets the
// count and the half interface; false when nothing was half.
// INVALID_ARGUMENT for a half tensor whose data does not match its dims.
absl::StatusOr<bool> WidenHalfCompute(onnx::ModelProto* model,
                                      PrepareReport* report);

// Gives a model widened by WidenHalfCompute back its half interface: each
// input in `half.inputs` is declared half again and read through a Cast to
// FLOAT, each output in `half.outputs` is made by a Cast to its half type
// from the float32 value. The model between stays float32.
void RestoreHalfInterface(const HalfInterface& half, onnx::ModelProto* model);

// Stable topological sort of `graph` and, recursively, its subgraphs: nodes
// keep their order where it is already valid; a node moves only after the
// producers of what it reads (its subgraphs' outer reads included). Names
// no node of the graph produces (inputs, initializers, outer scope, or
// undefined ones left for validation) count as available. INVALID_ARGUMENT
// naming a node on a cycle. `moved` (may be null) counts nodes whose index
// changed.
absl::Status SortTopologically(onnx::GraphProto* graph, int64_t* moved);

// The tensor a Constant node holds (value, value_float(s), value_int(s)),
// named as its output; false for sparse_value, value_string(s), STRING or
// UNDEFINED tensors and nodes without exactly one attribute and one output.
// The caller checks the op type.
bool ConstantTensor(const onnx::NodeProto& node, onnx::TensorProto* out);

// Replaces each Constant node of `graph` (value, value_float(s),
// value_int(s); not sparse_value, value_string(s) or STRING tensors, and not
// when the output is a graph output) by an initializer of the same name, in
// the graph that held it: bodies of If/Loop/Scan get their own initializers
// (lexical scoping unchanged). `ir_version` < 4 also declares main-graph
// initializers as graph inputs and leaves bodies alone. Returns the count.
int64_t LiftConstants(onnx::GraphProto* graph, int64_t ir_version);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_PREPARE_H_
