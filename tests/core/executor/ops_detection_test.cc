// NonMaxSuppression, RoiAlign, GridSample, MaxUnpool and LRN of
// ops_detection.cc against hand-worked cases and goldens computed with
// PyTorch / numpy (the generating code is quoted next to each golden).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

Tensor F32(std::vector<int64_t> shape, std::vector<float> v) {
  return T1<float>(std::move(shape), std::move(v));
}
// ======================================================== NonMaxSuppression

OneNode Nms(Tensor boxes, Tensor scores, Tensor max_out, Tensor iou,
            Tensor score_thr) {
  OneNode n("NonMaxSuppression", 11);
  n.inputs = {std::move(boxes), std::move(scores), std::move(max_out),
              std::move(iou), std::move(score_thr)};
  return n;
}

TEST(OpsDetectionTest, NmsCenterBoxesTiesAndClasses) {
  // Center format: box 0 is [0,0]-[1,1], box 1 is shifted by 0.1 in x
  // (IoU 0.9 / 1.1 = 0.82 with box 0), box 2 is far away.
  const Tensor boxes = F32({1, 3, 4}, {0.5f, 0.5f, 1, 1,  //
                                       0.6f, 0.5f, 1, 1,  //
                                       5, 5, 1, 1});
  const Tensor scores = F32({1, 2, 3}, {0.8f, 0.9f, 0.8f,  //
                                        0.5f, 0.5f, 0.1f});
  OneNode n = Nms(boxes, scores, I64({1}, {2}), F32({1}, {0.5f}), Tensor());
  n.Int("center_point_box", 1);
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  // Class 0: box 1 (0.9) suppresses box 0; box 2 wins its tie with nothing
  // left. Class 1: boxes 0 and 1 tie at 0.5, the lower index goes first and
  // suppresses box 1.
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(Values<int64_t>(*y),
            (std::vector<int64_t>{0, 0, 1, 0, 0, 2, 0, 1, 0, 0, 1, 2}));

  // score_threshold keeps strictly greater scores only: class 1 is empty.
  n.inputs[4] = F32({1}, {0.5f});
  y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<int64_t>(*y), (std::vector<int64_t>{0, 0, 1, 0, 0, 2}));
}

TEST(OpsDetectionTest, NmsCornerBoxesLimitsAndTouchingBoxes) {
  // [y1, x1, y2, x2], the second box flipped: boxes 0 and 1 share an edge
  // (no overlap), box 2 equals box 0.
  const Tensor boxes = F32({1, 3, 4}, {0, 0, 1, 1,  //
                                       1, 2, 0, 1,  //
                                       0, 0, 1, 1});
  const Tensor scores = F32({1, 1, 3}, {0.3f, 0.2f, 0.1f});
  // IoU threshold 0: touching boxes do not suppress each other, identical
  // ones do.
  OneNode n = Nms(boxes, scores, I64({1}, {10}), F32({1}, {0}), Tensor());
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<int64_t>(*y), (std::vector<int64_t>{0, 0, 0, 0, 0, 1}));
  // At most one box per class.
  n.inputs[2] = I64({}, {1});
  y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<int64_t>(*y), (std::vector<int64_t>{0, 0, 0}));
  // No max_output_boxes_per_class: nothing is selected.
  n.inputs[2] = Tensor();
  y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(y->dtype(), TP::INT64);
}

TEST(OpsDetectionTest, NmsRejectsBadInputs) {
  const Tensor scores = F32({1, 1, 2}, {0.3f, 0.2f});
  absl::StatusOr<Tensor> y = Nms(F32({1, 2, 3}, {0, 0, 1, 1, 0, 0}), scores,
                                 I64({1}, {3}), Tensor(), Tensor())
                                 .Run1();
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  const Tensor boxes = F32({1, 2, 4}, {0, 0, 1, 1, 0, 0, 1, 1});
  y = Nms(boxes, F32({1, 1, 3}, {1, 2, 3}), I64({1}, {3}), Tensor(), Tensor())
          .Run1();
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  y = Nms(boxes, scores, I64({1}, {3}), F32({1}, {1.5f}), Tensor()).Run1();
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  OneNode n = Nms(boxes, scores, I64({1}, {3}), Tensor(), Tensor());
  n.Int("center_point_box", 2);
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kUnimplemented);
}

// ================================================================= RoiAlign

// X[0] holds 4 * row + col, which bilinear sampling reproduces exactly, so
// every average below is the average of the sample coordinates; X[1] is
// X[0] + 100.
Tensor RoiX() {
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i)
    v[i] = static_cast<float>(i % 16 + 100 * (i / 16));
  return F32({2, 1, 4, 4}, v);
}

OneNode RoiAlign(int opset, Tensor rois, Tensor batch) {
  OneNode n("RoiAlign", opset);
  n.inputs = {RoiX(), std::move(rois), std::move(batch)};
  n.Int("output_height", 2).Int("output_width", 2);
  return n;
}

