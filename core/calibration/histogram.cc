#include "core/calibration/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

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

int64_t CountZeros(const float* values, int64_t n) {
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) zeros += values[i] == 0.0f ? 1 : 0;
  return zeros;
}

}  // namespace

void StreamingHistogram::Add(const float* values, int64_t n) {
  total_ += n;
  zeros_ += CountZeros(values, n);
  if (width_ == 0.0) {
    counts_[0] += n;
    return;
  }
  const double lo = lo_;
  const double width = width_;
  const int64_t last = static_cast<int64_t>(counts_.size()) - 1;
  int64_t* counts = counts_.data();
  for (int64_t i = 0; i < n; ++i) {
    int64_t b =
        static_cast<int64_t>((static_cast<double>(values[i]) - lo) / width);
    b = b < 0 ? 0 : (b > last ? last : b);
    ++counts[b];
  }
}

void StreamingHistogram::AddAbs(const float* values, int64_t n) {
  total_ += n;
  zeros_ += CountZeros(values, n);
  if (width_ == 0.0) {
    counts_[0] += n;
    return;
  }
  const double lo = lo_;
  const double width = width_;
  const int64_t last = static_cast<int64_t>(counts_.size()) - 1;
  int64_t* counts = counts_.data();
  for (int64_t i = 0; i < n; ++i) {
    int64_t b = static_cast<int64_t>(
        (static_cast<double>(std::fabs(values[i])) - lo) / width);
    b = b < 0 ? 0 : (b > last ? last : b);
    ++counts[b];
  }
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

double EntropyThreshold(const StreamingHistogram& h, int num_quantized_bins) {
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
  std::vector<double> p(n), q(n);
  double best = std::numeric_limits<double>::infinity();
  int best_i = n;
  for (int i = nq; i <= n; ++i) {
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
    double kl = std::numeric_limits<double>::infinity();
    if (Smooth(p, i) && Smooth(q, i)) {
      double sp = 0.0;
      double sq = 0.0;
      for (int j = 0; j < i; ++j) {
        sp += p[j];
        sq += q[j];
      }
      kl = 0.0;
      for (int j = 0; j < i; ++j) {
        const double pn = p[j] / sp;
        const double qn = q[j] / sq;
        kl += pn * std::log(pn / qn);
      }
    }
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  return h.Edge(best_i);
}

}  // namespace quantd::calibration
