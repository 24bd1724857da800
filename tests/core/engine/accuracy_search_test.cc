#include "core/engine/accuracy_search.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The picks as SearchUnit::Describe() strings.
std::vector<std::string> Pick(
    const onnx::GraphProto& g, const quantd::v1::FidelityReport& report,
    int count, const absl::flat_hash_set<SearchUnit>& at_full = {},
    const absl::flat_hash_set<SearchUnit>& excluded = {},
    const graph::InlinedFunctions* inlined = nullptr) {
  std::vector<std::string> out;
  for (const SearchUnit& u :
       PickNodesToRaise(g, report, at_full, excluded, count, inlined)) {
    out.push_back(u.Describe());
  }
  return out;
}

quantd::v1::FidelityReport Report(
    const std::vector<std::pair<std::string, double>>& layers,
    const std::vector<double>& outputs = {}) {
  quantd::v1::FidelityReport r;
  for (const auto& [name, db] : layers) {
    auto* l = r.add_layers();
    l->set_tensor_name(name);
    l->set_sqnr_db(db);
  }
  for (double db : outputs) r.add_outputs()->set_sqnr_db(db);
  return r;
}

// x -> conv_a -> a -> relu -> r -> conv_b -> b -> MatMul(mm) -> y, plus an
// Add that is not a quantized op.
onnx::GraphProto Chain() {
  testing::ModelBuilder m(13);
  m.Input("x", {1, 2, 4, 4})
      .Weight("Wa", {2, 2, 1, 1})
      .Weight("Wb", {2, 2, 1, 1})
      .Weight("Wm", {4, 4});
  m.Node("Conv", {"x", "Wa"}, {"a"}, "conv_a");
  m.Node("Relu", {"a"}, {"r"}, "relu");
  m.Node("Conv", {"r", "Wb"}, {"b"}, "conv_b");
  m.Node("MatMul", {"b", "Wm"}, {"y0"}, "mm");
  m.Node("Add", {"y0", "y0"}, {"y"}, "add");
  m.Output("y");
  return m.Build().graph();
}

// In noise power: conv_a adds 10^-4 (exact -> 40 dB), conv_b adds
// 10^-1 - 10^-3.9 (relu's 39 dB -> 10 dB), mm adds 10^-0.9 - 10^-1. The dB
// drop would rank conv_a first (exact input); the noise ranks conv_b.
TEST(PickNodesToRaiseTest, RanksByNoiseAddedNotByDbDrop) {
  const auto report =
      Report({{"a", 40}, {"r", 39}, {"b", 10}, {"y0", 9}, {"y", 9}});
  EXPECT_THAT(Pick(Chain(), report, 3), ElementsAre("conv_b", "mm", "conv_a"));
  EXPECT_THAT(Pick(Chain(), report, 1), ElementsAre("conv_b"));
  // Already float or named by the request: not picked again.
  EXPECT_THAT(Pick(Chain(), report, 3, {{"", "conv_b"}}, {{"", "mm"}}),
              ElementsAre("conv_a"));
}

TEST(PickNodesToRaiseTest, SkipsNodesThatAddNoNoiseOrAreUnnamed) {
  // conv_b's output is as good as its input: nothing to gain there.
  auto report = Report({{"a", 30}, {"r", 30}, {"b", 30}, {"y0", 20}});
  EXPECT_THAT(Pick(Chain(), report, 5), ElementsAre("mm", "conv_a"));
  // Unless asked for every candidate: conv_b then comes last.
  std::vector<std::string> all;
  for (const SearchUnit& u : PickNodesToRaise(Chain(), report, {}, {}, 5,
                                              nullptr, /*noisy_only=*/false)) {
    all.push_back(u.Describe());
  }
  EXPECT_THAT(all, ElementsAre("mm", "conv_a", "conv_b"));
  onnx::GraphProto g = Chain();
  g.mutable_node(3)->clear_name();        // mm
  g.mutable_node(2)->set_name("conv_a");  // conv_b: a duplicate
  EXPECT_THAT(Pick(g, report, 5), IsEmpty());
}

