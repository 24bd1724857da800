#include "core/calibration/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/base/multiversion.h"

namespace quantd::calibration {
namespace {

// MXNet's _smooth_distribution constant (TensorRT-style KL calibration).
constexpr double kSmoothEps = 1e-4;

// Smooths `v` in place as MXNet does: zeros become eps, every non-zero entry
// gives up eps * zeros / nonzeros. Returns false when v is all zeros or an
// entry would turn non-positive (the distribution cannot be compared).
bool Smooth(std::vector<double>& v, int64_t n) {
  int64_t zeros = 0;
  for (int64_t j = 0; j < n; ++j) zeros += v[j] == 0.0 ? 1 : 0;
  const int64_t nonzeros = n - zeros;
  if (nonzeros == 0) return false;
  const double eps1 =
      kSmoothEps * static_cast<double>(zeros) / static_cast<double>(nonzeros);
  for (int64_t j = 0; j < n; ++j) {
    if (v[j] == 0.0) {
      v[j] = kSmoothEps;
    } else {
      v[j] -= eps1;
      if (!(v[j] > 0.0)) return false;
    }
  }
  return true;
}

}  // namespace

StreamingHistogram::StreamingHistogram(int num_bins)
    : counts_(static_cast<size_t>(std::max(num_bins, 1)), 0),
      scratch_(counts_.size(), 0) {}

int StreamingHistogram::BinOf(double v) const {
  if (width_ == 0.0) return 0;
  const double t = (v - lo_) / width_;
  const int64_t last = static_cast<int64_t>(counts_.size()) - 1;
  if (!(t > 0.0)) return 0;
  if (t >= static_cast<double>(last)) return static_cast<int>(last);
  return static_cast<int>(t);
}

void StreamingHistogram::Extend(float min, float max) {
  const double mn = min;
  const double mx = max;
  const int64_t n = static_cast<int64_t>(counts_.size());
  if (!has_range_) {
    lo_ = mn;
    width_ = (mx - mn) / static_cast<double>(n);
    has_range_ = true;
    return;
  }
  if (width_ == 0.0) {
    if (mn >= lo_ && mx <= lo_) return;
    // Leave the point-mass state: spread over the combined range.
    const double point = lo_;
    const int64_t count = counts_[0];
    counts_[0] = 0;
    lo_ = std::min(point, mn);
    width_ = (std::max(point, mx) - lo_) / static_cast<double>(n);
    counts_[BinOf(point)] += count;
    return;
  }
  if (mn >= lo_ && mx <= Edge(n)) return;
  for (int k = 1;; ++k) {
    const double new_width = std::ldexp(width_, k);
    const int64_t old_top = k >= 62 ? 0 : (n - 1) >> k;  // new bin of old n-1
    double j = mn < lo_ ? std::ceil((lo_ - mn) / new_width) : 0.0;
    if (j > static_cast<double>(n)) continue;
    double new_lo = lo_ - j * new_width;
    if (new_lo > mn) {  // Rounding: one more bin down.
      j += 1.0;
      new_lo = lo_ - j * new_width;
    }
    const int64_t shift = static_cast<int64_t>(j);
    if (shift + old_top > n - 1) continue;
    if (new_lo + static_cast<double>(n) * new_width < mx) continue;
    std::fill(scratch_.begin(), scratch_.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      scratch_[shift + (k >= 62 ? 0 : i >> k)] += counts_[i];
    }
    counts_.swap(scratch_);
    lo_ = new_lo;
    width_ = new_width;
    return;
  }
}

namespace {

QUANTD_VECTOR_CLONES int64_t CountZeros(const float* values, int64_t n) {
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) zeros += values[i] == 0.0f ? 1 : 0;
  return zeros;
}

// The bins of n values (of their magnitudes when `magnitude`), as BinOf
// computes them: trunc((v - lo) / width) clamped to [0, last]. Clamped
// before truncating, which gives the same bin and keeps the conversion in
// int32 range, so that this loop vectorizes (the counting after it cannot).
QUANTD_VECTOR_CLONES void BinsOf(const float* values, int n, double lo,
                                 double width, int32_t last, bool magnitude,
                                 int32_t* bins) {
  const double top = static_cast<double>(last);
  for (int i = 0; i < n; ++i) {
    const double v = magnitude ? std::fabs(static_cast<double>(values[i]))
                               : static_cast<double>(values[i]);
    double b = (v - lo) / width;
    b = b > 0.0 ? b : 0.0;  // NaN too, as in BinOf.
    b = b < top ? b : top;
    bins[i] = static_cast<int32_t>(b);
  }
}

}  // namespace

