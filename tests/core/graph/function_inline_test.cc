// Inlining local functions: naming, origins, attributes bound at the call,
// nested calls, subgraphs inside bodies, refusals; and, on the PyTorch
// export with local functions (tests/data/passes/function_digits.onnx), the
// inlined model computes what ONNX Runtime computes on the original.
#include "core/graph/function_inline.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/graph/model_io.h"
#include "core/graph/validate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::graph {
namespace {

using ::quantd::testing::SourcePath;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

onnx::NodeProto Node(const std::string& op, const std::string& name,
                     std::vector<std::string> in, std::vector<std::string> out,
                     const std::string& domain = "") {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  n.set_domain(domain);
  for (auto& i : in) n.add_input(i);
  for (auto& o : out) n.add_output(o);
  return n;
}

void AddFloatAttr(onnx::NodeProto* n, const std::string& name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void AddRefAttr(onnx::NodeProto* n, const std::string& name,
                const std::string& ref) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_ref_attr_name(ref);
}

void Declare(onnx::ValueInfoProto* v, const std::string& name) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_value(4);
}

// Function "Act" (domain "local"): y = LeakyRelu(x, alpha = @alpha) + x.
onnx::FunctionProto Act() {
  onnx::FunctionProto f;
  f.set_name("Act");
  f.set_domain("local");
  f.add_input("x");
  f.add_output("y");
  f.add_attribute("alpha");
  auto* op = f.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  onnx::NodeProto lr = Node("LeakyRelu", "lr", {"x"}, {"t"});
  AddRefAttr(&lr, "alpha", "alpha");
  *f.add_node() = lr;
  *f.add_node() = Node("Add", "add", {"t", "x"}, {"y"});
  return f;
}

// in -> Act "c1" (alpha 0.5) -> a -> Act "c2" (no alpha) -> out.
onnx::ModelProto TwoCalls() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("g");
  Declare(g->add_input(), "in");
  Declare(g->add_output(), "out");
  onnx::NodeProto c1 = Node("Act", "c1", {"in"}, {"a"}, "local");
  AddFloatAttr(&c1, "alpha", 0.5f);
  *g->add_node() = c1;
  *g->add_node() = Node("Act", "c2", {"a"}, {"out"}, "local");
  *m.add_functions() = Act();
  return m;
}

const onnx::NodeProto* Named(const onnx::GraphProto& g,
                             const std::string& name) {
  for (const auto& n : g.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

TEST(FunctionInlineTest, NoFunctionsIsANoOp) {
  onnx::ModelProto m = TwoCalls();
  m.clear_functions();
  const std::string before = m.SerializeAsString();
  absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->functions.empty());
  EXPECT_EQ(r->Note(), "");
  EXPECT_EQ(m.SerializeAsString(), before);
}

TEST(FunctionInlineTest, CallsBecomeRenamedNodesWithOrigins) {
  onnx::ModelProto m = TwoCalls();
  absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(m.functions_size(), 0);
  const onnx::GraphProto& g = m.graph();
  ASSERT_EQ(g.node_size(), 4);
  EXPECT_EQ(g.node(0).name(), "c1/lr");
  EXPECT_THAT(g.node(0).input(), ElementsAre("in"));
  EXPECT_THAT(g.node(0).output(), ElementsAre("c1/t"));
  EXPECT_EQ(g.node(1).name(), "c1/add");
  EXPECT_THAT(g.node(1).input(), ElementsAre("c1/t", "in"));
  EXPECT_THAT(g.node(1).output(), ElementsAre("a"));  // The call's output.
  EXPECT_EQ(g.node(2).name(), "c2/lr");
  EXPECT_THAT(g.node(3).output(), ElementsAre("out"));

  // alpha bound at c1; absent at c2 (LeakyRelu's own default applies).
  ASSERT_EQ(g.node(0).attribute_size(), 1);
  EXPECT_EQ(g.node(0).attribute(0).name(), "alpha");
  EXPECT_FLOAT_EQ(g.node(0).attribute(0).f(), 0.5f);
  EXPECT_TRUE(g.node(0).attribute(0).ref_attr_name().empty());
  EXPECT_EQ(g.node(2).attribute_size(), 0);

  EXPECT_THAT(r->functions, ElementsAre("Act"));
  EXPECT_THAT(r->calls, ElementsAre("c1", "c2"));
  ASSERT_TRUE(r->origins.contains("c2/add"));
  const NodeOrigin& o = r->origins.at("c2/add");
  EXPECT_EQ(o.function, "Act");
  EXPECT_EQ(o.domain, "local");
  EXPECT_EQ(o.node, "add");
  EXPECT_EQ(o.call, "c2");
  EXPECT_TRUE(o.top_level);
  EXPECT_THAT(r->Note(), HasSubstr("inlined 2 calls of local functions (Act)"));

  // The result is a valid plain model.
  std::vector<std::string> notes;
  EXPECT_TRUE(ValidateModel(m, "inlined", &notes).ok());
}

TEST(FunctionInlineTest, InlinedModelComputesWhatTheFunctionsMean) {
  onnx::ModelProto m = TwoCalls();
  ASSERT_TRUE(InlineLocalFunctions(&m).ok());
  absl::StatusOr<std::unique_ptr<executor::Executor>> exec =
      executor::Executor::Create(m);
  ASSERT_TRUE(exec.ok()) << exec.status();
  executor::Tensor x(onnx::TensorProto::FLOAT, {4});
  const float in[4] = {-2.0f, -1.0f, 0.5f, 3.0f};
  for (int i = 0; i < 4; ++i) x.mutable_data<float>()[i] = in[i];
  absl::StatusOr<std::vector<executor::Tensor>> out = (*exec)->Run({{"in", x}});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 4; ++i) {
    // c1: alpha 0.5; c2: LeakyRelu's default alpha 0.01.
    const float a = (in[i] < 0 ? 0.5f * in[i] : in[i]) + in[i];
    const float want = (a < 0 ? 0.01f * a : a) + a;
    EXPECT_FLOAT_EQ((*out)[0].data<float>()[i], want) << i;
  }
}

