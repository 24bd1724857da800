#include "core/passes/dynamic_range_pass.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/graph_index.h"
#include "core/graph/unique_names.h"
#include "core/passes/op_sets.h"
#include "core/passes/opset_upgrade.h"
#include "core/passes/recurrent_weights.h"
#include "core/passes/subgraph_bodies.h"
#include "core/passes/weight_plan.h"
#include "core/passes/xla_lowering.h"

namespace quantd::passes {
namespace {

using onnx::NodeProto;

class DynamicRangePass {
 public:
  // `body`: the pass runs on a subgraph body (subgraph_bodies.h), whose
  // opset it cannot change and whose outer names it must not reuse; null
  // for the main graph.
  DynamicRangePass(const WeightPassOptions& options, const PassHooks& hooks,
                   UnitPrecision units, onnx::ModelProto* model,
                   const Body* body = nullptr)
      : options_(options),
        hooks_(hooks),
        model_(model),
        graph_(model->mutable_graph()),
        body_(body),
        units_(std::move(units)) {}

  absl::StatusOr<PassStats> Run();

 private:
  WeightPlanResult Plan() {
    graph::GraphIndex index(*graph_);
    return PlanWeights(*graph_, index, options_, ir_version_, &units_);
  }
  // UNIMPLEMENTED naming the first weight planned at 4 bits: the XLA
  // lowering feeds MatMulInteger / ConvInteger, which take 8-bit inputs.
  absl::Status CheckXlaFourBit() const;
  absl::Status PrepareOpset();
  absl::Status QuantizeWeights();
  void Rewrite();
  // Emits DynamicQuantizeLinear -> DequantizeLinear for `tensor` into
  // `nodes` and returns the dequantized name.
  std::string AddActivationQdq(
      const std::string& tensor,
      google::protobuf::RepeatedPtrField<NodeProto>* nodes);

