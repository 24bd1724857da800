// Tests of graph preparation (core/graph/prepare.h): sorting, Constant
// lifting, fp16 weight Casts and BatchNorm folding, checked structurally and,
// for the folds, against ONNX Runtime on the original model; then through
// RunQuantize (Constant-held biases, fp16 weights, opset 9 exports).
#include "core/graph/prepare.h"

#include <string>
#include <tuple>
#include <vector>

#include "core/base/thread_pool.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "core/graph/graph_edit.h"
#include "core/graph/model_io.h"
#include "core/graph/validate.h"
#include "core/numerics/float16.h"
#include "core/passes/fold_constants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/batches.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

using ::quantd::testing::ModelBuilder;
using ::quantd::testing::Wave;
using ::testing::HasSubstr;
namespace tfq = tensorflow::quantization;

int CountOps(const onnx::GraphProto& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.node()) n += node.op_type() == op;
  return n;
}

const onnx::TensorProto* FindInit(const onnx::GraphProto& g,
                                  const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

void SetFloatAttr(onnx::ModelProto* m, const std::string& name, float v) {
  auto* nodes = m->mutable_graph()->mutable_node();
  auto* a = nodes->Mutable(nodes->size() - 1)->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

// Conv(x, W[, b]) -> BatchNormalization -> y, with non-trivial statistics.
ModelBuilder ConvBnModel(bool bias, int64_t group, bool transpose) {
  ModelBuilder b;
  const int64_t c_in = 4, c_out = 6;
  b.Input("x", {2, c_in, 5, 5}).Output("y");
  if (transpose) {
    b.Weight("W", {c_in, c_out / group, 3, 3}, 2);
  } else {
    b.Weight("W", {c_out, c_in / group, 3, 3}, 2);
  }
  std::vector<std::string> ins = {"x", "W"};
  if (bias) {
    b.Weight("B", {c_out}, 3);
    ins.push_back("B");
  }
  b.Node(transpose ? "ConvTranspose" : "Conv", ins, {"c"}, "conv")
      .Attr("group", group);
  b.Initializer("gamma", {c_out}, {1.5f, 0.5f, 2.0f, 0.8f, 1.1f, 0.3f})
      .Initializer("beta", {c_out}, {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -1.0f})
      .Initializer("mean", {c_out}, {0.2f, -0.1f, 0.05f, 0.4f, -0.3f, 0.0f})
      .Initializer("var", {c_out}, {0.5f, 2.0f, 1.0f, 1.0f, 3.0f, 0.8f})
      .Node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"y"},
            "bn");
  SetFloatAttr(&b.model(), "epsilon", 1e-3f);
  return b;
}

// Largest |difference| of the first outputs of two models in ONNX Runtime
// on `x`.
double OrtMaxDiff(const onnx::ModelProto& a, const onnx::ModelProto& b,
                  const executor::Tensor& x) {
  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.File("a.onnx"), a.SerializeAsString());
  testing::WriteFileOrDie(tmp.File("b.onnx"), b.SerializeAsString());
  EXPECT_TRUE(executor::WriteNpyFile(tmp.File("x.npy"), x).ok());
  const std::string json =
      testing::OrtEval({"compare", "--model", tmp.File("a.onnx"), "--model2",
                        tmp.File("b.onnx"), "--x", tmp.File("x.npy")});
  if (json.find("\"identical\":true") != std::string::npos) return 0;
  return testing::JsonNumber(json, "max_abs_diff");
}

executor::Tensor WaveTensor(std::vector<int64_t> shape, int seed) {
  return executor::Tensor::FromVector<float>(
      shape, Wave(testing::Product(shape), seed));
}

std::string WriteTemp(const testing::TempDir& dir, const onnx::ModelProto& m,
                      const std::string& file) {
  const std::string path = dir.File(file);
  testing::WriteFileOrDie(path, m.SerializeAsString());
  return path;
}
std::string WriteTempNpy(const testing::TempDir& dir, const executor::Tensor& t,
                         const std::string& file) {
  const std::string path = dir.File(file);
  EXPECT_TRUE(executor::WriteNpyFile(path, t).ok());
  return path;
}

