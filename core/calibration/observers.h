// Calibration observers: streaming range collectors that see every batch of
// one activation tensor and report its quantization range (TensorRange).
// Formulas and the function implementing each: docs/numerics.md,
// "Calibration observers".
#ifndef QUANTD_CORE_CALIBRATION_OBSERVERS_H_
#define QUANTD_CORE_CALIBRATION_OBSERVERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/base/thread_pool.h"
#include "core/calibration/memory_budget.h"
#include "core/numerics/quant_params.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::calibration {

// Accepted ObserverConfig::method names.
//   "last_value"     tf.contrib LastValueQuantize: each batch's range
//                    replaces the previous one.
//   "min_max"        running min/max over all batches (TF quantizer's
//                    MIN_MAX, ORT's MinMax, torch's MinMaxObserver).
//   "moving_average" tf.contrib MovingAvgQuantize: zero-debiased EMA.
//   "percentile"     histogram percentile (ORT Percentile / TF
//                    HISTOGRAM_PERCENTILE).
//   "mse"            histogram expected-MSE search (TF
//                    HISTOGRAM_MSE_BRUTEFORCE idea).
//   "entropy"        KL-divergence threshold (TensorRT / ORT Entropy), with
//                    exact zeros left out of the search (ReLU outputs),
//                    unless by the histogram's expected squared error it
//                    clips more than it saves: then the observed range.
//   "entropy_unguarded"  the same KL threshold without that guard.
//   "auto"           one magnitude histogram per slot from which each of
//                    kAutoCandidates reads its range (ResultAs); a Quantize
//                    call keeps the candidate whose quantized model is
//                    closest to the float one at its outputs. Result() is
//                    min_max's range.
inline constexpr const char* kObserverMethods[] = {
    "last_value", "min_max", "moving_average",    "percentile",
    "mse",        "entropy", "entropy_unguarded", "auto"};

// What "auto" chooses between, simplest first. On its magnitude histogram
// percentile and mse find a threshold T on |x| (range [-T, T] clamped to the
// observed extremes), as those observers do when symmetric; on a tensor with
// no negative values that is the same range either way.
inline constexpr const char* kAutoCandidates[] = {
    "min_max", "percentile", "mse", "entropy", "entropy_unguarded"};

// The widenings "auto" also tries on min_max when it judges on batches held
// out from calibration (on the batches the ranges were fitted to, a wider
// range can only look worse, so they are not tried there).
inline constexpr double kAutoHeadroomCandidates[] = {1.1, 1.25, 1.5, 2.0};

// The histogram methods: percentile, mse, entropy, entropy_unguarded, auto.
bool IsHistogramMethod(const std::string& method);

struct ObserverConfig {
  std::string method = "min_max";
  int bits = 8;  // 2..8.
  // Ranges go through numerics::AdjustRange(bits, symmetric, narrow_range):
  // asymmetric ranges include 0, symmetric ones follow tf.contrib's ratio.
  // For percentile and mse, symmetric also switches to a magnitude
  // histogram and a threshold T (range [-T, T] clamped to the data).
  bool symmetric = false;
  bool narrow_range = false;
  // moving_average: EMA decay, double so that 1 - decay is computed as
  // Python computes it before TF casts it to float32.
  double ema_decay = 0.999;
  // moving_average: true = tf.contrib (zero-debiased). false = torch's
  // MovingAverageMinMaxObserver: the first batch sets the range, then a
  // plain EMA with weight 1 - ema_decay.
  bool zero_debias = true;
  // Range reported before any batch (tf.contrib's variable initialisers;
  // Quantize() uses 0 / 6 for activations).
  float init_min = 0.0f;
  float init_max = 6.0f;
  // tf.contrib quant_delay: batch t (1-based) is quantized iff t >=
  // quant_delay, so quant_delay - 1 batches pass unquantized. 0 = no delay.
  int64_t quant_delay = 0;
  double percentile = 99.999;    // percentile: in (0, 100].
  int num_bins = 2048;           // percentile, mse, entropy: >= 16.
  int num_quantized_bins = 128;  // entropy: in [2, num_bins].
  // Also collect one range per slice along `axis` (may be negative). NCHW
  // activations: 1; tf.contrib (channels last): -1.
  bool per_channel = false;
  int axis = 1;
  // Every observed range (per tensor and per channel) is multiplied by this
  // factor after AdjustRange, which it commutes with: [1, 16]. The range
  // before any batch (init_min, init_max) is not widened.
  double headroom = 1.0;
};

