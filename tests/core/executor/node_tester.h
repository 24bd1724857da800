// The single-node executor test harness: one node in a model of a given
// opset, run through Executor::Create and Run, so op tests state only the
// node, its attributes and its inputs.
#ifndef QUANTD_TESTS_CORE_EXECUTOR_NODE_TESTER_H_
#define QUANTD_TESTS_CORE_EXECUTOR_NODE_TESTER_H_

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
#include "onnx/onnx_pb.h"

namespace quantd::executor {

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
    onnx::AttributeProto a;
    a.set_name(name);
    a.set_type(onnx::AttributeProto::FLOAT);
    a.set_f(v);
    attrs.push_back(a);
    return *this;
  }
  OneNode& String(const std::string& name, const std::string& v) {
    onnx::AttributeProto a;
    a.set_name(name);
    a.set_type(onnx::AttributeProto::STRING);
    a.set_s(v);
    attrs.push_back(a);
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