TEST(SortTopologically, SortsStablyAndRefusesCycles) {
  ModelBuilder b;
  b.Input("x", {1, 4}).Output("z", {1, 4});
  b.Node("Relu", {"y"}, {"z"}, "second");  // Reads what the next writes.
  b.Node("Sigmoid", {"x"}, {"y"}, "first");
  b.Node("Tanh", {"x"}, {"unused"}, "independent");
  onnx::ModelProto m = b.Build();
  absl::StatusOr<graph::PrepareReport> r =
      graph::PrepareGraph(&m, graph::PrepareOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(m.graph().node(0).name(), "first");
  EXPECT_EQ(m.graph().node(1).name(), "second");
  EXPECT_EQ(m.graph().node(2).name(), "independent");
  EXPECT_GT(r->reordered_nodes, 0);
  EXPECT_TRUE(graph::ValidateModel(m, "prepared", nullptr).ok());
  EXPECT_THAT(r->Summary(), HasSubstr("reordered"));

  // Already sorted: nothing moves.
  int64_t moved = 0;
  ASSERT_TRUE(graph::SortTopologically(m.mutable_graph(), &moved).ok());
  EXPECT_EQ(moved, 0);

  ModelBuilder c;
  c.Input("x", {1, 4}).Output("z", {1, 4});
  c.Node("Add", {"x", "b"}, {"a"}, "loop_a");
  c.Node("Relu", {"a"}, {"b"}, "loop_b");
  c.Node("Relu", {"a"}, {"z"}, "out");
  onnx::ModelProto cyclic = c.Build();
  absl::StatusOr<graph::PrepareReport> bad =
      graph::PrepareGraph(&cyclic, graph::PrepareOptions());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("cycle"));
  EXPECT_THAT(bad.status().message(), HasSubstr("loop_"));
}

TEST(LiftConstants, MainGraphAndBodiesKeepTheirScope) {
  ModelBuilder b;
  b.Input("x", {1, 3, 4, 4}).Output("y").Output("z");
  b.ConstantWeight("W", {2, 3, 3, 3}, 1).ConstantWeight("B", {2}, 2);
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv");
  // If whose then-branch holds its own Constant.
  b.Input("cond", {}, onnx::TensorProto::BOOL);
  b.Node("If", {"cond"}, {"z"}, "if");
  onnx::NodeProto* if_node = b.model().mutable_graph()->mutable_node(
      b.model().graph().node_size() - 1);
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = if_node->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* g = a->mutable_g();
    g->set_name(branch);
    onnx::NodeProto* k = g->add_node();
    k->set_op_type("Constant");
    k->set_name(std::string(branch) + "_k");
    k->add_output(std::string(branch) + "_k_out");
    auto* v = k->add_attribute();
    v->set_name("value_floats");
    v->set_type(onnx::AttributeProto::FLOATS);
    v->add_floats(1.0f);
    v->add_floats(2.0f);
    onnx::NodeProto* add = g->add_node();
    add->set_op_type("Add");
    add->set_name(std::string(branch) + "_add");
    add->add_input(std::string(branch) + "_k_out");
    add->add_input("B");  // Outer value.
    add->add_output(std::string(branch) + "_out");
    auto* o = g->add_output();
    o->set_name(std::string(branch) + "_out");
    o->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
  }
  onnx::ModelProto m = b.Build();
  absl::StatusOr<graph::PrepareReport> r =
      graph::PrepareGraph(&m, graph::PrepareOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->lifted_constants, 4);
  EXPECT_EQ(CountOps(m.graph(), "Constant"), 0);
  ASSERT_NE(FindInit(m.graph(), "W"), nullptr);
  ASSERT_NE(FindInit(m.graph(), "B"), nullptr);
  const onnx::GraphProto& then_g = m.graph().node(1).attribute(0).g();
  EXPECT_EQ(CountOps(then_g, "Constant"), 0);
  EXPECT_NE(FindInit(then_g, "then_branch_k_out"), nullptr);
  EXPECT_EQ(FindInit(m.graph(), "then_branch_k_out"), nullptr);
  EXPECT_TRUE(graph::ValidateModel(m, "prepared", nullptr).ok());
}

