#include "core/numerics/gptq.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "Eigen/Cholesky"
#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/numerics/decibels.h"
#include "core/numerics/row_blocks.h"

namespace quantd::numerics {
namespace {

using MatF =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatD =
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The output SQNRs are estimated on at most this many rows (evenly spaced):
// exact, they would cost rows x cols^2 more work, as much as GPTQ itself.
constexpr int64_t kReportRows = 128;

}  // namespace

absl::StatusOr<GptqResult> GptqQuantize(absl::Span<const float> w, int64_t rows,
                                        int64_t cols, absl::Span<const float> h,
                                        const QuantSpec& spec,
                                        const GptqBlocking& blocking,
                                        const GptqOptions& options,
                                        absl::Span<const float> held_out_h) {
  QUANTD_ASSIGN_OR_RETURN(const QuantGrid grid, GridFor(spec));
  if (rows < 1 || cols < 1 || static_cast<int64_t>(w.size()) != rows * cols ||
      static_cast<int64_t>(h.size()) != cols * cols ||
      (!held_out_h.empty() &&
       static_cast<int64_t>(held_out_h.size()) != cols * cols)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPTQ wants a rows x cols weight and a cols x cols H; got ", rows,
        " x ", cols, " with ", w.size(), " weights and ", h.size(), " (",
        held_out_h.size(), " held-out) H entries"));
  }
  const int64_t segment = blocking.segment > 0 ? blocking.segment : cols;
  if (blocking.size < 0 || blocking.segment < 0 || cols % segment != 0 ||
      options.lazy_block < 1 || !(options.dampening >= 0) ||
      !std::isfinite(options.dampening)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPTQ block size ", blocking.size, " in segments of ", blocking.segment,
        " columns (of ", cols, "), lazy block ", options.lazy_block,
        ", dampening ", options.dampening, " are out of range"));
  }
  const RowBlocks blocks = RowBlocks::For(blocking.size, segment, cols);
  for (float v : w) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError("the weight holds NaN or infinity");
    }
  }
  for (absl::Span<const float> stats : {h, held_out_h}) {
    for (float v : stats) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            "the input statistics (H) hold NaN or infinity: the calibration "
            "inputs of this layer overflowed float");
      }
    }
  }
  const MatF original = Eigen::Map<const MatF>(w.data(), rows, cols);
  // H as given (undamped) for the report; the caller's, not copied.
  const Eigen::Map<const MatF> h0(h.data(), cols, cols);

  // Column order: act_order rounds the highest-energy inputs first.
  std::vector<int64_t> perm(cols);
  std::iota(perm.begin(), perm.end(), 0);
  if (options.act_order) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return h0(a, a) > h0(b, b); });
  }
  MatF weights(rows, cols);
  for (int64_t a = 0; a < cols; ++a) weights.col(a) = original.col(perm[a]);
  // H in column order, symmetrised, in double, indices reversed (see
  // below). An input that was always zero constrains nothing: its column is
  // rounded to nearest and its error reaches no other column.
  auto reversed_h = [&](MatD* out) {
    out->resize(cols, cols);
    for (int64_t a = 0; a < cols; ++a) {
      const int64_t pa = perm[cols - 1 - a];
      for (int64_t b = 0; b < cols; ++b) {
        const int64_t pb = perm[cols - 1 - b];
        (*out)(a, b) = 0.5 * (double{h0(pa, pb)} + h0(pb, pa));
      }
    }
    for (int64_t a = 0; a < cols; ++a) {
      if ((*out)(a, a) <= 0) {
        out->row(a).setZero();
        out->col(a).setZero();
        (*out)(a, a) = 1;
      }
    }
  };
  MatD factor;  // J (H + damp I) J, then its Cholesky factor L, in place.
  reversed_h(&factor);
  const double mean_diag = factor.diagonal().mean();

  // U: the upper Cholesky factor of (H + damp I)^-1. With J the reversal,
  // J H J = L L^T gives H^-1 = (J L^-T J)(J L^-1 J), and J L^-1 J is upper
  // triangular with a positive diagonal: U = J L^-1 J. One factorisation
  // and one triangular solve, both in place.
  MatF u;
  double damping = options.dampening;
  bool factored = false;
  for (int attempt = 0; attempt < 4 && !factored; ++attempt) {
    if (attempt > 0) {
      damping = damping > 0 ? damping * 10 : 1e-4;
      reversed_h(&factor);  // The failed attempt overwrote it.
    }
    factor.diagonal().array() += damping * mean_diag;
    Eigen::LLT<Eigen::Ref<MatD>> llt(factor);
    if (llt.info() != Eigen::Success) continue;
    MatD l_inverse = MatD::Identity(cols, cols);
    factor.triangularView<Eigen::Lower>().solveInPlace(l_inverse);
    u.resize(cols, cols);
    for (int64_t a = 0; a < cols; ++a) {
      for (int64_t b = 0; b < cols; ++b) {
        u(a, b) =
            b < a ? 0.0f
                  : static_cast<float>(l_inverse(cols - 1 - a, cols - 1 - b));
      }
    }
    factored = true;
  }
  MatD().swap(factor);
  if (!factored) {
    return absl::InvalidArgumentError(
        absl::StrCat("the input statistics (H, ", cols, " x ", cols,
                     ") stay indefinite after damping by ", damping,
                     " of their mean diagonal"));
  }

  GptqResult out;
  out.dampening = damping;
  out.params.resize(rows * blocks.count);
  out.values.resize(rows * cols);
  if (blocks.size == 0) {
    for (int64_t r = 0; r < rows; ++r) {
      QUANTD_ASSIGN_OR_RETURN(
          out.params[r],
          ChooseParamsOver(&original(r, 0), cols, 1, spec, options.range));
    }
  } else if (options.act_order) {
    // Static groups: the blocks of the original column order, fixed before
    // the permuted columns start moving.
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks.count; ++b) {
        QUANTD_ASSIGN_OR_RETURN(
            out.params[r * blocks.count + b],
            ChooseParamsOver(&original(r, blocks.Begin(b)), blocks.Length(b), 1,
                             spec, options.range));
      }
    }
  }

  const int64_t lazy = options.lazy_block;
  for (int64_t i1 = 0; i1 < cols; i1 += lazy) {
    const int64_t i2 = std::min(cols, i1 + lazy);
    MatF err(rows, i2 - i1);
    for (int64_t a = i1; a < i2; ++a) {
      const int64_t c = perm[a];
      if (!options.act_order && blocks.Starts(c)) {
        // Without act_order a == c: the block's parameters come from the
        // weights as the columns before it have left them.
        const int64_t b = blocks.Of(c);
        for (int64_t r = 0; r < rows; ++r) {
          QUANTD_ASSIGN_OR_RETURN(
              out.params[r * blocks.count + b],
              ChooseParamsOver(&weights(r, a), blocks.Length(b), 1, spec,
                               options.range));
        }
      }
      const float d = u(a, a);
      for (int64_t r = 0; r < rows; ++r) {
        const QuantParams& p = out.params[r * blocks.count + blocks.Of(c)];
        const int32_t q = QuantizeValue(weights(r, a), p, grid);
        out.values[r * cols + c] = q;
        err(r, a - i1) = (weights(r, a) - DequantizeValue(q, p)) / d;
      }
      if (a + 1 < i2) {
        weights.block(0, a + 1, rows, i2 - a - 1).noalias() -=
            err.col(a - i1) * u.block(a, a + 1, 1, i2 - a - 1);
      }
    }
    if (i2 < cols) {
      weights.rightCols(cols - i2).noalias() -=
          err * u.block(i1, i2, i2 - i1, cols - i2);
    }
  }

  // Report: GPTQ's and plain rounding's layer output SQNR on the inputs,
  // from one product of the sampled rows' weights and both errors with H.
  std::vector<int64_t> sample;
  const int64_t step = std::max<int64_t>(1, rows / kReportRows);
  for (int64_t r = 0;
       r < rows && static_cast<int64_t>(sample.size()) < kReportRows;
       r += step) {
    sample.push_back(r);
  }
  const int64_t n = static_cast<int64_t>(sample.size());
  MatF stacked(3 * n, cols);  // Weights, GPTQ's error, rounding's error.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = sample[i];
    stacked.row(i) = original.row(r);
    for (int64_t c = 0; c < cols; ++c) {
      const QuantParams& p = out.params[r * blocks.count + blocks.Of(c)];
      stacked(n + i, c) =
          original(r, c) - DequantizeValue(out.values[r * cols + c], p);
    }
    for (int64_t b = 0; b < blocks.count; ++b) {
      const int64_t begin = blocks.Begin(b);
      const int64_t len = blocks.Length(b);
      QUANTD_ASSIGN_OR_RETURN(
          const QuantParams p,
          ChooseParamsOver(&original(r, begin), len, 1, spec, options.range));
      for (int64_t c = begin; c < begin + len; ++c) {
        stacked(2 * n + i, c) =
            original(r, c) -
            DequantizeValue(QuantizeValue(original(r, c), p, grid), p);
      }
    }
  }
  // tr(X H X^T) of each third of `stacked` (weights, GPTQ's error,
  // rounding's error) for one H.
  struct Energies {
    double signal, gptq, rtn;
  };
  auto energies = [&](const auto& h) {
    const MatF weighted = stacked * h;
    double part[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) {
      part[i] = weighted.middleRows(i * n, n)
                    .cwiseProduct(stacked.middleRows(i * n, n))
                    .template cast<double>()
                    .sum();
    }
    return Energies{part[0], part[1], part[2]};
  };
  const Energies seen = energies(h0);
  out.output_sqnr_db = SqnrDb(seen.signal, seen.gptq);
  out.rtn_output_sqnr_db = SqnrDb(seen.signal, seen.rtn);
  if (!held_out_h.empty()) {
    const Energies held =
        energies(Eigen::Map<const MatF>(held_out_h.data(), cols, cols));
    out.held_out_signal = held.signal;
    out.held_out_gptq_error = held.gptq;
    out.held_out_rtn_error = held.rtn;
  }
  return out;
}

}  // namespace quantd::numerics
