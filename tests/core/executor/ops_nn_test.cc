// The neural-network kernels (ops_nn.cc): Conv, MaxPool, AveragePool,
// GlobalAveragePool, Gemm, MatMul, BatchNormalization, Softmax and
// LayerNormalization. Conv and MatMul are checked against the plain loops of
// reference_kernels.h on many shapes; the rest against hand-computed values
// or numpy (the numbers and how they were produced are next to each test),
// with their attributes and the status codes of bad inputs.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/core/executor/reference_kernels.h"
#include "tests/core/graph/test_models.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::ModelBuilder;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

// Prints the first position where got and want differ by more than tol.
void ExpectNear(const float* got, const std::vector<float>& want, double tol,
                const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::abs(got[i] - want[i]) > tol * (1.0 + std::abs(want[i]))) {
      ADD_FAILURE() << what << ": at flat position " << i << " got " << got[i]
                    << ", reference " << want[i];
      return;
    }
  }
}

// Runs the model `mb` builds on x (its input "x", of shape xs), with the
// kernels parallel on `pool` (null: the caller's thread alone).
absl::StatusOr<std::vector<Tensor>> RunX(const ModelBuilder& mb,
                                         const std::vector<int64_t>& xs,
                                         const std::vector<float>& x,
                                         ThreadPool* pool) {
  std::unique_ptr<Executor> exec = MustCreate(mb.Build());
  if (exec == nullptr) return absl::InternalError("the model did not build");
  Executor::RunOptions ro;
  ro.pool = pool;
  return exec->Run({{"x", Tensor::FromVector<float>(xs, x)}}, ro);
}

// 1, 2, ..., n in `shape`.
Tensor Iota(std::vector<int64_t> shape) {
  std::vector<float> v(testing::Product(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);
  return Floats(std::move(shape), std::move(v));
}

// Runs `n` and expects output `o` to be `want` of `shape` (within `tol`).
void ExpectOutput(const OneNode& n, std::vector<int64_t> shape,
                  std::vector<float> want, double tol = 1e-6, int o = 0) {
  absl::StatusOr<std::vector<Tensor>> out = n.Run();
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectClose((*out)[o], Floats(std::move(shape), std::move(want)), tol,
              absl::StrCat(n.op, " output ", o));
}

// The status code of Executor::Create on `n`'s model.
absl::StatusCode CreateCode(const OneNode& n) {
  return Executor::Create(n.Model()).status().code();
}

// The status code of creating and running `n` (OK when both succeed).
absl::StatusCode RunCode(const OneNode& n) { return n.Run().status().code(); }

// ------------------------------------------------------------ Conv tester

// XNNPACK-style tester: fluent setters, Test() runs the executor's Conv and
// the reference and reports the first difference.
class ConvTester {
 public:
  ConvTester& Batch(int64_t v) {
    p_.n = v;
    return *this;
  }
  ConvTester& Channels(int64_t c, int64_t m) {
    p_.c = c;
    p_.m = m;
    return *this;
  }
  ConvTester& Group(int64_t v) {
    p_.group = v;
    return *this;
  }
  ConvTester& Input(int64_t h, int64_t w) {
    p_.h = h;
    p_.w = w;
    return *this;
  }
  ConvTester& Kernel(int64_t h, int64_t w) {
    p_.kh = h;
    p_.kw = w;
    return *this;
  }
  ConvTester& Stride(int64_t h, int64_t w) {
    p_.sh = h;
    p_.sw = w;
    return *this;
  }
  ConvTester& Dilation(int64_t h, int64_t w) {
    p_.dh = h;
    p_.dw = w;
    return *this;
  }
  ConvTester& Pads(int64_t t, int64_t l, int64_t b, int64_t r) {
    p_.pt = t;
    p_.pl = l;
    p_.pb = b;
    p_.pr = r;
    return *this;
  }
  ConvTester& OneD() {
    one_d_ = true;
    return *this;
  }
  ConvTester& Bias(bool v) {
    bias_ = v;
    return *this;
  }
  ConvTester& Threads(ThreadPool* pool) {
    pool_ = pool;
    return *this;
  }

  void Test() const {
    const std::string what = absl::StrCat(
        "conv n=", p_.n, " c=", p_.c, " m=", p_.m, " g=", p_.group,
        " in=", p_.h, "x", p_.w, " k=", p_.kh, "x", p_.kw, " s=", p_.sh, ",",
        p_.sw, " d=", p_.dh, ",", p_.dw, " pads=", p_.pt, ",", p_.pl, ",",
        p_.pb, ",", p_.pr, one_d_ ? " 1-D" : "");
    SCOPED_TRACE(what);
    std::vector<int64_t> xs = {p_.n, p_.c, p_.h, p_.w};
    std::vector<int64_t> ws = {p_.m, p_.c / p_.group, p_.kh, p_.kw};
    if (one_d_) {
      xs = {p_.n, p_.c, p_.w};
      ws = {p_.m, p_.c / p_.group, p_.kw};
    }
    const std::vector<float> x = Random(testing::Product(xs), 1);
    const std::vector<float> w = Random(testing::Product(ws), 2);
    const std::vector<float> b = Random(p_.m, 3);
    ModelBuilder mb(13);
    mb.Input("x", xs).Initializer("W", ws, w);
    std::vector<std::string> ins = {"x", "W"};
    if (bias_) {
      mb.Initializer("B", {p_.m}, b);
      ins.push_back("B");
    }
    mb.Node("Conv", ins, {"y"}, "conv").Attr("group", p_.group);
    if (one_d_) {
      mb.Attr("strides", std::vector<int64_t>{p_.sw})
          .Attr("dilations", std::vector<int64_t>{p_.dw})
          .Attr("pads", std::vector<int64_t>{p_.pl, p_.pr});
    } else {
      mb.Attr("strides", std::vector<int64_t>{p_.sh, p_.sw})
          .Attr("dilations", std::vector<int64_t>{p_.dh, p_.dw})
          .Attr("pads", std::vector<int64_t>{p_.pt, p_.pl, p_.pb, p_.pr});
    }
    mb.Output("y");
    absl::StatusOr<std::vector<Tensor>> out = RunX(mb, xs, x, pool_);
    ASSERT_TRUE(out.ok()) << out.status();
    int64_t oh, ow;
    std::vector<float> want =
        testing::RefConv(p_, x, w, bias_ ? &b : nullptr, &oh, &ow);
    std::vector<int64_t> ys = {p_.n, p_.m, oh, ow};
    if (one_d_) ys = {p_.n, p_.m, ow};
    ASSERT_EQ((*out)[0].shape(), ys);
    ExpectNear((*out)[0].data<float>(), want, 1e-4, what);
  }

 private:
  testing::RefConvParams p_{1, 3, 7, 7, 4, 1, 3, 3};
  bool one_d_ = false;
  bool bias_ = true;
  ThreadPool* pool_ = nullptr;
};

TEST(ConvTest, MatchesReferenceOnManyShapes) {
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (int64_t n : {1, 3}) {
      for (int64_t k : {1, 2, 3, 5}) {
        for (int64_t s : {1, 2, 3}) {
          for (int64_t pad : {0, 1, 2}) {
            for (int64_t d : {1, 2}) {
              if (d * (k - 1) + 1 > 9 + 2 * pad) continue;
              ConvTester()
                  .Batch(n)
                  .Channels(3, 5)
                  .Input(9, 11)
                  .Kernel(k, k)
                  .Stride(s, s)
                  .Pads(pad, pad, pad, pad)
                  .Dilation(d, d)
                  .Threads(p)
                  .Test();
            }
          }
        }
      }
    }
  }
}

