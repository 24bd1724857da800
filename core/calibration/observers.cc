#include "core/calibration/observers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/base/checked_count.h"
#include "core/base/multiversion.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/calibration/histogram.h"
#include "core/numerics/quant_params.h"

namespace quantd::calibration {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Folds n values into [mn, mx], 16 lanes at a time (GCC vector extensions;
// GCC does not vectorize a float min/max reduction written as a plain loop,
// whose NaN and signed-zero rules it must keep). NaN never wins a
// comparison, so it is flagged separately.
typedef float FloatLanes __attribute__((vector_size(64)));
typedef int32_t IntLanes __attribute__((vector_size(64)));
constexpr int kLanes = 16;

}  // namespace

QUANTD_VECTOR_CLONES void FoldMinMax(const float* p, int64_t n, float& mn,
                                     float& mx, bool& nan) {
  FloatLanes lanes_mn, lanes_mx;
  for (int k = 0; k < kLanes; ++k) {
    lanes_mn[k] = mn;
    lanes_mx[k] = mx;
  }
  IntLanes bad = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    FloatLanes a;
    std::memcpy(&a, p + i, sizeof(a));
    lanes_mn = a < lanes_mn ? a : lanes_mn;
    lanes_mx = a > lanes_mx ? a : lanes_mx;
    bad |= a != a;
  }
  float m0 = mn, m1 = mx;
  int any_bad = 0;
  for (int k = 0; k < kLanes; ++k) {
    m0 = lanes_mn[k] < m0 ? lanes_mn[k] : m0;
    m1 = lanes_mx[k] > m1 ? lanes_mx[k] : m1;
    any_bad |= bad[k];
  }
  for (; i < n; ++i) {
    const float a = p[i];
    m0 = a < m0 ? a : m0;
    m1 = a > m1 ? a : m1;
    any_bad |= a != a;
  }
  mn = m0;
  mx = m1;
  nan = nan || any_bad != 0;
}

std::pair<float, float> ReportedRange(const ObserverConfig& c, float mn,
                                      float mx) {
  const auto [lo, hi] =
      numerics::AdjustRange(mn, mx, c.bits, c.symmetric, c.narrow_range);
  const float widen = static_cast<float>(c.headroom);
  return {lo * widen, hi * widen};
}

namespace {

std::pair<float, float> Adjust(const ObserverConfig& c, float mn, float mx) {
  return numerics::AdjustRange(mn, mx, c.bits, c.symmetric, c.narrow_range);
}

// ---------------------------------------------------------------------------
// last_value: tf.contrib LastValueQuantize.

class LastValueObserver final : public Observer {
 public:
  explicit LastValueObserver(const ObserverConfig& c) : Observer(c) {}

 private:
  void Init(int num_slots) override {
    min_.assign(num_slots, 0.0f);
    max_.assign(num_slots, 0.0f);
  }
  void Update(const Batch& batch) override {
    for (size_t s = 0; s < min_.size(); ++s) {
      std::tie(min_[s], max_[s]) =
          Adjust(config_, batch.slot_min[s], batch.slot_max[s]);
    }
  }
  std::pair<float, float> SlotRange(int slot,
                                    bool* /*kept_observed*/) const override {
    return {min_[slot], max_[slot]};
  }
  size_t SlotBytes() const override {
    return (min_.capacity() + max_.capacity()) * sizeof(float);
  }

  std::vector<float> min_, max_;
};

// ---------------------------------------------------------------------------
// min_max: running extremes over all batches, adjusted when reported.

class MinMaxObserver final : public Observer {
 public:
  explicit MinMaxObserver(const ObserverConfig& c) : Observer(c) {}

 private:
  void Init(int num_slots) override {
    min_.assign(num_slots, kInf);
    max_.assign(num_slots, -kInf);
  }
  void Update(const Batch& batch) override {
    for (size_t s = 0; s < min_.size(); ++s) {
      min_[s] = std::min(min_[s], batch.slot_min[s]);
      max_[s] = std::max(max_[s], batch.slot_max[s]);
    }
  }
  std::pair<float, float> SlotRange(int slot,
                                    bool* /*kept_observed*/) const override {
    return Adjust(config_, min_[slot], max_[slot]);
  }
  size_t SlotBytes() const override {
    return (min_.capacity() + max_.capacity()) * sizeof(float);
  }

