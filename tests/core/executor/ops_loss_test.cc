// The loss, window and Det kernels (ops_loss.cc) on small cases whose
// expected values were computed with numpy (/usr/bin/python3) at authoring
// time, independently of the ONNX reference code, plus their error codes.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"

namespace quantd::executor {
namespace {

using ::testing::HasSubstr;
using TP = onnx::TensorProto;

Tensor D(std::vector<int64_t> shape, std::vector<double> v) {
  return Tensor::FromVector<double>(std::move(shape), v);
}
Tensor I32(std::vector<int64_t> shape, std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>(std::move(shape), v);
}

// Log-probabilities [3, 4] and targets [3] shared by the NLL cases:
//   x = [[-1,-2,-.5,-3],[-.25,-1.5,-2.5,-.75],[-2,-.1,-1,-4]], t = [2,0,1],
//   w = [.5,2,1,3].
Tensor NllX() {
  return Floats({3, 4}, {-1.0f, -2.0f, -0.5f, -3.0f, -0.25f, -1.5f, -2.5f,
                         -0.75f, -2.0f, -0.1f, -1.0f, -4.0f});
}
Tensor NllW() { return Floats({4}, {0.5f, 2.0f, 1.0f, 3.0f}); }

OneNode Nll(const std::string& reduction, std::vector<Tensor> inputs) {
  OneNode n("NegativeLogLikelihoodLoss", 13);
  n.String("reduction", reduction);
  n.inputs = std::move(inputs);
  return n;
}

// ------------------------------------------------- NegativeLogLikelihoodLoss

TEST(NllLossTest, ReductionsWithoutWeight) {
  // numpy: l = -x[arange(3), t] = [.5, .25, .1]; sum .85; mean .85 / 3.
  absl::StatusOr<Tensor> none =
      Nll("none", {NllX(), I64({3}, {2, 0, 1})}).Run1();
  ASSERT_TRUE(none.ok()) << none.status();
  ExpectClose(*none, Floats({3}, {0.5f, 0.25f, 0.1f}), 1e-6, "none");
  absl::StatusOr<Tensor> sum = Nll("sum", {NllX(), I64({3}, {2, 0, 1})}).Run1();
  ASSERT_TRUE(sum.ok()) << sum.status();
  ExpectClose(*sum, Tensor::Scalar<float>(0.85f), 1e-6, "sum");
  absl::StatusOr<Tensor> mean =
      Nll("mean", {NllX(), I32({3}, {2, 0, 1})}).Run1();
  ASSERT_TRUE(mean.ok()) << mean.status();
  ExpectClose(*mean, Tensor::Scalar<float>(0.2833333333f), 1e-6, "mean");
}

TEST(NllLossTest, WeightedMeanDividesBySummedWeights) {
  // numpy: l * w[t] = [.5, .125, .2]; sum .825; mean .825 / (1 + .5 + 2).
  absl::StatusOr<Tensor> none =
      Nll("none", {NllX(), I64({3}, {2, 0, 1}), NllW()}).Run1();
  ASSERT_TRUE(none.ok()) << none.status();
  ExpectClose(*none, Floats({3}, {0.5f, 0.125f, 0.2f}), 1e-6, "none");
  absl::StatusOr<Tensor> mean =
      Nll("mean", {NllX(), I64({3}, {2, 0, 1}), NllW()}).Run1();
  ASSERT_TRUE(mean.ok()) << mean.status();
  ExpectClose(*mean, Tensor::Scalar<float>(0.2357142857f), 1e-6, "mean");
}

TEST(NllLossTest, IgnoreIndexLeavesTheDivisor) {
  // ignore_index 0 drops row 1: weighted (.5 + .2) / (1 + 2) = .23333,
  // unweighted (.5 + .1) / 2 = .3.
  OneNode weighted = Nll("mean", {NllX(), I64({3}, {2, 0, 1}), NllW()});
  weighted.Int("ignore_index", 0);
  absl::StatusOr<Tensor> w = weighted.Run1();
  ASSERT_TRUE(w.ok()) << w.status();
  ExpectClose(*w, Tensor::Scalar<float>(0.2333333333f), 1e-6, "weighted");
  OneNode plain = Nll("mean", {NllX(), I64({3}, {2, 0, 1})});
  plain.Int("ignore_index", 0);
  absl::StatusOr<Tensor> p = plain.Run1();
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectClose(*p, Tensor::Scalar<float>(0.3f), 1e-6, "unweighted");
}

TEST(NllLossTest, SpatialDimsNegativeIgnoreIndexDouble) {
  // x [2, 3, 2], t [[2, 1], [0, -1]], w [1, 2, 4], ignore_index -1:
  // none [8.4, 2.4, .3, 0]; mean 11.1 / 7.
  const Tensor x = D({2, 3, 2}, {-0.1, -0.2, -1.1, -1.2, -2.1, -2.2, -0.3, -0.4,
                                 -1.3, -1.4, -2.3, -2.4});
  const Tensor t = I64({2, 2}, {2, 1, 0, -1});
  const Tensor w = D({3}, {1.0, 2.0, 4.0});
  OneNode none = Nll("none", {x, t, w});
  none.Int("ignore_index", -1);
  absl::StatusOr<Tensor> y = none.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, D({2, 2}, {8.4, 2.4, 0.3, 0.0}), 1e-12, "none");
  OneNode mean = Nll("mean", {x, t, w});
  mean.Int("ignore_index", -1);
  absl::StatusOr<Tensor> m = mean.Run1();
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectClose(*m, Tensor::Scalar<double>(1.5857142857142859), 1e-12, "mean");
}

TEST(NllLossTest, AllIgnoredMeanIsNaN) {
  OneNode n = Nll("mean", {NllX(), I64({3}, {7, 7, 7})});
  n.Int("ignore_index", 7);
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(std::isnan(Values<float>(*y)[0]));
}

TEST(NllLossTest, OutOfRangeTargetIsInvalid) {
  for (int64_t bad : {int64_t{4}, int64_t{-1}, int64_t{1} << 40}) {
    absl::StatusOr<Tensor> y =
        Nll("sum", {NllX(), I64({3}, {2, bad, 1}), NllW()}).Run1();
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(y.status().message(), HasSubstr("outside [0, 4)")) << bad;
  }
  // An ignore_index other than the bad target does not excuse it.
  OneNode n = Nll("sum", {NllX(), I64({3}, {2, 9, 1})});
  n.Int("ignore_index", 8);
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NllLossTest, ShapeAndTypeErrors) {
  // Target shape not [N].
  EXPECT_EQ(Nll("sum", {NllX(), I64({2}, {0, 1})}).Run1().status().code(),
            absl::StatusCode::kInvalidArgument);
  // Weight not [C].
  EXPECT_EQ(Nll("sum", {NllX(), I64({3}, {0, 1, 2}), Floats({3}, {1, 1, 1})})
                .Run1()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Rank 1 input.
  EXPECT_EQ(Nll("sum", {Floats({3}, {1, 2, 3}), I64({3}, {0, 1, 2})})
                .Run1()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Bad reduction.
  EXPECT_EQ(Nll("avg", {NllX(), I64({3}, {0, 1, 2})}).Run1().status().code(),
            absl::StatusCode::kInvalidArgument);
  // Integer input: refused as invalid (the schema takes floats), naming
  // the op.
  absl::StatusOr<Tensor> y =
      Nll("sum", {I64({1, 2}, {1, 2}), I64({1}, {0})}).Run1();
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("NegativeLogLikelihoodLoss"));
}

// --------------------------------------------------- SoftmaxCrossEntropyLoss

// Scores [[1,2,3],[.5,-1,2]], labels [2,1]; numpy log_softmax along axis 1.
Tensor SceX() { return Floats({2, 3}, {1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 2.0f}); }
const std::vector<float> kSceLogProb = {
    -2.4076059644443806f, -1.4076059644443804f, -0.4076059644443804f,
    -1.7413112966571571f, -3.241311296657157f,  -0.24131129665715703f};

TEST(SceLossTest, NoneWithLogProb) {
  OneNode n("SoftmaxCrossEntropyLoss", 13);
  n.String("reduction", "none");
  n.inputs = {SceX(), I64({2}, {2, 1})};
  n.outputs = 2;
  absl::StatusOr<std::vector<Tensor>> y = n.Run();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose((*y)[0], Floats({2}, {0.4076059644443804f, 3.241311296657157f}),
              1e-6, "loss");
  ExpectClose((*y)[1], Floats({2, 3}, kSceLogProb), 1e-6, "log_prob");
}

TEST(SceLossTest, MeanAndWeightedMean) {
  OneNode n("SoftmaxCrossEntropyLoss", 12);
  n.inputs = {SceX(), I32({2}, {2, 1})};
  absl::StatusOr<Tensor> mean = n.Run1();
  ASSERT_TRUE(mean.ok()) << mean.status();
  ExpectClose(*mean, Tensor::Scalar<float>(1.8244586305507688f), 1e-6, "mean");
  // w = [1, 3, .5]: (.4076 * .5 + 3.2413 * 3) / 3.5.
  n.inputs.push_back(Floats({3}, {1.0f, 3.0f, 0.5f}));
  absl::StatusOr<Tensor> wmean = n.Run1();
  ASSERT_TRUE(wmean.ok()) << wmean.status();
  ExpectClose(*wmean, Tensor::Scalar<float>(2.8364962491981887f), 1e-6,
              "weighted mean");
}

TEST(SceLossTest, LargeScoresStayFinite) {
  // log_softmax of [1000, 0] is [0, -1000] exactly, not inf - inf.
  OneNode n("SoftmaxCrossEntropyLoss", 13);
  n.String("reduction", "sum");
  n.inputs = {Floats({1, 2}, {1000.0f, 0.0f}), I64({1}, {1})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, Tensor::Scalar<float>(1000.0f), 1e-3, "sum");
}

TEST(SceLossTest, OutOfRangeLabelIsInvalid) {
  OneNode n("SoftmaxCrossEntropyLoss", 13);
  n.inputs = {SceX(), I64({2}, {3, 1})};
  EXPECT_EQ(n.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------ windows

OneNode Window(const std::string& op, Tensor size) {
  OneNode n(op, 17);
  n.inputs = {std::move(size)};
  return n;
}

TEST(WindowTest, PeriodicAndSymmetricValues) {
  // numpy, k = arange(4), N = 4 (periodic) or 3 (symmetric):
  // hann .5 - .5 cos(2 pi k / N), hamming 25/46 - 21/46 cos(...),
  // blackman .42 - .5 cos(...) + .08 cos(2 ...).
  struct Case {
    const char* op;
    int periodic;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"HannWindow", 1, {0.0, 0.5, 1.0, 0.5}},
      {"HannWindow", 0, {0.0, 0.75, 0.75, 0.0}},
      {"HammingWindow",
       1,
       {0.08695652173913043, 0.5434782608695652, 1.0, 0.5434782608695653}},
      {"HammingWindow",
       0,
       {0.08695652173913043, 0.7717391304347825, 0.7717391304347827,
        0.08695652173913043}},
      {"BlackmanWindow", 1, {0.0, 0.34, 1.0, 0.34}},
      {"BlackmanWindow", 0, {0.0, 0.63, 0.63, 0.0}},
  };
  for (const Case& c : cases) {
    OneNode n = Window(c.op, Tensor::Scalar<int64_t>(4));
    n.Int("periodic", c.periodic).Int("output_datatype", TP::DOUBLE);
    absl::StatusOr<Tensor> y = n.Run1();
    ASSERT_TRUE(y.ok()) << c.op << ": " << y.status();
    ExpectClose(*y, D({4}, c.want), 1e-12,
                std::string(c.op) + (c.periodic ? " periodic" : " symmetric"));
  }
}

TEST(WindowTest, DefaultsToFloatAndTakesInt32) {
  absl::StatusOr<Tensor> y =
      Window("HannWindow", Tensor::Scalar<int32_t>(4)).Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, Floats({4}, {0.0f, 0.5f, 1.0f, 0.5f}), 1e-6, "hann");
  absl::StatusOr<Tensor> empty =
      Window("HannWindow", Tensor::Scalar<int32_t>(0)).Run1();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape(), std::vector<int64_t>{0});
}

TEST(WindowTest, OtherOutputTypes) {
  OneNode half = Window("HannWindow", Tensor::Scalar<int64_t>(4));
  half.Int("output_datatype", TP::FLOAT16);
  absl::StatusOr<Tensor> h = half.Run1();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->dtype(), TP::FLOAT16);
  EXPECT_EQ(At(*h, 1), 0.5);
  // Integers truncate like Cast: only the peak is 1.
  OneNode ints = Window("HannWindow", Tensor::Scalar<int64_t>(4));
  ints.Int("output_datatype", TP::INT32);
  absl::StatusOr<Tensor> i = ints.Run1();
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(Values<int32_t>(*i), (std::vector<int32_t>{0, 0, 1, 0}));
  OneNode strings = Window("HannWindow", Tensor::Scalar<int64_t>(4));
  strings.Int("output_datatype", TP::STRING);
  EXPECT_EQ(strings.Run1().status().code(), absl::StatusCode::kUnimplemented);
}

