// End to end: the fidelity report of a STATIC_RANGE W8A8 quantization of the
// digits example with inline calibration data, through a real quantd and
// quantctl: the JSON fields, the table, the HTML report, and the output SQNR
// and top-1 agreement checked against ONNX Runtime's own comparison of the
// two models on the same inputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/executor/executor.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"
#include "tests/support/ort.h"
#include "tests/support/quantd_fixture.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kModel = SourcePath("examples/digits/model.onnx");
const std::string kCalibX = SourcePath("examples/digits/calib_x.npy");

// The executor runs the QDQ model only once it has QuantizeLinear and
// DequantizeLinear kernels; until then fidelity must say it skipped.
bool ExecutorRunsQdq() {
  const std::vector<std::string> ops = executor::Executor::SupportedOps();
  return std::count(ops.begin(), ops.end(), "QuantizeLinear") > 0 &&
         std::count(ops.begin(), ops.end(), "DequantizeLinear") > 0;
}

// The "summary" member of quantctl's --json output.
quantd::v1::QuantizeSummary SummaryFromJson(const std::string& json) {
  google::protobuf::Struct root;
  quantd::v1::QuantizeSummary summary;
  auto status = google::protobuf::util::JsonStringToMessage(json, &root);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  const auto it = root.fields().find("summary");
  EXPECT_TRUE(it != root.fields().end()) << json;
  if (it == root.fields().end()) return summary;
  std::string summary_json;
  (void)google::protobuf::util::MessageToJsonString(it->second, &summary_json);
  status = google::protobuf::util::JsonStringToMessage(summary_json, &summary);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << summary_json;
  return summary;
}

int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

class FidelityE2eTest : public QuantdServerTest {};

