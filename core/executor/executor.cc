#include "core/executor/executor.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/model_io.h"
#include "onnx/defs/schema.h"

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

// Models older than kMinOpset run as opset kMinOpset when none of their ops
// changed in between (Softplus-1, Elu-6, GlobalMaxPool-1, Not-1 ... mean
// the same at 7): the schema in force at `opset` is the one in force at
// kMinOpset. Otherwise (e.g. Add-6's `broadcast` attribute, Dropout-6's
// is_test) UNIMPLEMENTED naming the op. Walks If/Loop/Scan bodies too.
absl::Status CheckUnchangedSinceOpset(const onnx::GraphProto& g,
                                      int64_t opset) {
  const onnx::OpSchemaRegistry* registry = onnx::OpSchemaRegistry::Instance();
  for (const onnx::NodeProto& n : g.node()) {
    if (!IsDefaultDomain(n.domain())) continue;  // Refused later by name.
    const onnx::OpSchema* then =
        registry->GetSchema(n.op_type(), static_cast<int>(opset));
    const onnx::OpSchema* now =
        registry->GetSchema(n.op_type(), static_cast<int>(kMinOpset));
    if (then == nullptr || now == nullptr ||
        then->since_version() != now->since_version()) {
      return absl::UnimplementedError(absl::StrCat(
          "the executor supports default-domain opsets ", kMinOpset, " to ",
          kMaxOpset, "; the model imports ", opset, " and its op ", n.op_type(),
          now == nullptr
              ? " does not exist at opset 7"
              : absl::StrCat(" changed at opset ", now->since_version())));
    }
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.has_g()) {
        QUANTD_RETURN_IF_ERROR(CheckUnchangedSinceOpset(a.g(), opset));
      }
      for (const onnx::GraphProto& body : a.graphs()) {
        QUANTD_RETURN_IF_ERROR(CheckUnchangedSinceOpset(body, opset));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status WithNode(const absl::Status& s, const std::string& node,
                      const std::string& op) {
  return absl::Status(
      s.code(), absl::StrCat("node '", node, "' (op ", op, "): ", s.message()));
}

// Ops whose kernels take FLOAT16 / BFLOAT16 values as they are: Cast and
// CastLike convert exactly, control flow passes values to bodies that
// declare them, and the rest only relabel or reshape the same bytes. Every
// other op computes in float through HalfAdapter.
bool TakesHalfItself(const std::string& op) {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "Cast",  "CastLike", "If",      "Loop",    "Scan",     "Identity",
      "Shape", "Reshape",  "Flatten", "Squeeze", "Unsqueeze"};
  return ops->contains(op);
}

// Outputs whose type the op fixes to float whatever its inputs are, so they
// are never narrowed: LayerNormalization's Mean and InvStdDev (stash_type).
bool KeepsFloat(const std::string& op, int output) {
  return op == "LayerNormalization" && output > 0;
}

// Runs a kernel built for FLOAT on FLOAT16 / BFLOAT16 values: the inputs of
// such a type are widened to FLOAT (exactly; initializers once, at Create),
// the kernel computes, and its FLOAT outputs are rounded (nearest even) to
// the type the graph declares for them, or else to the 16-bit type of the
// inputs. Values of other types pass through untouched, so a node that sees
// no 16-bit input at run time costs one scan of its inputs.
class HalfAdapter : public Kernel {
 public:
  // For NodeInfo at Create: widened copies of the node's 16-bit constant
  // inputs (nullptr elsewhere), at stable addresses.
  explicit HalfAdapter(const std::vector<const Tensor*>& constants) {
    widened_.resize(constants.size());
    for (size_t i = 0; i < constants.size(); ++i) {
      if (constants[i] != nullptr && IsHalfFloat(constants[i]->dtype())) {
        widened_[i] = constants[i]->WidenedToFloat();
      }
    }
  }
  const Tensor* widened(size_t i) const {
    return i < widened_.size() && !widened_[i].empty() ? &widened_[i] : nullptr;
  }
  // narrow_to[o]: the 16-bit type output o becomes, 0 for that of the
  // inputs, -1 to keep it as computed.
  void Finish(std::unique_ptr<Kernel> inner, std::vector<int32_t> narrow_to) {
    inner_ = std::move(inner);
    narrow_to_ = std::move(narrow_to);
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    int32_t half = 0;
    for (const Tensor* t : ctx.inputs) {
      if (IsHalfFloat(t->dtype())) {
        half = t->dtype();
        break;
      }
    }
    if (half == 0) return inner_->Compute(ctx);
    std::vector<Tensor> owned(ctx.inputs.size());
    std::vector<const Tensor*> ins(ctx.inputs.begin(), ctx.inputs.end());
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!IsHalfFloat(ins[i]->dtype())) continue;
      if (const Tensor* w = widened(i)) {
        ins[i] = w;
      } else {
        owned[i] = ins[i]->WidenedToFloat();
        ins[i] = &owned[i];
      }
    }
    KernelContext inner_ctx = ctx;
    inner_ctx.inputs = ins;
    absl::Status s = inner_->Compute(inner_ctx);
    if (!s.ok()) return s;
    for (size_t o = 0; o < ctx.outputs->size(); ++o) {
      Tensor& out = (*ctx.outputs)[o];
      const int32_t to = o < narrow_to_.size() ? narrow_to_[o] : 0;
      if (to < 0 || out.dtype() != onnx::TensorProto::FLOAT) continue;
      out = out.NarrowedTo(static_cast<DataType>(to == 0 ? half : to));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<Tensor> widened_;
  std::unique_ptr<Kernel> inner_;
  std::vector<int32_t> narrow_to_;
};

bool IsSubgraphAttr(const onnx::AttributeProto& a) {
  return a.type() == onnx::AttributeProto::GRAPH ||
         a.type() == onnx::AttributeProto::GRAPHS || a.has_g() ||
         a.graphs_size() > 0;
}

// "a sequence", "an optional", ... for a value that is not a tensor.
std::string TypeKind(const onnx::TypeProto& t) {
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType:
      return "a tensor";
    case onnx::TypeProto::kSequenceType:
      return "a sequence";
    case onnx::TypeProto::kMapType:
      return "a map";
    case onnx::TypeProto::kOptionalType:
      return "an optional";
    case onnx::TypeProto::kSparseTensorType:
      return "a sparse tensor";
    default:
      return "an untyped value";
  }
}

