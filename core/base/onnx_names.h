// How quantd recognises ONNX ops and names nodes in messages: the one
// definition of the default domain and of a node's label, for every layer.
#ifndef QUANTD_CORE_BASE_ONNX_NAMES_H_
#define QUANTD_CORE_BASE_ONNX_NAMES_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"

namespace quantd {

// The ONNX operator set ("" and "ai.onnx" are the same domain).
inline bool IsDefaultDomain(absl::string_view domain) {
  return domain.empty() || domain == "ai.onnx";
}
inline bool IsDefaultDomain(const onnx::NodeProto& node) {
  return IsDefaultDomain(node.domain());
}

// A default-domain node of type `op_type`.
inline bool IsOp(const onnx::NodeProto& node, absl::string_view op_type) {
  return IsDefaultDomain(node) && node.op_type() == op_type;
}

// How messages name a node: its name, or "#<index in its graph>" when it
// has none.
inline std::string NodeLabel(const onnx::NodeProto& node, int index) {
  if (!node.name().empty()) return node.name();
  return absl::StrCat("#", index);
}

}  // namespace quantd

#endif  // QUANTD_CORE_BASE_ONNX_NAMES_H_