TEST(ConvTest, AsymmetricShapesPadsAndStrides) {
  ConvTester().Input(6, 13).Kernel(2, 4).Stride(1, 3).Pads(0, 2, 1, 0).Test();
  ConvTester().Input(13, 6).Kernel(4, 1).Stride(2, 1).Pads(3, 0, 0, 1).Test();
  ConvTester().Input(5, 5).Kernel(5, 5).Pads(0, 0, 0, 0).Bias(false).Test();
  ConvTester().Input(1, 1).Kernel(1, 1).Channels(16, 8).Test();
  // Pointwise (the im2col-free path) with and without batch.
  ConvTester().Input(7, 9).Kernel(1, 1).Channels(32, 24).Batch(2).Test();
}

TEST(ConvTest, GroupsAndDepthwise) {
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    ConvTester().Channels(4, 6).Group(2).Threads(p).Test();
    ConvTester()
        .Channels(6, 6)
        .Group(3)
        .Batch(2)
        .Stride(2, 2)
        .Threads(p)
        .Test();
    // Depthwise, the direct path: strides, pads, dilations.
    for (int64_t s : {1, 2}) {
      for (int64_t d : {1, 2}) {
        ConvTester()
            .Channels(8, 8)
            .Group(8)
            .Input(10, 9)
            .Stride(s, s)
            .Dilation(d, d)
            .Pads(1, 1, 1, 1)
            .Batch(2)
            .Threads(p)
            .Test();
      }
    }
    // Depthwise with a channel multiplier goes through GEMM.
    ConvTester().Channels(4, 8).Group(4).Pads(1, 1, 1, 1).Threads(p).Test();
  }
}

// The specialised 3x3 depthwise kernel (stride 1 and 2, any pads): odd and
// tiny sizes, rows narrower and wider than a vector, asymmetric pads, channel
// counts that are not multiples of 8, batch 2, with and without bias/pool.
TEST(ConvTest, Depthwise3x3MatchesReference) {
  ThreadPool pool(2);
  const std::vector<std::vector<int64_t>> pads = {{1, 1, 1, 1}, {0, 0, 0, 0},
                                                  {0, 1, 1, 0}, {1, 0, 0, 1},
                                                  {2, 2, 2, 2}, {2, 0, 1, 3}};
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {1, 1},   {2, 3},   {3, 3},  {7, 7},   {8, 8},
      {14, 14}, {13, 17}, {5, 40}, {33, 31}, {28, 28}};
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (const auto& [h, w] : sizes) {
      for (int64_t s : {1, 2}) {
        for (const std::vector<int64_t>& pd : pads) {
          if (h + pd[0] + pd[2] < 3 || w + pd[1] + pd[3] < 3) continue;
          for (int64_t c : {1, 13}) {
            ConvTester()
                .Channels(c, c)
                .Group(c)
                .Input(h, w)
                .Kernel(3, 3)
                .Stride(s, s)
                .Pads(pd[0], pd[1], pd[2], pd[3])
                .Batch(c == 1 ? 1 : 2)
                .Bias(c != 1)
                .Threads(p)
                .Test();
          }
        }
      }
    }
  }
  // Mixed strides and dilations stay on the general depthwise loop.
  ConvTester().Channels(5, 5).Group(5).Input(9, 10).Stride(1, 2).Test();
  ConvTester().Channels(5, 5).Group(5).Input(9, 10).Stride(3, 3).Test();
  ConvTester().Channels(5, 5).Group(5).Input(9, 10).Kernel(5, 5).Test();
}

// Pointwise convolutions are one GEMM per image with the bias as C's start:
// with and without bias, batch 2, sizes that are not multiples of a vector,
// and large enough for the pool to split the GEMM.
TEST(ConvTest, PointwiseMatchesReference) {
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (bool bias : {true, false}) {
      ConvTester()
          .Channels(3, 5)
          .Input(1, 1)
          .Kernel(1, 1)
          .Bias(bias)
          .Threads(p)
          .Test();
      ConvTester()
          .Channels(13, 7)
          .Input(5, 11)
          .Kernel(1, 1)
          .Batch(2)
          .Bias(bias)
          .Threads(p)
          .Test();
      ConvTester()
          .Channels(64, 72)
          .Input(15, 17)
          .Kernel(1, 1)
          .Batch(2)
          .Bias(bias)
          .Threads(p)
          .Test();
      // Longer reductions: the direct kernel on a wide output, Eigen on a
      // narrow one; 4-row blocks plus leftover rows and columns.
      ConvTester()
          .Channels(100, 22)
          .Input(28, 31)
          .Kernel(1, 1)
          .Bias(bias)
          .Threads(p)
          .Test();
      ConvTester()
          .Channels(200, 10)
          .Input(5, 5)
          .Kernel(1, 1)
          .Bias(bias)
          .Threads(p)
          .Test();
      // Strided or padded 1x1 kernels still go through im2col.
      ConvTester()
          .Channels(16, 9)
          .Input(9, 9)
          .Kernel(1, 1)
          .Stride(2, 2)
          .Bias(bias)
          .Threads(p)
          .Test();
      ConvTester()
          .Channels(16, 9)
          .Input(6, 7)
          .Kernel(1, 1)
          .Pads(1, 0, 0, 1)
          .Bias(bias)
          .Threads(p)
          .Test();
    }
  }
}

TEST(ConvTest, OneDimensional) {
  for (int64_t k : {1, 3}) {
    for (int64_t s : {1, 2}) {
      ConvTester()
          .OneD()
          .Input(1, 17)
          .Kernel(1, k)
          .Stride(1, s)
          .Pads(0, 1, 0, 2)
          .Test();
      ConvTester()
          .OneD()
          .Input(1, 12)
          .Kernel(1, k)
          .Channels(4, 4)
          .Group(4)
          .Test();
    }
  }
}

TEST(ConvTest, AutoPadSameUpperKeepsSize) {
  ModelBuilder mb(13);
  mb.Input("x", {1, 2, 7, 7})
      .Weight("W", {3, 2, 3, 3})
      .Node("Conv", {"x", "W"}, {"y"}, "conv")
      .Attr("strides", std::vector<int64_t>{2, 2});
  AddStringAttr(&mb.model(), "auto_pad", "SAME_UPPER");
  mb.Output("y");
  auto exec = MustCreate(mb.Build());
  ASSERT_NE(exec, nullptr);
  auto out = exec->Run(
      {{"x", Tensor::FromVector<float>({1, 2, 7, 7}, Random(98, 1))}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{1, 3, 4, 4}));
}

// ------------------------------------------------------- Conv, by hand

// X is 1..9 in a 3x3 image, W a 2x2 window of ones: each output is the sum
// of the window it covers.
OneNode SumConv() {
  OneNode n("Conv", 13);
  n.inputs = {Iota({1, 1, 3, 3}), Floats({1, 1, 2, 2}, {1, 1, 1, 1})};
  return n;
}

TEST(ConvTest, HandComputedWindowsAndBias) {
  // 1+2+4+5, 2+3+5+6, 4+5+7+8, 5+6+8+9.
  ExpectOutput(SumConv(), {1, 1, 2, 2}, {12, 16, 24, 28});
  OneNode biased = SumConv();
  biased.inputs.push_back(Floats({1}, {0.5f}));
  ExpectOutput(biased, {1, 1, 2, 2}, {12.5f, 16.5f, 24.5f, 28.5f});
}

