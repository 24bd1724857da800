#include "core/graph/graph_edit.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace quantd::graph {

onnx::NodeProto MakeNode(const std::string& op, const std::string& name,
                         std::vector<std::string> inputs,
                         std::vector<std::string> outputs) {
  onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name(name);
  for (auto& in : inputs) node.add_input(std::move(in));
  for (auto& out : outputs) node.add_output(std::move(out));
  return node;
}

const onnx::AttributeProto* FindAttribute(const onnx::NodeProto& node,
                                          const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t IntAttribute(const onnx::NodeProto& node, const std::string& name,
                     int64_t dflt) {
  const onnx::AttributeProto* a = FindAttribute(node, name);
  return a != nullptr ? a->i() : dflt;
}

float FloatAttribute(const onnx::NodeProto& node, const std::string& name,
                     float dflt) {
  const onnx::AttributeProto* a = FindAttribute(node, name);
  return a != nullptr ? a->f() : dflt;
}

void SetIntAttribute(onnx::NodeProto* node, const std::string& name,
                     int64_t value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void AddInitializer(onnx::TensorProto tensor, bool also_input,
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

void RemoveInitializers(const absl::flat_hash_set<std::string>& names,
                        int32_t data_type, onnx::GraphProto* graph) {
  if (names.empty()) return;
  auto* inits = graph->mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(),
                              [&](const onnx::TensorProto& t) {
                                return names.contains(t.name()) &&
                                       t.data_type() == data_type;
                              }),
               inits->end());
  auto* inputs = graph->mutable_input();
  inputs->erase(std::remove_if(inputs->begin(), inputs->end(),
                               [&](const onnx::ValueInfoProto& v) {
                                 return names.contains(v.name());
                               }),
                inputs->end());
}

onnx::NodeProto* InsertNode(onnx::NodeProto node, int position,
                            onnx::GraphProto* graph) {
  auto* nodes = graph->mutable_node();
  position = std::clamp(position, 0, nodes->size());
  *nodes->Add() = std::move(node);
  // SwapElements swaps pointers: the NodeProto objects stay where they are.
  for (int i = nodes->size() - 1; i > position; --i) {
    nodes->SwapElements(i, i - 1);
  }
  return nodes->Mutable(position);
}

onnx::TensorProto MakeInt32Tensor(const std::string& name,
                                  absl::Span<const int64_t> dims,
                                  absl::Span<const int32_t> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT32);
  for (int64_t d : dims) t.add_dims(d);
  std::string raw(values.size() * sizeof(int32_t), '\0');
  // Little-endian hosts only, like MakeFloatTensor.
  if (!values.empty()) std::memcpy(raw.data(), values.data(), raw.size());
  t.set_raw_data(std::move(raw));
  return t;
}

const onnx::TensorProto* FindInitializer(const onnx::GraphProto& graph,
                                         const std::string& name) {
  for (const auto& t : graph.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

namespace {

void AddDefinedNames(const onnx::GraphProto& graph, bool recursive,
                     std::vector<std::string>* out) {
  for (const auto& v : graph.input()) out->push_back(v.name());
  for (const auto& t : graph.initializer()) out->push_back(t.name());
  for (const auto& t : graph.sparse_initializer()) {
    out->push_back(t.values().name());
  }
  for (const auto& node : graph.node()) {
    for (const auto& o : node.output()) {
      if (!o.empty()) out->push_back(o);
    }
    if (!recursive) continue;
    for (const auto& a : node.attribute()) {
      if (a.has_g()) AddDefinedNames(a.g(), true, out);
      for (const auto& g : a.graphs()) AddDefinedNames(g, true, out);
    }
  }
}

}  // namespace

std::vector<std::string> DefinedNames(const onnx::GraphProto& graph,
                                      bool recursive) {
  std::vector<std::string> out;
  AddDefinedNames(graph, recursive, &out);
  return out;
}

bool HasSubgraph(const onnx::NodeProto& node) {
  for (const auto& a : node.attribute()) {
    if (a.has_g() || a.graphs_size() > 0) return true;
  }
  return false;
}

bool SubgraphReads(const onnx::GraphProto& subgraph,
                   const std::string& tensor) {
  for (const auto& v : subgraph.output()) {
    if (v.name() == tensor) return true;
  }
  for (const auto& node : subgraph.node()) {
    for (const auto& in : node.input()) {
      if (in == tensor) return true;
    }
    for (const auto& a : node.attribute()) {
      if (a.has_g() && SubgraphReads(a.g(), tensor)) return true;
      for (const auto& g : a.graphs()) {
        if (SubgraphReads(g, tensor)) return true;
      }
    }
  }
  return false;
}

void RenameNodeReads(const std::string& from, const std::string& to,
                     onnx::GraphProto* graph) {
  for (auto& node : *graph->mutable_node()) {
    for (auto& in : *node.mutable_input()) {
      if (in == from) in = to;
    }
    RenameSubgraphReads(from, to, &node);
  }
}

namespace {

// A body's reads of `from`: its nodes and the outputs it returns.
void RenameReads(const std::string& from, const std::string& to,
                 onnx::GraphProto* graph) {
  for (auto& v : *graph->mutable_output()) {
    if (v.name() == from) v.set_name(to);
  }
  RenameNodeReads(from, to, graph);
}

}  // namespace

void RenameSubgraphReads(const std::string& from, const std::string& to,
                         onnx::NodeProto* node) {
  for (auto& a : *node->mutable_attribute()) {
    if (a.has_g()) RenameReads(from, to, a.mutable_g());
    for (auto& g : *a.mutable_graphs()) RenameReads(from, to, &g);
  }
}

}  // namespace quantd::graph
