// Tests of the guarded ONNX shape inference (core/graph/inference.h). Each
// model below crashed libonnx 1.12's inference, data propagation or version
// converter (segfault or division by zero) before GuardOnnxInference: found
// by fuzz/executor_fuzzer.cc and by a probe of every ONNX schema with wild
// inputs and attributes (docs/reliability.md). Each test runs inference on
// it (the test process would die) and checks that a branch the broken node
// does not feed is still typed, and where it matters that a valid node of
// the same op still is.
#include "core/graph/inference.h"

#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd {
namespace {

using ::quantd::testing::ModelBuilder;

// A Constant node with an INT64 tensor of `dims` and `values`.
void AddInt64Constant(ModelBuilder* b, const std::string& output,
                      std::vector<int64_t> dims, std::vector<int64_t> values) {
  onnx::NodeProto* node = b->model().mutable_graph()->add_node();
  node->set_op_type("Constant");
  node->set_name(output + "_const");
  node->add_output(output);
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* t = a->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
}

// Whether inference typed `name` with a shape.
bool Shaped(const onnx::ModelProto& model, const std::string& name) {
  const auto types = graph::InferValueTypes(model);
  auto it = types.find(name);
  return it != types.end() && it->second.tensor_type().has_shape();
}

// A witness branch every model below gets: inference must still type it.
void AddWitness(ModelBuilder* b, const std::string& x) {
  b->Node("Neg", {x}, {"witness"}, "witness");
}

// Found by fuzz/executor_fuzzer.cc: libonnx 1.12's ConvTranspose shape
// inference read the weight's dims past its rank, so a request whose
// ConvTranspose has a scalar weight crashed the server where preparation
// (opset upgrade, folding of Shape) or calibration runs inference.
TEST(InferValueTypes, SkipsConvTransposeWithAWeightBelowRankThree) {
  onnx::ModelProto model;
  model.set_ir_version(7);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("g");
  onnx::TensorProto* x = g->add_initializer();
  x->set_name("x");
  x->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {1, 1, 7}) x->add_dims(d);
  x->set_raw_data(std::string(7 * sizeof(float), '\0'));
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->set_raw_data(std::string(sizeof(float), '\0'));
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("ConvTranspose");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  onnx::AttributeProto* pad = n->add_attribute();
  pad->set_name("auto_pad");
  pad->set_type(onnx::AttributeProto::STRING);
  pad->set_s("SAME_UPPER");
  onnx::ValueInfoProto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT);

  const auto types = graph::InferValueTypes(model);  // must not crash
  EXPECT_TRUE(types.contains("y"));                  // the declared output

  EXPECT_FALSE(types.at("y").tensor_type().has_shape());
  // With a rank-3 weight the node is inferred.
  for (int64_t d : {1, 1, 3}) w->add_dims(d);
  w->set_raw_data(std::string(3 * sizeof(float), '\0'));
  EXPECT_EQ(
      graph::InferValueTypes(model).at("y").tensor_type().shape().dim_size(),
      3);
}

// Conv's inference reads W's dim 0 and its dims by X's rank: a rank-0
// weight crashed it (the executor fuzzer's replay). Weights behind Cast or
// DequantizeLinear keep their rank and their Conv stays.
TEST(InferValueTypes, SkipsConvWhoseWeightDoesNotFitItsInput) {
  auto model = [](std::vector<int64_t> w_dims, bool behind_cast) {
    ModelBuilder b;
    b.Input("x", {1, 2, 5, 5});
    b.Weight("w", w_dims);
    if (behind_cast) {
      b.Node("Cast", {"w"}, {"w32"}, "cast")
          .Attr("to", int64_t{onnx::TensorProto::FLOAT});
    }
    b.Node("Conv", {"x", behind_cast ? "w32" : "w"}, {"y"}, "conv");
    return b.Build();
  };
  for (const auto& [dims, cast, dropped] :
       {std::tuple<std::vector<int64_t>, bool, int>{{}, false, 1},
        {{3, 2}, false, 1},
        {{3, 2, 3}, false, 1},  // Rank 3 against a rank-4 input.
        {{3, 2, 3, 3}, false, 0},
        {{3, 2, 3, 3}, true, 0}}) {
    const onnx::ModelProto m = model(dims, cast);
    SCOPED_TRACE(::testing::PrintToString(dims));
    EXPECT_EQ(Shaped(m, "y"), !dropped);  // must not crash
  }
}

