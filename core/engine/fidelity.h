// Fidelity of a quantized model: runs it and the float model it came from
// over the same batches in quantd's executor, and accumulates per tensor the
// sums that SQNR and top-1 agreement need (never the activations of more
// than one batch), for QuantizeSummary.fidelity.
#ifndef QUANTD_CORE_ENGINE_FIDELITY_H_
#define QUANTD_CORE_ENGINE_FIDELITY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/base/cancellation.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd {

// Calibration batches a Quantize call keeps for the fidelity comparison
// (they are only known after calibration, and the quantized model only after
// the pass, so they must be kept); batches past this many bytes are
// calibrated with but not compared, and the report says so.
inline constexpr int64_t kFidelityBatchBudgetBytes = int64_t{64} << 20;

// Running error sums of one tensor over batches.
struct ErrorSums {
  double signal = 0;  // sum(ref^2)
  double noise = 0;   // sum((ref - q)^2)
  double max_abs_error = 0;
  int64_t elements = 0;

  // Adds one batch; `ref` and `q` must have the same size. Double
  // accumulation: float sums lose the small noise next to a large signal.
  void Add(absl::Span<const float> ref, absl::Span<const float> q);
};

// True when a tensor of `shape` has a class axis: a last axis at least 2 wide
// (a row per position of the other axes) in a tensor of rank 2 or 3
// ([N, classes], [N, T, classes]), or of rank 4 and up when that axis is
// narrower than axis 1 (channels last, [N, H, W, classes]; not an NCHW map).
bool HasClassAxis(absl::Span<const int64_t> shape);

// Top-1 agreement counts of one output over batches.
struct Top1Counts {
  int64_t agree = 0;
  int64_t rows = 0;

  // `ref` and `q` hold `rows` rows of `classes` values each; a row agrees
  // when both argmaxes (first index on ties, NaN never the max) are equal.
  void Add(const float* ref, const float* q, int64_t rows, int64_t classes);
};

// Calls `visit(node, owner)` for every node whose outputs the fidelity
// report compares: the main graph's nodes (owner null) and, recursively, the
// nodes of If branches (owner: the innermost If), a branch's nodes before
// their If. Loop and Scan bodies are left out: their values are produced
// once per iteration, and one sum per name would mix the iterations.
void ForEachComparedNode(
    const onnx::GraphProto& graph,
    const std::function<void(const onnx::NodeProto& node,
                             const onnx::NodeProto* owner)>& visit);

class FidelityEvaluator {
 public:
  // Builds the float model's executor and notes its graph order, before the
  // pass rewrites the model in place. Errors are the executor's (the float
  // model ran for calibration, so they are unexpected).
  // `max_tensor_elements` bounds every tensor either model's runs make
  // (ExecutorRunOptions; 0: no bound).
  static absl::StatusOr<std::unique_ptr<FidelityEvaluator>> Create(
      const onnx::ModelProto& float_model, int64_t max_tensor_elements = 0);

  // Builds the quantized model's executor: UNIMPLEMENTED naming the op,
  // attribute or type the executor cannot run (the caller reports fidelity
  // as skipped for that reason).
  absl::Status SetQuantizedModel(const onnx::ModelProto& quantized_model);

  // Whether `batch` feeds graph inputs (a model run) rather than holding
  // observed activations, which cannot be compared.
  bool FeedsGraphInputs(const quantd::v1::TensorBatch& batch) const;

  // Runs both models on one batch of graph inputs (a tensor without a name
  // feeds the only input) and adds the errors. Needs SetQuantizedModel.
  // CANCELLED when cancelled (checked between nodes); INVALID_ARGUMENT for a
  // batch that does not fit the model; the executors' errors otherwise.
  absl::Status AddBatch(const quantd::v1::TensorBatch& batch, ThreadPool* pool,
                        const CancellationToken& cancel);

  int64_t batch_count() const { return batch_count_; }

  // evaluated = true with the numbers so far (the caller fills
  // batches_received and note).
  quantd::v1::FidelityReport Report() const;

 private:
  struct Layer {
    std::string tensor;
    std::string node;
    std::string op;
  };
  struct Output {
    ErrorSums sums;
    Top1Counts top1;
    bool has_top1 = true;  // Until a batch's shape says otherwise.
    bool compared = false;
  };

  FidelityEvaluator() = default;

  std::unique_ptr<executor::Executor> float_;
  std::unique_ptr<executor::Executor> quantized_;
  // Outputs of the float model's compared nodes (ForEachComparedNode), in
  // that order; graph inputs excluded.
  std::vector<Layer> layers_;
  absl::flat_hash_set<std::string> layer_names_;
  absl::flat_hash_map<std::string, ErrorSums> layer_sums_;
  std::vector<std::string> output_names_;  // Of the float model.
  absl::flat_hash_map<std::string, Output> outputs_;
  int64_t batch_count_ = 0;
  int64_t max_tensor_elements_ = 0;
};

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_FIDELITY_H_
