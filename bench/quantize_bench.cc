// End-to-end Quantize benchmark over loopback: for each model, the wall time
// of DYNAMIC_RANGE W8A8 against a pass-through of the same model (options
// with no method) in the same run, and the server's peak memory per call.
// Prints a Markdown table (docs/benchmarks.md has the latest).
//
// Each (model, mode) pair gets a fresh quantd process so that the peak RSS of
// its first call is not hidden by memory a previous call left in malloc's
// free lists. Later repeats of the same pair give the timings (median).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "client/quantd_client.h"
#include "tests/e2e/e2e_models.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

ABSL_FLAG(std::string, models, "", "Comma-separated ONNX model paths.");
ABSL_FLAG(int, matmul_mb, 0,
          "Also measure a generated model of this many MB: a chain of "
          "2048x2048 fp32 MatMuls (16 MB each), LLM-shaped.");
ABSL_FLAG(int, repeats, 5, "Timed calls per (model, mode).");
ABSL_FLAG(int, threads, 0, "quantd --threads (0 = cores).");
ABSL_FLAG(std::string, quantd, QUANTD_SERVER_BIN, "quantd binary.");
ABSL_FLAG(std::string, echo_server, QUANTD_ECHO_SERVER_BIN,
          "The peer: a server that only echoes the model (echo_server.cc).");

namespace {

using quantd::testing::ServerProcess;

struct Measurement {
  double median_seconds = 0;
  double first_call_peak_bytes = 0;  // Server VmHWM above its idle RSS.
  uint64_t output_bytes = 0;
  int quantized_tensors = 0;
};

quantd::v1::QuantizeConfig PassThrough() { return {}; }

quantd::v1::QuantizeConfig DynamicRangeW8A8() {
  quantd::v1::QuantizeConfig config;
  auto* options = config.mutable_options();
  options->mutable_quantization_method()->set_experimental_method(
      tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE);
  options->set_op_set(tensorflow::quantization::TF);
  options->set_quantization_precision(tensorflow::quantization::PRECISION_W8A8);
  return config;
}

bool Measure(const std::string& model, const quantd::v1::QuantizeConfig& config,
             Measurement* m, bool echo = false) {
  ServerProcess server(
      echo ? std::vector<std::string>{}
           : std::vector<std::string>{"--threads=" +
                                      std::to_string(
                                          absl::GetFlag(FLAGS_threads))},
      echo ? absl::GetFlag(FLAGS_echo_server) : absl::GetFlag(FLAGS_quantd));
  if (!server.ok()) {
    std::fprintf(stderr, "quantd did not start: %s\n",
                 server.startup_output().c_str());
    return false;
  }
  quantd::client::Client::Options client_options;
  client_options.target = server.target();
  quantd::client::Client client(client_options);
  std::vector<double> seconds;
  for (int i = 0; i <= absl::GetFlag(FLAGS_repeats); ++i) {
    const int64_t idle =
        quantd::testing::ProcStatusBytes(server.pid(), "VmRSS");
    quantd::testing::ResetPeakRss(server.pid());
    auto start = std::chrono::steady_clock::now();
    auto outcome = client.Quantize(config, model);
    auto end = std::chrono::steady_clock::now();
    if (!outcome.ok()) {
      std::fprintf(stderr, "Quantize failed: %s\n",
                   outcome.status().ToString().c_str());
      return false;
    }
    if (i == 0) {
      // The first call is the memory measurement (and warms up the server).
      m->first_call_peak_bytes =
          quantd::testing::ProcStatusBytes(server.pid(), "VmHWM") - idle;
      m->output_bytes = outcome->model.size();
      m->quantized_tensors = outcome->summary.quantized_tensors();
      continue;
    }
    seconds.push_back(std::chrono::duration<double>(end - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  m->median_seconds = seconds[seconds.size() / 2];
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<std::string> paths =
      absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
  const int matmul_mb = absl::GetFlag(FLAGS_matmul_mb);
  if (matmul_mb > 0) paths.push_back("matmul_chain");
  if (paths.empty() || absl::GetFlag(FLAGS_repeats) < 1) {
    std::fprintf(stderr,
                 "usage: quantize_bench --models=A.onnx,B.onnx "
                 "[--matmul_mb=MB] [--repeats=N]\n");
    return 2;
  }
  std::printf(
      "| model | model MB | echo s | pass-through s (x echo) | quantize s | "
      "ratio | output MB | quantized tensors | peak MB pass-through | peak MB "
      "quantize | quantize peak / model |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : paths) {
    const std::string model = path == "matmul_chain"
                                  ? quantd::testing::MatMulChainModel(
                                        2048, std::max(1, matmul_mb / 16))
                                  : quantd::testing::ReadFileOrDie(path);
    if (model.empty()) return 1;
    Measurement echo, pass, quant;
    if (!Measure(model, PassThrough(), &echo, /*echo=*/true) ||
        !Measure(model, PassThrough(), &pass) ||
        !Measure(model, DynamicRangeW8A8(), &quant)) {
      return 1;
    }
    const double mb = 1e6;
    std::printf(
        "| %s | %.1f | %.3f | %.3f (%.2f) | %.3f | %.2f | %.1f | %d | %.1f | "
        "%.1f | %.2f |\n",
        path.substr(path.find_last_of('/') + 1).c_str(), model.size() / mb,
        echo.median_seconds, pass.median_seconds,
        pass.median_seconds / echo.median_seconds, quant.median_seconds,
        quant.median_seconds / pass.median_seconds, quant.output_bytes / mb,
        quant.quantized_tensors, pass.first_call_peak_bytes / mb,
        quant.first_call_peak_bytes / mb,
        quant.first_call_peak_bytes / static_cast<double>(model.size()));
    std::fflush(stdout);
  }
  return 0;
}
