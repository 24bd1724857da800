// The weight quantizer with searched ranges (weight_params.range MSE): each
// tensor, channel or block is rounded (as QuantizeValue rounds) on the range
// ChooseParamsOver picks with a RangeSearch instead of its values' extremes,
// and stored with the scale that keeps its projection on the originals
// (docs/numerics.md: clipping would otherwise shrink it). The fused kernel
// (quantize_kernel.h) stays the path for min/max ranges; with the search
// disabled this one gives its results (and QuantizeTensor's /
// QuantizeTensorBlocked's), only slower.
#ifndef QUANTD_CORE_NUMERICS_RANGE_SEARCH_H_
#define QUANTD_CORE_NUMERICS_RANGE_SEARCH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/numerics/quant_params.h"
#include "core/numerics/quantize_kernel.h"

namespace quantd::numerics {

// Quantizes `data` of `shape` per tensor, per channel along `axis`
// (per_channel, block_size 0) or per block of `block_size` values along
// `axis`: each group's integers from ChooseParamsOver(search) over its values,
// with `search` enabled its stored scale sum(x^2) / sum((q - z) x) (the zero
// point unchanged), and measures the error as MeasureError(data,
// DequantizeTensor(q, shape)) does (up to the order of the double sums, fixed
// whatever the threads). Groups are spread over `parallel_for` in chunks whose
// count does not depend on it. INVALID_ARGUMENT as QuantizeTensor /
// QuantizeTensorBlocked.
absl::StatusOr<QuantizedWithError> QuantizeSearchedAndMeasure(
    absl::Span<const float> data, absl::Span<const int64_t> shape,
    bool per_channel, int axis, int64_t block_size, const QuantSpec& spec,
    const RangeSearch& search, const ParallelFor& parallel_for = nullptr);

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_RANGE_SEARCH_H_