TEST(ConvTest, StridesPadsAndDilations) {
  OneNode strided = SumConv();
  strided.IntList("strides", {2, 2});
  ExpectOutput(strided, {1, 1, 1, 1}, {12});
  // One zero row and column of padding on each side: corners see one pixel
  // plus zeros.
  OneNode padded = SumConv();
  padded.IntList("pads", {1, 1, 1, 1}).IntList("strides", {2, 2});
  ExpectOutput(padded, {1, 1, 2, 2}, {1, 2 + 3, 4 + 7, 5 + 6 + 8 + 9});
  // Dilation 2 spreads the 2x2 window over the four corners.
  OneNode dilated = SumConv();
  dilated.IntList("dilations", {2, 2});
  ExpectOutput(dilated, {1, 1, 1, 1}, {1 + 3 + 7 + 9});
}

TEST(ConvTest, AutoPadPlacesTheOddPad) {
  // SAME with stride 1 and a 2x2 window needs one pad per axis: UPPER puts
  // it at the end (bottom/right), LOWER at the start (top/left).
  OneNode upper = SumConv();
  upper.String("auto_pad", "SAME_UPPER");
  ExpectOutput(upper, {1, 1, 3, 3}, {12, 16, 9, 24, 28, 15, 15, 17, 9});
  OneNode lower = SumConv();
  lower.String("auto_pad", "SAME_LOWER");
  ExpectOutput(lower, {1, 1, 3, 3}, {1, 3, 5, 5, 12, 16, 11, 24, 28});
  OneNode valid = SumConv();
  valid.String("auto_pad", "VALID").IntList("strides", {2, 2});
  ExpectOutput(valid, {1, 1, 1, 1}, {12});
}

TEST(ConvTest, GroupsSeeOnlyTheirChannels) {
  // Two groups of one channel: output m reads input channel m only.
  OneNode n("Conv", 13);
  n.inputs = {Floats({1, 2, 1, 2}, {1, 2, 3, 4}),
              Floats({2, 1, 1, 1}, {10, 100})};
  n.Int("group", 2);
  ExpectOutput(n, {1, 2, 1, 2}, {10, 20, 300, 400});
}

// 3-D convolution (video and volumetric models) against the definition,
// written out: every output position sums its window over channels of its
// group and the three kernel axes, pads reading zero.
struct Conv3DCase {
  int64_t n, c, m, group, d, h, w, kd, kh, kw, sd, sh, sw, dd, dh, dw;
  std::vector<int64_t> pads;  // d, h, w begins, then ends.
};

std::vector<float> RefConv3D(const Conv3DCase& p, const std::vector<float>& x,
                             const std::vector<float>& w,
                             const std::vector<float>& b,
                             std::vector<int64_t>* shape) {
  auto out_dim = [](int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb,
                    int64_t pe) {
    return (in + pb + pe - d * (k - 1) - 1) / s + 1;
  };
  const int64_t od = out_dim(p.d, p.kd, p.sd, p.dd, p.pads[0], p.pads[3]);
  const int64_t oh = out_dim(p.h, p.kh, p.sh, p.dh, p.pads[1], p.pads[4]);
  const int64_t ow = out_dim(p.w, p.kw, p.sw, p.dw, p.pads[2], p.pads[5]);
  *shape = {p.n, p.m, od, oh, ow};
  const int64_t cg = p.c / p.group, mg = p.m / p.group;
  std::vector<float> y;
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t m = 0; m < p.m; ++m) {
      for (int64_t z = 0; z < od; ++z) {
        for (int64_t i = 0; i < oh; ++i) {
          for (int64_t j = 0; j < ow; ++j) {
            double acc = b[m];
            for (int64_t ci = 0; ci < cg; ++ci) {
              const int64_t c = m / mg * cg + ci;
              for (int64_t a = 0; a < p.kd; ++a) {
                for (int64_t u = 0; u < p.kh; ++u) {
                  for (int64_t v = 0; v < p.kw; ++v) {
                    const int64_t zz = z * p.sd - p.pads[0] + a * p.dd;
                    const int64_t ii = i * p.sh - p.pads[1] + u * p.dh;
                    const int64_t jj = j * p.sw - p.pads[2] + v * p.dw;
                    if (zz < 0 || zz >= p.d || ii < 0 || ii >= p.h || jj < 0 ||
                        jj >= p.w) {
                      continue;
                    }
                    acc +=
                        static_cast<double>(
                            x[(((n * p.c + c) * p.d + zz) * p.h + ii) * p.w +
                              jj]) *
                        w[(((m * cg + ci) * p.kd + a) * p.kh + u) * p.kw + v];
                  }
                }
              }
            }
            y.push_back(static_cast<float>(acc));
          }
        }
      }
    }
  }
  return y;
}

TEST(ConvTest, ThreeDimensionalMatchesTheDefinition) {
  ThreadPool pool(2);
  const std::vector<Conv3DCase> cases = {
      {1, 3, 4, 1, 5, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, {1, 1, 1, 1, 1, 1}},
      {2, 4, 6, 2, 6, 5, 7, 3, 1, 3, 2, 1, 2, 1, 1, 1, {1, 0, 1, 0, 0, 1}},
      {1, 2, 3, 1, 7, 4, 4, 2, 2, 2, 1, 2, 1, 2, 1, 1, {0, 1, 0, 1, 0, 0}},
      {2, 4, 4, 4, 4, 5, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, {1, 1, 1, 1, 1, 1}},
      {1, 3, 2, 1, 3, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0, 0, 0}},
      // Depth padding wider than the kernel: some output planes read only
      // padding and are the bias.
      {1, 2, 3, 1, 2, 3, 3, 1, 3, 3, 1, 1, 1, 1, 1, 1, {2, 1, 1, 2, 1, 1}},
  };
  for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (const Conv3DCase& p : cases) {
      const std::string what = absl::StrCat(
          "n=", p.n, " c=", p.c, " m=", p.m, " g=", p.group, " in=", p.d, "x",
          p.h, "x", p.w, " k=", p.kd, "x", p.kh, "x", p.kw);
      SCOPED_TRACE(what);
      const std::vector<int64_t> xs = {p.n, p.c, p.d, p.h, p.w};
      const std::vector<int64_t> ws = {p.m, p.c / p.group, p.kd, p.kh, p.kw};
      const std::vector<float> x = Random(testing::Product(xs), 1);
      const std::vector<float> w = Random(testing::Product(ws), 2);
      const std::vector<float> b = Random(p.m, 3);
      ModelBuilder mb(13);
      mb.Input("x", xs).Initializer("W", ws, w).Initializer("B", {p.m}, b);
      mb.Node("Conv", {"x", "W", "B"}, {"y"}, "conv")
          .Attr("group", p.group)
          .Attr("strides", std::vector<int64_t>{p.sd, p.sh, p.sw})
          .Attr("dilations", std::vector<int64_t>{p.dd, p.dh, p.dw})
          .Attr("pads", p.pads);
      mb.Output("y");
      absl::StatusOr<std::vector<Tensor>> out = RunX(mb, xs, x, threads);
      ASSERT_TRUE(out.ok()) << out.status();
      std::vector<int64_t> shape;
      const std::vector<float> want = RefConv3D(p, x, w, b, &shape);
      ASSERT_EQ((*out)[0].shape(), shape);
      ExpectNear((*out)[0].data<float>(), want, 1e-4, what);
    }
  }
}

