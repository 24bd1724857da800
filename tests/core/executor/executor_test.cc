#include "core/executor/executor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/npy.h"
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

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(gen);
  return v;
}

void AddStringAttr(onnx::ModelProto* m, const std::string& name,
                   const std::string& value) {
  auto* nodes = m->mutable_graph()->mutable_node();
  auto* a = nodes->Mutable(nodes->size() - 1)->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

std::unique_ptr<Executor> MustCreate(const onnx::ModelProto& m) {
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(m);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

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
    auto exec = MustCreate(mb.Build());
    ASSERT_NE(exec, nullptr);
    Executor::RunOptions ro;
    ro.pool = pool_;
    absl::StatusOr<std::vector<Tensor>> out =
        exec->Run({{"x", Tensor::FromVector<float>(xs, x)}}, ro);
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

// Float Clip and Relu take a vectorised clamp: bounds, NaN kept, -0 kept,
// odd lengths, and lengths the pool splits.
TEST(ClipReluTest, FloatClampMatchesScalarRule) {
  ThreadPool pool(2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (int64_t n : {1, 7, 33, 100003}) {
      std::vector<float> x = Random(n, 5);
      for (float& v : x) v *= 10.0f;
      x[0] = nan;
      if (n > 1) x[1] = -0.0f;
      if (n > 2) x[2] = std::numeric_limits<float>::infinity();
      ModelBuilder mb(13);
      mb.Input("x", {n})
          .Initializer("lo", {}, {-1.5f})
          .Initializer("hi", {}, {6.0f})
          .Node("Clip", {"x", "lo", "hi"}, {"c"}, "clip")
          .Node("Relu", {"x"}, {"r"}, "relu")
          .Output("c")
          .Output("r");
      auto exec = MustCreate(mb.Build());
      ASSERT_NE(exec, nullptr);
      Executor::RunOptions ro;
      ro.pool = p;
      absl::StatusOr<std::vector<Tensor>> out =
          exec->Run({{"x", Tensor::FromVector<float>({n}, x)}}, ro);
      ASSERT_TRUE(out.ok()) << out.status();
      const float* c = (*out)[0].data<float>();
      const float* r = (*out)[1].data<float>();
      EXPECT_TRUE(std::isnan(c[0]));
      EXPECT_TRUE(std::isnan(r[0]));
      for (int64_t i = 1; i < n; ++i) {
        const float want_c = std::min(std::max(x[i], -1.5f), 6.0f);
        const float want_r = std::max(x[i], 0.0f);
        ASSERT_EQ(c[i], want_c) << "Clip at " << i << " of " << n;
        ASSERT_EQ(r[i], want_r) << "Relu at " << i << " of " << n;
        ASSERT_EQ(std::signbit(r[i]), std::signbit(want_r)) << i;
      }
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

// ------------------------------------------------------------ broadcasting

TEST(BroadcastTest, BinaryOpsMatchNaiveBroadcast) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      cases = {
          {{2, 3, 4}, {2, 3, 4}},    {{2, 3, 4}, {}},     {{}, {2, 3, 4}},
          {{2, 3, 4}, {4}},          {{2, 3, 4}, {3, 1}}, {{2, 1, 4}, {3, 1}},
          {{1, 3, 1}, {2, 1, 4}},    {{5, 1}, {1, 6}},    {{1}, {7}},
          {{2, 3, 1, 5}, {3, 4, 1}}, {{0, 3}, {1, 3}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const auto& [as, bs] : cases) {
      SCOPED_TRACE(
          absl::StrCat(op, " ", ShapeString(as), " ", ShapeString(bs)));
      const std::vector<float> a = Random(testing::Product(as), 7);
      std::vector<float> b = Random(testing::Product(bs), 8);
      for (float& v : b) v += 2.0f;  // No division by ~0.
      ModelBuilder mb(13);
      mb.Input("a", as).Input("b", bs).Node(op, {"a", "b"}, {"y"}).Output("y");
      auto exec = MustCreate(mb.Build());
      auto out = exec->Run({{"a", Tensor::FromVector<float>(as, a)},
                            {"b", Tensor::FromVector<float>(bs, b)}});
      ASSERT_TRUE(out.ok()) << out.status();
      const Tensor& y = (*out)[0];
      // Naive: for every output index, index each input right-aligned.
      const size_t rank = y.shape().size();
      std::vector<int64_t> idx(rank, 0);
      for (int64_t i = 0; i < y.size(); ++i) {
        int64_t rest = i;
        for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
          idx[d] = rest % y.dim(d);
          rest /= y.dim(d);
        }
        auto at = [&](const std::vector<int64_t>& s) {
          int64_t off = 0;
          for (size_t d = 0; d < s.size(); ++d) {
            const int64_t j = idx[rank - s.size() + d];
            off = off * s[d] + (s[d] == 1 ? 0 : j);
          }
          return off;
        };
        const float x0 = a[at(as)], x1 = b[at(bs)];
        const float want = std::string(op) == "Add"   ? x0 + x1
                           : std::string(op) == "Sub" ? x0 - x1
                           : std::string(op) == "Mul" ? x0 * x1
                                                      : x0 / x1;
        ASSERT_FLOAT_EQ(y.data<float>()[i], want) << "at flat position " << i;
      }
    }
  }
}

TEST(BroadcastTest, IncompatibleShapesAreInvalid) {
  ModelBuilder mb(13);
  mb.Input("a", {2, 3})
      .Input("b", {4})
      .Node("Add", {"a", "b"}, {"y"}, "add")
      .Output("y");
  auto exec = MustCreate(mb.Build());
  auto out = exec->Run({{"a", Tensor::FromVector<float>({2, 3}, Random(6, 1))},
                        {"b", Tensor::FromVector<float>({4}, Random(4, 1))}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("broadcast"));
}

// ------------------------------------------------------------------ memory

TEST(MemoryTest, IntermediatesAreFreedAfterTheirLastReader) {
  // x -> 30 Relus -> y. Without freeing, 31 buffers would be alive at the
  // end; with it, at most the feed, the previous value and the new one.
  constexpr int kChain = 30;
  ModelBuilder mb(13);
  mb.Input("x", {1000});
  std::string prev = "x";
  for (int i = 0; i < kChain; ++i) {
    const std::string out = i + 1 == kChain ? "y" : absl::StrCat("r", i);
    mb.Node("Relu", {prev}, {out});
    prev = out;
  }
  mb.Output("y");
  auto exec = MustCreate(mb.Build());
  ASSERT_NE(exec, nullptr);
  const absl::flat_hash_map<std::string, Tensor> feeds = {
      {"x", Tensor::FromVector<float>({1000}, Random(1000, 1))}};
  const int64_t base = Tensor::LiveBuffers();  // The feed (and nothing else).
  int64_t peak = 0;
  int calls = 0;
  Executor::RunOptions ro;
  ro.on_tensor = [&](const std::string&, const Tensor&) {
    ++calls;
    peak = std::max(peak, Tensor::LiveBuffers() - base);
  };
  auto out = exec->Run(feeds, ro);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(calls, kChain + 1);  // The input, then every node output.
  EXPECT_LE(peak, 2);            // Previous value + the one just made.
  // After the run only the returned output is still ours.
  EXPECT_EQ(Tensor::LiveBuffers() - base, 1);
  out->clear();
  EXPECT_EQ(Tensor::LiveBuffers() - base, 0);
}

TEST(MemoryTest, FanOutKeepsValueUntilLastReader) {
  // a is read by the first and the last node: it must survive in between.
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"a"})
      .Node("Neg", {"a"}, {"b"})
      .Node("Neg", {"b"}, {"c"})
      .Node("Add", {"a", "c"}, {"y"})
      .Output("y");
  auto exec = MustCreate(mb.Build());
  auto out = exec->Run(
      {{"x", Tensor::FromVector<float>({4}, {-1.0f, 2.0f, -3.0f, 4.0f})}});
  ASSERT_TRUE(out.ok()) << out.status();
  const float* y = (*out)[0].data<float>();
  EXPECT_EQ(std::vector<float>(y, y + 4),
            (std::vector<float>{0.0f, 4.0f, 0.0f, 8.0f}));
}

TEST(MemoryTest, ExtraOutputsAreKept) {
  ModelBuilder mb(13);
  mb.Input("x", {3})
      .Node("Relu", {"x"}, {"a"})
      .Node("Neg", {"a"}, {"y"})
      .Output("y");
  auto exec = MustCreate(mb.Build());
  Executor::RunOptions ro;
  ro.extra_outputs = {"a"};
  auto out = exec->Run(
      {{"x", Tensor::FromVector<float>({3}, {-1.0f, 0.5f, 2.0f})}}, ro);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_FLOAT_EQ((*out)[1].data<float>()[2], 2.0f);
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[2], -2.0f);
}

// ----------------------------------------------------------------- refusal

TEST(CreateTest, UnsupportedOpNamesOpAndNode) {
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"a"})
      .Node("TfIdfVectorizer", {"a"}, {"y"}, "my_tfidf")
      .Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("TfIdfVectorizer"));
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("my_tfidf"));
}

