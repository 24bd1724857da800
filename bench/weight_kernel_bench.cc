// Weight quantization on one rows x cols fp32 tensor (4096 x 4096 by default,
// normal random values, held as TensorProto.raw_data like a model's
// initializer): the fused kernel (numerics::QuantizeAndMeasure) against the
// path it replaced in QuantizeWeight (ReadFloatTensor + QuantizeTensor[Blocked]
// + DequantizeTensor + MeasureError) and against memcpy of the same bytes,
// at each thread count. Medians of --repeats runs after one warm-up; GB/s
// counts the float bytes read. With --peer_file (lines "case threads GB/s",
// as bench/torch_quantize_per_channel.py prints them) a column compares with
// that peer. With --whole_pass, rows "pass_*" time the whole DYNAMIC_RANGE
// pass (one job's per-weight path) on a one-MatMul model holding the tensor.
// Prints a Markdown table (docs/benchmarks.md has the latest).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/base/thread_pool.h"
#include "core/graph/graph_edit.h"
#include "core/graph/tensor_util.h"
#include "core/numerics/quant_params.h"
#include "core/numerics/quantize_kernel.h"
#include "core/numerics/range_search.h"
#include "core/passes/dynamic_range_pass.h"

ABSL_FLAG(int64_t, rows, 4096, "Rows of the weight (axis 0).");
ABSL_FLAG(int64_t, cols, 4096, "Columns of the weight (axis 1).");
ABSL_FLAG(int, repeats, 9, "Timed runs per measurement (median reported).");
ABSL_FLAG(std::string, threads, "1,2", "Thread counts, the caller included.");
ABSL_FLAG(std::string, cases, "",
          "Comma-separated case names to run (empty: all).");
ABSL_FLAG(bool, old_path, true, "Also time the replaced path (one thread).");
ABSL_FLAG(bool, whole_pass, true,
          "Also time the whole DYNAMIC_RANGE pass on a one-MatMul model.");
ABSL_FLAG(bool, mse, false,
          "Also time weight_params.range MSE (QuantizeSearchedAndMeasure on "
          "the float values: 41 candidate roundings per value), 3 runs.");
ABSL_FLAG(std::string, peer_file, "",
          "Lines 'case threads GB/s' of a peer (torch) to compare with.");

