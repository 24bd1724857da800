// Small ONNX models built in C++ for the core tests: a fluent builder and
// deterministic weight values.
#ifndef QUANTD_TESTS_CORE_GRAPH_TEST_MODELS_H_
#define QUANTD_TESTS_CORE_GRAPH_TEST_MODELS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace quantd::testing {

// n deterministic values in about [-1, 1], different per seed and never all
// equal, so every channel has a real range.
inline std::vector<float> Wave(int64_t n, int seed = 1) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(std::sin(0.37 * i + seed) *
                              (1.0 + 0.5 * std::cos(0.011 * i * seed)));
  }
  return v;
}

inline int64_t Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13, int64_t ir_version = 7) {
    model_.set_ir_version(ir_version);
    model_.set_producer_name("quantd-tests");
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  ModelBuilder& Input(const std::string& name, std::vector<int64_t> dims,
                      int32_t type = onnx::TensorProto::FLOAT) {
    SetType(model_.mutable_graph()->add_input(), name, dims, type);
    return *this;
  }
  ModelBuilder& Output(const std::string& name, std::vector<int64_t> dims = {},
                       int32_t type = onnx::TensorProto::FLOAT) {
    SetType(model_.mutable_graph()->add_output(), name, dims, type);
    return *this;
  }
  ModelBuilder& Initializer(const std::string& name, std::vector<int64_t> dims,
                            const std::vector<float>& values) {
    *model_.mutable_graph()->add_initializer() =
        FloatTensor(name, dims, values);
    return *this;
  }
  // An initializer with Wave values, in float_data instead of raw_data when
  // asked (both encodings are legal).
  ModelBuilder& Weight(const std::string& name, std::vector<int64_t> dims,
                       int seed = 1, bool float_data = false) {
    onnx::TensorProto t = FloatTensor(name, dims, Wave(Product(dims), seed));
    if (float_data) {
      std::vector<float> v = Wave(Product(dims), seed);
      t.clear_raw_data();
      for (float f : v) t.add_float_data(f);
    }
    *model_.mutable_graph()->add_initializer() = t;
    return *this;
  }
  ModelBuilder& ConstantWeight(const std::string& output,
                               std::vector<int64_t> dims, int seed = 1) {
    onnx::NodeProto* node = model_.mutable_graph()->add_node();
    node->set_op_type("Constant");
    node->set_name(output + "_const");
    node->add_output(output);
    auto* a = node->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = FloatTensor("", dims, Wave(Product(dims), seed));
    return *this;
  }
  ModelBuilder& Node(const std::string& op, std::vector<std::string> inputs,
                     std::vector<std::string> outputs,
                     const std::string& name = "") {
    onnx::NodeProto* node = model_.mutable_graph()->add_node();
    node->set_op_type(op);
    node->set_name(name.empty() ? outputs.at(0) + "_node" : name);
    for (auto& i : inputs) node->add_input(i);
    for (auto& o : outputs) node->add_output(o);
    return *this;
  }
  // Sets an int attribute on the last node added.
  ModelBuilder& Attr(const std::string& name, int64_t value) {
    auto* a = LastNode()->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
    return *this;
  }
  ModelBuilder& Attr(const std::string& name, std::vector<int64_t> values) {
    auto* a = LastNode()->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
    return *this;
  }

  onnx::ModelProto& model() { return model_; }
  onnx::ModelProto Build() const { return model_; }
  std::string Bytes() const { return model_.SerializeAsString(); }

  static onnx::TensorProto FloatTensor(const std::string& name,
                                       const std::vector<int64_t>& dims,
                                       const std::vector<float>& values) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float)));
    return t;
  }

 private:
  onnx::NodeProto* LastNode() {
    auto* nodes = model_.mutable_graph()->mutable_node();
    return nodes->Mutable(nodes->size() - 1);
  }
  static void SetType(onnx::ValueInfoProto* v, const std::string& name,
                      const std::vector<int64_t>& dims, int32_t type) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    // The 1.12 checker wants a shape on graph inputs and outputs; an empty
    // one is enough for tests that do not care.
    auto* shape = t->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }

  onnx::ModelProto model_;
};

// x[batch, k] -> MatMul with a [k, n] weight -> y. k*n elements.
inline ModelBuilder MatMulModel(int64_t k = 64, int64_t n = 32,
                                int64_t opset = 13) {
  ModelBuilder b(opset);
  b.Input("x", {2, k})
      .Weight("W", {k, n})
      .Node("MatMul", {"x", "W"}, {"y"}, "mm")
      .Output("y", {2, n});
  return b;
}

// x[1, c, 8, 8] -> Conv with a [m, c, 3, 3] weight and bias -> Relu -> y.
inline ModelBuilder ConvModel(int64_t c = 8, int64_t m = 16,
                              int64_t opset = 13) {
  ModelBuilder b(opset);
  b.Input("x", {1, c, 8, 8})
      .Weight("W", {m, c, 3, 3})
      .Weight("bias", {m}, 7)
      .Node("Conv", {"x", "W", "bias"}, {"conv"}, "conv0")
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Node("Relu", {"conv"}, {"y"}, "relu0")
      .Output("y", {1, m, 8, 8});
  return b;
}

// y = x + RoiAlign(image, rois, batch_index) with every RoiAlign input a
// constant: 1024 RoIs of 2^20 samples each (2^30, the most one node may do),
// which constant folding computes for seconds (7.5 s on one core) before a
// job can go on. x is [1024, 1, 1, 1].
inline onnx::ModelProto LongFoldModel() {
  ModelBuilder b(16);
  b.Input("x", {1024, 1, 1, 1}).Output("y", {1024, 1, 1, 1});
  b.Initializer("image", {1, 1, 64, 64}, Wave(64 * 64, 3));
  std::vector<float> boxes;
  for (int i = 0; i < 1024; ++i) boxes.insert(boxes.end(), {0, 0, 63, 63});
  b.Initializer("rois", {1024, 4}, boxes);
  b.Node("RoiAlign", {"image", "rois", "batch_index"}, {"pooled"}, "roi")
      .Attr("output_height", int64_t{1})
      .Attr("output_width", int64_t{1})
      .Attr("sampling_ratio", int64_t{1024});
  b.Node("Add", {"x", "pooled"}, {"y"}, "add");
  onnx::ModelProto m = b.Build();
  onnx::TensorProto* index = m.mutable_graph()->add_initializer();
  index->set_name("batch_index");
  index->set_data_type(onnx::TensorProto::INT64);
  index->add_dims(1024);
  for (int i = 0; i < 1024; ++i) index->add_int64_data(0);
  return m;
}

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_CORE_GRAPH_TEST_MODELS_H_