TEST(ConvTest, BadAttributesAreRefusedAtCreate) {
  OneNode group = SumConv();
  group.Int("group", 0);
  EXPECT_EQ(CreateCode(group), absl::StatusCode::kInvalidArgument);
  OneNode stride = SumConv();
  stride.IntList("strides", {0, 1});
  EXPECT_EQ(CreateCode(stride), absl::StatusCode::kInvalidArgument);
  OneNode dilation = SumConv();
  dilation.IntList("dilations", {1, 0});
  EXPECT_EQ(CreateCode(dilation), absl::StatusCode::kInvalidArgument);
  OneNode pads = SumConv();
  pads.IntList("pads", {-1, 0, 0, 0});
  EXPECT_EQ(CreateCode(pads), absl::StatusCode::kUnimplemented);
}

TEST(ConvTest, BadInputsAreRefusedAtCreate) {
  // 4-D convolutions, integer inputs and a missing W.
  OneNode four_d("Conv", 13);
  four_d.inputs = {Iota({1, 1, 2, 2, 2, 2}), Iota({1, 1, 1, 1, 1, 1})};
  EXPECT_EQ(CreateCode(four_d), absl::StatusCode::kUnimplemented);
  OneNode ints("Conv", 13);
  ints.inputs = {T1<int32_t>({1, 1, 1, 1}, {1}),
                 T1<int32_t>({1, 1, 1, 1}, {1})};
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kInvalidArgument);
  OneNode no_w("Conv", 13);
  no_w.inputs = {Iota({1, 1, 3, 3})};
  EXPECT_EQ(CreateCode(no_w), absl::StatusCode::kInvalidArgument);
}

