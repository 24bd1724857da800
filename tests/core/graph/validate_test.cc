#include "core/graph/validate.h"

#include <string>

#include "core/graph/tensor_util.h"
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

// torch 1.13's RAFT export: Cast(to=INT64) -> Sqrt, which ONNX does not
// allow and ONNX Runtime refuses to load; libonnx 1.12's checker passes it.
TEST(ValidateModelTest, AKnownInputTypeTheSchemaExcludesIsRefused) {
  testing::ModelBuilder b(13);
  b.Input("x", {2})
      .Node("Cast", {"x"}, {"i"}, "cast")
      .Attr("to", int64_t{onnx::TensorProto::INT64})
      .Node("Sqrt", {"i"}, {"y"}, "sqrt")
      .Output("y");
  absl::Status s = ValidateModel(b.Build(), "input model", nullptr);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("node 'sqrt' (Sqrt): input 0 'i' is INT64, which "
                        "ONNX's Sqrt at opset 13 does not allow"));
  // The same chain casting to FLOAT is valid; so is a type the schema
  // takes from an initializer (Gather's int64 indices).
  testing::ModelBuilder ok(13);
  ok.Input("x", {2})
      .Node("Cast", {"x"}, {"f"}, "cast")
      .Attr("to", int64_t{onnx::TensorProto::FLOAT})
      .Node("Sqrt", {"f"}, {"y"}, "sqrt")
      .Output("y");
  std::vector<std::string> v;
  EXPECT_TRUE(ValidateModel(ok.Build(), "input model", &v).ok());
  EXPECT_THAT(v, ElementsAre(HasSubstr("known input types"),
                             HasSubstr("structural checks")));
  EXPECT_TRUE(OpSchemaAllowsInput("Gather", 13, 1, onnx::TensorProto::INT64));
  EXPECT_FALSE(OpSchemaAllowsInput("Gather", 13, 1, onnx::TensorProto::FLOAT));
  // Concat's variadic inputs past the first, and no schema at all.
  EXPECT_FALSE(OpSchemaAllowsInput("Sqrt", 13, 0, onnx::TensorProto::BOOL));
  EXPECT_TRUE(OpSchemaAllowsInput("Concat", 13, 7, onnx::TensorProto::BOOL));
  EXPECT_TRUE(OpSchemaAllowsInput("NoSuchOp", 13, 0, onnx::TensorProto::BOOL));
  // Types libonnx 1.12 cannot name (INT4 = 22, UINT4 = 21, not an enum value)
  // are not asked about: its type-string helper throws on them.
  for (int32_t t : {21, 22, 99, -3}) {
    EXPECT_TRUE(OpSchemaAllowsInput("CastLike", 15, 0, t)) << t;
  }
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

// A model at opset 21, past what the checker knows: CheckModelFields is all
// that stands between its fields and the core.
testing::ModelBuilder Opset21MatMul() {
  testing::ModelBuilder b = testing::MatMulModel(4, 3, 21);
  b.model().set_ir_version(10);
  return b;
}

std::string FieldsMessage(
    const onnx::ModelProto& model,
    absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  const absl::Status s = CheckModelFields(model);
  EXPECT_EQ(s.code(), code) << s;
  return std::string(s.message());
}

TEST(CheckModelFieldsTest, AcceptsTheTestModels) {
  EXPECT_TRUE(CheckModelFields(Opset21MatMul().Build()).ok());
  EXPECT_TRUE(CheckModelFields(testing::ConvModel().Build()).ok());
}

