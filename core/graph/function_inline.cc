#include "core/graph/function_inline.h"

#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/unique_names.h"

namespace quantd::graph {
namespace {

// ONNX spells the default domain both ways.
std::string NormalizedDomain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

using FunctionKey = std::pair<std::string, std::string>;  // domain, name

// Deep enough for any real exporter; ONNX forbids recursion, so a deeper
// chain is a cycle.
constexpr int kMaxDepth = 32;

class Inliner {
 public:
  explicit Inliner(onnx::ModelProto* model)
      : model_(model), names_(model->graph()) {}

  absl::StatusOr<InlinedFunctions> Run() {
    for (const onnx::FunctionProto& f : model_->functions()) {
      result_.functions.push_back(f.name());
      const FunctionKey key{NormalizedDomain(f.domain()), f.name()};
      if (!functions_.emplace(key, &f).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("two local functions are named '", f.name(),
                         "' in domain '", f.domain(), "'"));
      }
    }
    if (functions_.empty()) return std::move(result_);
    for (const auto& op : model_->opset_import()) {
      opsets_[NormalizedDomain(op.domain())] = op.version();
    }
    QUANTD_RETURN_IF_ERROR(InlineGraph(model_->mutable_graph(), 0));
    model_->clear_functions();
    for (const auto& [domain, version] : added_opsets_) {
      onnx::OperatorSetIdProto* op = model_->add_opset_import();
      op->set_domain(domain);
      op->set_version(version);
    }
    return std::move(result_);
  }

 private:
  // What renaming one call's body needs.
  struct Context {
    const onnx::FunctionProto& f;
    const onnx::NodeProto& call;
    const std::string& prefix;
    const absl::flat_hash_map<std::string, std::string>& rename;
    const absl::flat_hash_map<std::string, const onnx::AttributeProto*>&
        call_attrs;
  };

  const onnx::FunctionProto* Callee(const onnx::NodeProto& node) const {
    auto it =
        functions_.find({NormalizedDomain(node.domain()), node.op_type()});
    return it == functions_.end() ? nullptr : it->second;
  }

  // Inlines the calls among `graph`'s nodes (and in their subgraphs).
  absl::Status InlineGraph(onnx::GraphProto* graph, int depth) {
    bool any_call = false;
    for (const onnx::NodeProto& node : graph->node()) {
      if (Callee(node) != nullptr) any_call = true;
    }
    if (!any_call) return InlineSubgraphs(graph->mutable_node(), depth);
    google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
    for (onnx::NodeProto& node : *graph->mutable_node()) {
      QUANTD_RETURN_IF_ERROR(Emit(std::move(node), depth, &out));
    }
    graph->mutable_node()->Swap(&out);
    return absl::OkStatus();
  }

  absl::Status InlineSubgraphs(
      google::protobuf::RepeatedPtrField<onnx::NodeProto>* nodes, int depth) {
    for (onnx::NodeProto& node : *nodes) {
      QUANTD_RETURN_IF_ERROR(InlineNodeSubgraphs(&node, depth));
    }
    return absl::OkStatus();
  }

  absl::Status InlineNodeSubgraphs(onnx::NodeProto* node, int depth) {
    for (onnx::AttributeProto& a : *node->mutable_attribute()) {
      if (a.has_g()) {
        QUANTD_RETURN_IF_ERROR(InlineGraph(a.mutable_g(), depth));
      }
      for (onnx::GraphProto& g : *a.mutable_graphs()) {
        QUANTD_RETURN_IF_ERROR(InlineGraph(&g, depth));
      }
    }
    return absl::OkStatus();
  }