TEST(ConvTest, InputsThatDoNotFitAreInvalidAtRun) {
  OneNode channels("Conv", 13);  // X has 2 channels, W wants 3.
  channels.inputs = {Iota({1, 2, 3, 3}), Iota({1, 3, 1, 1})};
  EXPECT_EQ(RunCode(channels), absl::StatusCode::kInvalidArgument);
  OneNode ranks("Conv", 13);  // A 2-D X with a 1-D W.
  ranks.inputs = {Iota({1, 1, 3, 3}), Iota({1, 1, 2})};
  EXPECT_EQ(RunCode(ranks), absl::StatusCode::kInvalidArgument);
  OneNode kernel = SumConv();
  kernel.IntList("kernel_shape", {3, 3});
  EXPECT_EQ(RunCode(kernel), absl::StatusCode::kInvalidArgument);
  OneNode bias = SumConv();
  bias.inputs.push_back(Floats({2}, {0, 0}));  // One output channel.
  EXPECT_EQ(RunCode(bias), absl::StatusCode::kInvalidArgument);
  OneNode big("Conv", 13);  // A 3x3 window on a 2x2 image.
  big.inputs = {Iota({1, 1, 2, 2}), Iota({1, 1, 3, 3})};
  EXPECT_EQ(RunCode(big), absl::StatusCode::kInvalidArgument);
  OneNode strides = SumConv();  // One stride for two spatial axes.
  strides.IntList("strides", {1});
  EXPECT_EQ(RunCode(strides), absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------ pools

OneNode Pool(const std::string& op, Tensor x, std::vector<int64_t> kernel) {
  OneNode n(op, 13);
  n.inputs = {std::move(x)};
  n.IntList("kernel_shape", std::move(kernel));
  return n;
}

TEST(MaxPoolTest, HandComputedWindows) {
  OneNode n = Pool("MaxPool", Iota({1, 1, 4, 4}), {2, 2});
  n.IntList("strides", {2, 2});
  ExpectOutput(n, {1, 1, 2, 2}, {6, 8, 14, 16});
  // Dilation 2: the window takes every other pixel.
  OneNode dilated = Pool("MaxPool", Iota({1, 1, 4, 4}), {2, 2});
  dilated.IntList("dilations", {2, 2});
  ExpectOutput(dilated, {1, 1, 2, 2}, {11, 12, 15, 16});
  OneNode one_d = Pool("MaxPool", Floats({1, 1, 5}, {1, 3, 2, 5, 4}), {2});
  ExpectOutput(one_d, {1, 1, 4}, {3, 3, 5, 5});
}

TEST(MaxPoolTest, PaddingNeverWins) {
  // All values negative: a padded zero would be the max if it counted.
  std::vector<float> neg(9);
  for (int i = 0; i < 9; ++i) neg[i] = -(i + 1.0f);
  OneNode n = Pool("MaxPool", Floats({1, 1, 3, 3}, neg), {2, 2});
  n.IntList("pads", {1, 1, 1, 1}).IntList("strides", {2, 2});
  ExpectOutput(n, {1, 1, 2, 2}, {-1, -2, -4, -5});
}

TEST(MaxPoolTest, CeilModeAndAutoPadAddWindows) {
  OneNode floor = Pool("MaxPool", Iota({1, 1, 3, 3}), {2, 2});
  floor.IntList("strides", {2, 2});
  ExpectOutput(floor, {1, 1, 1, 1}, {5});
  // ceil_mode keeps the partial windows at the right and bottom edges.
  OneNode ceil = Pool("MaxPool", Iota({1, 1, 3, 3}), {2, 2});
  ceil.IntList("strides", {2, 2}).Int("ceil_mode", 1);
  ExpectOutput(ceil, {1, 1, 2, 2}, {5, 6, 8, 9});
  // SAME_UPPER with stride 2 on 5 values: 3 windows, the last one padded.
  OneNode same = Pool("MaxPool", Floats({1, 1, 5}, {1, 3, 2, 5, 4}), {2});
  same.IntList("strides", {2}).String("auto_pad", "SAME_UPPER");
  ExpectOutput(same, {1, 1, 3}, {3, 5, 4});
}

TEST(MaxPoolTest, IndicesOutputIsRefused) {
  ModelBuilder mp(13);
  mp.Input("x", {1, 1, 4, 4})
      .Node("MaxPool", {"x"}, {"y", "idx"}, "pool")
      .Attr("kernel_shape", std::vector<int64_t>{2, 2})
      .Output("y");
  auto e = Executor::Create(mp.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("Indices"));
}

TEST(PoolTest, BadAttributesAreRefusedAtCreate) {
  OneNode no_kernel("MaxPool", 13);
  no_kernel.inputs = {Iota({1, 1, 3, 3})};
  EXPECT_EQ(CreateCode(no_kernel), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCode(Pool("MaxPool", Iota({1, 1, 2, 2, 2, 2}), {1, 1, 1, 1})),
            absl::StatusCode::kUnimplemented);
  OneNode order = Pool("MaxPool", Iota({1, 1, 3, 3}), {2, 2});
  order.Int("storage_order", 2);
  EXPECT_EQ(CreateCode(order), absl::StatusCode::kUnimplemented);
  OneNode ceil = Pool("AveragePool", Iota({1, 1, 3, 3}), {2, 2});
  ceil.Int("ceil_mode", 2);
  EXPECT_EQ(CreateCode(ceil), absl::StatusCode::kUnimplemented);
  OneNode cip = Pool("AveragePool", Iota({1, 1, 3, 3}), {2, 2});
  cip.Int("count_include_pad", 2);
  EXPECT_EQ(CreateCode(cip), absl::StatusCode::kUnimplemented);
  OneNode auto_pad = Pool("AveragePool", Iota({1, 1, 3, 3}), {2, 2});
  auto_pad.String("auto_pad", "SAME_SIDEWAYS");
  EXPECT_EQ(CreateCode(auto_pad), absl::StatusCode::kUnimplemented);
  OneNode ints =
      Pool("MaxPool", T1<int32_t>({1, 1, 2, 2}, {1, 2, 3, 4}), {2, 2});
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kInvalidArgument);
  // AveragePool-19's dilations are not read, so they are refused by name.
  OneNode dilated = Pool("AveragePool", Iota({1, 1, 3, 3}), {2, 2});
  dilated.opset = 19;
  dilated.IntList("dilations", {2, 2});
  absl::Status s = dilated.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dilations"));
}

TEST(PoolTest, InputsThatDoNotFitTheWindowAreRefusedAtRun) {
  // A 2-D window on a 1-D input or on a 3-D one, a 4-D input, a window
  // larger than the image.
  EXPECT_EQ(RunCode(Pool("MaxPool", Iota({1, 1, 4}), {2, 2})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunCode(Pool("AveragePool", Iota({1, 1, 2, 2, 2}), {1, 1})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunCode(Pool("AveragePool", Iota({1, 1, 2, 2, 2, 2}), {1, 1})),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(RunCode(Pool("AveragePool", Iota({1, 1, 2, 2}), {3, 3})),
            absl::StatusCode::kInvalidArgument);
}

// 3-D pools (video and volumetric models) against the definition, written
// out: each output position scans its whole window; padding never wins a
// max, and an average divides by the window's positions inside the input
// (or, with count_include_pad, inside the padded input).
struct Pool3DCase {
  bool max;
  std::vector<int64_t> x, k, strides, dilations, pads;
  bool ceil_mode, count_include_pad;
};

std::vector<float> RefPool3D(const Pool3DCase& p, const std::vector<float>& x,
                             std::vector<int64_t>* shape) {
  int64_t out[3];
  for (int i = 0; i < 3; ++i) {
    const int64_t extent = p.dilations[i] * (p.k[i] - 1) + 1;
    const int64_t span = p.x[2 + i] + p.pads[i] + p.pads[3 + i] - extent;
    out[i] = (p.ceil_mode ? (span + p.strides[i] - 1) / p.strides[i]
                          : span / p.strides[i]) +
             1;
  }
  *shape = {p.x[0], p.x[1], out[0], out[1], out[2]};
  std::vector<float> y;
  for (int64_t nc = 0; nc < p.x[0] * p.x[1]; ++nc) {
    for (int64_t a = 0; a < out[0]; ++a) {
      for (int64_t b = 0; b < out[1]; ++b) {
        for (int64_t c = 0; c < out[2]; ++c) {
          const int64_t o[3] = {a, b, c};
          double acc = p.max ? -INFINITY : 0.0;
          int64_t real = 0, padded = 0;
          for (int64_t u = 0; u < p.k[0]; ++u) {
            for (int64_t v = 0; v < p.k[1]; ++v) {
              for (int64_t w = 0; w < p.k[2]; ++w) {
                const int64_t t[3] = {u, v, w};
                int64_t pos[3];
                bool inside = true, in_padded = true;
                for (int i = 0; i < 3; ++i) {
                  pos[i] =
                      o[i] * p.strides[i] - p.pads[i] + t[i] * p.dilations[i];
                  inside = inside && pos[i] >= 0 && pos[i] < p.x[2 + i];
                  in_padded = in_padded && pos[i] < p.x[2 + i] + p.pads[3 + i];
                }
                padded += in_padded;
                if (!inside) continue;
                ++real;
                const float v0 =
                    x[((nc * p.x[2] + pos[0]) * p.x[3] + pos[1]) * p.x[4] +
                      pos[2]];
                acc = p.max ? std::max<double>(acc, v0) : acc + v0;
              }
            }
          }
          if (!p.max) {
            const int64_t count = p.count_include_pad ? padded : real;
            acc = count > 0 ? acc / count : 0.0;
          }
          y.push_back(static_cast<float>(acc));
        }
      }
    }
  }
  return y;
}

TEST(PoolTest, ThreeDimensionalPoolsMatchTheDefinition) {
  ThreadPool pool(2);
  // One case per line.
  // clang-format off
  const std::vector<Pool3DCase> cases = {
      // max, x, kernel, strides, dilations, pads, ceil_mode, count_include_pad
      {true, {1, 2, 4, 5, 6}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0, 0, 0, 0}, false, false},
      {true, {2, 3, 5, 6, 4}, {3, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, false, false},
      {true, {1, 2, 7, 5, 5}, {2, 2, 2}, {2, 1, 2}, {2, 1, 2}, {0, 1, 0, 1, 0, 1}, true, false},
      {false, {1, 3, 4, 6, 5}, {2, 3, 2}, {2, 2, 1}, {1, 1, 1}, {1, 1, 0, 0, 1, 1}, false, false},
      {false, {1, 3, 4, 6, 5}, {2, 3, 2}, {2, 2, 1}, {1, 1, 1}, {1, 1, 0, 0, 1, 1}, false, true},
      {false, {2, 2, 5, 5, 5}, {3, 2, 2}, {2, 2, 2}, {1, 1, 1}, {1, 0, 1, 1, 0, 1}, true, true},
      {false, {2, 2, 5, 5, 5}, {3, 2, 2}, {2, 2, 2}, {1, 1, 1}, {1, 0, 1, 1, 0, 1}, true, false},
  };
  // clang-format on
  for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (size_t c = 0; c < cases.size(); ++c) {
      const Pool3DCase& p = cases[c];
      SCOPED_TRACE(absl::StrCat("case ", c, threads ? " threaded" : ""));
      const std::vector<float> x = Random(testing::Product(p.x), 4 + c);
      ModelBuilder mb(13);
      mb.Input("x", p.x);
      auto& node =
          mb.Node(p.max ? "MaxPool" : "AveragePool", {"x"}, {"y"}, "pool")
              .Attr("kernel_shape", p.k)
              .Attr("strides", p.strides)
              .Attr("pads", p.pads)
              .Attr("ceil_mode", int64_t{p.ceil_mode});
      if (p.max) {
        node.Attr("dilations", p.dilations);
      } else {
        node.Attr("count_include_pad", int64_t{p.count_include_pad});
      }
      mb.Output("y");
      absl::StatusOr<std::vector<Tensor>> out = RunX(mb, p.x, x, threads);
      ASSERT_TRUE(out.ok()) << out.status();
      std::vector<int64_t> shape;
      const std::vector<float> want = RefPool3D(p, x, &shape);
      ASSERT_EQ((*out)[0].shape(), shape);
      ExpectNear((*out)[0].data<float>(), want, 1e-5, "pool 3-D");
    }
  }
}

TEST(AveragePoolTest, HandComputedWindows) {
  OneNode n = Pool("AveragePool", Iota({1, 1, 4, 4}), {2, 2});
  n.IntList("strides", {2, 2});
  ExpectOutput(n, {1, 1, 2, 2}, {3.5f, 5.5f, 11.5f, 13.5f});
  OneNode one_d = Pool("AveragePool", Floats({1, 1, 4}, {1, 3, 2, 6}), {2});
  ExpectOutput(one_d, {1, 1, 3}, {2, 2.5f, 4});
}

TEST(AveragePoolTest, CountIncludePadDecidesTheDivisor) {
  // Padding 1 all round, 2x2 windows, stride 2 over 1..9: the corner windows
  // hold 1, 2 and 4 pixels and the last one 4 (5, 6, 8, 9).
  OneNode excluded = Pool("AveragePool", Iota({1, 1, 3, 3}), {2, 2});
  excluded.IntList("pads", {1, 1, 1, 1}).IntList("strides", {2, 2});
  ExpectOutput(excluded, {1, 1, 2, 2},
               {1, (2 + 3) / 2.0f, (4 + 7) / 2.0f, (5 + 6 + 8 + 9) / 4.0f});
  OneNode included = excluded;
  included.Int("count_include_pad", 1);
  ExpectOutput(included, {1, 1, 2, 2},
               {1 / 4.0f, (2 + 3) / 4.0f, (4 + 7) / 4.0f, 7});
}

TEST(AveragePoolTest, CeilModeAveragesThePartialWindows) {
  OneNode n = Pool("AveragePool", Iota({1, 1, 3, 3}), {2, 2});
  n.IntList("strides", {2, 2}).Int("ceil_mode", 1);
  ExpectOutput(n, {1, 1, 2, 2},
               {(1 + 2 + 4 + 5) / 4.0f, (3 + 6) / 2.0f, (7 + 8) / 2.0f, 9});
}

TEST(GlobalAveragePoolTest, MeanOverEverySpatialAxis) {
  OneNode n("GlobalAveragePool", 13);
  n.inputs = {Iota({1, 2, 2, 2})};
  ExpectOutput(n, {1, 2, 1, 1}, {2.5f, 6.5f});
  OneNode one_d("GlobalAveragePool", 13);
  one_d.inputs = {Floats({2, 1, 3}, {1, 2, 6, -1, -2, -6})};
  ExpectOutput(one_d, {2, 1, 1}, {3, -3});
}

TEST(GlobalAveragePoolTest, BadInputsAreRefused) {
  OneNode matrix("GlobalAveragePool", 13);  // No spatial axis.
  matrix.inputs = {Iota({2, 2})};
  EXPECT_EQ(RunCode(matrix), absl::StatusCode::kInvalidArgument);
  OneNode ints("GlobalAveragePool", 13);
  ints.inputs = {T1<int32_t>({1, 1, 1}, {1})};
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kInvalidArgument);
}

// -------------------------------------------------------------------- Gemm

// A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[1,1]]: AB = [[4,5],[10,11]].
OneNode ABGemm() {
  OneNode n("Gemm", 13);
  n.inputs = {Iota({2, 3}), Floats({3, 2}, {1, 0, 0, 1, 1, 1})};
  return n;
}

TEST(GemmTest, ProductWithoutC) {
  ExpectOutput(ABGemm(), {2, 2}, {4, 5, 10, 11});
}

TEST(GemmTest, TransposedOperands) {
  OneNode ta("Gemm", 13);
  ta.inputs = {Floats({3, 2}, {1, 4, 2, 5, 3, 6}),
               Floats({3, 2}, {1, 0, 0, 1, 1, 1})};
  ta.Int("transA", 1);
  ExpectOutput(ta, {2, 2}, {4, 5, 10, 11});
  OneNode tb("Gemm", 13);
  tb.inputs = {Iota({2, 3}), Floats({2, 3}, {1, 0, 1, 0, 1, 1})};
  tb.Int("transB", 1);
  ExpectOutput(tb, {2, 2}, {4, 5, 10, 11});
  OneNode both("Gemm", 13);
  both.inputs = {Floats({3, 2}, {1, 4, 2, 5, 3, 6}),
                 Floats({2, 3}, {1, 0, 1, 0, 1, 1})};
  both.Int("transA", 1).Int("transB", 1);
  ExpectOutput(both, {2, 2}, {4, 5, 10, 11});
}

TEST(GemmTest, AlphaAndBetaScale) {
  // 2 * AB + 0.5 * C.
  OneNode n = ABGemm();
  n.inputs.push_back(Floats({2, 2}, {1, 2, 3, 4}));
  n.Float("alpha", 2).Float("beta", 0.5f);
  ExpectOutput(n, {2, 2}, {8.5f, 11, 21.5f, 24});
  // beta 0 drops C.
  OneNode no_c = ABGemm();
  no_c.inputs.push_back(Floats({2, 2}, {1, 2, 3, 4}));
  no_c.Float("beta", 0);
  ExpectOutput(no_c, {2, 2}, {4, 5, 10, 11});
}

TEST(GemmTest, CBroadcastsToTheOutput) {
  const std::vector<std::pair<Tensor, std::vector<float>>> cases = {
      {Floats({}, {10}), {14, 15, 20, 21}},             // Scalar.
      {Floats({1, 1}, {10}), {14, 15, 20, 21}},         // [1, 1].
      {Floats({2}, {10, 20}), {14, 25, 20, 31}},        // A row.
      {Floats({1, 2}, {10, 20}), {14, 25, 20, 31}},     // A row, [1, N].
      {Floats({2, 1}, {10, 20}), {14, 15, 30, 31}},     // A column.
      {Floats({2, 2}, {1, 2, 3, 4}), {5, 7, 13, 15}}};  // Full.
  for (const auto& [c, want] : cases) {
    SCOPED_TRACE(ShapeString(c.shape()));
    OneNode n = ABGemm();
    n.inputs.push_back(c);
    ExpectOutput(n, {2, 2}, want);
    // The same C as an initializer.
    n.constant = {false, false, true};
    ExpectOutput(n, {2, 2}, want);
  }
}

TEST(GemmTest, BadShapesAreInvalid) {
  OneNode rank3("Gemm", 13);
  rank3.inputs = {Iota({1, 2, 3}), Iota({3, 2})};
  EXPECT_EQ(RunCode(rank3), absl::StatusCode::kInvalidArgument);
  OneNode inner("Gemm", 13);
  inner.inputs = {Iota({2, 3}), Iota({2, 2})};
  EXPECT_EQ(RunCode(inner), absl::StatusCode::kInvalidArgument);
  for (const std::vector<int64_t>& c :
       std::vector<std::vector<int64_t>>{{3}, {2, 3}, {1, 2, 2}}) {
    SCOPED_TRACE(ShapeString(c));
    OneNode n = ABGemm();
    n.inputs.push_back(Iota(c));
    EXPECT_EQ(RunCode(n), absl::StatusCode::kInvalidArgument);
  }
  OneNode ints("Gemm", 13);
  ints.inputs = {T1<int32_t>({1, 1}, {1}), T1<int32_t>({1, 1}, {1})};
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kUnimplemented);
}

// ---------------------------------------------------------- MatMul tester

// numpy matmul by definition: broadcast batch dims, rank-1 promotion.
std::vector<float> RefMatMul(std::vector<int64_t> as,
                             const std::vector<float>& a,
                             std::vector<int64_t> bs,
                             const std::vector<float>& b,
                             std::vector<int64_t>* ys) {
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const size_t rank = std::max(as.size(), bs.size());
  while (as.size() < rank) as.insert(as.begin(), 1);
  while (bs.size() < rank) bs.insert(bs.begin(), 1);
  std::vector<int64_t> batch;
  for (size_t i = 0; i + 2 < rank; ++i) batch.push_back(std::max(as[i], bs[i]));
  const int64_t nb = testing::Product(batch);
  std::vector<float> y(nb * m * n);
  for (int64_t bi = 0; bi < nb; ++bi) {
    // Decompose the batch index and map it into A and B.
    int64_t rest = bi, ao = 0, bo = 0, astride = 1, bstride = 1;
    for (int i = static_cast<int>(batch.size()) - 1; i >= 0; --i) {
      const int64_t idx = rest % batch[i];
      rest /= batch[i];
      ao += (as[i] == 1 ? 0 : idx) * astride;
      bo += (bs[i] == 1 ? 0 : idx) * bstride;
      astride *= as[i];
      bstride *= bs[i];
    }
    testing::RefMatrixProduct(a.data() + ao * m * k, b.data() + bo * k * n, m,
                              k, n, y.data() + bi * m * n);
  }
  *ys = batch;
  if (!a1) ys->push_back(m);
  if (!b1) ys->push_back(n);
  return y;
}

void TestMatMul(const std::vector<int64_t>& as, const std::vector<int64_t>& bs,
                ThreadPool* pool, bool b_is_weight) {
  const std::string what = absl::StrCat(
      "matmul ", ShapeString(as), " x ", ShapeString(bs),
      b_is_weight ? " (B initializer)" : "", pool ? " threaded" : "");
  SCOPED_TRACE(what);
  const std::vector<float> a = Random(testing::Product(as), 4);
  const std::vector<float> b = Random(testing::Product(bs), 5);
  ModelBuilder mb(13);
  mb.Input("a", as);
  if (b_is_weight) {
    mb.Initializer("b", bs, b);
  } else {
    mb.Input("b", bs);
  }
  mb.Node("MatMul", {"a", "b"}, {"y"}, "mm").Output("y");
  auto exec = MustCreate(mb.Build());
  ASSERT_NE(exec, nullptr);
  absl::flat_hash_map<std::string, Tensor> feeds = {
      {"a", Tensor::FromVector<float>(as, a)}};
  if (!b_is_weight) feeds["b"] = Tensor::FromVector<float>(bs, b);
  Executor::RunOptions ro;
  ro.pool = pool;
  auto out = exec->Run(feeds, ro);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<int64_t> ys;
  std::vector<float> want = RefMatMul(as, a, bs, b, &ys);
  ASSERT_EQ((*out)[0].shape(), ys);
  ExpectNear((*out)[0].data<float>(), want, 1e-4, what);
}

TEST(MatMulTest, MatchesReferenceOnManyShapes) {
  ThreadPool pool(2);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      cases = {
          {{3, 4}, {4, 5}},
          {{1, 1}, {1, 1}},
          {{64, 128}, {128, 96}},  // Big enough to split over threads.
          {{200, 8}, {8, 300}},
          {{4}, {4, 5}},              // Rank-1 A.
          {{3, 4}, {4}},              // Rank-1 B.
          {{7}, {7}},                 // Dot product.
          {{2, 3, 4}, {4, 5}},        // Batched A, matrix B.
          {{2, 3, 4}, {2, 4, 5}},     // Batched both.
          {{2, 1, 3, 4}, {5, 4, 2}},  // Broadcast batch dims.
          {{1, 3, 4}, {6, 4, 2}},
          {{6, 3, 4}, {1, 4, 2}},
          {{2, 2, 8, 16}, {2, 2, 16, 8}},
          {{5, 4}, {3, 4, 6}},  // Matrix A, batched B.
          {{2, 3, 4}, {4}},
          {{4}, {2, 4, 3}},
      };
  for (const auto& [as, bs] : cases) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      TestMatMul(as, bs, p, false);
      TestMatMul(as, bs, p, true);
    }
  }
}