  std::vector<float> min_, max_;
};

// ---------------------------------------------------------------------------
// moving_average: tf.contrib MovingAvgQuantize, i.e. AdjustRange per batch
// then assign_moving_average(zero_debias=True) as TF 1.15 computes it, in
// float32 op for op:
//   biased -= (biased - value) * d;  step += 1;
//   var = biased / (1 - pow(1 - d, step))      with d = float(1 - decay).

class MovingAverageObserver final : public Observer {
 public:
  explicit MovingAverageObserver(const ObserverConfig& c)
      : Observer(c), d_(static_cast<float>(1.0 - c.ema_decay)) {}

 private:
  void Init(int num_slots) override {
    biased_min_.assign(num_slots, 0.0f);
    biased_max_.assign(num_slots, 0.0f);
    min_.assign(num_slots, config_.init_min);
    max_.assign(num_slots, config_.init_max);
  }
  void Update(const Batch& batch) override {
    const size_t slots = min_.size();
    if (config_.zero_debias) {
      step_ += 1.0f;
      const float bias_factor = 1.0f - std::pow(1.0f - d_, step_);
      for (size_t s = 0; s < slots; ++s) {
        const auto [rmin, rmax] =
            Adjust(config_, batch.slot_min[s], batch.slot_max[s]);
        biased_min_[s] = biased_min_[s] - (biased_min_[s] - rmin) * d_;
        biased_max_[s] = biased_max_[s] - (biased_max_[s] - rmax) * d_;
        min_[s] = biased_min_[s] / bias_factor;
        max_[s] = biased_max_[s] / bias_factor;
      }
      return;
    }
    // torch's MovingAverageMinMaxObserver: the first batch sets the range.
    const bool first = step_ == 0.0f;
    step_ += 1.0f;
    for (size_t s = 0; s < slots; ++s) {
      const auto [rmin, rmax] =
          Adjust(config_, batch.slot_min[s], batch.slot_max[s]);
      min_[s] = first ? rmin : min_[s] - (min_[s] - rmin) * d_;
      max_[s] = first ? rmax : max_[s] - (max_[s] - rmax) * d_;
    }
  }
  std::pair<float, float> SlotRange(int slot,
                                    bool* /*kept_observed*/) const override {
    return {min_[slot], max_[slot]};
  }
  size_t SlotBytes() const override {
    return (biased_min_.capacity() + biased_max_.capacity() + min_.capacity() +
            max_.capacity()) *
           sizeof(float);
  }

  const float d_;      // 1 - decay, as TF casts it to the variable's float32.
  float step_ = 0.0f;  // TF's local_step is a float32 variable too.
  std::vector<float> biased_min_, biased_max_, min_, max_;
};

// ---------------------------------------------------------------------------
// percentile / mse / entropy: one StreamingHistogram per slot, over the
// signed values or (entropy; symmetric percentile/mse) their magnitudes.

class HistogramObserver final : public Observer {
 public:
  // kMinMax is "auto"'s min_max candidate: the observed extremes.
  enum class Kind {
    kPercentile,
    kMse,
    kEntropy,
    kEntropyUnguarded,
    kAuto,
    kMinMax
  };

  HistogramObserver(const ObserverConfig& c, Kind kind)
      : Observer(c),
        kind_(kind),
        magnitude_(kind == Kind::kEntropy || kind == Kind::kEntropyUnguarded ||
                   kind == Kind::kAuto || c.symmetric) {}

  // The kind a histogram method name asks for; min_max (auto's candidate)
  // for a name that is none.
  static Kind KindOf(const std::string& method) {
    if (method == "percentile") return Kind::kPercentile;
    if (method == "mse") return Kind::kMse;
    if (method == "entropy") return Kind::kEntropy;
    if (method == "entropy_unguarded") return Kind::kEntropyUnguarded;
    if (method == "auto") return Kind::kAuto;
    return Kind::kMinMax;
  }

 private:
  void Init(int num_slots) override {
    hists_.assign(num_slots, StreamingHistogram(config_.num_bins));
    min_.assign(num_slots, kInf);
    max_.assign(num_slots, -kInf);
  }