TEST(FoldBatchNorms, ConvVariantsMatchOnnxRuntime) {
  struct Case {
    bool bias;
    int64_t group;
    bool transpose;
  };
  for (const Case c :
       {Case{true, 1, false}, Case{false, 1, false}, Case{true, 2, false},
        Case{false, 2, true}, Case{true, 1, true}}) {
    SCOPED_TRACE(::testing::Message()
                 << "bias " << c.bias << " group " << c.group << " transpose "
                 << c.transpose);
    const onnx::ModelProto original =
        ConvBnModel(c.bias, c.group, c.transpose).Build();
    onnx::ModelProto m = original;
    absl::StatusOr<graph::PrepareReport> r =
        graph::PrepareGraph(&m, graph::PrepareOptions());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->folded_batch_norms, 1);
    EXPECT_EQ(CountOps(m.graph(), "BatchNormalization"), 0);
    EXPECT_EQ(m.graph().initializer_size(), 2);  // W and bias, folded.
    EXPECT_TRUE(graph::ValidateModel(m, "prepared", nullptr).ok());
    // Inputs of a quarter of Wave's size keep the outputs near 1, so 1e-5
    // measures the fold rather than float32 rounding of large values.
    executor::Tensor x = WaveTensor({2, 4, 5, 5}, 7);
    for (int64_t i = 0; i < x.size(); ++i) x.mutable_data<float>()[i] *= 0.25f;
    EXPECT_LE(OrtMaxDiff(original, m, x), 1e-5);
  }
}

TEST(FoldBatchNorms, GemmFoldsAndSharedConvDoesNot) {
  ModelBuilder b;
  b.Input("x", {3, 8}).Output("y");
  b.Weight("W", {6, 8}, 2).Weight("C", {6}, 3);
  b.Node("Gemm", {"x", "W", "C"}, {"g"}, "gemm").Attr("transB", 1);
  SetFloatAttr(&b.model(), "beta", 0.5f);
  b.Initializer("gamma", {6}, {1.5f, 0.5f, 2.0f, 0.8f, 1.1f, 0.3f})
      .Initializer("beta", {6}, {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -1.0f})
      .Initializer("mean", {6}, {0.2f, -0.1f, 0.05f, 0.4f, -0.3f, 0.0f})
      .Initializer("var", {6}, {0.5f, 2.0f, 1.0f, 1.0f, 3.0f, 0.8f})
      .Node("BatchNormalization", {"g", "gamma", "beta", "mean", "var"}, {"y"},
            "bn");
  const onnx::ModelProto original = b.Build();
  onnx::ModelProto m = original;
  absl::StatusOr<graph::PrepareReport> r =
      graph::PrepareGraph(&m, graph::PrepareOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->folded_batch_norms, 1);
  EXPECT_LE(OrtMaxDiff(original, m, WaveTensor({3, 8}, 5)), 1e-5);

  // The Conv output is also a graph output: the BN must stay.
  onnx::ModelProto shared = ConvBnModel(true, 1, false).Build();
  auto* out = shared.mutable_graph()->add_output();
  out->set_name("c");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT);
  r = graph::PrepareGraph(&shared, graph::PrepareOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->folded_batch_norms, 0);
  EXPECT_EQ(CountOps(shared.graph(), "BatchNormalization"), 1);
}

// ------------------------------------------------ through RunQuantize

absl::StatusOr<QuantizeResult> Quantize(
    const std::string& bytes,
    tfq::QuantizationMethod::ExperimentalMethod method, tfq::OpSet op_set,
    const executor::Tensor* calib, int batch = 2) {
  quantd::v1::QuantizeConfig config;
  tfq::QuantizationOptions* options = config.mutable_options();
  options->mutable_quantization_method()->set_experimental_method(method);
  options->set_op_set(op_set);
  options->set_min_num_elements_for_weights(-1);
  CancellationToken cancel;
  if (calib == nullptr) {
    return RunQuantize(config, bytes, {}, cancel, nullptr);
  }
  std::vector<quantd::v1::TensorBatch> batches =
      testing::BatchesOf(*calib, batch);
  BatchQueue queue(batches.size() + 1);
  for (auto& batch : batches) queue.Push(std::move(batch));
  queue.Close();
  return RunQuantize(config, bytes, {}, cancel, nullptr, &queue);
}

std::string AllValidations(const quantd::v1::QuantizeSummary& s) {
  std::string all;
  for (const auto& v : s.validations()) all += v + "\n";
  return all;
}