TEST(MatMulTest, MismatchedInnerDimIsInvalid) {
  ModelBuilder mb(13);
  mb.Input("a", {2, 3})
      .Input("b", {4, 5})
      .Node("MatMul", {"a", "b"}, {"y"}, "mm")
      .Output("y");
  auto exec = MustCreate(mb.Build());
  auto out =
      exec->Run({{"a", Tensor::FromVector<float>({2, 3}, Random(6, 1))},
                 {"b", Tensor::FromVector<float>({4, 5}, Random(20, 1))}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'mm'"));
}

TEST(MatMulTest, HandComputedRankOneOperands) {
  // [[1,2,3],[4,5,6]] x [1,1,1] = [6, 15]; [1,1] x [[1,2,3],[4,5,6]] = [5,7,9].
  OneNode col("MatMul", 13);
  col.inputs = {Iota({2, 3}), Floats({3}, {1, 1, 1})};
  ExpectOutput(col, {2}, {6, 15});
  OneNode row("MatMul", 13);
  row.inputs = {Floats({2}, {1, 1}), Iota({2, 3})};
  ExpectOutput(row, {3}, {5, 7, 9});
}

TEST(MatMulTest, BadInputsAreRefused) {
  OneNode scalar("MatMul", 13);
  scalar.inputs = {Floats({}, {2}), Iota({2, 2})};
  EXPECT_EQ(RunCode(scalar), absl::StatusCode::kInvalidArgument);
  OneNode batch("MatMul", 13);  // Batches 2 and 3 do not broadcast.
  batch.inputs = {Iota({2, 2, 3}), Iota({3, 3, 2})};
  EXPECT_EQ(RunCode(batch), absl::StatusCode::kInvalidArgument);
  OneNode ints("MatMul", 13);
  ints.inputs = {T1<int32_t>({1, 1}, {1}), T1<int32_t>({1, 1}, {1})};
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kUnimplemented);
}

// ------------------------------------------------------ BatchNormalization

// X [1, 2, 1, 2] = [[1, 2], [3, 4]] by channel.
OneNode BatchNorm(int64_t opset, std::vector<float> var) {
  OneNode n("BatchNormalization", opset);
  n.inputs = {Iota({1, 2, 1, 2}), Floats({2}, {1, 2}), Floats({2}, {0, 1}),
              Floats({2}, {1, 2}), Floats({2}, std::move(var))};
  n.constant = {false, true, true, true, true};
  return n;
}

TEST(BatchNormalizationTest, HandComputedWithEpsilon) {
  // y = scale * (x - mean) / sqrt(var + epsilon) + bias; with var 0 and 0.75
  // and epsilon 0.25 the divisors are 0.5 and 1: channel 0 (x - 1) * 2,
  // channel 1 (x - 2) * 2 + 1.
  OneNode n = BatchNorm(15, {0, 0.75f});
  n.Float("epsilon", 0.25f);
  ExpectOutput(n, {1, 2, 1, 2}, {0, 2, 3, 5});
  // The default epsilon is 1e-5.
  OneNode dflt = BatchNorm(15, {1, 1});
  const float d = 1 / std::sqrt(1 + 1e-5f);
  ExpectOutput(dflt, {1, 2, 1, 2}, {0, d, 2 * d + 1, 4 * d + 1});
  // Opset 7 (spatial 1, the only mode) computes the same.
  OneNode old = BatchNorm(7, {0, 0.75f});
  old.Float("epsilon", 0.25f).Int("spatial", 1);
  ExpectOutput(old, {1, 2, 1, 2}, {0, 2, 3, 5});
}

TEST(BatchNormalizationTest, TrainingModeIsRefused) {
  ModelBuilder mb(15);
  mb.Input("x", {1, 2, 3, 3})
      .Weight("s", {2})
      .Weight("b", {2})
      .Weight("m", {2})
      .Initializer("v", {2}, {1.0f, 1.0f})
      .Node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, "bn")
      .Attr("training_mode", 1)
      .Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("training_mode"));
}