// A value this large in magnitude, or infinite, marks its tensor unbounded
// (ObserverResult::unbounded): torch's padding masks use finfo(float32).min
// (-3.4e38) and its causal masks -inf, and no activation that carries a
// signal comes near.
inline constexpr float kUnboundedMagnitude = 1e30f;

// Folds n values into [mn, mx] (vectorised); sets `nan` when one is NaN
// and leaves it otherwise.
void FoldMinMax(const float* p, int64_t n, float& mn, float& mx, bool& nan);

// The range a min_max observer with config `c` reports for raw extremes
// [mn, mx]: AdjustRange, then widened by c.headroom. For ranges derived
// outside an observer (rescaled values, cross-validation folds).
std::pair<float, float> ReportedRange(const ObserverConfig& c, float mn,
                                      float mx);

// What an observer reports; maps onto quantd.v1.TensorRange.
struct ObserverResult {
  float min = 0.0f;
  float max = 0.0f;
  int axis = -1;  // Non-negative channel axis when per-channel, else -1.
  std::vector<float> channel_min;
  std::vector<float> channel_max;
  int64_t batch_count = 0;
  // False while tf.contrib would still pass the tensor through unquantized
  // (quant_delay); the ranges are valid either way.
  bool quantize_active = true;
  // entropy: the KL threshold of the tensor (or of a channel) would have
  // cost more expected squared error than it saved, so the observed range
  // was kept there.
  bool kept_observed_range = false;
  // Some batch held an infinity or a value of magnitude >=
  // kUnboundedMagnitude (an additive mask): min and max are 0 and carry no
  // range, and the tensor must not be quantized.
  bool unbounded = false;
};

