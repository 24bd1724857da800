#include "core/passes/subgraph_bodies.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/model_io.h"
#include "core/graph/unique_names.h"
#include "core/passes/weight_plan.h"

namespace quantd::passes {
namespace {

// A constant of an enclosing graph: where it lives, so it can be removed
// once nothing reads it.
struct OuterConstant {
  const onnx::TensorProto* tensor = nullptr;
  onnx::GraphProto* graph = nullptr;
};
using OuterConstants = absl::flat_hash_map<std::string, OuterConstant>;

// The initializers of `graph` a body may treat as constants: at IR >= 4 an
// initializer that is also a graph input may be fed at run time.
void AddConstants(onnx::GraphProto* graph, int64_t ir_version,
                  OuterConstants* out) {
  absl::flat_hash_set<std::string> inputs;
  for (const auto& v : graph->input()) inputs.insert(v.name());
  for (const onnx::TensorProto& t : graph->initializer()) {
    if (ir_version >= 4 && inputs.contains(t.name())) continue;
    (*out)[t.name()] = {&t, graph};
  }
}

// Every name read by a node, or returned, anywhere in `graph`.
void CollectReads(const onnx::GraphProto& graph,
                  absl::flat_hash_set<std::string>* reads) {
  for (const auto& v : graph.output()) reads->insert(v.name());
  for (const onnx::NodeProto& node : graph.node()) {
    for (const auto& in : node.input()) reads->insert(in);
    for (const auto& a : node.attribute()) {
      if (a.has_g()) CollectReads(a.g(), reads);
      for (const auto& g : a.graphs()) CollectReads(g, reads);
    }
  }
}

class BodyWalker {
 public:
  BodyWalker(onnx::ModelProto* model, const graph::InlinedFunctions& inlined,
             const std::function<absl::Status(Body*)>& pass)
      : model_(model), inlined_(inlined), pass_(pass) {}

  absl::Status Run() {
    AddOuterValues(model_->graph());
    OuterConstants outer;
    AddConstants(model_->mutable_graph(), model_->ir_version(), &outer);
    QUANTD_RETURN_IF_ERROR(Walk(model_->mutable_graph(), outer));
    RemoveUnreadCopiedConstants();
    return absl::OkStatus();
  }

 private:
  // What bodies inside `graph` may need to know of its values: their
  // declared types, and which are DequantizeLinear outputs.
  void AddOuterValues(const onnx::GraphProto& graph) {
    for (const auto& v : graph.input()) outer_types_.emplace(v.name(), &v);
    for (const auto& v : graph.value_info()) outer_types_.emplace(v.name(), &v);
    for (const auto& v : graph.output()) outer_types_.emplace(v.name(), &v);
    for (const auto& n : graph.node()) {
      if (n.op_type() == "DequantizeLinear" && n.output_size() > 0 &&
          (n.domain().empty() || n.domain() == "ai.onnx")) {
        outer_dequantized_.emplace(n.output(0), &n);
      }
    }
  }