  void Update(const Batch& batch) override {
    const size_t slots = hists_.size();
    for (size_t s = 0; s < slots; ++s) {
      const float mn = batch.slot_min[s];
      const float mx = batch.slot_max[s];
      min_[s] = std::min(min_[s], mn);
      max_[s] = std::max(max_[s], mx);
      if (magnitude_) {
        hists_[s].Extend(0.0f, std::max(std::fabs(mn), std::fabs(mx)));
      } else {
        hists_[s].Extend(mn, mx);
      }
    }
    Bin(hists_[0], batch.data.data(), static_cast<int64_t>(batch.data.size()));
    if (slots == 1) return;
    const numerics::ChannelLayout& l = batch.layout;
    const float* p = batch.data.data();
    for (int64_t o = 0; o < l.outer; ++o) {
      for (int64_t c = 0; c < l.channels; ++c) {
        Bin(hists_[1 + c], p, l.inner);
        p += l.inner;
      }
    }
  }

  void Bin(StreamingHistogram& h, const float* p, int64_t n) const {
    if (magnitude_) {
      h.AddAbs(p, n);
    } else {
      h.Add(p, n);
    }
  }

  std::pair<float, float> SlotRange(int slot,
                                    bool* kept_observed) const override {
    return RangeOfKind(kind_ == Kind::kAuto ? Kind::kMinMax : kind_, slot,
                       kept_observed);
  }

  std::pair<float, float> SlotRangeAs(int slot, const std::string& candidate,
                                      bool* kept_observed) const override {
    if (kind_ != Kind::kAuto) return SlotRange(slot, kept_observed);
    return RangeOfKind(KindOf(candidate), slot, kept_observed);
  }

  std::pair<float, float> RangeOfKind(Kind kind, int slot,
                                      bool* kept_observed) const {
    const StreamingHistogram& h = hists_[slot];
    const double mn = min_[slot];
    const double mx = max_[slot];
    double lo;  // Every branch below sets both.
    double hi;
    if (kind == Kind::kMinMax || kind == Kind::kAuto) {
      lo = mn;
      hi = mx;
    } else if (magnitude_) {
      double t = 0.0;
      switch (kind) {
        case Kind::kPercentile:
          t = HistogramQuantile(h, config_.percentile / 100.0);
          break;
        case Kind::kMse:
          t = MseThreshold(h, (1 << (config_.bits - 1)) - 1);
          break;
        case Kind::kEntropy:
          t = GuardedEntropyThreshold(h, mn, mx, kept_observed);
          break;
        case Kind::kEntropyUnguarded:
          t = EntropyThreshold(h, config_.num_quantized_bins);
          break;
        case Kind::kAuto:
        case Kind::kMinMax:
          break;
      }
      lo = std::max(-t, mn);
      hi = std::min(t, mx);
    } else if (kind == Kind::kPercentile) {
      lo = std::max(HistogramQuantile(h, (100.0 - config_.percentile) / 100.0),
                    mn);
      hi = std::min(HistogramQuantile(h, config_.percentile / 100.0), mx);
    } else {  // kMse
      const int steps =
          (1 << config_.bits) - 1 - (config_.narrow_range ? 1 : 0);
      const auto [a, b] = MseRange(h, steps);
      lo = std::max(a, mn);
      hi = std::min(b, mx);
    }
    return Adjust(config_, static_cast<float>(lo), static_cast<float>(hi));
  }

  // TensorRT's KL threshold, unless the histogram's own expected squared
  // error says clipping there costs more than it saves; then the observed
  // range. The KL search misreads a dense cloud of small non-zero
  // magnitudes (SiLU and HardSwish fold their negative lobe onto it) as the
  // distribution and clips the sparse large values that carry the signal:
  // EfficientNet-B0's last SiLU kept 0.9 dB (docs/numerics.md, "Entropy").
  // Squared error is not every task's measure: Silero VAD's decisions
  // gain from clipping loud STFT frames the guard keeps, hence
  // "entropy_unguarded".
  double GuardedEntropyThreshold(const StreamingHistogram& h, double mn,
                                 double mx, bool* kept_observed) const {
    const double kl = EntropyThreshold(h, config_.num_quantized_bins);
    const double full = h.Edge(h.num_bins());
    if (!(kl < full)) return kl;
    const double steps = static_cast<double>((1 << config_.bits) - 1 -
                                             (config_.narrow_range ? 1 : 0));
    auto step = [&](double t) {
      const auto [lo, hi] =
          Adjust(config_, static_cast<float>(std::max(-t, mn)),
                 static_cast<float>(std::min(t, mx)));
      return (static_cast<double>(hi) - static_cast<double>(lo)) / steps;
    };
    if (ThresholdError(h, kl, step(kl)) <=
        ThresholdError(h, full, step(full))) {
      return kl;
    }
    *kept_observed = true;
    return full;
  }