// One observer per tensor. Observe and Result are thread-safe: an internal
// mutex serialises them, so concurrent Observe calls on one observer are
// applied one after the other in an unspecified order (which matters for
// last_value and moving_average: feed a tensor's batches from one thread to
// keep their order). Memory is fixed per tensor whatever the number of
// batches: per slot (the tensor, and each channel when per-channel) a few
// floats, or one num_bins histogram for the histogram methods.
class Observer {
 public:
  // Gives back what the observer charged to its budget.
  virtual ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // Takes one batch of `shape` (row-major). INVALID_ARGUMENT when the shape
  // is negative or overflows, does not match data.size(), the axis is
  // outside the shape, the channel count differs from earlier batches, or
  // data holds NaN; RESOURCE_EXHAUSTED when the first batch's
  // state (ObserverStateBytes) does not fit the observer's budget, which is
  // charged before anything is allocated. The state is then unchanged. An
  // empty batch is ignored (not counted). A batch holding an infinity or a
  // value of magnitude >= kUnboundedMagnitude is counted and makes the
  // observer unbounded for good (Result().unbounded); it no longer updates
  // its range.
  //
  // With a `pool`, the extremes of a large batch are folded in chunks over
  // its threads (the caller's included, see ThreadPool::ParallelFor); the
  // result is the same. Histogram observers still bin on the caller.
  absl::Status Observe(absl::Span<const float> data,
                       absl::Span<const int64_t> shape,
                       ThreadPool* pool = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Takes one batch that is `source`'s last batch clamped to [lo, hi]
  // (y = min(max(x, lo), hi): Relu, Clip), of the same shape. Extremes map
  // through a clamp, so for observers that keep only each slot's extremes
  // (not IsHistogramMethod) the values need not be read again: a value seen
  // just after the model wrote it is a pass over memory, and Relu/Clip
  // outputs are among a CNN's largest. FAILED_PRECONDITION for histogram
  // observers, a source that has seen no batch, lo > hi or a NaN bound;
  // otherwise as Observe.
  absl::Status ObserveClamped(const Observer& source, float lo, float hi)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The range(s) so far. Before any batch: [init_min, init_max], no channels.
  ObserverResult Result() const ABSL_LOCKS_EXCLUDED(mu_);
  // An "auto" observer: the range(s) `candidate` (one of kAutoCandidates)
  // reads from its histograms. Any other observer: Result(), whatever the
  // name. Either way widened by `headroom` on top of config().headroom.
  ObserverResult ResultAs(const std::string& candidate,
                          double headroom = 1.0) const ABSL_LOCKS_EXCLUDED(mu_);

  int64_t batch_count() const ABSL_LOCKS_EXCLUDED(mu_);
  // batch_count() >= quant_delay (tf.contrib's activate_quant on the last
  // batch seen).
  bool quantize_active() const ABSL_LOCKS_EXCLUDED(mu_);
  // Heap bytes of the observer's state (capacities); stops growing after the
  // first batch.
  size_t StateBytes() const ABSL_LOCKS_EXCLUDED(mu_);
  const ObserverConfig& config() const { return config_; }

 protected:
  explicit Observer(ObserverConfig config) : config_(std::move(config)) {}

  // One batch, validated. Slot 0 is the whole tensor, slot 1 + c channel c
  // (per-channel only). slot_min/slot_max hold each slot's raw extremes.
  struct Batch {
    absl::Span<const float> data;
    numerics::ChannelLayout layout;  // {1, 1, size} when per-tensor.
    absl::Span<const float> slot_min;
    absl::Span<const float> slot_max;
  };
  // Called once, before the first Update, with the number of slots.
  virtual void Init(int num_slots) = 0;
  virtual void Update(const Batch& batch) = 0;
  // Final range of a slot (after AdjustRange) once at least one batch was
  // seen.
  // Sets *kept_observed (never clears it) when a range search declined to
  // clip and kept the observed extremes (entropy's guard).
  virtual std::pair<float, float> SlotRange(int slot,
                                            bool* kept_observed) const = 0;
  // The range `candidate` would report ("auto" only; others: SlotRange).
  virtual std::pair<float, float> SlotRangeAs(int slot,
                                              const std::string& candidate,
                                              bool* kept_observed) const {
    (void)candidate;
    return SlotRange(slot, kept_observed);
  }
  virtual size_t SlotBytes() const = 0;

  const ObserverConfig config_;

 private:
  friend absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(
      const ObserverConfig& config, MemoryBudget* budget);

  // Checks a batch of `layout` against earlier ones, charges the first
  // batch's state, sizes the per-batch scratch.
  absl::Status BeginBatchLocked(const numerics::ChannelLayout& layout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With slot_min_/slot_max_ filled: marks the observer unbounded on
  // extremes beyond kUnboundedMagnitude, else updates the state.
  absl::Status CommitBatchLocked(absl::Span<const float> data,
                                 const numerics::ChannelLayout& layout,
                                 int axis) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Result() (candidate null) or ResultAs(*candidate), under mu_, widened
  // by config_.headroom * headroom.
  ObserverResult ResultLocked(const std::string* candidate,
                              double headroom) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  MemoryBudget* budget_ = nullptr;  // Not owned; may be null.
  mutable absl::Mutex mu_;
  int64_t charged_ ABSL_GUARDED_BY(mu_) = 0;  // Bytes held on budget_.
  int64_t batch_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t channels_ ABSL_GUARDED_BY(mu_) = -1;  // -1 until the first batch.
  int axis_ ABSL_GUARDED_BY(mu_) = -1;
  bool unbounded_ ABSL_GUARDED_BY(mu_) = false;
  // Per-batch scratch, reused (sized on the first batch): after a batch,
  // its raw extremes per slot (what ObserveClamped reads from a source).
  std::vector<float> slot_min_ ABSL_GUARDED_BY(mu_);
  std::vector<float> slot_max_ ABSL_GUARDED_BY(mu_);
  numerics::ChannelLayout last_layout_ ABSL_GUARDED_BY(mu_);
};

// INVALID_ARGUMENT naming the field and value when the config is bad (an
// unknown method lists the accepted names).
absl::Status ValidateObserverConfig(const ObserverConfig& config);

// `budget` (may be null; must outlive the observer) is charged the
// observer's state before its first batch allocates it.
absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(
    const ObserverConfig& config, MemoryBudget* budget = nullptr);

// Heap bytes an observer of `config` holds once it has seen a batch with
// `channels` channels along config.axis (ignored unless per_channel):
// exactly what StateBytes() reports then. Saturates at kMaxCount.
int64_t ObserverStateBytes(const ObserverConfig& config, int64_t channels);

// The observer config a CalibrateConfig asks for: method, percentile,
// num_bins, per_channel (axis 1, NCHW) and the activation QuantOpParams
// (bits, symmetric, narrow_range, ema_decay, init_min/max, quant_delay;
// moving_avg selects "moving_average" when the method is empty). Unset
// fields keep ObserverConfig's defaults. Not validated.
ObserverConfig ObserverConfigFromProto(
    const quantd::v1::CalibrateConfig& proto);

// Fills a TensorRange (channel fields only when per-channel).
void ToTensorRange(const ObserverResult& result, const std::string& tensor_name,
                   quantd::v1::TensorRange* out);

}  // namespace quantd::calibration

#endif  // QUANTD_CORE_CALIBRATION_OBSERVERS_H_