  // Appends `node` to `out`, or the expansion of the call it is.
  absl::Status Emit(onnx::NodeProto node, int depth,
                    google::protobuf::RepeatedPtrField<onnx::NodeProto>* out) {
    const onnx::FunctionProto* f = Callee(node);
    if (f == nullptr) {
      QUANTD_RETURN_IF_ERROR(InlineNodeSubgraphs(&node, depth));
      *out->Add() = std::move(node);
      return absl::OkStatus();
    }
    if (depth >= kMaxDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("local function calls are nested more than ", kMaxDepth,
                       " deep at node '", node.name(), "' calling '", f->name(),
                       "' (ONNX forbids recursive functions)"));
    }
    QUANTD_RETURN_IF_ERROR(CheckOpsets(*f));
    result_.calls.push_back(node.name());
    std::vector<onnx::NodeProto> body;
    QUANTD_RETURN_IF_ERROR(Expand(node, *f, &body));
    for (onnx::NodeProto& inner : body) {
      QUANTD_RETURN_IF_ERROR(Emit(std::move(inner), depth + 1, out));
    }
    return absl::OkStatus();
  }

  absl::Status CheckOpsets(const onnx::FunctionProto& f) {
    if (!f.unknown_fields().empty()) {
      return absl::UnimplementedError(absl::StrCat(
          "local function '", f.name(),
          "' has fields newer than the ONNX 1.12 schema quantd reads (such "
          "as attribute defaults); inlining it could lose them"));
    }
    for (const auto& op : f.opset_import()) {
      const std::string domain = NormalizedDomain(op.domain());
      auto it = opsets_.find(domain);
      if (it == opsets_.end()) {
        opsets_[domain] = op.version();
        added_opsets_[domain] = op.version();
        continue;
      }
      if (it->second != op.version()) {
        return absl::UnimplementedError(absl::StrCat(
            "local function '", f.name(), "' imports opset ",
            domain.empty() ? "ai.onnx" : domain, " version ", op.version(),
            " but the model uses version ", it->second,
            "; inlining it would change what its ops mean"));
      }
    }
    return absl::OkStatus();
  }

  // The nodes of one call of `f`, renamed into the caller's graph.
  absl::Status Expand(const onnx::NodeProto& call, const onnx::FunctionProto& f,
                      std::vector<onnx::NodeProto>* body) {
    const std::string prefix = call.name().empty() ? f.name() : call.name();
    absl::flat_hash_map<std::string, std::string> rename;
    for (int i = 0; i < f.input_size(); ++i) {
      rename[f.input(i)] = i < call.input_size() ? call.input(i) : "";
    }
    for (int i = 0; i < f.output_size(); ++i) {
      rename[f.output(i)] =
          i < call.output_size() && !call.output(i).empty()
              ? call.output(i)
              : names_.Make(absl::StrCat(prefix, "/", f.output(i)));
    }
    std::vector<std::string> defined;
    for (const onnx::NodeProto& n : f.node()) {
      for (const auto& o : n.output()) {
        if (!o.empty()) defined.push_back(o);
      }
      auto add = [&](const onnx::GraphProto& g) {
        std::vector<std::string> inner = DefinedNames(g, /*recursive=*/true);
        defined.insert(defined.end(), inner.begin(), inner.end());
      };
      for (const auto& a : n.attribute()) {
        if (a.has_g()) add(a.g());
        for (const auto& g : a.graphs()) add(g);
      }
    }
    for (const std::string& name : defined) {
      if (!rename.contains(name)) {
        rename[name] = names_.Make(absl::StrCat(prefix, "/", name));
      }
    }
    absl::flat_hash_map<std::string, const onnx::AttributeProto*> call_attrs;
    for (const auto& a : call.attribute()) call_attrs[a.name()] = &a;

    Context ctx{f, call, prefix, rename, call_attrs};
    for (const onnx::NodeProto& n : f.node()) {
      onnx::NodeProto copy = n;
      QUANTD_RETURN_IF_ERROR(RenameNode(ctx, &copy, /*top_level=*/true));
      body->push_back(std::move(copy));
    }
    return absl::OkStatus();
  }