TEST(WindowTest, BadSizesAreRefusedBeforeAllocating) {
  for (int64_t size :
       {int64_t{-1}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    absl::StatusOr<Tensor> y =
        Window("BlackmanWindow", Tensor::Scalar<int64_t>(size)).Run1();
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << size;
  }
  // Not a scalar.
  EXPECT_EQ(Window("HannWindow", I64({2}, {3, 4})).Run1().status().code(),
            absl::StatusCode::kInvalidArgument);
  // A float size is refused by type.
  EXPECT_EQ(
      Window("HannWindow", Tensor::Scalar<float>(4.0f)).Run1().status().code(),
      absl::StatusCode::kInvalidArgument);
  OneNode bad = Window("HannWindow", Tensor::Scalar<int64_t>(4));
  bad.Int("periodic", 2);
  EXPECT_EQ(bad.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------- Det

TEST(DetTest, BatchedWithPivoting) {
  // numpy.linalg.det: [[2,1,3],[0,4,1],[5,2,0]] -> -59, a row swap of the
  // identity -> -1.
  OneNode n("Det", 11);
  n.inputs = {Floats({2, 3, 3},
                     {2, 1, 3, 0, 4, 1, 5, 2, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1})};
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, Floats({2}, {-59.0f, -1.0f}), 1e-4, "det");
}

TEST(DetTest, ZeroPivotsSingularAndEmpty) {
  // A permuted diagonal (zero leading pivot) -> -24; [[1,2],[2,4]] -> 0.
  OneNode perm("Det", 11);
  perm.inputs = {D({4, 4}, {0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 4})};
  absl::StatusOr<Tensor> p = perm.Run1();
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectClose(*p, Tensor::Scalar<double>(-24.0), 1e-12, "perm");
  OneNode sing("Det", 11);
  sing.inputs = {D({2, 2}, {1, 2, 2, 4})};
  absl::StatusOr<Tensor> s = sing.Run1();
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectClose(*s, Tensor::Scalar<double>(0.0), 1e-12, "singular");
  // The determinant of a 0 x 0 matrix is 1.
  OneNode empty("Det", 11);
  empty.inputs = {Floats({2, 0, 0}, {})};
  absl::StatusOr<Tensor> e = empty.Run1();
  ASSERT_TRUE(e.ok()) << e.status();
  ExpectClose(*e, Floats({2}, {1.0f, 1.0f}), 0, "empty");
}

TEST(DetTest, Errors) {
  OneNode rect("Det", 11);
  rect.inputs = {Floats({2, 3}, {1, 2, 3, 4, 5, 6})};
  EXPECT_EQ(rect.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode vec("Det", 11);
  vec.inputs = {Floats({3}, {1, 2, 3})};
  EXPECT_EQ(vec.Run1().status().code(), absl::StatusCode::kInvalidArgument);
  OneNode ints("Det", 11);
  ints.inputs = {I64({2, 2}, {1, 2, 3, 4})};
  EXPECT_EQ(ints.Run1().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quantd::executor
