// Helpers shared by the STATIC_RANGE pass tests: finding nodes and
// initializers of a model and reading their values.
#ifndef QUANTD_TESTS_CORE_PASSES_STATIC_RANGE_TEST_UTIL_H_
#define QUANTD_TESTS_CORE_PASSES_STATIC_RANGE_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace quantd::testing {

inline std::vector<const onnx::NodeProto*> NodesOf(const onnx::GraphProto& g,
                                                   const std::string& op) {
  std::vector<const onnx::NodeProto*> out;
  for (const auto& n : g.node()) {
    if (n.op_type() == op) out.push_back(&n);
  }
  return out;
}

inline const onnx::NodeProto* NodeNamed(const onnx::GraphProto& g,
                                        const std::string& name) {
  for (const auto& n : g.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

// The node producing `tensor`, or null.
inline const onnx::NodeProto* ProducerOf(const onnx::GraphProto& g,
                                         const std::string& tensor) {
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (o == tensor) return &n;
    }
  }
  return nullptr;
}

inline int IndexOf(const onnx::GraphProto& g, const onnx::NodeProto* node) {
  for (int i = 0; i < g.node_size(); ++i) {
    if (&g.node(i) == node) return i;
  }
  return -1;
}

inline const onnx::TensorProto* Init(const onnx::GraphProto& g,
                                     const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// Raw little-endian values of an initializer, read independently of
// core/graph.
template <typename T>
std::vector<T> Values(const onnx::TensorProto* t) {
  std::vector<T> v;
  if (t == nullptr) return v;
  if (!t->raw_data().empty()) {
    v.resize(t->raw_data().size() / sizeof(T));
    std::memcpy(v.data(), t->raw_data().data(), v.size() * sizeof(T));
  } else {
    for (float f : t->float_data()) v.push_back(static_cast<T>(f));
  }
  return v;
}

inline int64_t AxisAttr(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "axis") return a.i();
  }
  return -100;
}

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_CORE_PASSES_STATIC_RANGE_TEST_UTIL_H_
