#include "core/graph/graph_index.h"

namespace quantd::graph {

GraphIndex::GraphIndex(const onnx::GraphProto& graph) {
  for (const auto& v : graph.input()) inputs_.insert(v.name());
  for (const auto& v : graph.output()) outputs_.insert(v.name());
  for (int i = 0; i < graph.initializer_size(); ++i) {
    initializer_.emplace(graph.initializer(i).name(), i);
  }
  for (int n = 0; n < graph.node_size(); ++n) {
    const onnx::NodeProto& node = graph.node(n);
    for (int s = 0; s < node.input_size(); ++s) {
      if (!node.input(s).empty()) uses_[node.input(s)].push_back({n, s});
    }
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) AddSubgraphReads(attr.g(), n);
      for (const auto& g : attr.graphs()) AddSubgraphReads(g, n);
    }
    for (const auto& out : node.output()) {
      if (!out.empty()) producer_.emplace(out, n);
    }
  }
}

// A subgraph may read any outer tensor by name. Counting every name it reads
// (its own too) over-approximates, which only makes rewrites more careful.
void GraphIndex::AddSubgraphReads(const onnx::GraphProto& subgraph, int owner) {
  for (const auto& node : subgraph.node()) {
    for (const auto& in : node.input()) {
      if (in.empty()) continue;
      std::vector<Use>& uses = uses_[in];
      if (uses.empty() || uses.back().node != owner ||
          uses.back().slot != Use::kSubgraphSlot) {
        uses.push_back({owner, Use::kSubgraphSlot});
      }
    }
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) AddSubgraphReads(attr.g(), owner);
      for (const auto& g : attr.graphs()) AddSubgraphReads(g, owner);
    }
  }
}

const std::vector<Use>& GraphIndex::Uses(absl::string_view name) const {
  static const std::vector<Use>* const kNone = new std::vector<Use>();
  auto it = uses_.find(name);
  return it == uses_.end() ? *kNone : it->second;
}

int GraphIndex::Producer(absl::string_view name) const {
  auto it = producer_.find(name);
  return it == producer_.end() ? -1 : it->second;
}

int GraphIndex::Initializer(absl::string_view name) const {
  auto it = initializer_.find(name);
  return it == initializer_.end() ? -1 : it->second;
}

}  // namespace quantd::graph