void AddUnique(const std::string& name, std::vector<std::string>* out,
               absl::flat_hash_set<std::string>* seen) {
  if (seen->insert(name).second) out->push_back(name);
}

// The names `g` reads but does not define itself (outer-scope values),
// recursively through nested subgraphs, in order of first use.
std::vector<std::string> FreeNames(const onnx::GraphProto& g) {
  const std::vector<std::string> defined =
      graph::DefinedNames(g, /*recursive=*/false);
  const absl::flat_hash_set<std::string> local(defined.begin(), defined.end());
  std::vector<std::string> out;
  absl::flat_hash_set<std::string> seen;
  auto use = [&](const std::string& name) {
    if (!name.empty() && !local.contains(name)) AddUnique(name, &out, &seen);
  };
  for (const auto& n : g.node()) {
    for (const std::string& in : n.input()) use(in);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) {
        for (const std::string& f : FreeNames(a.g())) use(f);
      }
      for (const auto& sub : a.graphs()) {
        for (const std::string& f : FreeNames(sub)) use(f);
      }
    }
  }
  // A body may return an outer value directly.
  for (const auto& vi : g.output()) use(vi.name());
  return out;
}

bool HasSubgraph(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute()) {
    if (IsSubgraphAttr(a)) return true;
  }
  return false;
}

// The outer-scope names the bodies of `n` read, in order of first use.
std::vector<std::string> BodyFreeNames(const onnx::NodeProto& n) {
  std::vector<std::string> names;
  absl::flat_hash_set<std::string> seen;
  for (const auto& a : n.attribute()) {
    if (a.has_g()) {
      for (const std::string& f : FreeNames(a.g())) {
        AddUnique(f, &names, &seen);
      }
    }
    for (const auto& sub : a.graphs()) {
      for (const std::string& f : FreeNames(sub)) {
        AddUnique(f, &names, &seen);
      }
    }
  }
  return names;
}

// UNIMPLEMENTED for a graph output that is declared, but not as a tensor.
absl::Status CheckOutputsAreTensors(const onnx::GraphProto& g) {
  for (const onnx::ValueInfoProto& vi : g.output()) {
    if (vi.type().value_case() != onnx::TypeProto::VALUE_NOT_SET &&
        !vi.type().has_tensor_type()) {
      return absl::UnimplementedError(absl::StrCat(
          "graph output '", vi.name(), "' is ", TypeKind(vi.type()),
          ", not a tensor; only tensor values are supported"));
    }
  }
  return absl::OkStatus();
}