TEST(FunctionInlineTest, NamesNeverCollideAndInliningIsDeterministic) {
  onnx::ModelProto m = TwoCalls();
  // Names the inliner would pick are taken already.
  onnx::GraphProto* g = m.mutable_graph();
  *g->add_node() = Node("Relu", "c1/lr", {"out"}, {"c1/t"});
  Declare(g->add_output(), "c1/t");
  onnx::ModelProto again = m;
  ASSERT_TRUE(InlineLocalFunctions(&m).ok());
  ASSERT_TRUE(InlineLocalFunctions(&again).ok());
  EXPECT_EQ(m.SerializeAsString(), again.SerializeAsString());
  EXPECT_EQ(m.graph().node(0).name(), "c1/lr_1");
  EXPECT_THAT(m.graph().node(0).output(), ElementsAre("c1/t_1"));
  std::vector<std::string> notes;
  EXPECT_TRUE(ValidateModel(m, "inlined", &notes).ok());
}

TEST(FunctionInlineTest, NestedCallsAndSubgraphsInBodies) {
  onnx::ModelProto m = TwoCalls();
  // Outer(x) = If(cond) then Act(x) [alpha from Outer's @a] else Neg(x).
  onnx::FunctionProto outer;
  outer.set_name("Outer");
  outer.set_domain("local");
  outer.add_input("cond");
  outer.add_input("x");
  outer.add_output("y");
  outer.add_attribute("a");
  auto* op = outer.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  onnx::NodeProto iff = Node("If", "branch", {"cond"}, {"y"});
  onnx::AttributeProto* then_attr = iff.add_attribute();
  then_attr->set_name("then_branch");
  then_attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* then_g = then_attr->mutable_g();
  then_g->set_name("then");
  onnx::NodeProto inner = Node("Act", "act", {"x"}, {"ty"}, "local");
  AddRefAttr(&inner, "alpha", "a");
  *then_g->add_node() = inner;
  Declare(then_g->add_output(), "ty");
  onnx::AttributeProto* else_attr = iff.add_attribute();
  else_attr->set_name("else_branch");
  else_attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* else_g = else_attr->mutable_g();
  else_g->set_name("else");
  *else_g->add_node() = Node("Neg", "neg", {"x"}, {"ey"});
  Declare(else_g->add_output(), "ey");
  *outer.add_node() = iff;
  *m.add_functions() = outer;

  onnx::GraphProto* g = m.mutable_graph();
  onnx::ValueInfoProto* c = g->add_input();
  c->set_name("c");
  c->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::BOOL);
  g->mutable_output(0)->set_name("z");
  onnx::NodeProto call = Node("Outer", "o", {"c", "out"}, {"z"}, "local");
  AddFloatAttr(&call, "a", 0.25f);
  *g->add_node() = call;

  absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(m.functions_size(), 0);
  const onnx::NodeProto* branch = Named(m.graph(), "o/branch");
  ASSERT_NE(branch, nullptr);
  EXPECT_THAT(branch->input(), ElementsAre("c"));
  EXPECT_THAT(branch->output(), ElementsAre("z"));
  const onnx::GraphProto& then_out = branch->attribute(0).g();
  // The call inside the branch is inlined too, reading the renamed input
  // and binding alpha from the outer call's attribute.
  ASSERT_EQ(then_out.node_size(), 2);
  EXPECT_EQ(then_out.node(0).op_type(), "LeakyRelu");
  EXPECT_THAT(then_out.node(0).input(), ElementsAre("out"));
  ASSERT_EQ(then_out.node(0).attribute_size(), 1);
  EXPECT_FLOAT_EQ(then_out.node(0).attribute(0).f(), 0.25f);
  EXPECT_EQ(then_out.output(0).name(), then_out.node(1).output(0));
  const NodeOrigin& lr = r->origins.at(then_out.node(0).name());
  EXPECT_EQ(lr.function, "Act");
  EXPECT_EQ(lr.node, "lr");
  EXPECT_TRUE(lr.top_level);
  const NodeOrigin& neg =
      r->origins.at(branch->attribute(1).g().node(0).name());
  EXPECT_EQ(neg.function, "Outer");
  EXPECT_EQ(neg.node, "neg");
  EXPECT_FALSE(neg.top_level);  // Its scope is the If node.
}

