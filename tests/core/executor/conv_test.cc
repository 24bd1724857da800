// Conv2D's batched layout (several images side by side in one GEMM) against
// the per-image one and the reference convolution, on the small outputs
// where ConvImagesPerGemm batches, and the choice itself.
#include "core/executor/conv.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/core/executor/reference_kernels.h"

namespace quantd::executor {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// The kernels' shape of a reference convolution with output oh x ow.
Conv2DShape ShapeOf(const testing::RefConvParams& p, int64_t oh, int64_t ow) {
  Conv2DShape s;
  s.n = p.n;
  s.c = p.c;
  s.h = p.h;
  s.w = p.w;
  s.m = p.m;
  s.group = p.group;
  s.kh = p.kh;
  s.kw = p.kw;
  s.sh = p.sh;
  s.sw = p.sw;
  s.dh = p.dh;
  s.dw = p.dw;
  s.pt = p.pt;
  s.pl = p.pl;
  s.pb = p.pb;
  s.pr = p.pr;
  s.oh = oh;
  s.ow = ow;
  return s;
}

// One convolution, run through Conv2DWithImagesPerGemm with several image
// counts per GEMM; every result must match the reference (double
// accumulation) and the per-image layout up to summation order.
class BatchedConvTester {
 public:
  BatchedConvTester& Batch(int64_t n) {
    p_.n = n;
    return *this;
  }
  BatchedConvTester& Channels(int64_t c, int64_t m) {
    p_.c = c;
    p_.m = m;
    return *this;
  }
  BatchedConvTester& Group(int64_t g) {
    p_.group = g;
    return *this;
  }
  BatchedConvTester& Input(int64_t h, int64_t w) {
    p_.h = h;
    p_.w = w;
    return *this;
  }
  BatchedConvTester& Kernel(int64_t h, int64_t w) {
    p_.kh = h;
    p_.kw = w;
    return *this;
  }
  BatchedConvTester& Stride(int64_t h, int64_t w) {
    p_.sh = h;
    p_.sw = w;
    return *this;
  }
  BatchedConvTester& Dilation(int64_t h, int64_t w) {
    p_.dh = h;
    p_.dw = w;
    return *this;
  }
  BatchedConvTester& Pads(int64_t t, int64_t l, int64_t b, int64_t r) {
    p_.pt = t;
    p_.pl = l;
    p_.pb = b;
    p_.pr = r;
    return *this;
  }
  BatchedConvTester& Bias(bool v) {
    bias_ = v;
    return *this;
  }
  BatchedConvTester& Threads(ThreadPool* pool) {
    pool_ = pool;
    return *this;
  }

  void Test() const {
    SCOPED_TRACE(absl::StrCat(
        "n=", p_.n, " c=", p_.c, " m=", p_.m, " g=", p_.group, " in=", p_.h,
        "x", p_.w, " k=", p_.kh, "x", p_.kw, " s=", p_.sh, ",", p_.sw,
        " d=", p_.dh, ",", p_.dw, " pads=", p_.pt, ",", p_.pl, ",", p_.pb, ",",
        p_.pr, bias_ ? "" : " no bias", pool_ ? " pool" : ""));
    const std::vector<float> x = Random(p_.n * p_.c * p_.h * p_.w, 1);
    const std::vector<float> w =
        Random(p_.m * (p_.c / p_.group) * p_.kh * p_.kw, 2);
    const std::vector<float> b = Random(p_.m, 3);
    int64_t oh, ow;
    const std::vector<float> want =
        testing::RefConv(p_, x, w, bias_ ? &b : nullptr, &oh, &ow);
    const Conv2DShape s = ShapeOf(p_, oh, ow);
    // 1 is the per-image layout; the others batch, with a short last batch
    // when n is not a multiple; more than n is clamped to n.
    std::vector<float> per_image;
    for (int64_t nb : {int64_t{1}, int64_t{2}, int64_t{3}, p_.n, p_.n + 5}) {
      SCOPED_TRACE(absl::StrCat(nb, " images per GEMM"));
      // NaN-filled: a position the kernel never writes shows up.
      std::vector<float> y(want.size(), std::nanf(""));
      Conv2DWithImagesPerGemm(x.data(), w.data(), bias_ ? b.data() : nullptr,
                              y.data(), s, nb, pool_);
      Compare(y, want, oh * ow, 1e-4);
      if (nb == 1) {
        per_image = y;
      } else {
        Compare(y, per_image, oh * ow, 1e-5);
      }
    }
  }

