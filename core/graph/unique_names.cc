#include "core/graph/unique_names.h"

#include "absl/strings/str_cat.h"

namespace quantd::graph {

UniqueNames::UniqueNames(const onnx::GraphProto& graph) { AddGraph(graph); }

void UniqueNames::AddGraph(const onnx::GraphProto& graph) {
  for (const auto& v : graph.input()) used_.insert(v.name());
  for (const auto& v : graph.output()) used_.insert(v.name());
  for (const auto& v : graph.value_info()) used_.insert(v.name());
  for (const auto& t : graph.initializer()) used_.insert(t.name());
  for (const auto& node : graph.node()) {
    used_.insert(node.name());
    for (const auto& name : node.input()) used_.insert(name);
    for (const auto& name : node.output()) used_.insert(name);
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) AddGraph(attr.g());
      for (const auto& g : attr.graphs()) AddGraph(g);
    }
  }
}

std::string UniqueNames::Make(absl::string_view base) {
  std::string name(base);
  for (int i = 1; !used_.insert(name).second; ++i) {
    name = absl::StrCat(base, "_", i);
  }
  return name;
}

}  // namespace quantd::graph
