#include "core/graph/validate.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ValidateModelTest, CheckerAndStructureRunOnOpset13) {
  std::vector<std::string> v;
  ASSERT_TRUE(
      ValidateModel(testing::ConvModel().Build(), "input model", &v).ok());
  EXPECT_THAT(v, ElementsAre(HasSubstr("onnx.checker"),
                             HasSubstr("structural checks")));
}

TEST(ValidateModelTest, CheckerRefusalIsInvalidArgument) {
  testing::ModelBuilder b(13);
  b.Input("x", {2}).Node("NoSuchOp", {"x"}, {"y"}).Output("y");
  absl::Status s = ValidateModel(b.Build(), "input model", nullptr);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("onnx.checker"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("NoSuchOp"));
}

TEST(ValidateModelTest, Opset21IsAcceptedWithStructuralChecks) {
  testing::ModelBuilder b = testing::MatMulModel(64, 32, 21);
  b.model().set_ir_version(10);
  std::vector<std::string> v;
  absl::Status s = ValidateModel(b.Build(), "input model", &v);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(v, ElementsAre(HasSubstr("opset 21")));
}

TEST(ValidateModelTest, Opset21StillGetsStructuralChecks) {
  testing::ModelBuilder b(21);
  b.model().set_ir_version(10);
  b.Input("x", {2})
      .Node("Relu", {"later"}, {"y"})
      .Node("Relu", {"x"}, {"later"});
  b.Output("y");
  absl::Status s = ValidateModel(b.Build(), "input model", nullptr);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("topologically sorted"));
}

TEST(CheckStructureTest, RefusesDuplicateOutputs) {
  testing::ModelBuilder b(21);
  b.Input("x", {2}).Node("Relu", {"x"}, {"y"}).Node("Neg", {"x"}, {"y"});
  b.Output("y");
  absl::Status s = CheckStructure(b.Build().graph());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("defined twice"));
}

TEST(CheckStructureTest, RefusesUntypedInputs) {
  testing::ModelBuilder b(21);
  b.Input("x", {2}).Node("Relu", {"x"}, {"y"}).Output("y");
  b.model().mutable_graph()->mutable_input(0)->clear_type();
  EXPECT_THAT(std::string(CheckStructure(b.Build().graph()).message()),
              HasSubstr("input 'x' has no type"));
}

TEST(CheckStructureTest, RefusesInitializerOfWrongSize) {
  testing::ModelBuilder b = testing::MatMulModel(64, 32, 21);
  b.model().mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(
      100);
  absl::Status s = CheckStructure(b.Build().graph());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("2048 elements"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("100 bytes"));
}

TEST(CheckStructureTest, RefusesUnproducedOutput) {
  testing::ModelBuilder b(21);
  b.Input("x", {2}).Node("Relu", {"x"}, {"y"}).Output("z");
  EXPECT_THAT(std::string(CheckStructure(b.Build().graph()).message()),
              HasSubstr("'z' is not produced"));
}

}  // namespace
}  // namespace quantd::graph
