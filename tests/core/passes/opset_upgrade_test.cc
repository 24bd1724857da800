#include "core/passes/opset_upgrade.h"

#include <string>
#include <vector>

#include "core/graph/model_io.h"
#include "core/numerics/int4.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;
using testing::ModelBuilder;

const onnx::NodeProto* NodeNamed(const onnx::GraphProto& g,
                                 const std::string& name) {
  for (const auto& n : g.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

const onnx::AttributeProto* AttrOf(const onnx::NodeProto& n,
                                   const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

void SetStringAttr(onnx::ModelProto* m, const std::string& node,
                   const std::string& name, const std::string& value) {
  for (auto& n : *m->mutable_graph()->mutable_node()) {
    if (n.name() != node) continue;
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(value);
  }
}

// ONNX's SequenceInsert test model (opset 11, sequence input and output):
// libonnx's converter wrote both back without a type, and the output model
// failed the checker (an INTERNAL error for a valid model).
TEST(ConvertOpsetTest, SequenceInputsAndOutputsKeepTheirTypes) {
  const std::string bytes = ::quantd::testing::ReadFileOrDie(
      "/usr/include/onnx/backend/test/data/node/"
      "test_sequence_insert_at_back/model.onnx");
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  ASSERT_TRUE(m.graph().input(0).type().has_sequence_type());
  ASSERT_TRUE(ConvertOpset(&m, 13).ok());
  EXPECT_EQ(graph::DefaultOpset(m), 13);
  EXPECT_TRUE(m.graph().input(0).type().has_sequence_type());
  EXPECT_TRUE(m.graph().output(0).type().has_sequence_type());
  EXPECT_TRUE(m.graph().input(1).type().has_tensor_type());
}

// ONNX's Scan test model at opset 8: the converter's Scan 8 -> 9 adapter
// dropped the batch axis of the state input ('initial' [1,2] -> [2]), and the
// quantized model took other tensors than the original (ONNX Runtime: "Invalid
// rank for input: initial"). The upgrade is refused, naming the input, and
// the model is left as it was.
TEST(ConvertOpsetTest, AConversionThatChangesTheInterfaceIsRefused) {
  const std::string bytes = ::quantd::testing::ReadFileOrDie(
      "/usr/include/onnx/backend/test/data/node/test_scan_sum/model.onnx");
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  ASSERT_EQ(graph::DefaultOpset(m), 8);
  const std::string before = m.SerializeAsString();
  absl::Status s = ConvertOpset(&m, 13);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(),
              HasSubstr("graph input 'initial' from [1,2] to [2]"));
  EXPECT_EQ(m.SerializeAsString(), before);

  absl::StatusOr<OpsetOutcome> ensured = EnsureOpset(&m, 13);
  ASSERT_FALSE(ensured.ok());
  EXPECT_EQ(ensured.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ensured.status().message(),
              HasSubstr("Export the model with opset 13 or newer"));
}

TEST(RaiseOpsetForInt4Test, PlainModelIsRaisedWithIrVersion10) {
  onnx::ModelProto m = testing::ConvModel().Build();
  absl::StatusOr<std::string> note = RaiseOpsetForInt4(&m);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(graph::DefaultOpset(m), 21);
  EXPECT_EQ(m.ir_version(), numerics::kInt4MinIrVersion);
  EXPECT_THAT(*note, HasSubstr("opset raised from 13 to 21"));
  EXPECT_THAT(*note, ::testing::Not(HasSubstr("rewritten")));
}

TEST(RaiseOpsetForInt4Test, ReduceAxesAttributeBecomesAConstantInput) {
  ModelBuilder b;
  b.Input("x", {2, 3, 4})
      .Node("ReduceMean", {"x"}, {"y"}, "mean")
      .Attr("axes", std::vector<int64_t>{1, -1})
      .Attr("keepdims", 0)
      .Output("y", {2});
  onnx::ModelProto m = b.Build();
  absl::StatusOr<std::string> note = RaiseOpsetForInt4(&m);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_THAT(*note, HasSubstr("ReduceMean 'mean': axes attribute -> input"));
  const onnx::GraphProto& g = m.graph();
  ASSERT_EQ(g.node_size(), 2);
  const onnx::NodeProto& constant = g.node(0);  // Before its reader.
  EXPECT_EQ(constant.op_type(), "Constant");
  const onnx::NodeProto* mean = NodeNamed(g, "mean");
  ASSERT_NE(mean, nullptr);
  EXPECT_EQ(AttrOf(*mean, "axes"), nullptr);
  EXPECT_NE(AttrOf(*mean, "keepdims"), nullptr);
  ASSERT_EQ(mean->input_size(), 2);
  EXPECT_EQ(mean->input(1), constant.output(0));
  const onnx::TensorProto& axes = AttrOf(constant, "value")->t();
  EXPECT_EQ(axes.data_type(), onnx::TensorProto::INT64);
  EXPECT_THAT(axes.int64_data(), ::testing::ElementsAre(1, -1));
}

TEST(RaiseOpsetForInt4Test, SplitWithoutSizesGetsNumOutputs) {
  ModelBuilder b;
  b.Input("x", {2, 6})
      .Node("Split", {"x"}, {"a", "b", "c"}, "split")
      .Attr("axis", 1)
      .Output("a", {2, 2})
      .Output("b", {2, 2})
      .Output("c", {2, 2});
  onnx::ModelProto m = b.Build();
  ASSERT_TRUE(RaiseOpsetForInt4(&m).ok());
  const onnx::AttributeProto* n =
      AttrOf(*NodeNamed(m.graph(), "split"), "num_outputs");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->i(), 3);
}

TEST(RaiseOpsetForInt4Test, RoiAlignKeepsItsOldCoordinateMode) {
  ModelBuilder b;
  b.Input("x", {1, 1, 4, 4})
      .Input("rois", {1, 4})
      .Input("idx", {1}, onnx::TensorProto::INT64)
      .Node("RoiAlign", {"x", "rois", "idx"}, {"y"}, "roi")
      .Output("y");
  onnx::ModelProto m = b.Build();
  ASSERT_TRUE(RaiseOpsetForInt4(&m).ok());
  const onnx::AttributeProto* mode =
      AttrOf(*NodeNamed(m.graph(), "roi"), "coordinate_transformation_mode");
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->s(), "output_half_pixel");
}

