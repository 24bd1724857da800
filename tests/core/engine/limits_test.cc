// CheckJobLimits, and that RunQuantize / RunCalibrate apply the limits right
// after parsing.
#include "core/engine/limits.h"

#include <string>

#include "core/engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd {
namespace {

using ::quantd::testing::MatMulModel;
using ::quantd::testing::ModelBuilder;
using ::testing::HasSubstr;

JobLimits TensorLimit(int64_t n) {
  JobLimits limits;
  limits.max_tensor_elements = n;
  return limits;
}

JobLimits NodeLimit(int64_t n) {
  JobLimits limits;
  limits.max_graph_nodes = n;
  return limits;
}

TEST(CheckJobLimitsTest, NoLimitsAcceptAnything) {
  EXPECT_TRUE(CheckJobLimits(MatMulModel(64, 32).Build(), JobLimits()).ok());
}

TEST(CheckJobLimitsTest, InitializerOverTheLimitIsNamedWithItsCount) {
  const onnx::ModelProto model = MatMulModel(64, 32).Build();  // W: 2048.
  EXPECT_TRUE(CheckJobLimits(model, TensorLimit(2048)).ok());
  absl::Status s = CheckJobLimits(model, TensorLimit(2047));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("initializer 'W'"));
  EXPECT_THAT(s.message(), HasSubstr("2048 elements"));
  EXPECT_THAT(s.message(), HasSubstr("limit of 2047"));
}

TEST(CheckJobLimitsTest, ConstantValueCounts) {
  ModelBuilder b;
  b.Input("x", {2, 8})
      .ConstantWeight("C", {8, 100})
      .Node("MatMul", {"x", "C"}, {"y"}, "mm")
      .Output("y", {2, 100});
  absl::Status s = CheckJobLimits(b.Build(), TensorLimit(799));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("C_const"));
  EXPECT_THAT(s.message(), HasSubstr("800 elements"));
}

TEST(CheckJobLimitsTest, DeclaredInputCountsItsKnownDims) {
  ModelBuilder b;
  b.Input("x", {1000, 1000}).Node("Relu", {"x"}, {"y"}).Output("y");
  absl::Status s = CheckJobLimits(b.Build(), TensorLimit(999999));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("input 'x'"));
  EXPECT_THAT(s.message(), HasSubstr("1000000 elements"));
  // A symbolic dim is not counted: only what the model commits to.
  onnx::ModelProto symbolic = b.Build();
  symbolic.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("batch");
  EXPECT_TRUE(CheckJobLimits(symbolic, TensorLimit(1000)).ok());
}

TEST(CheckJobLimitsTest, HugeDimsSaturateInsteadOfWrapping) {
  ModelBuilder b;
  b.Input("x", {int64_t{1} << 40, int64_t{1} << 40})
      .Node("Relu", {"x"}, {"y"})
      .Output("y");
  absl::Status s = CheckJobLimits(b.Build(), TensorLimit(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("more than 2^63 elements"));
}

// If(cond) with a then-branch holding an initializer and two nodes.
onnx::ModelProto ModelWithSubgraph() {
  ModelBuilder b;
  b.Input("cond", {}, onnx::TensorProto::BOOL)
      .Node("If", {"cond"}, {"y"}, "if")
      .Output("y");
  onnx::NodeProto* node = b.model().mutable_graph()->mutable_node(0);
  for (const char* name : {"then_branch", "else_branch"}) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* g = a->mutable_g();
    g->set_name(name);
    *g->add_initializer() = ModelBuilder::FloatTensor(
        std::string(name) + "_w", {50, 50}, std::vector<float>(2500, 1.0f));
    for (int i = 0; i < 2; ++i) {
      onnx::NodeProto* n = g->add_node();
      n->set_op_type("Identity");
      n->set_name(std::string(name) + "_id" + std::to_string(i));
    }
  }
  return b.Build();
}

TEST(CheckJobLimitsTest, SubgraphsCountForTensorsAndNodes) {
  const onnx::ModelProto model = ModelWithSubgraph();
  absl::Status s = CheckJobLimits(model, TensorLimit(2499));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'then_branch_w'"));
  EXPECT_THAT(s.message(), HasSubstr("2500 elements"));
  // 1 If + 2 + 2 branch nodes.
  EXPECT_TRUE(CheckJobLimits(model, NodeLimit(5)).ok());
  s = CheckJobLimits(model, NodeLimit(4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("5 nodes"));
  EXPECT_THAT(s.message(), HasSubstr("limit of 4"));
}

TEST(CheckJobLimitsTest, FunctionNodesCount) {
  onnx::ModelProto model = MatMulModel().Build();  // One node.
  onnx::FunctionProto* f = model.add_functions();
  f->set_name("helper");
  for (int i = 0; i < 3; ++i) f->add_node()->set_op_type("Identity");
  EXPECT_TRUE(CheckJobLimits(model, NodeLimit(4)).ok());
  absl::Status s = CheckJobLimits(model, NodeLimit(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("4 nodes"));
}

quantd::v1::QuantizeConfig DynamicRange() {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(
          tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE);
  return config;
}

TEST(RunQuantizeLimitsTest, RefusedRightAfterTheParse) {
  std::vector<quantd::v1::Stage> stages;
  QuantizeEvents events;
  events.on_progress = [&](const quantd::v1::Progress& p) {
    stages.push_back(p.stage());
  };
  CancellationToken cancel;
  absl::StatusOr<QuantizeResult> result =
      RunQuantize(DynamicRange(), MatMulModel(64, 32).Bytes(), events, cancel,
                  nullptr, nullptr, TensorLimit(1000));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("initializer 'W'"));
  // Nothing after the parse started (not even validation).
  for (quantd::v1::Stage stage : stages) {
    EXPECT_EQ(stage, quantd::v1::STAGE_PARSE);
  }
  // Within the limits: quantized as usual.
  result = RunQuantize(DynamicRange(), MatMulModel(64, 32).Bytes(), events,
                       cancel, nullptr, nullptr, TensorLimit(2048));
  EXPECT_TRUE(result.ok()) << result.status();
}

TEST(RunCalibrateLimitsTest, RefusedRightAfterTheParse) {
  BatchQueue batches(2);
  batches.Close();
  CancellationToken cancel;
  quantd::v1::CalibrateConfig config;
  config.set_method("min_max");
  absl::StatusOr<quantd::v1::CalibrationResult> result =
      RunCalibrate(config, MatMulModel(64, 32).Bytes(), &batches, {}, cancel,
                   nullptr, NodeLimit(0));
  // 0 is no limit: this fails later, for want of batches.
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("no calibration batches"));
  BatchQueue more(2);
  more.Close();
  JobLimits limits;
  limits.max_tensor_elements = 100;
  result = RunCalibrate(config, MatMulModel(64, 32).Bytes(), &more, {}, cancel,
                        nullptr, limits);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("2048 elements"));
}

}  // namespace
}  // namespace quantd
