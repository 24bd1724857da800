#include "core/passes/weight_plan.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/graph/tensor_util.h"

namespace quantd::passes {
namespace {

using quantd::v1::SkippedTensor;
using quantd::v1::SkipReason;

bool IsDefaultDomain(const onnx::NodeProto& node) {
  return node.domain().empty() || node.domain() == "ai.onnx";
}

bool IsQuantizableOp(const onnx::NodeProto& node) {
  return IsDefaultDomain(node) &&
         (node.op_type() == "Conv" || node.op_type() == "Gemm" ||
          node.op_type() == "MatMul");
}

int64_t IntAttr(const onnx::NodeProto& node, const char* name, int64_t dflt) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return a.i();
  }
  return dflt;
}

// The `value` tensor of a Constant node, or null.
const onnx::TensorProto* ConstantValue(const onnx::NodeProto& node) {
  if (node.op_type() != "Constant" || !IsDefaultDomain(node)) return nullptr;
  for (const auto& a : node.attribute()) {
    if (a.name() == "value" && a.has_t()) return &a.t();
  }
  return nullptr;
}

// A skip decision: reason and detail.
struct Skip {
  SkipReason reason;
  std::string detail;
};

// The channel axis a consumer wants for its weight of rank `rank`: the axis
// of the output channels (Conv: M of [M, C/g, k...]; Gemm: N of B, which is
// [K, N] unless transB; MatMul: the last axis of B), -1 for a rank-1 MatMul
// B (one output channel). A Skip for layouts we do not quantize.
struct AxisOrSkip {
  int axis = -1;
  std::optional<Skip> skip;
};
AxisOrSkip ConsumerAxis(const onnx::NodeProto& node, int rank) {
  auto layout = [&](const std::string& want) {
    return AxisOrSkip{-1, Skip{quantd::v1::SKIP_UNSUPPORTED_LAYOUT,
                               absl::StrCat(node.op_type(), " '", node.name(),
                                            "' has a weight of rank ", rank,
                                            "; expected ", want)}};
  };
  if (node.op_type() == "Conv") {
    return rank >= 3 ? AxisOrSkip{0, {}} : layout("rank >= 3");
  }
  if (node.op_type() == "Gemm") {
    if (rank != 2) return layout("rank 2");
    return {IntAttr(node, "transB", 0) != 0 ? 0 : 1, {}};
  }
  if (rank == 0) return layout("rank >= 1");
  return {rank >= 2 ? rank - 1 : -1, {}};
}

std::string Describe(const onnx::NodeProto& node) {
  return absl::StrCat(node.op_type(), " '", node.name(), "'");
}

class Planner {
 public:
  Planner(const onnx::GraphProto& graph, const graph::GraphIndex& index,
          const DynamicRangeOptions& options, int64_t ir_version)
      : graph_(graph),
        index_(index),
        options_(options),
        ir_version_(ir_version) {}

  WeightPlanResult Run() {
    absl::flat_hash_set<std::string> seen;
    for (const auto& node : graph_.node()) {
      if (!IsQuantizableOp(node) || node.input_size() < 2) continue;
      const std::string& name = node.input(1);
      if (name.empty() || !seen.insert(name).second) continue;
      Consider(name, node);
    }
    return std::move(result_);
  }

 private:
  void Consider(const std::string& name, const onnx::NodeProto& first) {
    WeightPlan plan;
    plan.tensor = name;
    const onnx::TensorProto* tensor = nullptr;
    std::optional<Skip> skip = FindSource(name, &plan, &tensor);
    if (tensor != nullptr) {
      plan.dims = graph::Dims(*tensor);
      plan.num_elements = graph::NumElements(*tensor);
    }
    if (!skip) skip = CheckTensor(*tensor);
    if (!skip) skip = CheckConsumers(&plan);
    if (!skip) skip = CheckScope(plan);
    if (!skip) skip = CheckSize(plan);
    if (skip) {
      AddSkip(name, first, plan.num_elements, std::move(*skip));
    } else {
      if (!options_.weights.per_channel) plan.axis = -1;
      result_.weights.push_back(std::move(plan));
    }
  }

  // Where the weight's values live; a Skip when it is not a constant.
  std::optional<Skip> FindSource(const std::string& name, WeightPlan* plan,
                                 const onnx::TensorProto** tensor) {
    const int init = index_.Initializer(name);
    if (init >= 0) {
      *tensor = &graph_.initializer(init);
      if (index_.IsGraphInput(name) && ir_version_ >= 4) {
        return Skip{quantd::v1::SKIP_NOT_CONSTANT,
                    absl::StrCat("initializer '", name,
                                 "' is also a graph input, so a caller can "
                                 "override it at run time (IR version ",
                                 ir_version_, " >= 4)")};
      }
      plan->initializer = init;
      return std::nullopt;
    }
    const int producer = index_.Producer(name);
    if (producer >= 0) {
      const onnx::TensorProto* value = ConstantValue(graph_.node(producer));
      if (value != nullptr) {
        *tensor = value;
        plan->constant_node = producer;
        return std::nullopt;
      }
    }
    return Skip{quantd::v1::SKIP_NOT_CONSTANT,
                absl::StrCat("'", name, "' is ",
                             producer >= 0
                                 ? absl::StrCat("computed at run time by ",
                                                Describe(graph_.node(producer)))
                                 : "a graph input",
                             ", not an initializer or Constant value")};
  }