  size_t SlotBytes() const override {
    size_t bytes = hists_.capacity() * sizeof(StreamingHistogram) +
                   (min_.capacity() + max_.capacity()) * sizeof(float);
    for (const StreamingHistogram& h : hists_) bytes += 2 * h.StateBytes();
    return bytes;
  }

  const Kind kind_;
  const bool magnitude_;
  std::vector<StreamingHistogram> hists_;
  std::vector<float> min_, max_;  // Observed extremes, for clamping.
};

// The double a user meant by a float proto field: the shortest decimal that
// rounds to the float (0.999f -> 0.999), so that 1 - decay matches what
// Python computes before TF casts it to float32.
double ShortestDecimal(float f) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace

// ---------------------------------------------------------------------------
// Observer

Observer::~Observer() {
  if (budget_ != nullptr) budget_->Release(charged_);
}

namespace {

// Values per chunk of a parallel fold: below this a chunk is over before a
// helper would have started (a fold runs at several GB/s).
constexpr int64_t kParallelFoldValues = int64_t{1} << 16;

}  // namespace

absl::Status Observer::Observe(absl::Span<const float> data,
                               absl::Span<const int64_t> shape,
                               ThreadPool* pool) {
  QUANTD_ASSIGN_OR_RETURN(const int64_t size, CheckedElementCount(shape));
  if (size != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] holds ", size,
                     " values but the batch has ", data.size()));
  }
  numerics::ChannelLayout layout{1, 1, size};
  int axis = -1;
  if (config_.per_channel) {
    absl::StatusOr<numerics::ChannelLayout> l =
        numerics::LayoutFor(shape, config_.axis);
    if (!l.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("per-channel axis: ", l.status().message()));
    }
    layout = *l;
    const int rank = static_cast<int>(shape.size());
    axis = config_.axis < 0 ? config_.axis + rank : config_.axis;
  }
  if (data.empty()) return absl::OkStatus();

  absl::MutexLock lock(&mu_);
  QUANTD_RETURN_IF_ERROR(BeginBatchLocked(layout));
  const size_t slots = slot_min_.size();
  bool nan = false;
  if (slots == 1) {
    // Each chunk folds into its own extremes; they meet under a lock.
    float lo = kInf, hi = -kInf;
    absl::Mutex fold_mu;
    ParallelRange(
        pool, size, kParallelFoldValues, [&](int64_t begin, int64_t end) {
          float mn = kInf, mx = -kInf;
          bool chunk_nan = false;
          FoldMinMax(data.data() + begin, end - begin, mn, mx, chunk_nan);
          absl::MutexLock fold_lock(&fold_mu);
          lo = std::min(lo, mn);
          hi = std::max(hi, mx);
          nan = nan || chunk_nan;
        });
    slot_min_[0] = lo;
    slot_max_[0] = hi;
  } else {
    std::fill(slot_min_.begin(), slot_min_.end(), kInf);
    std::fill(slot_max_.begin(), slot_max_.end(), -kInf);
    // Channel c's values are inner-long runs, one per outer index: a chunk
    // takes a block of whole channels, so each slot has one writer, and
    // reads its block in memory order (one chunk reads as one thread did).
    const int64_t channels = layout.channels;
    const int64_t per_channel = layout.outer * layout.inner;
    const int64_t grain =
        per_channel > 0 ? (kParallelFoldValues + per_channel - 1) / per_channel
                        : channels;
    float* const slot_min = slot_min_.data();
    float* const slot_max = slot_max_.data();
    absl::Mutex nan_mu;
    ParallelRange(pool, channels, grain, [&](int64_t first, int64_t last) {
      bool chunk_nan = false;
      for (int64_t o = 0; o < layout.outer; ++o) {
        const float* p = data.data() + (o * channels + first) * layout.inner;
        for (int64_t c = first; c < last; ++c) {
          FoldMinMax(p, layout.inner, slot_min[1 + c], slot_max[1 + c],
                     chunk_nan);
          p += layout.inner;
        }
      }
      absl::MutexLock nan_lock(&nan_mu);
      nan = nan || chunk_nan;
    });
    for (size_t s = 1; s < slots; ++s) {
      slot_min_[0] = std::min(slot_min_[0], slot_min_[s]);
      slot_max_[0] = std::max(slot_max_[0], slot_max_[s]);
    }
  }
  if (nan) return absl::InvalidArgumentError("batch holds NaN");
  return CommitBatchLocked(data, layout, axis);
}