void StreamingHistogram::Count(const float* values, int64_t n, bool magnitude) {
  total_ += n;
  zeros_ += CountZeros(values, n);
  if (width_ == 0.0) {
    counts_[0] += n;
    return;
  }
  const int32_t last = static_cast<int32_t>(counts_.size()) - 1;
  int64_t* counts = counts_.data();
  constexpr int kStep = 1024;
  int32_t bins[kStep];
  for (int64_t at = 0; at < n; at += kStep) {
    const int m = static_cast<int>(std::min<int64_t>(kStep, n - at));
    BinsOf(values + at, m, lo_, width_, last, magnitude, bins);
    for (int i = 0; i < m; ++i) ++counts[bins[i]];
  }
}

void StreamingHistogram::Add(const float* values, int64_t n) {
  Count(values, n, /*magnitude=*/false);
}

void StreamingHistogram::AddAbs(const float* values, int64_t n) {
  Count(values, n, /*magnitude=*/true);
}

double HistogramQuantile(const StreamingHistogram& h, double q) {
  if (h.total() == 0 || h.width() == 0.0) return h.lo();
  const double target = q * static_cast<double>(h.total());
  const std::vector<int64_t>& counts = h.counts();
  double before = 0.0;
  for (int b = 0; b < h.num_bins(); ++b) {
    const double c = static_cast<double>(counts[b]);
    if (c > 0.0 && before + c >= target) {
      return h.Edge(b) + (target - before) / c * h.width();
    }
    before += c;
  }
  return h.Edge(h.num_bins());
}

namespace {

// Clipping costs in units of width^2, from bin centres u_i = i + 0.5:
// left[a] = sum_{i<a} c_i (a - u_i)^2, right[b] = sum_{i>=b} c_i (u_i - b)^2,
// and below[a] = sum_{i<a} c_i. Built by recurrences whose terms are all
// non-negative multiples of 1/4 (no cancellation).
struct ClipCosts {
  std::vector<double> left, right, below;
};

ClipCosts ComputeClipCosts(const std::vector<int64_t>& counts) {
  const size_t n = counts.size();
  ClipCosts k{std::vector<double>(n + 1, 0.0), std::vector<double>(n + 1, 0.0),
              std::vector<double>(n + 1, 0.0)};
  double d = 0.0;  // sum_{i<a} c_i (a - u_i)
  for (size_t a = 0; a < n; ++a) {
    const double c = static_cast<double>(counts[a]);
    k.left[a + 1] = k.left[a] + 2.0 * d + k.below[a] + 0.25 * c;
    d = d + k.below[a] + 0.5 * c;
    k.below[a + 1] = k.below[a] + c;
  }
  double e = 0.0;      // sum_{i>=b} c_i (u_i - b)
  double above = 0.0;  // sum_{i>=b} c_i
  for (size_t b = n; b > 0; --b) {
    const double c = static_cast<double>(counts[b - 1]);
    k.right[b - 1] = k.right[b] + 2.0 * e + above + 0.25 * c;
    e = e + above + 0.5 * c;
    above += c;
  }
  return k;
}

}  // namespace

