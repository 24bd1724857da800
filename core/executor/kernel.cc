#include "core/executor/kernel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/graph/validate.h"

namespace quantd::executor {

NodeInfo::NodeInfo(const onnx::NodeProto& node, int64_t opset,
                   std::vector<int32_t> input_types,
                   std::vector<const Tensor*> constant_inputs)
    : node_(node),
      label_(node.name()),
      opset_(opset),
      input_types_(std::move(input_types)),
      constant_inputs_(std::move(constant_inputs)) {
  output_types_.assign(node.output_size(),
                       input_types_.empty() ? 0 : input_types_[0]);
}

void NodeInfo::set_output_type(int i, int32_t type) {
  if (i < static_cast<int>(output_types_.size())) output_types_[i] = type;
}

bool NodeInfo::HasAttr(const std::string& name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) return true;
  }
  return false;
}

const onnx::AttributeProto* NodeInfo::Find(
    const std::string& name, onnx::AttributeProto::AttributeType type) {
  for (const auto& a : node_.attribute()) {
    if (a.name() != name) continue;
    read_.insert(name);
    // Old exporters leave `type` unset; trust the name then.
    if (a.type() != type && a.type() != onnx::AttributeProto::UNDEFINED) {
      if (status_.ok()) {
        status_ = Invalid(absl::StrCat(
            "attribute '", name, "' has type ",
            onnx::AttributeProto::AttributeType_Name(a.type()), ", expected ",
            onnx::AttributeProto::AttributeType_Name(type)));
      }
      return nullptr;
    }
    return &a;
  }
  return nullptr;
}

int64_t NodeInfo::Int(const std::string& name, int64_t dflt) {
  const auto* a = Find(name, onnx::AttributeProto::INT);
  return a ? a->i() : dflt;
}

float NodeInfo::Float(const std::string& name, float dflt) {
  const auto* a = Find(name, onnx::AttributeProto::FLOAT);
  return a ? a->f() : dflt;
}

std::string NodeInfo::String(const std::string& name, const std::string& dflt) {
  const auto* a = Find(name, onnx::AttributeProto::STRING);
  return a ? a->s() : dflt;
}

const onnx::GraphProto* NodeInfo::GraphAttr(const std::string& name) {
  const auto* a = Find(name, onnx::AttributeProto::GRAPH);
  return a ? &a->g() : nullptr;
}

std::vector<int64_t> NodeInfo::Ints(const std::string& name,
                                    std::vector<int64_t> dflt) {
  const auto* a = Find(name, onnx::AttributeProto::INTS);
  if (!a) return dflt;
  return {a->ints().begin(), a->ints().end()};
}

std::vector<float> NodeInfo::Floats(const std::string& name) {
  const auto* a = Find(name, onnx::AttributeProto::FLOATS);
  if (!a) return {};
  return {a->floats().begin(), a->floats().end()};
}

std::vector<std::string> NodeInfo::Strings(const std::string& name) {
  const auto* a = Find(name, onnx::AttributeProto::STRINGS);
  if (!a) return {};
  return {a->strings().begin(), a->strings().end()};
}

const onnx::TensorProto* NodeInfo::TensorAttr(const std::string& name) {
  const auto* a = Find(name, onnx::AttributeProto::TENSOR);
  return a ? &a->t() : nullptr;
}

absl::Status NodeInfo::UnsupportedAttr(const std::string& attr,
                                       const std::string& value) const {
  return absl::UnimplementedError(absl::StrCat(
      "attribute '", attr, "' = ", value, " of node '", label_, "' (op ",
      node_.op_type(), ") is not supported by the executor"));
}

absl::Status NodeInfo::Invalid(const std::string& message) const {
  return absl::InvalidArgumentError(absl::StrCat(
      "node '", label_, "' (op ", node_.op_type(), "): ", message));
}

absl::Status NodeInfo::RequireType(int i,
                                   std::initializer_list<int32_t> types) const {
  const int32_t t = input_type(i);
  if (t == 0 || !has_input(i)) return absl::OkStatus();
  if (std::find(types.begin(), types.end(), t) != types.end()) {
    return absl::OkStatus();
  }
  // A type the op's schema excludes makes the model invalid, not merely
  // beyond the executor.
  if (!graph::OpSchemaAllowsInput(node_.op_type(), opset_, i, t)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", i, " of node '", label_, "' (op ",
                     node_.op_type(), ") has element type ", DataTypeName(t),
                     ", which ONNX's ", node_.op_type(), " at opset ", opset_,
                     " does not allow: the model is invalid"));
  }
  return absl::UnimplementedError(
      absl::StrCat("input ", i, " of node '", label_, "' (op ", node_.op_type(),
                   ") has element type ", DataTypeName(t),
                   ", which the executor does not support for this op"));
}

absl::Status NodeInfo::Finish() const {
  if (!status_.ok()) return status_;
  for (const auto& a : node_.attribute()) {
    if (!read_.contains(a.name())) {
      return absl::UnimplementedError(
          absl::StrCat("attribute '", a.name(), "' of node '", label_, "' (op ",
                       node_.op_type(), ") is not supported by the executor"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> OpRegistry::Ops() const {
  std::vector<std::string> ops;
  for (const auto& [name, f] : factories_) ops.push_back(name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

const OpRegistry& GlobalOpRegistry() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry;
    RegisterElementwiseOps(r);
    RegisterNnOps(r);
    RegisterReduceOps(r);
    RegisterShapeOps(r);
    RegisterQuantOps(r);
    RegisterControlOps(r);
    RegisterRnnOps(r);
    RegisterActivationOps(r);
    RegisterImageOps(r);
    RegisterIndexOps(r);
    RegisterLossOps(r);
    RegisterDetectionOps(r);
    return r;
  }();
  return *registry;
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace quantd::executor
