#include "core/passes/dynamic_range_pass.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "core/graph/graph_edit.h"
#include "core/graph/model_io.h"
#include "core/graph/tensor_util.h"
#include "core/graph/validate.h"
#include "core/numerics/int4.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"

namespace quantd::passes {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ModelBuilder;
using testing::Wave;

std::vector<const onnx::NodeProto*> NodesOf(const onnx::ModelProto& m,
                                            const std::string& op) {
  std::vector<const onnx::NodeProto*> out;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == op) out.push_back(&n);
  }
  return out;
}

const onnx::NodeProto* NodeNamed(const onnx::ModelProto& m,
                                 const std::string& name) {
  for (const auto& n : m.graph().node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

const onnx::TensorProto* Init(const onnx::ModelProto& m,
                              const std::string& name) {
  for (const auto& t : m.graph().initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

int64_t AxisOf(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "axis") return a.i();
  }
  return -100;  // No axis attribute.
}

// The weight `name` as the DequantizeLinear producing it computes it,
// written out independently of numerics:: (q - zp) * scale along the axis.
struct Dequantized {
  std::vector<float> values;
  std::vector<int8_t> q;
  int64_t axis = -100;
  std::vector<int64_t> scale_dims;
};
Dequantized DequantizeInModel(const onnx::ModelProto& m,
                              const std::string& name) {
  Dequantized out;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "DequantizeLinear" || n.output(0) != name) continue;
    const onnx::TensorProto* q = Init(m, n.input(0));
    const onnx::TensorProto* s = Init(m, n.input(1));
    const onnx::TensorProto* z = Init(m, n.input(2));
    EXPECT_TRUE(q && s && z);
    if (!(q && s && z)) return out;
    EXPECT_EQ(q->data_type(), onnx::TensorProto::INT8);
    EXPECT_EQ(z->data_type(), onnx::TensorProto::INT8);
    out.axis = AxisOf(n);
    out.scale_dims = graph::Dims(*s);
    std::vector<float> scales = *graph::ReadFloatTensor(*s);
    const std::string& raw = q->raw_data();
    int64_t inner = 1, channels = 1;
    if (out.axis >= 0) {
      channels = q->dims(out.axis);
      for (int d = out.axis + 1; d < q->dims_size(); ++d) inner *= q->dims(d);
    }
    for (size_t i = 0; i < raw.size(); ++i) {
      const int64_t c = (static_cast<int64_t>(i) / inner) % channels;
      const int8_t qv = static_cast<int8_t>(raw[i]);
      const int8_t zp = static_cast<int8_t>(z->raw_data()[c]);
      out.q.push_back(qv);
      out.values.push_back(scales[c] * static_cast<float>(qv - zp));
    }
  }
  return out;
}

class PassTest : public ::testing::Test {
 protected:
  PassTest() { options_.min_num_elements = 0; }

  // Runs the pass on `m` in place and checks the result is a valid model.
  PassStats Run(onnx::ModelProto* m) {
    PassHooks hooks;
    hooks.on_report = [this](const quantd::v1::TensorReport& r) {
      reports_.push_back(r);
    };
    absl::StatusOr<PassStats> stats = RunDynamicRangePass(options_, hooks, m);
    EXPECT_TRUE(stats.ok()) << stats.status();
    absl::Status valid = graph::ValidateModel(*m, "output", nullptr);
    EXPECT_TRUE(valid.ok()) << valid;
    return stats.ok() ? *stats : PassStats();
  }

  // Every dequantized value is within half a step of the original.
  void ExpectClose(const onnx::ModelProto& m, const std::string& name,
                   const std::vector<float>& original) {
    Dequantized d = DequantizeInModel(m, name);
    ASSERT_EQ(d.values.size(), original.size());
    const float max_abs = std::abs(*std::max_element(
        original.begin(), original.end(),
        [](float a, float b) { return std::abs(a) < std::abs(b); }));
    for (size_t i = 0; i < original.size(); ++i) {
      ASSERT_NEAR(d.values[i], original[i], max_abs / 127.0f / 2.0f * 1.001f)
          << "at element " << i;
    }
  }

  WeightPassOptions options_;
  std::vector<quantd::v1::TensorReport> reports_;
};

TEST_F(PassTest, ConvWeightPerChannelOnAxis0) {
  onnx::ModelProto m = testing::ConvModel(8, 16).Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(stats.quantized_nodes, 1);
  // Bias is input 2, not a candidate; W's float initializer is gone.
  EXPECT_EQ(Init(m, "W"), nullptr);
  ASSERT_NE(Init(m, "W_quantized"), nullptr);
  EXPECT_THAT(graph::Dims(*Init(m, "W_quantized")), ElementsAre(16, 8, 3, 3));
  Dequantized d = DequantizeInModel(m, "W");
  EXPECT_EQ(d.axis, 0);
  EXPECT_THAT(d.scale_dims, ElementsAre(16));
  ExpectClose(m, "W", Wave(16 * 8 * 9, 1));
  // Each channel uses the full symmetric narrow range.
  EXPECT_EQ(*std::max_element(d.q.begin(), d.q.end()), 127);
  EXPECT_GE(*std::min_element(d.q.begin(), d.q.end()), -127);

  // Activation: x -> DynamicQuantizeLinear -> DequantizeLinear -> Conv.
  auto dql = NodesOf(m, "DynamicQuantizeLinear");
  ASSERT_EQ(dql.size(), 1u);
  EXPECT_EQ(dql[0]->input(0), "x");
  const onnx::NodeProto* conv = NodeNamed(m, "conv0");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->input(0), "x_dequantized");
  EXPECT_EQ(conv->input(1), "W");
  EXPECT_EQ(conv->input(2), "bias");

  ASSERT_EQ(reports_.size(), 1u);
  const auto& r = reports_[0];
  EXPECT_EQ(r.node_name(), "conv0");
  EXPECT_EQ(r.op_type(), "Conv");
  EXPECT_EQ(r.tensor_name(), "W");
  EXPECT_EQ(r.num_elements(), 1152);
  EXPECT_TRUE(r.scheme().per_channel());
  EXPECT_EQ(r.scheme().axis(), 0);
  EXPECT_EQ(r.scheme().quant_min(), -127);
  EXPECT_EQ(r.scheme().quant_max(), 127);
  EXPECT_EQ(r.scheme().storage_type(), "INT8");
  EXPECT_LT(r.scale_min(), r.scale_max());
  EXPECT_GT(r.sqnr_db(), 35.0);
  EXPECT_GT(r.mse(), 0.0);
  EXPECT_EQ(stats.weight_bytes_before, 1152u * 4);
  EXPECT_EQ(stats.weight_bytes_after, 1152u + 16 * 4 + 16);
}