std::pair<double, double> MseRange(const StreamingHistogram& h, int steps) {
  if (h.total() == 0 || h.width() == 0.0) return {h.lo(), h.lo()};
  const int n = h.num_bins();
  const ClipCosts k = ComputeClipCosts(h.counts());
  const double zero = -h.lo() / h.width();  // Where 0 sits, in bins.
  const double steps_d = static_cast<double>(steps);
  double best = std::numeric_limits<double>::infinity();
  int best_a = 0;
  int best_b = n;
  for (int a = 0; a < n; ++a) {
    const double low = std::min(static_cast<double>(a), zero);
    for (int b = a + 1; b <= n; ++b) {
      const double span = std::max(static_cast<double>(b), zero) - low;
      const double r = span / steps_d;
      const double inside = k.below[b] - k.below[a];
      const double cost = k.left[a] + k.right[b] + inside * r * r / 12.0;
      if (cost < best) {
        best = cost;
        best_a = a;
        best_b = b;
      }
    }
  }
  return {h.Edge(best_a), h.Edge(best_b)};
}

double MseThreshold(const StreamingHistogram& h, int half_steps) {
  if (h.total() == 0 || h.width() == 0.0) return h.lo();
  const int n = h.num_bins();
  const ClipCosts k = ComputeClipCosts(h.counts());
  const double half = static_cast<double>(half_steps);
  double best = std::numeric_limits<double>::infinity();
  int best_b = n;
  for (int b = 1; b <= n; ++b) {
    const double r = static_cast<double>(b) / half;
    const double cost = k.right[b] + k.below[b] * r * r / 12.0;
    if (cost < best) {
      best = cost;
      best_b = b;
    }
  }
  return h.Edge(best_b);
}

double ThresholdError(const StreamingHistogram& h, double t, double step) {
  const std::vector<int64_t>& counts = h.counts();
  double clipped = 0.0;
  double inside = 0.0;
  for (int b = 0; b < h.num_bins(); ++b) {
    if (counts[b] == 0) continue;
    const double c = static_cast<double>(counts[b]);
    const double centre = h.Edge(b) + 0.5 * h.width();
    if (centre > t) {
      clipped += c * (centre - t) * (centre - t);
    } else {
      inside += c;
    }
  }
  return clipped + inside * step * step / 12.0;
}

namespace {

// KL(P || Q) for the candidate i, computed bin by bin exactly as the
// definition in histogram.h reads (O(i)); `c` holds the counts without the
// zeros, `above[i]` the counts from bin i on.
double KlExact(const std::vector<int64_t>& c, const std::vector<double>& above,
               int i, int nq, std::vector<double>& p, std::vector<double>& q) {
  for (int j = 0; j < i; ++j) p[j] = static_cast<double>(c[j]);
  p[i - 1] += above[i];
  const int merged = i / nq;
  for (int g = 0; g < nq; ++g) {
    const int start = g * merged;
    const int stop = g == nq - 1 ? i : start + merged;
    double sum = 0.0;
    int nonzero = 0;
    for (int j = start; j < stop; ++j) {
      sum += static_cast<double>(c[j]);
      nonzero += p[j] != 0.0 ? 1 : 0;
    }
    const double share = nonzero > 0 ? sum / nonzero : 0.0;
    for (int j = start; j < stop; ++j) q[j] = p[j] != 0.0 ? share : 0.0;
  }
  if (!Smooth(p, i) || !Smooth(q, i)) {
    return std::numeric_limits<double>::infinity();
  }
  double sp = 0.0;
  double sq = 0.0;
  for (int j = 0; j < i; ++j) {
    sp += p[j];
    sq += q[j];
  }
  double kl = 0.0;
  for (int j = 0; j < i; ++j) {
    const double pn = p[j] / sp;
    const double qn = q[j] / sq;
    kl += pn * std::log(pn / qn);
  }
  return kl;
}

// Prefix sums over the non-zero counts v of bins [0, j): what the sum of
// (v - e) ln(v - e) over them needs for any small e (see KlFast).
struct CountMoments {
  std::vector<double> v_log_v, log_v, inv_v, inv_v2, inv_v3;
  std::vector<int64_t> nonzero;  // How many bins, and...
  std::vector<double> sum;       // ...their counts' sum (zeros included).
  std::vector<double> min_v;     // Smallest non-zero count (inf if none).