// Element types the graph declares for its values (outputs, value_info):
// what a HalfAdapter narrows to.
absl::flat_hash_map<std::string, int32_t> DeclaredTypes(
    const onnx::GraphProto& g) {
  absl::flat_hash_map<std::string, int32_t> declared;
  for (const auto* list : {&g.value_info(), &g.output()}) {
    for (const onnx::ValueInfoProto& vi : *list) {
      if (vi.type().has_tensor_type() && vi.type().tensor_type().elem_type()) {
        declared[vi.name()] = vi.type().tensor_type().elem_type();
      }
    }
  }
  return declared;
}

// A node that may see 16-bit floats and does not take them itself gets a
// kernel built for FLOAT inside a HalfAdapter: returns the adapter (null
// when the node needs none), with `types` and `constants` (of `inputs`, by
// position) made what the FLOAT kernel sees, and `half_in` the 16-bit type
// of the inputs when known (else left 0).
std::unique_ptr<HalfAdapter> MaybeHalfAdapter(
    const std::string& op, const std::vector<int>& inputs,
    std::vector<int32_t>* types, std::vector<const Tensor*>* constants,
    int32_t* half_in) {
  if (TakesHalfItself(op)) return nullptr;
  bool may_see_half = false;
  for (size_t i = 0; i < types->size(); ++i) {
    const int32_t t = (*types)[i];
    const bool unknown = t == 0 && inputs[i] >= 0;
    may_see_half |= unknown || IsHalfFloat(t);
    if (IsHalfFloat(t) && *half_in == 0) *half_in = t;
  }
  if (!may_see_half) return nullptr;
  auto adapter = std::make_unique<HalfAdapter>(*constants);
  for (size_t i = 0; i < types->size(); ++i) {
    if (IsHalfFloat((*types)[i])) (*types)[i] = onnx::TensorProto::FLOAT;
    if (const Tensor* w = adapter->widened(i)) (*constants)[i] = w;
  }
  return adapter;
}