 private:
  // |got - want| <= tol * max(1, |want|); names the first position that
  // differs.
  void Compare(const std::vector<float>& got, const std::vector<float>& want,
               int64_t positions, double tol) const {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const double limit = tol * std::max(1.0, std::fabs(double(want[i])));
      if (!(std::fabs(double(got[i]) - want[i]) <= limit)) {
        const int64_t pos = i % positions, ch = i / positions % p_.m;
        const int64_t image = i / positions / p_.m;
        ADD_FAILURE() << "at image " << image << ", output channel " << ch
                      << ", position " << pos << ": got " << got[i] << ", want "
                      << want[i];
        return;
      }
    }
  }

  testing::RefConvParams p_{4, 3, 4, 4, 5, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  bool bias_ = true;
  ThreadPool* pool_ = nullptr;
};

TEST(BatchedConvTest, SmallOutputsMatchPerImageAndReference) {
  ThreadPool pool(1);  // With the caller: 2 threads.
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (bool bias : {true, false}) {
      for (int64_t n : {2, 5, 16}) {
        // ResNet-18's last stage at 64x64 in miniature: 2x2 outputs.
        BatchedConvTester()
            .Batch(n)
            .Channels(16, 24)
            .Input(2, 2)
            .Bias(bias)
            .Threads(p)
            .Test();
        // Stride 2 down to 2x2 and 1x1 outputs.
        BatchedConvTester()
            .Batch(n)
            .Channels(8, 12)
            .Input(4, 4)
            .Stride(2, 2)
            .Bias(bias)
            .Threads(p)
            .Test();
        BatchedConvTester()
            .Batch(n)
            .Channels(8, 12)
            .Input(2, 2)
            .Stride(2, 2)
            .Bias(bias)
            .Threads(p)
            .Test();
      }
    }
  }
}

TEST(BatchedConvTest, PadsStridesAndDilations) {
  ThreadPool pool(1);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    BatchedConvTester().Batch(5).Input(5, 6).Pads(0, 2, 1, 0).Threads(p).Test();
    BatchedConvTester()
        .Batch(3)
        .Input(5, 7)
        .Kernel(2, 4)
        .Stride(1, 3)
        .Pads(1, 0, 0, 2)
        .Threads(p)
        .Test();
    BatchedConvTester()
        .Batch(4)
        .Input(6, 6)
        .Dilation(2, 2)
        .Pads(2, 2, 2, 2)
        .Threads(p)
        .Test();
    BatchedConvTester()
        .Batch(4)
        .Input(7, 5)
        .Dilation(2, 1)
        .Stride(2, 1)
        .Pads(0, 0, 0, 0)
        .Bias(false)
        .Threads(p)
        .Test();
    // 1-D (H = 1).
    BatchedConvTester()
        .Batch(6)
        .Input(1, 9)
        .Kernel(1, 3)
        .Stride(1, 2)
        .Pads(0, 1, 0, 1)
        .Threads(p)
        .Test();
  }
}

TEST(BatchedConvTest, GroupsAndPointwise) {
  ThreadPool pool(1);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (bool bias : {true, false}) {
      // Grouped (each group one GEMM over the batch).
      BatchedConvTester()
          .Batch(5)
          .Channels(8, 12)
          .Group(4)
          .Input(3, 3)
          .Bias(bias)
          .Threads(p)
          .Test();
      // Depthwise with a channel multiplier (GEMM path, one input channel).
      BatchedConvTester()
          .Batch(3)
          .Channels(4, 8)
          .Group(4)
          .Input(4, 3)
          .Stride(2, 1)
          .Bias(bias)
          .Threads(p)
          .Test();
      // Pointwise: the input channels are copied whole, no im2col.
      for (int64_t c : {16, 100}) {
        BatchedConvTester()
            .Batch(7)
            .Channels(c, 40)
            .Input(2, 3)
            .Kernel(1, 1)
            .Pads(0, 0, 0, 0)
            .Bias(bias)
            .Threads(p)
            .Test();
      }
      BatchedConvTester()
          .Batch(4)
          .Channels(6, 9)
          .Group(3)
          .Input(3, 3)
          .Kernel(1, 1)
          .Pads(0, 0, 0, 0)
          .Bias(bias)
          .Threads(p)
          .Test();
      // Pointwise with a stride is not a plain copy: through Im2Col.
      BatchedConvTester()
          .Batch(3)
          .Channels(5, 7)
          .Input(4, 4)
          .Kernel(1, 1)
          .Stride(2, 2)
          .Pads(0, 0, 0, 0)
          .Bias(bias)
          .Threads(p)
          .Test();
    }
  }
}

