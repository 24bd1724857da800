#include "core/passes/static_range_quant_point.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/graph/validate.h"
#include "core/numerics/int4.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/core/passes/static_range_test_util.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;
using testing::ModelBuilder;
using testing::NodeNamed;
using testing::NodesOf;

// in -> p/relu -> a -> {c/neg, c/abs, other/sig}; a second branch
// in -> p/tanh -> t -> c/exp.
onnx::ModelProto Fanout() {
  ModelBuilder b(13);
  b.Input("in", {4});
  b.Node("Relu", {"in"}, {"a"}, "p/relu");
  b.Node("Neg", {"a"}, {"n"}, "c/neg");
  b.Node("Abs", {"a"}, {"s"}, "c/abs");
  b.Node("Sigmoid", {"a"}, {"g"}, "other/sig");
  b.Node("Tanh", {"in"}, {"t"}, "p/tanh");
  b.Node("Exp", {"t"}, {"e"}, "c/exp");
  b.Output("n", {4}).Output("s", {4}).Output("g", {4}).Output("e", {4});
  return b.Build();
}

int Index(const onnx::GraphProto& g, const std::string& name) {
  return testing::IndexOf(g, NodeNamed(g, name));
}

QuantPointParams Uint8(float scale = 0.5f, int zero_point = 10) {
  QuantPointParams p;
  p.params = {scale, zero_point};
  p.spec = {8, false, false, false};
  return p;
}

TEST(InsertQuantPointTest, RewiresTheGivenConsumersAndFollowsTheProducer) {
  onnx::ModelProto m = Fanout();
  onnx::GraphProto* g = m.mutable_graph();
  const std::vector<int> consumers = {Index(*g, "c/neg"), Index(*g, "c/abs")};
  absl::StatusOr<QuantPoint> p =
      InsertQuantPoint(g, "a", consumers, Uint8(), nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->outcome, QuantPoint::kInserted);
  EXPECT_EQ(p->dequantized, "a_dequantized");
  EXPECT_EQ(NodeNamed(*g, "c/neg")->input(0), "a_dequantized");
  EXPECT_EQ(NodeNamed(*g, "c/abs")->input(0), "a_dequantized");
  EXPECT_EQ(NodeNamed(*g, "other/sig")->input(0), "a");  // Not asked.
  const int relu = Index(*g, "p/relu");
  EXPECT_EQ(g->node(relu + 1).op_type(), "QuantizeLinear");
  EXPECT_EQ(g->node(relu + 1).input(0), "a");
  EXPECT_EQ(g->node(relu + 2).op_type(), "DequantizeLinear");
  EXPECT_EQ(testing::Values<float>(testing::Init(*g, "a_scale")).at(0), 0.5f);
  const onnx::TensorProto* zp = testing::Init(*g, "a_zero_point");
  ASSERT_NE(zp, nullptr);
  EXPECT_EQ(zp->data_type(), onnx::TensorProto::UINT8);
  EXPECT_EQ(static_cast<uint8_t>(zp->raw_data()[0]), 10);
  EXPECT_TRUE(graph::ValidateModel(m, "output", nullptr).ok());

  // Again on the same tensor: it already feeds a QuantizeLinear.
  absl::StatusOr<QuantPoint> again =
      InsertQuantPoint(g, "a", {Index(*g, "other/sig")}, Uint8(), nullptr);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->outcome, QuantPoint::kAlreadyQuantized);
  // And on the dequantized tensor: it comes out of a DequantizeLinear.
  again = InsertQuantPoint(g, "a_dequantized", {Index(*g, "c/neg")}, Uint8(),
                           nullptr);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->outcome, QuantPoint::kAlreadyQuantized);
  EXPECT_EQ(NodesOf(*g, "QuantizeLinear").size(), 1u);
}

TEST(InsertQuantPointTest, NotDirectlyConnectedIsAnError) {
  onnx::ModelProto m = Fanout();
  onnx::GraphProto* g = m.mutable_graph();
  const std::string before = m.SerializeAsString();
  // c/exp reads t, not a.
  absl::StatusOr<QuantPoint> p = InsertQuantPoint(
      g, "a", {Index(*g, "c/neg"), Index(*g, "c/exp")}, Uint8(), nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr("producer is not directly connected to the consumers"));
  EXPECT_THAT(p.status().message(), HasSubstr("c/exp"));
  EXPECT_EQ(m.SerializeAsString(), before);
}