TEST_F(PassTest, GemmAxisFollowsTransB) {
  for (int trans_b : {0, 1}) {
    ModelBuilder b(13);
    b.Input("x", {2, 64})
        .Weight("B", trans_b ? std::vector<int64_t>{32, 64}
                             : std::vector<int64_t>{64, 32})
        .Weight("C", {32}, 3)
        .Node("Gemm", {"x", "B", "C"}, {"y"}, "gemm")
        .Attr("transB", trans_b)
        .Output("y", {2, 32});
    onnx::ModelProto m = b.Build();
    Run(&m);
    Dequantized d = DequantizeInModel(m, "B");
    EXPECT_EQ(d.axis, trans_b ? 0 : 1) << "transB=" << trans_b;
    EXPECT_THAT(d.scale_dims, ElementsAre(32));
    ExpectClose(m, "B", Wave(2048, 1));
    EXPECT_NE(Init(m, "C"), nullptr);  // The bias stays float.
  }
}

TEST_F(PassTest, MatMulAxisIsLastOfBAndRank1IsPerTensor) {
  struct Case {
    std::vector<int64_t> x, w;
    int64_t axis;
    std::vector<int64_t> scale_dims;
  };
  // A batched 8-bit weight (rank 3) gets one scale: see
  // BatchedMatMulWeightRunsInOnnxRuntime.
  for (const Case& c : {Case{{2, 64}, {64, 32}, 1, {32}},
                        Case{{4, 2, 64}, {4, 64, 32}, -100, {}},
                        Case{{2, 64}, {64}, -100, {}}}) {
    ModelBuilder b(13);
    b.Input("x", c.x).Weight("W", c.w).Node("MatMul", {"x", "W"}, {"y"}, "mm");
    b.Output("y");
    onnx::ModelProto m = b.Build();
    Run(&m);
    Dequantized d = DequantizeInModel(m, "W");
    EXPECT_EQ(d.axis, c.axis) << "rank " << c.w.size();
    EXPECT_EQ(d.scale_dims, c.scale_dims) << "rank " << c.w.size();
    ExpectClose(m, "W", Wave(testing::Product(c.w), 1));
  }
}

// A constant batched MatMul weight [4, 64, 32] (ONNX's test_matmul_3d with
// its B frozen found it): with per-column scales ONNX Runtime fused
// DequantizeLinear -> MatMul into its integer MatMul, which then failed at
// run time. W8A8 gives it one scale and the session runs; W4A8 (not fused)
// keeps per-column scales.
TEST_F(PassTest, BatchedMatMulWeightRunsInOnnxRuntime) {
  ModelBuilder b(13);
  b.Input("x", {4, 2, 64}).Weight("W", {4, 64, 32});
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm").Output("y");
  const onnx::ModelProto original = b.Build();
  ::quantd::testing::TempDir tmp;
  ::quantd::testing::WriteFileOrDie(tmp.File("f.onnx"),
                                    original.SerializeAsString());
  ASSERT_TRUE(executor::WriteNpyFile(tmp.File("x.npy"),
                                     executor::Tensor::FromVector<float>(
                                         {8, 2, 64}, Wave(8 * 128, 3)))
                  .ok());
  onnx::ModelProto m = original;
  Run(&m);
  EXPECT_EQ(DequantizeInModel(m, "W").axis, -100);
  ::quantd::testing::WriteFileOrDie(tmp.File("q8.onnx"), m.SerializeAsString());
  const std::string json = ::quantd::testing::OrtEval(
      {"compare", "--model", tmp.File("f.onnx"), "--model2",
       tmp.File("q8.onnx"), "--x", tmp.File("x.npy")});
  EXPECT_GT(::quantd::testing::JsonNumber(json, "sqnr_db"), 25.0) << json;

  options_.precision = tensorflow::quantization::PRECISION_W4A8;
  onnx::ModelProto m4 = original;
  Run(&m4);
  ::quantd::testing::WriteFileOrDie(tmp.File("q4.onnx"),
                                    m4.SerializeAsString());
  const std::string json4 = ::quantd::testing::OrtEval(
      {"compare", "--model", tmp.File("f.onnx"), "--model2",
       tmp.File("q4.onnx"), "--x", tmp.File("x.npy")});
  EXPECT_GT(::quantd::testing::JsonNumber(json4, "sqnr_db"), 10.0) << json4;
  ASSERT_FALSE(reports_.empty());
  EXPECT_TRUE(reports_.back().scheme().per_channel());
}

