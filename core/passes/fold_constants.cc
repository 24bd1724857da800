// Constant folding through the executor and the opset-upgrade step of
// graph preparation (see fold_constants.h).
#include "core/passes/fold_constants.h"

#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/executor/executor.h"
#include "core/executor/tensor.h"
#include "core/graph/graph_edit.h"
#include "core/graph/graph_index.h"
#include "core/graph/inference.h"
#include "core/graph/model_io.h"
#include "core/graph/tensor_util.h"
#include "core/passes/opset_upgrade.h"

namespace quantd::passes {
namespace {

using onnx::GraphProto;
using onnx::NodeProto;
using onnx::TensorProto;

// Ops whose value must not be computed ahead of time: random ones differ
// per run, and quantize / dequantize nodes are the structure of an already
// quantized model that the passes recognise.
bool NeverFold(const NodeProto& node) {
  static const auto* ops =
      new absl::flat_hash_set<std::string>{"Constant",
                                           "RandomNormal",
                                           "RandomUniform",
                                           "RandomNormalLike",
                                           "RandomUniformLike",
                                           "Multinomial",
                                           "Bernoulli",
                                           "QuantizeLinear",
                                           "DequantizeLinear",
                                           "DynamicQuantizeLinear",
                                           "If",
                                           "Loop",
                                           "Scan",
                                           "Dropout"};
  return !IsDefaultDomain(node) || ops->contains(node.op_type()) ||
         graph::HasSubgraph(node) || node.input_size() == 0;
}

// The static shape of `name` from shape inference, or false.
bool StaticShape(const absl::flat_hash_map<std::string, onnx::TypeProto>& types,
                 const std::string& name, std::vector<int64_t>* dims) {
  auto it = types.find(name);
  if (it == types.end() || !it->second.has_tensor_type() ||
      !it->second.tensor_type().has_shape()) {
    return false;
  }
  dims->clear();
  for (const auto& d : it->second.tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return false;
    dims->push_back(d.dim_value());
  }
  return true;
}

TensorProto Int64Tensor(const std::string& name, std::vector<int64_t> dims,
                        const std::vector<int64_t>& values) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(TensorProto::INT64);
  for (int64_t d : dims) t.add_dims(d);
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

// Shape / Size of a statically shaped value (Shape-15's start / end).
bool FoldShape(const NodeProto& node, const std::vector<int64_t>& dims,
               TensorProto* out) {
  if (node.output_size() != 1) return false;
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (node.op_type() == "Size") {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    *out = Int64Tensor(node.output(0), {}, {n});
    return true;
  }
  int64_t start = graph::IntAttribute(node, "start", 0);
  int64_t end = graph::IntAttribute(node, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::min(std::max<int64_t>(start, 0), rank);
  end = std::min(std::max<int64_t>(end, 0), rank);
  std::vector<int64_t> v;
  for (int64_t i = start; i < end; ++i) v.push_back(dims[i]);
  const int64_t n = static_cast<int64_t>(v.size());
  *out = Int64Tensor(node.output(0), {n}, v);
  return true;
}

// Runs `node` on constant inputs in a one-node model into `outs`. CANCELLED
// when `cancel` stopped the run; any other error: the executor cannot run it
// (the node then stays).
absl::Status Evaluate(
    const onnx::ModelProto& model, const NodeProto& node,
    const absl::flat_hash_map<std::string, const TensorProto*>& k,
    int64_t max_elements, const CancellationToken* cancel,
    std::vector<TensorProto>* outs) {
  onnx::ModelProto mini;
  mini.set_ir_version(model.ir_version());
  *mini.mutable_opset_import() = model.opset_import();
  GraphProto* g = mini.mutable_graph();
  g->set_name("fold");
  absl::flat_hash_set<std::string> added;
  for (const auto& in : node.input()) {
    if (in.empty() || !added.insert(in).second) continue;
    *g->add_initializer() = *k.at(in);
  }
  *g->add_node() = node;
  std::vector<int> slots;
  for (int i = 0; i < node.output_size(); ++i) {
    if (node.output(i).empty()) continue;
    g->add_output()->set_name(node.output(i));
    slots.push_back(i);
  }
  QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<executor::Executor> exec,
                          executor::Executor::Create(mini));
  executor::Executor::RunOptions options;
  options.max_tensor_elements = max_elements;
  options.cancel = cancel;
  QUANTD_ASSIGN_OR_RETURN(std::vector<executor::Tensor> values,
                          exec->Run({}, options));
  if (values.size() != slots.size()) {
    return absl::InternalError("the executor returned other outputs");
  }
  outs->clear();
  for (size_t i = 0; i < slots.size(); ++i) {
    outs->push_back(values[i].ToProto(node.output(slots[i])));
  }
  return absl::OkStatus();
}

// Folds the nodes of `g` (the main graph when `types` is given, else a
// body) whose inputs are all in `constants` (the enclosing graphs' fixed
// values, by name), then the bodies of the nodes left, each seeing `g`'s
// fixed values too. Adds to `inputs_of_folded` what the folded nodes read.
// CANCELLED once `cancel` (may be null) is set, checked before each node and
// inside each run.
absl::StatusOr<int64_t> FoldGraph(
    const onnx::ModelProto& model, GraphProto* g, bool main,
    absl::flat_hash_map<std::string, const TensorProto*> constants,
    const CancellationToken* cancel,
    absl::flat_hash_set<std::string>* inputs_of_folded) {
  const int64_t ir = model.ir_version();
  const graph::GraphIndex index(*g);
  // Fixed values by name: initializers a caller cannot override, then the
  // outputs of folded nodes.
  for (const auto& t : g->initializer()) {
    if (main && ir >= 4 && index.IsGraphInput(t.name())) continue;
    constants[t.name()] = &t;
  }
  // Shape inference sees the main graph only; a body's Shape / Size stay.
  bool has_shape_ops = false;
  for (const auto& node : g->node()) {
    has_shape_ops |= node.op_type() == "Shape" || node.op_type() == "Size";
  }
  absl::flat_hash_map<std::string, onnx::TypeProto> types;
  if (main && has_shape_ops) types = graph::InferValueTypes(model);

  std::deque<TensorProto> folded_values;  // Stable addresses.
  absl::flat_hash_set<int> drop;
  for (int i = 0; i < g->node_size(); ++i) {
    if (cancel != nullptr) {
      QUANTD_RETURN_IF_ERROR(cancel->Check("constant folding"));
    }
    const NodeProto& node = g->node(i);
    if (NeverFold(node)) continue;
    bool writes_output = false;
    for (const auto& o : node.output()) {
      writes_output |= index.IsGraphOutput(o);
    }
    if (writes_output) continue;
    std::vector<TensorProto> outs;
    std::vector<int64_t> dims;
    const bool shape_op =
        (node.op_type() == "Shape" || node.op_type() == "Size") &&
        node.input_size() == 1;
    if (shape_op && !constants.contains(node.input(0))) {
      if (!StaticShape(types, node.input(0), &dims) ||
          !FoldShape(node, dims, &outs.emplace_back())) {
        continue;
      }
    } else {
      bool all_constant = true;
      uint64_t in_bytes = 0;
      for (const auto& in : node.input()) {
        if (in.empty()) continue;
        auto it = constants.find(in);
        if (it == constants.end() || graph::HasExternalData(*it->second)) {
          all_constant = false;
          break;
        }
        in_bytes += graph::DataBytes(*it->second);
      }
      // A value that could not be kept is never computed: an Expand of a
      // scalar to 2^31 elements took 16 GB to find out it was too big.
      const int64_t max_elements =
          static_cast<int64_t>(std::max<uint64_t>(kMaxFoldedBytes, in_bytes));
      if (!all_constant) continue;
      const absl::Status run =
          Evaluate(model, node, constants, max_elements, cancel, &outs);
      // A run the cancel stopped ends the fold; a node the executor cannot
      // run stays.
      if (absl::IsCancelled(run)) return run;
      if (!run.ok()) continue;
      bool too_big = false;
      for (const auto& t : outs) {
        const uint64_t b = graph::DataBytes(t);
        too_big |=
            (b > static_cast<uint64_t>(kMaxFoldedBytes) && b > in_bytes) ||
            b > in_bytes + static_cast<uint64_t>(kMaxFoldGrowthBytes);
      }
      if (too_big) continue;
    }
    for (const auto& in : node.input()) inputs_of_folded->insert(in);
    for (auto& t : outs) {
      folded_values.push_back(std::move(t));
      constants[folded_values.back().name()] = &folded_values.back();
    }
    drop.insert(i);
  }

  if (!drop.empty()) {
    google::protobuf::RepeatedPtrField<NodeProto> kept;
    for (int i = 0; i < g->node_size(); ++i) {
      if (!drop.contains(i)) kept.Add()->Swap(g->mutable_node(i));
    }
    g->mutable_node()->Swap(&kept);
    // Folded values the remaining graph (or a body in it) still reads
    // become initializers.
    const graph::GraphIndex after(*g);
    for (auto& t : folded_values) {
      if (!after.Uses(t.name()).empty()) {
        graph::AddInitializer(std::move(t), main && ir < 4, g);
      }
    }
  }

  // The bodies, with this graph's fixed values as they are now.
  int64_t folded = static_cast<int64_t>(drop.size());
  for (const auto& t : g->initializer()) {
    if (main && ir >= 4 && index.IsGraphInput(t.name())) continue;
    constants[t.name()] = &t;
  }
  for (auto& node : *g->mutable_node()) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) {
        QUANTD_ASSIGN_OR_RETURN(
            const int64_t n, FoldGraph(model, a.mutable_g(), false, constants,
                                       cancel, inputs_of_folded));
        folded += n;
      }
      for (auto& body : *a.mutable_graphs()) {
        QUANTD_ASSIGN_OR_RETURN(
            const int64_t n, FoldGraph(model, &body, false, constants, cancel,
                                       inputs_of_folded));
        folded += n;
      }
    }
  }
  return folded;
}