TEST(CreateTest, UnsupportedAttributeValueIsRefusedByName) {
  ModelBuilder mb(13);
  mb.Input("x", {1, 1, 4, 4})
      .Weight("W", {1, 1, 3, 3})
      .Node("Conv", {"x", "W"}, {"y"}, "conv7");
  AddStringAttr(&mb.model(), "auto_pad", "SAME_SIDEWAYS");
  mb.Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg(e.status().message());
  EXPECT_THAT(msg, HasSubstr("auto_pad"));
  EXPECT_THAT(msg, HasSubstr("SAME_SIDEWAYS"));
  EXPECT_THAT(msg, HasSubstr("conv7"));
  EXPECT_THAT(msg, HasSubstr("Conv"));
}

TEST(CreateTest, UnknownAttributeIsNeverIgnored) {
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"y"}, "relu3")
      .Attr("fused_alpha", 2)
      .Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("fused_alpha"));
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("relu3"));
}

TEST(CreateTest, TrainingModeAndMaxPoolIndicesAreRefused) {
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

  ModelBuilder mp(13);
  mp.Input("x", {1, 1, 4, 4})
      .Node("MaxPool", {"x"}, {"y", "idx"}, "pool")
      .Attr("kernel_shape", std::vector<int64_t>{2, 2})
      .Output("y");
  e = Executor::Create(mp.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("Indices"));
}