TEST(OpsDetectionTest, RoiAlignHalfPixelAndOutputHalfPixel) {
  const Tensor roi = F32({2, 4}, {0, 0, 4, 4, 0, 0, 4, 4});
  const Tensor batch = I64({2}, {1, 0});
  // half_pixel: bins of 2 pixels starting at -0.5, samples at rows / cols
  // {0, 1} and {2, 3}: averages 4 * 0.5 + 0.5 = 2.5, 4.5, 10.5, 12.5.
  OneNode n = RoiAlign(16, roi, batch);
  n.Int("sampling_ratio", 2);
  ThreadPool pool(2);
  absl::StatusOr<Tensor> y = n.Run1(&pool);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y,
              F32({2, 1, 2, 2},
                  {102.5f, 104.5f, 110.5f, 112.5f, 2.5f, 4.5f, 10.5f, 12.5f}),
              1e-5, "half_pixel");
  // output_half_pixel (opset 10's only behaviour): samples at 0.5, 1.5 and
  // 2.5, 3.5 (3.5 clamps to the last row, 3): averages 1 and 2.75.
  const std::vector<float> legacy = {5, 6.75f, 12, 13.75f};
  n.String("coordinate_transformation_mode", "output_half_pixel");
  y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(
      *y, F32({2, 1, 2, 2}, {105, 106.75f, 112, 113.75f, 5, 6.75f, 12, 13.75f}),
      1e-5, "output_half_pixel");
  OneNode v10 = RoiAlign(10, F32({1, 4}, {0, 0, 4, 4}), I64({1}, {0}));
  v10.Int("sampling_ratio", 2);
  y = v10.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, F32({1, 1, 2, 2}, legacy), 1e-5, "opset 10");
}

TEST(OpsDetectionTest, RoiAlignAdaptiveSamplingAndMax) {
  // sampling_ratio 0: ceil(4 / 1) = 4 samples per axis at 0, 1, 2, 3.
  OneNode n("RoiAlign", 16);
  n.inputs = {RoiX(), F32({1, 4}, {0, 0, 4, 4}), I64({1}, {0})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, F32({1, 1, 1, 1}, {7.5f}), 1e-5, "adaptive");
  // Max over samples that sit on pixels is max pooling of those pixels.
  OneNode m = RoiAlign(16, F32({1, 4}, {0, 0, 4, 4}), I64({1}, {0}));
  m.Int("sampling_ratio", 2).String("mode", "max");
  y = m.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, F32({1, 1, 2, 2}, {5, 7, 13, 15}), 1e-5, "max");
  // Spatial scale 0.5 on a roi twice as large is the same roi.
  OneNode s = RoiAlign(16, F32({1, 4}, {0, 0, 8, 8}), I64({1}, {1}));
  s.Int("sampling_ratio", 2).Float("spatial_scale", 0.5f);
  y = s.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, F32({1, 1, 2, 2}, {102.5f, 104.5f, 110.5f, 112.5f}), 1e-5,
              "spatial_scale");
  // A spatial scale that takes finite RoIs past float range makes NaN
  // sample positions (inf - inf): they sample nothing (fuzz finding 26,
  // a NaN cast to int64), in both modes.
  for (const char* mode : {"avg", "max"}) {
    OneNode far = RoiAlign(16, F32({1, 4}, {2, 2, 3, 3}), I64({1}, {0}));
    far.Int("sampling_ratio", 2).String("mode", mode);
    far.Float("spatial_scale", 3.4e38f);
    far.String("coordinate_transformation_mode", "output_half_pixel");
    y = far.Run1();
    ASSERT_TRUE(y.ok()) << mode << ": " << y.status();
    for (int64_t i = 0; i < y->size(); ++i) {
      EXPECT_FALSE(std::isnan(y->data<float>()[i])) << mode << " " << i;
    }
  }
}

// Goldens from ONNX Runtime 1.30 (onnxruntime-node via scripts/ort_eval.js
// run) on single-node RoiAlign-16 models: X numpy default_rng(11)
// uniform(-2, 2) of shape [3, 2, 5, 6] rounded to 2 places, these rois with
// batch_indices [2, 0, 1], output 2x3, spatial_scale 0.8. The second and
// third RoIs reach outside the map; max mode is ONNX Runtime's (and ONNX's
// reference's) largest weighted corner, not a max of interpolated values.
struct RoiCase {
  const char* coord;
  const char* mode;
  int sampling_ratio;
  std::vector<float> want;
};
const std::vector<float> kRoiX = {
    -1.49f, -0.0f,  0.41f,  -1.89f, -1.41f, 1.71f,  -1.72f, -1.48f, 1.79f,
    0.49f,  -0.52f, 0.05f,  0.65f,  -0.9f,  -1.45f, 1.15f,  0.68f,  0.05f,
    1.27f,  0.2f,   1.92f,  -1.18f, 0.21f,  -0.07f, -0.59f, 0.37f,  -1.06f,
    1.21f,  1.47f,  -1.48f, -0.13f, -0.89f, -1.67f, 1.58f,  -0.28f, -1.41f,
    0.69f,  -1.19f, 1.61f,  -1.13f, -1.87f, -1.2f,  -0.62f, -0.12f, 1.62f,
    0.79f,  -0.64f, -1.93f, -1.36f, 1.99f,  -0.16f, 0.76f,  -1.78f, -1.86f,
    1.38f,  0.35f,  -0.77f, -0.73f, -1.64f, -1.31f, -1.9f,  1.36f,  -0.13f,
    -1.49f, 0.96f,  -1.22f, -1.75f, 0.39f,  1.58f,  -1.89f, 1.22f,  -1.24f,
    -1.63f, -1.93f, -0.83f, 0.91f,  -0.03f, 1.41f,  -1.13f, -0.74f, -0.97f,
    1.91f,  1.76f,  -0.64f, -0.26f, -0.74f, 0.99f,  -1.84f, -1.73f, -0.38f,
    -1.02f, 1.38f,  0.97f,  0.18f,  0.65f,  0.77f,  1.12f,  1.71f,  -1.4f,
    0.5f,   -1.43f, -0.23f, 1.15f,  1.58f,  1.04f,  -1.86f, -0.56f, -1.35f,
    2.0f,   -1.42f, -1.02f, -0.57f, -1.76f, 1.48f,  0.55f,  -1.36f, -0.01f,
    -1.69f, 0.44f,  -1.07f, -1.85f, -1.54f, 0.22f,  0.55f,  -0.7f,  0.57f,
    -0.59f, -1.48f, -0.74f, -0.42f, 1.65f,  -1.54f, -1.66f, 0.25f,  1.85f,
    1.63f,  0.8f,   -1.73f, 1.23f,  0.73f,  -1.42f, -0.14f, -1.8f,  1.21f,
    0.87f,  1.22f,  1.04f,  -0.93f, 1.16f,  -1.0f,  -1.45f, -0.44f, -0.01f,
    -0.86f, 0.42f,  0.41f,  -1.04f, 0.49f,  -0.57f, 0.94f,  -0.84f, 1.2f,
    -0.34f, 0.21f,  0.69f,  0.07f,  -0.97f, 1.92f,  -1.62f, -0.7f,  0.2f,
    -1.89f, -1.38f, 1.2f,   1.14f,  0.55f,  1.61f,  1.02f,  -0.8f,  0.58f};