absl::Status Observer::ObserveClamped(const Observer& source, float lo,
                                      float hi) {
  if (IsHistogramMethod(config_.method)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", config_.method, " observer reads the values themselves"));
  }
  if (!(lo <= hi)) {
    return absl::FailedPreconditionError(
        absl::StrCat("clamp bounds [", lo, ", ", hi, "] are not a range"));
  }
  std::vector<float> src_min, src_max;
  numerics::ChannelLayout layout;
  int axis;
  {
    absl::MutexLock lock(&source.mu_);
    if (source.batch_count_ == 0) {
      return absl::FailedPreconditionError("the source has seen no batch");
    }
    src_min = source.slot_min_;
    src_max = source.slot_max_;
    layout = source.last_layout_;
    axis = source.axis_;
  }
  absl::MutexLock lock(&mu_);
  if (config_.per_channel != source.config_.per_channel ||
      (config_.per_channel && config_.axis != source.config_.axis)) {
    return absl::FailedPreconditionError(
        "the source observes other slots (per-channel axis)");
  }
  QUANTD_RETURN_IF_ERROR(BeginBatchLocked(layout));
  for (size_t s = 0; s < slot_min_.size(); ++s) {
    slot_min_[s] = std::min(std::max(src_min[s], lo), hi);
    slot_max_[s] = std::min(std::max(src_max[s], lo), hi);
  }
  return CommitBatchLocked({}, layout, axis);
}

absl::Status Observer::BeginBatchLocked(const numerics::ChannelLayout& layout) {
  if (config_.per_channel && channels_ >= 0 && layout.channels != channels_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "per-channel axis ", config_.axis, " has ", layout.channels,
        " channels but earlier batches had ", channels_));
  }
  const size_t slots = config_.per_channel ? 1 + layout.channels : 1;
  if (channels_ < 0) {
    // First batch: the state is sized now, so it is paid for now, before
    // anything is allocated.
    if (slots > static_cast<size_t>(std::numeric_limits<int>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "per-channel axis ", config_.axis, " has ", layout.channels,
          " channels, more than an observer "
          "can hold"));
    }
    const int64_t bytes = ObserverStateBytes(config_, layout.channels);
    if (budget_ != nullptr && bytes != charged_) {
      budget_->Release(charged_);
      charged_ = 0;
      const bool histogram = IsHistogramMethod(config_.method);
      QUANTD_RETURN_IF_ERROR(budget_->Charge(
          bytes,
          absl::StrCat(
              "the ", config_.method, " observer",
              config_.per_channel
                  ? absl::StrCat(" (per-channel, ", layout.channels,
                                 " channels along axis ", config_.axis, ")")
                  : std::string(),
              histogram ? absl::StrCat(" with ", slots, " histograms of ",
                                       config_.num_bins, " bins")
                        : std::string())));
      charged_ = bytes;
    }
  }
  if (slot_min_.size() != slots) {  // First batch only.
    slot_min_.resize(slots);
    slot_max_.resize(slots);
  }
  return absl::OkStatus();
}

absl::Status Observer::CommitBatchLocked(absl::Span<const float> data,
                                         const numerics::ChannelLayout& layout,
                                         int axis) {
  if (std::isnan(slot_min_[0]) || std::isnan(slot_max_[0])) {
    return absl::InvalidArgumentError("batch holds NaN");
  }
  const size_t slots = slot_min_.size();
  if (channels_ < 0) {
    channels_ = layout.channels;
    axis_ = axis;
    Init(static_cast<int>(slots));
  }
  last_layout_ = layout;
  // Slot 0 holds the whole batch's extremes (NaN excluded above; an empty
  // batch never gets here). The comparisons also catch the infinities.
  if (!(slot_min_[0] > -kUnboundedMagnitude) ||
      !(slot_max_[0] < kUnboundedMagnitude)) {
    unbounded_ = true;
  }
  if (!unbounded_) Update(Batch{data, layout, slot_min_, slot_max_});
  ++batch_count_;
  return absl::OkStatus();
}

