// The FP32 graph executor: runs an ONNX model (default domain, opsets 7-21;
// float ops plus the quantized ones of QDQ, integer and QLinear models) on
// Eigen, for calibration (activation ranges through RunOptions::on_tensor)
// and fidelity reports. Control flow runs too: If, Loop and Scan (Scan-8
// without sequence_lens) with tensor values only (sequence / optional values
// are refused). Their bodies are child Executors built at Create; a body
// reads outer-scope values by name (its free names become implicit inputs of
// the owning node), and the run options (on_tensor, cancel, pool) reach into
// every body.
#ifndef QUANTD_CORE_EXECUTOR_EXECUTOR_H_
#define QUANTD_CORE_EXECUTOR_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/base/cancellation.h"
#include "core/base/thread_pool.h"
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
  // the thread that runs the batch. Values of subgraph bodies are reported
  // too, under their own names, each time they are produced (once per
  // iteration of a Loop or Scan; body inputs included).
  std::function<void(const std::string& name, const Tensor&)> on_tensor;
  // Values to return after the graph outputs (kept alive to the end). Names
  // of the main graph only; bodies ignore it.
  std::vector<std::string> extra_outputs;
  // Most elements of any tensor the run makes (0: no limit): each kernel
  // output and scratch tensor before it is allocated (ScopedTensorLimit),
  // and a Loop or Scan output as its iterations stack slices into it (a
  // Loop whose condition never turns false would grow it until memory ran
  // out). Past it the run fails RESOURCE_EXHAUSTED naming the node.
  int64_t max_tensor_elements = 0;
};

class Executor {
 public:
  using Options = ExecutorOptions;
  using RunOptions = ExecutorRunOptions;

  // Validates the whole model (subgraph bodies included) before any run:
  // UNIMPLEMENTED names every unsupported op (type and node, and for a body
  // the owning node and its attribute), attribute value, element type, opset
  // or non-tensor value; INVALID_ARGUMENT for malformed graphs (undefined
  // inputs, nodes out of order, bad initializers, bodies whose signature does
  // not fit their node).
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const onnx::ModelProto& model, Options options = {});

  // For control-flow kernels: builds a subgraph body at Create. `scope` is
  // the owning node's (NodeInfo::scope()); the body takes the entries it
  // reads as constants or implicit inputs. Errors as Create's, unprefixed.
  static absl::StatusOr<std::unique_ptr<Executor>> CreateBody(
      const onnx::GraphProto& body, int64_t opset,
      const std::vector<ScopeValue>& scope);

  // Runs a body: `inputs` are its graph inputs in order (checked against
  // their declared types and ranks), `implicit` the owning node's implicit
  // inputs (the non-constant scope entries, in order). Ignores
  // options.extra_outputs. Thread-safe like Run.
  absl::StatusOr<std::vector<Tensor>> RunBody(
      absl::Span<const Tensor* const> inputs,
      absl::Span<const Tensor* const> implicit,
      const RunOptions& options) const;

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
  // Element types known at Create (UNDEFINED when not), by position.
  const std::vector<int32_t>& input_types() const { return input_types_; }
  const std::vector<int32_t>& output_types() const { return output_types_; }

 private:
  struct Node {
    std::string name;
    std::string op;
    std::unique_ptr<Kernel> kernel;
    // Value ids; -1 for an omitted input. The node's own inputs, then its
    // implicit ones (outer values its bodies read; see ScopeValue).
    std::vector<int> inputs;
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

  // What Build knows of each value while it walks the graph (executor.cc).
  struct BuildState;

  Executor() = default;
  // `scope` is null for a main graph, else the owning node's scope.
  absl::Status Build(const onnx::GraphProto& g, int64_t opset,
                     const std::vector<ScopeValue>* scope);
  // The steps of Build, in order.
  void BindScope(const onnx::GraphProto& g,
                 const std::vector<ScopeValue>& scope, BuildState* state);
  absl::Status BindInitializers(const onnx::GraphProto& g, BuildState* state);
  absl::Status BindInputs(const onnx::GraphProto& g, bool is_body,
                          BuildState* state);
  absl::Status CreateKernels(const onnx::GraphProto& g, int64_t opset,
                             BuildState* state);
  absl::Status RefuseNonTensorInputs(const BuildState& state) const;
  absl::Status BindOutputs(const onnx::GraphProto& g, const BuildState& state);
  void PlanReleases();
  // CreateKernels, one node at a time. `declared`: the element types the
  // graph declares for its values.
  absl::StatusOr<Node> CreateNode(
      const onnx::NodeProto& n, const std::string& label, int64_t opset,
      const absl::flat_hash_map<std::string, int32_t>& declared,
      BuildState* state);
  absl::Status BindNodeInputs(const onnx::NodeProto& n,
                              const std::string& label, const BuildState& state,
                              Node* node, std::vector<int32_t>* types) const;
  // The constant value of each of `ids` (nullptr when not a constant).
  std::vector<const Tensor*> ConstantInputs(const std::vector<int>& ids) const;
  // The outer values the bodies of `n` read; appends to `implicit` the ids of
  // those that arrive at run time.
  absl::StatusOr<std::vector<ScopeValue>> BodyScope(
      const onnx::NodeProto& n, const std::string& label,
      const BuildState& state, std::vector<int>* implicit) const;
  absl::Status BindNodeOutputs(const onnx::NodeProto& n,
                               const std::string& label,
                               const std::vector<int32_t>& out_types,
                               BuildState* state, Node* node);
  // True when value `id` is a graph input, which a feed may override even
  // when it has a default.
  bool IsInput(int id) const;
  int ValueId(const std::string& name);
  // INVALID_ARGUMENT unless t fits graph input i's declared type and shape.
  // `t` against input i's declared element type and shape (with
  // `check_dims` false, its rank only).
  absl::Status CheckInput(size_t i, const Tensor& t,
                          bool check_dims = true) const;
  // Runs the nodes on `values` (inputs filled in); returns the outputs,
  // then the values `extra`.
  absl::StatusOr<std::vector<Tensor>> Execute(
      std::vector<Tensor> values, const RunOptions& options,
      const std::vector<int>& extra) const;

  absl::flat_hash_map<std::string, int> value_ids_;
  std::vector<std::string> value_names_;
  // Initializers and Constant-free values fixed at Create (shared, read
  // only); empty for values produced at run time.
  std::vector<Tensor> constants_;
  std::vector<Input> inputs_;
  std::vector<std::string> input_names_;
  std::vector<std::string> output_names_;
  std::vector<int32_t> input_types_;
  std::vector<int32_t> output_types_;
  std::vector<int> output_values_;
  // Bodies only: (index among the owner's implicit inputs, value id) of each
  // outer value this body reads at run time.
  std::vector<std::pair<int, int>> implicit_;
  std::vector<Node> nodes_;
  // Graph (and implicit) inputs not read by any node (and not outputs):
  // freed after on_tensor sees them.
  std::vector<int> unread_inputs_;
};

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_EXECUTOR_H_
