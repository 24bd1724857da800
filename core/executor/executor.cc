#include "core/executor/executor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/graph/model_io.h"

namespace quantd::executor {
namespace {

// The opsets whose semantics the kernels implement (they branch on the
// version where an op changed, e.g. Softmax 13, Squeeze 13, ReduceMean 18).
// Opsets 19 to 21 changed the supported ops only by new element types
// (refused by type unless held, like INT4) or new attributes / attribute
// values (AveragePool dilations, Cast saturate, Pad "wrap", Q/DQ block_size
// and output_dtype), which kernels read or refuse by name.
constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 21;

bool IsDefaultDomain(const std::string& d) {
  return d.empty() || d == "ai.onnx";
}

std::string NodeLabel(const onnx::NodeProto& node, int index) {
  if (!node.name().empty()) return node.name();
  return absl::StrCat("#", index);
}

absl::Status WithNode(const absl::Status& s, const std::string& node,
                      const std::string& op) {
  return absl::Status(
      s.code(), absl::StrCat("node '", node, "' (op ", op, "): ", s.message()));
}

}  // namespace

std::vector<std::string> Executor::SupportedOps() {
  return GlobalOpRegistry().Ops();
}

int Executor::ValueId(const std::string& name) {
  auto [it, inserted] =
      value_ids_.try_emplace(name, static_cast<int>(value_names_.size()));
  if (inserted) {
    value_names_.push_back(name);
    constants_.emplace_back();
  }
  return it->second;
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const onnx::ModelProto& model, Options options) {
  std::unique_ptr<Executor> e(new Executor);
  absl::Status s = e->Build(model);
  if (!s.ok()) return s;
  return e;
}

absl::Status Executor::Build(const onnx::ModelProto& model) {
  const int64_t opset = graph::DefaultOpset(model);
  if (opset < kMinOpset || opset > kMaxOpset) {
    return absl::UnimplementedError(
        absl::StrCat("the executor supports default-domain opsets ", kMinOpset,
                     " to ", kMaxOpset, "; the model imports ", opset));
  }
  const onnx::GraphProto& g = model.graph();
  if (g.sparse_initializer_size() > 0) {
    return absl::UnimplementedError(
        "sparse initializers are not supported by the executor");
  }
  std::vector<int32_t> types;  // By value id; 0 when unknown.
  std::vector<int> ranks;      // By value id; -1 when unknown.
  std::vector<bool> defined;
  auto grow = [&] {
    types.resize(value_names_.size(), 0);
    ranks.resize(value_names_.size(), -1);
    defined.resize(value_names_.size(), false);
  };

  for (const onnx::TensorProto& init : g.initializer()) {
    const int id = ValueId(init.name());
    absl::StatusOr<Tensor> t = Tensor::FromProto(init);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("initializer '", init.name(),
                                       "': ", t.status().message()));
    }
    constants_[id] = *std::move(t);
    grow();
    types[id] = constants_[id].dtype();
    ranks[id] = constants_[id].rank();
    defined[id] = true;
  }

  for (const onnx::ValueInfoProto& vi : g.input()) {
    Input in;
    in.value = ValueId(vi.name());
    grow();
    in.has_default = defined[in.value];
    if (!vi.type().has_tensor_type()) {
      return absl::UnimplementedError(absl::StrCat(
          "graph input '", vi.name(), "' is not a tensor; not supported"));
    }
    const auto& tt = vi.type().tensor_type();
    in.type = tt.elem_type();
    if (ElementSize(in.type) == 0) {
      return absl::UnimplementedError(
          absl::StrCat("graph input '", vi.name(), "' has element type ",
                       DataTypeName(in.type), ", not supported"));
    }
    in.has_shape = tt.has_shape();
    for (const auto& d : tt.shape().dim()) {
      in.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    types[in.value] = in.type;
    ranks[in.value] = in.has_shape ? static_cast<int>(in.dims.size()) : -1;
    defined[in.value] = true;
    inputs_.push_back(in);
    input_names_.push_back(vi.name());
  }

  const OpRegistry& registry = GlobalOpRegistry();
  static const Tensor* const kNoConstant = nullptr;
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    const std::string label = NodeLabel(n, i);
    if (!IsDefaultDomain(n.domain())) {
      return absl::UnimplementedError(absl::StrCat(
          "op '", n.op_type(), "' of domain '", n.domain(), "' (node '", label,
          "') is not supported by the executor"));
    }
    for (const auto& a : n.attribute()) {
      if (a.type() == onnx::AttributeProto::GRAPH ||
          a.type() == onnx::AttributeProto::GRAPHS || a.has_g()) {
        return absl::UnimplementedError(absl::StrCat(
            "node '", label, "' (op ", n.op_type(),
            ") has a subgraph; subgraphs are not supported by the executor"));
      }
    }
    KernelFactory factory = registry.Find(n.op_type());
    if (factory == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("op '", n.op_type(), "' (node '", label,
                       "') is not supported by the executor"));
    }
    Node node;
    node.name = label;
    node.op = n.op_type();
    std::vector<int32_t> in_types;
    std::vector<const Tensor*> in_consts;
    for (const std::string& name : n.input()) {
      if (name.empty()) {
        node.inputs.push_back(-1);
        in_types.push_back(0);
        continue;
      }
      auto it = value_ids_.find(name);
      if (it == value_ids_.end() || !defined[it->second]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", label, "' (op ", n.op_type(), ") reads '", name,
            "', which no earlier node, initializer or graph input defines"));
      }
      node.inputs.push_back(it->second);
      in_types.push_back(types[it->second]);
    }
    // constants_ may grow below (outputs get ids), which would invalidate
    // the pointers: reserve the ids first.
    for (const std::string& name : n.output()) {
      if (!name.empty()) ValueId(name);
    }
    grow();
    for (int id : node.inputs) {
      // A graph input with a default may be overridden by a feed, so its
      // value is not a constant.
      bool overridable = false;
      for (const Input& in : inputs_) overridable |= in.value == id;
      in_consts.push_back(id < 0 || constants_[id].empty() || overridable
                              ? kNoConstant
                              : &constants_[id]);
    }
    NodeInfo info(n, opset, in_types, in_consts);
    std::vector<int> in_ranks;
    for (int id : node.inputs) in_ranks.push_back(id < 0 ? -1 : ranks[id]);
    info.set_input_ranks(std::move(in_ranks));
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = factory(info);
    if (!kernel.ok()) return kernel.status();
    absl::Status fin = info.Finish();
    if (!fin.ok()) return fin;
    node.kernel = *std::move(kernel);
    for (int o = 0; o < n.output_size(); ++o) {
      if (n.output(o).empty()) {
        node.outputs.push_back(-1);
        continue;
      }
      const int id = value_ids_.at(n.output(o));
      if (defined[id]) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", label, "' (op ", n.op_type(), ") writes '",
                         n.output(o), "', which is already defined"));
      }
      defined[id] = true;
      types[id] = info.output_types()[o];
      node.outputs.push_back(id);
    }
    // A Constant's value is known now: later kernels may look at it.
    if (n.op_type() == "Constant" && node.outputs.size() == 1) {
      std::vector<Tensor> out(1);
      KernelContext ctx{{}, &out, nullptr};
      absl::Status cs = node.kernel->Compute(ctx);
      if (!cs.ok()) return WithNode(cs, label, n.op_type());
      constants_[node.outputs[0]] = std::move(out[0]);
      ranks[node.outputs[0]] = constants_[node.outputs[0]].rank();
    }
    nodes_.push_back(std::move(node));
  }

  std::vector<bool> is_output(value_names_.size(), false);
  for (const onnx::ValueInfoProto& vi : g.output()) {
    auto it = value_ids_.find(vi.name());
    if (it == value_ids_.end() || !defined[it->second]) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", vi.name(), "' is never defined"));
    }
    output_names_.push_back(vi.name());
    output_values_.push_back(it->second);
    is_output[it->second] = true;
  }

  // Free every run-time value right after its last reader.
  std::vector<int> last_reader(value_names_.size(), -1);
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    for (int v : nodes_[i].inputs) {
      if (v >= 0) last_reader[v] = i;
    }
  }
  auto plan_release = [&](int v, int producer) {
    if (is_output[v]) return;
    const int at = last_reader[v] >= 0 ? last_reader[v] : producer;
    if (at >= 0) {
      nodes_[at].release.push_back(v);
    } else {
      unread_inputs_.push_back(v);
    }
  };
  for (const Input& in : inputs_) plan_release(in.value, -1);
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    for (int v : nodes_[i].outputs) {
      if (v >= 0) plan_release(v, i);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Executor::Run(
    const absl::flat_hash_map<std::string, Tensor>& feeds,
    const RunOptions& options) const {
  std::vector<Tensor> values(value_names_.size());
  for (const auto& [name, t] : feeds) {
    bool known = false;
    for (size_t i = 0; i < inputs_.size() && !known; ++i) {
      known = input_names_[i] == name;
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not an input of the model"));
    }
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Input& in = inputs_[i];
    const std::string& name = input_names_[i];
    auto it = feeds.find(name);
    if (it == feeds.end()) {
      if (in.has_default) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' is not fed"));
    }
    const Tensor& t = it->second;
    if (t.dtype() != in.type) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' is ", DataTypeName(t.dtype()),
                       ", the model wants ", DataTypeName(in.type)));
    }
    bool shape_ok = !in.has_shape || in.dims.size() == t.shape().size();
    for (size_t d = 0; shape_ok && in.has_shape && d < in.dims.size(); ++d) {
      shape_ok = in.dims[d] < 0 || in.dims[d] == t.dim(d);
    }
    if (!shape_ok) {
      std::vector<int64_t> want = in.dims;
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' has shape ", ShapeString(t.shape()),
                       ", the model wants ", ShapeString(want), " (-1: any)"));
    }
    values[in.value] = t;
  }

  // Extra outputs must survive to the end.
  std::vector<int> extra;
  std::vector<bool> keep;
  if (!options.extra_outputs.empty()) {
    keep.assign(value_names_.size(), false);
    for (const std::string& name : options.extra_outputs) {
      auto it = value_ids_.find(name);
      if (it == value_ids_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "extra output '", name, "' is not a value of the model"));
      }
      extra.push_back(it->second);
      keep[it->second] = true;
    }
  }
  auto release = [&](int v) {
    if (keep.empty() || !keep[v]) values[v] = Tensor();
  };

  if (options.on_tensor) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const int v = inputs_[i].value;
      const Tensor& t = values[v].empty() ? constants_[v] : values[v];
      if (!t.empty()) options.on_tensor(input_names_[i], t);
    }
  }
  for (int v : unread_inputs_) release(v);

  static const Tensor kOmitted;
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor> outs;
  for (const Node& node : nodes_) {
    if (options.cancel != nullptr) {
      absl::Status s = options.cancel->Check("model execution");
      if (!s.ok()) return s;
    }
    in_ptrs.clear();
    for (int v : node.inputs) {
      if (v < 0) {
        in_ptrs.push_back(&kOmitted);
      } else if (!values[v].empty()) {
        in_ptrs.push_back(&values[v]);
      } else {
        in_ptrs.push_back(&constants_[v]);
      }
    }
    outs.assign(node.outputs.size(), Tensor());
    KernelContext ctx{in_ptrs, &outs, options.pool};
    absl::Status s = node.kernel->Compute(ctx);
    if (!s.ok()) return WithNode(s, node.name, node.op);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int v = node.outputs[o];
      if (v < 0) continue;
      if (outs[o].empty()) {
        return absl::InternalError(absl::StrCat("node '", node.name, "' (op ",
                                                node.op,
                                                ") produced no output ", o));
      }
      values[v] = std::move(outs[o]);
      if (options.on_tensor) options.on_tensor(value_names_[v], values[v]);
    }
    for (int v : node.release) release(v);
  }

  std::vector<Tensor> result;
  result.reserve(output_values_.size() + extra.size());
  for (int v : output_values_) {
    result.push_back(values[v].empty() ? constants_[v] : values[v]);
  }
  for (int v : extra) {
    result.push_back(values[v].empty() ? constants_[v] : values[v]);
  }
  return result;
}

}  // namespace quantd::executor