TEST_F(PassTest, SharedWeightGetsOneDequantizeLinear) {
  ModelBuilder b(13);
  b.Input("x1", {2, 64}).Input("x2", {2, 64}).Weight("W", {64, 32});
  b.Node("MatMul", {"x1", "W"}, {"y1"}, "mm1");
  b.Node("MatMul", {"x2", "W"}, {"y2"}, "mm2");
  b.Output("y1").Output("y2");
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(stats.quantized_nodes, 2);
  // One weight DQ (output W) plus one DQ per activation.
  int weight_dq = 0;
  for (auto* n : NodesOf(m, "DequantizeLinear"))
    weight_dq += n->output(0) == "W";
  EXPECT_EQ(weight_dq, 1);
  EXPECT_EQ(NodeNamed(m, "mm1")->input(1), "W");
  EXPECT_EQ(NodeNamed(m, "mm2")->input(1), "W");
  EXPECT_EQ(NodesOf(m, "DynamicQuantizeLinear").size(), 2u);
}

TEST_F(PassTest, WeightSharedWithUnsupportedConsumerIsSkipped) {
  ModelBuilder b(13);
  b.Input("x", {64, 64}).Weight("W", {64, 64});
  b.Node("MatMul", {"x", "W"}, {"y1"}, "mm");
  b.Node("Add", {"x", "W"}, {"y2"}, "add");
  b.Output("y1").Output("y2");
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 0);
  ASSERT_EQ(stats.skipped.size(), 1u);
  EXPECT_EQ(stats.skipped[0].reason(),
            quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER);
  EXPECT_THAT(stats.skipped[0].detail(), HasSubstr("Add 'add'"));
  EXPECT_NE(Init(m, "W"), nullptr);
  EXPECT_TRUE(NodesOf(m, "DynamicQuantizeLinear").empty());
}

// A model whose size barely moves says why: LSTM's W and R below the
// minimum size are reported, not silently left float (larger ones are
// quantized: recurrent_weights_test.cc).
TEST_F(PassTest, SmallRecurrentWeightsAreReported) {
  ModelBuilder b(13);
  b.Input("x", {5, 1, 8}).Weight("W", {1, 16, 8}).Weight("R", {1, 16, 4});
  b.Node("LSTM", {"x", "W", "R"}, {"y"}, "lstm").Attr("hidden_size", 4);
  b.Output("y");
  onnx::ModelProto m = b.Build();
  options_.min_num_elements = kDefaultMinElementsForWeights;
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 0);
  ASSERT_EQ(stats.skipped.size(), 2u);
  for (const auto& skipped : stats.skipped) {
    EXPECT_EQ(skipped.reason(), quantd::v1::SKIP_TOO_FEW_ELEMENTS);
    EXPECT_EQ(skipped.op_type(), "LSTM");
  }
  EXPECT_EQ(stats.skipped[0].tensor_name(), "W");
  EXPECT_EQ(stats.skipped[1].num_elements(), 64);
  EXPECT_NE(Init(m, "W"), nullptr);
}

TEST_F(PassTest, ConsumersDisagreeingOnAxisAreSkipped) {
  // Gemm transB=1 wants axis 0, MatMul wants axis 1 of the same [64, 64].
  ModelBuilder b(13);
  b.Input("x", {2, 64}).Weight("W", {64, 64});
  b.Node("Gemm", {"x", "W"}, {"y1"}, "gemm").Attr("transB", 1);
  b.Node("MatMul", {"x", "W"}, {"y2"}, "mm");
  b.Output("y1").Output("y2");
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  ASSERT_EQ(stats.skipped.size(), 1u);
  EXPECT_EQ(stats.skipped[0].reason(),
            quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER);
  EXPECT_THAT(stats.skipped[0].detail(), HasSubstr("axis"));
  // Per tensor there is nothing to disagree on.
  options_.weights.per_channel = false;
  m = b.Build();
  stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(DequantizeInModel(m, "W").axis, -100);
}

TEST_F(PassTest, SharedActivationGetsOneDynamicQuantizeLinear) {
  ModelBuilder b(13);
  b.Input("in", {2, 64}).Weight("W1", {64, 32}, 1).Weight("W2", {64, 32}, 2);
  b.Node("Relu", {"in"}, {"x"}, "relu");
  b.Node("MatMul", {"x", "W1"}, {"y1"}, "mm1");
  b.Node("MatMul", {"x", "W2"}, {"y2"}, "mm2");
  b.Node("Neg", {"x"}, {"y3"}, "neg");
  b.Output("y1").Output("y2").Output("y3");
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 2);
  auto dql = NodesOf(m, "DynamicQuantizeLinear");
  ASSERT_EQ(dql.size(), 1u);
  EXPECT_EQ(dql[0]->input(0), "x");
  EXPECT_EQ(NodeNamed(m, "mm1")->input(0), "x_dequantized");
  EXPECT_EQ(NodeNamed(m, "mm2")->input(0), "x_dequantized");
  EXPECT_EQ(NodeNamed(m, "neg")->input(0), "x");  // Not quantized: stays float.
  // The pair comes right after Relu (topological order is also validated).
  int relu = -1, dq = -1;
  for (int i = 0; i < m.graph().node_size(); ++i) {
    if (m.graph().node(i).name() == "relu") relu = i;
    if (m.graph().node(i).op_type() == "DynamicQuantizeLinear") dq = i;
  }
  EXPECT_EQ(dq, relu + 1);
}

