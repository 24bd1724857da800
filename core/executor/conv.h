// Fast float convolution and pooling over NCHW data (1-D runs as H = 1):
// im2col (skipped for 1x1) + GEMM for general convolutions, one GEMM per
// image or, when each image has few output positions, one over several images
// side by side; a direct register-tiled kernel when the reduction is short;
// for depthwise ones, a channels-in-lanes kernel on small maps, a
// padded-plane kernel for 3x3 at stride 1 or 2, a direct loop otherwise.
// tests/core/executor/reference_kernels.h holds the slow oracle.
#ifndef QUANTD_CORE_EXECUTOR_CONV_H_
#define QUANTD_CORE_EXECUTOR_CONV_H_

#include <cstdint>

namespace quantd {
class ThreadPool;
}

namespace quantd::executor {

// Every size of one 2-D convolution or pooling window, pads resolved.
// pb/pr are the bottom/right pads (only pooling divisors look at them).
struct Conv2DShape {
  int64_t n = 1, c = 1, h = 1, w = 1;  // Input.
  int64_t m = 1, group = 1;            // Output channels, groups.
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  int64_t oh = 1, ow = 1;  // Output.
};

// y[n, m, oh, ow] = bias[m] + sum over the window of x * w; w is
// [m, c/group, kh, kw], bias may be null.
void Conv2D(const float* x, const float* w, const float* bias, float* y,
            const Conv2DShape& s, ThreadPool* pool);

// The depth axis of a 3-D window (NCDHW): input depth, kernel depth,
// stride, dilation, leading and trailing pad, output depth.
struct DepthWindow {
  int64_t d = 1, kd = 1, sd = 1, dd = 1, pd = 0, pe = 0, od = 1;
};

// y[n, m, od, oh, ow] = bias[m] + sum over the window of x * w, x
// [n, c, d, h, w], w [m, c/group, kd, kh, kw]: for each output depth, the
// sum over the kernel's depth of 2-D convolutions (Conv2D) of one input
// plane with one kernel plane. Correct for any window, not tuned: video
// and volumetric models are calibrated at 2-D speed per plane pair.
void Conv3D(const float* x, const float* w, const float* bias, float* y,
            const Conv2DShape& s, const DepthWindow& depth, ThreadPool* pool);

// How many images one GEMM of a (non-depthwise) convolution covers. A GEMM
// over a few output positions (ResNet-18's last stage at 64x64 has 4 per
// image) spends its time packing the weights, so small outputs of several
// images go into one column matrix; large ones stay one image per GEMM, which
// already pays and keeps the im2col scratch small. The scratch of one batched
// GEMM (columns and output) stays under kMaxBatchedConvScratch floats.
inline constexpr int64_t kMaxBatchedConvScratch = int64_t{1} << 21;  // 8 MiB
// The im2col of one image is built in bands of output rows of at most this
// many floats (at least one row).
inline constexpr int64_t kMaxConvBandScratch = int64_t{1} << 21;  // 8 MiB
int64_t ConvImagesPerGemm(const Conv2DShape& s);

// Conv2D with `images_per_gemm` images per GEMM (>= 1) instead of
// ConvImagesPerGemm's choice; for tests comparing the two layouts.
void Conv2DWithImagesPerGemm(const float* x, const float* w, const float* bias,
                             float* y, const Conv2DShape& s,
                             int64_t images_per_gemm, ThreadPool* pool);

// Depthwise convolutions (group == c == m) have three kernels:
//  - kLanes: 16 channels in the vector lanes over a transposed, padded copy
//    of the image; any window; chosen for 3x3 on small maps (where one
//    channel fills a fraction of a vector) and for every other window while
//    its scratch stays small;
//  - kPlanes: 3x3 at stride 1 or 2 only, one channel's padded plane at a time
//    (16 outputs per vector);
//  - kDirect: any window, one channel at a time.
enum class DepthwiseKernel { kLanes, kPlanes, kDirect };
DepthwiseKernel ChooseDepthwiseKernel(const Conv2DShape& s);
// A depthwise Conv2D with the named kernel (kPlanes falls back to kDirect
// where it does not apply); Conv2D picks ChooseDepthwiseKernel's. For tests
// and benchmarks comparing the kernels.
void DepthwiseConv2D(const float* x, const float* w, const float* bias,
                     float* y, const Conv2DShape& s, DepthwiseKernel kernel,
                     ThreadPool* pool);

// Max over each window (pads never win). c == m.
void MaxPool2D(const float* x, float* y, const Conv2DShape& s,
               ThreadPool* pool);
// Mean over each window. With count_include_pad the divisor counts the
// window's positions inside the padded input, else only the real ones.
void AveragePool2D(const float* x, float* y, const Conv2DShape& s,
                   bool count_include_pad, ThreadPool* pool);

// 3-D pools over x [n, c, d, h, w]: max and sum are separable, so each input
// plane is pooled in 2-D (MaxPool2D / AveragePool2D) and the planes of each
// output depth's window are then combined. An average divides by the
// product of the 2-D count and the depth count, as the 3-D window's count is.
void MaxPool3D(const float* x, float* y, const Conv2DShape& s,
               const DepthWindow& depth, ThreadPool* pool);
void AveragePool3D(const float* x, float* y, const Conv2DShape& s,
                   const DepthWindow& depth, bool count_include_pad,
                   ThreadPool* pool);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_CONV_H_
