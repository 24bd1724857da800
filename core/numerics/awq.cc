#include "core/numerics/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/numerics/row_blocks.h"

namespace quantd::numerics {
namespace {

using MatF =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The loss is estimated on at most this many rows (evenly spaced), as GPTQ's
// report is: exact, it costs rows x cols^2 per candidate.
constexpr int64_t kLossRows = 128;

absl::Status CheckMatrix(const AwqMatrix& m, size_t channels) {
  if (m.rows <= 0 || m.cols <= 0 ||
      static_cast<int64_t>(m.w.size()) != m.rows * m.cols ||
      static_cast<int64_t>(m.h.size()) != m.cols * m.cols ||
      static_cast<int64_t>(m.channel.size()) != m.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("AWQ matrix of ", m.rows, " x ", m.cols, " has ",
                     m.w.size(), " weights, an H of ", m.h.size(), " and ",
                     m.channel.size(), " column channels"));
  }
  for (int64_t c : m.channel) {
    if (c < 0 || static_cast<size_t>(c) >= channels) {
      return absl::InvalidArgumentError(
          absl::StrCat("AWQ column reads channel ", c, " of ", channels));
    }
  }
  if (m.block_size < 0 || m.segment < 0 ||
      (m.segment > 0 && m.cols % m.segment != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AWQ block size ", m.block_size, " in segments of ",
                     m.segment, " columns (of ", m.cols, ") is out of range"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AwqLoss> ScaledRoundingLoss(const AwqMatrix& m,
                                           absl::Span<const double> s,
                                           const QuantSpec& spec) {
  QUANTD_RETURN_IF_ERROR(CheckMatrix(m, s.size()));
  QUANTD_ASSIGN_OR_RETURN(const QuantGrid grid, GridFor(spec));
  const int64_t rows = m.rows, cols = m.cols;
  std::vector<float> col_scale(cols);
  for (int64_t c = 0; c < cols; ++c) {
    col_scale[c] = static_cast<float>(s[m.channel[c]]);
    if (!(col_scale[c] > 0) || !std::isfinite(col_scale[c])) {
      return absl::InvalidArgumentError(
          absl::StrCat("AWQ factor ", col_scale[c], " is not positive"));
    }
  }
  MatF scaled(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      scaled(r, c) = m.w[r * cols + c] * col_scale[c];
    }
  }
  QuantParams whole;
  if (!m.per_row) {
    QUANTD_ASSIGN_OR_RETURN(
        whole, ChooseParamsOver(scaled.data(), rows * cols, 1, spec));
  }
  const int64_t step = std::max<int64_t>(1, rows / kLossRows);
  std::vector<int64_t> sample;
  for (int64_t r = 0;
       r < rows && static_cast<int64_t>(sample.size()) < kLossRows; r += step) {
    sample.push_back(r);
  }
  const int64_t n = static_cast<int64_t>(sample.size());
  MatF stacked(2 * n, cols);  // The sampled rows' weights, then errors.
  const RowBlocks blocks =
      RowBlocks::For(m.per_row ? m.block_size : 0, m.segment, cols);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = sample[i];
    for (int64_t b = 0; b < blocks.count; ++b) {
      const int64_t begin = blocks.Begin(b);
      const int64_t len = blocks.Length(b);
      QuantParams p = whole;
      if (m.per_row) {
        QUANTD_ASSIGN_OR_RETURN(
            p, ChooseParamsOver(&scaled(r, begin), len, 1, spec));
      }
      for (int64_t c = begin; c < begin + len; ++c) {
        const float back =
            DequantizeValue(QuantizeValue(scaled(r, c), p, grid), p) /
            col_scale[c];
        stacked(i, c) = m.w[r * cols + c];
        stacked(n + i, c) = m.w[r * cols + c] - back;
      }
    }
  }
  const Eigen::Map<const MatF> h(m.h.data(), cols, cols);
  const MatF weighted = stacked * h;
  AwqLoss out;
  // Scaled back to every row, so that matrices of different heights add up.
  const double to_all = static_cast<double>(rows) / static_cast<double>(n);
  out.energy =
      to_all *
      weighted.topRows(n).cwiseProduct(stacked.topRows(n)).cast<double>().sum();
  out.error = to_all * weighted.bottomRows(n)
                           .cwiseProduct(stacked.bottomRows(n))
                           .cast<double>()
                           .sum();
  return out;
}

std::vector<double> AwqScales(absl::Span<const double> magnitude,
                              double alpha) {
  std::vector<double> s(magnitude.size(), 1.0);
  if (alpha == 0 || magnitude.empty()) return s;
  double top = 0;
  for (double a : magnitude) top = std::max(top, a);
  if (!(top > 0) || !std::isfinite(top)) return s;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (size_t c = 0; c < s.size(); ++c) {
    s[c] = std::pow(std::max(magnitude[c], 1e-5 * top), alpha);
    lo = std::min(lo, s[c]);
    hi = std::max(hi, s[c]);
  }
  const double mid = std::sqrt(lo * hi);
  for (double& f : s) f = std::clamp(f / mid, 1e-4, 1e4);
  return s;
}

absl::StatusOr<AwqChoice> SearchAwqScales(
    absl::Span<const AwqMatrix> matrices, absl::Span<const double> magnitude,
    const QuantSpec& spec, int steps,
    const std::function<double(absl::Span<const double>)>& extra) {
  if (steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AWQ search needs at least one step, not ", steps));
  }
  for (const AwqMatrix& m : matrices) {
    QUANTD_RETURN_IF_ERROR(CheckMatrix(m, magnitude.size()));
    if (m.samples < 1) {
      return absl::InvalidArgumentError("AWQ matrix has no calibration rows");
    }
  }
  AwqChoice best;
  for (int i = 0; i <= steps; ++i) {
    const double alpha = static_cast<double>(i) / steps;
    std::vector<double> s = AwqScales(magnitude, alpha);
    double error = 0, energy = 0, objective = 0;
    for (const AwqMatrix& m : matrices) {
      QUANTD_ASSIGN_OR_RETURN(const AwqLoss loss,
                              ScaledRoundingLoss(m, s, spec));
      error += loss.error;
      energy += loss.energy;
      objective += loss.error / static_cast<double>(m.samples);
    }
    if (extra) objective += extra(s);
    if (i == 0) {
      best.rtn_error = best.error = error;
      best.rtn_objective = best.objective = objective;
      best.energy = energy;
      continue;
    }
    if (objective < best.objective) {
      best.error = error;
      best.objective = objective;
      best.alpha = alpha;
      best.rescale = true;
      best.s = std::move(s);
    }
  }
  // A gain within float summation noise is no reason to change the model.
  if (best.rescale && !(best.objective < best.rtn_objective * (1 - 1e-4))) {
    best.rescale = false;
    best.alpha = 0;
    best.s.clear();
    best.error = best.rtn_error;
    best.objective = best.rtn_objective;
  }
  return best;
}

}  // namespace quantd::numerics
