// Tests of the fidelity report: the SQNR / top-1 math, FidelityEvaluator on
// hand-made float and "quantized" models checked against a plain loop
// computation in the test, and RunQuantize filling summary.fidelity.
#include "core/engine/fidelity.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "core/executor/executor.h"
#include "core/numerics/decibels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

namespace tfq = tensorflow::quantization;
using ::quantd::testing::ModelBuilder;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ErrorSumsTest, BatchesAddUpToTheWhole) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> ref(1000), q(1000);
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = dist(rng);
    q[i] = ref[i] + 0.01f * dist(rng);
  }
  ErrorSums whole, parts;
  whole.Add(ref, q);
  parts.Add(absl::MakeConstSpan(ref).subspan(0, 300),
            absl::MakeConstSpan(q).subspan(0, 300));
  parts.Add(absl::MakeConstSpan(ref).subspan(300),
            absl::MakeConstSpan(q).subspan(300));
  EXPECT_EQ(parts.elements, 1000);
  EXPECT_NEAR(parts.signal, whole.signal, 1e-9 * whole.signal);
  EXPECT_NEAR(parts.noise, whole.noise, 1e-9 * whole.noise);
  EXPECT_EQ(parts.max_abs_error, whole.max_abs_error);
  double max_abs = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(double(ref[i]) - double(q[i])));
  }
  EXPECT_DOUBLE_EQ(whole.max_abs_error, max_abs);
  // Noise ~ 1e-4 of the signal power: about 40 dB.
  EXPECT_NEAR(numerics::SqnrDb(whole.signal, whole.noise), 40.0, 1.0);
}

TEST(ErrorSumsTest, NanSticks) {
  ErrorSums s;
  const std::vector<float> ref = {1, 2, 3};
  const std::vector<float> q = {1, std::nanf(""), 3};
  s.Add(ref, q);
  s.Add(ref, ref);
  EXPECT_TRUE(std::isnan(s.max_abs_error));
  EXPECT_TRUE(std::isnan(numerics::SqnrDb(s.signal, s.noise)));
}

// An attention mask's -inf is no signal: kept on both sides it is no error
// (the tensor compares on its finite values), lost it is an infinite one.
TEST(ErrorSumsTest, InfinitiesKeptAreNoErrorAndLostAreInfinite) {
  const float inf = std::numeric_limits<float>::infinity();
  ErrorSums kept;
  kept.Add(std::vector<float>{-inf, 3, 4, inf},
           std::vector<float>{-inf, 3, 4.5f, inf});
  EXPECT_DOUBLE_EQ(kept.signal, 25.0);
  EXPECT_DOUBLE_EQ(kept.noise, 0.25);
  EXPECT_DOUBLE_EQ(kept.max_abs_error, 0.5);
  EXPECT_NEAR(numerics::SqnrDb(kept.signal, kept.noise), 20.0, 1e-9);
  ErrorSums lost;
  lost.Add(std::vector<float>{-inf, 3}, std::vector<float>{-1e4f, 3});
  EXPECT_EQ(numerics::SqnrDb(lost.signal, lost.noise), -inf);
  EXPECT_EQ(lost.max_abs_error, inf);
}

TEST(Top1CountsTest, CountsRowsAndTakesTheFirstMaxOnTies) {
  // 3 rows of 3 classes.
  const std::vector<float> ref = {0, 5, 1, /**/ 2, 2, 0, /**/ 9, 1, 1};
  const std::vector<float> q = {0, 4, 4, /**/ 1, 3, 0, /**/ 9, 1, 1};
  Top1Counts c;
  c.Add(ref.data(), q.data(), 3, 3);
  // Row 0: 1 vs 1 (tie in q: first index). Row 1: 0 (tie in ref) vs 1.
  EXPECT_EQ(c.rows, 3);
  EXPECT_EQ(c.agree, 2);
  const std::vector<float> nan_row = {std::nanf(""), 1, 0};
  const std::vector<float> plain = {0, 1, 0};
  c.Add(nan_row.data(), plain.data(), 1, 3);  // NaN is never the max.
  EXPECT_EQ(c.agree, 3);
  EXPECT_EQ(c.rows, 4);
}

TEST(HasClassAxisTest, RankAndWidth) {
  EXPECT_TRUE(HasClassAxis(std::vector<int64_t>{4, 10}));
  EXPECT_TRUE(HasClassAxis(std::vector<int64_t>{2, 3, 2}));
  EXPECT_FALSE(HasClassAxis(std::vector<int64_t>{10}));
  EXPECT_FALSE(HasClassAxis(std::vector<int64_t>{4, 1}));
  // Rank 4: channels-last classes, not an NCHW map's width.
  EXPECT_TRUE(HasClassAxis(std::vector<int64_t>{1, 64, 64, 21}));
  EXPECT_FALSE(HasClassAxis(std::vector<int64_t>{1, 1, 1024, 1024}));
  EXPECT_FALSE(HasClassAxis(std::vector<int64_t>{2, 21, 64, 64}));
  EXPECT_FALSE(HasClassAxis(std::vector<int64_t>{}));
}