const std::vector<float> kRoiRois = {0.3f, 0.7f, 4.1f, 3.6f, -1.5f, 2.2f,
                                     3.0f, 6.5f, 1.2f, 0.4f, 1.9f,  1.1f};
const RoiCase kRoiCases[] = {
    {"half_pixel",
     "avg",
     0,
     {-1.1581f,     -1.213728f,  -0.3059493f, -0.9889123f, 0.165093f,
      1.062778f,    -0.8519f,    0.01906401f, -0.1878907f, -0.3674126f,
      0.2692659f,   0.3143413f,  0.226575f,   0.2250401f,  -0.4874948f,
      -0.02065003f, 0.03092996f, 0.169625f,   -0.3102251f, -0.43748f,
      0.5447651f,   0.28585f,    0.6241201f,  0.4066448f,  -0.09613329f,
      0.5124f,      1.120933f,   -0.2088693f, 0.349488f,   0.9078453f,
      0.308f,       0.756f,      1.204f,      0.5812321f,  0.9481441f,
      1.315056f}},
    {"half_pixel",
     "avg",
     2,
     {-1.1581f,     -1.213728f,  -0.3059493f, -0.9889123f, 0.165093f,
      1.062778f,    -0.8519f,    0.01906401f, -0.1878907f, -0.3674126f,
      0.2692659f,   0.3143413f,  0.226575f,   0.2250401f,  -0.4874948f,
      -0.02065003f, 0.03092996f, 0.169625f,   -0.3102251f, -0.43748f,
      0.5447651f,   0.28585f,    0.6241201f,  0.4066448f,  -0.1031792f,
      0.5022181f,   1.107615f,   -0.2088692f, 0.3494881f,  0.9078453f,
      0.3250771f,   0.7680091f,  1.210941f,   0.5812322f,  0.9481441f,
      1.315056f}},
    {"half_pixel",
     "max",
     0,
     {-0.0f,      0.07340667f, 0.1882833f, 0.11375f,   0.8641965f, 1.64983f,
      0.22785f,   0.452662f,   0.460412f,  0.12005f,   0.322322f,  0.6153419f,
      0.6985002f, 0.6985002f,  0.6336004f, 0.7492999f, 0.7492999f, 0.67968f,
      0.2139f,    0.4378002f,  1.0945f,    1.38f,      1.38f,      1.1741f,
      0.7525334f, 1.0064f,     1.260267f,  0.5719253f, 0.764864f,  0.9578026f,
      0.7636f,    1.0212f,     1.2788f,    0.580336f,  0.776112f,  0.9718879f}},
    {"half_pixel",
     "max",
     2,
     {-0.0f,      0.07340667f, 0.1882833f, 0.11375f,   0.8641965f, 1.64983f,
      0.22785f,   0.452662f,   0.460412f,  0.12005f,   0.322322f,  0.6153419f,
      0.6985002f, 0.6985002f,  0.6336004f, 0.7492999f, 0.7492999f, 0.67968f,
      0.2139f,    0.4378002f,  1.0945f,    1.38f,      1.38f,      1.1741f,
      0.816f,     1.069867f,   1.323733f,  0.6772799f, 0.8879893f, 1.098699f,
      0.828f,     1.0856f,     1.3432f,    0.6872399f, 0.9010479f, 1.114856f}},
    {"output_half_pixel",
     "avg",
     0,
     {-1.06239f,  -0.3567976f, 0.06035072f,  0.09329342f, 0.7533665f,
      1.029413f,  0.03570736f, -0.09903598f, 0.389386f,   -0.2304534f,
      0.3864467f, -0.2710268f, 0.9723998f,   0.2442099f,  0.2673123f,
      -0.5063f,   0.01489f,    -0.5024199f,  -0.9917997f, 0.25995f,
      0.6923125f, 1.2567f,     0.75696f,     -0.4469825f, 0.8118626f,
      0.824396f,  0.8369294f,  0.3775352f,   0.7721019f,  1.166669f,
      1.321227f,  0.6715598f,  0.02189308f,  1.329754f,   0.353054f,
      -0.6236461f}},
    {"output_half_pixel",
     "avg",
     2,
     {-1.06239f,  -0.3567976f, 0.06035072f,  0.09329342f, 0.7533665f,
      1.029413f,  0.03570736f, -0.09903598f, 0.389386f,   -0.2304534f,
      0.3864467f, -0.2710268f, 0.9723998f,   0.2442099f,  0.2673123f,
      -0.5063f,   0.01489f,    -0.5024199f,  -0.9917997f, 0.25995f,
      0.6923125f, 1.2567f,     0.75696f,     -0.4469825f, 0.8118626f,
      0.824396f,  0.8369294f,  0.3307615f,   0.6999365f,  1.069112f,
      1.321226f,  0.6715598f,  0.02189302f,  1.335461f,   0.4070693f,
      -0.5213225f}},
    {"output_half_pixel",
     "max",
     0,
     {0.1075f,     0.7848935f, 0.6822095f, 0.4307001f, 1.80708f,   1.570668f,
      0.4165f,     0.292744f,  0.7776934f, 0.2079f,    0.673992f,  0.327888f,
      1.2065f,     0.8445498f, 1.641599f,  0.1142999f, 0.333f,     0.185f,
      0.06900027f, 1.70145f,   1.18098f,   1.38f,      0.966f,     0.175f,
      0.5107253f,  0.4142761f, 0.7144762f, 0.316758f,  0.675924f,  1.165724f,
      0.8512381f,  0.526338f,  0.3308993f, 1.388862f,  0.8587619f, 0.3286619f}},
    {"output_half_pixel",
     "max",
     2,
     {0.1075f,     0.7848935f, 0.6822095f, 0.4307001f, 1.80708f,   1.570668f,
      0.4165f,     0.292744f,  0.7776934f, 0.2079f,    0.673992f,  0.327888f,
      1.2065f,     0.8445498f, 1.641599f,  0.1142999f, 0.333f,     0.185f,
      0.06900027f, 1.70145f,   1.18098f,   1.38f,      0.966f,     0.175f,
      0.7220919f,  0.5966345f, 0.9626679f, 0.3525795f, 0.8112512f, 1.308951f,
      1.13695f,    0.7408004f, 0.4719535f, 1.545925f,  1.007275f,  0.4686253f}},
};