TEST(PickNodesToRaiseTest, NanOutputIsTheWorst) {
  const auto report =
      Report({{"a", 20}, {"r", 20}, {"b", std::nan("")}, {"y0", 5}});
  EXPECT_THAT(Pick(Chain(), report, 1), ElementsAre("conv_b"));
}

onnx::NodeProto BranchNode(const std::string& op, const std::string& in,
                           const std::string& w, const std::string& out,
                           const std::string& name) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  n.add_input(in);
  n.add_input(w);
  n.add_output(out);
  return n;
}

// x -> conv_a -> a, then If(c) whose branches hold a MatMul each (mm_t: a ->
// t, mm_e: a -> e) and a Loop whose body holds mm_l; the If's output y.
onnx::GraphProto WithBranches() {
  onnx::GraphProto g = Chain();
  g.mutable_node()->DeleteSubrange(1, 4);  // Keep conv_a.
  onnx::NodeProto* node = g.add_node();
  node->set_op_type("If");
  node->set_name("gate");
  node->add_input("c");
  node->add_output("y");
  for (const auto& [attr, mm, out] : {std::tuple{"then_branch", "mm_t", "t"},
                                      std::tuple{"else_branch", "mm_e", "e"}}) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g()->add_node() = BranchNode("MatMul", "a", "Wm", out, mm);
    a->mutable_g()->add_output()->set_name(out);
  }
  onnx::NodeProto* loop = g.add_node();
  loop->set_op_type("Loop");
  loop->set_name("loop");
  onnx::AttributeProto* body = loop->add_attribute();
  body->set_name("body");
  body->set_type(onnx::AttributeProto::GRAPH);
  *body->mutable_g()->add_node() = BranchNode("MatMul", "a", "Wm", "l", "mm_l");
  return g;
}

TEST(PickNodesToRaiseTest, ReachesIfBranchesNotLoopBodies) {
  const auto report =
      Report({{"a", 40}, {"t", 10}, {"e", 20}, {"l", 5}, {"y", 10}});
  EXPECT_THAT(Pick(WithBranches(), report, 5),
              ElementsAre("mm_t (in gate)", "mm_e (in gate)", "conv_a"));
  // A request's entry with func_name excludes that node; one without
  // excludes the name in every scope.
  EXPECT_THAT(Pick(WithBranches(), report, 5, {}, {{"gate", "mm_t"}}),
              ElementsAre("mm_e (in gate)", "conv_a"));
  EXPECT_THAT(
      Pick(WithBranches(), report, 5, {{"gate", "mm_e"}}, {{"", "mm_t"}}),
      ElementsAre("conv_a"));

  // Two nodes of one name in the If's scope (one per branch) cannot be
  // named apart.
  onnx::GraphProto dup = WithBranches();
  dup.mutable_node(1)
      ->mutable_attribute(1)
      ->mutable_g()
      ->mutable_node(0)
      ->set_name("mm_t");
  EXPECT_THAT(Pick(dup, report, 5), ElementsAre("conv_a"));

  // A node inlined from a local function has its function's precision.
  graph::InlinedFunctions inlined;
  inlined.origins["mm_t"] = graph::NodeOrigin{"F", "", "mm", "call", true};
  EXPECT_THAT(Pick(WithBranches(), report, 5, {}, {}, &inlined),
              ElementsAre("mm_e (in gate)", "conv_a"));
}

TEST(WorstOutputSqnrTest, MinimumWithNanAsMinusInfinity) {
  EXPECT_EQ(WorstOutputSqnr(Report({}, {30, 12.5, 40})), 12.5);
  EXPECT_EQ(WorstOutputSqnr(Report({}, {30, std::nan("")})),
            -std::numeric_limits<double>::infinity());
  EXPECT_EQ(WorstOutputSqnr(Report({}, {})),
            std::numeric_limits<double>::infinity());
}