// ------------------------------------------------------------------------
// FidelityEvaluator on small models it can run today.

constexpr int64_t kBatch = 6, kIn = 16, kHidden = 12, kClasses = 5;

std::vector<float> Values(int64_t n, int seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = scale * dist(rng);
  return v;
}

// x[6,16] -> MatMul W1 -> h -> Relu -> r -> MatMul W2 -> logits[6,5].
onnx::ModelProto FloatModel(const std::vector<float>& w1,
                            const std::vector<float>& w2) {
  ModelBuilder b;
  b.Input("x", {kBatch, kIn})
      .Initializer("W1", {kIn, kHidden}, w1)
      .Initializer("W2", {kHidden, kClasses}, w2)
      .Node("MatMul", {"x", "W1"}, {"h"}, "mm1")
      .Node("Relu", {"h"}, {"r"}, "relu")
      .Node("MatMul", {"r", "W2"}, {"logits"}, "mm2")
      .Output("logits", {kBatch, kClasses});
  return b.Build();
}

// Like a pass's output: W1 comes from a node (as a DequantizeLinear would
// produce it), h and logits keep their names, but the Relu output is
// renamed, so "r" no longer exists.
onnx::ModelProto QuantizedLikeModel(const std::vector<float>& w1q,
                                    const std::vector<float>& w2q) {
  ModelBuilder b;
  b.Input("x", {kBatch, kIn})
      .Initializer("W1_stored", {kIn, kHidden}, w1q)
      .Initializer("W2", {kHidden, kClasses}, w2q)
      .Node("Identity", {"W1_stored"}, {"W1"}, "w1_dq")
      .Node("MatMul", {"x", "W1"}, {"h"}, "mm1")
      .Node("Relu", {"h"}, {"r_renamed"}, "relu")
      .Node("MatMul", {"r_renamed", "W2"}, {"logits"}, "mm2")
      .Output("logits", {kBatch, kClasses});
  return b.Build();
}

// The same network by plain loops (double accumulation), as the oracle.
struct Activations {
  std::vector<double> h, logits;
};
Activations Forward(const std::vector<float>& x, const std::vector<float>& w1,
                    const std::vector<float>& w2) {
  Activations a;
  a.h.assign(kBatch * kHidden, 0);
  a.logits.assign(kBatch * kClasses, 0);
  for (int b = 0; b < kBatch; ++b) {
    for (int j = 0; j < kHidden; ++j) {
      double s = 0;
      for (int k = 0; k < kIn; ++k)
        s += double(x[b * kIn + k]) * w1[k * kHidden + j];
      a.h[b * kHidden + j] = s;
    }
    for (int c = 0; c < kClasses; ++c) {
      double s = 0;
      for (int j = 0; j < kHidden; ++j) {
        s += std::max(0.0, a.h[b * kHidden + j]) * w2[j * kClasses + c];
      }
      a.logits[b * kClasses + c] = s;
    }
  }
  return a;
}

quantd::v1::TensorBatch Batch(const std::vector<float>& x,
                              const std::string& name = "") {
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* t = batch.add_tensors();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_shape(kBatch);
  t->add_shape(kIn);
  t->set_data(reinterpret_cast<const char*>(x.data()),
              x.size() * sizeof(float));
  return batch;
}

struct Oracle {
  double signal = 0, noise = 0, max_abs = 0;
  int64_t agree = 0, rows = 0;
  void Add(const std::vector<double>& ref, const std::vector<double>& q) {
    for (size_t i = 0; i < ref.size(); ++i) {
      signal += ref[i] * ref[i];
      noise += (ref[i] - q[i]) * (ref[i] - q[i]);
      max_abs = std::max(max_abs, std::fabs(ref[i] - q[i]));
    }
  }
  double Db() const { return 10 * std::log10(signal / noise); }
};

int64_t ArgMaxRow(const std::vector<double>& v, int row) {
  int64_t best = 0;
  for (int c = 1; c < kClasses; ++c) {
    if (v[row * kClasses + c] > v[row * kClasses + best]) best = c;
  }
  return best;
}