// Conv with weight and bias in Constant nodes (as Paddle and spox write
// them) -> Relu -> Conv -> Sigmoid.
ModelBuilder ConstantConvModel() {
  ModelBuilder b;
  b.Input("x", {2, 3, 6, 6}).Output("y");
  b.ConstantWeight("W1", {4, 3, 3, 3}, 1).ConstantWeight("B1", {4}, 2);
  b.Node("Conv", {"x", "W1", "B1"}, {"c1"}, "conv1");
  b.Node("Relu", {"c1"}, {"r1"}, "relu1");
  b.ConstantWeight("W2", {5, 4, 3, 3}, 3).ConstantWeight("B2", {5}, 4);
  b.Node("Conv", {"r1", "W2", "B2"}, {"c2"}, "conv2");
  // Not a graph output itself, so UNIFORM_QUANTIZED has an output scale.
  b.Node("Sigmoid", {"c2"}, {"y"}, "sigmoid");
  return b;
}

TEST(PrepareThroughQuantize, ConstantBiasBecomesInt32AndIsLowered) {
  const std::string bytes = ConstantConvModel().Bytes();
  const executor::Tensor calib = WaveTensor({4, 3, 6, 6}, 9);
  absl::StatusOr<QuantizeResult> tf =
      Quantize(bytes, tfq::QuantizationMethod::STATIC_RANGE, tfq::TF, &calib);
  ASSERT_TRUE(tf.ok()) << tf.status();
  EXPECT_THAT(AllValidations(tf->summary), HasSubstr("Constant nodes lifted"));
  absl::StatusOr<onnx::ModelProto> out = graph::ParseModel(tf->model);
  ASSERT_TRUE(out.ok());
  int int32_biases = 0;
  for (const auto& t : out->graph().initializer()) {
    int32_biases += t.data_type() == onnx::TensorProto::INT32 &&
                    (t.name() == "B1_quantized" || t.name() == "B2_quantized");
  }
  EXPECT_EQ(int32_biases, 2);
  for (const auto& s : tf->summary.skipped()) {
    EXPECT_THAT(s.detail(), ::testing::Not(HasSubstr("not an initializer")));
  }

  absl::StatusOr<QuantizeResult> uq =
      Quantize(bytes, tfq::QuantizationMethod::STATIC_RANGE,
               tfq::UNIFORM_QUANTIZED, &calib);
  ASSERT_TRUE(uq.ok()) << uq.status();
  out = graph::ParseModel(uq->model);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(CountOps(out->graph(), "QLinearConv"), 2);
  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.File("q.onnx"), uq->model);
  testing::WriteFileOrDie(tmp.File("f.onnx"), bytes);
  ASSERT_TRUE(executor::WriteNpyFile(tmp.File("x.npy"), calib).ok());
  const std::string json =
      testing::OrtEval({"compare", "--model", tmp.File("f.onnx"), "--model2",
                        tmp.File("q.onnx"), "--x", tmp.File("x.npy")});
  EXPECT_GT(testing::JsonNumber(json, "sqnr_db"), 15.0) << json;
}