// Drops the initializers of `g` and its bodies that only folded nodes read
// (their graph-input entries too when the main graph is below IR 4).
void DropFoldedInputs(const absl::flat_hash_set<std::string>& inputs_of_folded,
                      bool main, int64_t ir, GraphProto* g) {
  const graph::GraphIndex after(*g);
  google::protobuf::RepeatedPtrField<TensorProto> inits;
  for (auto& t : *g->mutable_initializer()) {
    if (inputs_of_folded.contains(t.name()) && after.Uses(t.name()).empty() &&
        !after.IsGraphInput(t.name()) && !after.IsGraphOutput(t.name())) {
      continue;
    }
    inits.Add()->Swap(&t);
  }
  g->mutable_initializer()->Swap(&inits);
  if (main && ir < 4) {
    // IR < 4 declared the dropped initializers as graph inputs too.
    absl::flat_hash_set<std::string> present;
    for (const auto& t : g->initializer()) present.insert(t.name());
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> ins;
    for (auto& v : *g->mutable_input()) {
      if (inputs_of_folded.contains(v.name()) && !present.contains(v.name()) &&
          after.Uses(v.name()).empty()) {
        continue;
      }
      ins.Add()->Swap(&v);
    }
    g->mutable_input()->Swap(&ins);
  }
  for (auto& node : *g->mutable_node()) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g())
        DropFoldedInputs(inputs_of_folded, false, ir, a.mutable_g());
      for (auto& body : *a.mutable_graphs()) {
        DropFoldedInputs(inputs_of_folded, false, ir, &body);
      }
    }
  }
}

}  // namespace

