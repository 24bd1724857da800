// The FP32 graph executor: runs an ONNX model (default domain, opsets 7-21,
// no subgraphs; float ops plus the quantized ones of QDQ, integer and QLinear
// models) on Eigen, for calibration (activation ranges through
// RunOptions::on_tensor) and fidelity reports.
#ifndef QUANTD_CORE_EXECUTOR_EXECUTOR_H_
#define QUANTD_CORE_EXECUTOR_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/engine/cancellation.h"
#include "core/engine/thread_pool.h"
#include "core/executor/kernel.h"
#include "core/executor/tensor.h"
#include "onnx/onnx_pb.h"

namespace quantd::executor {

// Nothing to configure yet; a struct so options can be added compatibly.
struct ExecutorOptions {};

struct ExecutorRunOptions {
  // Intra-op parallelism (large GEMMs, convolutions, elementwise ops);
  // null runs on the calling thread only.
  ThreadPool* pool = nullptr;
  // Checked between nodes; a cancelled run returns CANCELLED.
  const CancellationToken* cancel = nullptr;
  // Called once for every value as it is produced (graph inputs first,
  // then each node's outputs), before the executor frees it. Called on
  // the thread that runs the batch.
  std::function<void(const std::string& name, const Tensor&)> on_tensor;
  // Values to return after the graph outputs (kept alive to the end).
  std::vector<std::string> extra_outputs;
};

class Executor {
 public:
  using Options = ExecutorOptions;
  using RunOptions = ExecutorRunOptions;

  // Validates the whole model before any run: UNIMPLEMENTED names every
  // unsupported op (type and node), attribute value, element type, opset or
  // subgraph; INVALID_ARGUMENT for malformed graphs (undefined inputs,
  // nodes out of order, bad initializers).
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const onnx::ModelProto& model, Options options = {});

  // Thread-safe: batches may run concurrently. Returns the graph outputs in
  // graph order, then RunOptions::extra_outputs. INVALID_ARGUMENT for
  // missing/unknown feeds or types/shapes that do not match the graph.
  absl::StatusOr<std::vector<Tensor>> Run(
      const absl::flat_hash_map<std::string, Tensor>& feeds,
      const RunOptions& options = {}) const;

  // Every op type Create accepts (default domain), sorted.
  static std::vector<std::string> SupportedOps();

  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<std::string>& output_names() const { return output_names_; }

 private:
  struct Node {
    std::string name;
    std::string op;
    std::unique_ptr<Kernel> kernel;
    std::vector<int> inputs;   // Value ids; -1 for an omitted input.
    std::vector<int> outputs;  // Value ids; -1 for an omitted output.
    std::vector<int> release;  // Values whose last reader is this node.
  };
  struct Input {
    int value = -1;
    int32_t type = 0;
    std::vector<int64_t> dims;  // -1 for a symbolic dim.
    bool has_shape = false;
    bool has_default = false;  // Also an initializer (IR < 4 style).
  };

  Executor() = default;
  absl::Status Build(const onnx::ModelProto& model);
  int ValueId(const std::string& name);

  absl::flat_hash_map<std::string, int> value_ids_;
  std::vector<std::string> value_names_;
  // Initializers and Constant-free values fixed at Create (shared, read
  // only); empty for values produced at run time.
  std::vector<Tensor> constants_;
  std::vector<Input> inputs_;
  std::vector<std::string> input_names_;
  std::vector<std::string> output_names_;
  std::vector<int> output_values_;
  std::vector<Node> nodes_;
  // Graph inputs not read by any node (and not outputs): freed after
  // on_tensor sees them.
  std::vector<int> unread_inputs_;
};

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_EXECUTOR_H_