TEST(PrepareThroughQuantize, Fp16WeightsBehindCastAreQuantized) {
  ModelBuilder b;
  b.Input("x", {2, 16}).Output("y");
  onnx::TensorProto w;
  w.set_name("W16");
  w.set_data_type(onnx::TensorProto::FLOAT16);
  w.add_dims(16);
  w.add_dims(8);
  // Halves of Wave-like values: 0x3C00 = 1.0, with sign and mantissa spread.
  std::string raw;
  for (int i = 0; i < 16 * 8; ++i) {
    const uint16_t h = static_cast<uint16_t>((i % 3 == 0 ? 0x8000 : 0) |
                                             (0x3000 + (i * 37) % 0x0C00));
    raw.push_back(static_cast<char>(h & 0xff));
    raw.push_back(static_cast<char>(h >> 8));
  }
  w.set_raw_data(raw);
  *b.model().mutable_graph()->add_initializer() = w;
  b.Node("Cast", {"W16"}, {"W"}, "cast").Attr("to", onnx::TensorProto::FLOAT);
  b.Node("MatMul", {"x", "W"}, {"y"}, "matmul");
  const std::string bytes = b.Bytes();

  onnx::ModelProto m = b.Build();
  absl::StatusOr<graph::PrepareReport> r =
      graph::PrepareGraph(&m, graph::PrepareOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->folded_weight_casts, 1);
  EXPECT_EQ(CountOps(m.graph(), "Cast"), 0);
  ASSERT_NE(FindInit(m.graph(), "W"), nullptr);
  EXPECT_EQ(FindInit(m.graph(), "W")->data_type(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(FindInit(m.graph(), "W16"), nullptr);
  EXPECT_EQ(OrtMaxDiff(b.Build(), m, WaveTensor({2, 16}, 3)), 0.0);

  absl::StatusOr<QuantizeResult> q =
      Quantize(bytes, tfq::QuantizationMethod::DYNAMIC_RANGE, tfq::TF, nullptr);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->summary.quantized_tensors(), 1);
  EXPECT_FALSE(q->summary.model_unchanged());
}

// A FLOAT16 tensor of `dims` from Wave values.
onnx::TensorProto HalfTensor(const std::string& name,
                             const std::vector<int64_t>& dims, int seed) {
  const std::vector<float> v = Wave(testing::Product(dims), seed);
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT16);
  for (int64_t d : dims) t.add_dims(d);
  std::string raw;
  for (float f : v) {
    const uint16_t h = numerics::FloatToHalf(f);
    raw.push_back(static_cast<char>(h & 0xff));
    raw.push_back(static_cast<char>(h >> 8));
  }
  t.set_raw_data(raw);
  return t;
}

// x (FLOAT16) -> MatMul W16 -> Add B16 -> Cast(to FLOAT16) -> Relu -> y
// (FLOAT16): a model computing in half, as `model.half()` exports.
ModelBuilder HalfModel() {
  ModelBuilder h;
  h.Input("x", {4, 16}, onnx::TensorProto::FLOAT16)
      .Output("y", {4, 8}, onnx::TensorProto::FLOAT16);
  *h.model().mutable_graph()->add_initializer() = HalfTensor("W16", {16, 8}, 1);
  *h.model().mutable_graph()->add_initializer() = HalfTensor("B16", {8}, 2);
  h.Node("MatMul", {"x", "W16"}, {"m"}, "matmul16")
      .Node("Add", {"m", "B16"}, {"a"}, "add16")
      .Node("Cast", {"a"}, {"c"}, "cast16")
      .Attr("to", onnx::TensorProto::FLOAT16)
      .Node("Relu", {"c"}, {"y"}, "relu16");
  return h;
}

TEST(WidenHalfCompute, HalfModelComputesInFloat32) {
  onnx::ModelProto m = HalfModel().Build();
  absl::StatusOr<graph::PrepareReport> r =
      graph::PrepareGraph(&m, graph::PrepareOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->half_interface.inputs.size(), 1u);
  EXPECT_EQ(r->half_interface.inputs[0].name, "x");
  EXPECT_EQ(r->half_interface.inputs[0].elem_type, onnx::TensorProto::FLOAT16);
  ASSERT_EQ(r->half_interface.outputs.size(), 1u);
  EXPECT_EQ(r->half_interface.outputs[0].name, "y");
  // Two initializers, the Cast, the input and the output.
  EXPECT_EQ(r->widened_half_tensors, 5);
  EXPECT_THAT(r->Summary(), HasSubstr("computes in float32"));
  for (const auto& t : m.graph().initializer()) {
    EXPECT_EQ(t.data_type(), onnx::TensorProto::FLOAT) << t.name();
  }
  EXPECT_EQ(m.graph().input(0).type().tensor_type().elem_type(),
            onnx::TensorProto::FLOAT);
  EXPECT_EQ(graph::IntAttribute(m.graph().node(2), "to", 0),
            onnx::TensorProto::FLOAT);
  // float32 values now: 4 bytes each.
  EXPECT_EQ(FindInit(m.graph(), "W16")->raw_data().size(), 16u * 8u * 4u);

  // Back to the caller's interface: half in and out through Casts.
  graph::RestoreHalfInterface(r->half_interface, &m);
  EXPECT_EQ(m.graph().input(0).type().tensor_type().elem_type(),
            onnx::TensorProto::FLOAT16);
  EXPECT_EQ(m.graph().output(0).type().tensor_type().elem_type(),
            onnx::TensorProto::FLOAT16);
  EXPECT_EQ(CountOps(m.graph(), "Cast"), 3);
  EXPECT_TRUE(graph::ValidateModel(m, "restored", nullptr).ok());
  // ONNX Runtime: the float32-computing model against the half one.
  testing::TempDir tmp;
  const std::string json = testing::OrtEval(
      {"compare", "--model", WriteTemp(tmp, HalfModel().Build(), "half.onnx"),
       "--model2", WriteTemp(tmp, m, "wide.onnx"), "--x",
       WriteTempNpy(tmp, WaveTensor({4, 16}, 9), "x.npy")});
  // Half results either way; widening only rounds less on the way.
  EXPECT_LE(testing::JsonNumber(json, "max_abs_diff"), 1e-2) << json;
}