TEST(OpsDetectionTest, RoiAlignMatchesOnnxRuntime) {
  ThreadPool pool(2);
  for (const RoiCase& c : kRoiCases) {
    for (int opset : {10, 16}) {
      const bool legacy = std::string(c.coord) == "output_half_pixel";
      if (opset == 10 && !legacy) continue;
      OneNode n("RoiAlign", opset);
      n.inputs = {F32({3, 2, 5, 6}, kRoiX), F32({3, 4}, kRoiRois),
                  I64({3}, {2, 0, 1})};
      n.constant = {false, true, true};
      n.String("mode", c.mode).Int("sampling_ratio", c.sampling_ratio);
      n.Int("output_height", 2).Int("output_width", 3);
      n.Float("spatial_scale", 0.8f);
      // Opset 10 has no coordinate_transformation_mode: output_half_pixel.
      if (opset == 16) n.String("coordinate_transformation_mode", c.coord);
      absl::StatusOr<Tensor> y = n.Run1(opset == 16 ? &pool : nullptr);
      const std::string what = absl::StrCat(c.coord, " ", c.mode, " ratio ",
                                            c.sampling_ratio, " opset ", opset);
      ASSERT_TRUE(y.ok()) << what << ": " << y.status();
      ExpectClose(*y, F32({3, 2, 2, 3}, c.want), 2e-6, what);
    }
  }
}

// Work that grows with the RoI values is bounded: a RoI of a million pixels
// sampled adaptively into one bin (10^12 samples), or a fixed sampling
// ratio of 2048 (2^22 samples in one bin), is refused, not computed.
TEST(OpsDetectionTest, RoiAlignRefusesUnboundedWork) {
  OneNode huge("RoiAlign", 16);
  huge.inputs = {RoiX(), F32({1, 4}, {0, 0, 1e6f, 1e6f}), I64({1}, {0})};
  ExpectError(huge.Run1(), absl::StatusCode::kInvalidArgument,
              "refused as unbounded work");
  OneNode dense = RoiAlign(16, F32({1, 4}, {0, 0, 4, 4}), I64({1}, {0}));
  dense.Int("sampling_ratio", 2048);
  ExpectError(dense.Run1(), absl::StatusCode::kInvalidArgument,
              "2^20 samples per bin");
  // 1024 x 1024 samples in each of 2x2 bins (2^22 in all) still run.
  OneNode fine = RoiAlign(16, F32({1, 4}, {0, 0, 4, 4}), I64({1}, {0}));
  fine.Int("sampling_ratio", 1024);
  EXPECT_TRUE(fine.Run1().ok());
}

