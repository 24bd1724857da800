// AWQ (Lin et al., 2023, "AWQ: Activation-aware Weight Quantization for LLM
// Compression and Acceleration"): before rounding, input channel c of the
// layers that read one value is multiplied by s_c (and the value divided by
// it, so the float model is unchanged), with s_c = a_c^alpha from the
// channel's activation magnitude a_c. Channels that carry more signal get
// finer grid steps relative to their weights. alpha is searched per value on
// a grid to minimise the readers' output error on the calibration inputs,
//   sum over readers of tr(E H E^T),  E = W - dq(q(W diag(s))) diag(1/s),
// computed exactly from each reader's input second moment H = X^T X (the
// statistics GPTQ uses), so the search never needs another model run.
// alpha = 0 (no rescale) is one of the candidates: AWQ only rescales where
// it lowers that error. docs/numerics.md, "AWQ".
#ifndef QUANTD_CORE_NUMERICS_AWQ_H_
#define QUANTD_CORE_NUMERICS_AWQ_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/numerics/quant_params.h"

namespace quantd::numerics {

// One weight matrix that reads the value (a group of a grouped Conv is its
// own matrix), with how it will be rounded.
struct AwqMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> w;  // rows x cols, row-major: one row per output.
  std::vector<float> h;  // cols x cols: X^T X of the layer's input columns.
  int64_t samples = 1;   // The rows of X behind h (the loss is per row).
  // cols: the value's channel each column reads (Conv: c_in, repeated over
  // the kernel positions).
  std::vector<int64_t> channel;
  // The grid rule of the weight pass: one scale per row (block_size 0),
  // per block of block_size columns, or one for the whole matrix. Blocks
  // restart every `segment` columns (0: the whole row), so the last block
  // of a segment may be short: a Conv weight blocked along its input
  // channels, its columns ordered tap by tap, has one segment per tap.
  bool per_row = true;
  int64_t block_size = 0;
  int64_t segment = 0;
};

// tr(E H E^T) for the matrix rounded after its columns are multiplied by
// s[channel[c]] (E in the original units), and tr(W H W^T), both over at
// most 128 evenly spaced rows (the grid still comes from every row).
struct AwqLoss {
  double error = 0;
  double energy = 0;
};
absl::StatusOr<AwqLoss> ScaledRoundingLoss(const AwqMatrix& m,
                                           absl::Span<const double> s,
                                           const QuantSpec& spec);

// AWQ's factors for magnitudes a (one per channel; zero for channels that
// never carried signal): s_c = max(a_c, 1e-5 max a)^alpha, divided by
// sqrt(max s * min s) so they straddle 1 (the paper's normalisation),
// clamped to [1e-4, 1e4]. alpha 0 gives all ones.
std::vector<double> AwqScales(absl::Span<const double> magnitude, double alpha);

struct AwqChoice {
  bool rescale = false;  // False: alpha 0 (no rescale) had the least error.
  double alpha = 0;
  std::vector<double> s;  // Empty unless rescale.
  double error = 0;       // Summed over the matrices, with s.
  double rtn_error = 0;   // The same without a rescale.
  double energy = 0;      // Summed tr(W H W^T).
  // The searched objective with s and without (see SearchAwqScales).
  double objective = 0;
  double rtn_objective = 0;
};

// Tries alpha in {0, 1/steps, ..., 1} (steps >= 1) and keeps the one whose
// factors minimise the summed error per calibration row,
// sum_m error_m / samples_m, plus `extra(s)` when given (other noise the
// factors change, in the same units: output power per row); a rescale must
// lower that by more than 0.01%. INVALID_ARGUMENT for matrices whose sizes
// disagree with their H or channels, or channels outside `magnitude`.
absl::StatusOr<AwqChoice> SearchAwqScales(
    absl::Span<const AwqMatrix> matrices, absl::Span<const double> magnitude,
    const QuantSpec& spec, int steps,
    const std::function<double(absl::Span<const double>)>& extra = nullptr);

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_AWQ_H_
