// Fixed-size streaming histogram of one activation tensor (or channel), and
// the range searches run on it: percentile, expected-MSE and KL entropy.
// The formulas are derived in docs/numerics.md ("Calibration observers").
#ifndef QUANTD_CORE_CALIBRATION_HISTOGRAM_H_
#define QUANTD_CORE_CALIBRATION_HISTOGRAM_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace quantd::calibration {

// Counts of values in `num_bins` equal bins; bin i is
// [Edge(i), Edge(i + 1)) with Edge(i) = lo + i * width (in double), the last
// bin also holding Edge(num_bins). Memory is fixed at construction.
//
// Growth (Extend): the first range is exactly [min, max] of the first batch,
// width = (max - min) / num_bins. When a later batch falls outside, the width
// doubles k times (k >= 1, smallest that fits) and the new lower edge moves
// down by a whole number j of *new* bins: lo' = lo - j * width'. Every old
// bin i then lies inside new bin j + (i >> k), so re-binning only adds whole
// counts: no interpolation, no loss beyond the coarser resolution. The upper
// end takes all the slack, so a one-sided distribution keeps lo (e.g. 0 for
// ReLU outputs). While every value seen is equal the histogram is a point
// mass (width 0, all counts in bin 0 at lo); the first wider batch
// re-creates it over the combined range and drops the point's count into
// the bin holding it.
//
// Besides the bin counts the histogram counts the values that are exactly
// zero (zeros(); +0 and -0). They are also in the bin holding 0, so counts()
// and the quantile / MSE searches see every value; EntropyThreshold takes
// them out of that bin (see there).
class StreamingHistogram {
 public:
  explicit StreamingHistogram(int num_bins);

  // Makes the range cover [min, max] (finite, min <= max), re-binning when it
  // grows. Call before Add with the batch's extremes.
  void Extend(float min, float max);

  // Counts n values (AddAbs: their magnitudes), which must lie inside the
  // range; values just outside through rounding land in the edge bins.
  // Exact zeros are also counted in zeros().
  void Add(const float* values, int64_t n);
  void AddAbs(const float* values, int64_t n);

  // Bin index of v: trunc((v - lo) / width) clamped to [0, num_bins - 1].
  int BinOf(double v) const;

  int num_bins() const { return static_cast<int>(counts_.size()); }
  bool has_range() const { return has_range_; }
  double lo() const { return lo_; }
  double width() const { return width_; }
  double Edge(int64_t i) const { return lo_ + static_cast<double>(i) * width_; }
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t total() const { return total_; }
  // How many of the total() values were exactly 0 (they sit in BinOf(0)).
  int64_t zeros() const { return zeros_; }
  // Heap bytes held; constant after construction.
  size_t StateBytes() const { return counts_.capacity() * sizeof(int64_t); }

 private:
  void Count(const float* values, int64_t n, bool magnitude);

  std::vector<int64_t> counts_;
  std::vector<int64_t> scratch_;  // Re-binning buffer, same size as counts_.
  double lo_ = 0.0;
  double width_ = 0.0;
  int64_t total_ = 0;
  int64_t zeros_ = 0;
  bool has_range_ = false;
};

// The value below which a fraction q in [0, 1] of the counted values lies,
// assuming values spread uniformly inside each bin: with target = q * total
// and b the first non-empty bin whose cumulative count reaches target,
// Edge(b) + (target - count_before_b) / count_b * width. lo for an empty or
// point-mass histogram.
double HistogramQuantile(const StreamingHistogram& h, double q);

// Asymmetric expected-MSE search on a signed histogram. Over all bin-edge
// pairs a < b it minimises, in units of width^2,
//   L(a) + R(b) + N(a, b) * (span / steps)^2 / 12
// where L/R are the squared distances of the clipped bins' centres to the
// clip edge, N the count inside [Edge(a), Edge(b)), span (in bins) the width
// of that range once widened to contain zero, and steps = quant_max -
// quant_min. Returns {Edge(a), Edge(b)}; first minimum in (a, b) order.
std::pair<double, double> MseRange(const StreamingHistogram& h, int steps);

// Symmetric expected-MSE search on a magnitude histogram (lo = 0): the
// threshold T = Edge(b), b >= 1, minimising R(b) + N(0, b) * (b /
// half_steps)^2 / 12 (step T / half_steps, half_steps = 2^(bits-1) - 1).
double MseThreshold(const StreamingHistogram& h, int half_steps);

// TensorRT's KL-divergence calibration on a magnitude histogram (lo = 0):
// for each i in [num_quantized_bins, num_bins], P = the first i bins with
// all counts above Edge(i) added to P[i-1]; Q = those i bins (without the
// outliers) merged into num_quantized_bins groups of i / num_quantized_bins
// bins (the last takes the remainder) and spread evenly back over the bins
// where P is non-zero. Both are smoothed (MXNet's eps = 1e-4 on counts) and
// normalised; returns Edge(i) of the smallest KL(P || Q), first on ties.
// The exact zeros (h.zeros()) are removed from bin 0 before the search: they
// are represented exactly by every candidate range and say nothing about
// where the non-zero values end, but as a spike (about half of a ReLU
// output) they would dominate P and Q and drag the threshold down. lo for an
// empty or point-mass histogram, or one holding only zeros.
// Runs in O(num_bins * num_quantized_bins).
double EntropyThreshold(const StreamingHistogram& h, int num_quantized_bins);

// Expected squared error (in squared units of the values) of representing
// the values of a magnitude histogram (lo = 0) with threshold t and rounding
// step `step`: bins whose centre lies above t cost c * (centre - t)^2, the
// others uniform rounding noise c * step^2 / 12. The yardstick the entropy
// observer's guard compares candidate thresholds with.
double ThresholdError(const StreamingHistogram& h, double t, double step);

namespace internal {
// The same search computing every candidate's KL bin by bin, as defined
// above (O(num_bins^2)): the oracle EntropyThreshold is tested against.
double EntropyThresholdBinByBin(const StreamingHistogram& h,
                                int num_quantized_bins);
}  // namespace internal

}  // namespace quantd::calibration

#endif  // QUANTD_CORE_CALIBRATION_HISTOGRAM_H_
