#include "core/graph/tensor_util.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/graph/graph_index.h"
#include "core/graph/unique_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::graph {
namespace {

using ::testing::ElementsAre;

TEST(TensorUtilTest, ReadsRawDataAndFloatData) {
  onnx::TensorProto raw =
      testing::ModelBuilder::FloatTensor("a", {2, 2}, {1, -2, 3.5f, 0});
  EXPECT_THAT(*ReadFloatTensor(raw), ElementsAre(1, -2, 3.5f, 0));
  onnx::TensorProto typed;
  typed.set_data_type(onnx::TensorProto::FLOAT);
  typed.add_dims(3);
  typed.add_float_data(4);
  typed.add_float_data(5);
  typed.add_float_data(-6);
  EXPECT_THAT(*ReadFloatTensor(typed), ElementsAre(4, 5, -6));
  EXPECT_EQ(NumElements(typed), 3);
  EXPECT_EQ(DataBytes(typed), 12u);
}

TEST(TensorUtilTest, RefusesWrongTypeAndSize) {
  onnx::TensorProto t = MakeByteTensor("q", onnx::TensorProto::INT8, {2},
                                       std::string("\x01\xff", 2));
  EXPECT_EQ(ReadFloatTensor(t).status().code(),
            absl::StatusCode::kInvalidArgument);
  onnx::TensorProto f = MakeFloatTensor("f", {3}, std::vector<float>{1, 2});
  EXPECT_EQ(ReadFloatTensor(f).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The view reads what ReadFloatTensor copies, in place, and refuses what it
// refuses.
TEST(TensorUtilTest, ViewsRawDataAndFloatDataInPlace) {
  auto values = [](const numerics::FloatBytes& b) {
    std::vector<float> v(b.size);
    if (b.size > 0) std::memcpy(v.data(), b.data, b.size * sizeof(float));
    return v;
  };
  onnx::TensorProto raw =
      testing::ModelBuilder::FloatTensor("a", {2, 2}, {1, -2, 3.5f, 0});
  absl::StatusOr<numerics::FloatBytes> view = ViewFloatTensor(raw);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->data, raw.raw_data().data());
  EXPECT_EQ(values(*view), *ReadFloatTensor(raw));
  onnx::TensorProto typed;
  typed.set_data_type(onnx::TensorProto::FLOAT);
  typed.add_dims(2);
  typed.add_float_data(4);
  typed.add_float_data(-6);
  view = ViewFloatTensor(typed);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_THAT(values(*view), ElementsAre(4, -6));
  onnx::TensorProto q = MakeByteTensor("q", onnx::TensorProto::INT8, {2},
                                       std::string("\x01\xff", 2));
  EXPECT_EQ(ViewFloatTensor(q).status(), ReadFloatTensor(q).status());
  onnx::TensorProto short_data =
      MakeFloatTensor("f", {3}, std::vector<float>{1, 2});
  EXPECT_EQ(ViewFloatTensor(short_data).status(),
            ReadFloatTensor(short_data).status());
}

TEST(TensorUtilTest, ScalarHasOneElementAndClearFreesData) {
  onnx::TensorProto s = MakeFloatTensor("s", {}, std::vector<float>{2.5f});
  EXPECT_EQ(NumElements(s), 1);
  EXPECT_THAT(*ReadFloatTensor(s), ElementsAre(2.5f));
  ClearTensorData(&s);
  EXPECT_FALSE(s.has_raw_data());
  EXPECT_EQ(s.name(), "s");
}

TEST(UniqueNamesTest, AvoidsEveryNameInTheGraph) {
  onnx::ModelProto m = testing::MatMulModel().Build();
  UniqueNames names(m.graph());
  EXPECT_EQ(names.Make("W"), "W_1");
  EXPECT_EQ(names.Make("W"), "W_2");
  EXPECT_EQ(names.Make("mm"), "mm_1");  // Node names too.
  EXPECT_EQ(names.Make("fresh"), "fresh");
  EXPECT_EQ(names.Make("fresh"), "fresh_1");
}

TEST(GraphIndexTest, KnowsProducersAndUses) {
  onnx::ModelProto m = testing::ConvModel().Build();
  GraphIndex index(m.graph());
  EXPECT_EQ(index.Producer("conv"), 0);
  EXPECT_EQ(index.Producer("W"), -1);
  EXPECT_EQ(index.Initializer("W"), 0);
  ASSERT_EQ(index.Uses("W").size(), 1u);
  EXPECT_EQ(index.Uses("W")[0].slot, 1);
  EXPECT_TRUE(index.IsGraphInput("x"));
  EXPECT_TRUE(index.IsGraphOutput("y"));
  EXPECT_TRUE(index.Uses("y").empty());
}

TEST(TensorUtilTest, OverflowingDimsAreRefusedNotWrapped) {
  const int64_t big = int64_t{1} << 31;
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {big, big, int64_t{4}}) t.add_dims(d);
  EXPECT_EQ(NumElements(t), -1);
  EXPECT_EQ(CheckTensorSize(t).code(), absl::StatusCode::kInvalidArgument);
  // 2^62 elements fit, their bytes do not: no data must not "match".
  onnx::TensorProto u;
  u.set_name("u");
  u.set_data_type(onnx::TensorProto::FLOAT);
  u.add_dims(int64_t{1} << 62);
  u.set_raw_data("");
  EXPECT_EQ(NumElements(u), int64_t{1} << 62);
  absl::Status s = CheckTensorSize(u);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("'u'"));
  onnx::TensorProto neg = u;
  neg.set_dims(0, -1);
  EXPECT_EQ(NumElements(neg), -1);
}

}  // namespace
}  // namespace quantd::graph