// What a HalfAdapter narrows each FLOAT output of `n` to (see Finish), with
// `out_types` updated to match: the declared type when the graph gives one,
// else the inputs' type `half_in`; outputs the op keeps in float or that
// the graph declares FLOAT stay.
std::vector<int32_t> NarrowTargets(
    const onnx::NodeProto& n,
    const absl::flat_hash_map<std::string, int32_t>& declared, int32_t half_in,
    std::vector<int32_t>* out_types) {
  std::vector<int32_t> narrow_to(n.output_size(), 0);
  for (int o = 0; o < n.output_size(); ++o) {
    auto d = declared.find(n.output(o));
    const int32_t want = d == declared.end() ? 0 : d->second;
    if (KeepsFloat(n.op_type(), o) || (want != 0 && !IsHalfFloat(want))) {
      narrow_to[o] = -1;
      continue;
    }
    narrow_to[o] = want;
    if ((*out_types)[o] == onnx::TensorProto::FLOAT) {
      if (want != 0) {
        (*out_types)[o] = want;
      } else if (half_in != 0) {
        (*out_types)[o] = half_in;
      }
    }
  }
  return narrow_to;
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
  int64_t opset = graph::DefaultOpset(model);
  if (opset < 1 && model.graph().node_size() > 0) {
    const onnx::NodeProto& n = model.graph().node(0);
    return absl::UnimplementedError(absl::StrCat(
        "the model imports no default-domain (ai.onnx) opset: its ops are "
        "from other domains (first: ",
        n.op_type(), " of '", n.domain(),
        "'), which the executor does not run"));
  }
  if (opset > kMaxOpset || opset < 1) {
    return absl::UnimplementedError(
        absl::StrCat("the executor supports default-domain opsets ", kMinOpset,
                     " to ", kMaxOpset, "; the model imports ", opset));
  }
  if (opset < kMinOpset) {
    QUANTD_RETURN_IF_ERROR(CheckUnchangedSinceOpset(model.graph(), opset));
    opset = kMinOpset;
  }
  std::unique_ptr<Executor> e(new Executor);
  QUANTD_RETURN_IF_ERROR(e->Build(model.graph(), opset, nullptr));
  return e;
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::CreateBody(
    const onnx::GraphProto& body, int64_t opset,
    const std::vector<ScopeValue>& scope) {
  std::unique_ptr<Executor> e(new Executor);
  QUANTD_RETURN_IF_ERROR(e->Build(body, opset, &scope));
  return e;
}

struct Executor::BuildState {
  std::vector<int32_t> types;  // By value id; 0 when unknown.
  std::vector<int> ranks;      // By value id; -1 when unknown.
  std::vector<bool> defined;   // By value id.
  // Graph inputs that are not tensors (sequences, optionals), by value id.
  absl::flat_hash_map<int, std::string> non_tensor;

  // Makes room for the value ids ValueId has handed out so far.
  void Grow(size_t num_values) {
    types.resize(num_values, 0);
    ranks.resize(num_values, -1);
    defined.resize(num_values, false);
  }
};

absl::Status Executor::Build(const onnx::GraphProto& g, int64_t opset,
                             const std::vector<ScopeValue>* scope) {
  const bool is_body = scope != nullptr;
  BuildState state;
  if (is_body) BindScope(g, *scope, &state);
  QUANTD_RETURN_IF_ERROR(BindInitializers(g, &state));
  QUANTD_RETURN_IF_ERROR(BindInputs(g, is_body, &state));
  // A body's non-tensor outputs are refused before its ops (whose owner's
  // message then names the attribute); a main graph's after its nodes, so
  // the node making the value (e.g. an If) is the one named.
  if (is_body) QUANTD_RETURN_IF_ERROR(CheckOutputsAreTensors(g));
  QUANTD_RETURN_IF_ERROR(CreateKernels(g, opset, &state));
  if (!is_body) QUANTD_RETURN_IF_ERROR(CheckOutputsAreTensors(g));
  QUANTD_RETURN_IF_ERROR(RefuseNonTensorInputs(state));
  QUANTD_RETURN_IF_ERROR(BindOutputs(g, state));
  PlanReleases();
  return absl::OkStatus();
}

// A body sees the outer values it reads: constants stay constants (kernels
// may pre-pack them), the rest arrive at run time as implicit inputs.
void Executor::BindScope(const onnx::GraphProto& g,
                         const std::vector<ScopeValue>& scope,
                         BuildState* state) {
  const std::vector<std::string> free = FreeNames(g);
  const absl::flat_hash_set<std::string> reads(free.begin(), free.end());
  int implicit_index = 0;
  for (const ScopeValue& sv : scope) {
    const int index = sv.constant == nullptr ? implicit_index++ : -1;
    if (!reads.contains(sv.name)) continue;
    const int id = ValueId(sv.name);
    state->Grow(value_names_.size());
    state->types[id] = sv.type;
    state->ranks[id] = sv.rank;
    state->defined[id] = true;
    if (sv.constant != nullptr) {
      constants_[id] = *sv.constant;
    } else {
      implicit_.emplace_back(index, id);
    }
  }
}

absl::Status Executor::BindInitializers(const onnx::GraphProto& g,
                                        BuildState* state) {
  if (g.sparse_initializer_size() > 0) {
    return absl::UnimplementedError(
        "sparse initializers are not supported by the executor");
  }
  for (const onnx::TensorProto& init : g.initializer()) {
    const int id = ValueId(init.name());
    absl::StatusOr<Tensor> t = Tensor::FromProto(init);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("initializer '", init.name(),
                                       "': ", t.status().message()));
    }
    constants_[id] = *std::move(t);
    state->Grow(value_names_.size());
    state->types[id] = constants_[id].dtype();
    state->ranks[id] = constants_[id].rank();
    state->defined[id] = true;
  }
  return absl::OkStatus();
}

