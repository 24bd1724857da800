// The calibration statistics GPTQ and bias correction need: for each Conv /
// Gemm / MatMul with a constant weight, the second moment H = X^T X and the
// sum of the rows its weight multiplies (MatMul and Gemm: the rows of input A;
// Conv: the im2col patches of each group). Fed with the values a calibration
// run produces, streamed: memory is fixed per layer (groups x K x K floats) and
// charged to a budget before anything is allocated.
#ifndef QUANTD_CORE_PASSES_INPUT_MOMENTS_H_
#define QUANTD_CORE_PASSES_INPUT_MOMENTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/calibration/memory_budget.h"
#include "core/executor/tensor.h"
#include "core/executor/window.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

// H of one layer input: `groups` matrices of k x k, row-major, one after
// the other (one group for MatMul and Gemm).
struct LayerMoments {
  int64_t k = 0;
  int64_t groups = 1;
  std::vector<float> h;  // Only the upper triangle until Finish().
  // groups x k: the sum of the rows (their mean times `rows`), for bias
  // correction.
  std::vector<double> sum;
  int64_t rows = 0;  // Input rows (per group) accumulated.
  // With folds: the H of the rows of even-numbered samples alone (layout as
  // h; its rows counted in fold_rows), so that a weight fitted on one half
  // of the samples can be judged on the other (H - h_fold). Samples are the
  // first axis of each value seen (an image of a Conv, a batch row of a
  // MatMul input), numbered in the order they arrive.
  std::vector<float> h_fold;
  int64_t fold_rows = 0;
  int64_t samples = 0;
  bool merged = false;  // h holds both folds (after Finish).
  // Why this layer gets no statistics (it did not fit the budget); empty
  // when it is tracked.
  std::string skipped;
};

class InputMoments {
 public:
  // Tracks every default-domain Conv, Gemm and MatMul of `graph` and of its
  // subgraph bodies (whose values the executor reports under their own
  // names, each time a body runs) whose weight (input 1) is a float initializer
  // or Constant with at least `min_elements` values (MatMul: 2-D; Conv: 1-D or
  // 2-D kernels). Layers reading the same input the same way share one H.
  // RESOURCE_EXHAUSTED, naming the largest layer, when their H would go
  // over `budget` (charged here, up front, for the object's lifetime).
  // With `folds`, every layer also keeps h_fold (twice the memory).
  static absl::StatusOr<std::unique_ptr<InputMoments>> Create(
      const onnx::GraphProto& graph, int64_t min_elements,
      calibration::MemoryBudget* budget, bool folds = false);
  ~InputMoments();

  // Accumulates `t` into the H of every tracked layer that reads the value
  // `name`; nothing for other names. INVALID_ARGUMENT naming the layer when
  // the value cannot be that layer's input (type, rank, K, channels).
  absl::Status Observe(const std::string& name, const executor::Tensor& t);

  // Completes every H (the accumulation writes only its upper triangle).
  // Call after the last Observe and before Find.
  void Finish();

  // The statistics of the layer whose first output is `node_output`; null
  // when it is not tracked, saw no input, or Finish has not run since the
  // last Observe. Thread-safe after Finish.
  const LayerMoments* Find(const std::string& node_output) const;

  // The statistics of inputs whose channel c was divided by s[c] (a
  // function-preserving rescale, channel_scaling.h) for the layers whose
  // first outputs are `node_outputs`: H_ab / (s_a s_b) (h_fold alike) and
  // sum_a / s_a, each shared H once. For Conv, s is per input channel (all
  // groups). After Finish.
  void ScaleInputChannels(const std::vector<std::string>& node_outputs,
                          const std::vector<double>& s);

  // Why Find(node_output) has nothing: not a layer GPTQ takes, over the
  // budget, or never fed.
  std::string WhyNone(const std::string& node_output) const;

  // Distinct H matrices kept (layers reading one input one way share one),
  // and those left out for the budget.
  int64_t matrices() const { return tracked_; }
  int64_t over_budget() const {
    return static_cast<int64_t>(layers_.size()) - tracked_;
  }
  int64_t bytes() const { return bytes_; }

 private:
  // How one input is turned into rows (for one or more layers).
  struct Layer {
    enum class Kind { kRows, kRowsTransposed, kConv } kind = Kind::kRows;
    std::string input;
    std::string label;  // "Conv 'name'" for messages.
    // Conv: the node's window, weight dims and group.
    executor::ConvWindow window;
    std::vector<int64_t> weight_dims;
    int64_t group = 1;
    std::shared_ptr<LayerMoments> moments;
  };

  InputMoments(calibration::MemoryBudget* budget) : budget_(budget) {}
  absl::Status Accumulate(const Layer& layer, const executor::Tensor& t);
  // Takes h_fold back out of a merged h, so that more rows can go in.
  static void Unmerge(LayerMoments* m);
  absl::Status AccumulateConv(const Layer& layer, const executor::Tensor& t);

  calibration::MemoryBudget* budget_;
  int64_t bytes_ = 0;
  int64_t tracked_ = 0;
  bool folds_ = false;
  bool finished_ = false;
  std::vector<Layer> layers_;
  // Input value name -> indices into layers_.
  absl::flat_hash_map<std::string, std::vector<int>> by_input_;
  // A layer's first output name -> its statistics.
  absl::flat_hash_map<std::string, std::shared_ptr<LayerMoments>> by_output_;
};

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_INPUT_MOMENTS_H_