TEST(OpsDetectionTest, RoiAlignRejectsBadInputs) {
  const Tensor roi = F32({1, 4}, {0, 0, 4, 4});
  for (int64_t b : {2, -1}) {
    absl::StatusOr<Tensor> y = RoiAlign(16, roi, I64({1}, {b})).Run1();
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << b;
  }
  EXPECT_EQ(RoiAlign(16, F32({1, 3}, {0, 0, 4}), I64({1}, {0}))
                .Run1()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RoiAlign(16, roi, I64({2}, {0, 0})).Run1().status().code(),
            absl::StatusCode::kInvalidArgument);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(RoiAlign(16, F32({1, 4}, {0, nan, 4, 4}), I64({1}, {0}))
                .Run1()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A huge roi with adaptive sampling would take ~10^24 samples.
  EXPECT_EQ(RoiAlign(16, F32({1, 4}, {0, 0, 1e12f, 1e12f}), I64({1}, {0}))
                .Run1()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // An empty feature map reads nothing: all zeros.
  OneNode empty("RoiAlign", 16);
  empty.inputs = {Tensor(TP::FLOAT, {1, 2, 0, 3}), roi, I64({1}, {0})};
  absl::StatusOr<Tensor> y = empty.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<float>(*y), (std::vector<float>{0, 0}));
  OneNode n = RoiAlign(16, roi, I64({1}, {0}));
  n.String("coordinate_transformation_mode", "tf_crop_and_resize");
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kUnimplemented);
  OneNode m = RoiAlign(16, roi, I64({1}, {0}));
  m.String("mode", "median");
  EXPECT_EQ(m.Run1().status().code(), absl::StatusCode::kUnimplemented);
}

// =============================================================== GridSample

// Golden from PyTorch 1.13 (double, then printed to 7 digits):
//   F.grid_sample(X, G, mode=..., padding_mode=..., align_corners=...)
// with X and G these values (numpy default_rng(7) uniforms rounded to 2
// places). torch and ONNX agree for nearest / bilinear under every padding
// and for bicubic with zeros padding (they clamp bicubic taps differently
// under border / reflection).
const std::vector<float> kGsX = {
    0.5f,  1.59f,  1.1f,   -1.1f,  -0.8f,  1.49f,  -1.98f, 1.28f,
    1.19f, -0.13f, -0.79f, -0.89f, -0.98f, -0.22f, 0.02f,  0.21f,
    1.98f, 1.17f,  0.49f,  1.96f,  -1.14f, -1.36f, 0.45f,  -1.82f};
const std::vector<float> kGsGrid = {-1.21f, 0.04f, -0.09f, 1.08f,
                                    0.34f,  0.04f, -0.01f, -0.66f,
                                    -1.27f, -0.8f, 0.5f,   -0.78f};

struct GsCase {
  const char* mode;
  const char* pad;
  int align;
  std::vector<float> want;
};

const GsCase kGsCases[] = {
    {"nearest",
     "zeros",
     0,
     {0, 0, -1.98f, 1.59f, 0, 1.1f, 0, 0, 0.49f, -0.22f, 0, 0.02f}},
    {"nearest",
     "zeros",
     1,
     {-0.8f, -0.13f, -1.98f, 1.59f, 0.5f, 1.1f, 1.98f, -1.36f, 0.49f, -0.22f,
      -0.98f, 0.02f}},
    {"nearest",
     "border",
     0,
     {-0.8f, -0.13f, -1.98f, 1.59f, 0.5f, 1.1f, 1.98f, -1.36f, 0.49f, -0.22f,
      -0.98f, 0.02f}},
    {"nearest",
     "reflection",
     1,
     {-0.8f, -0.13f, -1.98f, 1.59f, 0.5f, 1.1f, 1.98f, -1.36f, 0.49f, -0.22f,
      -0.98f, 0.02f}},
    {"bilinear",
     "zeros",
     0,
     {-0.05444795f, -0.129656f, -1.358088f, 1.339496f, 0, 0, 0.1434239f,
      -0.296704f, 0.711808f, -0.09531604f, 0, 0.09545f}},
    {"bilinear",
     "zeros",
     1,
     {-0.493474f, -0.341228f, -1.901144f, 0.8269481f, 0.1428f, 0.1727f,
      1.270812f, -0.643402f, 0.501604f, 0.217292f, -0.23086f, 0.2413f}},
    {"bilinear",
     "border",
     0,
     {-0.6806f, -0.3412f, -1.358088f, 1.339496f, 0.5f, 0, 1.7928f, -0.7808f,
      0.711808f, -0.09531604f, -0.98f, 0.115f}},
    {"bilinear",
     "border",
     1,
     {-0.7204f, -0.3709f, -1.901144f, 0.8269481f, 0.24f, 0.1727f, 1.8552f,
      -0.69935f, 0.501604f, 0.217292f, -0.388f, 0.2413f}},
    {"bilinear",
     "reflection",
     0,
     {-0.6806f, -0.3412f, -1.358088f, 1.339496f, 0.5436f, 0, 1.7928f, -0.7808f,
      0.711808f, -0.09531604f, -0.9496f, 0.115f}},
    {"bilinear",
     "reflection",
     1,
     {-0.04453588f, -0.323352f, -1.901144f, 0.8269481f, 0.77865f, 0.1727f,
      1.607484f, -0.569658f, 0.501604f, 0.217292f, -0.2073701f, 0.2413f}},
    {"bicubic",
     "zeros",
     0,
     {-0.05821353f, -0.2389998f, -1.817588f, 1.657669f, -0.01484143f,
      -0.09150942f, 0.1293539f, -0.3663357f, 0.6999258f, -0.04360409f,
      0.03018274f, 0.02979399f}},
    {"bicubic",
     "zeros",
     1,
     {-0.7895072f, -0.5094932f, -2.029314f, 1.241649f, 0.004119823f, 0.1377838f,
      1.476626f, -0.6376342f, 0.5083066f, 0.2181836f, -0.3483626f, 0.2687876f}},
};