// Some inference and data-propagation functions of ONNX 1.12 dereference a
// required input's type, which is null when earlier inference could not
// type that value (a Trilu or a Det of a vector): EyeLike's inference and
// Shape's data propagation (with start/end) segfaulted, and a 120-byte
// model that passes onnx.checker crashed the server in Calibrate (the
// executor fuzzer's mutations, 2026-12-04). InferShapesGuarded skips such a
// node; the rest of the graph is still typed.
TEST(InferValueTypes, SkipsNodesWhoseRequiredInputHasNoType) {
  ModelBuilder b;
  b.Input("x", {4}).Output("y").Output("n");
  b.Node("Trilu", {"x"}, {"t"}, "trilu");
  b.Node("EyeLike", {"t"}, {"eye"}, "eye")
      .Attr("dtype", int64_t{onnx::TensorProto::FLOAT});
  b.Node("Shape", {"t"}, {"s"}, "shape")
      .Attr("start", int64_t{-2})
      .Attr("end", int64_t{1});
  b.Node("Concat", {"eye", "eye"}, {"y"}, "concat").Attr("axis", int64_t{0});
  b.Node("Neg", {"x"}, {"m"}, "neg");
  b.Node("Relu", {"m"}, {"n"}, "relu");
  onnx::ModelProto m = b.Build();
  for (int64_t opset : {14, 18}) {
    m.mutable_opset_import(0)->set_version(opset);
    SCOPED_TRACE(opset);
    const auto types = graph::InferValueTypes(m);  // must not crash
    // The branch that does not read the untyped value is typed.
    ASSERT_TRUE(types.contains("m"));
    EXPECT_EQ(types.at("m").tensor_type().elem_type(),
              onnx::TensorProto::FLOAT);
    EXPECT_EQ(types.at("m").tensor_type().shape().dim_size(), 1);
    EXPECT_FALSE(types.contains("eye"));
    EXPECT_FALSE(types.contains("s"));
    onnx::ModelProto copy = m;
    graph::InferShapesGuarded(&copy, /*data_propagation=*/false);
  }
}

// LayerNormalization's inference (ONNX 1.12) indexed dims with an axis
// still negative after adding the rank once: axis -2 on a vector crashed it
// (the executor fuzzer's replay, 2026-12-04). A probe of every ONNX op with
// an axis/axes attribute at ranks 1 and 3 and axes r, -r-1, +-100 found no
// other.
TEST(InferValueTypes, SkipsAnAxisBelowMinusTheRank) {
  for (int64_t axis : {-2, -1}) {
    ModelBuilder b(17);
    b.Input("x", {4}).Output("y");
    b.Weight("scale", {4});
    b.Node("Neg", {"x"}, {"n"}, "neg");
    b.Node("LayerNormalization", {"n", "scale"}, {"normalized", "mean"}, "ln")
        .Attr("axis", axis);
    b.Node("Relu", {"normalized"}, {"y"}, "relu");
    SCOPED_TRACE(axis);
    const auto types = graph::InferValueTypes(b.Build());  // must not crash
    ASSERT_TRUE(types.contains("n"));
    // A valid axis is still inferred.
    EXPECT_EQ(types.contains("normalized"), axis == -1);
  }
  // The default axis (-1) on a scalar.
  ModelBuilder b(17);
  b.Input("x", {}).Output("y");
  b.Weight("scale", {1});
  b.Node("LayerNormalization", {"x", "scale"}, {"y"}, "ln");
  graph::InferValueTypes(b.Build());  // must not crash
}

