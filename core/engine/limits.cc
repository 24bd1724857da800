#include "core/engine/limits.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/checked_count.h"
#include "core/base/status_macros.h"

namespace quantd {
namespace {

constexpr int64_t kSaturated = kMaxCount;

// Product of `dims`, saturating (a crafted shape must not wrap around to a
// small count); negative dims are left to validation and count as 0.
template <typename Dims>
int64_t ElementCount(const Dims& dims) {
  return std::max<int64_t>(
      0, SaturatingElementCount(absl::MakeConstSpan(dims.data(), dims.size())));
}

// The known dims of a declared tensor type (symbolic or missing dims are
// skipped: only what the model commits to is counted); -1 when the type has
// no shape.
int64_t DeclaredElements(const onnx::TypeProto& type) {
  const onnx::TensorShapeProto* shape = nullptr;
  if (type.has_tensor_type() && type.tensor_type().has_shape()) {
    shape = &type.tensor_type().shape();
  } else if (type.has_sparse_tensor_type() &&
             type.sparse_tensor_type().has_shape()) {
    shape = &type.sparse_tensor_type().shape();
  }
  if (shape == nullptr) return -1;
  std::vector<int64_t> known;
  for (const auto& dim : shape->dim()) {
    if (dim.has_dim_value()) known.push_back(dim.dim_value());
  }
  return std::max<int64_t>(0, SaturatingElementCount(known));
}

std::string CountText(int64_t n) {
  return n == kSaturated ? std::string("more than 2^63") : absl::StrCat(n);
}

// Walks the model once: counts nodes and stops at the first tensor over the
// element limit.
class LimitWalker {
 public:
  explicit LimitWalker(const JobLimits& limits) : limits_(limits) {}

  absl::Status Model(const onnx::ModelProto& model) {
    absl::Status s = Graph(model.graph(), "graph");
    for (const auto& function : model.functions()) {
      if (!s.ok()) break;
      const std::string where =
          absl::StrCat("function '", function.name(), "'");
      for (const auto& node : function.node()) {
        s = Node(node, where);
        if (!s.ok()) break;
      }
    }
    if (!s.ok()) return s;
    if (limits_.max_graph_nodes > 0 && nodes_ > limits_.max_graph_nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the model has ", nodes_,
          " nodes (main graph, subgraphs and functions), over this server's "
          "limit of ",
          limits_.max_graph_nodes, " nodes"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Tensor(const std::string& name, int64_t elements,
                      const char* kind, const std::string& where) {
    if (limits_.max_tensor_elements <= 0 ||
        elements <= limits_.max_tensor_elements) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " '", name, "' (", where, ") has ", CountText(elements),
        " elements, over this server's limit of ", limits_.max_tensor_elements,
        " elements per tensor"));
  }

  absl::Status Graph(const onnx::GraphProto& graph, const std::string& kind) {
    const std::string where = absl::StrCat(kind, " '", graph.name(), "'");
    for (const auto& init : graph.initializer()) {
      QUANTD_RETURN_IF_ERROR(
          Tensor(init.name(), ElementCount(init.dims()), "initializer", where));
    }
    for (const auto& sparse : graph.sparse_initializer()) {
      QUANTD_RETURN_IF_ERROR(Tensor(sparse.values().name(),
                                    ElementCount(sparse.dims()),
                                    "sparse initializer", where));
    }
    for (const auto& input : graph.input()) {
      QUANTD_RETURN_IF_ERROR(
          Tensor(input.name(), DeclaredElements(input.type()), "input", where));
    }
    for (const auto& node : graph.node()) {
      QUANTD_RETURN_IF_ERROR(Node(node, where));
    }
    return absl::OkStatus();
  }

  absl::Status Node(const onnx::NodeProto& node, const std::string& where) {
    ++nodes_;
    const std::string label =
        absl::StrCat("attribute of ", node.op_type(), " node '", node.name(),
                     "' in ", where);
    auto name_of = [&](const onnx::AttributeProto& a,
                       const std::string& tensor) {
      return tensor.empty() ? absl::StrCat(node.name(), ".", a.name()) : tensor;
    };
    for (const auto& a : node.attribute()) {
      absl::Status s;
      if (a.has_t()) {
        s = Tensor(name_of(a, a.t().name()), ElementCount(a.t().dims()),
                   "tensor", label);
      }
      for (const auto& t : a.tensors()) {
        if (s.ok()) {
          s = Tensor(name_of(a, t.name()), ElementCount(t.dims()), "tensor",
                     label);
        }
      }
      if (s.ok() && a.has_sparse_tensor()) {
        s = Tensor(name_of(a, a.sparse_tensor().values().name()),
                   ElementCount(a.sparse_tensor().dims()), "sparse tensor",
                   label);
      }
      // Constant's list forms (value_floats, value_ints, value_strings).
      const int64_t list =
          std::max<int64_t>({a.floats_size(), a.ints_size(), a.strings_size()});
      if (s.ok() && list > 0) {
        s = Tensor(name_of(a, ""), list, "tensor", label);
      }
      if (s.ok() && a.has_g()) {
        s = Graph(a.g(), absl::StrCat("subgraph ", a.name(), " of node '",
                                      node.name(), "': graph"));
      }
      for (const auto& g : a.graphs()) {
        if (s.ok()) {
          s = Graph(g, absl::StrCat("subgraph ", a.name(), " of node '",
                                    node.name(), "': graph"));
        }
      }
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  const JobLimits& limits_;
  int64_t nodes_ = 0;
};

}  // namespace

absl::Status CheckJobLimits(const onnx::ModelProto& model,
                            const JobLimits& limits) {
  if (limits.max_tensor_elements <= 0 && limits.max_graph_nodes <= 0) {
    return absl::OkStatus();
  }
  return LimitWalker(limits).Model(model);
}

}  // namespace quantd