  explicit CountMoments(const std::vector<int64_t>& c) {
    const size_t n = c.size();
    for (auto* a : {&v_log_v, &log_v, &inv_v, &inv_v2, &inv_v3, &sum}) {
      a->assign(n + 1, 0.0);
    }
    nonzero.assign(n + 1, 0);
    min_v.assign(n + 1, std::numeric_limits<double>::infinity());
    for (size_t j = 0; j < n; ++j) {
      const double v = static_cast<double>(c[j]);
      const bool nz = c[j] != 0;
      const double lv = nz ? std::log(v) : 0.0;
      v_log_v[j + 1] = v_log_v[j] + (nz ? v * lv : 0.0);
      log_v[j + 1] = log_v[j] + lv;
      inv_v[j + 1] = inv_v[j] + (nz ? 1.0 / v : 0.0);
      inv_v2[j + 1] = inv_v2[j] + (nz ? 1.0 / (v * v) : 0.0);
      inv_v3[j + 1] = inv_v3[j] + (nz ? 1.0 / (v * v * v) : 0.0);
      nonzero[j + 1] = nonzero[j] + (nz ? 1 : 0);
      sum[j + 1] = sum[j] + v;
      min_v[j + 1] = nz ? std::min(min_v[j], v) : min_v[j];
    }
  }
};

// Smoothing subtracts e from each non-zero count v; beyond this e / v the
// series below is not used (its error grows as (e / v)^5).
constexpr double kMaxSeriesRatio = 0.05;

// The same KL as KlExact in O(nq): Q is constant over the non-zero bins of
// each group, and smoothing keeps the totals (sp = the counts' sum, sq = the
// counts' sum without the outliers), so
//   KL = (sum_j p'_j ln p'_j - sum_g P'_g ln q'_g) / sp + ln(sq / sp)
// over the bins where P is non-zero (elsewhere p' = q' = eps and the term
// vanishes), p' = p - e_p, q'_g = share_g - e_q. sum (v - e) ln(v - e) over
// bins [0, i - 1) comes from prefix sums of the series
//   v ln v - e (ln v + 1) + e^2 / 2v + e^3 / 6v^2 + e^4 / 12v^3,
// whose next term is below 2e-8 of v for e / v <= kMaxSeriesRatio. Sets
// *exact_needed instead when e is too large for that.
double KlFast(const std::vector<int64_t>& c, const std::vector<double>& above,
              const CountMoments& m, int i, int nq, bool* exact_needed) {
  *exact_needed = false;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double last_p = static_cast<double>(c[i - 1]) + above[i];
  const int64_t nonzero_p = m.nonzero[i - 1] + (last_p != 0.0 ? 1 : 0);
  const int64_t zeros_p = i - nonzero_p;
  if (nonzero_p == 0) return kInf;
  const double e_p = kSmoothEps * static_cast<double>(zeros_p) /
                     static_cast<double>(nonzero_p);
  // Smoothing P fails when it would take a count to zero or below.
  const double min_p = std::min(m.min_v[i - 1], last_p != 0.0 ? last_p : kInf);
  if (!(min_p - e_p > 0.0)) return kInf;
  if (e_p > kMaxSeriesRatio * m.min_v[i - 1]) {
    *exact_needed = true;
    return 0.0;
  }
  // Q: per group, the counts' sum spread over the bins where P is non-zero.
  const int merged = i / nq;
  int64_t zeros_q = zeros_p;
  double min_share = kInf;
  for (int g = 0; g < nq; ++g) {
    const int start = g * merged;
    const int stop = g == nq - 1 ? i : start + merged;
    int64_t nz = m.nonzero[stop] - m.nonzero[start];
    if (stop == i) nz += (last_p != 0.0) - (c[i - 1] != 0);
    const double share = nz > 0 ? (m.sum[stop] - m.sum[start]) / nz : 0.0;
    if (share == 0.0) {
      zeros_q += nz;
    } else {
      min_share = std::min(min_share, share);
    }
  }
  const int64_t nonzero_q = i - zeros_q;
  if (nonzero_q == 0) return kInf;
  const double e_q = kSmoothEps * static_cast<double>(zeros_q) /
                     static_cast<double>(nonzero_q);
  if (!(min_share - e_q > 0.0)) return kInf;

  const int k = i - 1;  // Bins [0, k) come from the prefix sums.
  const double e = e_p;
  double p_log_p = m.v_log_v[k] - e * (m.log_v[k] + m.nonzero[k]) +
                   e * e / 2 * m.inv_v[k] + e * e * e / 6 * m.inv_v2[k] +
                   e * e * e * e / 12 * m.inv_v3[k];
  if (last_p != 0.0) p_log_p += (last_p - e) * std::log(last_p - e);
  double cross = 0.0;
  for (int g = 0; g < nq; ++g) {
    const int start = g * merged;
    const int stop = g == nq - 1 ? i : start + merged;
    int64_t nz = m.nonzero[stop] - m.nonzero[start];
    double p_sum = m.sum[stop] - m.sum[start];
    if (stop == i) {
      nz += (last_p != 0.0) - (c[i - 1] != 0);
      p_sum += above[i];
    }
    if (nz == 0) continue;
    const double share = (m.sum[stop] - m.sum[start]) / nz;
    const double log_q =
        share == 0.0 ? std::log(kSmoothEps) : std::log(share - e_q);
    cross += (p_sum - static_cast<double>(nz) * e_p) * log_q;
  }
  const double sp = m.sum[i] + above[i];
  const double sq = m.sum[i];
  return (p_log_p - cross) / sp + std::log(sq / sp);
}

}  // namespace

