#include "core/passes/dynamic_range_pass.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/graph/graph_index.h"
#include "core/graph/model_io.h"
#include "core/graph/tensor_util.h"
#include "core/graph/unique_names.h"
#include "core/numerics/quant_params.h"
#include "core/passes/opset_upgrade.h"
#include "core/passes/weight_plan.h"

namespace quantd::passes {
namespace {

using onnx::NodeProto;
using onnx::TensorProto;

// Names of what one quantized weight adds to the graph. The DequantizeLinear
// output keeps the weight's own name, so every reader (and any subgraph)
// sees the dequantized weight without being rewritten.
struct WeightNames {
  std::string values, scale, zero_point, node;
};

struct QuantizedWeight {
  absl::Status status;
  TensorProto values, scale, zero_point;
  quantd::v1::TensorReport report;
  uint64_t bytes_before = 0;
};

NodeProto MakeNode(const std::string& op, const std::string& name,
                   std::vector<std::string> inputs,
                   std::vector<std::string> outputs) {
  NodeProto node;
  node.set_op_type(op);
  node.set_name(name);
  for (auto& in : inputs) node.add_input(std::move(in));
  for (auto& out : outputs) node.add_output(std::move(out));
  return node;
}

NodeProto WeightDequantizeNode(const WeightPlan& plan,
                               const WeightNames& names) {
  NodeProto node =
      MakeNode("DequantizeLinear", names.node,
               {names.values, names.scale, names.zero_point}, {plan.tensor});
  if (plan.axis >= 0) {
    onnx::AttributeProto* axis = node.add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(plan.axis);
  }
  return node;
}

quantd::v1::TensorReport MakeReport(const onnx::GraphProto& graph,
                                    const WeightPlan& plan,
                                    const DynamicRangeOptions& options,
                                    const numerics::QuantizedTensor& q) {
  quantd::v1::TensorReport r;
  const NodeProto& consumer = graph.node(plan.consumers.front());
  r.set_node_name(consumer.name());
  r.set_op_type(consumer.op_type());
  r.set_tensor_name(plan.tensor);
  r.set_precision(options.precision);
  r.set_num_elements(plan.num_elements);
  quantd::v1::QuantScheme* s = r.mutable_scheme();
  s->set_bits(q.spec.bits);
  s->set_symmetric(q.spec.symmetric);
  s->set_narrow_range(q.spec.narrow_range);
  s->set_per_channel(q.axis >= 0);
  s->set_axis(std::max(q.axis, 0));
  s->set_storage_type("INT8");
  absl::StatusOr<numerics::QuantGrid> grid = numerics::GridFor(q.spec);
  if (grid.ok()) {
    s->set_quant_min(grid->quant_min);
    s->set_quant_max(grid->quant_max);
  }
  auto [lo, hi] = std::minmax_element(
      q.params.begin(), q.params.end(),
      [](const auto& a, const auto& b) { return a.scale < b.scale; });
  r.set_scale_min(lo->scale);
  r.set_scale_max(hi->scale);
  return r;
}

// Scale and zero point initializers: [C] when per channel, scalars else.
void MakeParamTensors(const numerics::QuantizedTensor& q,
                      const WeightNames& names, QuantizedWeight* out) {
  std::vector<float> scales;
  std::string zero_points;
  for (const auto& p : q.params) {
    scales.push_back(p.scale);
    zero_points.push_back(static_cast<char>(static_cast<int8_t>(p.zero_point)));
  }
  std::vector<int64_t> dims;
  if (q.axis >= 0) dims.push_back(static_cast<int64_t>(q.params.size()));
  out->scale = graph::MakeFloatTensor(names.scale, dims, scales);
  out->zero_point = graph::MakeByteTensor(names.zero_point, TensorProto::INT8,
                                          dims, std::move(zero_points));
}

// Quantizes one weight; runs concurrently with others (touches only its own
// tensor). The float values are freed from the model first thing.
QuantizedWeight QuantizeWeight(const onnx::GraphProto& graph,
                               const WeightPlan& plan, TensorProto* tensor,
                               const WeightNames& names,
                               const DynamicRangeOptions& options) {
  QuantizedWeight out;
  absl::StatusOr<std::vector<float>> values = graph::ReadFloatTensor(*tensor);
  if (!values.ok()) {
    out.status = values.status();
    return out;
  }
  out.bytes_before = graph::DataBytes(*tensor);
  graph::ClearTensorData(tensor);
  absl::StatusOr<numerics::QuantizedTensor> q = numerics::QuantizeTensor(
      *values, plan.dims, plan.axis >= 0, plan.axis, options.weights.spec);
  if (!q.ok()) {
    out.status = absl::InvalidArgumentError(absl::StrCat(
        "cannot quantize weight '", plan.tensor, "': ", q.status().message()));
    return out;
  }
  out.report = MakeReport(graph, plan, options, *q);
  {
    std::vector<float> approx = numerics::DequantizeTensor(*q, plan.dims);
    numerics::ErrorStats err = numerics::MeasureError(*values, approx);
    out.report.set_mse(err.mse);
    out.report.set_sqnr_db(err.sqnr_db);
  }
  std::vector<float>().swap(*values);
  MakeParamTensors(*q, names, &out);
  out.values = graph::MakeByteTensor(names.values, TensorProto::INT8, plan.dims,
                                     std::move(q->values));
  return out;
}

// Before IR version 4 every initializer must also be a graph input.
void AddInitializer(TensorProto tensor, bool also_input,
                    onnx::GraphProto* graph) {
  if (also_input) {
    onnx::ValueInfoProto* input = graph->add_input();
    input->set_name(tensor.name());
    auto* type = input->mutable_type()->mutable_tensor_type();
    type->set_elem_type(tensor.data_type());
    auto* shape = type->mutable_shape();
    for (int64_t d : tensor.dims()) shape->add_dim()->set_dim_value(d);
  }
  *graph->add_initializer() = std::move(tensor);
}

uint64_t NewBytes(const QuantizedWeight& w) {
  return graph::DataBytes(w.values) + graph::DataBytes(w.scale) +
         graph::DataBytes(w.zero_point);
}

class DynamicRangePass {
 public:
  DynamicRangePass(const DynamicRangeOptions& options, const PassHooks& hooks,
                   onnx::ModelProto* model)
      : options_(options),
        hooks_(hooks),
        model_(model),
        graph_(model->mutable_graph()) {}