TEST(FidelityEvaluatorTest, MatchesAPlainComputationOverSeveralBatches) {
  const std::vector<float> w1 = Values(kIn * kHidden, 1, 0.3f);
  const std::vector<float> w2 = Values(kHidden * kClasses, 2, 0.3f);
  std::vector<float> w1q = w1, w2q = w2;
  const std::vector<float> noise1 = Values(w1.size(), 3, 0.02f);
  const std::vector<float> noise2 = Values(w2.size(), 4, 0.05f);
  for (size_t i = 0; i < w1q.size(); ++i) w1q[i] += noise1[i];
  for (size_t i = 0; i < w2q.size(); ++i) w2q[i] += noise2[i];

  absl::StatusOr<std::unique_ptr<FidelityEvaluator>> e =
      FidelityEvaluator::Create(FloatModel(w1, w2));
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->SetQuantizedModel(QuantizedLikeModel(w1q, w2q)).ok());

  Oracle h, logits;
  CancellationToken cancel;
  for (int b = 0; b < 3; ++b) {
    const std::vector<float> x = Values(kBatch * kIn, 10 + b, 1.0f);
    quantd::v1::TensorBatch batch = Batch(x, b == 1 ? "x" : "");
    ASSERT_TRUE((*e)->FeedsGraphInputs(batch));
    ASSERT_TRUE((*e)->AddBatch(batch, nullptr, cancel).ok());
    const Activations ref = Forward(x, w1, w2);
    const Activations q = Forward(x, w1q, w2q);
    h.Add(ref.h, q.h);
    logits.Add(ref.logits, q.logits);
    for (int r = 0; r < kBatch; ++r) {
      logits.agree += ArgMaxRow(ref.logits, r) == ArgMaxRow(q.logits, r);
      ++logits.rows;
    }
  }
  const quantd::v1::FidelityReport report = (*e)->Report();
  EXPECT_TRUE(report.evaluated());
  EXPECT_EQ(report.batches_evaluated(), 3);
  ASSERT_EQ(report.outputs_size(), 1);
  const quantd::v1::OutputFidelity& out = report.outputs(0);
  EXPECT_EQ(out.name(), "logits");
  EXPECT_EQ(out.elements(), 3 * kBatch * kClasses);
  // float32 kernels against a double oracle: a few thousandths of a dB.
  EXPECT_NEAR(out.sqnr_db(), logits.Db(), 0.01);
  EXPECT_NEAR(out.max_abs_error(), logits.max_abs, 1e-4);
  EXPECT_TRUE(out.has_top1());
  EXPECT_EQ(out.top1_rows(), logits.rows);
  EXPECT_DOUBLE_EQ(out.top1_agreement(),
                   static_cast<double>(logits.agree) / logits.rows);
  std::printf("measured: logits SQNR %.3f dB (oracle %.3f), top-1 %.3f\n",
              out.sqnr_db(), logits.Db(), out.top1_agreement());

  // Graph order; "r" was renamed away, W1 is an initializer of the float
  // model (not a layer), so only h and logits remain.
  ASSERT_EQ(report.layers_size(), 2);
  EXPECT_EQ(report.layers(0).tensor_name(), "h");
  EXPECT_EQ(report.layers(0).node_name(), "mm1");
  EXPECT_EQ(report.layers(0).op_type(), "MatMul");
  EXPECT_NEAR(report.layers(0).sqnr_db(), h.Db(), 0.01);
  EXPECT_EQ(report.layers(0).elements(), 3 * kBatch * kHidden);
  EXPECT_EQ(report.layers(1).tensor_name(), "logits");
  EXPECT_NEAR(report.layers(1).sqnr_db(), logits.Db(), 0.01);
  // Error enters at mm1 and grows: the later layer is worse.
  EXPECT_LT(report.layers(1).sqnr_db(), report.layers(0).sqnr_db());
}

TEST(FidelityEvaluatorTest, IdenticalModelsAreExact) {
  const std::vector<float> w1 = Values(kIn * kHidden, 1, 0.3f);
  const std::vector<float> w2 = Values(kHidden * kClasses, 2, 0.3f);
  absl::StatusOr<std::unique_ptr<FidelityEvaluator>> e =
      FidelityEvaluator::Create(FloatModel(w1, w2));
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->SetQuantizedModel(FloatModel(w1, w2)).ok());
  CancellationToken cancel;
  ASSERT_TRUE(
      (*e)->AddBatch(Batch(Values(kBatch * kIn, 5, 1)), nullptr, cancel).ok());
  const quantd::v1::FidelityReport report = (*e)->Report();
  ASSERT_EQ(report.outputs_size(), 1);
  EXPECT_EQ(report.outputs(0).sqnr_db(), kInf);
  EXPECT_EQ(report.outputs(0).top1_agreement(), 1.0);
  ASSERT_EQ(report.layers_size(), 3);  // h, r, logits.
  for (const auto& layer : report.layers()) {
    EXPECT_EQ(layer.sqnr_db(), kInf) << layer.tensor_name();
    EXPECT_EQ(layer.max_abs_error(), 0) << layer.tensor_name();
  }
}

