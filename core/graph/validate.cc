#include "core/graph/validate.h"

#include <exception>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/graph/model_io.h"
#include "core/graph/tensor_util.h"
#include "onnx/checker.h"

namespace quantd::graph {
namespace {

absl::Status CheckTyped(const onnx::ValueInfoProto& value, const char* kind) {
  if (!value.has_type() ||
      value.type().value_case() == onnx::TypeProto::VALUE_NOT_SET) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph ", kind, " '", value.name(), "' has no type"));
  }
  if (value.type().has_tensor_type() &&
      value.type().tensor_type().elem_type() == onnx::TensorProto::UNDEFINED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph ", kind, " '", value.name(), "' has no element type"));
  }
  return absl::OkStatus();
}

// Adds a name that must not be defined twice.
absl::Status Define(const std::string& name, const std::string& by,
                    absl::flat_hash_set<std::string>* defined) {
  if (name.empty()) return absl::OkStatus();  // Omitted optional output.
  if (!defined->insert(name).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is defined twice (again by ", by,
                     "); ONNX graphs are in SSA form"));
  }
  return absl::OkStatus();
}

std::string DescribeNode(const onnx::NodeProto& node, int index) {
  return absl::StrCat("node ", index, " '", node.name(), "' (", node.op_type(),
                      ")");
}

absl::Status CheckNodes(const onnx::GraphProto& graph,
                        absl::flat_hash_set<std::string>* defined) {
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    for (const std::string& input : node.input()) {
      if (!input.empty() && !defined->contains(input)) {
        return absl::InvalidArgumentError(absl::StrCat(
            DescribeNode(node, i), " reads '", input,
            "', which no earlier node, initializer or graph input produces "
            "(the graph must be topologically sorted)"));
      }
    }
    for (const std::string& output : node.output()) {
      QUANTD_RETURN_IF_ERROR(Define(output, DescribeNode(node, i), defined));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStructure(const onnx::GraphProto& graph) {
  absl::flat_hash_set<std::string> defined;
  for (const auto& input : graph.input()) {
    QUANTD_RETURN_IF_ERROR(CheckTyped(input, "input"));
    QUANTD_RETURN_IF_ERROR(Define(input.name(), "a graph input", &defined));
  }
  absl::flat_hash_set<std::string> initializers;
  for (const auto& init : graph.initializer()) {
    if (!initializers.insert(init.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer '", init.name(), "' is defined twice"));
    }
    QUANTD_RETURN_IF_ERROR(CheckTensorSize(init));
    defined.insert(init.name());  // May also be a graph input (a default).
  }
  QUANTD_RETURN_IF_ERROR(CheckNodes(graph, &defined));
  for (const auto& output : graph.output()) {
    QUANTD_RETURN_IF_ERROR(CheckTyped(output, "output"));
    if (!defined.contains(output.name())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph output '", output.name(), "' is not produced by any node"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const onnx::ModelProto& model,
                           const std::string& what,
                           std::vector<std::string>* validations) {
  const int64_t opset = DefaultOpset(model);
  const bool checker_knows =
      opset <= kMaxCheckedOpset && model.ir_version() <= onnx::IR_VERSION;
  if (checker_knows) {
    try {
      onnx::checker::check_model(model);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " refused by onnx.checker: ", e.what()));
    }
    if (validations != nullptr) {
      validations->push_back(absl::StrCat(
          what, ": onnx.checker (ONNX 1.12, opsets <= ", kMaxCheckedOpset,
          ")"));
    }
  }
  absl::Status s = CheckStructure(model.graph());
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  if (validations != nullptr) {
    validations->push_back(
        checker_knows ? absl::StrCat(what, ": structural checks")
                      : absl::StrCat(what, ": structural checks (opset ", opset,
                                     ", IR version ", model.ir_version(),
                                     " is newer than the checker knows)"));
  }
  return absl::OkStatus();
}

}  // namespace quantd::graph