TEST_F(PassTest, RunningTwiceDoesNotQuantizeAgain) {
  onnx::ModelProto m = testing::MatMulModel().Build();
  Run(&m);
  const int nodes = m.graph().node_size();
  PassStats again = Run(&m);
  EXPECT_EQ(again.quantized_tensors, 0);
  EXPECT_EQ(m.graph().node_size(), nodes);
  ASSERT_EQ(again.skipped.size(), 1u);
  EXPECT_EQ(again.skipped[0].reason(), quantd::v1::SKIP_NOT_CONSTANT);
}

TEST_F(PassTest, MinNumElements) {
  // options_.min_num_elements is already resolved (0 = none) here; the
  // request-level values 0/-1/-5 are covered by the options test.
  options_.min_num_elements = 1024;
  onnx::ModelProto m = testing::MatMulModel(16, 16).Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 0);
  ASSERT_EQ(stats.skipped.size(), 1u);
  EXPECT_EQ(stats.skipped[0].reason(), quantd::v1::SKIP_TOO_FEW_ELEMENTS);
  EXPECT_EQ(stats.skipped[0].num_elements(), 256);
  EXPECT_THAT(stats.skipped[0].detail(), HasSubstr("256"));
  EXPECT_THAT(stats.skipped[0].detail(), HasSubstr("1024"));
  options_.min_num_elements = 256;
  m = testing::MatMulModel(16, 16).Build();
  EXPECT_EQ(Run(&m).quantized_tensors, 1);
}

TEST_F(PassTest, ConstantNodeWeight) {
  ModelBuilder b(13);
  b.Input("x", {2, 64}).ConstantWeight("W", {64, 32}, 5);
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm").Output("y");
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_TRUE(NodesOf(m, "Constant").empty());
  EXPECT_EQ(DequantizeInModel(m, "W").axis, 1);
  ExpectClose(m, "W", Wave(64 * 32, 5));
}

TEST_F(PassTest, InitializerThatIsAlsoAnInputIsNotConstant) {
  onnx::ModelProto m = testing::MatMulModel().Build();
  auto* in = m.mutable_graph()->add_input();
  *in = m.graph().input(0);
  in->set_name("W");
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 0);
  ASSERT_EQ(stats.skipped.size(), 1u);
  EXPECT_EQ(stats.skipped[0].reason(), quantd::v1::SKIP_NOT_CONSTANT);
  EXPECT_THAT(stats.skipped[0].detail(), HasSubstr("graph input"));
}

TEST_F(PassTest, BeforeIr4InitializersListedAsInputsAreConstant) {
  onnx::ModelProto m = testing::MatMulModel().Build();
  m.set_ir_version(3);
  auto* in = m.mutable_graph()->add_input();
  *in = m.graph().input(0);
  in->set_name("W");
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->Clear();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  for (const auto& i : m.graph().input()) EXPECT_NE(i.name(), "W");
}

TEST_F(PassTest, Opset11ModelIsUpgradedTo13) {
  onnx::ModelProto m = testing::ConvModel(8, 16, 11).Build();
  m.set_ir_version(6);
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(graph::DefaultOpset(m), 13);
  EXPECT_THAT(stats.opset_note, HasSubstr("upgraded from 11 to 13"));
  EXPECT_EQ(DequantizeInModel(m, "W").axis, 0);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_THAT(reports_[0].note(), HasSubstr("upgraded"));
}

TEST_F(PassTest, NonFloatWeightIsSkipped) {
  ModelBuilder b(13);
  b.Input("x", {2, 4}, onnx::TensorProto::INT32);
  onnx::TensorProto w;
  w.set_name("W");
  w.set_data_type(onnx::TensorProto::INT32);
  w.add_dims(4);
  w.add_dims(2);
  for (int i = 0; i < 8; ++i) w.add_int32_data(i);
  *b.model().mutable_graph()->add_initializer() = w;
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm")
      .Output("y", {}, onnx::TensorProto::INT32);
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  ASSERT_EQ(stats.skipped.size(), 1u);
  EXPECT_EQ(stats.skipped[0].reason(), quantd::v1::SKIP_NOT_FLOAT);
}

TEST_F(PassTest, FourBitWeightsUseSevenLevelsEachSide) {
  options_.weights.spec.bits = 4;
  onnx::ModelProto m = testing::MatMulModel().Build();
  Run(&m);
  Dequantized d = DequantizeInModel(m, "W");
  EXPECT_EQ(*std::max_element(d.q.begin(), d.q.end()), 7);
  EXPECT_EQ(*std::min_element(d.q.begin(), d.q.end()), -7);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0].scheme().bits(), 4);
  EXPECT_EQ(reports_[0].scheme().quant_min(), -7);
  EXPECT_EQ(reports_[0].scheme().quant_max(), 7);
}

