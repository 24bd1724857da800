// Function-preserving per-channel rescaling between layers, the mechanism
// behind SmoothQuant (Xiao et al., 2023) and cross-layer equalization
// (Nagel et al., 2019): channel c of a value X is divided by s_c > 0 and
// every layer that reads X multiplies its weight's input channel c by s_c,
// so the float model computes the same function while the ranges of X and
// of the weights change.
//
// A site is a value read along its channels by Conv / Gemm / MatMul layers
// with constant float weights. 1/s goes into an absorber upstream when X
// reaches its readers only (a Conv / Gemm / MatMul's output channels, a
// LayerNormalization's scale and bias, or a Mul by a per-channel constant),
// through ops that commute with a positive per-channel factor (Relu,
// LeakyRelu, PRelu, pooling, Identity, Dropout, Add / Sub of a per-channel
// constant, whose constant is divided too); otherwise an inserted Mul
// applies it.
#ifndef QUANTD_CORE_PASSES_CHANNEL_SCALING_H_
#define QUANTD_CORE_PASSES_CHANNEL_SCALING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/executor/tensor.h"
#include "core/graph/unique_names.h"
#include "core/numerics/awq.h"
#include "core/numerics/quant_params.h"
#include "core/passes/input_moments.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// Where a value keeps the channels its readers mix.
enum class ChannelAxis {
  kSecond,  // [N, C, ...]: Conv input.
  kLast,    // [..., C]: MatMul A, Gemm A.
  kFirst,   // [C, M]: Gemm A with transA.
};

struct ScalingSite {
  onnx::GraphProto* graph = nullptr;  // Holds X, its readers and absorber.
  std::string value;                  // X.
  ChannelAxis axis = ChannelAxis::kLast;
  int64_t channels = 0;
  // X's rank where the readers fix it (Conv: its weight's rank; Gemm: 2),
  // else 0.
  int64_t rank = 0;
  std::vector<onnx::NodeProto*> readers;
  // The node that takes 1/s into its output channels, or null (an inserted
  // Mul will). `chain` are the nodes between its output and X, in order,
  // and `chain_values` every value from the absorber's output to X: each is
  // divided by s once the site is applied.
  onnx::NodeProto* absorber = nullptr;
  std::vector<onnx::NodeProto*> chain;
  std::vector<std::string> chain_values;

  // "Conv 'name'" etc. for reports.
  std::string AbsorberLabel() const;
  // Whether the absorber is a Conv / Gemm / MatMul (cross-layer
  // equalization pairs two layers).
  bool AbsorberIsLayer() const;
};

// The constant float tensors of a model by name (every graph, bodies
// included) and how often each is read, so that a rescale changes a weight
// in place only where nothing else reads it, and copies it otherwise.
class ModelWeights {
 public:
  explicit ModelWeights(onnx::ModelProto* model);

  // The float initializer `name`, or null (also when two graphs define it).
  onnx::TensorProto* Find(const std::string& name) const;
  // The tensor `node` may change for itself as its input `slot`: the
  // initializer when nothing else reads it, else a copy (added to `graph`,
  // which holds the node, and wired into it). Null when the input is not a
  // float initializer.
  onnx::TensorProto* Own(onnx::NodeProto* node, int slot,
                         onnx::GraphProto* graph);
  // Adds `tensor` to `graph` as a new initializer named after `base`;
  // returns its name.
  std::string Add(onnx::GraphProto* graph, const std::string& base,
                  std::vector<int64_t> dims, absl::Span<const float> values);
  // A fresh value / node name from `base`.
  std::string FreshName(const std::string& base) { return names_.Make(base); }
  // Removes the initializers that copies left unread. Call last: Find and
  // Own know nothing afterwards.
  void DropUnread();

 private:
  onnx::GraphProto* main_;
  int64_t ir_version_;
  graph::UniqueNames names_;
  absl::flat_hash_map<std::string, onnx::TensorProto*> tensors_;
  absl::flat_hash_map<std::string, onnx::GraphProto*> holder_;
  absl::flat_hash_map<std::string, int64_t> reads_;
  std::vector<std::string> maybe_unread_;
};

