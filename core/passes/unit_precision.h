// unit_wise_quantization_precision: the precision of each node, from the
// model-wide default and the per-unit entries.
//
// Scopes. A node lives in the main graph, in a local function (its calls are
// inlined before any pass, graph/function_inline.h, and the inlined node
// remembers its function and its name there), or in the subgraph of a node
// (If then/else branches, Loop and Scan bodies: the scope is that node's
// name). func_name names a local function or a node with a subgraph; a
// UNIT_NODE entry's unit_name is the node's name inside that scope.
//
// Matching:
//  - UNIT_NODE with func_name F: the node named unit_name directly in F.
//    Without func_name: the main-graph node of that name; when the main graph
//    has none, the one node of that name in any scope (the proto: "if users
//    do not need to guarantee uniqueness func_name can be omitted").
//  - UNIT_OP with func_name F: the nodes of that op_type directly in F;
//    without func_name: every node of that op_type.
//  - A node's precision: the UNIT_NODE entry naming it, else FULL for a
//    layer that feeds a logarithm (below), else the UNIT_OP entry scoped to
//    its scope, else the unscoped UNIT_OP entry, else the default
//    (quantization_precision, UNSPECIFIED = W8A8). Every call of a function
//    shares the precision of the function's nodes.
//  - Layers that feed a logarithm stay float unless a UNIT_NODE entry names
//    them: a Conv, Gemm or MatMul whose output reaches a Log within
//    kLogReach nodes through ops that keep small values small (Slice, Pow,
//    Add, Sqrt, Mul, Concat, Relu, MatMul, ...; not through Softmax,
//    Sigmoid, Tanh, normalisations, Exp, recurrent ops or control flow).
//    Rounding noise is absolute, and the Log turns it into relative error on
//    the smallest values: on a spectrogram front end (STFT as a Conv, then
//    |X|, then log) the quiet bins, which carry silence and onsets, lose
//    everything (Silero VAD v4: 16.8 dB at the output with the STFT Conv
//    quantized, 23.2 dB without; docs/accuracy.md).
//
// Errors:
//  - INVALID_ARGUMENT, listing every offending entry (index and content) in
//    one message: unit_type UNIT_UNSPECIFIED (or unknown); empty unit_name;
//    quantization_precision PRECISION_UNSPECIFIED (or unknown); a unit that
//    matches nothing (naming where it looked; a func_name that names no
//    local function and no node with a subgraph, or a function that is
//    never called); two entries for the same unit with different precisions
//    (also a scoped and an unscoped UNIT_NODE entry naming the same node);
//    an ambiguous UNIT_NODE entry (several nodes of that name in one scope,
//    or, without func_name, in several scopes); a func_name naming both a
//    local function and a node with a subgraph.
//  - An entry may be FULL, W8A8, W4A8 or W4A4, so W8A8 and 4-bit layers mix
//    in one model (4-bit weights are INT4, opset 21). Whether the method
//    can express the precision is checked by the pass options: DYNAMIC_RANGE
//    refuses W4A4 units (ResolveDynamicRangeOptions: DynamicQuantizeLinear
//    is uint8 only), and op_set XLA refuses 4-bit weights.
#ifndef QUANTD_CORE_PASSES_UNIT_PRECISION_H_
#define QUANTD_CORE_PASSES_UNIT_PRECISION_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/graph/function_inline.h"
#include "onnx/onnx_pb.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace quantd::passes {

using UnitPrecisionEntries =
    std::vector<tensorflow::quantization::UnitWiseQuantizationPrecision>;

class UnitPrecision {
 public:
  // The default alone (no entries): every node at `default_precision`
  // (UNSPECIFIED = W8A8).
  explicit UnitPrecision(
      tensorflow::quantization::QuantizationPrecision default_precision =
          tensorflow::quantization::PRECISION_W8A8);

  // Checks `entries` against `model` (see the rules above); `inlined` says
  // where the nodes of inlined local functions came from (null or empty: the
  // model had none).
  static absl::StatusOr<UnitPrecision> Resolve(
      const onnx::ModelProto& model,
      tensorflow::quantization::QuantizationPrecision default_precision,
      const UnitPrecisionEntries& entries,
      const graph::InlinedFunctions* inlined = nullptr);

  struct Choice {
    tensorflow::quantization::QuantizationPrecision precision;
    // Index of the deciding entry; kDefault or kFeedsLog when none decided.
    int entry = -1;
  };
  static constexpr int kDefault = -1;
  static constexpr int kFeedsLog = -2;
  // How many nodes downstream a layer's output is followed to a Log.
  static constexpr int kLogReach = 12;
  // For a node of the main graph (inlined function nodes included), or of
  // the body given to InBody. Depends
  // only on the node's name and op_type, so it stays right when a pass
  // renumbers or adds nodes.
  Choice For(const onnx::NodeProto& node) const;
  // The same choices for the nodes of a subgraph body whose owner node's
  // unit name (its name, or its name in its function) is `owner`.
  UnitPrecision InBody(const std::string& owner) const;
  bool IsFull(const onnx::NodeProto& node) const {
    return For(node).precision == tensorflow::quantization::PRECISION_FULL;
  }
  // What decided the node's precision, for skip details:
  // "unit_wise_quantization_precision[1] {unit_type: UNIT_NODE ...}" or
  // "the model-wide quantization_precision PRECISION_FULL".
  std::string Why(const onnx::NodeProto& node) const;

 private:
  tensorflow::quantization::QuantizationPrecision default_;
  UnitPrecisionEntries entries_;
  // "" for the main graph, else the owner of the body For is asked about.
  std::string body_scope_;
  // Inlined node name -> (function, name in it); the function is "" for a
  // node inside a subgraph of a function's node (its scope is the body's).
  // Other nodes are in body_scope_ under their own name.
  absl::flat_hash_map<std::string, std::pair<std::string, std::string>>
      inlined_;
  // (scope, unit_name) -> entry.
  absl::flat_hash_map<std::pair<std::string, std::string>, int> by_node_;
  // (scope, op_type) -> entry of a scoped UNIT_OP entry.
  absl::flat_hash_map<std::pair<std::string, std::string>, int> by_scoped_op_;
  absl::flat_hash_map<std::string, int> by_op_;  // op_type -> unscoped entry
  // (scope, node name as in its graph) of layers that feed a logarithm ->
  // the Log node's name.
  absl::flat_hash_map<std::pair<std::string, std::string>, std::string>
      feeds_log_;
};

// The scope of the nodes in `owner`'s subgraphs: its name, or its name in
// its local function when it was inlined from one (`inlined` may be null).
// The bodies of unnamed nodes share the scope kUnnamedScope, which no
// func_name should name.
inline constexpr char kUnnamedScope[] = "(unnamed node)";
std::string BodyScope(const onnx::NodeProto& owner,
                      const graph::InlinedFunctions* inlined);

// True when the default or some entry is W4A8 or W4A4 (4-bit weights; W4A4
// is the only precision with 4-bit activations).
bool MayUseFourBitWeights(
    tensorflow::quantization::QuantizationPrecision default_precision,
    const UnitPrecisionEntries& entries);

// "unit_wise_quantization_precision[i] {<entry as text>}".
std::string DescribeUnitEntry(
    int index,
    const tensorflow::quantization::UnitWiseQuantizationPrecision& entry);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_UNIT_PRECISION_H_
