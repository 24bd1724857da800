#include "core/passes/opset_upgrade.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/inference.h"
#include "core/graph/model_io.h"
#include "core/graph/prepare.h"
#include "core/graph/unique_names.h"
#include "core/numerics/int4.h"
#include "onnx/version_converter/convert.h"

namespace quantd::passes {
namespace {

// IR version 7 came with opset 13; newer opsets in an older IR version are
// refused by the checker.
int64_t MinIrVersionFor(int64_t opset) { return opset >= 13 ? 7 : 6; }

// Moves every initializer's values out of `graph`, leaving name, type and
// dims, so a copy of the graph costs little.
std::vector<onnx::TensorProto> StashInitializerData(onnx::GraphProto* graph) {
  std::vector<onnx::TensorProto> stash(graph->initializer_size());
  for (int i = 0; i < graph->initializer_size(); ++i) {
    onnx::TensorProto* t = graph->mutable_initializer(i);
    stash[i].Swap(t);
    t->set_name(stash[i].name());
    t->set_data_type(stash[i].data_type());
    *t->mutable_dims() = stash[i].dims();
  }
  return stash;
}

// Puts stashed values back into the initializers of the same name (the
// converter may have added or dropped some; new ones keep their values).
void RestoreInitializerData(std::vector<onnx::TensorProto> stash,
                            onnx::GraphProto* graph) {
  absl::flat_hash_map<std::string, onnx::TensorProto*> by_name;
  for (auto& t : *graph->mutable_initializer()) by_name[t.name()] = &t;
  for (auto& saved : stash) {
    auto it = by_name.find(saved.name());
    if (it != by_name.end()) it->second->Swap(&saved);
  }
}

void EraseAttr(onnx::NodeProto* node, const std::string& name) {
  auto* attrs = node->mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i) {
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
  }
}

void SetStringAttr(onnx::NodeProto* node, const std::string& name,
                   const std::string& value) {
  EraseAttr(node, name);
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

// Ops whose `axes` attribute became an input in opset 18 (ReduceSum did so
// in 13, so a model at 13 already has it as an input).
const absl::flat_hash_set<std::string>& ReduceOpsAxesToInput() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "ReduceL1",   "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
      "ReduceMean", "ReduceMin", "ReduceProd",   "ReduceSumSquare"};
  return *ops;
}

// Every tensor name some node reads (in any graph or function) or a graph
// returns: an output in this set cannot be dropped.
void CollectReadNames(const onnx::GraphProto& graph,
                      absl::flat_hash_set<std::string>* read) {
  for (const auto& v : graph.output()) read->insert(v.name());
  for (const auto& node : graph.node()) {
    for (const auto& in : node.input()) read->insert(in);
    for (const auto& a : node.attribute()) {
      if (a.has_g()) CollectReadNames(a.g(), read);
      for (const auto& g : a.graphs()) CollectReadNames(g, read);
    }
  }
}

// Checks (apply = false) or rewrites (apply = true) one node list whose
// default-domain opset is `from`, recursing into subgraphs. Checking never
// changes anything, so a refusal leaves the model as it was.
class Raiser {
 public:
  Raiser(const absl::flat_hash_set<std::string>& read,
         graph::UniqueNames* names)
      : read_(read), names_(names) {}

  absl::Status Visit(google::protobuf::RepeatedPtrField<onnx::NodeProto>* nodes,
                     int64_t from, const std::string& where, bool apply) {
    for (int i = 0; i < nodes->size(); ++i) {
      onnx::NodeProto* node = nodes->Mutable(i);
      for (auto& a : *node->mutable_attribute()) {
        const std::string inner = absl::StrCat(where, " > subgraph '", a.name(),
                                               "' of ", Describe(*node));
        if (a.has_g()) {
          QUANTD_RETURN_IF_ERROR(
              Visit(a.mutable_g()->mutable_node(), from, inner, apply));
        }
        for (auto& g : *a.mutable_graphs()) {
          QUANTD_RETURN_IF_ERROR(Visit(g.mutable_node(), from, inner, apply));
        }
      }
      if (!IsDefaultDomain(node->domain())) continue;
      QUANTD_ASSIGN_OR_RETURN(bool needs_constant,
                              CheckNode(*node, from, where));
      if (apply) Rewrite(node, from, needs_constant, nodes, &i);
    }
    return absl::OkStatus();
  }

