// The single-node executor test harness: one node in a model of a given
// opset, run through Executor::Create and Run, so op tests state only the
// node, its attributes and its inputs. Also the small helpers the executor
// tests share (tensor shorthands, goldens, error and closeness checks), so
// none is defined twice.
#ifndef QUANTD_TESTS_CORE_EXECUTOR_NODE_TESTER_H_
#define QUANTD_TESTS_CORE_EXECUTOR_NODE_TESTER_H_

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "core/numerics/int4.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/support/test_paths.h"

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

// Shorthands for T1<float> and T1<int64_t>.
inline Tensor Floats(std::vector<int64_t> shape, std::vector<float> v) {
  return Tensor::FromVector<float>(std::move(shape), v);
}
inline Tensor I64(std::vector<int64_t> shape, std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(std::move(shape), v);
}

// `n` floats uniform in [-1, 1) from mt19937(seed).
inline std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(gen);
  return v;
}

// A FLOAT tensor widened to DOUBLE; any other tensor as is.
inline Tensor ToDouble(const Tensor& t) {
  if (t.dtype() != onnx::TensorProto::FLOAT) return t;
  Tensor d(onnx::TensorProto::DOUBLE, t.shape());
  for (int64_t i = 0; i < t.size(); ++i) {
    d.mutable_data<double>()[i] = t.data<float>()[i];
  }
  return d;
}

// tests/data/executor/rnn_image/<name>.npy (the goldens of the RNN and image
// ops); an empty Tensor and a test failure if unreadable.
inline Tensor RnnImageGolden(const std::string& name) {
  absl::StatusOr<Tensor> t = ReadNpyFile(
      testing::SourcePath("tests/data/executor/rnn_image/" + name + ".npy"));
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  return t.ok() ? *t : Tensor();
}

// Whether scripts/setup.sh installed onnxruntime-node.
inline bool OrtAvailable() {
  return std::filesystem::exists(std::string(QUANTD_ORT_NODE_PATH) +
                                 "/onnxruntime-node");
}

// Adds STRING attribute `name` = `value` to the last node of `m`.
inline void AddStringAttr(onnx::ModelProto* m, const std::string& name,
                          const std::string& value) {
  auto* nodes = m->mutable_graph()->mutable_node();
  auto* a = nodes->Mutable(nodes->size() - 1)->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

// `r` is an error of `code` whose message contains `part`.
inline void ExpectError(const absl::StatusOr<Tensor>& r, absl::StatusCode code,
                        const std::string& part) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << part << "'";
  EXPECT_EQ(r.status().code(), code) << r.status();
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr(part));
}

// The executor for `m`, or nullptr and a test failure.
inline std::unique_ptr<Executor> MustCreate(const onnx::ModelProto& m) {
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(m);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
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

  // Fluent input setters, in input order: a fed graph input, an
  // initializer (its value known at Create), an omitted optional input.
  OneNode& In(Tensor t) {
    inputs.push_back(std::move(t));
    return *this;
  }
  OneNode& Const(Tensor t) {
    constant.resize(inputs.size(), false);
    constant.push_back(true);
    inputs.push_back(std::move(t));
    return *this;
  }
  OneNode& None() {
    inputs.emplace_back();
    return *this;
  }

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

  // The executor for Model(), or the Create error.
  absl::StatusOr<std::unique_ptr<Executor>> Create() const {
    return Executor::Create(Model());
  }

  absl::StatusOr<std::vector<Tensor>> Run(ThreadPool* pool = nullptr) const {
    absl::StatusOr<std::unique_ptr<Executor>> e = Create();
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