TEST(FidelityEvaluatorTest, RefusesAModelTheExecutorCannotRun) {
  const std::vector<float> w1 = Values(kIn * kHidden, 1, 0.3f);
  const std::vector<float> w2 = Values(kHidden * kClasses, 2, 0.3f);
  absl::StatusOr<std::unique_ptr<FidelityEvaluator>> e =
      FidelityEvaluator::Create(FloatModel(w1, w2));
  ASSERT_TRUE(e.ok()) << e.status();
  onnx::ModelProto odd = FloatModel(w1, w2);
  odd.mutable_graph()->mutable_node(1)->set_op_type("NoSuchOpAnywhere");
  const absl::Status s = (*e)->SetQuantizedModel(odd);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("NoSuchOpAnywhere"));
  // And no batch runs without a quantized model.
  CancellationToken cancel;
  EXPECT_EQ(
      (*e)->AddBatch(Batch(Values(kBatch * kIn, 5, 1)), nullptr, cancel).code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(FidelityEvaluatorTest, ObservedActivationBatchesDoNotFeedInputs) {
  absl::StatusOr<std::unique_ptr<FidelityEvaluator>> e =
      FidelityEvaluator::Create(FloatModel(Values(kIn * kHidden, 1, 1),
                                           Values(kHidden * kClasses, 2, 1)));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE((*e)->FeedsGraphInputs(Batch(Values(kBatch * kIn, 1, 1), "h")));
  EXPECT_TRUE((*e)->FeedsGraphInputs(Batch(Values(kBatch * kIn, 1, 1), "x")));
}

TEST(FidelityEvaluatorTest, CancelledBatchReturnsCancelled) {
  const std::vector<float> w1 = Values(kIn * kHidden, 1, 0.3f);
  const std::vector<float> w2 = Values(kHidden * kClasses, 2, 0.3f);
  absl::StatusOr<std::unique_ptr<FidelityEvaluator>> e =
      FidelityEvaluator::Create(FloatModel(w1, w2));
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->SetQuantizedModel(FloatModel(w1, w2)).ok());
  CancellationToken cancel;
  cancel.Cancel();
  EXPECT_EQ(
      (*e)->AddBatch(Batch(Values(kBatch * kIn, 5, 1)), nullptr, cancel).code(),
      absl::StatusCode::kCancelled);
}

// ------------------------------------------------------------------------
// RunQuantize fills summary.fidelity.

quantd::v1::QuantizeConfig StaticRange() {
  quantd::v1::QuantizeConfig c;
  c.mutable_options()->mutable_quantization_method()->set_experimental_method(
      tfq::QuantizationMethod::STATIC_RANGE);
  c.mutable_options()->set_min_num_elements_for_weights(-1);
  return c;
}

// config.calibration ranges [-4, 4] for every tensor of FloatModel.
void AddRangesForEveryTensor(quantd::v1::QuantizeConfig* config) {
  for (const char* name : {"x", "h", "r", "logits"}) {
    quantd::v1::TensorRange* r = config->mutable_calibration()->add_ranges();
    r->set_tensor_name(name);
    r->set_min(-4);
    r->set_max(4);
  }
}

bool ExecutorRunsQdq() {
  const std::vector<std::string> ops = executor::Executor::SupportedOps();
  return std::count(ops.begin(), ops.end(), "QuantizeLinear") > 0 &&
         std::count(ops.begin(), ops.end(), "DequantizeLinear") > 0;
}

struct JobRun {
  absl::StatusOr<QuantizeResult> result;
  std::vector<quantd::v1::Progress> fidelity_progress;
};

JobRun RunWithBatches(const quantd::v1::QuantizeConfig& config,
                      const onnx::ModelProto& model, int batches,
                      bool cancel_in_fidelity = false) {
  BatchQueue queue(batches + 1);
  for (int b = 0; b < batches; ++b) {
    queue.Push(Batch(Values(kBatch * kIn, 20 + b, 1.0f)));
  }
  queue.Close();
  CancellationToken cancel;
  JobRun run;
  QuantizeEvents events;
  events.on_progress = [&](const quantd::v1::Progress& p) {
    if (p.stage() != quantd::v1::STAGE_FIDELITY) return;
    run.fidelity_progress.push_back(p);
    if (cancel_in_fidelity) cancel.Cancel();
  };
  ThreadPool pool(1);
  run.result = RunQuantize(config, model.SerializeAsString(), events, cancel,
                           &pool, batches > 0 ? &queue : nullptr);
  return run;
}

TEST(RunQuantizeFidelityTest, StaticRangeWithBatchesReportsFidelity) {
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  JobRun run = RunWithBatches(StaticRange(), model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::QuantizeSummary& s = run.result->summary;
  ASSERT_TRUE(s.has_fidelity());
  const quantd::v1::FidelityReport& f = s.fidelity();
  EXPECT_EQ(f.batches_received(), 4);
  bool timed = false;
  for (const auto& d : s.stage_durations()) {
    timed |= d.stage() == quantd::v1::STAGE_FIDELITY;
  }
  EXPECT_TRUE(timed);
  ASSERT_FALSE(run.fidelity_progress.empty());
  if (!ExecutorRunsQdq()) {
    // Until the executor runs QDQ ops: skipped, with the op named, and the
    // call still succeeds.
    EXPECT_FALSE(f.evaluated());
    EXPECT_THAT(f.skipped_reason(), HasSubstr("QuantizeLinear"));
    std::printf("measured: fidelity skipped: %s\n", f.skipped_reason().c_str());
    return;
  }
  ASSERT_TRUE(f.evaluated()) << f.skipped_reason();
  EXPECT_EQ(f.batches_evaluated(), 4);
  ASSERT_EQ(f.outputs_size(), 1);
  EXPECT_GT(f.outputs(0).sqnr_db(), 20.0);
  EXPECT_TRUE(f.outputs(0).has_top1());
  EXPECT_EQ(f.outputs(0).top1_rows(), 4 * kBatch);
  ASSERT_EQ(f.layers_size(), 3);  // h, r, logits (QDQ keeps the names).
  EXPECT_EQ(f.layers(0).tensor_name(), "h");
  EXPECT_EQ(f.layers(1).tensor_name(), "r");
  EXPECT_EQ(f.layers(2).tensor_name(), "logits");
  EXPECT_EQ(run.fidelity_progress.back().done(), 4);
  std::printf("measured: static W8A8 MLP logits SQNR %.2f dB, top-1 %.3f\n",
              f.outputs(0).sqnr_db(), f.outputs(0).top1_agreement());
}

TEST(RunQuantizeFidelityTest, CancelledDuringFidelityIsCancelled) {
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  JobRun run = RunWithBatches(StaticRange(), model, 3, true);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kCancelled)
      << run.result.status();
}