ObserverResult Observer::Result() const {
  absl::MutexLock lock(&mu_);
  return ResultLocked(nullptr, 1.0);
}

ObserverResult Observer::ResultAs(const std::string& candidate,
                                  double headroom) const {
  absl::MutexLock lock(&mu_);
  return ResultLocked(&candidate, headroom);
}

ObserverResult Observer::ResultLocked(const std::string* candidate,
                                      double headroom) const {
  const float widen = static_cast<float>(config_.headroom * headroom);
  auto range = [&](int slot, bool* kept) {
    return candidate == nullptr ? SlotRange(slot, kept)
                                : SlotRangeAs(slot, *candidate, kept);
  };
  ObserverResult r;
  r.batch_count = batch_count_;
  r.quantize_active = batch_count_ >= config_.quant_delay;
  if (batch_count_ == 0) {
    r.min = config_.init_min;
    r.max = config_.init_max;
    return r;
  }
  if (unbounded_) {
    r.unbounded = true;
    return r;
  }
  std::tie(r.min, r.max) = range(0, &r.kept_observed_range);
  r.min *= widen;
  r.max *= widen;
  if (config_.per_channel) {
    r.axis = axis_;
    r.channel_min.resize(channels_);
    r.channel_max.resize(channels_);
    for (int64_t c = 0; c < channels_; ++c) {
      std::tie(r.channel_min[c], r.channel_max[c]) =
          range(static_cast<int>(1 + c), &r.kept_observed_range);
      r.channel_min[c] *= widen;
      r.channel_max[c] *= widen;
    }
  }
  return r;
}

int64_t Observer::batch_count() const {
  absl::MutexLock lock(&mu_);
  return batch_count_;
}

bool Observer::quantize_active() const {
  absl::MutexLock lock(&mu_);
  return batch_count_ >= config_.quant_delay;
}

size_t Observer::StateBytes() const {
  absl::MutexLock lock(&mu_);
  return (slot_min_.capacity() + slot_max_.capacity()) * sizeof(float) +
         SlotBytes();
}

// ---------------------------------------------------------------------------
// Factory and proto mapping