TEST(ObserverCandidateBetterTest, SqnrOrAgreementFirstNanLastTiesStay) {
  auto cand = [](double sqnr, double agreement) {
    quantd::v1::ObserverCandidate c;
    c.set_output_sqnr_db(sqnr);
    c.set_top1_agreement(agreement);
    return c;
  };
  const double nan = std::nan("");
  EXPECT_TRUE(ObserverCandidateBetter(cand(30, 0.9), cand(20, 1.0), false));
  EXPECT_FALSE(ObserverCandidateBetter(cand(20, 1.0), cand(30, 0.9), false));
  // With a top-1 goal the agreement decides, SQNR only between equals.
  EXPECT_TRUE(ObserverCandidateBetter(cand(20, 1.0), cand(30, 0.9), true));
  EXPECT_TRUE(ObserverCandidateBetter(cand(30, 0.9), cand(20, 0.9), true));
  // A NaN never beats a number; a number beats a NaN.
  EXPECT_FALSE(ObserverCandidateBetter(cand(nan, 1.0), cand(-50, 1.0), false));
  EXPECT_TRUE(ObserverCandidateBetter(cand(-50, 1.0), cand(nan, 1.0), false));
  EXPECT_TRUE(ObserverCandidateBetter(cand(10, 0.5), cand(40, nan), true));
  // Equal candidates: the earlier one stays.
  EXPECT_FALSE(ObserverCandidateBetter(cand(25, 0.9), cand(25, 0.9), false));
  EXPECT_FALSE(ObserverCandidateBetter(cand(25, 0.9), cand(25, 0.9), true));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ObserverCandidateBetter(cand(inf, nan), cand(inf, nan), false));
}

TEST(AccuracySearchTest, RoundsDouble) {
  EXPECT_EQ(NodesToRaise(1), 1);
  EXPECT_EQ(NodesToRaise(2), 2);
  EXPECT_EQ(NodesToRaise(3), 4);
  int total = 0;
  for (int r = 1; r <= kAccuracySearchRounds; ++r) total += NodesToRaise(r);
  EXPECT_EQ(total, 63);
}

TEST(AccuracySearchTest, PrecisionLadder) {
  namespace tfq = tensorflow::quantization;
  quantd::v1::QuantizeConfig c;
  const std::vector<SearchPrecision> all = SearchLadder(c);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_W4A4, all), tfq::PRECISION_W4A8);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_W4A8, all), tfq::PRECISION_W8A8);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_W8A8, all), tfq::PRECISION_FULL);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_UNSPECIFIED, all),
            tfq::PRECISION_FULL);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_FULL, all), std::nullopt);
}

TEST(AccuracySearchTest, AllowedPrecisionsSkipRungsInLadderOrder) {
  namespace tfq = tensorflow::quantization;
  quantd::v1::QuantizeConfig c;
  // Out of order on the wire; the ladder sorts them.
  c.add_allowed_precisions(tfq::PRECISION_FULL);
  c.add_allowed_precisions(tfq::PRECISION_W4A8);
  const std::vector<SearchPrecision> ladder = SearchLadder(c);
  EXPECT_EQ(ladder, (std::vector<SearchPrecision>{tfq::PRECISION_W4A8,
                                                  tfq::PRECISION_FULL}));
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_W4A8, ladder), tfq::PRECISION_FULL);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_W4A4, ladder), tfq::PRECISION_W4A8);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_FULL, ladder), std::nullopt);
  c.clear_allowed_precisions();
  c.add_allowed_precisions(tfq::PRECISION_W4A8);
  c.add_allowed_precisions(tfq::PRECISION_W8A8);
  EXPECT_EQ(RaisedPrecision(tfq::PRECISION_W8A8, SearchLadder(c)),
            std::nullopt);
}

TEST(CheckSearchTargetsTest, SqnrRangeIsChecked) {
  namespace tfq = tensorflow::quantization;
  quantd::v1::QuantizeConfig c;
  EXPECT_TRUE(CheckSearchTargets(c, tfq::PRECISION_W8A8).ok());
  for (double ok : {0.5, 30.0, 200.0}) {
    c.set_target_sqnr_db(ok);
    EXPECT_TRUE(CheckSearchTargets(c, tfq::PRECISION_W8A8).ok()) << ok;
  }
  for (double bad : {0.0, -3.0, 201.0, std::nan(""),
                     std::numeric_limits<double>::infinity()}) {
    c.set_target_sqnr_db(bad);
    const absl::Status s = CheckSearchTargets(c, tfq::PRECISION_W8A8);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("target_sqnr_db"));
  }
}