TEST(BatchNormalizationTest, OtherTrainingFormsAreRefused) {
  OneNode spatial = BatchNorm(7, {1, 1});
  spatial.Int("spatial", 0);
  EXPECT_EQ(CreateCode(spatial), absl::StatusCode::kUnimplemented);
  OneNode outputs = BatchNorm(9, {1, 1});  // Running mean and variance out.
  outputs.outputs = 3;
  EXPECT_EQ(CreateCode(outputs), absl::StatusCode::kUnimplemented);
}

TEST(BatchNormalizationTest, BadInputsAreRefused) {
  OneNode mean = BatchNorm(15, {1, 1});
  mean.inputs[3] = Floats({3}, {0, 0, 0});  // Three channels' mean for two.
  EXPECT_EQ(RunCode(mean), absl::StatusCode::kInvalidArgument);
  OneNode flat = BatchNorm(15, {1, 1});
  flat.inputs[0] = Floats({2}, {1, 2});  // No channel axis.
  EXPECT_EQ(RunCode(flat), absl::StatusCode::kInvalidArgument);
  OneNode ints = BatchNorm(15, {1, 1});
  ints.inputs[0] = T1<int32_t>({1, 2, 1, 1}, {1, 2});
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kInvalidArgument);
}

// ----------------------------------------------------------------- Softmax