  const std::vector<std::string>& rewrites() const { return rewrites_; }

 private:
  static std::string Describe(const onnx::NodeProto& node) {
    return absl::StrCat(node.op_type(), " '", node.name(), "'");
  }

  absl::Status Refuse(const onnx::NodeProto& node, const std::string& where,
                      int64_t from, int64_t since, const std::string& why) {
    return absl::UnimplementedError(absl::StrCat(
        "cannot raise the model from opset ", from, " to ", kInt4Opset,
        " (needed for INT4/UINT4 QuantizeLinear/DequantizeLinear): node ",
        Describe(node), " in ", where, ": ", node.op_type(),
        " changed in opset ", since, ": ", why,
        "; quantd does not rewrite this case (use PRECISION_W8A8 for this "
        "model, or export it at opset 21)"));
  }

  // OK(true) when the node needs an axes Constant (Reduce* with `axes`).
  absl::StatusOr<bool> CheckNode(const onnx::NodeProto& node, int64_t from,
                                 const std::string& where) {
    const std::string& op = node.op_type();
    if (op == "BatchNormalization" && from < 14) {
      for (int k = 1; k < node.output_size(); ++k) {
        if (!node.output(k).empty() && read_.contains(node.output(k))) {
          return Refuse(node, where, from, 14,
                        absl::StrCat("its output ", k, " ('", node.output(k),
                                     "', a training statistic) is read, and "
                                     "opset 14 outputs those only in "
                                     "training_mode"));
        }
      }
    }
    if (op == "Resize" && from < 18) {
      const onnx::AttributeProto* mode =
          graph::FindAttribute(node, "coordinate_transformation_mode");
      if (mode != nullptr && mode->s() == "tf_half_pixel_for_nn") {
        return Refuse(node, where, from, 18,
                      "coordinate_transformation_mode tf_half_pixel_for_nn "
                      "was removed");
      }
    }
    if (op == "DFT" && from < 20) {
      return Refuse(node, where, from, 20,
                    "`axis` moved from an attribute to an input whose default "
                    "differs");
    }
    if (op == "GroupNormalization" && from < 21) {
      return Refuse(node, where, from, 21,
                    "scale and bias went from one value per group to one per "
                    "channel");
    }
    return from < 18 && ReduceOpsAxesToInput().contains(op) &&
           graph::FindAttribute(node, "axes") != nullptr;
  }

  void Rewrite(onnx::NodeProto* node, int64_t from, bool needs_constant,
               google::protobuf::RepeatedPtrField<onnx::NodeProto>* nodes,
               int* index) {
    const std::string& op = node->op_type();
    if (op == "BatchNormalization" && from < 14 && node->output_size() > 1) {
      node->mutable_output()->DeleteSubrange(1, node->output_size() - 1);
      rewrites_.push_back(
          absl::StrCat(Describe(*node), ": unread training outputs dropped"));
    }
    if (op == "RoiAlign" && from < 16 &&
        graph::FindAttribute(*node, "coordinate_transformation_mode") ==
            nullptr) {
      SetStringAttr(node, "coordinate_transformation_mode",
                    "output_half_pixel");
      rewrites_.push_back(absl::StrCat(
          Describe(*node),
          ": coordinate_transformation_mode = output_half_pixel (the "
          "behaviour before opset 16)"));
    }
    if (op == "Split" && from < 18 &&
        (node->input_size() < 2 || node->input(1).empty()) &&
        graph::FindAttribute(*node, "num_outputs") == nullptr) {
      graph::SetIntAttribute(node, "num_outputs", node->output_size());
      rewrites_.push_back(absl::StrCat(Describe(*node),
                                       ": num_outputs = ", node->output_size(),
                                       " (even split, as before)"));
    }
    if (op == "GridSample" && from < 20) {
      const onnx::AttributeProto* mode = graph::FindAttribute(*node, "mode");
      if (mode != nullptr &&
          (mode->s() == "bilinear" || mode->s() == "bicubic")) {
        const std::string renamed =
            mode->s() == "bilinear" ? "linear" : "cubic";
        rewrites_.push_back(absl::StrCat(Describe(*node), ": mode ", mode->s(),
                                         " -> ", renamed));
        SetStringAttr(node, "mode", renamed);
      }
    }
    if (needs_constant) {
      const onnx::AttributeProto* axes = graph::FindAttribute(*node, "axes");
      onnx::TensorProto t;
      t.set_data_type(onnx::TensorProto::INT64);
      t.add_dims(axes->ints_size());
      for (int64_t a : axes->ints()) t.add_int64_data(a);
      const std::string name = names_->Make(node->name() + "_axes");
      t.set_name(name);
      onnx::NodeProto constant = graph::MakeNode(
          "Constant", names_->Make(node->name() + "_axes_Constant"), {},
          {name});
      onnx::AttributeProto* value = constant.add_attribute();
      value->set_name("value");
      value->set_type(onnx::AttributeProto::TENSOR);
      *value->mutable_t() = std::move(t);
      EraseAttr(node, "axes");
      while (node->input_size() < 1) node->add_input("");
      if (node->input_size() < 2) node->add_input(name);
      rewrites_.push_back(
          absl::StrCat(Describe(*node), ": axes attribute -> input"));
      // Insert the Constant right before its reader (keeps topological
      // order); `node` moves one slot on.
      nodes->Add(std::move(constant));
      for (int j = nodes->size() - 1; j > *index; --j) {
        nodes->SwapElements(j, j - 1);
      }
      ++*index;
    }
  }

