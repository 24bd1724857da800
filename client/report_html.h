// quantctl's report of one Quantize call: the fidelity helpers shared by the
// terminal table and the self-contained HTML report (--report=FILE.html:
// inline CSS and an inline SVG chart, no script, no external asset).
#ifndef QUANTD_CLIENT_REPORT_HTML_H_
#define QUANTD_CLIENT_REPORT_HTML_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::client {

// How many of the lowest per-layer SQNRs are flagged as the worst layers.
inline constexpr int kWorstLayers = 3;

// Indices into report.layers() of the (at most) `count` layers with the
// lowest SQNR, lowest first; NaN counts as lowest, exact (+inf) layers are
// never flagged.
std::vector<int> WorstLayers(const quantd::v1::FidelityReport& report,
                             int count = kWorstLayers);

// An SQNR for people: "38.2", "inf" (exact), "-inf", "nan".
std::string FormatDb(double db);

// Where GPTQ ran on a weight, what it reached, for the terminal table and
// the HTML report: the layer output SQNR on the calibration inputs with
// rounding's in brackets and the cross-check's held-out pair, e.g.
// "24.4 (rtn 21.8; held-out 24.3 vs 21.8)", or when GPTQ lost the
// cross-check and the weight was rounded to nearest, "gptq lost on
// held-out: 21.3 vs 22.8". Empty where GPTQ did not run.
std::string GptqOutcomeText(const quantd::v1::TensorReport& r);

// One summary.channel_scalings entry as the cells of the terminal table
// and the HTML report, in the order of kChannelScalingColumns; and the
// legend that says what before / after mean for each algorithm.
inline constexpr const char* kChannelScalingColumns[] = {
    "algorithm", "value",   "absorbed by", "readers", "channels",
    "alpha",     "factors", "before",      "after"};
inline constexpr char kChannelScalingLegend[] =
    "smoothquant: the value's largest magnitude before and after; equalize: "
    "the worst weight range ratio between the two layers before and after; "
    "awq: the readers' output SQNR (dB) of their rounding on the calibration "
    "inputs, to nearest before and with the factors after";
std::vector<std::string> ChannelScalingCells(
    const quantd::v1::ChannelScaling& c);

// summary.accuracy_search for people: the goal ("30.0 dB", "top-1
// agreement 0.950", or both joined by "and"), and one round as the cells of
// the terminal table and the HTML report, in the order of
// kAccuracySearchColumns (agreement "-" when the model has no class axis).
inline constexpr const char* kAccuracySearchColumns[] = {
    "round",           "raised",      "output SQNR (dB)",
    "top-1 agreement", "model bytes", "raised this round"};
std::string AccuracySearchGoal(const quantd::v1::AccuracySearch& a);
std::vector<std::string> AccuracySearchRoundCells(
    const quantd::v1::AccuracySearch& a, int round);

// summary.observer_choice for people: a candidate's name with its headroom
// when it has one ("min_max x1.5"), the kept one's likewise, and whether a
// candidate is the kept one (method and headroom; 0 from an older server
// reads as 1).
std::string ObserverCandidateName(const std::string& method, double headroom);
std::string ObserverChoiceKept(const quantd::v1::ObserverChoice& c);
// What the candidates were judged on: "6 batches", "2 held-out batches",
// "6 batches in 4 folds, each judging the other batches' ranges".
std::string ObserverChoiceJudgedOn(const quantd::v1::ObserverChoice& c);
bool IsKeptCandidate(const quantd::v1::ObserverChoice& c,
                     const quantd::v1::ObserverCandidate& k);
// Which search made the choice: "auto_headroom" (one observer at several
// headrooms, in folds or on held-out batches) or "calibration method auto"
// (several observers).
std::string ObserverChoiceSearch(const quantd::v1::ObserverChoice& c);

// Escapes &, <, >, " and ' for HTML text and attribute values.
std::string HtmlEscape(absl::string_view text);

// Everything the report shows about one call.
struct QuantizeReportInput {
  std::string model_path;   // --model
  std::string output_path;  // --output
  // The QuantizationOptions sent, in protobuf text format.
  std::string options_text;
  quantd::v1::QuantizeSummary summary;
  std::vector<quantd::v1::TensorReport> tensors;
};

// The whole HTML document.
std::string RenderQuantizeReportHtml(const QuantizeReportInput& input);

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_REPORT_HTML_H_