TEST(InsertQuantPointTest, BadArguments) {
  onnx::ModelProto m = Fanout();
  onnx::GraphProto* g = m.mutable_graph();
  EXPECT_EQ(InsertQuantPoint(g, "nope", {1}, Uint8(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InsertQuantPoint(g, "a", {}, Uint8(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InsertQuantPoint(g, "a", {99}, Uint8(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A zero point outside the grid.
  EXPECT_EQ(
      InsertQuantPoint(g, "a", {1}, Uint8(0.5f, 300), nullptr).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(InsertQuantPointTest, ProducerScopeChecksNodeNameOrInputName) {
  onnx::ModelProto m = Fanout();
  onnx::GraphProto* g = m.mutable_graph();
  QuantPointParams params = Uint8();
  params.producer_scope = "p/";
  // Graph input "in": its own name is the producer's name.
  absl::StatusOr<QuantPoint> p =
      InsertQuantPoint(g, "in", {Index(*g, "p/relu")}, params, nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outcome, QuantPoint::kProducerOutOfScope);
  params.producer_scope = "i";
  p = InsertQuantPoint(g, "in", {Index(*g, "p/relu")}, params, nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outcome, QuantPoint::kInserted);
  // A graph input's pair goes first.
  EXPECT_EQ(g->node(0).op_type(), "QuantizeLinear");
  params.producer_scope = "p/";
  p = InsertQuantPoint(g, "t", {Index(*g, "c/exp")}, params, nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outcome, QuantPoint::kInserted);
  params.producer_scope = "q/";
  p = InsertQuantPoint(g, "a", {Index(*g, "c/neg")}, params, nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outcome, QuantPoint::kProducerOutOfScope);
  EXPECT_THAT(p->detail, HasSubstr("p/relu"));
  EXPECT_TRUE(graph::ValidateModel(m, "output", nullptr).ok());
}

TEST(InsertQuantPointTest, ConsumerScopeSkipsWhenAnyConsumerIsOutside) {
  onnx::ModelProto m = Fanout();
  onnx::GraphProto* g = m.mutable_graph();
  const std::string before = m.SerializeAsString();
  QuantPointParams params = Uint8();
  params.consumer_scope = "c/";
  absl::StatusOr<QuantPoint> p = InsertQuantPoint(
      g, "a", {Index(*g, "c/neg"), Index(*g, "other/sig")}, params, nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outcome, QuantPoint::kConsumerOutOfScope);
  EXPECT_THAT(p->detail, HasSubstr("other/sig"));
  EXPECT_EQ(m.SerializeAsString(), before);
  p = InsertQuantPoint(g, "a", {Index(*g, "c/neg"), Index(*g, "c/abs")}, params,
                       nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outcome, QuantPoint::kInserted);
}

TEST(InsertQuantPointTest, FollowedByQuantizeThroughIdentity) {
  ModelBuilder b(13);
  b.Input("x", {4});
  b.Initializer("s", {}, {0.1f});
  b.Node("Relu", {"x"}, {"a"}, "relu");
  b.Node("Identity", {"a"}, {"i"}, "id");
  b.Node("QuantizeLinear", {"i", "s"}, {"q"}, "q");
  b.Node("Neg", {"a"}, {"n"}, "neg");
  b.Output("q", {4}, onnx::TensorProto::UINT8).Output("n", {4});
  onnx::ModelProto m = b.Build();
  absl::StatusOr<QuantPoint> p =
      InsertQuantPoint(m.mutable_graph(), "a", {3}, Uint8(), nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->outcome, QuantPoint::kAlreadyQuantized);
}

TEST(InsertQuantPointTest, NarrowGridGetsAClipToItsRange) {
  onnx::ModelProto m = Fanout();
  onnx::GraphProto* g = m.mutable_graph();
  QuantPointParams params;
  params.params = {0.25f, 0};
  params.spec = {8, true, true, true};  // int8 narrow: [-127, 127].
  absl::StatusOr<QuantPoint> p =
      InsertQuantPoint(g, "a", {Index(*g, "c/neg")}, params, nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->clipped);
  const int relu = Index(*g, "p/relu");
  const onnx::NodeProto& clip = g->node(relu + 1);
  ASSERT_EQ(clip.op_type(), "Clip");
  EXPECT_EQ(testing::Values<float>(testing::Init(*g, clip.input(1))).at(0),
            -127 * 0.25f);
  EXPECT_EQ(testing::Values<float>(testing::Init(*g, clip.input(2))).at(0),
            127 * 0.25f);
  EXPECT_EQ(g->node(relu + 2).input(0), clip.output(0));
  EXPECT_EQ(testing::Init(*g, "a_zero_point")->data_type(),
            onnx::TensorProto::INT8);
  EXPECT_TRUE(graph::ValidateModel(m, "output", nullptr).ok());
}

TEST(InsertQuantPointTest, ConsumersOfListsEachReaderOnce) {
  ModelBuilder b(13);
  b.Input("x", {4});
  b.Node("Add", {"x", "x"}, {"y"}, "add");
  b.Node("Neg", {"x"}, {"z"}, "neg");
  b.Output("y", {4}).Output("z", {4});
  onnx::ModelProto m = b.Build();
  EXPECT_THAT(ConsumersOf(m.graph(), "x"), ::testing::ElementsAre(0, 1));
  absl::StatusOr<QuantPoint> p = InsertQuantPoint(
      m.mutable_graph(), "x", ConsumersOf(m.graph(), "x"), Uint8(), nullptr);
  ASSERT_TRUE(p.ok());
  const onnx::NodeProto* add = NodeNamed(m.graph(), "add");
  EXPECT_EQ(add->input(0), "x_dequantized");
  EXPECT_EQ(add->input(1), "x_dequantized");
}

// W4A4 points: the zero point (and so the quantized tensor) is UINT4 or
// INT4, packed; a Clip comes first only when the grid is smaller than the
// 4-bit type.
TEST(InsertQuantPointTest, FourBitStorage) {
  auto zero_point_of = [](const onnx::GraphProto& g, const QuantPoint& p) {
    for (const auto& n : g.node()) {
      if (n.op_type() != "QuantizeLinear" ||
          std::find(p.nodes.begin(), p.nodes.end(), n.name()) ==
              p.nodes.end()) {
        continue;
      }
      for (const auto& t : g.initializer()) {
        if (t.name() == n.input(2)) return t;
      }
    }
    return onnx::TensorProto();
  };
  onnx::ModelProto m = Fanout();
  onnx::GraphProto* g = m.mutable_graph();
  QuantPointParams params = Uint8(0.25f, 3);
  params.spec.bits = 4;
  params.four_bit_storage = true;
  absl::StatusOr<QuantPoint> p =
      InsertQuantPoint(g, "a", {Index(*g, "c/neg")}, params, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->clipped);  // [0, 15] is all of UINT4.
  onnx::TensorProto zp = zero_point_of(*g, *p);
  EXPECT_EQ(zp.data_type(), numerics::kOnnxUint4);
  EXPECT_EQ(zp.dims_size(), 0);
  EXPECT_EQ(zp.raw_data(), std::string(1, '\x03'));  // Low nibble first.

  // Signed narrow range [-7, 7] inside INT4's [-8, 7]: Clip first.
  params.spec = {4, true, true, true};
  params.params = {0.5f, -2};
  p = InsertQuantPoint(g, "t", {Index(*g, "c/exp")}, params, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->clipped);
  zp = zero_point_of(*g, *p);
  EXPECT_EQ(zp.data_type(), numerics::kOnnxInt4);
  EXPECT_EQ(zp.raw_data(), std::string(1, '\x0e'));  // -2 in two's complement.

  // 5 bits do not fit 4-bit storage.
  params.spec = {5, false, false, false};
  params.params = {0.5f, 1};
  EXPECT_EQ(InsertQuantPoint(g, "in", {Index(*g, "p/tanh")}, params, nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::passes
