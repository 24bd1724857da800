// FP32 executor speed against ONNX Runtime: ms per batch of Executor::Run on
// torchvision ResNet-18 and MobileNetV2 (random weights, batch 1, 224x224)
// for each --threads value, next to onnxruntime-node on the same model and
// thread count (scripts/ort_time.js), and the ratio ours / ORT.
//
//   executor_bench [--threads=1,2] [--iters=10] [--model_dir=DIR]
//
// Models are exported into --model_dir with scripts/make_resnet18.py when
// missing there (default: a temporary directory). Prints a Markdown table;
// the last column is the number to watch (target: <= 2).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/graph/model_io.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

ABSL_FLAG(std::string, threads, "1,2", "Comma-separated thread counts.");
ABSL_FLAG(int, iters, 10, "Timed runs per (model, threads); median reported.");
ABSL_FLAG(int, warmup, 2, "Untimed runs first.");
ABSL_FLAG(std::string, model_dir, "",
          "Where resnet18.onnx / mobilenet_v2.onnx live or are exported to.");
ABSL_FLAG(bool, profile, false,
          "Also print ms per op type (single-threaded, from on_tensor times).");
ABSL_FLAG(std::string, ort_dir, QUANTD_ORT_NODE_PATH,
          "node_modules folder holding onnxruntime-node.");

namespace {

namespace fs = std::filesystem;
using quantd::executor::Executor;
using quantd::executor::Tensor;

bool EnsureModel(const std::string& path, bool mobilenet) {
  if (fs::exists(path)) return true;
  std::vector<std::string> argv = {
      "/usr/bin/python3",
      quantd::testing::SourcePath("scripts/make_resnet18.py"), path};
  if (mobilenet) argv.push_back("--mobilenet");
  quantd::testing::CommandResult r = quantd::testing::RunCommand(argv);
  if (r.exit_code != 0)
    std::fprintf(stderr, "export failed: %s\n", r.err.c_str());
  return r.exit_code == 0;
}

struct Times {
  double median = -1, min = -1;
};

// ms per Run; median -1 on error.
Times TimeOurs(const Executor& exec, const Tensor& x, int threads) {
  // The caller takes part in ParallelFor, so N threads = N - 1 workers.
  std::unique_ptr<quantd::ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<quantd::ThreadPool>(threads - 1);
  Executor::RunOptions ro;
  ro.pool = pool.get();
  const absl::flat_hash_map<std::string, Tensor> feeds = {
      {exec.input_names()[0], x}};
  std::vector<double> ms;
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_iters);
       ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = exec.Run(feeds, ro);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out.ok()) {
      std::fprintf(stderr, "run failed: %s\n", out.status().ToString().c_str());
      return {};
    }
    if (i >= absl::GetFlag(FLAGS_warmup)) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[0]};
}

// Time between consecutive on_tensor calls, charged to the producing op.
void Profile(const Executor& exec, const onnx::ModelProto& model,
             const Tensor& x) {
  absl::flat_hash_map<std::string, std::string> op_of;
  for (const auto& n : model.graph().node()) {
    std::string op = n.op_type();
    for (const auto& a : n.attribute()) {
      if (a.name() == "group" && a.i() > 1) op += " (grouped)";
      if (a.name() == "kernel_shape" && a.ints_size() == 2 && a.ints(0) == 1 &&
          a.ints(1) == 1) {
        op += " (1x1)";
      }
    }
    for (const auto& o : n.output()) op_of[o] = op;
  }
  std::map<std::string, double> ms;
  auto last = std::chrono::steady_clock::now();
  Executor::RunOptions ro;
  ro.on_tensor = [&](const std::string& name, const Tensor&) {
    const auto now = std::chrono::steady_clock::now();
    auto it = op_of.find(name);
    if (it != op_of.end()) {
      ms[it->second] +=
          std::chrono::duration<double, std::milli>(now - last).count();
    }
    last = std::chrono::steady_clock::now();
  };
  for (int i = 0; i < 3; ++i) {
    ms.clear();
    last = std::chrono::steady_clock::now();
    (void)exec.Run({{exec.input_names()[0], x}}, ro);
  }
  for (const auto& [op, t] : ms)
    std::printf("  %-20s %8.2f ms\n", op.c_str(), t);
}

Times TimeOrt(const std::string& model, int threads) {
  const std::string dir = absl::GetFlag(FLAGS_ort_dir);
  quantd::testing::CommandResult r = quantd::testing::RunCommand(
      {QUANTD_NODE_BIN, quantd::testing::SourcePath("scripts/ort_time.js"),
       "--model", model, "--threads", std::to_string(threads), "--iters",
       std::to_string(absl::GetFlag(FLAGS_iters)), "--warmup",
       std::to_string(absl::GetFlag(FLAGS_warmup)), "--ort_dir", dir},
      {"NODE_PATH=" + dir});
  auto field = [&](const std::string& name) {
    const std::string key = "\"" + name + "\":";
    const size_t at = r.out.find(key);
    double v = -1;
    if (at == std::string::npos ||
        !absl::SimpleAtod(r.out.substr(at + key.size(),
                                       r.out.find(',', at) - at - key.size()),
                          &v)) {
      return -1.0;
    }
    return v;
  };
  Times t{field("median_ms"), field("min_ms")};
  if (r.exit_code != 0 || t.median < 0) {
    std::fprintf(stderr, "ort_time failed: %s\n", r.err.c_str());
    return {};
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::unique_ptr<quantd::testing::TempDir> tmp;
  std::string dir = absl::GetFlag(FLAGS_model_dir);
  if (dir.empty()) {
    tmp = std::make_unique<quantd::testing::TempDir>();
    dir = tmp->path();
  }
  std::vector<int> threads;
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_threads), ',')) {
    int v;
    if (absl::SimpleAtoi(t, &v) && v > 0) threads.push_back(v);
  }
  // Medians, and minima (less disturbed by other load on a shared machine).
  std::printf(
      "| model | batch | threads | quantd ms (median/min) | ORT ms "
      "(median/min) | quantd/ORT (median/min) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const auto& [name, mobilenet] :
       std::vector<std::pair<std::string, bool>>{{"resnet18", false},
                                                 {"mobilenet_v2", true}}) {
    const std::string path = dir + "/" + name + ".onnx";
    if (!EnsureModel(path, mobilenet)) {
      ++failures;
      continue;
    }
    auto model =
        quantd::graph::ParseModel(quantd::testing::ReadFileOrDie(path));
    if (!model.ok()) {
      ++failures;
      continue;
    }
    auto exec = Executor::Create(*model);
    if (!exec.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   exec.status().ToString().c_str());
      ++failures;
      continue;
    }
    Tensor x(onnx::TensorProto::FLOAT, {1, 3, 224, 224});
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (int64_t i = 0; i < x.size(); ++i) x.mutable_data<float>()[i] = d(gen);
    if (absl::GetFlag(FLAGS_profile)) {
      std::printf("%s, 1 thread, by op type:\n", name.c_str());
      Profile(**exec, *model, x);
    }
    for (int t : threads) {
      const Times ours = TimeOurs(**exec, x, t);
      const Times ort = TimeOrt(path, t);
      std::printf("| %s | 1 | %d | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |\n",
                  name.c_str(), t, ours.median, ours.min, ort.median, ort.min,
                  ort.median > 0 ? ours.median / ort.median : -1.0,
                  ort.min > 0 ? ours.min / ort.min : -1.0);
      std::fflush(stdout);
      if (ours.median < 0 || ort.median < 0) ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}
