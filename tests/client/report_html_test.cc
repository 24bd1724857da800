// Tests of quantctl's report helpers and the HTML report: worst-layer
// choice, number formatting, escaping, a self-contained document with one
// chart bar per layer.
#include "client/report_html.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kInf = std::numeric_limits<double>::infinity();

int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

quantd::v1::FidelityReport Layers(const std::vector<double>& dbs) {
  quantd::v1::FidelityReport f;
  f.set_evaluated(true);
  for (size_t i = 0; i < dbs.size(); ++i) {
    quantd::v1::LayerFidelity* l = f.add_layers();
    l->set_tensor_name("t" + std::to_string(i));
    l->set_node_name("n" + std::to_string(i));
    l->set_op_type("Conv");
    l->set_sqnr_db(dbs[i]);
  }
  return f;
}

TEST(WorstLayersTest, LowestFirstNanFirstExactNever) {
  EXPECT_THAT(WorstLayers(Layers({40, 30, 35, 20, 50})), ElementsAre(3, 1, 2));
  EXPECT_THAT(WorstLayers(Layers({40, std::nan(""), kInf, 10}), 3),
              ElementsAre(1, 3, 0));
  EXPECT_THAT(WorstLayers(Layers({kInf, kInf})), ElementsAre());
  EXPECT_THAT(WorstLayers(Layers({-kInf, 5})), ElementsAre(0, 1));
  // Ties keep graph order.
  EXPECT_THAT(WorstLayers(Layers({30, 30, 30, 30}), 2), ElementsAre(0, 1));
}

TEST(FormatDbTest, Values) {
  EXPECT_EQ(FormatDb(38.249), "38.2");
  EXPECT_EQ(FormatDb(kInf), "inf");
  EXPECT_EQ(FormatDb(-kInf), "-inf");
  EXPECT_EQ(FormatDb(std::nan("")), "nan");
}

TEST(GptqOutcomeTextTest, KeptLostAndUnchecked) {
  quantd::v1::TensorReport r;
  r.set_weight_algorithm("rtn");
  EXPECT_EQ(GptqOutcomeText(r), "");  // GPTQ never ran.
  r.set_weight_algorithm("awq+gptq");
  r.set_input_rows(16);
  r.set_output_sqnr_db(30.25);
  r.set_rtn_output_sqnr_db(24.5);
  EXPECT_EQ(GptqOutcomeText(r), "30.2 (rtn 24.5)");
  r.set_held_out_output_sqnr_db(28);
  r.set_held_out_rtn_output_sqnr_db(23.5);
  EXPECT_EQ(GptqOutcomeText(r), "30.2 (rtn 24.5; held-out 28.0 vs 23.5)");
  r.set_weight_algorithm("awq");  // Lost its cross-check: rounded.
  r.set_held_out_output_sqnr_db(21.25);
  r.set_held_out_rtn_output_sqnr_db(22.75);
  EXPECT_EQ(GptqOutcomeText(r), "gptq lost on held-out: 21.2 vs 22.8");
}

