// Validation of input and output models: ONNX's checker where it knows the
// opset, and our own structural checks (which the rewrites rely on) always.
#ifndef QUANTD_CORE_GRAPH_VALIDATE_H_
#define QUANTD_CORE_GRAPH_VALIDATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// The newest default-domain opset libonnx 1.12's checker knows.
inline constexpr int64_t kMaxCheckedOpset = 17;

// The newest IR version and default-domain opset ONNX Runtime 1.30 loads;
// a model that declares a newer one is refused rather than guessed at.
inline constexpr int64_t kNewestIrVersion = 13;
inline constexpr int64_t kNewestOpset = 26;

// Graphs nested in attributes (If, Loop, Scan bodies) deeper than this are
// refused: every walk of a model recurses once per level.
inline constexpr int kMaxGraphDepth = 32;

// Longest name (tensor, node, graph, attribute, domain) accepted: names are
// echoed in messages and metrics.
inline constexpr size_t kMaxNameBytes = 16 * 1024;

// The fields of the model that the core reads, checked once where the
// model enters, in every graph and function, whatever its opset (the
// checker below only knows opsets <= kMaxCheckedOpset):
//  - IR version and opset imports within what ONNX Runtime loads; no
//    domain imported twice;
//  - every tensor (initializers, Constant and attribute values): an ONNX
//    element type, dims >= 0 whose product fits, data of that size, values
//    inside the model bytes (external data is refused: its paths are never
//    opened), no segments; sparse tensors are refused (UNIMPLEMENTED);
//  - every declared type (graph inputs, outputs, value_info): known element
//    types, nested sequence/optional/map types included;
//  - every attribute: one value field, matching its declared type;
//  - names at most kMaxNameBytes, graphs nested at most kMaxGraphDepth.
// INVALID_ARGUMENT (UNIMPLEMENTED for sparse tensors) naming what failed.
absl::Status CheckModelFields(const onnx::ModelProto& model);

// Runs CheckModelFields, then onnx::checker::check_model when the model's
// default opset is <= kMaxCheckedOpset and its IR version is one the checker
// knows, then CheckStructure. Appends a description of each check that ran to
// `validations` (may be null). INVALID_ARGUMENT with the failing check's
// message otherwise. `what` names the model in messages ("input model").
absl::Status ValidateModel(const onnx::ModelProto& model,
                           const std::string& what,
                           std::vector<std::string>* validations);

// False when ONNX's schema for default-domain `op` at `opset` lists the
// element types its input i may have and `elem_type` is not among them (the
// model is invalid); true when it is, or when libonnx has no such schema or
// formal input to ask.
bool OpSchemaAllowsInput(const std::string& op, int64_t opset, int i,
                         int32_t elem_type);

// Our own checks of the main graph: every node input is produced by an
// earlier node, an initializer or a graph input (topological order); tensor
// and node output names are unique; graph inputs and outputs have a tensor
// type; initializers hold as many values as their dims say.
absl::Status CheckStructure(const onnx::GraphProto& graph);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_VALIDATE_H_