// W4A8: INT4 storage, two values per byte, zero points INT4 too, opset 21;
// the packed values, unpacked independently of the packer's caller, give
// back every weight within half a step of its channel's grid.
TEST_F(PassTest, W4A8StoresPackedInt4AtOpset21) {
  options_.precision = tensorflow::quantization::PRECISION_W4A8;
  onnx::ModelProto m = testing::MatMulModel(64, 32).Build();
  const std::vector<float> original =
      *graph::ReadFloatTensor(m.graph().initializer(0));
  PassStats stats = Run(&m);
  EXPECT_EQ(graph::DefaultOpset(m), 21);
  EXPECT_GE(m.ir_version(), 10);
  EXPECT_THAT(stats.opset_note, HasSubstr("opset raised from 13 to 21"));
  const onnx::NodeProto* dq = nullptr;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "DequantizeLinear" && n.output(0) == "W") dq = &n;
  }
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(AxisOf(*dq), 1);
  const onnx::TensorProto* q = Init(m, dq->input(0));
  const onnx::TensorProto* s = Init(m, dq->input(1));
  const onnx::TensorProto* z = Init(m, dq->input(2));
  ASSERT_TRUE(q && s && z);
  EXPECT_EQ(q->data_type(), numerics::kOnnxInt4);
  EXPECT_EQ(z->data_type(), numerics::kOnnxInt4);
  EXPECT_THAT(graph::Dims(*q), ElementsAre(64, 32));
  EXPECT_EQ(q->raw_data().size(), 64u * 32 / 2);
  EXPECT_EQ(z->raw_data().size(), 16u);
  absl::StatusOr<std::vector<int8_t>> values =
      numerics::UnpackInt4(q->raw_data(), 64 * 32, true);
  absl::StatusOr<std::vector<int8_t>> zps =
      numerics::UnpackInt4(z->raw_data(), 32, true);
  ASSERT_TRUE(values.ok() && zps.ok());
  const std::vector<float> scales = *graph::ReadFloatTensor(*s);
  ASSERT_EQ(scales.size(), 32u);
  std::vector<float> max_abs(32, 0.0f);
  for (int i = 0; i < 64 * 32; ++i) {
    max_abs[i % 32] = std::max(max_abs[i % 32], std::abs(original[i]));
  }
  for (int i = 0; i < 64 * 32; ++i) {
    const int c = i % 32;
    EXPECT_EQ((*zps)[c], 0);
    ASSERT_GE((*values)[i], -7);
    ASSERT_LE((*values)[i], 7);
    ASSERT_NEAR(scales[c] * (*values)[i], original[i],
                max_abs[c] / 7.0f / 2.0f * 1.001f)
        << "at element " << i;
  }
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0].scheme().storage_type(), "INT4");
  EXPECT_EQ(stats.weight_bytes_after, 1024u + 32 * 4 + 16);
  EXPECT_EQ(stats.weight_bytes_before, 64u * 32 * 4);
}

const onnx::NodeProto* DequantizerOf(const onnx::ModelProto& m,
                                     const std::string& weight) {
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "DequantizeLinear" && n.output(0) == weight) return &n;
  }
  return nullptr;
}

// Blockwise W4A8: MatMul B [K, N] is blocked along K (axis 0), Gemm B with
// transB along its axis 1; K = 72 splits into 16 + 16 + 16 + 16 + 8. Every
// unpacked value is within half a step of its own block's grid, the block
// maxima computed here, and ONNX Runtime runs the result close to float.
TEST_F(PassTest, BlockwiseWeightsAlongTheInputAxis) {
  options_.precision = tensorflow::quantization::PRECISION_W4A8;
  options_.weights.block_size = 16;
  ModelBuilder b(13);
  b.Input("x", {4, 72}).Weight("W1", {72, 40}, 3).Weight("W2", {24, 40}, 4);
  b.Node("MatMul", {"x", "W1"}, {"h"}, "mm");
  b.Node("Relu", {"h"}, {"r"}, "relu");
  b.Node("Gemm", {"r", "W2"}, {"y"}, "gemm").Attr("transB", 1);
  b.Output("y");
  onnx::ModelProto m = b.Build();
  const onnx::ModelProto original_model = m;
  const std::vector<float> w1 = *graph::ReadFloatTensor(*Init(m, "W1"));
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 2);
  EXPECT_EQ(graph::DefaultOpset(m), 21);

  struct Want {
    std::string weight;
    int64_t axis;
    std::vector<int64_t> scale_dims;
  };
  for (const Want& want : {Want{"W1", 0, {5, 40}}, Want{"W2", 1, {24, 3}}}) {
    const onnx::NodeProto* dq = DequantizerOf(m, want.weight);
    ASSERT_NE(dq, nullptr) << want.weight;
    EXPECT_EQ(AxisOf(*dq), want.axis);
    EXPECT_EQ(graph::IntAttribute(*dq, "block_size", 0), 16);
    EXPECT_EQ(graph::Dims(*Init(m, dq->input(1))), want.scale_dims);
    EXPECT_EQ(graph::Dims(*Init(m, dq->input(2))), want.scale_dims);
  }
  const onnx::NodeProto* dq = DequantizerOf(m, "W1");
  const std::vector<float> scales =
      *graph::ReadFloatTensor(*Init(m, dq->input(1)));
  absl::StatusOr<std::vector<int8_t>> q =
      numerics::UnpackInt4(Init(m, dq->input(0))->raw_data(), 72 * 40, true);
  ASSERT_TRUE(q.ok());
  for (int k = 0; k < 72; ++k) {
    for (int n = 0; n < 40; ++n) {
      float block_max = 0;
      for (int j = k / 16 * 16; j < std::min(72, k / 16 * 16 + 16); ++j) {
        block_max = std::max(block_max, std::abs(w1[j * 40 + n]));
      }
      const float scale = scales[(k / 16) * 40 + n];
      EXPECT_NEAR(scale, block_max / 7.0f, 1e-6f);
      ASSERT_NEAR(scale * (*q)[k * 40 + n], w1[k * 40 + n],
                  block_max / 7.0f / 2.0f * 1.001f)
          << k << "," << n;
    }
  }
  ASSERT_EQ(reports_.size(), 2u);
  EXPECT_EQ(reports_[0].scheme().block_size(), 16);
  EXPECT_FALSE(reports_[0].scheme().per_channel());

  ::quantd::testing::TempDir tmp;
  ::quantd::testing::WriteFileOrDie(tmp.File("f.onnx"),
                                    original_model.SerializeAsString());
  ::quantd::testing::WriteFileOrDie(tmp.File("q.onnx"), m.SerializeAsString());
  ASSERT_TRUE(executor::WriteNpyFile(
                  tmp.File("x.npy"),
                  executor::Tensor::FromVector<float>({4, 72}, Wave(288, 7)))
                  .ok());
  const std::string json = ::quantd::testing::OrtEval(
      {"compare", "--model", tmp.File("f.onnx"), "--model2", tmp.File("q.onnx"),
       "--x", tmp.File("x.npy"), "--batch", "4"});
  EXPECT_GT(::quantd::testing::JsonNumber(json, "sqnr_db"), 12.0) << json;
}