// Every site of `model` (main graph and subgraph bodies) whose readers
// include one with at least `min_elements` weight values (a weight that is
// quantized). Pointers stay valid while nodes are only inserted (not
// removed) and initializers only added.
std::vector<ScalingSite> FindScalingSites(onnx::ModelProto* model,
                                          int64_t min_elements);

// Per-channel absolute maxima of the readers' weights for each channel of
// the site (max over readers), and of the absorber's output channels (only
// when AbsorberIsLayer; else empty).
absl::StatusOr<std::vector<double>> ReaderChannelMax(const ScalingSite& site,
                                                     const ModelWeights& w);
absl::StatusOr<std::vector<double>> AbsorberChannelMax(const ScalingSite& site,
                                                       const ModelWeights& w);

// What ApplyChannelScales did.
struct AppliedScaling {
  std::string value;        // What the readers read now (X or the Mul's).
  std::string absorbed_by;  // AbsorberLabel() or "inserted Mul 'name'".
  // Every value now divided by s per channel (the chain, or the Mul's
  // output), for range bookkeeping.
  std::vector<std::string> scaled_values;
};

// Divides channel c of the site's value by s[c] (all > 0 and finite) and
// multiplies the readers' input channel c by s[c]; with an absorber the
// division happens there, else a Mul by 1/s is inserted after X's producer
// and the readers read its output. INVALID_ARGUMENT when s does not fit.
absl::StatusOr<AppliedScaling> ApplyChannelScales(const ScalingSite& site,
                                                  absl::Span<const double> s,
                                                  ModelWeights* w);

// Per-channel min and max of values, streamed from a calibration run.
class ChannelExtremes {
 public:
  // Tracks `value` with channels on `axis` (kSecond: 1; kLast: last;
  // kFirst: 0) and `channels` channels.
  void Track(const std::string& value, ChannelAxis axis, int64_t channels);
  // Folds `t` into `name`'s extremes; nothing for untracked names. A value
  // whose shape does not hold the channels is marked unusable (Find then
  // returns null) rather than failing the run.
  absl::Status Observe(const std::string& name, const executor::Tensor& t);
  struct Extremes {
    ChannelAxis axis = ChannelAxis::kLast;
    std::vector<float> min, max;
    std::vector<double> sum_sq;  // Per channel.
    int64_t count = 0;           // Values per channel seen.
    bool seen = false;
    // A batch did not hold the channels on the axis: never Found.
    bool unusable = false;
  };
  // Null when untracked or never observed.
  const Extremes* Find(const std::string& value) const;

 private:
  absl::flat_hash_map<std::string, Extremes> values_;
};

// The site's largest magnitude per channel from `e` (max(|min|, |max|)).
std::vector<double> ChannelAbsMax(const ChannelExtremes::Extremes& e);

// SmoothQuant's factors: s_c = a_c^alpha / w_c^(1 - alpha), 1 where either
// is zero, clamped to [1e-4, 1e4].
std::vector<double> SmoothQuantScales(absl::Span<const double> act_max,
                                      absl::Span<const double> weight_max,
                                      double alpha);

// The grids a site's value and its readers' weights will be quantized on,
// for predicting the noise a rescale leaves.
struct QuantGrids {
  int activation_bits = 8;
  bool activation_symmetric = false;
  // STATIC_RANGE: the value's range is fixed at calibration, so values
  // beyond it are clipped (DYNAMIC_RANGE measures it on each run).
  bool activation_ranges_fixed = true;
  int weight_bits = 8;
  bool weight_per_channel = true;
  // Readers whose weight has fewer values stay float (and read float).
  int64_t min_elements = 1024;
};