TEST(CreateTest, ForeignDomainsAndBranchlessIfAreRefused) {
  ModelBuilder mb(13);
  mb.Input("x", {4}).Node("Relu", {"x"}, {"y"}, "r");
  mb.model().mutable_graph()->mutable_node(0)->set_domain("com.microsoft");
  mb.Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("com.microsoft"));

  // Control flow runs (tests/core/executor/ops_control_test.cc); an If
  // without its branches is malformed.
  ModelBuilder ifb(13);
  ifb.Input("c", {}, TP::BOOL).Node("If", {"c"}, {"y"}, "branch").Output("y");
  e = Executor::Create(ifb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("then_branch"));
}

TEST(CreateTest, UndefinedInputIsInvalid) {
  ModelBuilder mb(13);
  mb.Input("x", {4}).Node("Add", {"x", "nowhere"}, {"y"}, "add").Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("nowhere"));
}

TEST(CreateTest, SupportedOpsListsTheCnnAndTransformerOps) {
  const std::vector<std::string> ops = Executor::SupportedOps();
  for (const char* op :
       {"Conv", "Gemm", "MatMul", "Softmax", "LayerNormalization", "Slice",
        "Where", "Pad", "Range", "Erf"}) {
    EXPECT_THAT(ops, ::testing::Contains(op));
  }
}

// -------------------------------------------------------------------- runs