// Reductions long enough for the GEMM (not the small-K kernel) and for the
// pool to split it, as on ResNet-18's 4x4 and 2x2 layers.
TEST(BatchedConvTest, LongReductionsSplitOverThePool) {
  ThreadPool pool(1);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    BatchedConvTester()
        .Batch(16)
        .Channels(96, 64)
        .Input(2, 2)
        .Threads(p)
        .Test();
    BatchedConvTester()
        .Batch(5)
        .Channels(64, 80)
        .Input(4, 4)
        .Stride(2, 2)
        .Threads(p)
        .Test();
  }
}

TEST(BandedConvTest, LargeImagesBuildTheirIm2ColInBands) {
  // Images whose im2col passes kMaxConvBandScratch go band by band of output
  // rows, the last band short; every output row must be written once.
  static_assert(int64_t{32} * 9 * 100 * 97 > kMaxConvBandScratch);
  ThreadPool pool(1);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    BatchedConvTester()
        .Batch(2)
        .Channels(32, 8)
        .Input(100, 97)
        .Pads(1, 1, 1, 1)
        .Threads(p)
        .Test();
    // Strided, dilated and grouped: 2 groups of 32 channels, 100x100 out.
    BatchedConvTester()
        .Batch(1)
        .Channels(64, 6)
        .Group(2)
        .Input(203, 201)
        .Stride(2, 2)
        .Dilation(2, 1)
        .Pads(2, 0, 1, 2)
        .Bias(false)
        .Threads(p)
        .Test();
  }
}

Conv2DShape Shape(int64_t n, int64_t c, int64_t hw, int64_t m, int64_t k) {
  Conv2DShape s;
  s.n = n;
  s.c = c;
  s.h = s.w = hw;
  s.m = m;
  s.kh = s.kw = k;
  s.pt = s.pl = s.pb = s.pr = k / 2;
  s.oh = s.ow = hw;
  return s;
}