// Pooling and convolution ops divide by their strides: strides 0 was a
// SIGFPE (AveragePool 7/11/13, MaxPool, LpPool, Conv, ConvInteger,
// QLinearConv), and the opset-11 form crashed through the version
// converter too (below).
TEST(InferValueTypes, SkipsWindowsWithStridesOrDilationsBelowOne) {
  for (const char* attr : {"strides", "dilations"}) {
    for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{1}}) {
      for (const char* op : {"AveragePool", "MaxPool", "LpPool", "Conv"}) {
        if (std::string(attr) == "dilations" && std::string(op) != "MaxPool" &&
            std::string(op) != "Conv") {
          continue;
        }
        ModelBuilder b(17);
        b.Input("x", {1, 1, 4, 4});
        b.Weight("w", {1, 1, 1, 1});
        if (std::string(op) == "Conv") {
          b.Node(op, {"x", "w"}, {"y"}, "op");
        } else {
          b.Node(op, {"x"}, {"y"}, "op");
        }
        b.Attr("kernel_shape", std::vector<int64_t>{1, 1}).Attr(attr, {v, v});
        AddWitness(&b, "x");
        SCOPED_TRACE(::testing::Message() << op << " " << attr << " " << v);
        const onnx::ModelProto m = b.Build();
        EXPECT_TRUE(Shaped(m, "witness"));
        EXPECT_EQ(Shaped(m, "y"), v == 1);
      }
    }
  }
}

// RNN-1, GRU-3 and LSTM-1 read X's dims 0 and 1, Gemm-6 A's and B's, STFT
// the signal's, without looking at the rank: rank 0 segfaulted.
TEST(InferValueTypes, SkipsInputsOfTheWrongRankWhereDimsAreReadUnchecked) {
  struct Case {
    const char* op;
    int64_t opset;
    std::vector<std::vector<int64_t>> inputs;
    int outputs;
  };
  const Case cases[] = {
      {"RNN", 7, {{}, {1, 5, 3}, {1, 5, 5}}, 2},
      {"GRU", 7, {{}, {1, 15, 3}, {1, 15, 5}}, 2},
      {"LSTM", 7, {{}, {1, 20, 3}, {1, 20, 5}}, 2},
      {"Gemm", 6, {{}, {4, 5}, {1}}, 1},
      {"Gemm", 13, {{4}, {4, 5}, {1}}, 1},
      {"MaxUnpool", 17, {{1, 1, 1, 1}, {3}}, 1},
      {"STFT", 17, {{}, {}}, 1},
  };
  for (const Case& c : cases) {
    ModelBuilder b(c.opset);
    std::vector<std::string> inputs;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const std::string name = "in" + std::to_string(i);
      const bool int64 = (std::string(c.op) == "MaxUnpool" && i == 1) ||
                         (std::string(c.op) == "STFT" && i == 1);
      b.Input(name, c.inputs[i],
              int64 ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
      inputs.push_back(name);
    }
    std::vector<std::string> outputs = {"y"};
    if (c.outputs == 2) outputs.push_back("y_h");
    b;
    b.Node(c.op, inputs, outputs, "op");
    if (std::string(c.op) == "RNN" || std::string(c.op) == "GRU" ||
        std::string(c.op) == "LSTM") {
      b.Attr("hidden_size", int64_t{5});
    }
    if (std::string(c.op) == "MaxUnpool") {
      b.Attr("kernel_shape", std::vector<int64_t>{1, 1});
    }
    AddWitness(&b, "in0");
    SCOPED_TRACE(::testing::Message() << c.op << "-" << c.opset);
    const onnx::ModelProto m = b.Build();
    EXPECT_TRUE(Shaped(m, "witness"));
  }
  // Valid ranks are still inferred.
  ModelBuilder b(13);
  b.Input("a", {3, 4});
  b.Weight("w", {4, 5});
  b.Node("Gemm", {"a", "w"}, {"y"}, "gemm");
  EXPECT_TRUE(Shaped(b.Build(), "y"));
}

// GatherND's batch_dims of -2 and below segfaulted (opsets 12, 13, 17).
TEST(InferValueTypes, SkipsANegativeBatchDims) {
  for (int64_t batch_dims : {-2, -1, 0, 1}) {
    ModelBuilder b(13);
    b.Input("d", {2, 2}).Input("i", {2, 1}, onnx::TensorProto::INT64);
    b;
    b.Node("GatherND", {"d", "i"}, {"y"}, "g").Attr("batch_dims", batch_dims);
    AddWitness(&b, "d");
    SCOPED_TRACE(batch_dims);
    const onnx::ModelProto m = b.Build();
    EXPECT_TRUE(Shaped(m, "witness"));
    EXPECT_EQ(Shaped(m, "y"), batch_dims >= 0);
  }
}

