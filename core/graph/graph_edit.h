// Small building blocks for rewrites that add nodes and initializers to a
// graph: node construction, attributes, positional insertion, int32 tensors.
#ifndef QUANTD_CORE_GRAPH_GRAPH_EDIT_H_
#define QUANTD_CORE_GRAPH_GRAPH_EDIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// A default-domain node with the given inputs and outputs.
onnx::NodeProto MakeNode(const std::string& op, const std::string& name,
                         std::vector<std::string> inputs,
                         std::vector<std::string> outputs);

// The attribute `name` of `node`, or null.
const onnx::AttributeProto* FindAttribute(const onnx::NodeProto& node,
                                          const std::string& name);
// The INT / FLOAT attribute `name`, or `dflt` when the node has none.
int64_t IntAttribute(const onnx::NodeProto& node, const std::string& name,
                     int64_t dflt);
float FloatAttribute(const onnx::NodeProto& node, const std::string& name,
                     float dflt);

// Adds an INT attribute to `node`.
void SetIntAttribute(onnx::NodeProto* node, const std::string& name,
                     int64_t value);

// The initializer `name` of `graph` (not its subgraphs), or null.
const onnx::TensorProto* FindInitializer(const onnx::GraphProto& graph,
                                         const std::string& name);

// Every name `graph` defines, in graph order: its inputs, initializers
// (sparse too) and node outputs; with `recursive`, then those of the
// subgraphs of each node, after that node's outputs.
std::vector<std::string> DefinedNames(const onnx::GraphProto& graph,
                                      bool recursive);

// Whether `node` has a GRAPH or GRAPHS attribute (If, Loop, Scan).
bool HasSubgraph(const onnx::NodeProto& node);

// Whether a node of `subgraph` (or of its own subgraphs) reads `tensor`, or
// `subgraph` returns it: a body reading an outer value by name.
bool SubgraphReads(const onnx::GraphProto& subgraph, const std::string& tensor);

// Makes `node`'s subgraphs (If/Loop/Scan bodies, at any depth) read `to`
// wherever they read the outer value `from` (node inputs and subgraph
// outputs). ONNX names are unique across scopes, so nothing inside can
// define `from` itself.
void RenameSubgraphReads(const std::string& from, const std::string& to,
                         onnx::NodeProto* node);

// Makes every node of `graph` (and of its subgraphs) read `to` wherever it
// read `from`; the graph's own outputs are left as they are.
void RenameNodeReads(const std::string& from, const std::string& to,
                     onnx::GraphProto* graph);

// Appends `tensor` to the initializers; with `also_input` (IR version < 4,
// where every initializer must be a graph input) also declares it as a graph
// input of the same type and shape.
void AddInitializer(onnx::TensorProto tensor, bool also_input,
                    onnx::GraphProto* graph);

// Removes the initializers named in `names` whose type is `data_type`, and
// the graph inputs of those names (IR < 4 lists initializers as inputs).
void RemoveInitializers(const absl::flat_hash_set<std::string>& names,
                        int32_t data_type, onnx::GraphProto* graph);

// Inserts `node` so that it becomes node `position` (clamped to [0, size]).
// Existing NodeProto objects are not moved in memory (pointers to them stay
// valid); their indices at or after `position` grow by one. O(size).
onnx::NodeProto* InsertNode(onnx::NodeProto node, int position,
                            onnx::GraphProto* graph);

// An INT32 tensor with raw_data (little-endian).
onnx::TensorProto MakeInt32Tensor(const std::string& name,
                                  absl::Span<const int64_t> dims,
                                  absl::Span<const int32_t> values);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_GRAPH_EDIT_H_