absl::Status ValidateObserverConfig(const ObserverConfig& c) {
  const bool known =
      std::find_if(std::begin(kObserverMethods), std::end(kObserverMethods),
                   [&](const char* m) { return c.method == m; }) !=
      std::end(kObserverMethods);
  if (!known) {
    return Bad("method", absl::StrCat("unknown observer method '", c.method,
                                      "'; accepted: ",
                                      absl::StrJoin(kObserverMethods, ", ")));
  }
  if (c.bits < 2 || c.bits > 8) {
    return Bad("bits", absl::StrCat("must be in [2, 8], got ", c.bits));
  }
  if (!std::isfinite(c.init_min) || !std::isfinite(c.init_max) ||
      c.init_min > c.init_max) {
    return Bad("init_min/init_max",
               absl::StrCat("must be finite with init_min <= init_max, got [",
                            c.init_min, ", ", c.init_max, "]"));
  }
  // 16x costs 24 dB of rounding SQNR: past that a range is a guess.
  if (!(c.headroom >= 1.0 && c.headroom <= 16.0)) {
    return Bad(
        "headroom",
        absl::StrCat("must be in [1, 16] (0 or unset: 1), got ", c.headroom));
  }
  if (c.quant_delay < 0) {
    return Bad("quant_delay",
               absl::StrCat("must be >= 0, got ", c.quant_delay));
  }
  if (c.method == "moving_average" &&
      !(c.ema_decay >= 0.0 && c.ema_decay < 1.0)) {
    return Bad("ema_decay",
               absl::StrCat("must be in [0, 1), got ", c.ema_decay));
  }
  const bool histogram = IsHistogramMethod(c.method);
  if (histogram && (c.num_bins < 16 || c.num_bins > (1 << 20))) {
    return Bad("num_bins",
               absl::StrCat("must be in [16, 1048576], got ", c.num_bins));
  }
  if ((c.method == "percentile" || c.method == "auto") &&
      !(c.percentile >= 50.0 && c.percentile <= 100.0)) {
    return Bad("percentile",
               absl::StrCat("must be in [50, 100], got ", c.percentile));
  }
  if ((c.method == "entropy" || c.method == "entropy_unguarded" ||
       c.method == "auto") &&
      (c.num_quantized_bins < 2 || c.num_quantized_bins > c.num_bins)) {
    return Bad("num_quantized_bins",
               absl::StrCat("must be in [2, num_bins = ", c.num_bins, "], got ",
                            c.num_quantized_bins));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(
    const ObserverConfig& config, MemoryBudget* budget) {
  QUANTD_RETURN_IF_ERROR(ValidateObserverConfig(config));
  const std::string& m = config.method;
  std::unique_ptr<Observer> o;
  if (m == "last_value") {
    o = std::make_unique<LastValueObserver>(config);
  } else if (m == "min_max") {
    o = std::make_unique<MinMaxObserver>(config);
  } else if (m == "moving_average") {
    o = std::make_unique<MovingAverageObserver>(config);
  } else {  // The histogram methods (validated above).
    o = std::make_unique<HistogramObserver>(config,
                                            HistogramObserver::KindOf(m));
  }
  o->budget_ = budget;
  return o;
}

int64_t ObserverStateBytes(const ObserverConfig& config, int64_t channels) {
  const int64_t slots =
      config.per_channel ? SaturatingAdd(std::max<int64_t>(channels, 0), 1) : 1;
  // Every observer: the per-batch slot_min_ / slot_max_ scratch.
  int64_t per_slot = 2 * sizeof(float);
  const std::string& m = config.method;
  if (m == "last_value" || m == "min_max") {
    per_slot += 2 * sizeof(float);
  } else if (m == "moving_average") {
    per_slot += 4 * sizeof(float);
  } else {
    // A StreamingHistogram (counts and re-binning scratch, num_bins each)
    // plus the observed extremes.
    per_slot += static_cast<int64_t>(sizeof(StreamingHistogram)) +
                2 * sizeof(float) +
                SaturatingMul(2 * sizeof(int64_t),
                              std::max<int64_t>(config.num_bins, 1));
  }
  return SaturatingMul(slots, per_slot);
}

bool IsHistogramMethod(const std::string& method) {
  return method == "percentile" || method == "mse" || method == "entropy" ||
         method == "entropy_unguarded" || method == "auto";
}

ObserverConfig ObserverConfigFromProto(const quantd::v1::CalibrateConfig& p) {
  ObserverConfig c;
  const quantd::v1::QuantOpParams& a = p.activation_params();
  if (!p.method().empty()) {
    c.method = p.method();
  } else if (a.has_moving_avg()) {
    c.method = a.moving_avg() ? "moving_average" : "last_value";
  }
  if (a.has_bits()) c.bits = a.bits();
  if (a.has_symmetric()) c.symmetric = a.symmetric();
  if (a.has_narrow_range()) c.narrow_range = a.narrow_range();
  if (a.has_ema_decay()) c.ema_decay = ShortestDecimal(a.ema_decay());
  if (a.has_init_min()) c.init_min = a.init_min();
  if (a.has_init_max()) c.init_max = a.init_max();
  if (a.has_quant_delay()) c.quant_delay = a.quant_delay();
  if (p.has_percentile()) c.percentile = p.percentile();
  if (p.has_num_bins()) c.num_bins = p.num_bins();
  c.per_channel = p.per_channel();
  c.axis = 1;
  if (p.has_headroom() && p.headroom() != 0.0) c.headroom = p.headroom();
  return c;
}

void ToTensorRange(const ObserverResult& result, const std::string& tensor_name,
                   quantd::v1::TensorRange* out) {
  out->Clear();
  out->set_tensor_name(tensor_name);
  out->set_min(result.min);
  out->set_max(result.max);
  out->set_kept_observed_range(result.kept_observed_range);
  out->set_unbounded(result.unbounded);
  if (result.axis >= 0) {
    out->set_axis(result.axis);
    out->mutable_channel_min()->Add(result.channel_min.begin(),
                                    result.channel_min.end());
    out->mutable_channel_max()->Add(result.channel_max.begin(),
                                    result.channel_max.end());
  }
}

}  // namespace quantd::calibration
