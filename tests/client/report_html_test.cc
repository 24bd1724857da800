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

}  // namespace
}  // namespace quantd::client
