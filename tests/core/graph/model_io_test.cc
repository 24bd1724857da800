#include "core/graph/model_io.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::graph {
namespace {

using ::testing::HasSubstr;

TEST(ParseModelTest, EmptyBytesAreInvalid) {
  absl::StatusOr<onnx::ModelProto> m = ParseModel("");
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("empty"));
}

TEST(ParseModelTest, GarbageIsInvalid) {
  absl::StatusOr<onnx::ModelProto> m = ParseModel("this is not an onnx file");
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("not a valid ONNX ModelProto"));
}

TEST(ParseModelTest, TruncatedIsInvalid) {
  std::string bytes = testing::MatMulModel().Bytes();
  bytes.resize(bytes.size() - 100);
  EXPECT_EQ(ParseModel(bytes).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseModelTest, MessageWithoutGraphIsInvalid) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  absl::StatusOr<onnx::ModelProto> parsed = ParseModel(m.SerializeAsString());
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()),
              HasSubstr("without a graph"));
}

TEST(ParseModelTest, RoundTrips) {
  testing::ModelBuilder b = testing::MatMulModel();
  absl::StatusOr<onnx::ModelProto> m = ParseModel(b.Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph().node(0).op_type(), "MatMul");
  EXPECT_EQ(m->graph().initializer(0).raw_data().size(), 64u * 32u * 4u);
}

// Protobuf's default total-bytes limit is 64 MiB; a 100+ MB model must parse.
TEST(ParseModelTest, ParsesModelsOver64MiB) {
  testing::ModelBuilder b(13);
  const int64_t n = 27 * 1024 * 1024;  // 108 MiB of floats.
  b.Input("x", {1, 1024});
  b.Initializer("W", {1024, n / 1024}, std::vector<float>(n, 0.5f));
  b.Node("MatMul", {"x", "W"}, {"y"}).Output("y");
  std::string bytes = b.Bytes();
  b = testing::ModelBuilder();  // Free the builder's copy.
  ASSERT_GT(bytes.size(), 100u * 1024 * 1024);
  absl::StatusOr<onnx::ModelProto> m = ParseModel(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph().initializer(0).raw_data().size(),
            static_cast<size_t>(n) * 4);
}

TEST(SerializeModelTest, IsDeterministicAndParsesBack) {
  onnx::ModelProto m = testing::ConvModel().Build();
  absl::StatusOr<std::string> a = SerializeModel(m);
  absl::StatusOr<std::string> b = SerializeModel(m);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_TRUE(ParseModel(*a).ok());
}

TEST(OpsetTest, ReadsAndSetsTheDefaultDomain) {
  onnx::ModelProto m = testing::MatMulModel(64, 32, 11).Build();
  auto* ml = m.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(3);
  EXPECT_EQ(DefaultOpset(m), 11);
  SetDefaultOpset(&m, 13);
  EXPECT_EQ(DefaultOpset(m), 13);
  EXPECT_EQ(m.opset_import_size(), 2);
  m.clear_opset_import();
  EXPECT_EQ(DefaultOpset(m), 0);
}

}  // namespace
}  // namespace quantd::graph