absl::StatusOr<int64_t> FoldConstantNodes(onnx::ModelProto* model,
                                          const CancellationToken* cancel) {
  absl::flat_hash_set<std::string> inputs_of_folded;
  QUANTD_ASSIGN_OR_RETURN(const int64_t folded,
                          FoldGraph(*model, model->mutable_graph(), true, {},
                                    cancel, &inputs_of_folded));
  if (folded > 0) {
    DropFoldedInputs(inputs_of_folded, true, model->ir_version(),
                     model->mutable_graph());
  }
  return folded;
}

absl::Status UpgradeOpsetForPrepare(onnx::ModelProto* model,
                                    graph::PrepareReport* report) {
  const int64_t from = graph::DefaultOpset(*model);
  if (from < 7 || from >= kPerChannelOpset) return absl::OkStatus();
  absl::Status s = ConvertOpset(model, kPerChannelOpset);
  if (!s.ok()) {
    report->notes.push_back(
        absl::StrCat("the ONNX version converter could not upgrade opset ",
                     from, " to ", kPerChannelOpset, ": ", s.message()));
  }
  return absl::OkStatus();
}

graph::PrepareOptions FullPrepareOptions(const CancellationToken* cancel) {
  graph::PrepareOptions options;
  options.upgrade = UpgradeOpsetForPrepare;
  options.fold_constants = [cancel](
                               onnx::ModelProto* model,
                               graph::PrepareReport* report) -> absl::Status {
    QUANTD_ASSIGN_OR_RETURN(int64_t n, FoldConstantNodes(model, cancel));
    report->folded_constant_nodes += n;
    return absl::OkStatus();
  };
  return options;
}

}  // namespace quantd::passes