// Every depthwise kernel against the reference, on the shapes that decide
// their edges: channel counts around the 16 lanes (a short last block),
// windows reaching into the pads or past the input, strides, dilations,
// asymmetric pads, 1-D maps.
TEST(DepthwiseConvTest, EveryKernelMatchesTheReference) {
  struct Case {
    int64_t n, c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  };
  const std::vector<Case> cases = {
      {3, 16, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {2, 17, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {2, 1, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 40, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {2, 15, 7, 9, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1},
      {2, 33, 9, 9, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},
      {1, 20, 4, 4, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},
      {2, 18, 6, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
      {1, 19, 6, 5, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0},
      {1, 16, 1, 12, 1, 5, 1, 1, 1, 1, 0, 2, 0, 2},
      {1, 17, 3, 3, 3, 3, 1, 1, 1, 1, 2, 0, 0, 2},
      {2, 16, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 16, 6, 6, 2, 2, 3, 3, 1, 1, 0, 0, 0, 0},
      {1, 24, 12, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
  };
  ThreadPool pool(1);
  for (const Case& k : cases) {
    for (bool bias : {true, false}) {
      const testing::RefConvParams rp{k.n,  k.c,  k.h,  k.w,  k.c,  k.c,
                                      k.kh, k.kw, k.sh, k.sw, k.dh, k.dw,
                                      k.pt, k.pl, k.pb, k.pr};
      const std::vector<float> x = Random(k.n * k.c * k.h * k.w, 1);
      const std::vector<float> w = Random(k.c * k.kh * k.kw, 2);
      const std::vector<float> b = Random(k.c, 3);
      int64_t oh, ow;
      const std::vector<float> want =
          testing::RefConv(rp, x, w, bias ? &b : nullptr, &oh, &ow);
      const Conv2DShape s = ShapeOf(rp, oh, ow);
      for (DepthwiseKernel kernel :
           {DepthwiseKernel::kLanes, DepthwiseKernel::kPlanes,
            DepthwiseKernel::kDirect}) {
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          SCOPED_TRACE(absl::StrCat(
              "n=", k.n, " c=", k.c, " in=", k.h, "x", k.w, " k=", k.kh, "x",
              k.kw, " s=", k.sh, " d=", k.dh, " pads=", k.pt, ",", k.pl, ",",
              k.pb, ",", k.pr, " kernel=", static_cast<int>(kernel),
              bias ? "" : " no bias", p ? " pool" : ""));
          std::vector<float> y(want.size(), std::nanf(""));
          DepthwiseConv2D(x.data(), w.data(), bias ? b.data() : nullptr,
                          y.data(), s, kernel, p);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], want[i],
                        1e-4 * std::max(1.0f, std::fabs(want[i])))
                << "at flat output " << i;
          }
        }
      }
    }
  }
}

TEST(DepthwiseConvTest, SmallMapsTakeTheLanesKernel) {
  auto dw = [](int64_t h, int64_t k, int64_t stride) {
    Conv2DShape s;
    s.n = 16;
    s.c = s.m = s.group = 96;
    s.h = s.w = h;
    s.kh = s.kw = k;
    s.sh = s.sw = stride;
    s.pt = s.pl = s.pb = s.pr = k / 2;
    s.oh = s.ow = (h + 2 * (k / 2) - k) / stride + 1;
    return s;
  };
  EXPECT_EQ(ChooseDepthwiseKernel(dw(2, 3, 1)), DepthwiseKernel::kLanes);
  EXPECT_EQ(ChooseDepthwiseKernel(dw(4, 5, 1)), DepthwiseKernel::kLanes);
  EXPECT_EQ(ChooseDepthwiseKernel(dw(8, 3, 1)), DepthwiseKernel::kLanes);
  EXPECT_EQ(ChooseDepthwiseKernel(dw(16, 3, 1)), DepthwiseKernel::kPlanes);
  EXPECT_EQ(ChooseDepthwiseKernel(dw(32, 3, 2)), DepthwiseKernel::kPlanes);
  // No planes kernel for 5x5: lanes while its scratch fits, then direct.
  EXPECT_EQ(ChooseDepthwiseKernel(dw(32, 5, 1)), DepthwiseKernel::kLanes);
  EXPECT_EQ(ChooseDepthwiseKernel(dw(128, 5, 1)), DepthwiseKernel::kDirect);
  // Dilated 3x3: not the planes kernel's shape.
  Conv2DShape dilated = dw(32, 3, 1);
  dilated.dh = dilated.dw = 2;
  dilated.oh = dilated.ow = 30;
  EXPECT_EQ(ChooseDepthwiseKernel(dilated), DepthwiseKernel::kLanes);
}

TEST(ConvImagesPerGemmTest, BatchesOnlySmallOutputsOfSeveralImages) {
  // ResNet-18 at 64x64, batch 16: 2x2 and 4x4 outputs batch, 8x8 and up do
  // not.
  EXPECT_EQ(ConvImagesPerGemm(Shape(16, 512, 2, 512, 3)), 16);
  EXPECT_EQ(ConvImagesPerGemm(Shape(16, 256, 4, 256, 3)), 16);
  EXPECT_EQ(ConvImagesPerGemm(Shape(16, 128, 8, 128, 3)), 1);
  EXPECT_EQ(ConvImagesPerGemm(Shape(16, 64, 16, 64, 3)), 1);
  // A single image has nothing to batch with.
  EXPECT_EQ(ConvImagesPerGemm(Shape(1, 512, 2, 512, 3)), 1);
  // About 256 columns per GEMM: 7x7 outputs take 6 images at a time.
  EXPECT_EQ(ConvImagesPerGemm(Shape(32, 512, 7, 512, 3)), 6);
}

TEST(ConvImagesPerGemmTest, ScratchStaysBounded) {
  // (k + m) * 4 positions per image: 2^21 / ((36864 + 512) * 4) = 14 images
  // at most, whatever the batch.
  const Conv2DShape s = Shape(64, 4096, 2, 512, 3);
  const int64_t nb = ConvImagesPerGemm(s);
  EXPECT_EQ(nb, 14);
  EXPECT_LE((4096 * 9 + 512) * 4 * nb, kMaxBatchedConvScratch);
  // One image's columns alone over the bound: per image.
  EXPECT_EQ(ConvImagesPerGemm(Shape(16, 65536, 7, 64, 3)), 1);
}

}  // namespace
}  // namespace quantd::executor