absl::Status Executor::BindInputs(const onnx::GraphProto& g, bool is_body,
                                  BuildState* state) {
  for (const onnx::ValueInfoProto& vi : g.input()) {
    Input in;
    in.value = ValueId(vi.name());
    state->Grow(value_names_.size());
    in.has_default = state->defined[in.value];
    // A body input may leave its type to inference (UNDEFINED: not checked).
    const bool untyped =
        is_body && vi.type().value_case() == onnx::TypeProto::VALUE_NOT_SET;
    if (!vi.type().has_tensor_type() && !untyped) {
      // Refused by the node that reads it (naming the node), or by
      // RefuseNonTensorInputs when nothing does.
      state->non_tensor.emplace(in.value, TypeKind(vi.type()));
      state->defined[in.value] = true;
      continue;
    }
    const auto& tt = vi.type().tensor_type();
    in.type = tt.elem_type();
    if (ElementSize(in.type) == 0 && (!is_body || in.type != 0)) {
      return absl::UnimplementedError(
          absl::StrCat("graph input '", vi.name(), "' has element type ",
                       DataTypeName(in.type), ", not supported"));
    }
    in.has_shape = tt.has_shape();
    for (const auto& d : tt.shape().dim()) {
      in.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    state->types[in.value] = in.type;
    state->ranks[in.value] =
        in.has_shape ? static_cast<int>(in.dims.size()) : -1;
    state->defined[in.value] = true;
    inputs_.push_back(in);
    input_names_.push_back(vi.name());
    input_types_.push_back(in.type);
  }
  return absl::OkStatus();
}

absl::Status Executor::CreateKernels(const onnx::GraphProto& g, int64_t opset,
                                     BuildState* state) {
  const absl::flat_hash_map<std::string, int32_t> declared = DeclaredTypes(g);
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    QUANTD_ASSIGN_OR_RETURN(
        Node node, CreateNode(n, NodeLabel(n, i), opset, declared, state));
    nodes_.push_back(std::move(node));
  }
  return absl::OkStatus();
}

absl::StatusOr<Executor::Node> Executor::CreateNode(
    const onnx::NodeProto& n, const std::string& label, int64_t opset,
    const absl::flat_hash_map<std::string, int32_t>& declared,
    BuildState* state) {
  if (!IsDefaultDomain(n.domain())) {
    return absl::UnimplementedError(absl::StrCat(
        "op '", n.op_type(), "' of domain '", n.domain(), "' (node '", label,
        "') is not supported by the executor"));
  }
  KernelFactory factory = GlobalOpRegistry().Find(n.op_type());
  if (factory == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("op '", n.op_type(), "' (node '", label,
                     "') is not supported by the executor"));
  }
  Node node;
  node.name = label;
  node.op = n.op_type();
  std::vector<int32_t> in_types;
  QUANTD_RETURN_IF_ERROR(BindNodeInputs(n, label, *state, &node, &in_types));
  // constants_ may grow below (outputs get ids), which would invalidate
  // the pointers: reserve the ids first.
  for (const std::string& name : n.output()) {
    if (!name.empty()) ValueId(name);
  }
  state->Grow(value_names_.size());
  std::vector<const Tensor*> in_consts = ConstantInputs(node.inputs);
  int32_t half_in = 0;  // The 16-bit type of its inputs, when known.
  std::unique_ptr<HalfAdapter> adapter = MaybeHalfAdapter(
      n.op_type(), node.inputs, &in_types, &in_consts, &half_in);
  NodeInfo info(n, opset, in_types, in_consts);
  info.set_label(label);
  std::vector<int> in_ranks;
  for (int id : node.inputs) {
    in_ranks.push_back(id < 0 ? -1 : state->ranks[id]);
  }
  info.set_input_ranks(std::move(in_ranks));
  // The outer values the node's bodies read become its implicit inputs,
  // so they live until the node has run.
  std::vector<int> implicit;
  if (HasSubgraph(n)) {
    QUANTD_ASSIGN_OR_RETURN(std::vector<ScopeValue> body_scope,
                            BodyScope(n, label, *state, &implicit));
    info.set_scope(std::move(body_scope));
  }
  QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, factory(info));
  QUANTD_RETURN_IF_ERROR(info.Finish());
  std::vector<int32_t> out_types = info.output_types();
  if (adapter != nullptr) {
    adapter->Finish(std::move(kernel),
                    NarrowTargets(n, declared, half_in, &out_types));
    node.kernel = std::move(adapter);
  } else {
    node.kernel = std::move(kernel);
  }
  node.inputs.insert(node.inputs.end(), implicit.begin(), implicit.end());
  QUANTD_RETURN_IF_ERROR(BindNodeOutputs(n, label, out_types, state, &node));
  // A Constant's value is known now: later kernels may look at it.
  if (n.op_type() == "Constant" && node.outputs.size() == 1) {
    std::vector<Tensor> out(1);
    KernelContext ctx{{}, &out, nullptr};
    absl::Status cs = node.kernel->Compute(ctx);
    if (!cs.ok()) return WithNode(cs, label, n.op_type());
    constants_[node.outputs[0]] = std::move(out[0]);
    state->ranks[node.outputs[0]] = constants_[node.outputs[0]].rank();
  }
  return node;
}

