// FP32 executor speed against ONNX Runtime: ms per batch of Executor::Run on
// torchvision ResNet-18, MobileNetV2 and, when named in --models, ViT-B/16
// (random weights) for each input shape
// (--shapes, batch x size: batch 1 at 224x224 and batch 16 at 64x64, the
// shape calibration sees, where the last stages have only 2x2..4x4 outputs)
// and each --threads value, next to onnxruntime-node on the same model, batch
// and thread count (scripts/ort_time.js), and the ratio ours / ORT.
//
//   executor_bench [--threads=1,2] [--shapes=1x224,16x64] [--iters=10]
//                  [--model_dir=DIR] [--profile] [--observe=min_max]
//
// --observe adds a column: one calibration batch in process
// (CalibrationSession::AddBatch with that observer: the batch copied in, the
// model run, every float tensor observed), what `quantctl calibrate` pays
// per batch before gRPC, and its ratio to ONNX Runtime.
//
// Models are exported into --model_dir with scripts/make_resnet18.py when
// missing there (default: a temporary directory): NAME.onnx at 224x224,
// NAME_S.onnx at other sizes S (ONNX Runtime wants the declared input size).
// Prints a Markdown table; the last column is the number to watch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/base/thread_pool.h"
#include "core/engine/calibration_session.h"
#include "core/engine/limits.h"
#include "core/executor/executor.h"
#include "core/graph/model_io.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

ABSL_FLAG(std::string, threads, "1,2", "Comma-separated thread counts.");
ABSL_FLAG(std::string, shapes, "1x224,16x64",
          "Comma-separated input shapes, BATCHxSIZE (SIZE = height = width).");
ABSL_FLAG(std::string, models, "resnet18,mobilenet_v2",
          "Comma-separated subset of resnet18, mobilenet_v2, vit_b_16 "
          "(ViT-B/16: BERT-base's encoder shapes on (SIZE/16)^2 + 1 tokens).");
ABSL_FLAG(int, iters, 10, "Timed runs per (model, threads); median reported.");
ABSL_FLAG(int, warmup, 2, "Untimed runs first.");
ABSL_FLAG(std::string, model_dir, "",
          "Where resnet18.onnx / mobilenet_v2.onnx live or are exported to.");
ABSL_FLAG(bool, profile, false,
          "Also print ms per op type and the slowest nodes (single-threaded, "
          "from on_tensor times).");
ABSL_FLAG(std::string, observe, "",
          "Also time CalibrationSession::AddBatch with this observer "
          "(min_max, percentile, mse, entropy, ...).");
ABSL_FLAG(std::string, ort_dir, QUANTD_ORT_NODE_PATH,
          "node_modules folder holding onnxruntime-node.");

namespace {

namespace fs = std::filesystem;
using quantd::executor::Executor;
using quantd::executor::Tensor;

// `name`: resnet18, mobilenet_v2 or vit_b_16.
bool EnsureModel(const std::string& path, const std::string& name, int size) {
  if (fs::exists(path)) return true;
  std::vector<std::string> argv = {
      "/usr/bin/python3",
      quantd::testing::SourcePath("scripts/make_resnet18.py"), path, "--size",
      std::to_string(size)};
  if (name == "mobilenet_v2") argv.push_back("--mobilenet");
  if (name == "vit_b_16") argv.push_back("--vit");
  quantd::testing::CommandResult r = quantd::testing::RunCommand(argv);
  if (r.exit_code != 0)
    std::fprintf(stderr, "export failed: %s\n", r.err.c_str());
  return r.exit_code == 0;
}

struct Times {
  double median = -1, min = -1;
};

// ms per call of `call` over --iters calls after --warmup; median -1 on
// the first error, which is printed after `what`.
Times TimeCalls(const char* what, const std::function<absl::Status()>& call) {
  std::vector<double> ms;
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_iters);
       ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = call();
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "%s failed: %s\n", what, s.ToString().c_str());
      return {};
    }
    if (i >= absl::GetFlag(FLAGS_warmup)) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[0]};
}

// ms per Run; median -1 on error.
Times TimeOurs(const Executor& exec, const Tensor& x, int threads) {
  // The caller takes part in ParallelFor, so N threads = N - 1 workers.
  std::unique_ptr<quantd::ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<quantd::ThreadPool>(threads - 1);
  Executor::RunOptions ro;
  ro.pool = pool.get();
  const absl::flat_hash_map<std::string, Tensor> feeds = {
      {exec.input_names()[0], x}};
  return TimeCalls("run", [&] { return exec.Run(feeds, ro).status(); });
}

// ms per CalibrationSession::AddBatch of `x` with observer `method`, on the
// same threads as TimeOurs (the caller a member of the pool, as an engine
// job is).
Times TimeCalibration(const onnx::ModelProto& model, const std::string& input,
                      const Tensor& x, int threads, const std::string& method) {
  std::unique_ptr<quantd::ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<quantd::ThreadPool>(threads - 1);
  quantd::calibration::ObserverConfig config;
  config.method = method;
  auto session =
      quantd::CalibrationSession::Create(model, config, quantd::JobLimits{});
  if (!session.ok()) {
    std::fprintf(stderr, "calibration session: %s\n",
                 session.status().ToString().c_str());
    return {};
  }
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* named = batch.add_tensors();
  named->set_name(input);
  named->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : x.shape()) named->add_shape(d);
  named->set_data(x.data<float>(), x.size() * sizeof(float));
  quantd::CancellationToken cancel;
  return TimeCalls("calibration batch", [&] {
    return (*session)->AddBatch(batch, pool.get(), cancel);
  });
}