namespace quantd::numerics {
namespace {

struct Case {
  std::string name;
  bool per_channel = false;
  int axis = -1;
  int64_t block_size = 0;
  QuantSpec spec;
};

QuantSpec Bits(int bits) {
  QuantSpec s;  // Symmetric, signed, narrow range: the weight default.
  s.bits = bits;
  return s;
}

std::vector<Case> Cases() {
  return {
      {"per_tensor_int8", false, -1, 0, Bits(8)},
      {"per_channel_int8_axis0", true, 0, 0, Bits(8)},
      {"per_channel_int8_axis1", true, 1, 0, Bits(8)},
      {"blocked_int4_b32_axis0", false, 0, 32, Bits(4)},
      {"blocked_int4_b32_axis1", false, 1, 32, Bits(4)},
      {"blocked_int4_b128_axis0", false, 0, 128, Bits(4)},
      {"blocked_int4_b128_axis1", false, 1, 128, Bits(4)},
  };
}

// "%.2f", or "-" for 0 (not measured).
std::string Fmt(double v) {
  if (v <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of `repeats` calls of fn after one warm-up.
double Time(int repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  return Median(s);
}

// What QuantizeWeight did before the fused kernel.
bool OldPath(const onnx::TensorProto& tensor, const std::vector<int64_t>& shape,
             const Case& c, QuantizedTensor* q, ErrorStats* err) {
  absl::StatusOr<std::vector<float>> values = graph::ReadFloatTensor(tensor);
  if (!values.ok()) return false;
  absl::StatusOr<QuantizedTensor> r =
      c.block_size > 0
          ? QuantizeTensorBlocked(*values, shape, c.axis, c.block_size, c.spec)
          : QuantizeTensor(*values, shape, c.per_channel, c.axis, c.spec);
  if (!r.ok()) return false;
  const std::vector<float> approx = DequantizeTensor(*r, shape);
  *err = MeasureError(*values, approx);
  *q = std::move(*r);
  return true;
}

// A model y = x W with W the benchmark's tensor (a MatMul weight: per
// channel along axis 1, blocks along axis 0).
onnx::ModelProto MatMulModel(const onnx::TensorProto& w) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("weight_kernel_bench");
  auto value = [](onnx::ValueInfoProto* v, const std::string& name,
                  int64_t cols) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(1);
    t->mutable_shape()->add_dim()->set_dim_value(cols);
  };
  value(g->add_input(), "x", w.dims(0));
  value(g->add_output(), "y", w.dims(1));
  *g->add_initializer() = w;
  *g->add_node() = graph::MakeNode("MatMul", "mm", {"x", "w"}, {"y"});
  return m;
}

// Median seconds of RunDynamicRangePass on copies of `model` (the copy is
// not timed).
double TimePass(const onnx::ModelProto& model,
                const passes::WeightPassOptions& options,
                const ParallelFor& parallel_for, int repeats) {
  passes::PassHooks hooks;
  hooks.parallel_for = parallel_for;
  std::vector<double> s;
  for (int i = 0; i <= repeats; ++i) {
    onnx::ModelProto m = model;
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<passes::PassStats> stats =
        passes::RunDynamicRangePass(options, hooks, &m);
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (!stats.ok() || stats->quantized_tensors != 1) {
      std::fprintf(stderr, "pass failed: %s\n",
                   stats.status().ToString().c_str());
      std::abort();
    }
    if (i > 0) s.push_back(dt);  // The first run warms up.
  }
  return Median(s);
}

std::map<std::pair<std::string, int>, double> ReadPeer(const std::string& p) {
  std::map<std::pair<std::string, int>, double> out;
  if (p.empty()) return out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int threads = 0;
    double gbps = 0;
    if (f.size() == 3 && absl::SimpleAtoi(f[1], &threads) &&
        absl::SimpleAtod(f[2], &gbps)) {
      out[{f[0], threads}] = gbps;
    }
  }
  return out;
}

int Main() {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int64_t cols = absl::GetFlag(FLAGS_cols);
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const std::vector<int64_t> shape = {rows, cols};
  const int64_t n = rows * cols;
  const double bytes = static_cast<double>(n) * sizeof(float);
  std::vector<float> values(n);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : values) v = normal(rng);
  const onnx::TensorProto tensor = graph::MakeFloatTensor("w", shape, values);
  std::vector<float>().swap(values);
  const FloatBytes raw{tensor.raw_data().data(), n};

