// QLinearConv against the float Conv of the same ResNet-18 layer, and
// QuantizeLinear per element, in quantd's executor: prints one table row per
// measurement with the ratio to the float peer. Run by scripts/bench.sh.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "tests/core/executor/node_tester.h"

ABSL_FLAG(int, runs, 10, "Timed runs per measurement (after one warm-up).");
ABSL_FLAG(int, threads, 2, "Threads, the caller included.");

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

Tensor Bytes(int32_t type, std::vector<int64_t> shape, std::mt19937* rng,
             int lo, int hi) {
  Tensor t(static_cast<DataType>(type), std::move(shape));
  std::uniform_int_distribution<int> d(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) {
    if (type == TP::INT8) {
      t.mutable_data<int8_t>()[i] = static_cast<int8_t>(d(*rng));
    } else {
      t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(d(*rng));
    }
  }
  return t;
}

Tensor Normal(std::vector<int64_t> shape, std::mt19937* rng) {
  Tensor t(TP::FLOAT, std::move(shape));
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.size(); ++i) t.mutable_data<float>()[i] = d(*rng);
  return t;
}

OneNode Conv3x3(const std::string& op) {
  OneNode n{op, 13};
  n.IntList("kernel_shape", {3, 3})
      .IntList("strides", {1, 1})
      .IntList("pads", {1, 1, 1, 1});
  return n;
}

// Mean of `runs` runs after one warm-up, in milliseconds.
double MsPerRun(const OneNode& node, ThreadPool* pool, int runs) {
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(node.Model());
  if (!e.ok()) {
    std::cerr << e.status() << "\n";
    return -1;
  }
  absl::flat_hash_map<std::string, Tensor> feeds = {{"in0", node.inputs[0]}};
  Executor::RunOptions opts;
  opts.pool = pool;
  if (!(*e)->Run(feeds, opts).ok()) return -1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) (void)(*e)->Run(feeds, opts);
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
             .count() /
         runs;
}

int Main() {
  const int runs = absl::GetFlag(FLAGS_runs);
  ThreadPool pool(std::max(absl::GetFlag(FLAGS_threads) - 1, 0));
  std::mt19937 rng(12);
  const Tensor x = Normal({1, 128, 28, 28}, &rng);

  OneNode q = Conv3x3("QLinearConv");
  q.inputs = {Bytes(TP::UINT8, {1, 128, 28, 28}, &rng, 0, 255),
              Tensor::Scalar(0.02f),
              Bytes(TP::UINT8, {}, &rng, 0, 0),
              Bytes(TP::INT8, {128, 128, 3, 3}, &rng, -127, 127),
              Tensor::Scalar(0.001f),
              Bytes(TP::INT8, {}, &rng, 0, 0),
              Tensor::Scalar(0.5f),
              Bytes(TP::UINT8, {}, &rng, 0, 0)};
  q.constant = {false, true, true, true, true, true, true, true};
  OneNode f = Conv3x3("Conv");
  f.inputs = {x, Normal({128, 128, 3, 3}, &rng)};
  f.constant = {false, true};
  OneNode ql("QuantizeLinear", 13);
  ql.inputs = {x, Tensor::Scalar(0.02f), Bytes(TP::UINT8, {}, &rng, 128, 128)};
  ql.constant = {false, true, true};
  OneNode relu("Relu", 13);  // A float pass over the same bytes: the peer.
  relu.inputs = {x};

  const double qms = MsPerRun(q, &pool, runs);
  const double fms = MsPerRun(f, &pool, runs);
  const double qlms = MsPerRun(ql, &pool, runs);
  const double rms = MsPerRun(relu, &pool, runs);
  std::cout << "| measurement | quantd ms | peer | peer ms | ratio |\n"
            << "|---|---|---|---|---|\n"
            << "| QLinearConv 128x128x3x3 on 28x28, full-range operands | "
            << qms << " | float Conv, same shape | " << fms << " | "
            << qms / fms << " |\n"
            << "| QuantizeLinear of " << x.size() << " floats | " << qlms
            << " | Relu of the same floats | " << rms << " | " << qlms / rms
            << " |\n";
  return qms > 0 && fms > 0 ? 0 : 1;
}

}  // namespace
}  // namespace quantd::executor

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return quantd::executor::Main();
}