TEST(HtmlEscapeTest, EscapesMarkup) {
  EXPECT_EQ(HtmlEscape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

QuantizeReportInput Input() {
  QuantizeReportInput in;
  in.model_path = "models/m<1>.onnx";
  in.output_path = "out.onnx";
  in.options_text =
      "quantization_method { experimental_method: STATIC_RANGE }\n";
  quantd::v1::QuantizeSummary& s = in.summary;
  s.set_input_bytes(1000);
  s.set_output_bytes(400);
  s.set_method("STATIC_RANGE");
  s.set_op_set("TF");
  s.set_precision("W8A8");
  quantd::v1::StageDuration* d = s.add_stage_durations();
  d->set_stage(quantd::v1::STAGE_FIDELITY);
  d->set_seconds(0.25);
  quantd::v1::TensorReport r;
  r.set_node_name("conv1");
  r.set_op_type("Conv");
  r.set_tensor_name("w1");
  r.set_sqnr_db(41.5);
  r.set_weight_algorithm("gptq");
  r.set_output_sqnr_db(30.2);
  r.set_rtn_output_sqnr_db(24.5);
  r.set_input_rows(64);
  r.mutable_scheme()->set_block_size(32);
  in.tensors.push_back(r);
  *s.mutable_fidelity() = Layers({45, 38.5, kInf, 21.25, std::nan("")});
  s.mutable_fidelity()->mutable_layers(0)->set_tensor_name(
      "<script>alert(1)</script>");
  s.mutable_fidelity()->set_batches_evaluated(2);
  s.mutable_fidelity()->set_batches_received(2);
  quantd::v1::OutputFidelity* o = s.mutable_fidelity()->add_outputs();
  o->set_name("logits");
  o->set_sqnr_db(33.3);
  o->set_has_top1(true);
  o->set_top1_agreement(0.984375);
  o->set_top1_rows(64);
  quantd::v1::ChannelScaling* c = s.add_channel_scalings();
  c->set_algorithm("smoothquant");
  c->set_value("ln<out>");
  c->set_absorbed_by("LayerNormalization 'ln'");
  c->add_layers("q");
  c->add_layers("k");
  c->set_channels(64);
  c->set_alpha(0.5);
  c->set_min_scale(0.25);
  c->set_max_scale(8);
  c->set_before(120);
  c->set_after(11.5);
  c = s.add_channel_scalings();
  c->set_algorithm("awq");
  c->set_value("h");
  c->set_absorbed_by("MatMul 'mm0'");
  c->add_layers("mm1");
  c->set_channels(32);
  c->set_alpha(0.35);
  c->set_min_scale(0.5);
  c->set_max_scale(3);
  c->set_before(14.04);
  c->set_after(std::numeric_limits<double>::infinity());
  return in;
}

TEST(RenderQuantizeReportHtmlTest, SelfContainedWithAChartBarPerLayer) {
  const std::string html = RenderQuantizeReportHtml(Input());
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<style>"));
  EXPECT_EQ(Count(html, "<svg"), 1);
  EXPECT_EQ(Count(html, "<rect class=\"bar"), 5);
  EXPECT_EQ(Count(html, "<rect class=\"bar exact\""), 1);
  // Nothing to download, nothing to run.
  EXPECT_THAT(html, Not(HasSubstr("http:")));
  EXPECT_THAT(html, Not(HasSubstr("https:")));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;"));
  EXPECT_THAT(html, HasSubstr("models/m&lt;1&gt;.onnx"));
  // Sections and numbers.
  EXPECT_THAT(html, HasSubstr("STATIC_RANGE"));
  EXPECT_THAT(html, HasSubstr("experimental_method: STATIC_RANGE"));
  EXPECT_THAT(html, HasSubstr("fidelity 0.250s"));
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">33.3</td>"));
  EXPECT_THAT(html, HasSubstr("0.9844"));
  EXPECT_THAT(html, HasSubstr("<td>w1</td>"));
  EXPECT_THAT(html, HasSubstr("41.5"));
  EXPECT_THAT(html, HasSubstr("blocks of 32 (axis 0)"));
  EXPECT_THAT(html, HasSubstr("<td>gptq</td>"));
  EXPECT_THAT(html, HasSubstr("30.2 (rtn 24.5)"));
  EXPECT_THAT(html, HasSubstr("<h2>Channel scalings</h2>"));
  EXPECT_THAT(html, HasSubstr("<td>ln&lt;out&gt;</td>"));
  EXPECT_THAT(html, HasSubstr("<td>q, k</td>"));
  EXPECT_THAT(html, HasSubstr("0.25..8"));
  // AWQ's before / after are output SQNRs in dB.
  EXPECT_THAT(html, HasSubstr("<td>awq</td>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">0.35</td>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">14.0</td>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">inf</td>"));
  // Worst: NaN (t4), 21.25 (t3), 38.5 (t1); the exact layer is not.
  EXPECT_EQ(Count(html, "<tr class=\"worst\">"), 3);
  EXPECT_THAT(html, HasSubstr("worst #1"));
  EXPECT_THAT(html, HasSubstr("<td>t3</td>"));
  EXPECT_EQ(Count(html, "<rect class=\"bar worst\""), 3);
}

TEST(RenderQuantizeReportHtmlTest, SkippedFidelityShowsTheReason) {
  QuantizeReportInput in = Input();
  in.summary.mutable_fidelity()->Clear();
  in.summary.mutable_fidelity()->set_skipped_reason(
      "the executor cannot run the quantized model: op QLinearConv");
  const std::string html = RenderQuantizeReportHtml(in);
  EXPECT_THAT(html, HasSubstr("skipped: the executor cannot run the quantized "
                              "model: op QLinearConv"));
  EXPECT_EQ(Count(html, "<svg"), 0);
}

TEST(RenderQuantizeReportHtmlTest, UnquantizedModelSaysNotMeasured) {
  QuantizeReportInput in = Input();
  in.summary.clear_fidelity();
  in.tensors.clear();
  in.options_text.clear();
  const std::string html = RenderQuantizeReportHtml(in);
  EXPECT_THAT(html, HasSubstr("not measured"));
  EXPECT_THAT(html, HasSubstr("do not quantize"));
}

TEST(RenderQuantizeReportHtmlTest, NoChannelScalingsNoSection) {
  QuantizeReportInput in = Input();
  in.summary.clear_channel_scalings();
  EXPECT_THAT(RenderQuantizeReportHtml(in), Not(HasSubstr("Channel scalings")));
}

// An agreement search of three rounds, the last returned.
quantd::v1::AccuracySearch Search() {
  namespace tfq = tensorflow::quantization;
  quantd::v1::AccuracySearch a;
  a.set_target_agreement(0.95);
  a.add_allowed_precisions(tfq::PRECISION_W4A8);
  a.add_allowed_precisions(tfq::PRECISION_FULL);
  a.set_met(true);
  a.set_chosen_round(2);
  a.set_note("met in round 3 with 3 nodes raised (1 to PRECISION_FULL)");
  const double sqnr[] = {12.5, 18.25, 24.0};
  const double agreement[] = {0.8, 0.9, 0.96875};
  const uint64_t bytes[] = {1000, 1500, 2500};
  for (int i = 0; i < 3; ++i) {
    quantd::v1::AccuracySearchRound* r = a.add_rounds();
    r->set_raised_nodes(i == 0 ? 0 : 2 * i - 1);
    r->set_output_sqnr_db(sqnr[i]);
    r->set_top1_agreement(agreement[i]);
    r->set_model_bytes(bytes[i]);
    if (i > 0)
      r->add_raised_this_round("conv<" + std::to_string(i) + ">: FULL");
  }
  tfq::UnitWiseQuantizationPrecision* u =
      a.add_unit_wise_quantization_precision();
  u->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_NODE);
  u->set_unit_name("conv1");
  u->set_quantization_precision(tfq::PRECISION_FULL);
  return a;
}

TEST(AccuracySearchCellsTest, GoalAndRounds) {
  quantd::v1::AccuracySearch a = Search();
  EXPECT_EQ(AccuracySearchGoal(a), "top-1 agreement 0.950");
  a.set_target_sqnr_db(30);
  EXPECT_EQ(AccuracySearchGoal(a), "30.0 dB and top-1 agreement 0.950");
  EXPECT_THAT(AccuracySearchRoundCells(a, 1),
              ElementsAre("2", "1", "18.2", "0.9000", "1500", "conv<1>: FULL"));
  a.mutable_rounds(1)->set_top1_agreement(std::nan(""));
  EXPECT_EQ(AccuracySearchRoundCells(a, 1)[3], "-");
}

TEST(RenderQuantizeReportHtmlTest, AccuracySearchIsTabledAndPlotted) {
  QuantizeReportInput in = Input();
  *in.summary.mutable_accuracy_search() = Search();
  const std::string html = RenderQuantizeReportHtml(in);
  EXPECT_THAT(html, HasSubstr("<h2>Accuracy search</h2>"));
  EXPECT_THAT(html, HasSubstr("goal <b>top-1 agreement 0.950</b>, met"));
  EXPECT_THAT(html, HasSubstr("w4a8 &rarr; full"));
  // The layer chart and the size/accuracy chart, three points, the
  // returned one marked, the goal drawn; agreement is the y axis.
  EXPECT_EQ(Count(html, "<svg"), 2);
  EXPECT_EQ(Count(html, "<circle class=\"point"), 3);
  EXPECT_EQ(Count(html, "<circle class=\"point chosen\""), 1);
  EXPECT_THAT(html, HasSubstr("<title>round 3: 2500 bytes, 0.9688</title>"));
  EXPECT_THAT(html, HasSubstr("class=\"goal\""));
  EXPECT_THAT(html, HasSubstr("model bytes against top-1 agreement"));
  EXPECT_THAT(html, HasSubstr("conv&lt;2&gt;: FULL"));
  EXPECT_EQ(Count(html, "<tr class=\"chosen\">"), 1);
  EXPECT_THAT(html, HasSubstr("conv1: PRECISION_FULL"));
  // An SQNR goal puts the SQNR on the y axis.
  in.summary.mutable_accuracy_search()->clear_target_agreement();
  in.summary.mutable_accuracy_search()->set_target_sqnr_db(20);
  EXPECT_THAT(RenderQuantizeReportHtml(in),
              HasSubstr("model bytes against output SQNR (dB)"));
  // No search, no section.
  in.summary.clear_accuracy_search();
  EXPECT_THAT(RenderQuantizeReportHtml(in), Not(HasSubstr("Accuracy search")));
}

TEST(RenderQuantizeReportHtmlTest, ObserverChoiceIsTabled) {
  QuantizeReportInput in = Input();
  EXPECT_THAT(RenderQuantizeReportHtml(in),
              Not(HasSubstr("Calibration observer")));
  quantd::v1::ObserverChoice* c = in.summary.mutable_observer_choice();
  c->set_chosen("entropy");
  c->set_batches(3);
  c->set_held_out(true);
  for (const char* m : {"min_max", "entropy"}) {
    quantd::v1::ObserverCandidate* k = c->add_candidates();
    k->set_method(m);
    k->set_output_sqnr_db(std::string(m) == "entropy" ? 31.25 : 20.5);
    k->set_top1_agreement(std::nan(""));
    k->set_clipped_tensors(std::string(m) == "entropy" ? 4 : 0);
  }
  const std::string html = RenderQuantizeReportHtml(in);
  EXPECT_THAT(
      html,
      HasSubstr("<h2>Calibration observer (calibration method auto)</h2>"));
  EXPECT_THAT(html, HasSubstr("kept <b>entropy</b>"));
  EXPECT_THAT(html, HasSubstr("on 3 held-out batches"));
  EXPECT_EQ(Count(html, "<td class=\"tag\">kept</td>"), 1);
  EXPECT_THAT(html, HasSubstr("<td>min_max</td>"));
}

// A widened candidate is named by its factor and kept only with it: the
// plain min_max row is not marked when min_max x1.5 is the kept one.
TEST(RenderQuantizeReportHtmlTest, WidenedCandidatesAreNamedByTheirFactor) {
  QuantizeReportInput in = Input();
  quantd::v1::ObserverChoice* c = in.summary.mutable_observer_choice();
  c->set_chosen("min_max");
  c->set_chosen_headroom(1.5);
  for (double h : {1.0, 1.25, 1.5}) {
    quantd::v1::ObserverCandidate* k = c->add_candidates();
    k->set_method("min_max");
    k->set_headroom(h);
  }
  EXPECT_EQ(ObserverChoiceKept(*c), "min_max x1.5");
  // One observer at several factors, judged on held-out batches (no folds):
  // auto_headroom's search, not auto's.
  EXPECT_EQ(ObserverChoiceSearch(*c), "auto_headroom");
  EXPECT_FALSE(IsKeptCandidate(*c, c->candidates(0)));
  EXPECT_FALSE(IsKeptCandidate(*c, c->candidates(1)));
  EXPECT_TRUE(IsKeptCandidate(*c, c->candidates(2)));
  const std::string html = RenderQuantizeReportHtml(in);
  EXPECT_THAT(html, HasSubstr("kept <b>min_max x1.5</b>"));
  EXPECT_THAT(html, HasSubstr("<h2>Calibration observer (auto_headroom)</h2>"));
  EXPECT_THAT(html, HasSubstr("<td>min_max x1.25</td>"));
  EXPECT_EQ(Count(html, "<td class=\"tag\">kept</td>"), 1);
  // An older server sets no headroom: 0 reads as 1.
  quantd::v1::ObserverChoice old;
  old.set_chosen("mse");
  quantd::v1::ObserverCandidate k;
  k.set_method("mse");
  EXPECT_TRUE(IsKeptCandidate(old, k));
  EXPECT_EQ(ObserverCandidateName("mse", 0), "mse");
}

}  // namespace
}  // namespace quantd::client
