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

// Runs onnx::checker::check_model when the model's default opset is <=
// kMaxCheckedOpset and its IR version is one the checker knows, then
// CheckStructure. Appends a description of each check that ran to
// `validations` (may be null). INVALID_ARGUMENT with the failing check's
// message otherwise. `what` names the model in messages ("input model").
absl::Status ValidateModel(const onnx::ModelProto& model,
                           const std::string& what,
                           std::vector<std::string>* validations);

// Our own checks of the main graph: every node input is produced by an
// earlier node, an initializer or a graph input (topological order); tensor
// and node output names are unique; graph inputs and outputs have a tensor
// type; initializers hold as many values as their dims say.
absl::Status CheckStructure(const onnx::GraphProto& graph);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_VALIDATE_H_