TEST_F(FidelityE2eTest, StaticDigitsReportsFidelityInJsonTableAndHtml) {
  TempDir tmp;
  const std::string out = tmp.File("static.onnx");
  const std::string report = tmp.File("report.html");
  CommandResult q =
      Quantctl({"quantize", "--model=" + kModel, "--output=" + out,
                "--method=static_range", "--calibration_data=" + kCalibX,
                "--batch_size=16", "--json", "--report=" + report});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  ASSERT_THAT(q.out, StartsWith("{"));
  EXPECT_THAT(q.out, HasSubstr("\"fidelity\""));
  const quantd::v1::QuantizeSummary summary = SummaryFromJson(q.out);
  ASSERT_TRUE(summary.has_fidelity()) << q.out;
  const quantd::v1::FidelityReport& f = summary.fidelity();
  EXPECT_EQ(f.batches_received(), 4);  // 64 samples in batches of 16.
  bool timed = false;
  for (const auto& d : summary.stage_durations()) {
    if (d.stage() != quantd::v1::STAGE_FIDELITY) continue;
    timed = true;
    std::printf("measured: fidelity stage %.4f s\n", d.seconds());
  }
  EXPECT_TRUE(timed);

  const std::string html = ReadFileOrDie(report);
  EXPECT_THAT(html, StartsWith("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("</html>"));
  EXPECT_THAT(html, HasSubstr("STATIC_RANGE"));
  EXPECT_THAT(html, Not(HasSubstr("http:")));
  EXPECT_THAT(html, Not(HasSubstr("https:")));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  std::printf("measured: HTML report %zu bytes\n", html.size());

  if (!ExecutorRunsQdq()) {
    EXPECT_FALSE(f.evaluated());
    EXPECT_THAT(f.skipped_reason(), HasSubstr("QuantizeLinear"));
    EXPECT_THAT(html, HasSubstr("skipped: "));
    std::printf("measured: fidelity skipped: %s\n", f.skipped_reason().c_str());
    return;
  }
  ASSERT_TRUE(f.evaluated()) << f.skipped_reason();
  EXPECT_EQ(f.batches_evaluated(), 4);
  ASSERT_EQ(f.outputs_size(), 1);
  const quantd::v1::OutputFidelity& logits = f.outputs(0);
  EXPECT_EQ(logits.name(), "logits");
  EXPECT_EQ(logits.elements(), 64 * 10);
  EXPECT_TRUE(logits.has_top1());
  EXPECT_EQ(logits.top1_rows(), 64);
  EXPECT_GT(logits.sqnr_db(), 20.0);
  EXPECT_GE(logits.top1_agreement(), 0.95);
  std::printf(
      "measured: digits STATIC W8A8 logits SQNR %.2f dB, top-1 "
      "agreement %.4f (quantd executor, calib_x)\n",
      logits.sqnr_db(), logits.top1_agreement());

  // Per-layer entries: node outputs of the float model, in its graph order,
  // ending with the logits (whose SQNR is the output's).
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(ReadFileOrDie(kModel)));
  std::vector<std::string> order;
  for (const auto& node : model.graph().node()) {
    for (const auto& o : node.output()) order.push_back(o);
  }
  ASSERT_GE(f.layers_size(), 4);
  size_t last = 0;
  for (const quantd::v1::LayerFidelity& l : f.layers()) {
    const auto at = std::find(order.begin(), order.end(), l.tensor_name());
    ASSERT_NE(at, order.end()) << l.tensor_name();
    EXPECT_GE(static_cast<size_t>(at - order.begin()), last) << l.tensor_name();
    last = at - order.begin();
    EXPECT_FALSE(l.op_type().empty());
    std::printf("measured: layer %-24s %-8s SQNR %.2f dB\n",
                l.tensor_name().c_str(), l.op_type().c_str(), l.sqnr_db());
  }
  EXPECT_EQ(f.layers(f.layers_size() - 1).tensor_name(), "logits");
  EXPECT_DOUBLE_EQ(f.layers(f.layers_size() - 1).sqnr_db(), logits.sqnr_db());
  EXPECT_EQ(Count(html, "<rect class=\"bar"), f.layers_size());

  // The same comparison in ONNX Runtime, graph optimizations off so it runs
  // the QDQ pairs as written (with them on it fuses them into integer
  // kernels, a different computation).
  const std::string ort = OrtEval({"compare", "--model", kModel, "--model2",
                                   out, "--x", kCalibX, "--opt", "disabled"});
  const double ort_sqnr = JsonNumber(ort, "sqnr_db");
  const double ort_top1 = JsonNumber(ort, "top1_agreement");
  std::printf(
      "measured: ONNX Runtime on the same inputs: logits SQNR %.2f dB, "
      "top-1 agreement %.4f (quantd: %.2f dB, %.4f)\n",
      ort_sqnr, ort_top1, logits.sqnr_db(), logits.top1_agreement());
  EXPECT_NEAR(logits.sqnr_db(), ort_sqnr, 0.5);
  EXPECT_NEAR(logits.top1_agreement(), ort_top1, 2.0 / 64);
}

TEST_F(FidelityE2eTest, TableShowsFidelityOrWhyItWasSkipped) {
  TempDir tmp;
  CommandResult q =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("s.onnx"), "--method=static_range",
                "--calibration_data=" + kCalibX, "--batch_size=32"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  if (ExecutorRunsQdq()) {
    EXPECT_THAT(q.out, HasSubstr("fidelity:   quantized vs float model over 2 "
                                 "of 2 calibration batches"));
    EXPECT_THAT(q.out, HasSubstr("output logits: SQNR "));
    EXPECT_THAT(q.out, HasSubstr("top-1 agreement"));
    EXPECT_THAT(q.out, HasSubstr("per-layer SQNR"));
    EXPECT_THAT(q.out, HasSubstr("<- worst #1"));
  } else {
    EXPECT_THAT(q.out, HasSubstr("fidelity:   skipped: "));
  }
  std::printf("%s", q.out.c_str());

  // DYNAMIC_RANGE has no calibration data: skipped, and said why.
  CommandResult d =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("d.onnx"), "--method=dynamic_range"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_THAT(d.out, HasSubstr("fidelity:   skipped: DYNAMIC_RANGE"));
}

// --weight_algorithm=gptq through quantctl and the server, with either
// method: the table names each weight's rounding and GPTQ's layer SQNR.
TEST_F(FidelityE2eTest, GptqWeightsWithEitherMethod) {
  TempDir tmp;
  for (const std::string method : {"static_range", "dynamic_range"}) {
    CommandResult q = Quantctl(
        {"quantize", "--model=" + kModel, "--output=" + tmp.File("g.onnx"),
         "--method=" + method, "--precision=w4a8", "--weight_algorithm=gptq",
         "--gptq_act_order", "--calibration_data=" + kCalibX,
         "--batch_size=32"});
    ASSERT_EQ(q.exit_code, 0) << method << ": " << q.err;
    EXPECT_THAT(q.out, HasSubstr("ROUNDING")) << method;
    EXPECT_THAT(q.out, HasSubstr("gptq ")) << method;
    EXPECT_THAT(q.out, HasSubstr("(rtn ")) << method;
    EXPECT_THAT(q.out, HasSubstr("weight_algorithm GPTQ: input statistics"))
        << method;
  }
  // Rounding to nearest with DYNAMIC_RANGE takes no batches.
  CommandResult d =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("d.onnx"), "--method=dynamic_range",
                "--weight_algorithm=rtn", "--calibration_data=" + kCalibX});
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_THAT(d.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(d.err, HasSubstr("weight_algorithm GPTQ"));
  CommandResult bad =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("b.onnx"), "--method=static_range",
                "--weight_algorithm=hqq", "--calibration_data=" + kCalibX});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("it must be rtn, gptq, awq or awq+gptq"));
}