  const absl::flat_hash_set<std::string>& read_;
  graph::UniqueNames* names_;
  std::vector<std::string> rewrites_;
};

int64_t FunctionDefaultOpset(const onnx::FunctionProto& f) {
  for (const auto& o : f.opset_import()) {
    if (IsDefaultDomain(o.domain())) return o.version();
  }
  return 0;
}

// Softmax, LogSoftmax and Hardmax before 13 coerce the input to 2-D at
// `axis`; 13 normalises one axis. The converter rewrites them only when it
// knows the input's rank, and then reshapes back to static dims (wrong with
// two symbolic dims). Ahead of it: an axis proven last (rank from shape
// inference) becomes -1, which the converter maps 1:1; any other axis
// becomes Flatten(axis) -> op(axis = -1) -> Reshape(to Shape(x)), exact
// for every shape. Returns how many nodes were rewritten.
int64_t PrepareSoftmaxForConversion(
    const absl::flat_hash_map<std::string, onnx::TypeProto>& types,
    int64_t opset, onnx::GraphProto* graph) {
  int64_t rewritten = 0;
  graph::UniqueNames names(*graph);
  for (int i = 0; i < graph->node_size(); ++i) {
    onnx::NodeProto* node = graph->mutable_node(i);
    const std::string op = node->op_type();
    if (!IsDefaultDomain(node->domain()) ||
        (op != "Softmax" && op != "LogSoftmax" && op != "Hardmax") ||
        node->input_size() != 1 || node->output_size() != 1) {
      continue;
    }
    int64_t axis = graph::IntAttribute(*node, "axis", 1);
    if (axis == -1) continue;
    int64_t rank = -1;
    auto it = types.find(node->input(0));
    if (it != types.end() && it->second.has_tensor_type() &&
        it->second.tensor_type().has_shape()) {
      rank = it->second.tensor_type().shape().dim_size();
    }
    if (rank > 0 && axis < 0) axis += rank;
    if (rank > 0 && axis == rank - 1) {
      EraseAttr(node, "axis");
      graph::SetIntAttribute(node, "axis", -1);
      continue;
    }
    // Flatten takes a negative axis from opset 11 on.
    if (axis < 0 && opset < 11) continue;
    const std::string x = node->input(0);
    const std::string y = node->output(0);
    const std::string base = node->name().empty() ? y : node->name();
    const std::string flat = names.Make(x + "_flat2d");
    const std::string flat_y = names.Make(y + "_2d");
    const std::string shape = names.Make(x + "_shape");
    onnx::NodeProto flatten =
        graph::MakeNode("Flatten", names.Make(base + "/Flatten"), {x}, {flat});
    graph::SetIntAttribute(&flatten, "axis", axis);
    onnx::NodeProto shape_node =
        graph::MakeNode("Shape", names.Make(base + "/Shape"), {x}, {shape});
    onnx::NodeProto reshape = graph::MakeNode(
        "Reshape", names.Make(base + "/Reshape"), {flat_y, shape}, {y});
    node->set_input(0, flat);
    node->set_output(0, flat_y);
    EraseAttr(node, "axis");
    graph::SetIntAttribute(node, "axis", -1);
    graph::InsertNode(std::move(reshape), i + 1, graph);
    graph::InsertNode(std::move(shape_node), i, graph);
    graph::InsertNode(std::move(flatten), i, graph);
    i += 3;
    ++rewritten;
  }
  return rewritten;
}

}  // namespace

