#include "client/report_html.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace quantd::client {

std::vector<int> WorstLayers(const quantd::v1::FidelityReport& report,
                             int count) {
  std::vector<int> candidates;
  for (int i = 0; i < report.layers_size(); ++i) {
    const double db = report.layers(i).sqnr_db();
    if (!(std::isinf(db) && db > 0)) candidates.push_back(i);
  }
  // NaN first (a broken layer is the worst), then ascending; stable so equal
  // SQNRs keep graph order.
  std::stable_sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    const double da = report.layers(a).sqnr_db();
    const double db = report.layers(b).sqnr_db();
    if (std::isnan(da) || std::isnan(db)) {
      return std::isnan(da) && !std::isnan(db);
    }
    return da < db;
  });
  if (static_cast<int>(candidates.size()) > count) candidates.resize(count);
  return candidates;
}

std::string FormatDb(double db) {
  if (std::isnan(db)) return "nan";
  if (std::isinf(db)) return db > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.1f", db);
}

std::string GptqOutcomeText(const quantd::v1::TensorReport& r) {
  if (r.input_rows() == 0) return "";  // GPTQ did not run.
  const bool checked =
      r.held_out_output_sqnr_db() != 0 || r.held_out_rtn_output_sqnr_db() != 0;
  const std::string held_out =
      absl::StrCat(FormatDb(r.held_out_output_sqnr_db()), " vs ",
                   FormatDb(r.held_out_rtn_output_sqnr_db()));
  if (!absl::StrContains(r.weight_algorithm(), "gptq")) {
    return checked ? absl::StrCat("gptq lost on held-out: ", held_out) : "";
  }
  return absl::StrCat(
      FormatDb(r.output_sqnr_db()), " (rtn ", FormatDb(r.rtn_output_sqnr_db()),
      checked ? absl::StrCat("; held-out ", held_out) : "", ")");
}

std::vector<std::string> ChannelScalingCells(
    const quantd::v1::ChannelScaling& c) {
  const bool awq = c.algorithm() == "awq";
  return {
      c.algorithm(),
      c.value(),
      c.absorbed_by(),
      absl::StrJoin(c.layers(), ", "),
      absl::StrCat(c.channels()),
      c.algorithm() == "equalize" ? "-" : absl::StrFormat("%.2g", c.alpha()),
      absl::StrFormat("%.3g..%.3g", c.min_scale(), c.max_scale()),
      awq ? FormatDb(c.before()) : absl::StrFormat("%.4g", c.before()),
      awq ? FormatDb(c.after()) : absl::StrFormat("%.4g", c.after())};
}

std::string AccuracySearchGoal(const quantd::v1::AccuracySearch& a) {
  std::vector<std::string> goals;
  if (a.target_sqnr_db() > 0)
    goals.push_back(FormatDb(a.target_sqnr_db()) + " dB");
  if (a.target_agreement() > 0) {
    goals.push_back(
        absl::StrFormat("top-1 agreement %.3f", a.target_agreement()));
  }
  return goals.empty() ? "none" : absl::StrJoin(goals, " and ");
}

std::vector<std::string> AccuracySearchRoundCells(
    const quantd::v1::AccuracySearch& a, int round) {
  const quantd::v1::AccuracySearchRound& r = a.rounds(round);
  return {absl::StrCat(round + 1),
          absl::StrCat(r.raised_nodes()),
          FormatDb(r.output_sqnr_db()),
          std::isnan(r.top1_agreement())
              ? std::string("-")
              : absl::StrFormat("%.4f", r.top1_agreement()),
          absl::StrCat(r.model_bytes()),
          absl::StrJoin(r.raised_this_round(), ", ")};
}

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string ObserverCandidateName(const std::string& method, double headroom) {
  if (headroom == 0.0 || headroom == 1.0) return method;
  return absl::StrCat(method, " x", absl::StrFormat("%g", headroom));
}

std::string ObserverChoiceKept(const quantd::v1::ObserverChoice& c) {
  return ObserverCandidateName(c.chosen(), c.chosen_headroom());
}

std::string ObserverChoiceJudgedOn(const quantd::v1::ObserverChoice& c) {
  std::string text =
      absl::StrCat(c.batches(), c.held_out() ? " held-out" : "", " batches");
  if (c.folds() > 0) {
    absl::StrAppend(&text, " in ", c.folds(),
                    " folds, each judging the other batches' ranges");
  }
  return text;
}