  absl::Status Walk(onnx::GraphProto* graph, const OuterConstants& outer) {
    for (onnx::NodeProto& node : *graph->mutable_node()) {
      for (onnx::AttributeProto& a : *node.mutable_attribute()) {
        std::vector<onnx::GraphProto*> bodies;
        if (a.has_g()) bodies.push_back(a.mutable_g());
        for (onnx::GraphProto& g : *a.mutable_graphs()) bodies.push_back(&g);
        for (onnx::GraphProto* body : bodies) {
          QUANTD_RETURN_IF_ERROR(RunOne(node, a.name(), body, outer));
          AddOuterValues(*body);
          OuterConstants inner = outer;
          AddConstants(body, model_->ir_version(), &inner);
          QUANTD_RETURN_IF_ERROR(Walk(body, inner));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status RunOne(const onnx::NodeProto& owner, const std::string& attr,
                      onnx::GraphProto* graph, const OuterConstants& outer) {
    Body body;
    body.model.set_ir_version(model_->ir_version());
    *body.model.mutable_opset_import() = model_->opset_import();
    body.scope = BodyScope(owner, &inlined_);
    body.where = absl::StrCat(attr, " of ", owner.op_type(), " ",
                              owner.name().empty()
                                  ? "(unnamed)"
                                  : absl::StrCat("'", owner.name(), "'"));
    body.outer_root = &model_->graph();
    onnx::GraphProto* g = body.model.mutable_graph();
    g->Swap(graph);

    // Copies of the outer weights and biases its quantizable nodes read.
    graph::UniqueNames names(*g);
    names.AddGraph(model_->graph());
    absl::flat_hash_map<std::string, std::string> copies;  // outer -> copy
    for (onnx::NodeProto& node : *g->mutable_node()) {
      if (!IsQuantizableOp(node) && !IsRecurrentOp(node)) continue;
      for (int slot = 0; slot < node.input_size(); ++slot) {
        auto it = outer.find(node.input(slot));
        if (it == outer.end()) continue;
        auto [copy, added] = copies.emplace(it->first, "");
        if (added) {
          copy->second = names.Make(it->first);
          onnx::TensorProto t = *it->second.tensor;
          t.set_name(copy->second);
          graph::AddInitializer(std::move(t), /*also_input=*/false, g);
        }
        node.set_input(slot, copy->second);
      }
    }

    // An outer value a body node reads that an outer DequantizeLinear makes
    // (a point the enclosing graph's pass placed where the tensor is made,
    // as _InsertQuantOp does) gets a DequantizeLinear of its own at the
    // start of the body, under a fresh name: the pass sees the input as
    // quantized already, and a runtime fusing Q/DQ node units (ONNX Runtime
    // does) finds the whole unit inside the body. Without it ORT 1.30 turns
    // "float input, dequantized weight" into a dynamically quantized MatMul,
    // off by up to 7 output steps on the control-flow test model.
    const int real_inputs = g->input_size();
    const std::vector<std::string> own =
        graph::DefinedNames(*g, /*recursive=*/false);
    absl::flat_hash_set<std::string> defined(own.begin(), own.end());
    absl::flat_hash_set<std::string> local_dequantized;  // Outputs.
    absl::flat_hash_set<std::string> local_constants;    // Their params.
    {
      absl::flat_hash_map<std::string, std::string> local;  // outer -> local
      std::vector<onnx::NodeProto> copies;
      for (onnx::NodeProto& n : *g->mutable_node()) {
        for (std::string& in : *n.mutable_input()) {
          auto dq = outer_dequantized_.find(in);
          if (dq == outer_dequantized_.end() || defined.contains(in)) continue;
          auto [it, added] = local.emplace(in, "");
          if (added) {
            it->second = names.Make(in);
            onnx::NodeProto copy = *dq->second;
            copy.set_name(names.Make(copy.name()));
            copy.set_output(0, it->second);
            // Its scale and zero point too, when they are outer constants:
            // a lowering turns the unit into a QLinear op only when they
            // are initializers of the graph it rewrites.
            for (int slot = 1; slot < copy.input_size(); ++slot) {
              auto c = outer.find(copy.input(slot));
              if (c == outer.end()) continue;
              onnx::TensorProto t = *c->second.tensor;
              t.set_name(names.Make(c->first));
              copy.set_input(slot, t.name());
              local_constants.insert(t.name());
              graph::AddInitializer(std::move(t), /*also_input=*/false, g);
            }
            copies.push_back(std::move(copy));
            local_dequantized.insert(it->second);
          }
          in = it->second;
        }
      }
      int position = 0;
      for (onnx::NodeProto& copy : copies) {
        graph::InsertNode(std::move(copy), position++, g);
      }
    }
    // Other outer values look like graph inputs to the pass while it runs
    // (a source with no producer, as it expects).
    for (const auto& n : g->node()) {
      for (const auto& in : n.input()) {
        if (in.empty() || !defined.insert(in).second) continue;
        onnx::ValueInfoProto* v = g->add_input();
        auto known = outer_types_.find(in);
        if (known != outer_types_.end()) *v = *known->second;
        v->set_name(in);
      }
    }

    absl::Status s = pass_(&body);

    g->mutable_input()->DeleteSubrange(real_inputs,
                                       g->input_size() - real_inputs);
    // A local DequantizeLinear the pass left without readers (a lowering
    // reads the quantized tensor directly) goes, and then any of their
    // scales and zero points nothing reads.
    if (!local_dequantized.empty()) {
      absl::flat_hash_set<std::string> reads;
      CollectReads(*g, &reads);
      auto* nodes = g->mutable_node();
      for (int i = nodes->size() - 1; i >= 0; --i) {
        const onnx::NodeProto& n = nodes->Get(i);
        if (n.output_size() > 0 && local_dequantized.contains(n.output(0)) &&
            !reads.contains(n.output(0))) {
          nodes->DeleteSubrange(i, 1);
        }
      }
      reads.clear();
      CollectReads(*g, &reads);
      auto* inits = g->mutable_initializer();
      for (int i = inits->size() - 1; i >= 0; --i) {
        const std::string& name = inits->Get(i).name();
        if (local_constants.contains(name) && !reads.contains(name)) {
          inits->DeleteSubrange(i, 1);
        }
      }
    }

    // A copy the pass left float is folded back onto the outer constant.
    absl::flat_hash_map<std::string, std::string> unused;  // copy -> outer
    for (const auto& [outer_name, copy] : copies) unused[copy] = outer_name;
    absl::flat_hash_set<std::string> float_copies;
    for (const onnx::TensorProto& t : g->initializer()) {
      if (unused.contains(t.name())) float_copies.insert(t.name());
    }
    for (onnx::NodeProto& node : *g->mutable_node()) {
      for (std::string& in : *node.mutable_input()) {
        if (float_copies.contains(in)) in = unused[in];
      }
    }
    for (const auto& [outer_name, copy] : copies) {
      if (!float_copies.contains(copy)) {
        quantized_outer_[outer_name] = outer.at(outer_name).graph;
      }
    }
    auto* inits = g->mutable_initializer();
    for (int i = inits->size() - 1; i >= 0; --i) {
      if (float_copies.contains(inits->Get(i).name())) {
        inits->DeleteSubrange(i, 1);
      }
    }
    graph->Swap(g);
    return s;
  }

  // Outer constants whose readers all moved to quantized copies.
  void RemoveUnreadCopiedConstants() {
    if (quantized_outer_.empty()) return;
    absl::flat_hash_set<std::string> reads;
    CollectReads(model_->graph(), &reads);
    absl::flat_hash_map<onnx::GraphProto*, absl::flat_hash_set<std::string>>
        unread;
    for (const auto& [name, graph] : quantized_outer_) {
      if (!reads.contains(name)) unread[graph].insert(name);
    }
    for (auto& [graph, names] : unread) {
      auto* inits = graph->mutable_initializer();
      for (int i = inits->size() - 1; i >= 0; --i) {
        if (names.contains(inits->Get(i).name())) inits->DeleteSubrange(i, 1);
      }
      // Below IR 4 the main graph also lists every initializer as an input;
      // left alone, it would become an input the caller must feed.
      if (graph != model_->mutable_graph()) continue;
      auto* inputs = graph->mutable_input();
      for (int i = inputs->size() - 1; i >= 0; --i) {
        if (names.contains(inputs->Get(i).name())) {
          inputs->DeleteSubrange(i, 1);
        }
      }
    }
  }

  onnx::ModelProto* model_;
  const graph::InlinedFunctions& inlined_;
  const std::function<absl::Status(Body*)>& pass_;
  // Value name -> its declaration in an enclosing graph.
  absl::flat_hash_map<std::string, const onnx::ValueInfoProto*> outer_types_;
  // Value name -> the DequantizeLinear making it in an enclosing graph.
  absl::flat_hash_map<std::string, const onnx::NodeProto*> outer_dequantized_;
  // Outer constants a body now reads through a quantized copy -> the graph
  // holding them.
  absl::flat_hash_map<std::string, onnx::GraphProto*> quantized_outer_;
};

bool BodyHasQuantizable(const onnx::GraphProto& graph, bool in_body) {
  for (const onnx::NodeProto& node : graph.node()) {
    if (in_body && (IsQuantizableOp(node) || IsRecurrentOp(node))) {
      return true;
    }
    for (const auto& a : node.attribute()) {
      if (a.has_g() && BodyHasQuantizable(a.g(), true)) return true;
      for (const auto& g : a.graphs()) {
        if (BodyHasQuantizable(g, true)) return true;
      }
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<OpsetOutcome> BodyOpset(const Body& body, int64_t needed) {
  OpsetOutcome outcome;
  outcome.from = outcome.to = graph::DefaultOpset(body.model);
  if (outcome.from >= needed) return outcome;
  if (needed == kPerChannelOpset && outcome.from >= kDynamicQuantizeOpset) {
    outcome.mode = OpsetOutcome::kPerTensorFallback;
    outcome.note = absl::StrCat("weights in the ", body.where,
                                " get one scale each (opset ", outcome.from,
                                " has no per-channel DequantizeLinear)");
    return outcome;
  }
  return absl::UnimplementedError(absl::StrCat(
      "quantizing the ", body.where, " needs opset ", needed,
      " but the model is at opset ", outcome.from,
      ", which its main graph's quantization did not need to raise"));
}

bool HasQuantizableBodies(const onnx::GraphProto& graph) {
  return BodyHasQuantizable(graph, false);
}

absl::StatusOr<std::string> QuantizeBodies(
    onnx::ModelProto* model, const graph::InlinedFunctions& inlined,
    bool four_bit, const std::function<absl::Status(Body*)>& pass) {
  if (!HasQuantizableBodies(model->graph())) return std::string();
  QUANTD_ASSIGN_OR_RETURN(
      OpsetOutcome outcome,
      EnsureOpset(model, four_bit ? kInt4Opset : kPerChannelOpset));
  QUANTD_RETURN_IF_ERROR(BodyWalker(model, inlined, pass).Run());
  return outcome.note;
}

}  // namespace quantd::passes