// The expected values are numpy's, in double:
// e = np.exp(x - x.max(axis, keepdims=True)); e / e.sum(axis, keepdims=True).
TEST(SoftmaxTest, Opset13IsPerAxis) {
  OneNode last("Softmax", 13);  // axis -1 by default.
  last.inputs = {Floats({2, 3}, {1, 2, 3, 1, 1, 1})};
  ExpectOutput(last, {2, 3},
               {0.09003057317038046f, 0.24472847105479764f, 0.6652409557748218f,
                1 / 3.0f, 1 / 3.0f, 1 / 3.0f});
  OneNode first = last;
  first.Int("axis", 0);
  ExpectOutput(first, {2, 3},
               {0.5f, 0.7310585786300049f, 0.8807970779778823f, 0.5f,
                0.2689414213699951f, 0.11920292202211755f});
}

TEST(SoftmaxTest, BeforeOpset13TheInputIsFlattenedAtAxis) {
  // [2, 2, 2] of 0..7 at the default axis 1 is a softmax over rows of 4.
  std::vector<float> x(8);
  for (int i = 0; i < 8; ++i) x[i] = static_cast<float>(i);
  OneNode n("Softmax", 11);
  n.inputs = {Floats({2, 2, 2}, x)};
  const std::vector<float> row = {0.03205860328008499f, 0.08714431874203257f,
                                  0.23688281808991013f, 0.6439142598879724f};
  std::vector<float> want = row;
  want.insert(want.end(), row.begin(), row.end());
  ExpectOutput(n, {2, 2, 2}, want);
  // At axis 2 the rows are pairs (v, v + 1).
  OneNode pairs = n;
  pairs.Int("axis", 2);
  std::vector<float> pair_want;
  for (int i = 0; i < 4; ++i) {
    pair_want.push_back(0.2689414213699951f);
    pair_want.push_back(0.7310585786300049f);
  }
  ExpectOutput(pairs, {2, 2, 2}, pair_want);
}

TEST(SoftmaxTest, LargeValuesDoNotOverflow) {
  OneNode n("Softmax", 13);
  n.inputs = {Floats({2}, {1000, 1001})};
  ExpectOutput(n, {2}, {0.2689414213699951f, 0.7310585786300049f});
}

TEST(SoftmaxTest, AnEmptyAxisGivesAnEmptyOutput) {
  for (const int opset : {11, 13}) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{2, 0}, std::vector<int64_t>{0, 2},
          std::vector<int64_t>{2, 0, 3}}) {
      OneNode n("Softmax", opset);
      n.Int("axis", 1);
      n.inputs = {Floats(shape, {})};
      ExpectOutput(n, shape, {});
    }
  }
}

TEST(SoftmaxTest, BadInputsAreRefused) {
  OneNode axis("Softmax", 13);
  axis.inputs = {Iota({2, 3})};
  axis.Int("axis", 2);
  EXPECT_EQ(RunCode(axis), absl::StatusCode::kInvalidArgument);
  OneNode ints("Softmax", 13);
  ints.inputs = {T1<int32_t>({2}, {1, 2})};
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------ LayerNormalization

// The expected values are numpy's, in double: over the axes from `axis` on,
// m = x.mean(), inv = 1 / np.sqrt(((x - m) ** 2).mean() + epsilon),
// y = (x - m) * inv * scale + bias.
TEST(LayerNormalizationTest, LastAxisWithScaleBiasAndStatistics) {
  OneNode n("LayerNormalization", 17);
  n.inputs = {Floats({2, 3}, {1, 2, 3, 2, 4, 6}), Floats({3}, {1, 2, 3}),
              Floats({3}, {0.5f, 0, -0.5f})};
  n.outputs = 3;
  ExpectOutput(n, {2, 3},
               {-0.7247356859083902f, 0, 3.1742070577251704f,
                -0.7247425750014138f, 0, 3.1742277250042417f},
               1e-5);
  ExpectOutput(n, {2, 1}, {2, 4}, 1e-6, /*o=*/1);
  ExpectOutput(n, {2, 1}, {1.2247356859083902f, 0.6123712875007069f}, 1e-5,
               /*o=*/2);
}

TEST(LayerNormalizationTest, AxisZeroEpsilonAndBroadcastScale) {
  // Over the whole [2, 3] with epsilon 0; a [1] scale of 2, no bias.
  OneNode n("LayerNormalization", 17);
  n.inputs = {Floats({2, 3}, {1, 2, 3, 2, 4, 6}), Floats({1}, {2})};
  n.outputs = 3;
  n.Int("axis", 0).Float("epsilon", 0);
  ExpectOutput(n, {2, 3},
               {-2.449489742783178f, -1.224744871391589f, 0,
                -1.224744871391589f, 1.224744871391589f, 3.674234614174767f},
               1e-5);
  ExpectOutput(n, {1, 1}, {3}, 1e-6, /*o=*/1);
  ExpectOutput(n, {1, 1}, {0.6123724356957945f}, 1e-6, /*o=*/2);
}

TEST(LayerNormalizationTest, BadInputsAreRefused) {
  OneNode stash("LayerNormalization", 17);
  stash.inputs = {Iota({2, 3}), Floats({3}, {1, 1, 1})};
  stash.Int("stash_type", 0);
  EXPECT_EQ(CreateCode(stash), absl::StatusCode::kUnimplemented);
  OneNode scale("LayerNormalization", 17);  // [2] does not broadcast to [3].
  scale.inputs = {Iota({2, 3}), Floats({2}, {1, 1})};
  EXPECT_EQ(RunCode(scale), absl::StatusCode::kInvalidArgument);
  OneNode axis("LayerNormalization", 17);
  axis.inputs = {Iota({2, 3}), Floats({3}, {1, 1, 1})};
  axis.Int("axis", 2);
  EXPECT_EQ(RunCode(axis), absl::StatusCode::kInvalidArgument);
  OneNode ints("LayerNormalization", 17);
  ints.inputs = {T1<int32_t>({1, 3}, {1, 2, 3}), Floats({3}, {1, 1, 1})};
  EXPECT_EQ(CreateCode(ints), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::executor