TEST(CheckSearchTargetsTest, AgreementIsAFraction) {
  namespace tfq = tensorflow::quantization;
  quantd::v1::QuantizeConfig c;
  for (double ok : {0.01, 0.9, 1.0}) {
    c.set_target_agreement(ok);
    EXPECT_TRUE(CheckSearchTargets(c, tfq::PRECISION_W8A8).ok()) << ok;
    EXPECT_TRUE(HasSearchTarget(c));
  }
  for (double bad : {0.0, -0.5, 1.01, 90.0, std::nan("")}) {
    c.set_target_agreement(bad);
    const absl::Status s = CheckSearchTargets(c, tfq::PRECISION_W8A8);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("target_agreement"));
  }
}

TEST(CheckSearchTargetsTest, AllowedPrecisionsAreRefusedByName) {
  namespace tfq = tensorflow::quantization;
  auto check = [](std::vector<int> allowed, tfq::QuantizationPrecision p,
                  bool with_target = true) {
    quantd::v1::QuantizeConfig c;
    if (with_target) c.set_target_agreement(0.9);
    for (int a : allowed)
      c.add_allowed_precisions(static_cast<tfq::QuantizationPrecision>(a));
    return CheckSearchTargets(c, p);
  };
  EXPECT_TRUE(
      check({tfq::PRECISION_W4A8, tfq::PRECISION_FULL}, tfq::PRECISION_W4A8)
          .ok());
  const struct {
    std::vector<int> allowed;
    tfq::QuantizationPrecision precision;
    bool with_target;
    const char* says;
  } bad[] = {
      {{tfq::PRECISION_W8A8, tfq::PRECISION_FULL},
       tfq::PRECISION_W8A8,
       false,
       "set target_sqnr_db or target_agreement"},
      {{tfq::PRECISION_UNSPECIFIED},
       tfq::PRECISION_W8A8,
       true,
       "allowed_precisions[0] is PRECISION_UNSPECIFIED"},
      {{tfq::PRECISION_W8A8, 77},
       tfq::PRECISION_W8A8,
       true,
       "allowed_precisions[1] is value 77 (unknown)"},
      {{tfq::PRECISION_W8A8, tfq::PRECISION_W8A8},
       tfq::PRECISION_W8A8,
       true,
       "twice"},
      {{tfq::PRECISION_W8A8, tfq::PRECISION_FULL},
       tfq::PRECISION_W4A8,
       true,
       "does not include the request's quantization_precision "
       "PRECISION_W4A8"},
      {{tfq::PRECISION_W4A8, tfq::PRECISION_W8A8},
       tfq::PRECISION_W8A8,
       true,
       "nothing above"},
  };
  for (const auto& b : bad) {
    const absl::Status s = check(b.allowed, b.precision, b.with_target);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.says;
    EXPECT_THAT(std::string(s.message()), HasSubstr(b.says));
  }
}

TEST(WorstTop1AgreementTest, ClassOutputsOnly) {
  quantd::v1::FidelityReport r;
  auto* a = r.add_outputs();
  a->set_has_top1(true);
  a->set_top1_agreement(0.75);
  auto* b = r.add_outputs();  // no class axis: its agreement is not read
  b->set_top1_agreement(0.1);
  auto* c = r.add_outputs();
  c->set_has_top1(true);
  c->set_top1_agreement(0.5);
  EXPECT_EQ(WorstTop1Agreement(r), 0.5);
  r.mutable_outputs()->DeleteSubrange(2, 1);
  EXPECT_EQ(WorstTop1Agreement(r), 0.75);
  r.mutable_outputs()->DeleteSubrange(0, 1);
  EXPECT_TRUE(std::isnan(WorstTop1Agreement(r)));
}

}  // namespace
}  // namespace quantd