TEST(FunctionInlineTest, Refusals) {
  {  // A body reading a name from outside the function.
    onnx::ModelProto m = TwoCalls();
    m.mutable_functions(0)->mutable_node(1)->set_input(1, "in");
    absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&m);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("reads 'in'"));
  }
  {  // Another default opset than the model's.
    onnx::ModelProto m = TwoCalls();
    m.mutable_functions(0)->mutable_opset_import(0)->set_version(17);
    absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&m);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(r.status().message(), HasSubstr("version 17"));
  }
  {  // Recursion.
    onnx::ModelProto m = TwoCalls();
    *m.mutable_functions(0)->add_node() =
        Node("Act", "again", {"y"}, {"z"}, "local");
    absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&m);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("recursive"));
  }
  {  // Two functions with one identity.
    onnx::ModelProto m = TwoCalls();
    *m.add_functions() = Act();
    absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&m);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("two local functions"));
  }
}

// The PyTorch export (scripts/make_function_model.py): after inlining, our
// executor's logits equal ONNX Runtime's on the original model (ORT inlines
// local functions itself), on the 360 digits test images.
TEST(FunctionInlineTest, TorchExportMatchesOnnxRuntime) {
  const std::string path = SourcePath("tests/data/passes/function_digits.onnx");
  absl::StatusOr<onnx::ModelProto> m =
      ParseModel(::quantd::testing::ReadFileOrDie(path));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->functions_size(), 1);
  absl::StatusOr<InlinedFunctions> r = InlineLocalFunctions(&*m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->calls, ElementsAre("/b1/Block", "/b2/Block"));
  ASSERT_NE(Named(m->graph(), "/b1/Block/Gemm_0"), nullptr);
  EXPECT_THAT(Named(m->graph(), "/b1/Block/Gemm_0")->input(),
              ElementsAre(::testing::_, "b1.fc.weight", "b1.fc.bias"));

  absl::StatusOr<std::unique_ptr<executor::Executor>> exec =
      executor::Executor::Create(*m);
  ASSERT_TRUE(exec.ok()) << exec.status();
  const std::string x_path = SourcePath("examples/digits/test_x.npy");
  absl::StatusOr<executor::Tensor> x = executor::ReadNpyFile(x_path);
  ASSERT_TRUE(x.ok()) << x.status();
  absl::StatusOr<std::vector<executor::Tensor>> ours =
      (*exec)->Run({{"input", *x}});
  ASSERT_TRUE(ours.ok()) << ours.status();

  ::quantd::testing::TempDir tmp;
  const std::string out = tmp.File("ort.npy");
  ::quantd::testing::CommandResult run = ::quantd::testing::RunCommand(
      {QUANTD_NODE_BIN, SourcePath("scripts/ort_eval.js"), "run", "--model",
       path, "--x", x_path, "--out", out, "--ort_dir", QUANTD_ORT_NODE_PATH},
      {absl::StrCat("NODE_PATH=", QUANTD_ORT_NODE_PATH)});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  absl::StatusOr<executor::Tensor> theirs = executor::ReadNpyFile(out);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ((*ours)[0].shape(), theirs->shape());
  double max_diff = 0;
  for (int64_t i = 0; i < theirs->size(); ++i) {
    max_diff = std::max<double>(max_diff, std::abs((*ours)[0].data<float>()[i] -
                                                   theirs->data<float>()[i]));
  }
  std::cout << "measured: inlined function model vs ORT max |diff| = "
            << max_diff << std::endl;
  EXPECT_LT(max_diff, 1e-4);
}

}  // namespace
}  // namespace quantd::graph