// --weight_algorithm=awq with either method: the note says what AWQ did,
// the rescaled weights say "awq", and smoothquant beside it is refused.
TEST_F(FidelityE2eTest, AwqWeightsWithEitherMethod) {
  TempDir tmp;
  for (const std::string method : {"static_range", "dynamic_range"}) {
    CommandResult q = Quantctl(
        {"quantize", "--model=" + kModel, "--output=" + tmp.File("a.onnx"),
         "--method=" + method, "--precision=w4a8", "--weight_algorithm=awq",
         "--calibration_data=" + kCalibX, "--batch_size=32",
         "--report=" + tmp.File("a.html")});
    ASSERT_EQ(q.exit_code, 0) << method << ": " << q.err;
    EXPECT_THAT(q.out, HasSubstr("weight_algorithm AWQ: ")) << method;
    EXPECT_THAT(q.out, HasSubstr("values rescaled")) << method;
  }
  // AWQ's factors, then GPTQ's rounding: every quantized weight is
  // GPTQ-rounded, the rescaled ones say so.
  CommandResult composed =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("c.onnx"), "--method=static_range",
                "--precision=w4a8", "--weight_algorithm=awq+gptq",
                "--calibration_data=" + kCalibX, "--batch_size=32"});
  ASSERT_EQ(composed.exit_code, 0) << composed.err;
  EXPECT_THAT(composed.out, HasSubstr("weight_algorithm AWQ+GPTQ: "));
  EXPECT_THAT(composed.out, HasSubstr("then rounded with GPTQ"));
  EXPECT_THAT(composed.out, HasSubstr(" awq+gptq"));
  EXPECT_THAT(composed.out, Not(HasSubstr(" rtn")));
  CommandResult both = Quantctl(
      {"quantize", "--model=" + kModel, "--output=" + tmp.File("b.onnx"),
       "--method=static_range", "--weight_algorithm=awq", "--smoothquant",
       "--calibration_data=" + kCalibX});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_THAT(both.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(both.err, HasSubstr("ask for one of them"));
}