TEST(WidenHalfCompute, FloatModelsAreLeftAlone) {
  onnx::ModelProto m = ConvBnModel(true, 1, false).Build();
  graph::PrepareReport r;
  absl::StatusOr<bool> widened = graph::WidenHalfCompute(&m, &r);
  ASSERT_TRUE(widened.ok());
  EXPECT_FALSE(*widened);
  EXPECT_EQ(r.widened_half_tensors, 0);
}

// Both methods on a model computing in half: quantized in float32, returned
// with the half interface, and close to the half model in ONNX Runtime.
TEST(PrepareThroughQuantize, HalfComputeModelIsQuantized) {
  const std::string bytes = HalfModel().Bytes();
  const executor::Tensor calib = WaveTensor({8, 16}, 4);
  for (auto method : {tfq::QuantizationMethod::DYNAMIC_RANGE,
                      tfq::QuantizationMethod::STATIC_RANGE}) {
    absl::StatusOr<QuantizeResult> q = Quantize(
        bytes, method, tfq::TF,
        method == tfq::QuantizationMethod::STATIC_RANGE ? &calib : nullptr,
        /*batch=*/4);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_GT(q->summary.quantized_tensors(), 0);
    absl::StatusOr<onnx::ModelProto> out = graph::ParseModel(q->model);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->graph().input(0).type().tensor_type().elem_type(),
              onnx::TensorProto::FLOAT16);
    EXPECT_EQ(out->graph().output(0).type().tensor_type().elem_type(),
              onnx::TensorProto::FLOAT16);
    testing::TempDir tmp;
    const std::string json = testing::OrtEval(
        {"compare", "--model", WriteTemp(tmp, HalfModel().Build(), "half.onnx"),
         "--model2", WriteTemp(tmp, *out, "q.onnx"), "--x",
         WriteTempNpy(tmp, WaveTensor({4, 16}, 9), "x.npy")});
    std::printf(
        "measured: half model, %s: %s\n",
        tfq::QuantizationMethod::ExperimentalMethod_Name(method).c_str(),
        json.c_str());
    EXPECT_GE(testing::JsonNumber(json, "sqnr_db"), 25) << json;
  }
}

TEST(PrepareThroughQuantize, ModelUnchangedExactlyWhenBytesAreEqual) {
  ModelBuilder b;
  b.Input("x", {2, 4}).Output("y", {2, 4});
  b.Node("Relu", {"x"}, {"y"}, "relu");
  const std::string bytes = b.Bytes();
  absl::StatusOr<QuantizeResult> q =
      Quantize(bytes, tfq::QuantizationMethod::DYNAMIC_RANGE, tfq::TF, nullptr);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->model == bytes, q->summary.model_unchanged());
  EXPECT_TRUE(q->summary.model_unchanged());

  absl::StatusOr<QuantizeResult> changed =
      Quantize(ConstantConvModel().Bytes(),
               tfq::QuantizationMethod::DYNAMIC_RANGE, tfq::TF, nullptr);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(changed->summary.model_unchanged());
}