absl::Status Executor::BindNodeInputs(const onnx::NodeProto& n,
                                      const std::string& label,
                                      const BuildState& state, Node* node,
                                      std::vector<int32_t>* types) const {
  for (const std::string& name : n.input()) {
    if (name.empty()) {
      node->inputs.push_back(-1);
      types->push_back(0);
      continue;
    }
    auto it = value_ids_.find(name);
    if (it == value_ids_.end() || !state.defined[it->second]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", label, "' (op ", n.op_type(), ") reads '", name,
          "', which no earlier node, initializer or graph input defines"));
    }
    if (auto nt = state.non_tensor.find(it->second);
        nt != state.non_tensor.end()) {
      return absl::UnimplementedError(
          absl::StrCat("node '", label, "' (op ", n.op_type(), ") reads '",
                       name, "', which is ", nt->second,
                       "; only tensor values are supported by the executor"));
    }
    node->inputs.push_back(it->second);
    types->push_back(state.types[it->second]);
  }
  return absl::OkStatus();
}

std::vector<const Tensor*> Executor::ConstantInputs(
    const std::vector<int>& ids) const {
  std::vector<const Tensor*> out;
  for (int id : ids) {
    if (id < 0 || constants_[id].empty() || IsInput(id)) {
      out.push_back(nullptr);
    } else {
      out.push_back(&constants_[id]);
    }
  }
  return out;
}

absl::StatusOr<std::vector<ScopeValue>> Executor::BodyScope(
    const onnx::NodeProto& n, const std::string& label, const BuildState& state,
    std::vector<int>* implicit) const {
  std::vector<ScopeValue> scope;
  for (const std::string& name : BodyFreeNames(n)) {
    auto it = value_ids_.find(name);
    if (it == value_ids_.end() || !state.defined[it->second]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", label, "' (op ", n.op_type(), "): a subgraph reads '", name,
          "', which no earlier node, initializer or graph input (of this "
          "or an enclosing graph) defines"));
    }
    const int id = it->second;
    if (auto nt = state.non_tensor.find(id); nt != state.non_tensor.end()) {
      return absl::UnimplementedError(absl::StrCat(
          "node '", label, "' (op ", n.op_type(), "): a subgraph reads '", name,
          "', which is ", nt->second,
          "; only tensor values are supported by the executor"));
    }
    ScopeValue sv;
    sv.name = name;
    sv.type = state.types[id];
    sv.rank = state.ranks[id];
    if (!constants_[id].empty() && !IsInput(id)) {
      sv.constant = &constants_[id];
    } else {
      implicit->push_back(id);
    }
    scope.push_back(std::move(sv));
  }
  return scope;
}

absl::Status Executor::BindNodeOutputs(const onnx::NodeProto& n,
                                       const std::string& label,
                                       const std::vector<int32_t>& out_types,
                                       BuildState* state, Node* node) {
  for (int o = 0; o < n.output_size(); ++o) {
    if (n.output(o).empty()) {
      node->outputs.push_back(-1);
      continue;
    }
    const int id = value_ids_.at(n.output(o));
    if (state->defined[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", label, "' (op ", n.op_type(), ") writes '",
                       n.output(o), "', which is already defined"));
    }
    state->defined[id] = true;
    state->types[id] = out_types[o];
    node->outputs.push_back(id);
  }
  return absl::OkStatus();
}

bool Executor::IsInput(int id) const {
  for (const Input& in : inputs_) {
    if (in.value == id) return true;
  }
  return false;
}

// Non-tensor graph inputs a node reads are refused by that node; these are
// the ones no node reads.
absl::Status Executor::RefuseNonTensorInputs(const BuildState& state) const {
  if (state.non_tensor.empty()) return absl::OkStatus();
  const auto& [id, kind] = *state.non_tensor.begin();
  return absl::UnimplementedError(
      absl::StrCat("graph input '", value_names_[id], "' is ", kind,
                   ", not a tensor; only tensor values are supported"));
}

absl::Status Executor::BindOutputs(const onnx::GraphProto& g,
                                   const BuildState& state) {
  for (const onnx::ValueInfoProto& vi : g.output()) {
    auto it = value_ids_.find(vi.name());
    if (it == value_ids_.end() || !state.defined[it->second]) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", vi.name(), "' is never defined"));
    }
    output_names_.push_back(vi.name());
    output_values_.push_back(it->second);
    output_types_.push_back(state.types[it->second]);
  }
  return absl::OkStatus();
}