TEST(RunQuantizeFidelityTest, RangesFromConfigSkipWithTheReason) {
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  AddRangesForEveryTensor(&config);
  JobRun run = RunWithBatches(config, model, 0);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::FidelityReport& f = run.result->summary.fidelity();
  EXPECT_FALSE(f.evaluated());
  EXPECT_THAT(f.skipped_reason(), HasSubstr("config.calibration"));
  EXPECT_TRUE(run.fidelity_progress.empty());
}

TEST(RunQuantizeFidelityTest, SmallFloatWeightsAreNamedForOnnxRuntime) {
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.mutable_options()->set_min_num_elements_for_weights(
      kIn * kHidden * kClasses + 1);
  AddRangesForEveryTensor(&config);
  JobRun run = RunWithBatches(config, model, 0);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.result->summary.skipped_size(), 2);
  EXPECT_THAT(run.result->summary.validations(),
              Contains(AllOf(HasSubstr("2 weight(s) under"),
                             HasSubstr("ONNX Runtime's extended"))));
  // Every weight quantized: no such note.
  config.mutable_options()->set_min_num_elements_for_weights(-1);
  run = RunWithBatches(config, model, 0);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_THAT(run.result->summary.validations(),
              Not(Contains(HasSubstr("ONNX Runtime's extended"))));
}

TEST(RunQuantizeFidelityTest, DynamicRangeSkipsWithTheReason) {
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::DYNAMIC_RANGE);
  JobRun run = RunWithBatches(config, model, 0);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::FidelityReport& f = run.result->summary.fidelity();
  EXPECT_FALSE(f.evaluated());
  EXPECT_THAT(f.skipped_reason(), HasSubstr("DYNAMIC_RANGE"));
}

TEST(RunQuantizeFidelityTest, UnchangedModelHasNoFidelity) {
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  JobRun run = RunWithBatches(quantd::v1::QuantizeConfig(), model, 0);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_FALSE(run.result->summary.has_fidelity());
}

}  // namespace
// ------------------------------------------------------------------------
// config.target_sqnr_db: the accuracy search.

TEST(AccuracySearchJobTest, ReachableTargetIsMetInTheFirstRound) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.set_target_sqnr_db(10);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::QuantizeSummary& s = run.result->summary;
  ASSERT_TRUE(s.has_accuracy_search());
  const quantd::v1::AccuracySearch& a = s.accuracy_search();
  EXPECT_TRUE(a.met());
  ASSERT_EQ(a.rounds_size(), 1);
  EXPECT_EQ(a.chosen_round(), 0);
  EXPECT_EQ(a.rounds(0).raised_nodes(), 0);
  EXPECT_EQ(a.rounds(0).output_sqnr_db(), s.fidelity().outputs(0).sqnr_db());
  EXPECT_EQ(a.unit_wise_quantization_precision_size(), 0);
  EXPECT_TRUE(s.fidelity().evaluated());
  EXPECT_EQ(s.fidelity().batches_evaluated(), 4);
}