// SplitToSequence divided by a known scalar split of 0 (SIGFPE; a probe of
// sequence ops found it, checker-valid, killing the server in STATIC calls).
TEST(InferValueTypes, SkipsASplitSizeOfZero) {
  for (int64_t split : {0, 2}) {
    ModelBuilder b(15);
    b.Input("x", {4, 3});
    AddInt64Constant(&b, "split", {}, {split});
    b.Node("SplitToSequence", {"x", "split"}, {"seq"}, "s");
    AddWitness(&b, "x");
    SCOPED_TRACE(split);
    const onnx::ModelProto m = b.Build();
    EXPECT_TRUE(Shaped(m, "witness"));
    EXPECT_EQ(graph::InferValueTypes(m).count("seq"), split > 0 ? 1u : 0u);
  }
}

// LayerNormalization with a second output and an axis of 2^31 and above
// segfaulted (an axis above the rank; below minus the rank: above).
TEST(InferValueTypes, SkipsAnAxisAboveTheRank) {
  for (int64_t axis : {int64_t{1} << 31, int64_t{3}, int64_t{2}, int64_t{1}}) {
    ModelBuilder b(17);
    b.Input("x", {2, 2});
    b.Weight("scale", {2});
    b.Node("LayerNormalization", {"x", "scale"}, {"y", "mean"}, "ln")
        .Attr("axis", axis);
    AddWitness(&b, "x");
    SCOPED_TRACE(axis);
    const onnx::ModelProto m = b.Build();
    EXPECT_TRUE(Shaped(m, "witness"));
    EXPECT_EQ(Shaped(m, "y"), axis <= 2);
  }
}

// Add/Sub/Mul (opset 14 and up) propagated the values of an empty shape
// (Shape of a scalar) and a one-element constant by reading past the end
// of the empty one.
TEST(InferValueTypes, SkipsDataPropagationOfAnEmptyValue) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    ModelBuilder b(17);
    b.Input("x", {});
    b.Node("Shape", {"x"}, {"s"}, "shape");
    AddInt64Constant(&b, "c", {1}, {5});
    b.Node(op, {"s", "c"}, {"y"}, "op");
    AddWitness(&b, "x");
    SCOPED_TRACE(op);
    EXPECT_TRUE(Shaped(b.Build(), "witness"));
  }
  // Known values of one element each are still propagated: the Reshape
  // gets its shape from Shape * 2.
  ModelBuilder b(17);
  b.Input("x", {3});
  b.Node("Shape", {"x"}, {"s"}, "shape");
  AddInt64Constant(&b, "c", {1}, {2});
  b.Node("Mul", {"s", "c"}, {"s2"}, "mul");
  b.Node("ConstantOfShape", {"s2"}, {"y"}, "fill");
  const auto types = graph::InferValueTypes(b.Build());
  ASSERT_TRUE(types.contains("y"));
  ASSERT_EQ(types.at("y").tensor_type().shape().dim_size(), 1);
  EXPECT_EQ(types.at("y").tensor_type().shape().dim(0).dim_value(), 6);
}

// ConstantOfShape and Expand build one dim per element of their shape
// input: a declared length of 2^24 ran for minutes, 2^31 exhausted memory.
TEST(InferValueTypes, SkipsAShapeInputLongerThanAnyRank) {
  for (const auto& [op, length] :
       {std::pair<std::string, int64_t>{"ConstantOfShape", int64_t{1} << 31},
        {"Expand", int64_t{1} << 24},
        {"ConstantOfShape", 4}}) {
    ModelBuilder b(17);
    b.Input("x", {1}).Input("s", {length}, onnx::TensorProto::INT64);
    b;
    if (op == "Expand") {
      b.Node(op, {"x", "s"}, {"y"}, "op");
    } else {
      b.Node(op, {"s"}, {"y"}, "op");
    }
    AddWitness(&b, "x");
    SCOPED_TRACE(op + " " + std::to_string(length));
    const onnx::ModelProto m = b.Build();
    EXPECT_TRUE(Shaped(m, "witness"));
    EXPECT_EQ(Shaped(m, "y"), length == 4);
  }
}

}  // namespace
}  // namespace quantd
