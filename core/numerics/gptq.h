// GPTQ (Frantar et al., 2022, "GPTQ: Accurate Post-Training Quantization for
// Generative Pre-trained Transformers"): rounds a weight matrix onto its
// grid column by column, each column's rounding error spread over the
// columns not yet rounded so that the layer's output on the calibration
// inputs moves as little as possible. The layer's loss is
//   || X W^T - X Q^T ||^2 = tr((W - Q) H (W - Q)^T),  H = X^T X,
// and after rounding column i the optimal update of the remaining columns F
// is  -(w_i - q_i) / [H_F^-1]_ii * [H_F^-1]_{i,F}  (Optimal Brain Surgeon).
// The upper Cholesky factor of H^-1 holds every [H_F^-1] row this needs, so
// the whole solve is one factorisation plus updates; lazy blocks turn most
// of the updates into one matrix product per block. docs/numerics.md, GPTQ.
#ifndef QUANTD_CORE_NUMERICS_GPTQ_H_
#define QUANTD_CORE_NUMERICS_GPTQ_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/numerics/quant_params.h"

namespace quantd::numerics {

struct GptqOptions {
  // Added to H's diagonal, as a fraction of its mean diagonal, so that H is
  // invertible and the updates stay small (the paper's 1%).
  double dampening = 0.01;
  // Columns with the largest H diagonal (the inputs with the most energy)
  // are rounded first, while most columns are still free to absorb their
  // error. With blocks, each block's parameters are then fixed from the
  // original weights before any column is rounded ("static groups").
  bool act_order = false;
  // Columns per lazy block: the error of a block reaches the columns after
  // it as one matrix product.
  int64_t lazy_block = 128;
  // How each row's or block's range is chosen (weight_params.range).
  RangeSearch range;
};

// How a row's columns share quantization parameters: blocks of `size`
// consecutive columns (0: one set for the whole row), restarting at every
// `segment` columns (0: the whole row is one segment), so that the last
// block of each segment may be short. A Conv weight blocked along its input
// channels, its columns ordered tap by tap, has one segment per kernel tap.
struct GptqBlocking {
  int64_t size = 0;
  int64_t segment = 0;
};

// One weight matrix quantized by GPTQ.
struct GptqResult {
  // rows x cols grid values, row-major, on the grid of the spec.
  std::vector<int32_t> values;
  // One per row (blocking.size 0), or rows x (cols / segment) x
  // BlockCount(segment, size) row-major: block b of row r at r * blocks + b,
  // a row's blocks in column order.
  std::vector<QuantParams> params;
  // The layer loss tr(E H E^T) over the calibration inputs (H undamped)
  // against the output energy tr(W H W^T): GPTQ's result and plain
  // rounding on the same grid rule, as output SQNRs in dB.
  double output_sqnr_db = 0;
  double rtn_output_sqnr_db = 0;
  // The damping that made H positive definite (dampening, raised tenfold
  // per failed factorisation).
  double dampening = 0;
  // With a held-out H (0 without): the energies behind those SQNRs
  // measured with it instead (the weights' output energy, GPTQ's error,
  // rounding's error), unnormalised so that the folds of a cross-check add
  // up.
  double held_out_signal = 0;
  double held_out_gptq_error = 0;
  double held_out_rtn_error = 0;
};

// Quantizes `w` (rows x cols, row-major: one row per output channel, its
// columns in the order of H's rows) with H = X^T X over the calibration
// inputs of the layer (cols x cols, symmetric; any positive scale). Each
// row's parameters come from ChooseQuantParams over the row (blocking.size
// 0) or over each of its blocks, taken from the weights as GPTQ has updated
// them when the block starts (or, with act_order, from the original
// weights). Columns whose H diagonal is zero (inputs that were always zero)
// are rounded to nearest. INVALID_ARGUMENT for sizes that do not match,
// non-finite values, a bad spec or blocking (a segment must divide cols),
// and for an H that stays indefinite after damping up to 1000x.
// `held_out_h` (empty, or cols x cols like h): the second moment of inputs
// the solve did not see, on which the result is also judged (held_out_*).
absl::StatusOr<GptqResult> GptqQuantize(
    absl::Span<const float> w, int64_t rows, int64_t cols,
    absl::Span<const float> h, const QuantSpec& spec,
    const GptqBlocking& blocking, const GptqOptions& options,
    absl::Span<const float> held_out_h = {});

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_GPTQ_H_