// --smoothquant (bare: alpha 0.5, or auto) and --equalize through quantctl:
// the table lists each rescaled value; a bad alpha is a usage error.
TEST_F(FidelityE2eTest, SmoothQuantAndEqualizeFlags) {
  TempDir tmp;
  for (const std::string flag : {"--smoothquant", "--smoothquant=auto"}) {
    CommandResult q =
        Quantctl({"quantize", "--model=" + kModel,
                  "--output=" + tmp.File("s.onnx"), "--method=static_range",
                  flag, "--equalize", "--calibration_data=" + kCalibX,
                  "--batch_size=32", "--report=" + tmp.File("s.html")});
    ASSERT_EQ(q.exit_code, 0) << flag << ": " << q.err;
    EXPECT_THAT(ReadFileOrDie(tmp.File("s.html")),
                HasSubstr("<h2>Channel scalings</h2>"));
    EXPECT_THAT(q.out, HasSubstr("channel scalings")) << flag;
    EXPECT_THAT(q.out, HasSubstr("equalize ")) << flag;
    EXPECT_THAT(q.out,
                HasSubstr(flag == "--smoothquant" ? "smoothquant (alpha 0.5)"
                                                  : "smoothquant (auto_alpha)"))
        << flag;
  }
  CommandResult bad =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("b.onnx"), "--method=static_range",
                "--smoothquant=strong", "--calibration_data=" + kCalibX});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--smoothquant is 'strong'"));
  CommandResult range =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("r.onnx"), "--method=static_range",
                "--smoothquant=2", "--calibration_data=" + kCalibX});
  EXPECT_EQ(range.exit_code, 1);
  EXPECT_THAT(range.err, HasSubstr("smoothquant.alpha is 2"));
}

TEST_F(FidelityE2eTest, UnwritableReportFailsWithoutAPartialFile) {
  TempDir tmp;
  CommandResult q =
      Quantctl({"quantize", "--model=" + kModel,
                "--output=" + tmp.File("m.onnx"), "--method=dynamic_range",
                "--report=" + tmp.File("no_such_dir/report.html")});
  EXPECT_EQ(q.exit_code, 1);
  EXPECT_THAT(q.err, HasSubstr("no_such_dir"));
}

}  // namespace
// --target_sqnr_db with --holdout_batches through quantctl and the server:
// a goal above what W8A8 reaches on the digits model makes the search keep
// nodes float; the table shows the rounds, the JSON the choice, and the
// model the search returned runs in ONNX Runtime at least as close to float
// as the round it started from.
TEST_F(FidelityE2eTest, TargetSqnrSearchWithHeldOutBatches) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  TempDir tmp;
  const std::string plain = tmp.File("plain.onnx");
  const std::string searched = tmp.File("searched.onnx");
  const std::vector<std::string> common = {"quantize",
                                           "--model=" + kModel,
                                           "--method=static_range",
                                           "--calibration_data=" + kCalibX,
                                           "--batch_size=16",
                                           "--holdout_batches=1"};
  std::vector<std::string> args = common;
  args.push_back("--output=" + plain);
  args.push_back("--json");
  CommandResult q = Quantctl(args);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const quantd::v1::QuantizeSummary base = SummaryFromJson(q.out);
  ASSERT_TRUE(base.fidelity().evaluated());
  EXPECT_EQ(base.fidelity().batches_evaluated(), 1);
  EXPECT_THAT(base.fidelity().note(), HasSubstr("held out"));
  const double base_db = base.fidelity().outputs(0).sqnr_db();

  args = common;
  args.push_back("--output=" + searched);
  args.push_back("--target_sqnr_db=" + std::to_string(base_db + 6));
  CommandResult table = Quantctl(args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("accuracy search: target"));
  EXPECT_THAT(table.out, HasSubstr("<- returned"));
  args.push_back("--json");
  q = Quantctl(args);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const quantd::v1::QuantizeSummary s = SummaryFromJson(q.out);
  ASSERT_TRUE(s.has_accuracy_search()) << q.out;
  const quantd::v1::AccuracySearch& a = s.accuracy_search();
  ASSERT_GE(a.rounds_size(), 2) << a.note();
  EXPECT_DOUBLE_EQ(a.rounds(0).output_sqnr_db(), base_db);
  const double chosen = a.rounds(a.chosen_round()).output_sqnr_db();
  EXPECT_GT(chosen, base_db);
  EXPECT_EQ(a.met(), chosen >= base_db + 6) << a.note();
  EXPECT_GE(a.unit_wise_quantization_precision_size(), 1);
  std::printf("measured: digits target %.1f dB: %s\n", base_db + 6,
              a.note().c_str());

  const auto ort_db = [&](const std::string& model) {
    const std::string json =
        OrtEval({"compare", "--model", kModel, "--model2", model, "--x",
                 kCalibX, "--opt", "disabled"});
    // Every quantized node kept float gives back the float model.
    if (json.find("\"identical\":true") != std::string::npos) {
      return std::numeric_limits<double>::infinity();
    }
    return JsonNumber(json, "sqnr_db");
  };
  EXPECT_GT(ort_db(searched), ort_db(plain));

  args = common;
  args.push_back("--output=" + tmp.File("bad.onnx"));
  args.push_back("--holdout_batches=4");
  CommandResult bad = Quantctl(args);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("FAILED_PRECONDITION"));
}