namespace {

double SearchEntropyThreshold(const StreamingHistogram& h,
                              int num_quantized_bins, bool bin_by_bin) {
  if (h.total() == 0 || h.width() == 0.0) return h.lo();
  const int n = h.num_bins();
  const int nq = num_quantized_bins;
  if (n <= nq) return h.Edge(n);
  // The search runs on the non-zero values: exact zeros leave their bin.
  std::vector<int64_t> c = h.counts();
  if (h.zeros() > 0) {
    if (h.zeros() == h.total()) return h.lo();
    int64_t& zero_bin = c[h.BinOf(0.0)];  // Bin 0 on a magnitude histogram.
    zero_bin -= std::min(zero_bin, h.zeros());
  }
  std::vector<double> above(n + 1, 0.0);  // above[i] = sum_{j>=i} c_j
  for (int i = n - 1; i >= 0; --i) {
    above[i] = above[i + 1] + static_cast<double>(c[i]);
  }
  // O(num_bins * nq) rather than O(num_bins^2): each candidate's KL comes
  // from prefix sums (KlFast), bin by bin only where smoothing is too
  // coarse for that (tiny counts among many empty bins).
  const CountMoments moments(c);
  std::vector<double> p(n), q(n);
  double best = std::numeric_limits<double>::infinity();
  int best_i = n;
  for (int i = nq; i <= n; ++i) {
    bool exact_needed = bin_by_bin;
    double kl = 0.0;
    if (!bin_by_bin) kl = KlFast(c, above, moments, i, nq, &exact_needed);
    if (exact_needed) kl = KlExact(c, above, i, nq, p, q);
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  return h.Edge(best_i);
}

}  // namespace

double EntropyThreshold(const StreamingHistogram& h, int num_quantized_bins) {
  return SearchEntropyThreshold(h, num_quantized_bins, /*bin_by_bin=*/false);
}

namespace internal {

double EntropyThresholdBinByBin(const StreamingHistogram& h,
                                int num_quantized_bins) {
  return SearchEntropyThreshold(h, num_quantized_bins, /*bin_by_bin=*/true);
}

}  // namespace internal

}  // namespace quantd::calibration