absl::StatusOr<std::string> RaiseOpsetForInt4(onnx::ModelProto* model) {
  const int64_t from = graph::DefaultOpset(*model);
  if (from >= kInt4Opset) {
    if (model->ir_version() < numerics::kInt4MinIrVersion) {
      model->set_ir_version(numerics::kInt4MinIrVersion);
    }
    return std::string();
  }
  if (from < kPerChannelOpset) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot raise the model from opset ", from, " to ", kInt4Opset,
        ": only opsets >= ", kPerChannelOpset, " are raised (convert first)"));
  }
  absl::flat_hash_set<std::string> read;
  CollectReadNames(model->graph(), &read);
  for (const auto& f : model->functions()) {
    for (const auto& o : f.output()) read.insert(o);
    for (const auto& n : f.node()) {
      for (const auto& in : n.input()) read.insert(in);
    }
  }
  graph::UniqueNames names(model->graph());
  Raiser raiser(read, &names);
  // Check everything first, then rewrite: a refusal changes nothing.
  for (bool apply : {false, true}) {
    QUANTD_RETURN_IF_ERROR(raiser.Visit(model->mutable_graph()->mutable_node(),
                                        from, "the main graph", apply));
    for (auto& f : *model->mutable_functions()) {
      const int64_t f_from = FunctionDefaultOpset(f);
      if (f_from == 0 || f_from >= kInt4Opset) continue;
      QUANTD_RETURN_IF_ERROR(
          raiser.Visit(f.mutable_node(), f_from,
                       absl::StrCat("local function '", f.name(), "'"), apply));
    }
  }
  // ONNX wants one version per domain across the model and its functions.
  for (auto& f : *model->mutable_functions()) {
    for (auto& o : *f.mutable_opset_import()) {
      if (IsDefaultDomain(o.domain())) o.set_version(kInt4Opset);
    }
  }
  graph::SetDefaultOpset(model, kInt4Opset);
  if (model->ir_version() < numerics::kInt4MinIrVersion) {
    model->set_ir_version(numerics::kInt4MinIrVersion);
  }
  std::string note = absl::StrCat(
      "opset raised from ", from, " to ", kInt4Opset,
      " (INT4/UINT4 QuantizeLinear/DequantizeLinear) after checking every "
      "node against the operator changes in between");
  if (!raiser.rewrites().empty()) {
    absl::StrAppend(&note,
                    "; rewritten: ", absl::StrJoin(raiser.rewrites(), "; "));
  }
  return note;
}

namespace {

// The first node of `graph` or its bodies outside the default domain. ONNX
// 1.12's converter finds adapters by op name alone: a custom-domain node
// named like an ONNX op gets that op's adapter, which reads inputs and
// attributes onnx.checker never checked for it (segfaults: a Scatter with
// no inputs, an Upsample whose scales is an int), and a node named
// ConstantFill loops forever writing a warning.
const onnx::NodeProto* FirstForeignNode(const onnx::GraphProto& graph) {
  for (const onnx::NodeProto& node : graph.node()) {
    if (!IsDefaultDomain(node)) return &node;
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.has_g()) {
        if (const onnx::NodeProto* n = FirstForeignNode(a.g())) return n;
      }
      for (const onnx::GraphProto& body : a.graphs()) {
        if (const onnx::NodeProto* n = FirstForeignNode(body)) return n;
      }
    }
  }
  return nullptr;
}