TEST(RaiseOpsetForInt4Test, GridSampleModesAreRenamed) {
  ModelBuilder b(16);
  b.Input("x", {1, 1, 4, 4})
      .Input("grid", {1, 2, 2, 2})
      .Node("GridSample", {"x", "grid"}, {"y"}, "gs")
      .Output("y");
  onnx::ModelProto m = b.Build();
  SetStringAttr(&m, "gs", "mode", "bicubic");
  ASSERT_TRUE(RaiseOpsetForInt4(&m).ok());
  EXPECT_EQ(AttrOf(*NodeNamed(m.graph(), "gs"), "mode")->s(), "cubic");
}

TEST(RaiseOpsetForInt4Test, BatchNormTrainingOutputs) {
  auto model = [](bool read_mean) {
    ModelBuilder b;
    b.Input("x", {1, 2, 3, 3})
        .Initializer("s", {2}, {1, 1})
        .Initializer("b", {2}, {0, 0})
        .Initializer("m", {2}, {0, 0})
        .Initializer("v", {2}, {1, 1})
        .Node("BatchNormalization", {"x", "s", "b", "m", "v"},
              {"y", "mean_out", "var_out"}, "bn")
        .Output("y");
    if (read_mean) b.Output("mean_out");
    return b.Build();
  };
  onnx::ModelProto unread = model(false);
  absl::StatusOr<std::string> note = RaiseOpsetForInt4(&unread);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(NodeNamed(unread.graph(), "bn")->output_size(), 1);

  onnx::ModelProto read = model(true);
  absl::StatusOr<std::string> refused = RaiseOpsetForInt4(&read);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("BatchNormalization 'bn'"));
  EXPECT_THAT(refused.status().message(), HasSubstr("mean_out"));
  EXPECT_EQ(graph::DefaultOpset(read), 13);  // Unchanged.
  EXPECT_EQ(NodeNamed(read.graph(), "bn")->output_size(), 3);
}