// --target_agreement with --allowed_precisions: W4A4 digits with 2-bit
// weights, judged on top-1 agreement on held-out batches, raised straight
// to float; the table,
// the JSON and the HTML report show the rounds, and ONNX Runtime agrees the
// returned model reads at least as many digits like float as the plain one.
TEST_F(FidelityE2eTest, AgreementTargetWithAllowedPrecisions) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  TempDir tmp;
  const std::string plain = tmp.File("plain.onnx");
  const std::string searched = tmp.File("searched.onnx");
  const std::string report = tmp.File("report.html");
  const std::vector<std::string> common = {
      "quantize",         "--model=" + kModel,  "--method=static_range",
      "--precision=w4a4", "--weight_bits=2",    "--calibration_data=" + kCalibX,
      "--batch_size=16",  "--holdout_batches=2"};
  std::vector<std::string> args = common;
  args.push_back("--output=" + plain);
  ASSERT_EQ(Quantctl(args).exit_code, 0);

  args = common;
  args.push_back("--output=" + searched);
  args.push_back("--target_agreement=1");
  args.push_back("--allowed_precisions=w4a4,full");
  args.push_back("--report=" + report);
  CommandResult table = Quantctl(args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("accuracy search: target top-1 agreement "
                                   "1.000"));
  EXPECT_THAT(table.out, HasSubstr("top-1 agreement"));
  args.push_back("--json");
  CommandResult q = Quantctl(args);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const quantd::v1::AccuracySearch a = SummaryFromJson(q.out).accuracy_search();
  std::printf("measured: digits W4A4 agreement search: %s\n", a.note().c_str());
  EXPECT_EQ(a.target_agreement(), 1.0);
  ASSERT_EQ(a.allowed_precisions_size(), 2);
  EXPECT_EQ(a.allowed_precisions(1), tensorflow::quantization::PRECISION_FULL);
  for (const auto& r : a.rounds()) {
    for (const std::string& n : r.raised_this_round()) {
      EXPECT_THAT(n, HasSubstr("PRECISION_FULL"));
    }
  }
  // 2-bit weights misread digits: the search had to raise something.
  ASSERT_GE(a.rounds_size(), 2) << a.note();
  EXPECT_LT(a.rounds(0).top1_agreement(), 1.0);
  const double chosen = a.rounds(a.chosen_round()).top1_agreement();
  EXPECT_GE(chosen, a.rounds(0).top1_agreement());
  EXPECT_EQ(a.met(), chosen >= 1.0);
  const std::string html = ReadFileOrDie(report);
  EXPECT_THAT(html, HasSubstr("<h2>Accuracy search</h2>"));
  EXPECT_THAT(html, HasSubstr("w4a4 &rarr; full"));
  EXPECT_GE(Count(html, "<circle class=\"point"), 1);

  const auto ort_top1 = [&](const std::string& model) {
    const std::string json = OrtEval({"compare", "--model", kModel, "--model2",
                                      model, "--x", kCalibX, "--opt", "all"});
    if (json.find("\"identical\":true") != std::string::npos) return 1.0;
    return JsonNumber(json, "top1_agreement");
  };
  EXPECT_GE(ort_top1(searched), ort_top1(plain));

  args = common;
  args.push_back("--output=" + tmp.File("bad.onnx"));
  args.push_back("--target_agreement=0.9");
  args.push_back("--allowed_precisions=w4a4,int2");
  CommandResult bad = Quantctl(args);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--allowed_precisions=int2 is not one of"));
  args.back() = "--allowed_precisions=w8a8,full";
  bad = Quantctl(args);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(bad.err, HasSubstr("PRECISION_W4A4"));
}

}  // namespace quantd::testing