TEST(CheckModelFieldsTest, RefusesIrVersionsOnnxRuntimeDoesNotLoad) {
  onnx::ModelProto m = Opset21MatMul().Build();
  m.set_ir_version(999);
  EXPECT_THAT(FieldsMessage(m), HasSubstr("IR version 999"));
  // ValidateModel refuses it too, whatever the checker would say.
  EXPECT_EQ(ValidateModel(m, "input model", nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  m.set_ir_version(kNewestIrVersion);
  EXPECT_TRUE(CheckModelFields(m).ok());
}

TEST(CheckModelFieldsTest, RefusesFutureAndDuplicateOpsets) {
  onnx::ModelProto m = Opset21MatMul().Build();
  m.mutable_opset_import(0)->set_version(kNewestOpset + 1);
  EXPECT_THAT(FieldsMessage(m), HasSubstr("opset 27"));
  m = Opset21MatMul().Build();
  onnx::OperatorSetIdProto* again = m.add_opset_import();
  again->set_domain("ai.onnx");
  again->set_version(13);
  EXPECT_THAT(FieldsMessage(m), HasSubstr("twice"));
}

TEST(CheckModelFieldsTest, RefusesElementTypesOnnxDoesNotDefine) {
  onnx::ModelProto m = Opset21MatMul().Build();
  m.mutable_graph()->mutable_initializer(0)->set_data_type(77);
  const std::string message = FieldsMessage(m);
  EXPECT_THAT(message, HasSubstr("element type 77"));
  EXPECT_THAT(message, HasSubstr("initializer"));
  m = Opset21MatMul().Build();
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->set_elem_type(-3);
  EXPECT_THAT(FieldsMessage(m), HasSubstr("element type -3"));
}

TEST(CheckModelFieldsTest, ChecksPackedFourBitSizes) {
  testing::ModelBuilder b = Opset21MatMul();
  onnx::TensorProto* t = b.model().mutable_graph()->add_initializer();
  t->set_name("packed");
  t->set_data_type(kInt4);
  t->add_dims(5);
  t->set_raw_data(std::string(3, '\0'));  // ceil(5 / 2) bytes.
  EXPECT_TRUE(CheckModelFields(b.model()).ok());
  t->set_raw_data(std::string(5, '\0'));
  EXPECT_THAT(FieldsMessage(b.model()), HasSubstr("expected 3"));
}

TEST(CheckModelFieldsTest, RefusesExternalDataWithoutOpeningIt) {
  onnx::ModelProto m = Opset21MatMul().Build();
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  onnx::StringStringEntryProto* location = w->add_external_data();
  location->set_key("location");
  location->set_value("/etc/shadow");
  const std::string message = FieldsMessage(m);
  EXPECT_THAT(message, HasSubstr("external file '/etc/shadow'"));
  EXPECT_THAT(message, HasSubstr("never opens"));
}

TEST(CheckModelFieldsTest, RefusesSparseTensorsAsUnimplemented) {
  onnx::ModelProto m = Opset21MatMul().Build();
  m.mutable_graph()->add_sparse_initializer()->mutable_values()->set_name(
      "sparse");
  EXPECT_THAT(FieldsMessage(m, absl::StatusCode::kUnimplemented),
              HasSubstr("sparse"));
}

TEST(CheckModelFieldsTest, RefusesNegativeDimsInTensorsAndTypes) {
  onnx::ModelProto m = Opset21MatMul().Build();
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, -4);
  EXPECT_THAT(FieldsMessage(m), HasSubstr("negative dim (-4)"));
  m = Opset21MatMul().Build();
  m.mutable_graph()
      ->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->add_dim()
      ->set_dim_value(-1);
  EXPECT_THAT(FieldsMessage(m), HasSubstr("negative dim (-1)"));
}

TEST(CheckModelFieldsTest, RefusesAttributesWhoseValueIsNotTheirType) {
  testing::ModelBuilder b(21);
  b.model().set_ir_version(10);
  b.Input("x", {2, 3}).Node("Softmax", {"x"}, {"y"}).Output("y");
  onnx::AttributeProto* axis =
      b.model().mutable_graph()->mutable_node(0)->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::FLOAT);
  axis->set_i(1);
  EXPECT_THAT(FieldsMessage(b.model()),
              HasSubstr("declared FLOAT but holds a INT"));
  axis->set_f(1.0F);
  EXPECT_THAT(FieldsMessage(b.model()), HasSubstr("2 value fields"));
  axis->clear_i();
  EXPECT_TRUE(CheckModelFields(b.model()).ok());
  axis->set_type(static_cast<onnx::AttributeProto::AttributeType>(40));
  EXPECT_THAT(FieldsMessage(b.model()), HasSubstr("no ONNX attribute type"));
}

TEST(CheckModelFieldsTest, ChecksTensorsInsideNestedGraphs) {
  testing::ModelBuilder b(21);
  b.model().set_ir_version(10);
  b.Input("c", {}, onnx::TensorProto::BOOL)
      .Node("If", {"c"}, {"y"})
      .Output("y");
  onnx::AttributeProto* branch =
      b.model().mutable_graph()->mutable_node(0)->add_attribute();
  branch->set_name("then_branch");
  branch->set_type(onnx::AttributeProto::GRAPH);
  onnx::TensorProto* t = branch->mutable_g()->add_initializer();
  t->set_name("deep");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(4);
  t->set_raw_data(std::string(8, '\0'));
  const std::string message = FieldsMessage(b.model());
  EXPECT_THAT(message, HasSubstr("'deep'"));
  EXPECT_THAT(message, HasSubstr("then_branch"));
}

TEST(CheckModelFieldsTest, RefusesGraphsNestedPastTheBound) {
  testing::ModelBuilder b(21);
  b.model().set_ir_version(10);
  b.Input("c", {}, onnx::TensorProto::BOOL)
      .Node("If", {"c"}, {"y"})
      .Output("y");
  onnx::NodeProto* node = b.model().mutable_graph()->mutable_node(0);
  for (int depth = 0; depth <= kMaxGraphDepth; ++depth) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    node = a->mutable_g()->add_node();
    node->set_op_type("If");
  }
  EXPECT_THAT(FieldsMessage(b.model()), HasSubstr("nested 33 graphs deep"));
}

TEST(CheckModelFieldsTest, RefusesMegabyteNamesWithoutEchoingThem) {
  onnx::ModelProto m = Opset21MatMul().Build();
  m.mutable_graph()->mutable_node(0)->set_name(std::string(1 << 20, 'n'));
  const std::string message = FieldsMessage(m);
  EXPECT_THAT(message, HasSubstr("1048576 bytes"));
  EXPECT_LT(message.size(), 512u);
}

}  // namespace
}  // namespace quantd::graph
