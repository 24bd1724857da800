// Row-major layout helpers shared by the data-movement kernels (shape and
// index ops): strides of a dense shape and the one strided gather loop that
// Transpose, Slice, Einsum's permutes and diagonals are built on.
#ifndef QUANTD_CORE_EXECUTOR_LAYOUT_H_
#define QUANTD_CORE_EXECUTOR_LAYOUT_H_

#include <cstdint>
#include <vector>

namespace quantd::executor {

// Element strides of a dense row-major tensor of `shape`.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape);

// out (shape `shape`, contiguous) [i...] = in[sum_d i_d * strides[d]] for
// elements of `esize` bytes (1, 2, 4 or 8). `in` points at the first element
// to read; strides are in elements and may be 0 or negative.
void StridedCopy(const void* in, int64_t esize,
                 const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& shape, void* out);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_LAYOUT_H_