// Bicubic with border / reflection padding: goldens from ONNX Runtime 1.30
// (onnxruntime-node via scripts/ort_eval.js run on GridSample-16 models),
// same X and grid; torch 1.13's grid_sample gives the same values (to 1e-6).
// Both pad each of the 16 taps, not the sampling point.
const GsCase kGsCubicOrtCases[] = {
    {"bicubic",
     "border",
     0,
     {-0.7665468f, -0.5367529f, -1.84068f, 1.645469f, 0.6248002f, 0.00934352f,
      1.952938f, -0.8242551f, 0.6625019f, -0.04324745f, -1.26416f,
      0.04757913f}},
    {"bicubic",
     "border",
     1,
     {-1.018979f, -0.5417616f, -2.028492f, 1.057447f, 0.07419871f, 0.1065797f,
      2.05716f, -0.6768724f, 0.5076522f, 0.2235144f, -0.4346501f, 0.2359738f}},
    {"bicubic",
     "reflection",
     0,
     {-0.8765405f, -0.6464145f, -1.84068f, 1.645469f, 0.6856371f, 0.02066575f,
      1.995817f, -0.9909054f, 0.6625019f, -0.04324745f, -1.306043f,
      0.02916225f}},
    {"bicubic",
     "reflection",
     1,
     {-0.188757f, -0.4945861f, -2.026881f, 1.270719f, 0.7704913f, 0.2674884f,
      1.839184f, -0.585647f, 0.5076976f, 0.1482299f, -0.4987256f, 0.1841252f}},
};

TEST(OpsDetectionTest, GridSampleBicubicPaddingMatchesOnnxRuntime) {
  for (const GsCase& c : kGsCubicOrtCases) {
    OneNode n("GridSample", 16);
    n.inputs = {F32({1, 2, 3, 4}, kGsX), F32({1, 2, 3, 2}, kGsGrid)};
    n.String("mode", c.mode).String("padding_mode", c.pad);
    n.Int("align_corners", c.align);
    absl::StatusOr<Tensor> y = n.Run1();
    const std::string what = absl::StrCat(c.pad, " align ", c.align);
    ASSERT_TRUE(y.ok()) << what << ": " << y.status();
    ExpectClose(*y, F32({1, 2, 2, 3}, c.want), 2e-6, what);
  }
}

TEST(OpsDetectionTest, GridSampleMatchesTorch) {
  ThreadPool pool(2);
  for (const GsCase& c : kGsCases) {
    for (int opset : {16, 20}) {
      std::string mode = c.mode;
      if (opset == 20 && mode != "nearest") {
        mode = mode == "bilinear" ? "linear" : "cubic";
      }
      OneNode n("GridSample", opset);
      n.inputs = {F32({1, 2, 3, 4}, kGsX), F32({1, 2, 3, 2}, kGsGrid)};
      n.String("mode", mode).String("padding_mode", c.pad);
      n.Int("align_corners", c.align);
      absl::StatusOr<Tensor> y = n.Run1(opset == 20 ? &pool : nullptr);
      const std::string what =
          absl::StrCat(mode, " ", c.pad, " align ", c.align, " opset ", opset);
      ASSERT_TRUE(y.ok()) << what << ": " << y.status();
      ExpectClose(*y, F32({1, 2, 2, 3}, c.want), 1e-5, what);
    }
  }
}