// Frees every run-time value right after its last reader.
void Executor::PlanReleases() {
  std::vector<bool> is_output(value_names_.size(), false);
  for (int v : output_values_) is_output[v] = true;
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
  for (const auto& [index, v] : implicit_) plan_release(v, -1);
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    for (int v : nodes_[i].outputs) {
      if (v >= 0) plan_release(v, i);
    }
  }
}

absl::Status Executor::CheckInput(size_t i, const Tensor& t,
                                  bool check_dims) const {
  const Input& in = inputs_[i];
  const std::string& name = input_names_[i];
  if (in.type != 0 && t.dtype() != in.type) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "' is ", DataTypeName(t.dtype()),
                     ", the model wants ", DataTypeName(in.type)));
  }
  bool shape_ok = !in.has_shape || in.dims.size() == t.shape().size();
  for (size_t d = 0;
       check_dims && shape_ok && in.has_shape && d < in.dims.size(); ++d) {
    shape_ok = in.dims[d] < 0 || in.dims[d] == t.dim(d);
  }
  if (!shape_ok) {
    std::vector<int64_t> want = in.dims;
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "' has shape ", ShapeString(t.shape()),
                     ", the model wants ", ShapeString(want), " (-1: any)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Executor::Run(
    const absl::flat_hash_map<std::string, Tensor>& feeds,
    const RunOptions& options) const {
  // One parallel region per node, back to back: the pool's workers stay
  // awake between them (ThreadPool::SpinScope).
  ThreadPool::SpinScope spin(options.pool);
  if (!implicit_.empty()) {
    return absl::FailedPreconditionError(
        "this graph reads outer-scope values; run it through its owner");
  }
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
    absl::Status s = CheckInput(i, it->second);
    if (!s.ok()) return s;
    values[in.value] = it->second;
  }

  std::vector<int> extra;
  for (const std::string& name : options.extra_outputs) {
    auto it = value_ids_.find(name);
    if (it == value_ids_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "extra output '", name, "' is not a value of the model"));
    }
    extra.push_back(it->second);
  }
  return Execute(std::move(values), options, extra);
}

absl::StatusOr<std::vector<Tensor>> Executor::RunBody(
    absl::Span<const Tensor* const> inputs,
    absl::Span<const Tensor* const> implicit, const RunOptions& options) const {
  if (inputs.size() != inputs_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body takes ", inputs_.size(), " inputs, got ", inputs.size()));
  }
  std::vector<Tensor> values(value_names_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs[i] == nullptr || inputs[i]->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("body input '", input_names_[i], "' has no value"));
    }
    // Element type and rank only: a body's declared dims describe at best
    // the first iteration (torch declares a loop-carried list's initial
    // [0, ...]; it grows), and ONNX Runtime does not hold values to them.
    absl::Status s = CheckInput(i, *inputs[i], /*check_dims=*/false);
    if (!s.ok())
      return absl::InvalidArgumentError(absl::StrCat("body ", s.message()));
    values[inputs_[i].value] = *inputs[i];
  }
  for (const auto& [index, v] : implicit_) {
    if (index >= static_cast<int>(implicit.size()) ||
        implicit[index]->empty()) {
      return absl::InternalError(absl::StrCat("outer value '", value_names_[v],
                                              "' was not passed to the body"));
    }
    values[v] = *implicit[index];
  }
  return Execute(std::move(values), options, {});
}

absl::StatusOr<std::vector<Tensor>> Executor::Execute(
    std::vector<Tensor> values, const RunOptions& options,
    const std::vector<int>& extra) const {
  const ScopedTensorLimit limit(options.max_tensor_elements);
  // Extra outputs must survive to the end.
  std::vector<bool> keep;
  if (!extra.empty()) {
    keep.assign(value_names_.size(), false);
    for (int v : extra) keep[v] = true;
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
    KernelContext ctx{in_ptrs, &outs, options.pool, &options};
    absl::Status s;
    try {
      s = node.kernel->Compute(ctx);
    } catch (const TensorLimitExceeded& e) {
      s = absl::ResourceExhaustedError(absl::StrCat(
          "a tensor of ", e.elements(), " elements, more than the ", e.limit(),
          " one may hold"));
    }
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