// weight_params.range MSE: 4-bit weights with heavy tails (Laplacian, as
// trained weights are about) get ranges that clip them, and
// both the weight error and ONNX Runtime's output error drop against
// min/max ranges, per channel and with blocks; reports say "mse".
TEST_F(PassTest, MseRangesBeatMinMaxOnHeavyTailedFourBitWeights) {
  // Laplacian values: -log(u) with a random sign, u from a fixed generator.
  std::mt19937 rng(17);
  std::vector<float> w(96 * 48);
  for (float& v : w) {
    const double u = (static_cast<double>(rng()) + 1.0) / 4294967297.0;
    v = static_cast<float>((rng() & 1 ? 0.05 : -0.05) * -std::log(u));
  }
  ModelBuilder b(13);
  b.Input("x", {8, 96}).Initializer("W", {96, 48}, w);
  b.Node("MatMul", {"x", "W"}, {"y"}, "mm");
  b.Output("y");
  const onnx::ModelProto original = b.Build();
  ::quantd::testing::TempDir tmp;
  ::quantd::testing::WriteFileOrDie(tmp.File("f.onnx"),
                                    original.SerializeAsString());
  // Independent inputs, so that the output error follows the weight error.
  std::vector<float> x(8 * 96);
  for (float& v : x) {
    v = static_cast<float>(static_cast<double>(rng()) / 4294967296.0 - 0.5);
  }
  ASSERT_TRUE(
      executor::WriteNpyFile(tmp.File("x.npy"),
                             executor::Tensor::FromVector<float>({8, 96}, x))
          .ok());
  options_.precision = tensorflow::quantization::PRECISION_W4A8;
  for (int64_t block : {int64_t{0}, int64_t{32}}) {
    double weight_sqnr[2] = {0, 0}, output_sqnr[2] = {0, 0};
    for (int mse = 0; mse < 2; ++mse) {
      options_.weights.block_size = block;
      options_.weights.range =
          mse ? numerics::kMseRangeSearch : numerics::RangeSearch();
      reports_.clear();
      onnx::ModelProto m = original;
      Run(&m);
      ASSERT_EQ(reports_.size(), 1u);
      EXPECT_EQ(reports_[0].scheme().range(), mse ? "mse" : "min_max");
      weight_sqnr[mse] = reports_[0].sqnr_db();
      const std::string q = tmp.File(absl::StrCat("q", block, mse, ".onnx"));
      ::quantd::testing::WriteFileOrDie(q, m.SerializeAsString());
      const std::string json = ::quantd::testing::OrtEval(
          {"compare", "--model", tmp.File("f.onnx"), "--model2", q, "--x",
           tmp.File("x.npy"), "--batch", "8"});
      output_sqnr[mse] = ::quantd::testing::JsonNumber(json, "sqnr_db");
    }
    // Measured: weights +0.8 dB per channel, +0.4 dB with blocks of 32
    // (fewer values per range: less tail to clip); outputs +0.6 / +0.3 dB.
    EXPECT_GT(weight_sqnr[1], weight_sqnr[0] + 0.3) << "block " << block;
    EXPECT_GT(output_sqnr[1], output_sqnr[0] + (block > 0 ? 0.1 : 0.4))
        << "block " << block;
  }
}