  absl::Status RenameValue(const Context& ctx, std::string* name,
                           const onnx::NodeProto& reader) {
    if (name->empty()) return absl::OkStatus();
    auto it = ctx.rename.find(*name);
    if (it == ctx.rename.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", reader.name(), "' of local function '", ctx.f.name(),
          "' reads '", *name,
          "', which is neither an input of the function nor produced in it"));
    }
    *name = it->second;
    return absl::OkStatus();
  }

  absl::Status RenameNode(const Context& ctx, onnx::NodeProto* node,
                          bool top_level) {
    const std::string original = node->name();
    for (std::string& in : *node->mutable_input()) {
      QUANTD_RETURN_IF_ERROR(RenameValue(ctx, &in, *node));
    }
    for (std::string& o : *node->mutable_output()) {
      QUANTD_RETURN_IF_ERROR(RenameValue(ctx, &o, *node));
    }
    node->set_name(names_.Make(absl::StrCat(
        ctx.prefix, "/", original.empty() ? node->op_type() : original)));
    result_.origins[node->name()] = {ctx.f.name(), ctx.f.domain(), original,
                                     ctx.prefix, top_level};

    // Attributes bound at the call site (ref_attr_name), then subgraphs.
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
    for (onnx::AttributeProto& a : *node->mutable_attribute()) {
      if (!a.ref_attr_name().empty()) {
        auto it = ctx.call_attrs.find(a.ref_attr_name());
        // Not given at the call: the attribute is absent (ONNX 1.12 has no
        // defaults for function attributes).
        if (it == ctx.call_attrs.end()) continue;
        onnx::AttributeProto bound = *it->second;
        bound.set_name(a.name());
        *attrs.Add() = std::move(bound);
        continue;
      }
      if (a.has_g()) {
        QUANTD_RETURN_IF_ERROR(RenameGraph(ctx, a.mutable_g()));
      }
      for (onnx::GraphProto& g : *a.mutable_graphs()) {
        QUANTD_RETURN_IF_ERROR(RenameGraph(ctx, &g));
      }
      *attrs.Add() = std::move(a);
    }
    node->mutable_attribute()->Swap(&attrs);
    return absl::OkStatus();
  }

  // A subgraph of a body node: every name in it was collected by Expand.
  absl::Status RenameGraph(const Context& ctx, onnx::GraphProto* graph) {
    auto rename_info = [&](onnx::ValueInfoProto& v) {
      auto it = ctx.rename.find(v.name());
      if (it != ctx.rename.end()) v.set_name(it->second);
    };
    for (auto& v : *graph->mutable_input()) rename_info(v);
    for (auto& v : *graph->mutable_output()) rename_info(v);
    for (auto& v : *graph->mutable_value_info()) rename_info(v);
    for (auto& t : *graph->mutable_initializer()) {
      auto it = ctx.rename.find(t.name());
      if (it != ctx.rename.end()) t.set_name(it->second);
    }
    for (auto& t : *graph->mutable_sparse_initializer()) {
      auto it = ctx.rename.find(t.values().name());
      if (it != ctx.rename.end()) t.mutable_values()->set_name(it->second);
    }
    for (onnx::NodeProto& n : *graph->mutable_node()) {
      QUANTD_RETURN_IF_ERROR(RenameNode(ctx, &n, /*top_level=*/false));
    }
    return absl::OkStatus();
  }

  onnx::ModelProto* model_;
  UniqueNames names_;
  std::map<FunctionKey, const onnx::FunctionProto*> functions_;
  absl::flat_hash_map<std::string, int64_t> opsets_;
  std::map<std::string, int64_t> added_opsets_;
  InlinedFunctions result_;
};

}  // namespace

std::string InlinedFunctions::Note() const {
  if (functions.empty()) return "";
  absl::flat_hash_set<std::string> called;
  for (const auto& [name, origin] : origins) called.insert(origin.function);
  std::vector<std::string> used;
  for (const std::string& f : functions) {
    if (called.contains(f)) used.push_back(f);
  }
  return absl::StrCat(
      "inlined ", calls.size(), calls.size() == 1 ? " call" : " calls",
      " of local functions (", absl::StrJoin(used, ", "),
      ") into the graph; their nodes are named '<call node>/<node>', and "
      "unit_wise_quantization_precision reaches them with func_name; ",
      functions.size(), " local function",
      functions.size() == 1 ? " was" : "s were", " removed from the model");
}

absl::StatusOr<InlinedFunctions> InlineLocalFunctions(onnx::ModelProto* model) {
  return Inliner(model).Run();
}

}  // namespace quantd::graph