// A target only float reaches: the search keeps nodes in float until the
// output is exact, returns the unit entries it chose, and the same request
// replayed with those entries (and no target) gives the same bytes.
TEST(AccuracySearchJobTest, UnitEntriesReplayToTheSameModel) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.set_target_sqnr_db(150);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::AccuracySearch& a = run.result->summary.accuracy_search();
  ASSERT_GE(a.rounds_size(), 2);
  EXPECT_LT(a.rounds(0).output_sqnr_db(), 150);
  EXPECT_TRUE(a.met()) << a.note();
  EXPECT_EQ(a.chosen_round(), a.rounds_size() - 1);
  EXPECT_GE(a.rounds(a.chosen_round()).output_sqnr_db(), 150);
  ASSERT_GE(a.unit_wise_quantization_precision_size(), 1);
  for (const auto& u : a.unit_wise_quantization_precision()) {
    EXPECT_EQ(u.unit_type(), tfq::UnitWiseQuantizationPrecision::UNIT_NODE);
    EXPECT_THAT(u.unit_name(), ::testing::AnyOf("mm1", "mm2"));
    EXPECT_EQ(u.quantization_precision(), tfq::PRECISION_FULL);
  }
  std::printf("measured: %s\n", a.note().c_str());
  // Rounds only ever add float nodes.
  for (int i = 1; i < a.rounds_size(); ++i) {
    EXPECT_GT(a.rounds(i).raised_nodes(), a.rounds(i - 1).raised_nodes());
    EXPECT_FALSE(a.rounds(i).raised_this_round().empty());
  }

  quantd::v1::QuantizeConfig replay = StaticRange();
  *replay.mutable_options()->mutable_unit_wise_quantization_precision() =
      a.unit_wise_quantization_precision();
  JobRun again = RunWithBatches(replay, model, 4);
  ASSERT_TRUE(again.result.ok()) << again.result.status();
  EXPECT_FALSE(again.result->summary.has_accuracy_search());
  EXPECT_EQ(again.result->model, run.result->model);
}

// From W4A8 a node goes to W8A8 first, and to FULL only if it is picked
// again; the entries replay to the same bytes.
TEST(AccuracySearchJobTest, FourBitNodesGoToEightBitsBeforeFloat) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  config.set_target_sqnr_db(150);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::AccuracySearch& a = run.result->summary.accuracy_search();
  std::printf("measured: W4A8 search: %s\n", a.note().c_str());
  ASSERT_GE(a.rounds_size(), 2);
  EXPECT_THAT(a.rounds(1).raised_this_round(0), HasSubstr("PRECISION_W8A8"));
  std::map<std::string, int> raises;
  for (const auto& r : a.rounds()) {
    for (const std::string& n : r.raised_this_round()) {
      const std::string node = n.substr(0, n.find(':'));
      if (++raises[node] == 2) {
        EXPECT_THAT(n, HasSubstr("PRECISION_FULL"));
      }
    }
  }
  // (Sizes need not grow here: on a model this small the QDQ nodes and
  // scales outweigh the weights they shrink.)
  for (const auto& r : a.rounds()) EXPECT_GT(r.model_bytes(), 0u);
  quantd::v1::QuantizeConfig replay = StaticRange();
  replay.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  *replay.mutable_options()->mutable_unit_wise_quantization_precision() =
      a.unit_wise_quantization_precision();
  JobRun again = RunWithBatches(replay, model, 4);
  ASSERT_TRUE(again.result.ok()) << again.result.status();
  EXPECT_EQ(again.result->model, run.result->model);
}

// target_agreement: the goal is the task's (the logits' argmax per row),
// measured each round, and met once every row agrees.
TEST(AccuracySearchJobTest, AgreementTargetIsJudgedOnTopOne) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A4);
  config.set_target_agreement(1.0);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::QuantizeSummary& s = run.result->summary;
  const quantd::v1::AccuracySearch& a = s.accuracy_search();
  std::printf("measured: W4A4 agreement search: %s\n", a.note().c_str());
  EXPECT_EQ(a.target_agreement(), 1.0);
  EXPECT_EQ(a.target_sqnr_db(), 0.0);
  ASSERT_GE(a.rounds_size(), 1);
  for (const auto& r : a.rounds()) {
    EXPECT_GE(r.top1_agreement(), 0.0);
    EXPECT_LE(r.top1_agreement(), 1.0);
  }
  EXPECT_TRUE(a.met()) << a.note();
  const auto& chosen = a.rounds(a.chosen_round());
  EXPECT_EQ(chosen.top1_agreement(), 1.0);
  // The returned model's report is the chosen round's.
  ASSERT_TRUE(s.fidelity().outputs(0).has_top1());
  EXPECT_EQ(s.fidelity().outputs(0).top1_agreement(), 1.0);
  EXPECT_EQ(s.fidelity().outputs(0).sqnr_db(), chosen.output_sqnr_db());
  // W4A4 misreads rows on this model: the search had to raise nodes.
  EXPECT_GE(a.chosen_round(), 1);
  // Every round before the chosen one fell short.
  for (int i = 0; i < a.chosen_round(); ++i) {
    EXPECT_LT(a.rounds(i).top1_agreement(), 1.0);
  }
}

// allowed_precisions [W4A8, FULL]: a 4-bit node goes straight to float.
TEST(AccuracySearchJobTest, AllowedPrecisionsSkipEightBits) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  config.add_allowed_precisions(tfq::PRECISION_FULL);
  config.add_allowed_precisions(tfq::PRECISION_W4A8);
  config.set_target_sqnr_db(150);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::AccuracySearch& a = run.result->summary.accuracy_search();
  EXPECT_THAT(a.allowed_precisions(),
              ::testing::ElementsAre(tfq::PRECISION_W4A8, tfq::PRECISION_FULL));
  ASSERT_GE(a.rounds_size(), 2);
  int raises = 0;
  for (const auto& r : a.rounds()) {
    for (const std::string& n : r.raised_this_round()) {
      EXPECT_THAT(n, HasSubstr("PRECISION_FULL"));
      ++raises;
    }
  }
  EXPECT_GE(raises, 1);
  for (const auto& u : a.unit_wise_quantization_precision()) {
    EXPECT_EQ(u.quantization_precision(), tfq::PRECISION_FULL);
  }
}

