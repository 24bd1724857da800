// The sliding-window attributes of Conv and the pools (kernel_shape,
// strides, dilations, pads, auto_pad, ceil_mode) and their resolution into a
// Conv2DShape for a given input: shared by the kernels and by whatever else
// needs a convolution's geometry (GPTQ's input statistics).
#ifndef QUANTD_CORE_EXECUTOR_WINDOW_H_
#define QUANTD_CORE_EXECUTOR_WINDOW_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/executor/conv.h"
#include "core/executor/kernel.h"

namespace quantd::executor {

// The window attributes shared by Conv and the pools, as read at Create.
struct ConvWindow {
  std::vector<int64_t> kernel, strides, dilations, pads;
  enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid } auto_pad;
  bool ceil_mode = false;
};

// Reads the window attributes of info's node (dilations only when
// `dilations`, ceil_mode only when `ceil_mode`); the node's own error for a
// value outside what the kernels run.
absl::Status ReadWindow(NodeInfo& info, bool dilations, bool ceil_mode,
                        ConvWindow* w);

// Resolves the window for an input with spatial dims `in` (1, 2 or, with
// `depth`, 3 of them) and kernel dims `k` into a 2-D shape (1-D becomes
// H = 1; of a 3-D window, its H and W, the depth axis going to *depth); n,
// c, m and group are left for the caller.
absl::StatusOr<Conv2DShape> ResolveWindow(const ConvWindow& w,
                                          const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& k,
                                          DepthWindow* depth = nullptr);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_WINDOW_H_
