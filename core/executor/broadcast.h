// Numpy-style broadcasting, implemented once: every elementwise op (binary,
// Where, Expand, Gemm's C) walks its operands through ForEachBroadcastRun.
#ifndef QUANTD_CORE_EXECUTOR_BROADCAST_H_
#define QUANTD_CORE_EXECUTOR_BROADCAST_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/executor/tensor.h"

namespace quantd::executor {

// The broadcast result of `shapes` (right-aligned; a dim of 1 stretches);
// INVALID_ARGUMENT when two dims differ and neither is 1.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(
    absl::Span<const std::vector<int64_t>> shapes);

// How to walk N inputs broadcast to `out`: the output is cut into runs of
// `inner` contiguous elements; in each run input k advances by
// inner_stride[k] (1, or 0 when it is broadcast along that run).
class BroadcastWalk {
 public:
  // `inputs` must broadcast to `out` (checked by BroadcastShapes).
  BroadcastWalk(const std::vector<int64_t>& out,
                absl::Span<const std::vector<int64_t>> inputs);

  int64_t inner() const { return inner_; }
  int64_t runs() const { return runs_; }
  int64_t inner_stride(int k) const { return inner_stride_[k]; }

  // fn(out_offset, const int64_t* input_offsets) for runs [begin, end).
  template <typename F>
  void ForEachRun(int64_t begin, int64_t end, F&& fn) const {
    const int n = static_cast<int>(inner_stride_.size());
    const int outer_rank = static_cast<int>(dims_.size());
    std::vector<int64_t> idx(outer_rank, 0);
    std::vector<int64_t> off(n, 0);
    // Start the odometer at `begin`.
    int64_t rest = begin;
    for (int d = outer_rank - 1; d >= 0; --d) {
      idx[d] = rest % dims_[d];
      rest /= dims_[d];
      for (int k = 0; k < n; ++k) off[k] += idx[d] * strides_[k][d];
    }
    for (int64_t r = begin; r < end; ++r) {
      fn(r * inner_, static_cast<const int64_t*>(off.data()));
      for (int d = outer_rank - 1; d >= 0; --d) {
        for (int k = 0; k < n; ++k) off[k] += strides_[k][d];
        if (++idx[d] < dims_[d]) break;
        for (int k = 0; k < n; ++k) off[k] -= strides_[k][d] * dims_[d];
        idx[d] = 0;
      }
    }
  }

 private:
  int64_t inner_ = 1;
  int64_t runs_ = 1;
  std::vector<int64_t> dims_;                  // Outer (collapsed) dims.
  std::vector<std::vector<int64_t>> strides_;  // [input][outer dim].
  std::vector<int64_t> inner_stride_;
};

// `t` broadcast to `shape` (a copy; `shape` must be a broadcast of t's).
Tensor ExpandTo(const Tensor& t, const std::vector<int64_t>& shape);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_BROADCAST_H_
