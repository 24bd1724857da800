// Fresh names for tensors and nodes a rewrite adds to a graph.
#ifndef QUANTD_CORE_GRAPH_UNIQUE_NAMES_H_
#define QUANTD_CORE_GRAPH_UNIQUE_NAMES_H_

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// Knows every name used in a graph (tensors of the main graph and its
// subgraphs, which may refer to outer names, and node names) and hands out
// names not used yet. One namespace for nodes and tensors keeps the output
// readable and is stricter than ONNX needs.
class UniqueNames {
 public:
  explicit UniqueNames(const onnx::GraphProto& graph);

  // `base` when unused, else `base_1`, `base_2`, ...; the name is reserved.
  std::string Make(absl::string_view base);

  bool Contains(absl::string_view name) const { return used_.contains(name); }

  // Reserves every name of `graph` (and its subgraphs) too: a rewrite of a
  // subgraph body must not reuse the names of the graphs around it.
  void AddGraph(const onnx::GraphProto& graph);

 private:
  absl::flat_hash_set<std::string> used_;
};

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_UNIQUE_NAMES_H_