// The quantization noise power of a site's readers' outputs (summed over
// output channels, per output position), predicted for factors s: uniform
// rounding noise of the value's per-tensor grid (its range from the
// per-channel extremes divided by s) through the rescaled weights, the
// power clipped at that grid's edges from each channel with fixed ranges
// (a Gaussian tail of the channel's mean square: the calibration extremes
// are estimates, and a
// rescale that puts every channel's extreme at the edge leaves no headroom
// for values beyond them), plus each rescaled weight's grid (per output
// channel, or per tensor) through the value's per-channel mean squares
// divided by s^2.
class SiteNoise {
 public:
  static absl::StatusOr<SiteNoise> Create(const ScalingSite& site,
                                          const ModelWeights& w,
                                          const ChannelExtremes::Extremes& x,
                                          const QuantGrids& grids);
  double Predict(absl::Span<const double> s) const;
  // Predict's activation terms alone (rounding and clipping of the value's
  // grid through the rescaled weights).
  double ActivationNoise(absl::Span<const double> s) const;

 private:
  struct Reader {
    int64_t outputs = 0;
    // outputs x channels: max |w| and the number of weights linking them.
    std::vector<double> max_abs;
    std::vector<double> links;
    std::vector<double> sum_sq;  // Per channel: sum of w^2.
  };
  std::vector<Reader> readers_;
  std::vector<float> min_, max_;
  std::vector<double> mean_sq_;
  QuantGrids grids_;
};

// SmoothQuant with auto_alpha: the alpha of {0, 0.1, ..., 1} whose factors
// SiteNoise predicts least noise for, unless that is not at least 5% less
// than without a rescale (then `rescale` is false).
struct SmoothingChoice {
  bool rescale = false;
  double alpha = 0;
  std::vector<double> s;
  double noise = 0;           // Predicted with s.
  double noise_unscaled = 0;  // Predicted without a rescale.
};
absl::StatusOr<SmoothingChoice> ChooseSmoothing(
    const ScalingSite& site, const ModelWeights& w,
    const ChannelExtremes::Extremes& x, const QuantGrids& grids);

// How AWQ's search rounds the readers' weights: the weight pass's grid for
// the request's precision.
struct AwqGrid {
  numerics::QuantSpec spec;
  bool per_channel = true;
  // MatMul / Gemm weights; Conv weights too where BlocksConvWeight (INT4
  // weights with more than one input channel per group).
  int64_t block_size = 0;
  bool four_bit_weights = false;
  // Readers whose weight has fewer values stay float (no rounding error).
  int64_t min_elements = 1024;
  int steps = 20;  // alpha in {0, 1/steps, ..., 1}.
};
struct AwqSiteChoice {
  numerics::AwqChoice choice;
  // Why the site cannot be judged (a quantized reader without input
  // statistics, or none quantized); empty when `choice` holds the search.
  std::string why_not;
  // With folds in the statistics, a rescale is cross-checked: factors
  // searched on each half of the calibration samples, judged on the other
  // half against no rescale; a loss leaves the value as it is
  // (choice.rescale false, lost_cross_check true).
  bool lost_cross_check = false;
};
// AWQ for one site: each quantized reader's weight as output rows x input
// columns (per group of a grouped Conv) with its H from `moments` (after
// Finish), the channel magnitudes the root mean square of each channel's
// columns of H, and numerics::SearchAwqScales over them. With the value's
// per-channel extremes `x` (may be null), the search also counts what the
// factors do to the value's own grid, `activations` (SiteNoise's
// activation terms), so that a rescale that helps the weights but widens
// the activations' range is weighed as a whole. When the statistics hold
// folds, a rescale must also win the cross-check (AwqSiteChoice).
absl::StatusOr<AwqSiteChoice> ChooseAwqScales(
    const ScalingSite& site, const ModelWeights& w, const InputMoments& moments,
    const AwqGrid& grid, const ChannelExtremes::Extremes* x,
    const QuantGrids& activations);

// Cross-layer equalization on `model`: every site whose absorber is a
// Conv / Gemm / MatMul, iterated (up to 32 rounds, until every factor of a
// round is within 1e-3 of 1) so that chains settle. Returns one report per
// site (s is the product over rounds).
absl::StatusOr<std::vector<quantd::v1::ChannelScaling>> EqualizeLayers(
    onnx::ModelProto* model, int64_t min_elements);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_CHANNEL_SCALING_H_