// From W4A8 with a goal all-W8A8 meets: the search tries every
// error-adding node at W8A8, then bisects on how many of the worst need it;
// the returned mix is no larger than all-W8A8 and replays to the same bytes.
TEST(AccuracySearchJobTest, MiddleRungIsBisectedForTheSmallestMix) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  auto sqnr_at = [&](tfq::QuantizationPrecision p) {
    quantd::v1::QuantizeConfig c = StaticRange();
    c.mutable_options()->set_quantization_precision(p);
    JobRun r = RunWithBatches(c, model, 4);
    EXPECT_TRUE(r.result.ok()) << r.result.status();
    return r.result->summary.fidelity().outputs(0).sqnr_db();
  };
  const double w4 = sqnr_at(tfq::PRECISION_W4A8);
  const double w8 = sqnr_at(tfq::PRECISION_W8A8);
  ASSERT_LT(w4 + 3, w8);
  quantd::v1::QuantizeConfig config = StaticRange();
  config.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  config.set_target_sqnr_db(w4 + 1);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::AccuracySearch& a = run.result->summary.accuracy_search();
  std::printf("measured: W4A8 %.1f dB, W8A8 %.1f dB, goal %.1f: %s\n", w4, w8,
              w4 + 1, a.note().c_str());
  ASSERT_TRUE(a.met()) << a.note();
  ASSERT_GE(a.rounds_size(), 3) << a.note();
  // Round 2: every error-adding node at W8A8.
  EXPECT_EQ(a.rounds(1).raised_nodes(), 2);
  for (const std::string& n : a.rounds(1).raised_this_round()) {
    EXPECT_THAT(n, HasSubstr("PRECISION_W8A8"));
  }
  EXPECT_THAT(a.note(), HasSubstr("bisected"));
  const auto& chosen = a.rounds(a.chosen_round());
  EXPECT_LE(chosen.model_bytes(), a.rounds(1).model_bytes());
  EXPECT_LT(chosen.raised_nodes(), 2);
  EXPECT_GE(chosen.output_sqnr_db(), w4 + 1);
  for (const auto& u : a.unit_wise_quantization_precision()) {
    EXPECT_EQ(u.quantization_precision(), tfq::PRECISION_W8A8);
  }
  quantd::v1::QuantizeConfig replay = StaticRange();
  replay.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  *replay.mutable_options()->mutable_unit_wise_quantization_precision() =
      a.unit_wise_quantization_precision();
  JobRun again = RunWithBatches(replay, model, 4);
  ASSERT_TRUE(again.result.ok()) << again.result.status();
  EXPECT_EQ(again.result->model, run.result->model);
}

// A model whose only output has no class axis cannot be judged on top-1.
TEST(AccuracySearchJobTest, AgreementTargetNeedsAClassAxis) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  ModelBuilder b;
  b.Input("x", {kBatch, kIn})
      .Initializer("W1", {kIn, 1}, Values(kIn, 1, 0.3f))
      .Node("MatMul", {"x", "W1"}, {"y"}, "mm1")
      .Output("y", {kBatch, 1});
  quantd::v1::QuantizeConfig config = StaticRange();
  config.set_target_agreement(0.9);
  JobRun run = RunWithBatches(config, b.Build(), 2);
  ASSERT_EQ(run.result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(run.result.status().message()),
              HasSubstr("class axis"));
}

// FloatModel with both MatMuls inside the then-branch of If "gate" (on a
// constant true condition); the else-branch is one MatMul of its own.
onnx::ModelProto BranchModel() {
  onnx::ModelProto m = FloatModel(Values(kIn * kHidden, 1, 0.3f),
                                  Values(kHidden * kClasses, 2, 0.3f));
  onnx::GraphProto* g = m.mutable_graph();
  onnx::GraphProto then_branch;
  *then_branch.mutable_node() = g->node();
  then_branch.mutable_node(2)->set_output(0, "logits_then");
  *then_branch.add_output() = g->output(0);
  then_branch.mutable_output(0)->set_name("logits_then");
  onnx::GraphProto else_branch;
  onnx::NodeProto* e = else_branch.add_node();
  e->set_op_type("MatMul");
  e->set_name("mm_else");
  e->add_input("x");
  e->add_input("W3");
  e->add_output("logits_else");
  *else_branch.add_output() = g->output(0);
  else_branch.mutable_output(0)->set_name("logits_else");
  *g->add_initializer() = ModelBuilder::FloatTensor(
      "W3", {kIn, kClasses}, Values(kIn * kClasses, 3, 0.3f));
  onnx::TensorProto* cond = g->add_initializer();
  cond->set_name("cond");
  cond->set_data_type(onnx::TensorProto::BOOL);
  cond->add_int32_data(1);
  g->clear_node();
  onnx::NodeProto* gate = g->add_node();
  gate->set_op_type("If");
  gate->set_name("gate");
  gate->add_input("cond");
  gate->add_output("logits");
  for (auto& [name, body] : {std::pair{"then_branch", &then_branch},
                             std::pair{"else_branch", &else_branch}}) {
    onnx::AttributeProto* a = gate->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = *body;
    a->mutable_g()->set_name(name);
  }
  return m;
}