TEST(RaiseOpsetForInt4Test, ChangedOpsWithoutRewriteAreRefusedByName) {
  {
    ModelBuilder b(18);
    b.Input("x", {1, 4, 2, 2})
        .Initializer("scale", {2}, {1, 1})
        .Initializer("bias", {2}, {0, 0})
        .Node("GroupNormalization", {"x", "scale", "bias"}, {"y"}, "gn")
        .Attr("num_groups", 2)
        .Output("y");
    onnx::ModelProto m = b.Build();
    absl::StatusOr<std::string> s = RaiseOpsetForInt4(&m);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(s.status().message(), HasSubstr("GroupNormalization 'gn'"));
    EXPECT_THAT(s.status().message(), HasSubstr("opset 21"));
    EXPECT_EQ(graph::DefaultOpset(m), 18);
  }
  {
    ModelBuilder b;
    b.Input("x", {1, 1, 2, 2})
        .Initializer("roi", {0}, {})
        .Initializer("scales", {4}, {1, 1, 2, 2})
        // A ReduceMean before the refused node: nothing may change.
        .Node("ReduceMean", {"x"}, {"r"}, "mean")
        .Attr("axes", std::vector<int64_t>{1})
        .Node("Resize", {"x", "roi", "scales"}, {"y"}, "resize")
        .Output("y")
        .Output("r");
    onnx::ModelProto m = b.Build();
    SetStringAttr(&m, "resize", "coordinate_transformation_mode",
                  "tf_half_pixel_for_nn");
    absl::StatusOr<std::string> s = RaiseOpsetForInt4(&m);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(s.status().message(), HasSubstr("Resize 'resize'"));
    EXPECT_THAT(s.status().message(), HasSubstr("tf_half_pixel_for_nn"));
    EXPECT_EQ(m.graph().node_size(), 2);
    EXPECT_NE(AttrOf(*NodeNamed(m.graph(), "mean"), "axes"), nullptr);
  }
}

TEST(RaiseOpsetForInt4Test, SubgraphNodesAreCheckedAndRewritten) {
  ModelBuilder body;
  body.Node("ReduceMax", {"x"}, {"t"}, "inner_max")
      .Attr("axes", std::vector<int64_t>{0})
      .Output("t");
  ModelBuilder b;
  b.Input("x", {3}).Input("cond", {}, onnx::TensorProto::BOOL);
  b.Node("If", {"cond"}, {"y"}, "if").Output("y");
  onnx::ModelProto m = b.Build();
  onnx::NodeProto* if_node = m.mutable_graph()->mutable_node(0);
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = if_node->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = body.Build().graph();
  }
  absl::StatusOr<std::string> note = RaiseOpsetForInt4(&m);
  ASSERT_TRUE(note.ok()) << note.status();
  const onnx::GraphProto& then_g =
      AttrOf(m.graph().node(0), "then_branch")->g();
  ASSERT_EQ(then_g.node_size(), 2);
  EXPECT_EQ(then_g.node(0).op_type(), "Constant");
  EXPECT_EQ(AttrOf(then_g.node(1), "axes"), nullptr);
  EXPECT_EQ(then_g.node(1).input_size(), 2);
}