// Time between consecutive on_tensor calls, charged to the producing op.
void Profile(const Executor& exec, const onnx::ModelProto& model,
             const Tensor& x) {
  absl::flat_hash_map<std::string, std::string> op_of;
  absl::flat_hash_map<std::string, std::string> node_of;
  for (const auto& n : model.graph().node()) {
    for (const auto& o : n.output()) node_of[o] = n.name() + " " + n.op_type();
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
  // Per node: ms and the output shape (where the small outputs are).
  std::map<std::string, std::pair<double, std::string>> node_ms;
  auto last = std::chrono::steady_clock::now();
  Executor::RunOptions ro;
  ro.on_tensor = [&](const std::string& name, const Tensor& t) {
    const auto now = std::chrono::steady_clock::now();
    const double dt =
        std::chrono::duration<double, std::milli>(now - last).count();
    auto it = op_of.find(name);
    if (it != op_of.end()) ms[it->second] += dt;
    auto nt = node_of.find(name);
    if (nt != node_of.end()) {
      std::string shape;
      for (int64_t d : t.shape())
        absl::StrAppend(&shape, shape.empty() ? "" : "x", d);
      node_ms[nt->second] = {dt, shape};
    }
    last = std::chrono::steady_clock::now();
  };
  for (int i = 0; i < 3; ++i) {
    ms.clear();
    last = std::chrono::steady_clock::now();
    (void)exec.Run({{exec.input_names()[0], x}}, ro);
  }
  double total = 0;
  for (const auto& [op, t] : ms) {
    std::printf("  %-20s %8.2f ms\n", op.c_str(), t);
    total += t;
  }
  std::printf("  %-20s %8.2f ms\n  slowest nodes:\n", "total", total);
  std::vector<std::pair<double, std::string>> by_time;
  for (const auto& [node, v] : node_ms) {
    by_time.push_back({v.first, node + " -> " + v.second});
  }
  std::sort(by_time.rbegin(), by_time.rend());
  for (size_t i = 0; i < by_time.size() && i < 12; ++i) {
    std::printf("    %8.2f ms  %s\n", by_time[i].first,
                by_time[i].second.c_str());
  }
}

Times TimeOrt(const std::string& model, int batch, int threads) {
  const std::string dir = absl::GetFlag(FLAGS_ort_dir);
  quantd::testing::CommandResult r = quantd::testing::RunCommand(
      {QUANTD_NODE_BIN, quantd::testing::SourcePath("scripts/ort_time.js"),
       "--model", model, "--batch", std::to_string(batch), "--threads",
       std::to_string(threads), "--iters",
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
  std::vector<std::pair<int, int>> shapes;  // (batch, size)
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',')) {
    std::vector<absl::string_view> bs = absl::StrSplit(t, 'x');
    int b, hw;
    if (bs.size() != 2 || !absl::SimpleAtoi(bs[0], &b) ||
        !absl::SimpleAtoi(bs[1], &hw) || b <= 0 || hw <= 0) {
      std::fprintf(stderr, "bad --shapes entry '%s'\n", std::string(t).c_str());
      return 2;
    }
    shapes.push_back({b, hw});
  }
  // Medians, and minima (less disturbed by other load on a shared machine).
  const std::string observe = absl::GetFlag(FLAGS_observe);
  std::printf(
      "| model | batch | size | threads | quantd ms (median/min) | ORT ms "
      "(median/min) | quantd/ORT (median/min) |%s\n",
      observe.empty()
          ? ""
          : absl::StrCat(" calibration batch, ", observe,
                         " ms (median/min) | calibration/ORT (median/min) |")
                .c_str());
  std::printf("|---|---|---|---|---|---|---|%s\n",
              observe.empty() ? "" : "---|---|");
  int failures = 0;
  for (const auto& [batch, size] : shapes) {
    for (const std::string name : {"resnet18", "mobilenet_v2", "vit_b_16"}) {
      if (!absl::StrContains(absl::GetFlag(FLAGS_models), name)) continue;
      const std::string path = absl::StrCat(
          dir, "/", name, size == 224 ? "" : absl::StrCat("_", size), ".onnx");
      if (!EnsureModel(path, name, size)) {
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
      Tensor x(onnx::TensorProto::FLOAT, {batch, 3, size, size});
      std::mt19937 gen(1);
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (int64_t i = 0; i < x.size(); ++i) {
        x.mutable_data<float>()[i] = d(gen);
      }
      if (absl::GetFlag(FLAGS_profile)) {
        std::printf("%s, batch %d, %dx%d, 1 thread, by op type:\n",
                    name.c_str(), batch, size, size);
        Profile(**exec, *model, x);
      }
      for (int t : threads) {
        const Times ours = TimeOurs(**exec, x, t);
        const Times ort = TimeOrt(path, batch, t);
        std::string calibration;
        if (!observe.empty()) {
          const Times c =
              TimeCalibration(*model, (*exec)->input_names()[0], x, t, observe);
          if (c.median < 0) ++failures;
          calibration =
              absl::StrFormat(" %.2f / %.2f | %.2f / %.2f |", c.median, c.min,
                              ort.median > 0 ? c.median / ort.median : -1.0,
                              ort.min > 0 ? c.min / ort.min : -1.0);
        }
        std::printf(
            "| %s | %d | %dx%d | %d | %.2f / %.2f | %.2f / %.2f | %.2f / "
            "%.2f |%s\n",
            name.c_str(), batch, size, size, t, ours.median, ours.min,
            ort.median, ort.min,
            ort.median > 0 ? ours.median / ort.median : -1.0,
            ort.min > 0 ? ours.min / ort.min : -1.0, calibration.c_str());
        std::fflush(stdout);
        if (ours.median < 0 || ort.median < 0) ++failures;
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