std::string ObserverChoiceSearch(const quantd::v1::ObserverChoice& c) {
  bool one_method = c.candidates_size() > 0;
  for (const quantd::v1::ObserverCandidate& k : c.candidates()) {
    one_method = one_method && k.method() == c.candidates(0).method();
  }
  return c.folds() > 0 || one_method ? "auto_headroom"
                                     : "calibration method auto";
}

bool IsKeptCandidate(const quantd::v1::ObserverChoice& c,
                     const quantd::v1::ObserverCandidate& k) {
  auto factor = [](double h) { return h == 0.0 ? 1.0 : h; };
  return k.method() == c.chosen() &&
         factor(k.headroom()) == factor(c.chosen_headroom());
}

namespace {

constexpr char kStyle[] = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #1d232a; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em;
  border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #d0d7de; padding: .25em .6em; text-align: left;
         vertical-align: top; }
th { background: #f3f5f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.worst td { background: #fde8e8; } tr.chosen td { background: #e8f1fd; }
.tag { color: #b42318; font-weight: 600; }
.muted { color: #57606a; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; }
svg text { font: 11px system-ui, sans-serif; fill: #1d232a; }
svg .bar { fill: #3b7dd8; } svg .bar.worst { fill: #d92d20; }
svg .bar.exact { fill: #8fbf7f; } svg .axis { stroke: #8c959f; }
svg .trade { fill: none; stroke: #3b7dd8; } svg .point { fill: #3b7dd8; }
svg .point.chosen { fill: #d92d20; } svg .goal { stroke: #b42318;
  stroke-dasharray: 4 3; }
)css";

std::string Cell(absl::string_view text, bool numeric = false) {
  return absl::StrCat(numeric ? "<td class=\"num\">" : "<td>", HtmlEscape(text),
                      "</td>");
}

std::string Header(const std::vector<std::string>& names) {
  std::string row = "<tr>";
  for (const std::string& n : names) absl::StrAppend(&row, "<th>", n, "</th>");
  return row + "</tr>\n";
}

// "STAGE_RECEIVE" -> "receive".
std::string StageName(quantd::v1::Stage stage) {
  return absl::AsciiStrToLower(
      absl::StripPrefix(quantd::v1::Stage_Name(stage), "STAGE_"));
}

std::string ModelSection(const QuantizeReportInput& in) {
  const quantd::v1::QuantizeSummary& s = in.summary;
  std::string html = "<h2>Model</h2>\n<table>\n";
  auto row = [&](absl::string_view k, const std::string& v) {
    absl::StrAppend(&html, "<tr><th>", k, "</th>", Cell(v), "</tr>\n");
  };
  row("input model", in.model_path);
  row("output model", in.output_path);
  row("bytes", absl::StrCat(s.input_bytes(), " -> ", s.output_bytes()));
  row("opset", absl::StrCat(s.input_opset(), " -> ", s.output_opset()));
  row("quantized", absl::StrCat(s.quantized_tensors(), " tensors, ",
                                s.quantized_nodes(), " nodes"));
  row("weight bytes",
      absl::StrCat(s.weight_bytes_before(), " -> ", s.weight_bytes_after()));
  row("skipped tensors", absl::StrCat(s.skipped_tensors()));
  if (s.model_unchanged()) row("unchanged", s.unchanged_reason());
  std::string stages;
  for (const quantd::v1::StageDuration& d : s.stage_durations()) {
    absl::StrAppend(&stages, stages.empty() ? "" : ", ", StageName(d.stage()),
                    absl::StrFormat(" %.3fs", d.seconds()));
  }
  row("stages", stages);
  for (const std::string& v : s.validations()) row("validated", v);
  html += "</table>\n";
  if (s.skipped_size() > 0) {
    html += "<table>\n" +
            Header({"skipped tensor", "node", "op", "elements", "reason"});
    for (const quantd::v1::SkippedTensor& t : s.skipped()) {
      absl::StrAppend(
          &html, "<tr>", Cell(t.tensor_name()), Cell(t.node_name()),
          Cell(t.op_type()), Cell(absl::StrCat(t.num_elements()), true),
          Cell(absl::StrCat(quantd::v1::SkipReason_Name(t.reason()),
                            t.detail().empty() ? "" : ": ", t.detail())),
          "</tr>\n");
    }
    html += "</table>\n";
  }
  return html;
}

std::string OptionsSection(const QuantizeReportInput& in) {
  const quantd::v1::QuantizeSummary& s = in.summary;
  return absl::StrCat(
      "<h2>Options</h2>\n<p>method <b>", HtmlEscape(s.method()),
      "</b>, op set <b>", HtmlEscape(s.op_set()), "</b>, precision <b>",
      HtmlEscape(s.precision()), "</b></p>\n<pre>",
      HtmlEscape(in.options_text.empty() ? "(no options: do not quantize)"
                                         : in.options_text),
      "</pre>\n");
}

// What smoothquant / equalize / AWQ rescaled; nothing when none ran.
std::string ChannelScalingSection(const quantd::v1::QuantizeSummary& s) {
  if (s.channel_scalings_size() == 0) return "";
  std::string html = absl::StrCat(
      "<h2>Channel scalings</h2>\n<p class=\"muted\">", kChannelScalingLegend,
      "</p>\n<table>\n",
      Header(std::vector<std::string>(std::begin(kChannelScalingColumns),
                                      std::end(kChannelScalingColumns))));
  for (const quantd::v1::ChannelScaling& c : s.channel_scalings()) {
    const std::vector<std::string> cells = ChannelScalingCells(c);
    html += "<tr>";
    for (size_t i = 0; i < cells.size(); ++i) {
      // The first four columns are words, the rest numbers.
      absl::StrAppend(&html, i < 4 ? "<td>" : "<td class=\"num\">",
                      HtmlEscape(cells[i]), "</td>");
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

// The rounds of an accuracy search as size (x) against accuracy (y): the
// output SQNR, or the top-1 agreement when that was the goal (the measure
// the search was judged by), the goal as a dashed line and the returned
// round in red. Rounds that cannot be placed (NaN, infinite) are left out.
std::string AccuracySearchChart(const quantd::v1::AccuracySearch& a) {
  const bool by_agreement = a.target_agreement() > 0;
  auto y_of = [&](const quantd::v1::AccuracySearchRound& r) {
    return by_agreement ? r.top1_agreement() : r.output_sqnr_db();
  };
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  int placed = 0;
  for (const auto& r : a.rounds()) {
    if (!std::isfinite(y_of(r))) continue;
    ++placed;
    x_lo = std::min(x_lo, static_cast<double>(r.model_bytes()));
    x_hi = std::max(x_hi, static_cast<double>(r.model_bytes()));
    y_lo = std::min(y_lo, y_of(r));
    y_hi = std::max(y_hi, y_of(r));
  }
  if (placed == 0) return "";
  const double goal = by_agreement ? a.target_agreement() : a.target_sqnr_db();
  y_lo = std::min(y_lo, goal);
  y_hi = std::max(y_hi, goal);
  if (y_hi - y_lo < 1e-9) y_hi = y_lo + (by_agreement ? 0.01 : 1);
  if (x_hi - x_lo < 1) x_hi = x_lo + 1;
  constexpr int kLeft = 70, kTop = 16, kW = 520, kH = 220;
  const int width = kLeft + kW + 30, height = kTop + kH + 44;
  auto px = [&](double x) { return kLeft + kW * (x - x_lo) / (x_hi - x_lo); };
  auto py = [&](double y) { return kTop + kH * (y_hi - y) / (y_hi - y_lo); };
  const std::string y_name =
      by_agreement ? "top-1 agreement" : "output SQNR (dB)";
  std::string svg = absl::StrFormat(
      "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
      "aria-label=\"model bytes against %s per search round\">\n"
      "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
      "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n"
      "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">model bytes "
      "(%.0f .. %.0f)</text>\n"
      "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text>"
      "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text>"
      "<text x=\"4\" y=\"%d\">%s</text>\n",
      width, height, width, height, y_name, kLeft, kTop, kLeft, kTop + kH,
      kLeft, kTop + kH, kLeft + kW, kTop + kH, kLeft + kW / 2, kTop + kH + 32,
      x_lo, x_hi, kLeft - 4, kTop + 10, y_hi, kLeft - 4, kTop + kH, y_lo,
      kTop + kH + 44 - 2, y_name);
  absl::StrAppendFormat(&svg,
                        "<line class=\"goal\" x1=\"%d\" y1=\"%.1f\" "
                        "x2=\"%d\" y2=\"%.1f\"><title>goal %.4g</title>"
                        "</line>\n",
                        kLeft, py(goal), kLeft + kW, py(goal), goal);
  std::string path;
  for (int i = 0; i < a.rounds_size(); ++i) {
    const auto& r = a.rounds(i);
    if (!std::isfinite(y_of(r))) continue;
    absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "" : " ",
                          px(r.model_bytes()), py(y_of(r)));
  }
  absl::StrAppend(&svg, "<polyline class=\"trade\" points=\"", path, "\"/>\n");
  for (int i = 0; i < a.rounds_size(); ++i) {
    const auto& r = a.rounds(i);
    if (!std::isfinite(y_of(r))) continue;
    absl::StrAppendFormat(
        &svg,
        "<circle class=\"point%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\">"
        "<title>round %d: %d bytes, %.4g</title></circle>"
        "<text x=\"%.1f\" y=\"%.1f\">%d</text>\n",
        i == a.chosen_round() ? " chosen" : "", px(r.model_bytes()),
        py(y_of(r)), i + 1, r.model_bytes(), y_of(r), px(r.model_bytes()) + 6,
        py(y_of(r)) - 6, i + 1);
  }
  return svg + "</svg>\n";
}

// What calibration_method auto or auto_headroom tried and kept.
std::string ObserverChoiceSection(const quantd::v1::QuantizeSummary& s) {
  if (!s.has_observer_choice()) return "";
  const quantd::v1::ObserverChoice& c = s.observer_choice();
  std::string html = absl::StrCat(
      "<h2>Calibration observer (", HtmlEscape(ObserverChoiceSearch(c)),
      ")</h2>\n<p>kept <b>", HtmlEscape(ObserverChoiceKept(c)),
      "</b>; each candidate quantized the model and "
      "was compared with float on ",
      HtmlEscape(ObserverChoiceJudgedOn(c)), ".</p>\n<table>\n",
      Header({"candidate", "worst output SQNR (dB)", "worst top-1 agreement",
              "tensors clipped", ""}));
  for (const quantd::v1::ObserverCandidate& k : c.candidates()) {
    const bool kept = IsKeptCandidate(c, k);
    absl::StrAppend(&html, kept ? "<tr class=\"chosen\">" : "<tr>",
                    Cell(ObserverCandidateName(k.method(), k.headroom())),
                    Cell(FormatDb(k.output_sqnr_db()), true),
                    Cell(std::isnan(k.top1_agreement())
                             ? std::string("-")
                             : absl::StrFormat("%.4f", k.top1_agreement()),
                         true),
                    Cell(absl::StrCat(k.clipped_tensors()), true),
                    kept ? "<td class=\"tag\">kept</td>" : "<td></td>",
                    "</tr>\n");
  }
  return html + "</table>\n";
}

// What a target_sqnr_db / target_agreement search tried and returned.
std::string AccuracySearchSection(const quantd::v1::QuantizeSummary& s) {
  if (!s.has_accuracy_search()) return "";
  const quantd::v1::AccuracySearch& a = s.accuracy_search();
  std::vector<std::string> ladder;
  for (int p : a.allowed_precisions()) {
    ladder.push_back(absl::AsciiStrToLower(absl::StripPrefix(
        tensorflow::quantization::QuantizationPrecision_Name(
            static_cast<tensorflow::quantization::QuantizationPrecision>(p)),
        "PRECISION_")));
  }
  std::string html = absl::StrCat(
      "<h2>Accuracy search</h2>\n<p>goal <b>",
      HtmlEscape(AccuracySearchGoal(a)), "</b>, ",
      a.met() ? "met" : "<span class=\"tag\">not met</span>", "; precisions ",
      absl::StrJoin(ladder, " &rarr; "), ". ", HtmlEscape(a.note()), "</p>\n",
      AccuracySearchChart(a), "<table>\n");
  std::vector<std::string> columns(std::begin(kAccuracySearchColumns),
                                   std::end(kAccuracySearchColumns));
  columns.push_back("");
  html += Header(columns);
  for (int i = 0; i < a.rounds_size(); ++i) {
    const std::vector<std::string> cells = AccuracySearchRoundCells(a, i);
    html += i == a.chosen_round() ? "<tr class=\"chosen\">" : "<tr>";
    for (size_t c = 0; c < cells.size(); ++c) {
      html += Cell(cells[c], c + 1 < cells.size());
    }
    absl::StrAppend(
        &html,
        i == a.chosen_round() ? "<td class=\"tag\">returned</td>" : "<td></td>",
        "</tr>\n");
  }
  html += "</table>\n";
  if (a.unit_wise_quantization_precision_size() > 0) {
    html += "<p>Replay with these unit entries (and no target):</p>\n<pre>";
    for (const auto& u : a.unit_wise_quantization_precision()) {
      absl::StrAppend(&html, HtmlEscape(u.unit_name()),
                      u.func_name().empty()
                          ? ""
                          : " (in " + HtmlEscape(u.func_name()) + ")",
                      ": ",
                      tensorflow::quantization::QuantizationPrecision_Name(
                          u.quantization_precision()),
                      "\n");
    }
    html += "</pre>\n";
  }
  return html;
}

std::string TensorSection(const QuantizeReportInput& in) {
  std::string html = "<h2>Quantized tensors</h2>\n";
  if (in.tensors.empty()) return html + "<p class=\"muted\">none</p>\n";
  html +=
      "<table>\n" + Header({"node", "op", "tensor", "elements", "bits",
                            "scheme", "storage", "scale", "MSE", "SQNR (dB)",
                            "rounding", "layer output SQNR (dB)", "note"});
  for (const quantd::v1::TensorReport& r : in.tensors) {
    const quantd::v1::QuantScheme& q = r.scheme();
    std::string scheme = q.symmetric() ? "symmetric" : "asymmetric";
    if (q.narrow_range()) scheme += ", narrow";
    scheme += q.block_size() > 0 ? absl::StrCat(", blocks of ", q.block_size(),
                                                " (axis ", q.axis(), ")")
              : q.per_channel()
                  ? absl::StrCat(", per-channel (axis ", q.axis(), ")")
                  : ", per-tensor";
    if (q.range() == "mse") scheme += ", MSE range";
    const std::string output_sqnr = GptqOutcomeText(r);
    const std::string scale =
        r.scale_min() == r.scale_max()
            ? absl::StrFormat("%.4g", r.scale_min())
            : absl::StrFormat("%.4g .. %.4g", r.scale_min(), r.scale_max());
    absl::StrAppend(
        &html, "<tr>", Cell(r.node_name()), Cell(r.op_type()),
        Cell(r.tensor_name()), Cell(absl::StrCat(r.num_elements()), true),
        Cell(absl::StrCat(q.bits()), true), Cell(scheme),
        Cell(q.storage_type()), Cell(scale, true),
        Cell(absl::StrFormat("%.3g", r.mse()), true),
        Cell(FormatDb(r.sqnr_db()), true), Cell(r.weight_algorithm()),
        Cell(output_sqnr, true), Cell(r.note()), "</tr>\n");
  }
  return html + "</table>\n";
}

// Horizontal bars, one per layer in graph order; exact layers are drawn
// full length in another colour, negative or NaN SQNRs as empty bars.
std::string LayerChart(const quantd::v1::FidelityReport& f,
                       const std::vector<int>& worst) {
  constexpr int kLabel = 260, kBarMax = 520, kRow = 18, kTop = 24;
  double top = 10;
  for (const auto& l : f.layers()) {
    if (std::isfinite(l.sqnr_db())) top = std::max(top, l.sqnr_db());
  }
  top = std::ceil(top / 10) * 10;
  const int height = kTop + kRow * f.layers_size() + 8;
  const int width = kLabel + kBarMax + 70;
  std::string svg = absl::StrFormat(
      "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
      "aria-label=\"per-layer SQNR in dB\">\n",
      width, height, width, height);
  for (int tick = 0; tick <= 4; ++tick) {
    const double db = top * tick / 4;
    const int x = kLabel + static_cast<int>(kBarMax * tick / 4);
    absl::StrAppendFormat(&svg,
                          "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" "
                          "y2=\"%d\"/><text x=\"%d\" y=\"12\" "
                          "text-anchor=\"middle\">%g dB</text>\n",
                          x, kTop - 6, x, height - 4, x, db);
  }
  for (int i = 0; i < f.layers_size(); ++i) {
    const quantd::v1::LayerFidelity& l = f.layers(i);
    const double db = l.sqnr_db();
    const bool exact = std::isinf(db) && db > 0;
    const bool is_worst =
        std::find(worst.begin(), worst.end(), i) != worst.end();
    double len = 0;
    if (exact) {
      len = kBarMax;
    } else if (std::isfinite(db) && db > 0) {
      len = std::min<double>(kBarMax, kBarMax * db / top);
    }
    const int y = kTop + kRow * i;
    std::string label = l.tensor_name();
    if (label.size() > 40) label = label.substr(0, 37) + "...";
    absl::StrAppendFormat(
        &svg,
        "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>"
        "<rect class=\"bar%s\" x=\"%d\" y=\"%d\" width=\"%.1f\" "
        "height=\"%d\"><title>%s (%s): %s dB</title></rect>"
        "<text x=\"%.1f\" y=\"%d\">%s</text>\n",
        kLabel - 6, y + 12, HtmlEscape(label),
        exact ? " exact" : (is_worst ? " worst" : ""), kLabel, y + 2, len,
        kRow - 4, HtmlEscape(l.tensor_name()), HtmlEscape(l.op_type()),
        FormatDb(db), kLabel + len + 4, y + 12,
        exact ? std::string("exact") : FormatDb(db));
  }
  return svg + "</svg>\n";
}

std::string FidelitySection(const quantd::v1::QuantizeSummary& s) {
  std::string html = "<h2>Fidelity</h2>\n";
  if (!s.has_fidelity()) {
    return html +
           "<p class=\"muted\">not measured (the model was not "
           "quantized)</p>\n";
  }
  const quantd::v1::FidelityReport& f = s.fidelity();
  if (!f.evaluated()) {
    return absl::StrCat(html, "<p>skipped: ", HtmlEscape(f.skipped_reason()),
                        "</p>\n");
  }
  absl::StrAppend(&html,
                  "<p>The quantized model against the float model, "
                  "both run in quantd's executor over ",
                  f.batches_evaluated(), " of ", f.batches_received(),
                  " calibration batches.",
                  f.note().empty() ? "" : " " + HtmlEscape(f.note()),
                  "</p>\n<table>\n",
                  Header({"output", "SQNR (dB)", "top-1 agreement", "rows",
                          "max |error|", "elements"}));
  for (const quantd::v1::OutputFidelity& o : f.outputs()) {
    absl::StrAppend(
        &html, "<tr>", Cell(o.name()), Cell(FormatDb(o.sqnr_db()), true),
        Cell(o.has_top1() ? absl::StrFormat("%.4f", o.top1_agreement())
                          : std::string("-"),
             true),
        Cell(o.has_top1() ? absl::StrCat(o.top1_rows()) : std::string("-"),
             true),
        Cell(absl::StrFormat("%.4g", o.max_abs_error()), true),
        Cell(absl::StrCat(o.elements()), true), "</tr>\n");
  }
  html += "</table>\n";
  const std::vector<int> worst = WorstLayers(f);
  absl::StrAppend(&html,
                  "<h3>Per-layer SQNR</h3>\n<p class=\"muted\">Quantized vs "
                  "float activations by tensor name, in graph order; error "
                  "accumulates, so where the SQNR drops is where error "
                  "enters. The ",
                  kWorstLayers, " lowest are flagged.</p>\n");
  if (f.layers_size() == 0) return html + "<p class=\"muted\">none</p>\n";
  html += LayerChart(f, worst);
  html += "<table>\n" + Header({"#", "tensor", "node", "op", "SQNR (dB)",
                                "max |error|", "elements", ""});
  for (int i = 0; i < f.layers_size(); ++i) {
    const quantd::v1::LayerFidelity& l = f.layers(i);
    const auto w = std::find(worst.begin(), worst.end(), i);
    const bool is_worst = w != worst.end();
    absl::StrAppend(&html, is_worst ? "<tr class=\"worst\">" : "<tr>",
                    Cell(absl::StrCat(i + 1), true), Cell(l.tensor_name()),
                    Cell(l.node_name()), Cell(l.op_type()),
                    Cell(FormatDb(l.sqnr_db()), true),
                    Cell(absl::StrFormat("%.4g", l.max_abs_error()), true),
                    Cell(absl::StrCat(l.elements()), true),
                    is_worst ? absl::StrCat("<td class=\"tag\">worst #",
                                            w - worst.begin() + 1, "</td>")
                             : std::string("<td></td>"),
                    "</tr>\n");
  }
  return html + "</table>\n";
}

}  // namespace

std::string RenderQuantizeReportHtml(const QuantizeReportInput& input) {
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>quantd report: ",
      HtmlEscape(input.model_path), "</title>\n<style>", kStyle,
      "</style>\n</head>\n<body>\n<h1>quantd quantization report</h1>\n<p>",
      HtmlEscape(input.model_path), " &rarr; ", HtmlEscape(input.output_path),
      "</p>\n", ModelSection(input), OptionsSection(input),
      ObserverChoiceSection(input.summary), FidelitySection(input.summary),
      AccuracySearchSection(input.summary),
      ChannelScalingSection(input.summary), TensorSection(input),
      "</body>\n</html>\n");
}

}  // namespace quantd::client