// W4A8 with blocks: an INT4 Conv weight [M, C, kh, kw] is blocked along its
// input channels (axis 1), scales [M, ceil(C / 16), kh, kw]; C = 40 splits
// into 16 + 16 + 8 at each tap. Every value is within half a step of its
// own block's grid (the block maxima computed here), a depthwise Conv (one
// input channel per group) stays per channel, and in ONNX Runtime the
// result is closer to float than the same request per channel (the weight's
// input channels differ in magnitude, as trained ones do).
TEST_F(PassTest, BlockwiseFourBitConvAlongInputChannels) {
  options_.precision = tensorflow::quantization::PRECISION_W4A8;
  options_.weights.block_size = 16;
  std::vector<float> values = Wave(12 * 40 * 6, 5);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] *= 0.05f * static_cast<float>(1 + (i / 6 % 40) * 7 % 20);
  }
  ModelBuilder b(13);
  b.Input("x", {2, 40, 6, 6})
      .Initializer("W", {12, 40, 3, 2}, values)
      .Weight("D", {12, 1, 3, 3}, 6);
  b.Node("Conv", {"x", "W"}, {"h"}, "conv")
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 0});
  b.Node("Relu", {"h"}, {"r"}, "relu");
  b.Node("Conv", {"r", "D"}, {"y"}, "dw")
      .Attr("group", 12)
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  b.Output("y");
  onnx::ModelProto m = b.Build();
  const onnx::ModelProto original_model = m;
  const std::vector<float> w = *graph::ReadFloatTensor(*Init(m, "W"));
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 2);
  EXPECT_EQ(graph::DefaultOpset(m), 21);

  const onnx::NodeProto* dq = DequantizerOf(m, "W");
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(AxisOf(*dq), 1);
  EXPECT_EQ(graph::IntAttribute(*dq, "block_size", 0), 16);
  EXPECT_THAT(graph::Dims(*Init(m, dq->input(1))), ElementsAre(12, 3, 3, 2));
  const std::vector<float> scales =
      *graph::ReadFloatTensor(*Init(m, dq->input(1)));
  absl::StatusOr<std::vector<int8_t>> q =
      numerics::UnpackInt4(Init(m, dq->input(0))->raw_data(), w.size(), true);
  ASSERT_TRUE(q.ok());
  const int64_t taps = 6;
  for (int64_t o = 0; o < 12; ++o) {
    for (int64_t c = 0; c < 40; ++c) {
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t block = c / 16;
        float block_max = 0;
        for (int64_t j = block * 16; j < std::min<int64_t>(40, block * 16 + 16);
             ++j) {
          block_max = std::max(block_max, std::abs(w[(o * 40 + j) * taps + t]));
        }
        const float scale = scales[(o * 3 + block) * taps + t];
        const int64_t i = (o * 40 + c) * taps + t;
        EXPECT_NEAR(scale, block_max / 7.0f, 1e-6f);
        ASSERT_NEAR(scale * (*q)[i], w[i], block_max / 7.0f / 2.0f * 1.001f)
            << o << "," << c << "," << t;
      }
    }
  }
  const onnx::NodeProto* dw = DequantizerOf(m, "D");
  ASSERT_NE(dw, nullptr);
  EXPECT_EQ(AxisOf(*dw), 0);
  EXPECT_EQ(graph::IntAttribute(*dw, "block_size", 0), 0);
  ASSERT_EQ(reports_.size(), 2u);
  for (const auto& r : reports_) {
    EXPECT_EQ(r.scheme().block_size(), r.tensor_name() == "W" ? 16 : 0)
        << r.tensor_name();
  }

  ::quantd::testing::TempDir tmp;
  ::quantd::testing::WriteFileOrDie(tmp.File("f.onnx"),
                                    original_model.SerializeAsString());
  ::quantd::testing::WriteFileOrDie(tmp.File("q.onnx"), m.SerializeAsString());
  ASSERT_TRUE(executor::WriteNpyFile(tmp.File("x.npy"),
                                     executor::Tensor::FromVector<float>(
                                         {2, 40, 6, 6}, Wave(2 * 40 * 36, 7)))
                  .ok());
  // The same request per channel: blocks must bring ONNX Runtime's output
  // closer to float (a scale read at the wrong place would not).
  onnx::ModelProto per_channel = original_model;
  options_.weights.block_size = 0;
  Run(&per_channel);
  ::quantd::testing::WriteFileOrDie(tmp.File("pc.onnx"),
                                    per_channel.SerializeAsString());
  double sqnr[2];
  for (int blocked : {0, 1}) {
    const std::string json = ::quantd::testing::OrtEval(
        {"compare", "--model", tmp.File("f.onnx"), "--model2",
         tmp.File(blocked ? "q.onnx" : "pc.onnx"), "--x", tmp.File("x.npy"),
         "--batch", "2"});
    sqnr[blocked] = ::quantd::testing::JsonNumber(json, "sqnr_db");
  }
  std::printf(
      "measured: ORT output SQNR per channel %.2f dB, blocked %.2f dB\n",
      sqnr[0], sqnr[1]);
  EXPECT_GT(sqnr[1], sqnr[0] + 1.0);
}

// INT8 Conv weights keep one scale per output channel when blocks are asked
// for (ONNX Runtime's QLinearConv takes no other form).
TEST_F(PassTest, BlockSizeLeavesConvPerChannel) {
  options_.weights.block_size = 32;
  onnx::ModelProto m = testing::ConvModel().Build();
  Run(&m);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0].scheme().block_size(), 0);
  EXPECT_TRUE(reports_[0].scheme().per_channel());
  const onnx::NodeProto* dq = DequantizerOf(m, "W");
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(graph::IntAttribute(*dq, "block_size", 0), 0);
  EXPECT_EQ(AxisOf(*dq), 0);
}

TEST_F(PassTest, XlaWithFourBitWeightsIsRefusedByName) {
  options_.precision = tensorflow::quantization::PRECISION_W4A8;
  options_.op_set = tensorflow::quantization::XLA;
  onnx::ModelProto m = testing::MatMulModel().Build();
  absl::StatusOr<PassStats> s = RunDynamicRangePass(options_, {}, &m);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.status().message(), HasSubstr("weight 'W'"));
  EXPECT_THAT(s.status().message(), HasSubstr("MatMulInteger"));
  EXPECT_EQ(graph::DefaultOpset(m), 13);  // Refused before any change.
}

TEST_F(PassTest, FullRangeAsymmetricWeights) {
  options_.weights.spec.narrow_range = false;
  options_.weights.spec.symmetric = false;
  onnx::ModelProto m = testing::MatMulModel().Build();
  Run(&m);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0].scheme().quant_min(), -128);
  EXPECT_FALSE(reports_[0].scheme().symmetric());
  Dequantized d = DequantizeInModel(m, "W");
  EXPECT_EQ(*std::min_element(d.q.begin(), d.q.end()), -128);
}

