// The fused weight quantizer: range, parameters, quantized values and error
// statistics of a float tensor read straight from its bytes, vectorised, in
// one pass over memory per cache-sized tile (two streaming passes when a
// range spans the whole tensor: per tensor, or channels on the innermost
// axis). QuantizeTensor /
// QuantizeTensorBlocked + DequantizeTensor + MeasureError
// (core/numerics/quant_params.h) are its reference.
#ifndef QUANTD_CORE_NUMERICS_QUANTIZE_KERNEL_H_
#define QUANTD_CORE_NUMERICS_QUANTIZE_KERNEL_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/numerics/float_bytes.h"
#include "core/numerics/quant_params.h"

namespace quantd::numerics {

// Runs fn(i) for i in [0, n) and returns when all are done, possibly
// concurrently (PassHooks::parallel_for has this shape). Empty: serially.
using ParallelFor =
    std::function<void(int64_t n, const std::function<void(int64_t)>& fn)>;

struct QuantizedWithError {
  QuantizedTensor q;
  ErrorStats error;
};

// With block_size == 0: QuantizeTensor(data, shape, per_channel, axis, spec);
// with block_size > 0: QuantizeTensorBlocked(data, shape, axis, block_size,
// spec). Values and params are bit for bit those of the reference (rounding
// half to even assumes the default FE_TONEAREST mode, as QuantizeValue
// does), and so are the error statuses. `error` is
// MeasureError(data, DequantizeTensor(q, shape)) up to the order of the
// double sums (the same per-value terms, summed in an order that does not
// depend on the number of threads). Work is split over `parallel_for` in
// tiles whose count does not depend on it either.
absl::StatusOr<QuantizedWithError> QuantizeAndMeasure(
    FloatBytes data, absl::Span<const int64_t> shape, bool per_channel,
    int axis, int64_t block_size, const QuantSpec& spec,
    const ParallelFor& parallel_for = nullptr);

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_QUANTIZE_KERNEL_H_