// The report compares the tensors of the branch that ran, and the search
// raises nodes inside it by their If's scope; the entries replay.
TEST(AccuracySearchJobTest, ReachesNodesInsideIfBranches) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = BranchModel();
  quantd::v1::QuantizeConfig config = StaticRange();
  config.set_target_sqnr_db(150);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::QuantizeSummary& s = run.result->summary;
  std::vector<std::string> layers;
  for (const auto& l : s.fidelity().layers()) layers.push_back(l.tensor_name());
  EXPECT_THAT(layers, Contains("h"));
  const quantd::v1::AccuracySearch& a = s.accuracy_search();
  EXPECT_TRUE(a.met()) << a.note();
  ASSERT_GE(a.rounds_size(), 2);
  EXPECT_LT(a.rounds(0).output_sqnr_db(), 150);
  EXPECT_THAT(a.rounds(1).raised_this_round(0), HasSubstr("(in gate)"));
  ASSERT_GE(a.unit_wise_quantization_precision_size(), 1);
  for (const auto& u : a.unit_wise_quantization_precision()) {
    EXPECT_EQ(u.func_name(), "gate");
    EXPECT_THAT(u.unit_name(), ::testing::AnyOf("mm1", "mm2"));
  }
  quantd::v1::QuantizeConfig replay = StaticRange();
  *replay.mutable_options()->mutable_unit_wise_quantization_precision() =
      a.unit_wise_quantization_precision();
  JobRun again = RunWithBatches(replay, model, 4);
  ASSERT_TRUE(again.result.ok()) << again.result.status();
  EXPECT_EQ(again.result->model, run.result->model);
}

TEST(AccuracySearchJobTest, RefusedWhereItCannotMeasure) {
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig dynamic = StaticRange();
  dynamic.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::DYNAMIC_RANGE);
  dynamic.set_target_sqnr_db(30);
  JobRun run = RunWithBatches(dynamic, model, 0);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(run.result.status().message(), HasSubstr("target_sqnr_db"));

  quantd::v1::QuantizeConfig none;
  none.set_target_sqnr_db(30);
  run = RunWithBatches(none, model, 0);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInvalidArgument);

  quantd::v1::QuantizeConfig bad = StaticRange();
  bad.set_target_sqnr_db(-1);
  run = RunWithBatches(bad, model, 2);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInvalidArgument);

  quantd::v1::QuantizeConfig ranges_only = StaticRange();
  ranges_only.set_target_sqnr_db(30);
  AddRangesForEveryTensor(&ranges_only);
  run = RunWithBatches(ranges_only, model, 0);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(run.result.status().message(), HasSubstr("config.calibration"));
}

TEST(HoldoutJobTest, FidelityIsMeasuredOnHeldOutBatchesOnly) {
  if (!ExecutorRunsQdq()) GTEST_SKIP() << "the executor cannot run QDQ";
  const onnx::ModelProto model = FloatModel(
      Values(kIn * kHidden, 1, 0.3f), Values(kHidden * kClasses, 2, 0.3f));
  quantd::v1::QuantizeConfig config = StaticRange();
  config.set_holdout_batches(1);
  config.set_target_sqnr_db(10);
  JobRun run = RunWithBatches(config, model, 4);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const quantd::v1::FidelityReport& f = run.result->summary.fidelity();
  ASSERT_TRUE(f.evaluated()) << f.skipped_reason();
  EXPECT_EQ(f.batches_received(), 4);
  EXPECT_EQ(f.batches_evaluated(), 1);
  EXPECT_EQ(f.outputs(0).top1_rows(), kBatch);
  EXPECT_THAT(f.note(), HasSubstr("held out from calibration"));
  EXPECT_TRUE(run.result->summary.accuracy_search().met());

  // Every batch held back: nothing to calibrate with.
  config.set_holdout_batches(4);
  run = RunWithBatches(config, model, 4);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(run.result.status().message(), HasSubstr("none was left"));

  config.set_holdout_batches(-1);
  run = RunWithBatches(config, model, 4);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInvalidArgument);

  quantd::v1::QuantizeConfig dynamic = StaticRange();
  dynamic.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::DYNAMIC_RANGE);
  dynamic.set_holdout_batches(1);
  run = RunWithBatches(dynamic, model, 0);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(run.result.status().message(), HasSubstr("holdout_batches"));
}

}  // namespace quantd