// Empty when every graph input and output of `after` declares the tensor
// type `before` does (element type, rank, and the dims both give); else
// what changed. Some adapters move the interface: Scan 8 -> 9 drops the
// batch axis of the state inputs, so the upgraded model would take other
// tensors than the one the user sent.
std::string ChangedInterface(const onnx::GraphProto& before,
                             const onnx::GraphProto& after) {
  absl::flat_hash_map<std::string, const onnx::TypeProto*> declared;
  for (const auto* list : {&before.input(), &before.output()}) {
    for (const auto& v : *list) declared.emplace(v.name(), &v.type());
  }
  auto shape = [](const onnx::TypeProto& t) {
    std::string out = "[";
    for (const auto& d : t.tensor_type().shape().dim()) {
      if (out.size() > 1) out += ",";
      out += d.has_dim_value() ? std::to_string(d.dim_value()) : "?";
    }
    return out + "]";
  };
  for (const auto* list : {&after.input(), &after.output()}) {
    for (const auto& v : *list) {
      auto it = declared.find(v.name());
      if (it == declared.end()) continue;
      const onnx::TypeProto& was = *it->second;
      const onnx::TypeProto& now = v.type();
      if (!was.has_tensor_type() || !now.has_tensor_type()) continue;
      bool same =
          was.tensor_type().elem_type() == now.tensor_type().elem_type();
      if (same && was.tensor_type().has_shape() &&
          now.tensor_type().has_shape()) {
        const auto& a = was.tensor_type().shape().dim();
        const auto& b = now.tensor_type().shape().dim();
        same = a.size() == b.size();
        for (int i = 0; same && i < a.size(); ++i) {
          same = !a[i].has_dim_value() || !b[i].has_dim_value() ||
                 a[i].dim_value() == b[i].dim_value();
        }
      }
      if (!same) {
        return absl::StrCat(
            "the converter changed graph ",
            list == &after.input() ? "input" : "output", " '", v.name(),
            "' from ", shape(was), " to ", shape(now),
            ", so the upgraded model would not take the original's tensors");
      }
    }
  }
  return "";
}

}  // namespace

absl::Status ConvertOpset(onnx::ModelProto* model, int64_t target) {
  const int64_t from = graph::DefaultOpset(*model);
  if (const onnx::NodeProto* n = FirstForeignNode(model->graph())) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", n->name(), "' (op ", n->op_type(), ") is in domain '",
        n->domain(),
        "', and the ONNX version converter upgrades default-domain models "
        "only"));
  }
  // Adapters read input ranks (e.g. Softmax 12 -> 13) from the values'
  // declared shapes: annotate what ONNX shape inference knows, and put the
  // model's own value_info back afterwards.
  const absl::flat_hash_map<std::string, onnx::TypeProto> types =
      graph::InferValueTypes(*model);
  // Values out of the way first: every copy below is then cheap.
  std::vector<onnx::TensorProto> stash =
      StashInitializerData(model->mutable_graph());
  // Kept to undo on failure. Only the graph changes before the converter
  // runs, and it is restored in place: callers hold pointers to it.
  onnx::GraphProto original_graph;
  const bool rewrite_softmax = from < 13 && target >= 13;
  if (rewrite_softmax) original_graph = model->graph();
  const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> value_info =
      model->graph().value_info();
  if (rewrite_softmax) {
    PrepareSoftmaxForConversion(types, from, model->mutable_graph());
  }
  {
    absl::flat_hash_set<std::string> declared;
    for (const auto& v : model->graph().input()) declared.insert(v.name());
    for (const auto& v : model->graph().output()) declared.insert(v.name());
    for (const auto& v : value_info) declared.insert(v.name());
    for (const auto& node : model->graph().node()) {
      for (const auto& o : node.output()) {
        auto it = types.find(o);
        if (o.empty() || declared.contains(o) || it == types.end() ||
            !it->second.has_tensor_type() ||
            !it->second.tensor_type().has_shape()) {
          continue;
        }
        onnx::ValueInfoProto* v = model->mutable_graph()->add_value_info();
        v->set_name(o);
        *v->mutable_type() = it->second;
      }
    }
  }
  onnx::ModelProto converted;
  std::string error;
  // The converter runs ONNX shape inference on the model itself.
  graph::GuardOnnxInference();
  try {
    converted = onnx::version_conversion::ConvertVersion(
        *model, static_cast<int>(target));
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (error.empty())
    error = ChangedInterface(model->graph(), converted.graph());
  if (!error.empty()) {
    if (rewrite_softmax) {
      model->mutable_graph()->Swap(&original_graph);
    } else {
      *model->mutable_graph()->mutable_value_info() = value_info;
    }
    RestoreInitializerData(std::move(stash), model->mutable_graph());
    return absl::InvalidArgumentError(error);
  }
  // libonnx 1.12's converter writes graph inputs and outputs back without a
  // type when it has no tensor type (sequences, optionals, maps): the
  // originals' types go back where one is missing.
  absl::flat_hash_map<std::string, onnx::TypeProto> io_types;
  for (const auto* list : {&model->graph().input(), &model->graph().output()}) {
    for (const auto& v : *list) {
      if (v.has_type()) io_types.emplace(v.name(), v.type());
    }
  }
  model->Swap(&converted);
  RestoreInitializerData(std::move(stash), model->mutable_graph());
  for (auto* list : {model->mutable_graph()->mutable_input(),
                     model->mutable_graph()->mutable_output()}) {
    for (auto& v : *list) {
      auto it = io_types.find(v.name());
      if (!v.has_type() && it != io_types.end()) *v.mutable_type() = it->second;
    }
  }
  {
    absl::flat_hash_set<std::string> defined;
    for (const auto& node : model->graph().node()) {
      for (const auto& o : node.output()) defined.insert(o);
    }
    auto* vi = model->mutable_graph()->mutable_value_info();
    vi->Clear();
    for (const auto& v : value_info) {
      if (defined.contains(v.name())) *vi->Add() = v;
    }
  }
  if (model->ir_version() < MinIrVersionFor(target)) {
    model->set_ir_version(MinIrVersionFor(target));
  }
  return absl::OkStatus();
}