  std::optional<Skip> CheckTensor(const onnx::TensorProto& tensor) {
    if (tensor.data_type() != onnx::TensorProto::FLOAT) {
      return Skip{
          quantd::v1::SKIP_NOT_FLOAT,
          absl::StrCat(
              "element type is ",
              onnx::TensorProto::DataType_Name(
                  static_cast<onnx::TensorProto::DataType>(tensor.data_type())),
              ", not FLOAT")};
    }
    if (graph::HasExternalData(tensor)) {
      return Skip{quantd::v1::SKIP_NOT_CONSTANT,
                  "values are stored in an external file, which is not part "
                  "of the model bytes"};
    }
    return std::nullopt;
  }

  // Every reader must be a quantizable op reading it as its weight, and all
  // must agree on the channel axis: one DequantizeLinear serves them all.
  std::optional<Skip> CheckConsumers(WeightPlan* plan) {
    if (index_.IsGraphOutput(plan->tensor)) {
      return Skip{quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
                  "the tensor is also a graph output"};
    }
    const int rank = static_cast<int>(plan->dims.size());
    for (const graph::Use& use : index_.Uses(plan->tensor)) {
      const onnx::NodeProto& node = graph_.node(use.node);
      if (!IsQuantizableOp(node) || use.slot != 1) {
        return Skip{quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
                    absl::StrCat("also read by ", Describe(node),
                                 use.slot == graph::Use::kSubgraphSlot
                                     ? " (inside a subgraph)"
                                     : absl::StrCat(" as input ", use.slot),
                                 ", which cannot take it quantized")};
      }
      AxisOrSkip axis = ConsumerAxis(node, rank);
      if (axis.skip) return axis.skip;
      if (plan->consumers.empty()) {
        plan->axis = axis.axis;
      } else if (axis.axis != plan->axis && options_.weights.per_channel) {
        return Skip{
            quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
            absl::StrCat(Describe(node), " wants channel axis ", axis.axis,
                         " but ", Describe(graph_.node(plan->consumers[0])),
                         " wants ", plan->axis)};
      }
      if (plan->consumers.empty() || plan->consumers.back() != use.node) {
        plan->consumers.push_back(use.node);
      }
    }
    return std::nullopt;
  }

  std::optional<Skip> CheckScope(const WeightPlan& plan) {
    const std::string& producer = options_.weights.producer_scope;
    if (!absl::StartsWith(plan.tensor, producer)) {
      return Skip{quantd::v1::SKIP_OUT_OF_SCOPE,
                  absl::StrCat("tensor name does not start with "
                               "weight_params.producer_scope '",
                               producer, "'")};
    }
    const std::string& consumer = options_.weights.consumer_scope;
    for (int n : plan.consumers) {
      if (!absl::StartsWith(graph_.node(n).name(), consumer)) {
        return Skip{quantd::v1::SKIP_OUT_OF_SCOPE,
                    absl::StrCat("consumer ", Describe(graph_.node(n)),
                                 " does not start with "
                                 "weight_params.consumer_scope '",
                                 consumer, "'")};
      }
    }
    return std::nullopt;
  }

  std::optional<Skip> CheckSize(const WeightPlan& plan) {
    if (plan.num_elements >= options_.min_num_elements) return std::nullopt;
    return Skip{quantd::v1::SKIP_TOO_FEW_ELEMENTS,
                absl::StrCat(plan.num_elements,
                             " elements, fewer than min_num_elements_for_"
                             "weights = ",
                             options_.min_num_elements)};
  }

  void AddSkip(const std::string& name, const onnx::NodeProto& node,
               int64_t num_elements, Skip skip) {
    SkippedTensor s;
    s.set_tensor_name(name);
    s.set_node_name(node.name());
    s.set_op_type(node.op_type());
    s.set_num_elements(num_elements);
    s.set_reason(skip.reason);
    s.set_detail(std::move(skip.detail));
    result_.skipped.push_back(std::move(s));
  }

  const onnx::GraphProto& graph_;
  const graph::GraphIndex& index_;
  const DynamicRangeOptions& options_;
  const int64_t ir_version_;
  WeightPlanResult result_;
};

}  // namespace

WeightPlanResult PlanWeights(const onnx::GraphProto& graph,
                             const graph::GraphIndex& index,
                             const DynamicRangeOptions& options,
                             int64_t ir_version) {
  return Planner(graph, index, options, ir_version).Run();
}

onnx::TensorProto* WeightTensor(onnx::GraphProto* graph,
                                const WeightPlan& plan) {
  if (plan.initializer >= 0) {
    return graph->mutable_initializer(plan.initializer);
  }
  for (auto& a :
       *graph->mutable_node(plan.constant_node)->mutable_attribute()) {
    if (a.name() == "value" && a.has_t()) return a.mutable_t();
  }
  return nullptr;
}

}  // namespace quantd::passes