TEST(RunTest, FeedsAreChecked) {
  auto exec = MustCreate(testing::MatMulModel(4, 3).Build());
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(exec->Run({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exec->Run({{"x", Tensor::FromVector<float>({2, 5}, Random(10, 1))}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exec->Run({{"x", Tensor::FromVector<int64_t>(
                                 {2, 4}, {0, 0, 0, 0, 0, 0, 0, 0})}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exec->Run({{"x", Tensor::FromVector<float>({2, 4}, Random(8, 1))},
                       {"zzz", Tensor::Scalar<float>(1)}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RunTest, CancelledBeforeOrDuringRun) {
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"a"})
      .Node("Neg", {"a"}, {"y"})
      .Output("y");
  auto exec = MustCreate(mb.Build());
  const absl::flat_hash_map<std::string, Tensor> feeds = {
      {"x", Tensor::FromVector<float>({4}, Random(4, 1))}};
  CancellationToken token;
  Executor::RunOptions ro;
  ro.cancel = &token;
  EXPECT_TRUE(exec->Run(feeds, ro).ok());
  // Cancel once the first node's output appears: the second never runs.
  int produced = 0;
  ro.on_tensor = [&](const std::string& name, const Tensor&) {
    ++produced;
    if (name == "a") token.Cancel();
  };
  auto out = exec->Run(feeds, ro);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(produced, 2);  // x and a, not y.
  EXPECT_EQ(exec->Run(feeds, ro).status().code(), absl::StatusCode::kCancelled);
}

TEST(RunTest, ConcurrentRunsOnThePoolAgree) {
  auto exec = MustCreate(testing::ConvModel(8, 16).Build());
  ASSERT_NE(exec, nullptr);
  ThreadPool pool(2);
  constexpr int kBatches = 8;
  std::vector<Tensor> inputs, results(kBatches);
  for (int i = 0; i < kBatches; ++i) {
    inputs.push_back(
        Tensor::FromVector<float>({1, 8, 8, 8}, Random(512, 10 + i)));
  }
  std::atomic<int> failures{0};
  pool.ParallelFor(kBatches, [&](int64_t i) {
    Executor::RunOptions ro;
    ro.pool = &pool;  // Nested: kernels fan out on the same pool.
    auto out = exec->Run({{"x", inputs[i]}}, ro);
    if (!out.ok()) {
      ++failures;
      return;
    }
    results[i] = (*out)[0];
  });
  ASSERT_EQ(failures.load(), 0);
  for (int i = 0; i < kBatches; ++i) {
    auto serial = exec->Run({{"x", inputs[i]}});
    ASSERT_TRUE(serial.ok());
    const Tensor& a = (*serial)[0];
    ASSERT_EQ(a.shape(), results[i].shape());
    for (int64_t j = 0; j < a.size(); ++j) {
      ASSERT_FLOAT_EQ(a.data<float>()[j], results[i].data<float>()[j]);
    }
  }
}

TEST(RunTest, OnTensorSeesEveryValueOnce) {
  auto exec = MustCreate(testing::ConvModel(2, 3).Build());
  std::vector<std::string> names;
  Executor::RunOptions ro;
  ro.on_tensor = [&](const std::string& n, const Tensor& t) {
    names.push_back(n);
    EXPECT_FALSE(t.empty());
  };
  ASSERT_TRUE(exec->Run({{"x", Tensor::FromVector<float>({1, 2, 8, 8},
                                                         Random(128, 1))}},
                        ro)
                  .ok());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "conv", "y"}));
}

// ------------------------------------------------------------ tensor / npy

TEST(TensorTest, ProtoRoundTripAndTypedFields) {
  onnx::TensorProto p;
  p.set_data_type(TP::INT64);
  p.add_dims(3);
  for (int64_t v : {5, -2, 7}) p.add_int64_data(v);
  auto t = Tensor::FromProto(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToInt64Vector(), (std::vector<int64_t>{5, -2, 7}));
  auto back = Tensor::FromProto(t->ToProto("z"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ToInt64Vector(), (std::vector<int64_t>{5, -2, 7}));

  onnx::TensorProto b;
  b.set_data_type(TP::BOOL);
  b.add_dims(2);
  b.add_int32_data(1);
  b.add_int32_data(0);
  auto bt = Tensor::FromProto(b);
  ASSERT_TRUE(bt.ok());
  EXPECT_TRUE(bt->data<bool>()[0]);
  EXPECT_FALSE(bt->data<bool>()[1]);

  onnx::TensorProto h;
  h.set_data_type(TP::COMPLEX64);
  EXPECT_EQ(Tensor::FromProto(h).status().code(),
            absl::StatusCode::kUnimplemented);
  onnx::TensorProto bad;
  bad.set_data_type(TP::FLOAT);
  bad.add_dims(3);
  bad.add_float_data(1.0f);
  EXPECT_EQ(Tensor::FromProto(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, RoundTripsEveryType) {
  const Tensor f = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor i = Tensor::FromVector<int64_t>({4}, {1, -2, 3, 1LL << 40});
  const Tensor u = Tensor::FromVector<uint8_t>({2, 1}, {7, 255});
  const Tensor s = Tensor::Scalar<int32_t>(-9);
  for (const Tensor* t : {&f, &i, &u, &s}) {
    auto back = ParseNpy(SerializeNpy(*t));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), t->dtype());
    EXPECT_EQ(back->shape(), t->shape());
    EXPECT_EQ(std::string(static_cast<const char*>(back->raw()), back->bytes()),
              std::string(static_cast<const char*>(t->raw()), t->bytes()));
  }
}

TEST(NpyTest, ReadsNumpyWrittenFilesAndRefusesTheRest) {
  // The digits example was written by numpy (v1 header, '<f4').
  auto x = ReadNpyFile(std::string(QUANTD_SOURCE_DIR) +
                       "/examples/digits/test_x.npy");
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->dtype(), TP::FLOAT);
  EXPECT_EQ(x->rank(), 4);
  // A version 2 header (4-byte length).
  std::string v1 = SerializeNpy(Tensor::FromVector<float>({2}, {1.5f, -1.0f}));
  const uint16_t len =
      static_cast<uint8_t>(v1[8]) | (static_cast<uint8_t>(v1[9]) << 8);
  std::string v2 = v1.substr(0, 6) + std::string("\x02\x00", 2);
  const uint32_t len32 = len;
  v2.append(reinterpret_cast<const char*>(&len32), 4);
  v2 += v1.substr(10);
  auto t2 = ParseNpy(v2);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_FLOAT_EQ(t2->data<float>()[0], 1.5f);

  std::string fortran = v1;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_EQ(ParseNpy(fortran).status().code(),
            absl::StatusCode::kUnimplemented);
  std::string big = v1;
  big.replace(big.find("<f4"), 3, ">f4");
  EXPECT_EQ(ParseNpy(big).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ParseNpy("garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNpy(v1.substr(0, v1.size() - 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Opsets 1-6: an op that means the same at 7 runs; one that changed is
// refused by name (Add-6 still had its `broadcast` attribute).
TEST(ExecutorTest, OldOpsetsRunWhenTheirOpsAreUnchangedSinceThen) {
  OneNode softplus("Softplus", 1);
  softplus.inputs = {T1<float>({3}, {-1.0f, 0.0f, 2.0f})};
  absl::StatusOr<Tensor> y = softplus.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y,
              T1<float>({3}, {std::log1p(std::exp(-1.0f)), std::log(2.0f),
                              std::log1p(std::exp(2.0f))}),
              1e-6, "Softplus-1");

  OneNode add("Add", 6);
  add.inputs = {T1<float>({1}, {1.0f}), T1<float>({1}, {2.0f})};
  absl::StatusOr<Tensor> sum = add.Run1();
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(sum.status().message(),
              HasSubstr("imports 6 and its op Add changed at opset 7"));
}

}  // namespace
}  // namespace quantd::executor
