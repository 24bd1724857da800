// Who produces and who reads each tensor of a graph, for planning rewrites.
// A snapshot: rebuild it after changing the graph.
#ifndef QUANTD_CORE_GRAPH_GRAPH_INDEX_H_
#define QUANTD_CORE_GRAPH_GRAPH_INDEX_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// One read of a tensor: node `node` of the main graph reads it as input
// `slot`, or (slot kSubgraphSlot) a subgraph of that node reads it.
struct Use {
  static constexpr int kSubgraphSlot = -1;
  int node = 0;
  int slot = 0;
};

class GraphIndex {
 public:
  explicit GraphIndex(const onnx::GraphProto& graph);

  // Every read of `name`, in node order. Empty when unused.
  const std::vector<Use>& Uses(absl::string_view name) const;
  // Index of the node producing `name`, or -1.
  int Producer(absl::string_view name) const;
  // Index into graph.initializer(), or -1.
  int Initializer(absl::string_view name) const;
  bool IsGraphInput(absl::string_view name) const {
    return inputs_.contains(name);
  }
  bool IsGraphOutput(absl::string_view name) const {
    return outputs_.contains(name);
  }

 private:
  void AddSubgraphReads(const onnx::GraphProto& subgraph, int owner);

  absl::flat_hash_map<std::string, std::vector<Use>> uses_;
  absl::flat_hash_map<std::string, int> producer_;
  absl::flat_hash_map<std::string, int> initializer_;
  absl::flat_hash_set<std::string> inputs_;
  absl::flat_hash_set<std::string> outputs_;
};

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_GRAPH_INDEX_H_