TEST(OpsDetectionTest, GridSampleEdgesAndRefusals) {
  // One pixel with align_corners: every coordinate reflects onto it.
  OneNode one("GridSample", 16);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  one.inputs = {F32({1, 1, 1, 1}, {3}),
                F32({1, 1, 3, 2}, {5, -7, 0.3f, 0.2f, nan, 0})};
  one.String("padding_mode", "reflection").Int("align_corners", 1);
  absl::StatusOr<Tensor> y = one.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->size(), 3);
  EXPECT_FLOAT_EQ(y->data<float>()[0], 3);
  EXPECT_FLOAT_EQ(y->data<float>()[1], 3);
  // A NaN coordinate samples nothing: the output is NaN.
  EXPECT_TRUE(std::isnan(y->data<float>()[2]));

  // Far outside with zeros padding: zero, whatever the mode.
  for (const char* mode : {"nearest", "bilinear", "bicubic"}) {
    OneNode far("GridSample", 16);
    far.inputs = {F32({1, 1, 2, 2}, {1, 2, 3, 4}),
                  F32({1, 1, 2, 2}, {1e30f, 0, -3, 2.9f})};
    far.String("mode", mode);
    y = far.Run1();
    ASSERT_TRUE(y.ok()) << mode << ": " << y.status();
    EXPECT_EQ(Values<float>(*y), (std::vector<float>{0, 0})) << mode;
  }

  // Far outside with border padding: the nearest edge pixel (top right).
  for (const char* mode : {"nearest", "bilinear", "bicubic"}) {
    OneNode far("GridSample", 16);
    far.inputs = {F32({1, 1, 2, 2}, {1, 2, 3, 4}),
                  F32({1, 1, 1, 2}, {1e30f, -1e30f})};
    far.String("mode", mode).String("padding_mode", "border");
    y = far.Run1();
    ASSERT_TRUE(y.ok()) << mode << ": " << y.status();
    ASSERT_EQ(y->size(), 1);
    EXPECT_NEAR(y->data<float>()[0], 2, 1e-5) << mode;
  }

  // Reflection of a grid value that scales past float range (an infinite
  // coordinate has no mirror position): it folds to the first pixel, in
  // every mode (was a NaN cast to int64).
  for (const char* mode : {"nearest", "bilinear", "bicubic"}) {
    OneNode far("GridSample", 16);
    far.inputs = {F32({1, 1, 2, 2}, {1, 2, 3, 4}),
                  F32({1, 1, 1, 2}, {3e38f, -3e38f})};
    far.String("mode", mode).String("padding_mode", "reflection");
    y = far.Run1();
    ASSERT_TRUE(y.ok()) << mode << ": " << y.status();
    ASSERT_EQ(y->size(), 1);
    EXPECT_TRUE(std::isfinite(y->data<float>()[0])) << mode;
  }

  // Opset 20's N-D sampling is refused by name; opset 16's 'linear' is not a
  // mode.
  OneNode nd("GridSample", 20);
  nd.inputs = {Tensor(TP::FLOAT, {1, 1, 2, 2, 2}),
               Tensor(TP::FLOAT, {1, 1, 1, 1, 3})};
  absl::Status s = nd.Run1().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("N-D"), std::string::npos) << s;
  OneNode lin("GridSample", 16);
  lin.inputs = {F32({1, 1, 1, 1}, {1}), F32({1, 1, 1, 2}, {0, 0})};
  lin.String("mode", "linear");
  EXPECT_EQ(lin.Run1().status().code(), absl::StatusCode::kUnimplemented);
  OneNode bad("GridSample", 16);
  bad.inputs = {F32({1, 1, 1, 1}, {1}), F32({2, 1, 1, 2}, {0, 0, 0, 0})};
  EXPECT_EQ(bad.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

// ================================================================ MaxUnpool

TEST(OpsDetectionTest, MaxUnpoolScattersFlatIndices) {
  // Two channels: indices are flat over the whole output (channel 1 starts
  // at 16), as MaxPool's Indices are.
  OneNode n("MaxUnpool", 11);
  n.inputs = {F32({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}),
              I64({1, 2, 2, 2}, {0, 3, 9, 15, 16, 18, 24, 31})};
  n.IntList("kernel_shape", {2, 2}).IntList("strides", {2, 2});
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<float> want(32, 0);
  want[0] = 1, want[3] = 2, want[9] = 3, want[15] = 4;
  want[16] = 5, want[18] = 6, want[24] = 7, want[31] = 8;
  ExpectClose(*y, F32({1, 2, 4, 4}, want), 0, "no output_shape");

  // output_shape [1, 2, 5, 5] pads each 4x4 plane at its end: the indices
  // keep addressing the inferred [1, 2, 4, 4] (row 2 col 1 of channel 0 is 9
  // there, 11 in 5x5; channel 1 starts at 25).
  n.inputs.push_back(I64({4}, {1, 2, 5, 5}));
  y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  want.assign(50, 0);
  want[0] = 1, want[3] = 2, want[11] = 3, want[18] = 4;
  want[25] = 5, want[27] = 6, want[35] = 7, want[43] = 8;
  ExpectClose(*y, F32({1, 2, 5, 5}, want), 0, "output_shape");
}

TEST(OpsDetectionTest, MaxUnpoolPadsAndOpset9) {
  // (2 - 1) * 2 + 3 - 1 - 0 = 4 and (1 - 1) * 1 + 2 - 0 - 1 = 1.
  OneNode n("MaxUnpool", 9);
  n.inputs = {F32({1, 1, 2, 1}, {7, 9}), I64({1, 1, 2, 1}, {1, 3})};
  n.IntList("kernel_shape", {3, 2}).IntList("strides", {2, 1});
  n.IntList("pads", {1, 0, 0, 1});
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, F32({1, 1, 4, 1}, {0, 7, 0, 9}), 0, "pads");
}