// Conv -> Relu -> Transpose -> If whose bodies read the transposed value:
// no quantized op reads the Relu, so its output gets no point (ONNX Runtime
// 1.30 aborts loading one there); the point goes on the Conv's own output,
// which a quantized op produced, and the model runs in ONNX Runtime.
TEST(PrepareThroughQuantize, PointStaysOnConvWhenNoQuantizedOpReadsRelu) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4, 4}).Output("y");
  b.Weight("W", {4, 3, 1, 1}, 1);
  b.Node("Conv", {"x", "W"}, {"c"}, "conv");
  b.Node("Relu", {"c"}, {"r"}, "relu");
  b.Node("Transpose", {"r"}, {"t"}, "transpose")
      .Attr("perm", std::vector<int64_t>{0, 2, 3, 1});
  onnx::TensorProto cond;
  cond.set_name("cond");
  cond.set_data_type(onnx::TensorProto::BOOL);
  cond.add_int32_data(1);
  *b.model().mutable_graph()->add_initializer() = cond;
  b.Node("If", {"cond"}, {"y"}, "if");
  onnx::NodeProto* if_node = b.model().mutable_graph()->mutable_node(3);
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = if_node->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* g = a->mutable_g();
    g->set_name(branch);
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(std::string(branch) == "then_branch" ? "Neg" : "Identity");
    n->set_name(std::string(branch) + "_op");
    n->add_input("t");
    n->add_output(std::string(branch) + "_out");
    auto* o = g->add_output();
    o->set_name(std::string(branch) + "_out");
    o->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
  }
  const executor::Tensor calib = WaveTensor({4, 3, 4, 4}, 2);
  absl::StatusOr<QuantizeResult> q = Quantize(
      b.Bytes(), tfq::QuantizationMethod::STATIC_RANGE, tfq::TF, &calib);
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<onnx::ModelProto> out = graph::ParseModel(q->model);
  ASSERT_TRUE(out.ok());
  int points_on_conv = 0;
  for (const auto& node : out->graph().node()) {
    if (node.op_type() == "QuantizeLinear") {
      EXPECT_NE(node.input(0), "r");
      if (node.input(0) == "c") ++points_on_conv;
    }
    if (node.op_type() == "Relu") {
      EXPECT_NE(node.input(0), "c");
    }
  }
  EXPECT_EQ(points_on_conv, 1);
  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.File("q.onnx"), q->model);
  testing::WriteFileOrDie(tmp.File("f.onnx"), b.Bytes());
  ASSERT_TRUE(executor::WriteNpyFile(tmp.File("x.npy"), calib).ok());
  const std::string json =
      testing::OrtEval({"compare", "--model", tmp.File("f.onnx"), "--model2",
                        tmp.File("q.onnx"), "--x", tmp.File("x.npy")});
  EXPECT_GT(testing::JsonNumber(json, "sqnr_db"), 20.0) << json;
}

TEST(PrepareThroughQuantize, Opset9TorchExportQuantizesAndRunsInOrt) {
  const std::string model =
      testing::SourcePath("tests/data/prepare/opset9_cnn.onnx");
  const std::string x_npy =
      testing::SourcePath("tests/data/prepare/opset9_x.npy");
  const std::string bytes = testing::ReadFileOrDie(model);
  absl::StatusOr<executor::Tensor> x = executor::ReadNpyFile(x_npy);
  ASSERT_TRUE(x.ok()) << x.status();
  for (const bool dynamic : {true, false}) {
    SCOPED_TRACE(dynamic ? "DYNAMIC_RANGE" : "STATIC_RANGE");
    absl::StatusOr<QuantizeResult> q =
        Quantize(bytes,
                 dynamic ? tfq::QuantizationMethod::DYNAMIC_RANGE
                         : tfq::QuantizationMethod::STATIC_RANGE,
                 tfq::TF, dynamic ? nullptr : &*x, 4);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->summary.input_opset(), 9);
    EXPECT_GE(q->summary.output_opset(), 13);
    EXPECT_GE(q->summary.quantized_nodes(), 3);
    EXPECT_THAT(AllValidations(q->summary), HasSubstr("upgraded from 9 to 13"));
    testing::TempDir tmp;
    testing::WriteFileOrDie(tmp.File("q.onnx"), q->model);
    const std::string json =
        testing::OrtEval({"compare", "--model", model, "--model2",
                          tmp.File("q.onnx"), "--x", x_npy});
    EXPECT_GT(testing::JsonNumber(json, "sqnr_db"), 20.0) << json;
  }
}

}  // namespace
}  // namespace quantd