  absl::StatusOr<PassStats> Run();

 private:
  WeightPlanResult Plan() {
    graph::GraphIndex index(*graph_);
    return PlanWeights(*graph_, index, options_, ir_version_);
  }
  absl::Status PrepareOpset();
  absl::Status QuantizeWeights();
  void Rewrite();
  void RemoveFloatInitializers();
  // Emits DynamicQuantizeLinear -> DequantizeLinear for `tensor` into
  // `nodes` and returns the dequantized name.
  std::string AddActivationQdq(
      const std::string& tensor,
      google::protobuf::RepeatedPtrField<NodeProto>* nodes);

  const DynamicRangeOptions& options_;
  const PassHooks& hooks_;
  onnx::ModelProto* model_;
  onnx::GraphProto* graph_;
  int64_t ir_version_ = 0;
  std::unique_ptr<graph::UniqueNames> names_;
  WeightPlanResult plan_;
  std::vector<WeightNames> weight_names_;
  PassStats stats_;
};

absl::StatusOr<PassStats> DynamicRangePass::Run() {
  ir_version_ = model_->ir_version();
  plan_ = Plan();
  if (!plan_.weights.empty()) {
    absl::Status s = PrepareOpset();
    if (!s.ok()) return s;
    if (hooks_.on_planned) hooks_.on_planned(plan_.weights.size());
    s = QuantizeWeights();
    if (!s.ok()) return s;
    Rewrite();
  }
  if (plan_.weights.empty() && hooks_.on_planned) hooks_.on_planned(0);
  stats_.skipped = std::move(plan_.skipped);
  return std::move(stats_);
}

absl::Status DynamicRangePass::PrepareOpset() {
  const bool per_channel =
      std::any_of(plan_.weights.begin(), plan_.weights.end(),
                  [](const WeightPlan& w) { return w.axis >= 0; });
  absl::StatusOr<OpsetOutcome> outcome = EnsureOpset(
      model_, per_channel ? kPerChannelOpset : kDynamicQuantizeOpset);
  if (!outcome.ok()) return outcome.status();
  stats_.opset_note = outcome->note;
  switch (outcome->mode) {
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
  for (const WeightPlan& w : plan_.weights) {
    weight_names_.push_back({names_->Make(w.tensor + "_quantized"),
                             names_->Make(w.tensor + "_scale"),
                             names_->Make(w.tensor + "_zero_point"),
                             names_->Make(w.tensor + "_DequantizeLinear")});
  }
  const int64_t total = static_cast<int64_t>(plan_.weights.size());
  const int64_t group = std::max(1, hooks_.group_size);
  std::vector<TensorProto*> tensors;
  for (const WeightPlan& w : plan_.weights) {
    tensors.push_back(WeightTensor(graph_, w));
  }
  for (int64_t begin = 0; begin < total; begin += group) {
    if (hooks_.check_cancelled) {
      absl::Status s = hooks_.check_cancelled();
      if (!s.ok()) return s;
    }
    const int64_t n = std::min(group, total - begin);
    std::vector<QuantizedWeight> done(n);
    auto work = [&](int64_t i) {
      const int64_t k = begin + i;
      done[i] = QuantizeWeight(*graph_, plan_.weights[k], tensors[k],
                               weight_names_[k], options_);
    };
    if (hooks_.parallel_for && n > 1) {
      hooks_.parallel_for(n, work);
    } else {
      for (int64_t i = 0; i < n; ++i) work(i);
    }
    for (int64_t i = 0; i < n; ++i) {
      QuantizedWeight& w = done[i];
      if (!w.status.ok()) return w.status;
      stats_.weight_bytes_before += w.bytes_before;
      stats_.weight_bytes_after += NewBytes(w);
      if (!stats_.opset_note.empty()) w.report.set_note(stats_.opset_note);
      // Adding to the graph only here, on one thread: RepeatedPtrField is
      // not safe to grow concurrently.
      const bool also_input = model_->ir_version() < 4;
      AddInitializer(std::move(w.values), also_input, graph_);
      AddInitializer(std::move(w.scale), also_input, graph_);
      AddInitializer(std::move(w.zero_point), also_input, graph_);
      ++stats_.quantized_tensors;
      if (hooks_.on_report) hooks_.on_report(w.report);
      if (hooks_.on_progress) hooks_.on_progress(begin + i + 1, total);
    }
  }
  return absl::OkStatus();
}

std::string DynamicRangePass::AddActivationQdq(
    const std::string& tensor,
    google::protobuf::RepeatedPtrField<NodeProto>* nodes) {
  const std::string q = names_->Make(tensor + "_quantized");
  const std::string scale = names_->Make(tensor + "_scale");
  const std::string zp = names_->Make(tensor + "_zero_point");
  const std::string dq = names_->Make(tensor + "_dequantized");
  *nodes->Add() = MakeNode("DynamicQuantizeLinear",
                           names_->Make(tensor + "_DynamicQuantizeLinear"),
                           {tensor}, {q, scale, zp});
  *nodes->Add() =
      MakeNode("DequantizeLinear", names_->Make(tensor + "_DequantizeLinear"),
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
  RemoveFloatInitializers();
}

// Drops the (already emptied) float initializers of quantized weights, and
// their graph-input entries (IR < 4 lists every initializer as an input).
void DynamicRangePass::RemoveFloatInitializers() {
  absl::flat_hash_set<std::string> gone;
  for (const WeightPlan& w : plan_.weights) {
    if (w.initializer >= 0) gone.insert(w.tensor);
  }
  auto* inits = graph_->mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(),
                              [&](const TensorProto& t) {
                                return gone.contains(t.name()) &&
                                       t.data_type() == TensorProto::FLOAT;
                              }),
               inits->end());
  auto* inputs = graph_->mutable_input();
  inputs->erase(std::remove_if(inputs->begin(), inputs->end(),
                               [&](const onnx::ValueInfoProto& v) {
                                 return gone.contains(v.name());
                               }),
                inputs->end());
}

}  // namespace

absl::StatusOr<PassStats> RunDynamicRangePass(
    const DynamicRangeOptions& options, const PassHooks& hooks,
    onnx::ModelProto* model) {
  return DynamicRangePass(options, hooks, model).Run();
}

}  // namespace quantd::passes