TEST(OpsDetectionTest, MaxUnpoolRejectsBadIndicesAndShapes) {
  auto make = [](std::vector<int64_t> idx) {
    OneNode n("MaxUnpool", 11);
    n.inputs = {F32({1, 1, 1, 2}, {1, 2}), I64({1, 1, 1, 2}, idx)};
    n.IntList("kernel_shape", {2, 2}).IntList("strides", {2, 2});
    return n;
  };
  // Output [1, 1, 2, 4]: 8 elements.
  ASSERT_TRUE(make({0, 7}).Run1().ok());
  EXPECT_EQ(make({0, 8}).Run1().status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(make({-1, 0}).Run1().status().code(),
            absl::StatusCode::kInvalidArgument);
  OneNode shape = make({0, 7});
  shape.inputs.push_back(I64({4}, {1, 1, 2, -4}));
  EXPECT_EQ(shape.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode huge = make({0, 7});
  huge.inputs.push_back(I64({4}, {1, 1, int64_t{1} << 40, int64_t{1} << 40}));
  EXPECT_EQ(huge.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode smaller = make({0, 7});
  smaller.inputs.push_back(I64({4}, {1, 1, 2, 3}));
  EXPECT_EQ(smaller.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  // Indices address the inferred shape even when output_shape is larger.
  OneNode larger = make({0, 8});
  larger.inputs.push_back(I64({4}, {1, 1, 3, 5}));
  EXPECT_EQ(larger.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode mism = make({0, 7});
  mism.inputs[1] = I64({1, 1, 2}, {0, 1});
  EXPECT_EQ(mism.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode nokernel("MaxUnpool", 11);
  nokernel.inputs = {F32({1, 1, 1, 2}, {1, 2}), I64({1, 1, 1, 2}, {0, 1})};
  EXPECT_EQ(nokernel.Run1().status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ====================================================================== LRN

// X: numpy default_rng(7) after the GridSample draws, uniform(-3, 3) of shape
// [2, 5, 2, 3] rounded to 2 places. Goldens: numpy evaluation of the spec,
//   sq = (X[:, max(0, c - (size-1)//2) : min(C-1, c + ceil((size-1)/2)) + 1]
//         ** 2).sum(1);  Y[:, c] = X[:, c] / (bias + alpha / size * sq)**beta
// (and torch.nn.functional.local_response_norm agrees exactly for size 3).
const std::vector<float> kLrnX = {
    -0.78f, -2.98f, 1.98f,  -2.07f, -1.39f, 2.28f,  0.06f,  2.08f,  0.84f,
    1.45f,  -2.45f, 0.25f,  0.05f,  2.23f,  -0.83f, 0.59f,  -2.64f, -0.67f,
    -1.06f, -2.1f,  1.9f,   -0.72f, 2.87f,  0.54f,  0.63f,  0.83f,  1.06f,
    -2.1f,  -0.36f, -1.56f, -0.59f, -2.42f, 2.81f,  -1.71f, 1.03f,  -1.2f,
    2.24f,  0.97f,  -2.21f, 2.07f,  2.67f,  2.42f,  0.42f,  -2.13f, -1.85f,
    2.57f,  0.31f,  -1.92f, 2.3f,   0.85f,  0.42f,  -0.74f, -0.53f, -1.56f,
    -2.77f, 2.26f,  -0.19f, 0.29f,  -1.07f, 1.51f};

TEST(OpsDetectionTest, LrnMatchesNumpy) {
  // size 3 with the default alpha 1e-4, beta 0.75, bias 1.
  const std::vector<float> want3 = {
      -0.7799881f, -2.979016f,  1.979771f,   -2.06967f,   -1.389724f,
      2.2797f,     0.05999908f, 2.079055f,   0.8398884f,  1.449756f,
      -2.449088f,  0.2499643f,  0.04999859f, 2.229236f,   -0.8298962f,
      0.5899562f,  -2.638601f,  -0.6699866f, -1.05996f,   -2.099471f,
      1.899742f,   -0.719905f,  2.8689f,     0.5399572f,  0.6299761f,
      0.8298942f,  1.059875f,   -2.099741f,  -0.3599247f, -1.559894f,
      -0.5899209f, -2.419589f,  2.809103f,   -1.709692f,  1.029789f,
      -1.199781f,  2.23969f,    0.9697252f,  -2.209105f,  2.069285f,
      2.669447f,   2.419336f,   0.41989f,    -2.12967f,   -1.849608f,
      2.569265f,   0.3099418f,  -1.919425f,  2.299245f,   0.8497798f,
      0.4199618f,  -0.7398662f, -0.5299798f, -1.559672f,  -2.769103f,
      2.259671f,   -0.189999f,  0.2899954f,  -1.069962f,  1.509822f};
  // size 4 (one channel before, two after), alpha 0.5, beta 0.6, bias 2.
  const std::vector<float> want4 = {
      -0.5031022f, -1.246836f,  1.099789f,   -1.106118f,  -0.6178148f,
      1.252551f,   0.03721011f, 0.8091601f,  0.4247694f,  0.7644068f,
      -0.9450184f, 0.136246f,   0.0312324f,  1.001037f,   -0.450781f,
      0.3100348f,  -1.047522f,  -0.3957781f, -0.6622085f, -1.033643f,
      1.052169f,   -0.400356f,  1.265054f,   0.3196088f,  0.3936105f,
      0.4638485f,  0.5986252f,  -1.17932f,   -0.1845358f, -0.9365322f,
      -0.3256366f, -1.157832f,  1.218498f,   -0.7766026f, 0.529028f,
      -0.5786061f, 1.0837f,     0.4568817f,  -0.9551848f, 0.9298875f,
      1.361934f,   1.107938f,   0.1757989f,  -1.019672f,  -0.9447633f,
      1.224571f,   0.1578037f,  -0.864299f,  1.058996f,   0.4155626f,
      0.2450669f,  -0.3902853f, -0.3311167f, -0.7989942f, -1.280055f,
      1.237454f,   -0.1243648f, 0.1869347f,  -0.6706905f, 0.8532501f};
  ThreadPool pool(2);
  OneNode n("LRN", 13);
  n.inputs = {F32({2, 5, 2, 3}, kLrnX)};
  n.Int("size", 3);
  absl::StatusOr<Tensor> y = n.Run1(&pool);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, F32({2, 5, 2, 3}, want3), 1e-5, "size 3");
  OneNode m("LRN", 1);
  m.inputs = {F32({2, 5, 2, 3}, kLrnX)};
  m.Int("size", 4).Float("alpha", 0.5f).Float("beta", 0.6f).Float("bias", 2);
  y = m.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, F32({2, 5, 2, 3}, want4), 1e-5, "size 4");
}

TEST(OpsDetectionTest, LrnRejectsBadAttributes) {
  OneNode n("LRN", 13);
  n.inputs = {F32({1, 1, 1, 1}, {1})};
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  n.Int("size", 0);
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode m("LRN", 13);
  m.inputs = {F32({1, 1}, {1})};
  m.Int("size", 1);
  EXPECT_EQ(m.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::executor
