// Expanding the calls of a model's local functions (ModelProto.functions)
// into the graphs that make them, so that every later step (executor,
// calibration, passes, lowerings) sees plain nodes: a quantized model has its
// Conv/MatMul nodes in the graph whether or not its exporter wrapped them in
// functions (PyTorch's export_modules_as_functions does), and ONNX Runtime
// inlines local functions before running anyway.
//
// Naming: the nodes and tensors of one call are named "<call>/<name in the
// function>" (made unique), where <call> is the call node's name (the
// function's name when the call node has none); the call's own inputs and
// outputs keep their names. The result is deterministic, so a Calibrate call
// and a later Quantize call of the same model agree on every tensor name.
// NodeOrigin records where each inlined node came from, which is what
// unit-wise precision's func_name scoping matches against.
#ifndef QUANTD_CORE_GRAPH_FUNCTION_INLINE_H_
#define QUANTD_CORE_GRAPH_FUNCTION_INLINE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

struct NodeOrigin {
  std::string function;  // The local function whose body held the node.
  std::string domain;    // That function's domain.
  std::string node;      // The node's name in the function body.
  std::string call;      // The (inlined) name of the call node expanded.
  // True for a node directly in the function body; false for one inside a
  // subgraph (If/Loop/Scan body) of such a node, whose innermost scope is
  // that node rather than the function.
  bool top_level = true;
};

struct InlinedFunctions {
  // Every local function of the input model, "name" in model order, called
  // or not (all are removed from the model).
  std::vector<std::string> functions;
  // Names (as found) of the call nodes expanded, nested calls included.
  std::vector<std::string> calls;
  // Inlined node name -> where it came from, for every node that came out
  // of a function body (nodes inside subgraphs of such nodes included).
  absl::flat_hash_map<std::string, NodeOrigin> origins;

  // "inlined 3 calls of local functions Block, Head: ...", or "" when the
  // model had no local function.
  std::string Note() const;
};

// Expands every call of a local function in `model` (main graph, subgraph
// bodies, and calls inside function bodies, to any depth), adds the opset
// imports the bodies need and removes model.functions. A no-op (empty
// result) for a model without local functions.
// INVALID_ARGUMENT: a body reading a name that is neither a function input
// nor produced in the body, calls nested deeper than 32 (recursion), two
// local functions with the same domain and name. UNIMPLEMENTED: a function
// importing an opset version the model imports at another version (inlining
// would change what its ops mean), or carrying fields newer than ONNX 1.12
// (e.g. attribute defaults, which would be lost). On error the model is left
// partly inlined: the caller discards it.
absl::StatusOr<InlinedFunctions> InlineLocalFunctions(onnx::ModelProto* model);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_FUNCTION_INLINE_H_
