#include "core/passes/recurrent_weights.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_index.h"
#include "core/graph/unique_names.h"
#include "core/passes/opset_upgrade.h"
#include "core/passes/weight_plan.h"

namespace quantd::passes {
namespace {

// The opset a per-channel (or, failing that, per-tensor) DequantizeLinear
// needs, raised where it may be; an error when neither can be had.
absl::StatusOr<OpsetOutcome> PrepareOpset(bool per_channel, Body* body,
                                          onnx::ModelProto* model) {
  const int64_t needed = per_channel ? kPerChannelOpset : kDynamicQuantizeOpset;
  return body != nullptr ? BodyOpset(*body, needed)
                         : EnsureOpset(model, needed);
}

// Every planned weight stays float, for `why`.
void SkipAll(const WeightPlanResult& plan, const onnx::GraphProto& graph,
             const std::string& why, RecurrentWeightStats* stats) {
  for (const WeightPlan& w : plan.weights) {
    const onnx::NodeProto& node = graph.node(w.consumers.front());
    quantd::v1::SkippedTensor s;
    s.set_tensor_name(w.tensor);
    s.set_node_name(node.name());
    s.set_op_type(node.op_type());
    s.set_num_elements(w.num_elements);
    s.set_reason(quantd::v1::SKIP_OP_NOT_QUANTIZED);
    s.set_detail(why);
    stats->skipped.push_back(std::move(s));
  }
}

}  // namespace

absl::StatusOr<RecurrentWeightStats> QuantizeRecurrentWeights(
    const WeightPassOptions& options, const UnitPrecision& units,
    const PassHooks& hooks, Body* body, onnx::ModelProto* model) {
  WeightPassOptions rtn = options;
  rtn.algorithm = WeightAlgorithm::kRoundToNearest;
  rtn.bias_correction = false;
  rtn.awq = false;
  rtn.awq_rescaled.clear();
  rtn.input_moments = nullptr;
  rtn.weights.block_size = 0;

  RecurrentWeightStats stats;
  auto plan_weights = [&] {
    const graph::GraphIndex index(model->graph());
    return PlanRecurrentWeights(model->graph(), index, rtn, model->ir_version(),
                                &units);
  };
  WeightPlanResult plan = plan_weights();
  stats.skipped = std::move(plan.skipped);
  if (plan.weights.empty()) return stats;

  const bool per_channel = plan.weights.front().axis >= 0;
  absl::StatusOr<OpsetOutcome> outcome = PrepareOpset(per_channel, body, model);
  if (!outcome.ok()) {
    SkipAll(plan, model->graph(),
            absl::StrCat("stays float: its DequantizeLinear needs a newer "
                         "opset (",
                         outcome.status().message(), ")"),
            &stats);
    return stats;
  }
  stats.opset_note = outcome->note;
  if (outcome->mode == OpsetOutcome::kUpgraded) {
    // The converter replaced the graph and may have renumbered its nodes.
    plan = plan_weights();
    plan.skipped.clear();
  } else if (outcome->mode == OpsetOutcome::kPerTensorFallback) {
    for (WeightPlan& w : plan.weights) w.axis = -1;
  }

  onnx::GraphProto* graph = model->mutable_graph();
  graph::UniqueNames names(*graph);
  if (body != nullptr) names.AddGraph(*body->outer_root);
  const std::vector<WeightNames> weight_names =
      MakeWeightNames(plan.weights, &names);
  const int64_t total = static_cast<int64_t>(plan.weights.size());
  QUANTD_ASSIGN_OR_RETURN(
      QuantizedWeights done,
      QuantizePlannedWeights(plan.weights, weight_names, rtn, BodyHooks(hooks),
                             stats.opset_note, 0, total, model));
  stats.quantized_tensors = done.quantized;
  stats.weight_bytes_before = done.bytes_before;
  stats.weight_bytes_after = done.bytes_after;

  // Initializer weights get their DequantizeLinear first in the graph; a
  // Constant node is replaced by its DequantizeLinear in place, so the
  // order stays topological either way.
  absl::flat_hash_map<int, int> constant_weight;  // node -> plan index
  absl::flat_hash_set<int> readers;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int k = 0; k < total; ++k) {
    const WeightPlan& w = plan.weights[k];
    readers.insert(w.consumers.begin(), w.consumers.end());
    if (w.constant_node >= 0) {
      constant_weight[w.constant_node] = k;
    } else {
      *nodes.Add() = WeightDequantizeNode(w, weight_names[k]);
    }
  }
  for (int n = 0; n < graph->node_size(); ++n) {
    auto it = constant_weight.find(n);
    if (it != constant_weight.end()) {
      *nodes.Add() = WeightDequantizeNode(plan.weights[it->second],
                                          weight_names[it->second]);
    } else {
      nodes.Add()->Swap(graph->mutable_node(n));
    }
  }
  graph->mutable_node()->Swap(&nodes);
  RemoveQuantizedInitializers(plan.weights, graph);
  stats.quantized_nodes = static_cast<int>(readers.size());
  return stats;
}

}  // namespace quantd::passes