TEST(RaiseOpsetForInt4Test, BelowThirteenIsAPrecondition) {
  onnx::ModelProto m = testing::ConvModel(8, 16, 11).Build();
  EXPECT_EQ(RaiseOpsetForInt4(&m).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(EnsureOpsetTest, Int4ConvertsOldModelsThenRaises) {
  onnx::ModelProto m = testing::ConvModel(8, 16, 11).Build();
  absl::StatusOr<OpsetOutcome> out = EnsureOpset(&m, kInt4Opset);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->mode, OpsetOutcome::kUpgraded);
  EXPECT_EQ(out->from, 11);
  EXPECT_EQ(out->to, 21);
  EXPECT_EQ(graph::DefaultOpset(m), 21);
  EXPECT_GE(m.ir_version(), 10);
  EXPECT_THAT(out->note, HasSubstr("ONNX version converter"));
  EXPECT_THAT(out->note, HasSubstr("opset raised from 13 to 21"));
}

// The rewrites mean the same at 21: ONNX Runtime gives identical outputs for
// the model before (opset 13) and after the raise.
TEST(RaiseOpsetForInt4Test, OrtAgreesBeforeAndAfter) {
  ModelBuilder b;
  b.Input("x", {4, 6})
      .Node("ReduceMean", {"x"}, {"m"}, "mean")
      .Attr("axes", std::vector<int64_t>{1})
      .Attr("keepdims", 1)
      .Node("Sub", {"x", "m"}, {"c"}, "center")
      .Node("Split", {"c"}, {"a", "b"}, "split")
      .Attr("axis", 1)
      .Node("ReduceSumSquare", {"a"}, {"sa"}, "ssq")
      .Attr("axes", std::vector<int64_t>{1})
      .Node("Concat", {"sa", "b"}, {"y"}, "cat")
      .Attr("axis", 1)
      .Output("y", {4, 4});
  onnx::ModelProto before = b.Build();
  onnx::ModelProto after = before;
  ASSERT_TRUE(RaiseOpsetForInt4(&after).ok());
  quantd::testing::TempDir tmp;
  const std::string a = tmp.File("before.onnx"), c = tmp.File("after.onnx");
  quantd::testing::WriteFileOrDie(a, before.SerializeAsString());
  quantd::testing::WriteFileOrDie(c, after.SerializeAsString());
  // [4, 6] float32 .npy, written by hand.
  std::string npy("\x93NUMPY\x01\x00", 8);
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  npy.push_back(static_cast<char>(header.size() & 0xff));
  npy.push_back(static_cast<char>(header.size() >> 8));
  npy += header;
  for (int i = 0; i < 24; ++i) {
    const float v = static_cast<float>((i * 7) % 11) - 4.5f;
    npy.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  const std::string x = tmp.File("x.npy");
  quantd::testing::WriteFileOrDie(x, npy);
  const std::string json = quantd::testing::OrtEval(
      {"compare", "--model", a, "--model2", c, "--x", x});
  EXPECT_THAT(json, HasSubstr("\"identical\":true")) << json;
}

// The version converter runs ONNX inference on the model it converts: an
// opset-11 AveragePool with strides 0 was a SIGFPE in Quantize's opset
// upgrade (a DYNAMIC_RANGE call killed the server) until ConvertOpset
// called graph::GuardOnnxInference.
TEST(ConvertOpsetTest, SurvivesAModelThatCrashedOnnxInference) {
  ModelBuilder b(11);
  b.Input("x", {1, 1, 4, 4}).Output("y");
  b.Node("AveragePool", {"x"}, {"y"}, "pool")
      .Attr("kernel_shape", std::vector<int64_t>{1, 1})
      .Attr("strides", std::vector<int64_t>{0, 0});
  onnx::ModelProto m = b.Build();
  // Converted or refused; either way the process lives.
  (void)ConvertOpset(&m, 13);
}

// ONNX 1.12's converter applies ONNX's adapter to any node with an ONNX op
// name, whatever its domain: a custom-domain Scatter with no inputs
// segfaulted, and a custom-domain ConstantFill looped forever writing a
// warning (50 MB/s into the server's log). Models with nodes outside the
// default domain, in bodies too, are not handed to it.
TEST(ConvertOpsetTest, RefusesNodesOutsideTheDefaultDomain) {
  for (const char* op : {"Scatter", "ConstantFill"}) {
    for (bool in_body : {false, true}) {
      ModelBuilder b(9);
      b.Input("x", {2}).Output("y", {2});
      auto* custom = b.model().add_opset_import();
      custom->set_domain("com.example");
      custom->set_version(1);
      onnx::NodeProto foreign;
      foreign.set_op_type(op);
      foreign.set_domain("com.example");
      foreign.set_name("foreign");
      foreign.add_output("z");
      b.Node("Relu", {"x"}, {"y"}, "relu");
      if (in_body) {
        onnx::NodeProto* relu = b.model().mutable_graph()->mutable_node(0);
        onnx::AttributeProto* a = relu->add_attribute();
        a->set_name("body");  // Not Relu's: only the walk reads it.
        a->set_type(onnx::AttributeProto::GRAPH);
        *a->mutable_g()->add_node() = foreign;
      } else {
        *b.model().mutable_graph()->add_node() = foreign;
      }
      onnx::ModelProto m = b.Build();
      SCOPED_TRACE(::testing::Message() << op << (in_body ? " in a body" : ""));
      const absl::Status s = ConvertOpset(&m, 13);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
      EXPECT_THAT(s.message(), HasSubstr("domain 'com.example'"));
      EXPECT_EQ(graph::DefaultOpset(m), 9);
    }
  }
}

}  // namespace
}  // namespace quantd::passes
