// The single-node executor test harness: one node in a model of a given
// opset, run through Executor::Create and Run, so op tests state only the
// node, its attributes and its inputs.
#ifndef QUANTD_TESTS_CORE_EXECUTOR_NODE_TESTER_H_
#define QUANTD_TESTS_CORE_EXECUTOR_NODE_TESTER_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/tensor.h"
#include "core/numerics/int4.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace quantd::executor {

// Attribute protos for OneNode::attrs.
inline onnx::AttributeProto StrAttr(const std::string& name,
                                    const std::string& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(v);
  return a;
}
inline onnx::AttributeProto StrsAttr(const std::string& name,
                                     const std::vector<std::string>& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRINGS);
  for (const auto& s : v) a.add_strings(s);
  return a;
}
inline onnx::AttributeProto FloatAttr(const std::string& name, float v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}
inline onnx::AttributeProto FloatsAttr(const std::string& name,
                                       const std::vector<float>& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOATS);
  for (float f : v) a.add_floats(f);
  return a;
}

// A tensor of `shape` holding `v`.
template <typename T>
Tensor T1(std::vector<int64_t> shape, std::vector<T> v) {
  return Tensor::FromVector<T>(std::move(shape), v);
}

// The values of `t`, which must hold T.
template <typename T>
std::vector<T> Values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), TypeOf<T>::value) << DataTypeName(t.dtype());
  if (t.dtype() != TypeOf<T>::value) return {};
  return std::vector<T>(t.data<T>(), t.data<T>() + t.size());
}

// Element i of a tensor as a double (16-bit floats widened, integers cast).
inline double At(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case onnx::TensorProto::FLOAT:
      return t.data<float>()[i];
    case onnx::TensorProto::DOUBLE:
      return t.data<double>()[i];
    case onnx::TensorProto::FLOAT16:
      return static_cast<float>(t.data<Float16>()[i]);
    case onnx::TensorProto::BFLOAT16:
      return static_cast<float>(t.data<BFloat16>()[i]);
    default:
      return static_cast<double>(t.IntAt(i));
  }
}

// Same shape and every element within `tol` (absolute); says where not.
inline void ExpectClose(const Tensor& got, const Tensor& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(At(got, i) - At(want, i));
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": at flat index " << at << " got "
                        << At(got, at) << ", expected " << At(want, at);
}

// One node in a model of the given opset. Inputs named in `constant` are
// initializers, the others graph inputs fed at Run; an empty Tensor is an
// omitted optional input.
struct OneNode {
  OneNode(std::string op_type, int64_t version)
      : op(std::move(op_type)), opset(version) {}

  std::string op;
  int64_t opset;
  std::vector<Tensor> inputs;
  std::vector<bool> constant;  // Defaults to all fed.
  int outputs = 1;
  std::vector<onnx::AttributeProto> attrs;

  OneNode& Int(const std::string& name, int64_t v) {
    onnx::AttributeProto a;
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(v);
    attrs.push_back(a);
    return *this;
  }
  OneNode& Float(const std::string& name, float v) {
    attrs.push_back(FloatAttr(name, v));
    return *this;
  }
  OneNode& String(const std::string& name, const std::string& v) {
    attrs.push_back(StrAttr(name, v));
    return *this;
  }
  OneNode& IntList(const std::string& name, const std::vector<int64_t>& v) {
    onnx::AttributeProto a;
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a.add_ints(x);
    attrs.push_back(a);
    return *this;
  }

  onnx::ModelProto Model() const {
    onnx::ModelProto m;
    m.set_ir_version(opset >= 21 ? numerics::kInt4MinIrVersion : 8);
    m.add_opset_import()->set_version(opset);
    onnx::GraphProto* g = m.mutable_graph();
    g->set_name("g");
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name("q");
    for (const auto& a : attrs) *n->add_attribute() = a;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].empty()) {
        n->add_input("");
        continue;
      }
      const std::string name = absl::StrCat("in", i);
      n->add_input(name);
      if (i < constant.size() && constant[i]) {
        *g->add_initializer() = inputs[i].ToProto(name);
      } else {
        onnx::ValueInfoProto* vi = g->add_input();
        vi->set_name(name);
        auto* tt = vi->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(inputs[i].dtype());
        auto* shape = tt->mutable_shape();
        for (int64_t d : inputs[i].shape()) shape->add_dim()->set_dim_value(d);
      }
    }
    for (int o = 0; o < outputs; ++o) {
      n->add_output(absl::StrCat("out", o));
      g->add_output()->set_name(absl::StrCat("out", o));
    }
    return m;
  }

  absl::StatusOr<std::vector<Tensor>> Run(ThreadPool* pool = nullptr) const {
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(Model());
    if (!e.ok()) return e.status();
    absl::flat_hash_map<std::string, Tensor> feeds;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].empty() || (i < constant.size() && constant[i])) continue;
      feeds[absl::StrCat("in", i)] = inputs[i];
    }
    Executor::RunOptions opts;
    opts.pool = pool;
    return (*e)->Run(feeds, opts);
  }

  absl::StatusOr<Tensor> Run1(ThreadPool* pool = nullptr) const {
    absl::StatusOr<std::vector<Tensor>> r = Run(pool);
    if (!r.ok()) return r.status();
    return (*r)[0];
  }
};

}  // namespace quantd::executor

#endif  // QUANTD_TESTS_CORE_EXECUTOR_NODE_TESTER_H_