absl::StatusOr<OpsetOutcome> EnsureOpset(onnx::ModelProto* model,
                                         int64_t needed) {
  OpsetOutcome out;
  out.from = graph::DefaultOpset(*model);
  out.to = out.from;
  if (out.from >= needed) {
    if (needed >= kInt4Opset &&
        model->ir_version() < numerics::kInt4MinIrVersion) {
      model->set_ir_version(numerics::kInt4MinIrVersion);
    }
    return out;
  }
  const bool int4 = needed >= kInt4Opset;
  // The converter (ONNX 1.12) goes no further than 13 for our purposes.
  const int64_t convert_to = int4 ? kPerChannelOpset : needed;
  std::string converter_note;
  if (out.from < convert_to) {
    absl::Status converted = ConvertOpset(model, convert_to);
    if (!converted.ok()) {
      if (out.from >= kDynamicQuantizeOpset && !int4) {
        out.mode = OpsetOutcome::kPerTensorFallback;
        out.note = absl::StrCat(
            "per-tensor scales: per-channel DequantizeLinear needs opset 13, "
            "the model has ",
            out.from, " and the ONNX version converter could not upgrade it (",
            converted.message(), ")");
        return out;
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "the model's default opset is ", out.from, "; ",
          int4 ? "4-bit precisions need opset 21 (INT4/UINT4 "
                 "QuantizeLinear/DequantizeLinear), reached through 13,"
               : "DYNAMIC_RANGE needs opset >= 11 (DynamicQuantizeLinear),",
          " and the ONNX version converter could not upgrade it to ",
          convert_to, ": ", converted.message(),
          ". Export the model with opset 13 or newer"));
    }
    converter_note = absl::StrCat(
        "opset upgraded from ", out.from, " to ", graph::DefaultOpset(*model),
        " with the ONNX version converter (",
        int4 ? "on the way to 21"
             : (needed == kPerChannelOpset
                    ? "per-channel DequantizeLinear needs 13"
                    : "DynamicQuantizeLinear needs 11"),
        ")");
  }
  out.mode = OpsetOutcome::kUpgraded;
  if (int4) {
    QUANTD_ASSIGN_OR_RETURN(std::string raised, RaiseOpsetForInt4(model));
    out.note = converter_note.empty()
                   ? raised
                   : absl::StrCat(converter_note, "; ", raised);
  } else {
    out.note = converter_note;
  }
  out.to = graph::DefaultOpset(*model);
  return out;
}

}  // namespace quantd::passes