  const WeightPassOptions& options_;
  const PassHooks& hooks_;
  onnx::ModelProto* model_;
  onnx::GraphProto* graph_;
  const Body* body_;
  int64_t ir_version_ = 0;
  // Each node's precision: a FULL node keeps its weight float, so it is not
  // a consumer of a planned weight and gets no DynamicQuantizeLinear.
  UnitPrecision units_;
  std::unique_ptr<graph::UniqueNames> names_;
  WeightPlanResult plan_;
  std::vector<WeightNames> weight_names_;
  std::vector<std::vector<numerics::QuantParams>> weight_params_;
  PassStats stats_;
};

absl::StatusOr<PassStats> DynamicRangePass::Run() {
  ir_version_ = model_->ir_version();
  QUANTD_ASSIGN_OR_RETURN(const OpSetRow* row,
                          PassRow(Method::kDynamicRange, options_.op_set));
  plan_ = Plan();
  if (!plan_.weights.empty()) {
    const bool xla = row->lowering == Lowering::kIntegerOps;
    absl::Status s = xla ? CheckXlaFourBit() : absl::OkStatus();
    if (s.ok() && xla) s = CheckXlaLowerable(*graph_, plan_.weights, options_);
    if (!s.ok()) return s;
    QUANTD_RETURN_IF_ERROR(PrepareOpset());
    if (hooks_.on_planned) hooks_.on_planned(plan_.weights.size());
    QUANTD_RETURN_IF_ERROR(QuantizeWeights());
    if (xla) {
      QUANTD_RETURN_IF_ERROR(LowerToXla(plan_.weights, weight_names_,
                                        weight_params_, model_->ir_version(),
                                        names_.get(), graph_));
      absl::flat_hash_set<int> consumers;
      for (const WeightPlan& w : plan_.weights) {
        consumers.insert(w.consumers.begin(), w.consumers.end());
      }
      stats_.quantized_nodes = static_cast<int>(consumers.size());
    } else {
      Rewrite();
    }
  }
  if (plan_.weights.empty() && hooks_.on_planned) hooks_.on_planned(0);
  stats_.skipped = std::move(plan_.skipped);
  return std::move(stats_);
}

absl::Status DynamicRangePass::CheckXlaFourBit() const {
  for (const WeightPlan& w : plan_.weights) {
    if (!HasFourBitWeights(w.precision)) continue;
    const NodeProto& node = graph_->node(w.consumers.front());
    return absl::UnimplementedError(absl::StrCat(
        "op_set XLA with 4-bit weights is not implemented: weight '", w.tensor,
        "' of ", node.op_type(), " '", node.name(), "' is ",
        tensorflow::quantization::QuantizationPrecision_Name(w.precision),
        ", and the XLA lowering feeds MatMulInteger / ConvInteger, which take "
        "8-bit inputs only; use op_set TF for W4A8"));
  }
  return absl::OkStatus();
}

absl::Status DynamicRangePass::PrepareOpset() {
  const bool per_channel =
      std::any_of(plan_.weights.begin(), plan_.weights.end(),
                  [](const WeightPlan& w) { return w.axis >= 0; });
  // INT4 weights and blocked scales need DequantizeLinear-21.
  const bool four_bit = std::any_of(
      plan_.weights.begin(), plan_.weights.end(), [](const WeightPlan& w) {
        return HasFourBitWeights(w.precision) || w.block_size > 0;
      });
  const int64_t needed = four_bit      ? kInt4Opset
                         : per_channel ? kPerChannelOpset
                                       : kDynamicQuantizeOpset;
  QUANTD_ASSIGN_OR_RETURN(OpsetOutcome outcome,
                          body_ != nullptr ? BodyOpset(*body_, needed)
                                           : EnsureOpset(model_, needed));
  stats_.opset_note = outcome.note;
  switch (outcome.mode) {
    case OpsetOutcome::kAlreadyNewEnough:
      break;
    case OpsetOutcome::kUpgraded:
      // The converter replaced the whole model (graph object included) and
      // may have renumbered nodes.
      graph_ = model_->mutable_graph();
      plan_ = Plan();
      break;
    case OpsetOutcome::kPerTensorFallback:
      for (WeightPlan& w : plan_.weights) w.axis = -1;
      break;
  }
  return absl::OkStatus();
}

absl::Status DynamicRangePass::QuantizeWeights() {
  names_ = std::make_unique<graph::UniqueNames>(*graph_);
  if (body_ != nullptr) names_->AddGraph(*body_->outer_root);
  weight_names_ = MakeWeightNames(plan_.weights, names_.get());
  const int64_t total = static_cast<int64_t>(plan_.weights.size());
  QUANTD_ASSIGN_OR_RETURN(
      QuantizedWeights done,
      QuantizePlannedWeights(plan_.weights, weight_names_, options_, hooks_,
                             stats_.opset_note, 0, total, model_));
  stats_.quantized_tensors = done.quantized;
  stats_.weight_bytes_before = done.bytes_before;
  stats_.weight_bytes_after = done.bytes_after;
  weight_params_ = std::move(done.params);
  return absl::OkStatus();
}

std::string DynamicRangePass::AddActivationQdq(
    const std::string& tensor,
    google::protobuf::RepeatedPtrField<NodeProto>* nodes) {
  const std::string q = names_->Make(tensor + "_quantized");
  const std::string scale = names_->Make(tensor + "_scale");
  const std::string zp = names_->Make(tensor + "_zero_point");
  const std::string dq = names_->Make(tensor + "_dequantized");
  *nodes->Add() = graph::MakeNode(
      "DynamicQuantizeLinear", names_->Make(tensor + "_DynamicQuantizeLinear"),
      {tensor}, {q, scale, zp});
  *nodes->Add() = graph::MakeNode("DequantizeLinear",
                                  names_->Make(tensor + "_DequantizeLinear"),
                                  {q, scale, zp}, {dq});
  return dq;
}

// Rebuilds the node list in topological order: weight DequantizeLinear nodes
// of initializers and activation QDQ pairs of graph inputs first; a Constant
// weight is replaced by its DequantizeLinear in place; an activation's pair
// follows its producer.
void DynamicRangePass::Rewrite() {
  absl::flat_hash_map<int, int> constant_weight;  // node -> plan index
  absl::flat_hash_set<int> consumers;
  for (int k = 0; k < static_cast<int>(plan_.weights.size()); ++k) {
    const WeightPlan& w = plan_.weights[k];
    if (w.constant_node >= 0) constant_weight[w.constant_node] = k;
    consumers.insert(w.consumers.begin(), w.consumers.end());
  }
  stats_.quantized_nodes = static_cast<int>(consumers.size());

  const graph::GraphIndex index(*graph_);
  // Activation tensor -> the quantized consumers reading it as input 0.
  absl::flat_hash_map<std::string, std::vector<int>> activations;
  for (int n : consumers) {
    const std::string& x = graph_->node(n).input(0);
    const int producer = index.Producer(x);
    // Already dequantized (e.g. the model was quantized before): leave it.
    if (producer >= 0 &&
        graph_->node(producer).op_type() == "DequantizeLinear") {
      continue;
    }
    activations[x].push_back(n);
  }

  google::protobuf::RepeatedPtrField<NodeProto> old;
  old.Swap(graph_->mutable_node());
  google::protobuf::RepeatedPtrField<NodeProto>* nodes = graph_->mutable_node();
  nodes->Reserve(old.size() + 2 * activations.size() + plan_.weights.size());

  auto add_activation = [&](const std::string& x) {
    auto it = activations.find(x);
    if (it == activations.end()) return;
    const std::string dq = AddActivationQdq(x, nodes);
    for (int n : it->second) old.Mutable(n)->set_input(0, dq);
  };
  for (int k = 0; k < static_cast<int>(plan_.weights.size()); ++k) {
    if (plan_.weights[k].initializer >= 0) {
      *nodes->Add() = WeightDequantizeNode(plan_.weights[k], weight_names_[k]);
    }
  }
  // Activations with no producer: graph inputs and initializers.
  std::vector<std::string> sources;
  for (const auto& [x, readers] : activations) {
    if (index.Producer(x) < 0) sources.push_back(x);
  }
  std::sort(sources.begin(), sources.end());  // Deterministic output.
  for (const auto& x : sources) add_activation(x);

  for (int i = 0; i < old.size(); ++i) {
    auto cw = constant_weight.find(i);
    if (cw != constant_weight.end()) {
      *nodes->Add() = WeightDequantizeNode(plan_.weights[cw->second],
                                           weight_names_[cw->second]);
      continue;
    }
    *nodes->Add() = std::move(*old.Mutable(i));
    for (const std::string& out : nodes->rbegin()->output()) {
      if (!out.empty()) add_activation(out);
    }
  }
  RemoveQuantizedInitializers(plan_.weights, graph_);
}

}  // namespace

PassHooks BodyHooks(const PassHooks& hooks) {
  PassHooks body = hooks;
  body.on_planned = nullptr;
  body.on_progress = nullptr;
  return body;
}

void AppendNote(std::string* to, const std::string& more) {
  if (more.empty()) return;
  *to = to->empty() ? more : absl::StrCat(*to, "; ", more);
}

absl::StatusOr<PassStats> RunDynamicRangePass(const WeightPassOptions& options,
                                              const PassHooks& hooks,
                                              onnx::ModelProto* model) {
  QUANTD_ASSIGN_OR_RETURN(
      UnitPrecision units,
      UnitPrecision::Resolve(*model, options.precision, options.units,
                             &options.inlined));
  QUANTD_ASSIGN_OR_RETURN(PassStats stats,
                          DynamicRangePass(options, hooks, units, model).Run());
  QUANTD_RETURN_IF_ERROR(AddRecurrentWeights(options, units, hooks, nullptr,
                                             model, &stats,
                                             &PassStats::quantized_tensors));

  // Then every If/Loop/Scan body, as a graph of its own.
  const PassHooks body_hooks = BodyHooks(hooks);
  auto quantize_body = [&](Body* body) -> absl::Status {
    QUANTD_ASSIGN_OR_RETURN(
        PassStats b,
        DynamicRangePass(options, body_hooks, units.InBody(body->scope),
                         &body->model, body)
            .Run());
    QUANTD_RETURN_IF_ERROR(AddRecurrentWeights(
        options, units.InBody(body->scope), body_hooks, body, &body->model, &b,
        &PassStats::quantized_tensors));
    stats.quantized_tensors += b.quantized_tensors;
    stats.quantized_nodes += b.quantized_nodes;
    stats.weight_bytes_before += b.weight_bytes_before;
    stats.weight_bytes_after += b.weight_bytes_after;
    for (auto& skip : b.skipped) stats.skipped.push_back(std::move(skip));
    AppendNote(&stats.opset_note, b.opset_note);
    return absl::OkStatus();
  };
  QUANTD_ASSIGN_OR_RETURN(
      std::string note,
      QuantizeBodies(model, options.inlined,
                     MayUseFourBitWeights(options.precision, options.units),
                     quantize_body));
  if (stats.opset_note.empty()) stats.opset_note = std::move(note);
  return stats;
}

}  // namespace quantd::passes