  std::vector<int> thread_counts;
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    int k = 0;
    if (absl::SimpleAtoi(t, &k) && k > 0) thread_counts.push_back(k);
  }
  const std::vector<std::string> only =
      absl::StrSplit(absl::GetFlag(FLAGS_cases), ',', absl::SkipEmpty());
  const auto peer = ReadPeer(absl::GetFlag(FLAGS_peer_file));
  const bool with_peer = !peer.empty();

  std::printf(
      "%lld x %lld fp32 (%.0f MB), median of %d runs, GB/s of float "
      "bytes read\n\n",
      static_cast<long long>(rows), static_cast<long long>(cols), bytes / 1e6,
      repeats);
  std::printf(
      "| case | threads | memcpy GB/s | old GB/s | fused GB/s | fused "
      "/ memcpy | fused / old |%s\n|---|---|---|---|---|---|---|%s\n",
      with_peer ? " torch GB/s | fused / torch |" : "",
      with_peer ? "---|---|" : "");
  const bool mse = absl::GetFlag(FLAGS_mse);
  std::vector<float> floats;
  if (mse) {
    std::printf("(with --mse: two more columns, mse GB/s and fused / mse)\n");
    floats = *graph::ReadFloatTensor(tensor);
  }
  std::string copy(tensor.raw_data().size(), '\0');
  std::map<std::string, double> old_gbps;
  for (const int threads : thread_counts) {
    ThreadPool pool(threads - 1);
    ParallelFor parallel_for;
    if (threads > 1) {
      parallel_for = [&pool](int64_t k, const std::function<void(int64_t)>& f) {
        pool.ParallelFor(k, f);
      };
    }
    // The peer: the same bytes copied, split over the same threads.
    const double memcpy_s = Time(repeats, [&] {
      const int64_t total = static_cast<int64_t>(copy.size());
      pool.ParallelFor(threads, [&](int64_t t) {
        const int64_t b = total * t / threads, e = total * (t + 1) / threads;
        std::memcpy(copy.data() + b, tensor.raw_data().data() + b, e - b);
      });
    });
    for (const Case& c : Cases()) {
      if (!only.empty() &&
          std::find(only.begin(), only.end(), c.name) == only.end()) {
        continue;
      }
      QuantizedTensor old_q;
      ErrorStats old_err;
      if (absl::GetFlag(FLAGS_old_path) && threads == 1) {
        old_gbps[c.name] =
            bytes /
            Time(repeats,
                 [&] {
                   if (!OldPath(tensor, shape, c, &old_q, &old_err))
                     std::abort();
                 }) /
            1e9;
      }
      absl::StatusOr<QuantizedWithError> fused;
      const double fused_s = Time(repeats, [&] {
        fused = QuantizeAndMeasure(raw, shape, c.per_channel, c.axis,
                                   c.block_size, c.spec, parallel_for);
      });
      if (!fused.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                     fused.status().ToString().c_str());
        return 1;
      }
      if (!old_q.values.empty() && fused->q.values != old_q.values) {
        std::fprintf(stderr, "%s: fused values differ from the old path\n",
                     c.name.c_str());
        return 1;
      }
      const double fused_gbps = bytes / fused_s / 1e9;
      const double memcpy_gbps = bytes / memcpy_s / 1e9;
      // The old path has no threads of its own: its row is threads = 1.
      const auto old_it = old_gbps.find(c.name);
      const double old =
          threads == 1 && old_it != old_gbps.end() ? old_it->second : 0;
      std::printf("| %s | %d | %.2f | %s | %.2f | %.2f | %s |", c.name.c_str(),
                  threads, memcpy_gbps, Fmt(old).c_str(), fused_gbps,
                  fused_gbps / memcpy_gbps,
                  Fmt(old > 0 ? fused_gbps / old : 0).c_str());
      if (with_peer) {
        const auto p = peer.find({c.name, threads});
        if (p == peer.end()) {
          std::printf(" - | - |");
        } else {
          std::printf(" %.2f | %.2f |", p->second, fused_gbps / p->second);
        }
      }
      if (mse) {
        absl::StatusOr<QuantizedWithError> searched;
        const double mse_s = Time(std::min(repeats, 3), [&] {
          searched = QuantizeSearchedAndMeasure(floats, shape, c.per_channel,
                                                c.axis, c.block_size, c.spec,
                                                kMseRangeSearch, parallel_for);
        });
        if (!searched.ok()) return 1;
        const double mse_gbps = bytes / mse_s / 1e9;
        std::printf(" %.3f | %.1f |", mse_gbps, fused_gbps / mse_gbps);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    if (!absl::GetFlag(FLAGS_whole_pass)) continue;
    // The whole per-weight path as a job runs it: plan, quantize, pack,
    // write the initializers, drop the float one.
    const onnx::ModelProto model = MatMulModel(tensor);
    for (const int64_t block : {int64_t{0}, int64_t{32}, int64_t{128}}) {
      passes::WeightPassOptions options;
      options.min_num_elements = 0;
      options.precision = block > 0 ? tensorflow::quantization::PRECISION_W4A8
                                    : tensorflow::quantization::PRECISION_W8A8;
      options.weights.block_size = block;
      const std::string name =
          block > 0 ? "pass_w4a8_b" + std::to_string(block) + "_axis0"
                    : "pass_w8a8_per_channel_axis1";
      if (!only.empty() &&
          std::find(only.begin(), only.end(), name) == only.end()) {
        continue;
      }
      const double gbps =
          bytes / TimePass(model, options, parallel_for, repeats) / 1e9;
      const double memcpy_gbps = bytes / memcpy_s / 1e9;
      std::printf("| %s | %d | %.2f | - | %.2f | %.2f | - |%s\n", name.c_str(),
                  threads, memcpy_gbps, gbps, gbps / memcpy_gbps,
                  with_peer ? " - | - |" : "");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace quantd::numerics

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return quantd::numerics::Main();
}
