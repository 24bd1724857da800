// The op-set table: every (method, op set) pair once, each produced pair
// with a lowering and W8A8, and a pass refusing a pair the table says is
// not produced (rather than writing some other op set's form).
#include "core/passes/op_sets.h"

#include <set>
#include <utility>

#include "core/passes/dynamic_range_pass.h"
#include "core/passes/static_range_options.h"
#include "core/passes/static_range_pass.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::passes {
namespace {
namespace tfq = tensorflow::quantization;

using ::testing::HasSubstr;

TEST(OpSetTableTest, EveryMethodAndOpSetOnce) {
  std::set<std::pair<Method, int>> seen;
  for (const OpSetRow& row : OpSetTable()) {
    EXPECT_TRUE(seen.emplace(row.method, row.op_set).second)
        << tfq::OpSet_Name(row.op_set);
  }
  for (Method m : {Method::kStaticRange, Method::kDynamicRange}) {
    for (tfq::OpSet o : {tfq::TF, tfq::XLA, tfq::UNIFORM_QUANTIZED}) {
      EXPECT_TRUE(seen.count({m, o})) << tfq::OpSet_Name(o);
      ASSERT_NE(FindOpSet(m, o), nullptr);
      EXPECT_EQ(FindOpSet(m, o)->op_set, o);
    }
  }
  EXPECT_EQ(seen.size(), 6u);
}

TEST(OpSetTableTest, ProducedRowsHaveALoweringAndServeW8A8) {
  for (const OpSetRow& row : OpSetTable()) {
    const bool any =
        row.w8a8.supported || row.w4a8.supported || row.w4a4.supported;
    EXPECT_EQ(row.lowering != Lowering::kNotProduced, any)
        << tfq::OpSet_Name(row.op_set);
    if (row.lowering != Lowering::kNotProduced) {
      EXPECT_TRUE(row.w8a8.supported);
      EXPECT_STRNE(row.lowered_ops, "");
    }
    for (const PrecisionSupport* p : {&row.w8a8, &row.w4a8, &row.w4a4}) {
      EXPECT_STRNE(p->note, "") << "every cell says what it does or why not";
    }
  }
}

TEST(OpSetTableTest, PrecisionCells) {
  const OpSetRow* row = FindOpSet(Method::kStaticRange, tfq::TF);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->For(tfq::PRECISION_W8A8), &row->w8a8);
  EXPECT_EQ(row->For(tfq::PRECISION_W4A8), &row->w4a8);
  EXPECT_EQ(row->For(tfq::PRECISION_W4A4), &row->w4a4);
  EXPECT_EQ(row->For(tfq::PRECISION_FULL), nullptr);
  EXPECT_EQ(row->For(tfq::PRECISION_UNSPECIFIED), nullptr);
  // The lowerings the passes dispatch on.
  EXPECT_EQ(row->lowering, Lowering::kQdq);
  EXPECT_EQ(FindOpSet(Method::kStaticRange, tfq::XLA)->lowering,
            Lowering::kIntegerOps);
  EXPECT_EQ(FindOpSet(Method::kStaticRange, tfq::UNIFORM_QUANTIZED)->lowering,
            Lowering::kQLinearOps);
  EXPECT_EQ(FindOpSet(Method::kDynamicRange, tfq::UNIFORM_QUANTIZED)->lowering,
            Lowering::kNotProduced);
}

TEST(OpSetTableTest, PassRowRefusesWhatIsNotProduced) {
  absl::StatusOr<const OpSetRow*> uq =
      PassRow(Method::kDynamicRange, tfq::UNIFORM_QUANTIZED);
  ASSERT_FALSE(uq.ok());
  EXPECT_EQ(uq.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(uq.status().message(),
              HasSubstr("DYNAMIC_RANGE with op_set UNIFORM_QUANTIZED"));
  absl::StatusOr<const OpSetRow*> bad =
      PassRow(Method::kStaticRange, static_cast<tfq::OpSet>(99));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FindOpSet(Method::kNone, tfq::TF), nullptr);
  ASSERT_TRUE(PassRow(Method::kDynamicRange, tfq::XLA).ok());
}

onnx::ModelProto OneMatMul() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(32);
  w->add_dims(32);
  for (int i = 0; i < 32 * 32; ++i) w->add_float_data(0.01f * (i % 17 - 8));
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("MatMul");
  n->set_name("mm");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  for (const char* name : {"x", "y"}) {
    onnx::ValueInfoProto* v =
        std::string(name) == "x" ? g->add_input() : g->add_output();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(1);
    t->mutable_shape()->add_dim()->set_dim_value(32);
  }
  return m;
}

TEST(OpSetTableTest, PassesRefuseAPairTheTableDoesNotProduce) {
  onnx::ModelProto model = OneMatMul();
  const onnx::ModelProto before = model;
  WeightPassOptions options;
  options.min_num_elements = 0;
  options.op_set = tfq::UNIFORM_QUANTIZED;
  absl::StatusOr<PassStats> stats = RunDynamicRangePass(options, {}, &model);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(model.SerializeAsString(), before.SerializeAsString());

  StaticRangeOptions static_options;
  static_options.op_set = static_cast<tfq::OpSet>(42);
  absl::StatusOr<StaticRangeStats> s =
      RunStaticRangePass(static_options, {}, {}, &model);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::passes