TEST_F(PassTest, ScopesFilterWeights) {
  ModelBuilder b(13);
  b.Input("x", {2, 64})
      .Weight("enc/W", {64, 32}, 1)
      .Weight("dec/W", {64, 32}, 2);
  b.Node("MatMul", {"x", "enc/W"}, {"y1"}, "enc/mm");
  b.Node("MatMul", {"x", "dec/W"}, {"y2"}, "dec/mm");
  b.Output("y1").Output("y2");
  options_.weights.producer_scope = "enc/";
  onnx::ModelProto m = b.Build();
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  ASSERT_EQ(stats.skipped.size(), 1u);
  EXPECT_EQ(stats.skipped[0].tensor_name(), "dec/W");
  EXPECT_EQ(stats.skipped[0].reason(), quantd::v1::SKIP_OUT_OF_SCOPE);

  options_.weights.producer_scope = "";
  options_.weights.consumer_scope = "dec/";
  m = b.Build();
  stats = Run(&m);
  ASSERT_EQ(stats.skipped.size(), 1u);
  EXPECT_EQ(stats.skipped[0].tensor_name(), "enc/W");
  EXPECT_THAT(stats.skipped[0].detail(), HasSubstr("consumer_scope"));
}

TEST_F(PassTest, NanWeightIsInvalidArgument) {
  ModelBuilder b(13);
  std::vector<float> w = Wave(64 * 32);
  w[7] = std::nanf("");
  b.Input("x", {2, 64}).Initializer("W", {64, 32}, w);
  b.Node("MatMul", {"x", "W"}, {"y"}).Output("y");
  onnx::ModelProto m = b.Build();
  absl::StatusOr<PassStats> s = RunDynamicRangePass(options_, {}, &m);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("'W'"));
}

TEST_F(PassTest, CancellationStopsBetweenTensors) {
  ModelBuilder b(13);
  b.Input("x", {2, 64});
  for (int i = 0; i < 4; ++i) {
    const std::string w = "W" + std::to_string(i);
    b.Weight(w, {64, 64}, i)
        .Node("MatMul", {i ? "y" + std::to_string(i - 1) : "x", w},
              {"y" + std::to_string(i)});
  }
  b.Output("y3");
  onnx::ModelProto m = b.Build();
  PassHooks hooks;
  int reports = 0;
  hooks.on_report = [&](const quantd::v1::TensorReport&) { ++reports; };
  hooks.check_cancelled = [&] {
    return reports >= 2 ? absl::CancelledError("stop") : absl::OkStatus();
  };
  absl::StatusOr<PassStats> s = RunDynamicRangePass(options_, hooks, &m);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(reports, 2);
}

TEST_F(PassTest, ParallelRunMatchesSerialRun) {
  ModelBuilder b(13);
  b.Input("x", {2, 64});
  for (int i = 0; i < 7; ++i) {
    const std::string w = "W" + std::to_string(i);
    b.Weight(w, {64, 64}, i)
        .Node("MatMul", {i ? "y" + std::to_string(i - 1) : "x", w},
              {"y" + std::to_string(i)});
  }
  b.Output("y6");
  onnx::ModelProto serial = b.Build();
  Run(&serial);
  onnx::ModelProto parallel = b.Build();
  ThreadPool pool(3);
  PassHooks hooks;
  std::vector<std::string> order;
  hooks.on_report = [&](const quantd::v1::TensorReport& r) {
    order.push_back(r.tensor_name());
  };
  hooks.parallel_for = [&](int64_t n, const std::function<void(int64_t)>& fn) {
    pool.ParallelFor(n, fn);
  };
  hooks.group_size = 4;
  ASSERT_TRUE(RunDynamicRangePass(options_, hooks, &parallel).ok());
  EXPECT_THAT(order, ElementsAre("W0", "W1", "W2", "W3", "W4", "W5", "W6"));
  EXPECT_EQ(*graph::SerializeModel(serial), *graph::SerializeModel(parallel));
}

}  // namespace
}  // namespace quantd::passes

namespace quantd::passes {
namespace {

// A model the version converter cannot convert: a custom-domain node.
onnx::ModelProto WithCustomOp(int64_t opset) {
  ModelBuilder b = testing::MatMulModel(64, 32, opset);
  b.model().set_ir_version(6);
  auto* op = b.model().add_opset_import();
  op->set_domain("com.example");
  op->set_version(1);
  b.Node("Custom", {"y"}, {"z"}, "custom");
  b.model().mutable_graph()->mutable_node(1)->set_domain("com.example");
  b.Output("z");
  return b.Build();
}

TEST_F(PassTest, Opset11FallsBackToPerTensorWhenTheConverterFails) {
  onnx::ModelProto m = WithCustomOp(11);
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(graph::DefaultOpset(m), 11);
  EXPECT_THAT(stats.opset_note, HasSubstr("per-tensor"));
  EXPECT_EQ(DequantizeInModel(m, "W").axis, -100);
  EXPECT_THAT(DequantizeInModel(m, "W").scale_dims, ElementsAre());
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_FALSE(reports_[0].scheme().per_channel());
  EXPECT_THAT(reports_[0].note(), HasSubstr("per-tensor"));
}

TEST_F(PassTest, Opset10IsFailedPreconditionWhenTheConverterFails) {
  onnx::ModelProto m = WithCustomOp(10);
  absl::StatusOr<PassStats> s = RunDynamicRangePass(options_, {}, &m);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("opset is 10"));
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("DynamicQuantizeLinear"));
}

TEST_F(PassTest, Opset9MatMulIsUpgraded) {
  onnx::ModelProto m = testing::MatMulModel(64, 32, 9).Build();
  m.set_ir_version(4);
  PassStats stats = Run(&m);
  EXPECT_EQ(stats.quantized_tensors, 1);
  EXPECT_EQ(graph::DefaultOpset(m), 13);
  EXPECT_GE(m.ir_version(), 7);
  ExpectClose(m, "W", Wave(64 * 32, 1));
}

}  // namespace
}  // namespace quantd::passes
