// End-to-end tests of RunQuantize: bytes in, bytes + summary + events out.
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/accuracy_search.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "core/graph/model_io.h"
#include "core/graph/validate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

namespace tfq = tensorflow::quantization;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

quantd::v1::QuantizeConfig DynamicRange(int64_t min_elements = -1) {
  quantd::v1::QuantizeConfig c;
  c.mutable_options()->mutable_quantization_method()->set_experimental_method(
      tfq::QuantizationMethod::DYNAMIC_RANGE);
  c.mutable_options()->set_min_num_elements_for_weights(min_elements);
  return c;
}

struct Recorded {
  std::vector<quantd::v1::Progress> progress;
  std::vector<quantd::v1::TensorReport> reports;
  QuantizeEvents events() {
    return {
        [this](const quantd::v1::Progress& p) { progress.push_back(p); },
        [this](const quantd::v1::TensorReport& r) { reports.push_back(r); }};
  }
};

absl::StatusOr<QuantizeResult> RunJob(const quantd::v1::QuantizeConfig& config,
                                      std::string bytes,
                                      Recorded* recorded = nullptr,
                                      ThreadPool* pool = nullptr) {
  CancellationToken cancel;
  Recorded unused;
  return RunQuantize(config, std::move(bytes),
                     (recorded ? recorded : &unused)->events(), cancel, pool);
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(RunQuantizeTest, NoMethodReturnsTheSameBytes) {
  const std::string bytes = testing::ConvModel().Bytes();
  absl::StatusOr<QuantizeResult> r =
      RunJob(quantd::v1::QuantizeConfig(), bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, bytes);
  EXPECT_TRUE(r->summary.model_unchanged());
  EXPECT_THAT(r->summary.unchanged_reason(),
              HasSubstr("no quantization_method"));
  EXPECT_EQ(r->summary.input_bytes(), bytes.size());
  EXPECT_EQ(r->summary.output_bytes(), bytes.size());
  EXPECT_EQ(r->summary.input_opset(), 13);
  EXPECT_EQ(r->summary.method(), "none");
  EXPECT_THAT(r->summary.validations(),
              ElementsAre(HasSubstr("onnx.checker"), HasSubstr("structural")));
}

TEST(RunQuantizeTest, FullPrecisionReturnsTheSameBytes) {
  const std::string bytes = testing::ConvModel().Bytes();
  quantd::v1::QuantizeConfig c = DynamicRange();
  c.mutable_options()->set_quantization_precision(tfq::PRECISION_FULL);
  absl::StatusOr<QuantizeResult> r = RunJob(c, bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, bytes);
  EXPECT_TRUE(r->summary.model_unchanged());
  EXPECT_THAT(r->summary.unchanged_reason(), HasSubstr("PRECISION_FULL"));
}

TEST(RunQuantizeTest, PassThroughStillValidates) {
  EXPECT_EQ(RunJob(quantd::v1::QuantizeConfig(), "garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunJob(quantd::v1::QuantizeConfig(), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  testing::ModelBuilder b(13);
  b.Input("x", {2}).Node("NoSuchOp", {"x"}, {"y"}).Output("y");
  absl::Status s = RunJob(quantd::v1::QuantizeConfig(), b.Bytes()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("onnx.checker"));
}

TEST(RunQuantizeTest, DynamicRangeConv) {
  Recorded rec;
  const std::string bytes = testing::ConvModel().Bytes();
  absl::StatusOr<QuantizeResult> r = RunJob(DynamicRange(0), bytes, &rec);
  ASSERT_TRUE(r.ok()) << r.status();
  const quantd::v1::QuantizeSummary& s = r->summary;
  EXPECT_FALSE(s.model_unchanged());
  EXPECT_EQ(s.quantized_tensors(), 1);
  EXPECT_EQ(s.quantized_nodes(), 1);
  EXPECT_EQ(s.skipped_tensors(), 0);
  EXPECT_EQ(s.method(), "DYNAMIC_RANGE");
  EXPECT_EQ(s.op_set(), "TF");
  EXPECT_EQ(s.precision(), "PRECISION_W8A8");
  EXPECT_EQ(s.input_bytes(), bytes.size());
  EXPECT_EQ(s.output_bytes(), r->model.size());
  EXPECT_LT(r->model.size(), bytes.size());
  EXPECT_EQ(s.weight_bytes_before(), 1152u * 4);
  EXPECT_EQ(s.weight_bytes_after(), 1152u + 16 * 5);
  EXPECT_EQ(s.output_opset(), 13);
  EXPECT_THAT(s.validations(),
              ElementsAre(HasSubstr("input model: onnx.checker"),
                          HasSubstr("input model: structural"),
                          HasSubstr("output model: onnx.checker"),
                          HasSubstr("output model: structural")));
  std::vector<quantd::v1::Stage> stages;
  for (const auto& d : s.stage_durations()) stages.push_back(d.stage());
  EXPECT_THAT(stages,
              ElementsAre(quantd::v1::STAGE_PARSE, quantd::v1::STAGE_VALIDATE,
                          quantd::v1::STAGE_PLAN, quantd::v1::STAGE_QUANTIZE,
                          quantd::v1::STAGE_SERIALIZE));
  ASSERT_EQ(rec.reports.size(), 1u);
  EXPECT_EQ(rec.reports[0].tensor_name(), "W");
  bool quantize_progress = false;
  for (const auto& p : rec.progress) {
    quantize_progress |= p.stage() == quantd::v1::STAGE_QUANTIZE &&
                         p.done() == 1 && p.total() == 1;
  }
  EXPECT_TRUE(quantize_progress);
  // The output parses and passes the checker on its own.
  absl::StatusOr<onnx::ModelProto> out = graph::ParseModel(r->model);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(graph::ValidateModel(*out, "output", nullptr).ok());
}

TEST(RunQuantizeTest, AnAlreadyQuantizedModelSaysSo) {
  // quantd's own output sent back: nothing float is left to quantize, and
  // the summary names the integer operators already there.
  absl::StatusOr<QuantizeResult> once =
      RunJob(DynamicRange(0), testing::ConvModel().Bytes());
  ASSERT_TRUE(once.ok()) << once.status();
  for (const std::string& v : once->summary.validations()) {
    EXPECT_THAT(v, ::testing::Not(HasSubstr("already quantized")));
  }
  absl::StatusOr<QuantizeResult> twice = RunJob(DynamicRange(0), once->model);
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(twice->summary.quantized_tensors(), 0);
  EXPECT_THAT(
      twice->summary.validations(),
      ::testing::Contains(::testing::AllOf(
          HasSubstr("note: the input model is already quantized in "
                    "part ("),
          HasSubstr(" DynamicQuantizeLinear"), HasSubstr(" DequantizeLinear"),
          HasSubstr("left as they are"))));
}

// Batch b for ConvModel's input x [1, 8, 8, 8]: 512 values spread evenly
// over [-spread, spread), a different phase per batch.
quantd::v1::TensorBatch SpreadBatch(int b, float spread, float outlier = 0.0f) {
  std::vector<float> x(512);
  for (int i = 0; i < 512; ++i) {
    x[i] =
        spread * (static_cast<float>((i * 37 + b * 11) % 200) / 100.0f - 1.0f);
  }
  if (outlier != 0.0f) x[(b * 97) % 512] = outlier;
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* t = batch.add_tensors();
  t->set_name("x");
  t->set_data_type(1);
  for (int64_t d : {1, 8, 8, 8}) t->add_shape(d);
  t->set_data(x.data(), x.size() * sizeof(float));
  return batch;
}

// Batches for ConvModel's input x: 511 values in [-1, 1) and one outlier
// per batch (the observers disagree on whether to clip it).
void PushOutlierBatches(BatchQueue* queue, int count, float outlier) {
  for (int b = 0; b < count; ++b) queue->Push(SpreadBatch(b, 1.0f, outlier));
  queue->Close();
}

// Batches for ConvModel's input x whose spread shrinks along the stream:
// the first `wide` batches (the held-out ones) reach +-1.6, the others +-1,
// as when a few dozen calibration samples miss the extremes of new data.
void PushShrinkingBatches(BatchQueue* queue, int count, int wide) {
  for (int b = 0; b < count; ++b) {
    queue->Push(SpreadBatch(b, b < wide ? 1.6f : 1.0f));
  }
  queue->Close();
}

absl::StatusOr<QuantizeResult> RunStaticWithMethod(
    const std::string& method, int holdout = 0, float outlier = 6.0f,
    Recorded* recorded = nullptr, int batches = 6, double headroom = 0,
    bool shrinking = false) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  config.mutable_calibration_config()->set_method(method);
  if (headroom != 0)
    config.mutable_calibration_config()->set_headroom(headroom);
  config.set_holdout_batches(holdout);
  BatchQueue queue(8);
  if (shrinking) {
    PushShrinkingBatches(&queue, batches, holdout);
  } else {
    PushOutlierBatches(&queue, batches, outlier);
  }
  CancellationToken cancel;
  Recorded unused;
  return RunQuantize(config, testing::ConvModel().Bytes(),
                     (recorded ? recorded : &unused)->events(), cancel, nullptr,
                     &queue);
}

// Attention-shaped: scores = x Wk, plus a causal mask of -inf (as torch's
// nn.Transformer masks are), Softmax, then p Wv. The masked scores hold
// -inf on every batch; they used to fail calibration ("batch holds NaN or
// infinity"), so STATIC_RANGE ran on no transformer exported with such a
// mask. They are observed as unbounded and, read only by Softmax, get no
// point; the other values are quantized as usual.
TEST(RunQuantizeTest, AnInfiniteAttentionMaskIsObservedAndLeftFloat) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> mask(8 * 16, 0.0f);
  for (int i = 0; i < 8; ++i) {
    for (int j = i + 1; j < 16; ++j) mask[i * 16 + j] = -kInf;
  }
  testing::ModelBuilder b(13);
  b.Input("x", {1, 8, 64})
      .Weight("Wk", {64, 16}, 1)
      .Weight("Wv", {16, 64}, 2)
      .Initializer("mask", {8, 16}, mask)
      .Node("MatMul", {"x", "Wk"}, {"scores"}, "k")
      .Node("Add", {"scores", "mask"}, {"masked"}, "mask_add")
      .Node("Softmax", {"masked"}, {"p"}, "softmax")
      .Attr("axis", int64_t{-1})
      .Node("MatMul", {"p", "Wv"}, {"y"}, "v")
      .Output("y", {1, 8, 64});
  auto batches = [] {
    auto q = std::make_shared<BatchQueue>(4);
    for (int n = 0; n < 3; ++n) {
      std::vector<float> x(8 * 64);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = std::sin(0.37f * static_cast<float>(i) + n);
      }
      quantd::v1::TensorBatch batch;
      quantd::v1::NamedTensor* t = batch.add_tensors();
      t->set_name("x");
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : {1, 8, 64}) t->add_shape(d);
      t->set_data(x.data(), x.size() * sizeof(float));
      q->Push(std::move(batch));
    }
    q->Close();
    return q;
  };
  CancellationToken cancel;
  auto calibrated =
      RunCalibrate({}, b.Bytes(), batches().get(), {}, cancel, nullptr);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  int unbounded = 0;
  for (const quantd::v1::TensorRange& r : calibrated->ranges()) {
    EXPECT_EQ(r.unbounded(), r.tensor_name() == "masked") << r.tensor_name();
    unbounded += r.unbounded();
  }
  EXPECT_EQ(unbounded, 1);

  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  Recorded recorded;
  absl::StatusOr<QuantizeResult> r = RunQuantize(
      config, b.Bytes(), recorded.events(), cancel, nullptr, batches().get());
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(r->model);
  ASSERT_TRUE(m.ok());
  std::vector<std::string> quantized;
  for (const auto& node : m->graph().node()) {
    if (node.op_type() == "QuantizeLinear") quantized.push_back(node.input(0));
  }
  // x and p as read by the MatMuls, scores as a MatMul's output.
  EXPECT_THAT(quantized, ::testing::UnorderedElementsAre("x", "scores", "p"));
  ASSERT_EQ(r->summary.fidelity().outputs_size(), 1);
  EXPECT_GT(r->summary.fidelity().outputs(0).sqnr_db(), 25.0);
}

// With the mask on a tensor a quantized op reads, that tensor stays float
// and the summary names it.
TEST(RunQuantizeTest, AMaskedValueAQuantizedOpReadsStaysFloatAndIsNamed) {
  std::vector<float> mask(64, 0.0f);
  mask[5] = std::numeric_limits<float>::lowest();  // torch's finfo.min.
  testing::ModelBuilder b(13);
  b.Input("x", {2, 64})
      .Initializer("mask", {64}, mask)
      .Weight("W", {64, 32}, 3)
      .Node("Add", {"x", "mask"}, {"masked"}, "mask_add")
      .Node("Softmax", {"masked"}, {"p"}, "softmax")
      .Node("MatMul", {"masked", "W"}, {"y"}, "mm")
      .Node("MatMul", {"p", "W"}, {"z"}, "mm2")
      .Output("y", {2, 32})
      .Output("z", {2, 32});
  auto q = std::make_shared<BatchQueue>(2);
  {
    std::vector<float> x(2 * 64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.1f * i);
    quantd::v1::TensorBatch batch;
    quantd::v1::NamedTensor* t = batch.add_tensors();
    t->set_name("x");
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {2, 64}) t->add_shape(d);
    t->set_data(x.data(), x.size() * sizeof(float));
    q->Push(std::move(batch));
    q->Close();
  }
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  CancellationToken cancel;
  Recorded recorded;
  absl::StatusOr<QuantizeResult> r = RunQuantize(
      config, b.Bytes(), recorded.events(), cancel, nullptr, q.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->summary.validations(),
              ::testing::Contains(::testing::AllOf(
                  HasSubstr("note: 1 tensor(s) held an infinity or a value of "
                            "magnitude >= 1e30"),
                  HasSubstr("'masked'"))));
  absl::StatusOr<onnx::ModelProto> m = graph::ParseModel(r->model);
  ASSERT_TRUE(m.ok());
  std::vector<std::string> quantized;
  for (const auto& node : m->graph().node()) {
    if (node.op_type() == "QuantizeLinear") quantized.push_back(node.input(0));
  }
  EXPECT_THAT(quantized, ::testing::ElementsAre("p"));
}

TEST(RunQuantizeTest, EntropyCalibrationCountsTheRangesItKept) {
  // x: 511 values in [-1, 1) and one at 100 per batch. At 8 bits the
  // unclipped step costs far less squared error than clipping the outlier
  // by ~99, so entropy keeps x's observed range and the summary says so;
  // entropy_unguarded clips it and says nothing.
  auto run = [](const std::string& method) {
    return RunStaticWithMethod(method, 0, 100.0f, nullptr, 4);
  };
  absl::StatusOr<QuantizeResult> guarded = run("entropy");
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  EXPECT_THAT(guarded->summary.validations(),
              ::testing::Contains(::testing::AllOf(
                  HasSubstr("note: entropy kept the observed range of "),
                  HasSubstr(" calibrated tensors"))));
  absl::StatusOr<QuantizeResult> unguarded = run("entropy_unguarded");
  ASSERT_TRUE(unguarded.ok()) << unguarded.status();
  for (const std::string& v : unguarded->summary.validations()) {
    EXPECT_THAT(v, ::testing::Not(HasSubstr("kept the observed range")));
  }
}

TEST(RunQuantizeTest, AutoObserverKeepsTheCandidateClosestToFloat) {
  Recorded recorded;
  absl::StatusOr<QuantizeResult> r =
      RunStaticWithMethod("auto", 0, 6.0f, &recorded);
  ASSERT_TRUE(r.ok()) << r.status();
  // Tensor reports are the returned model's only, as with a named observer.
  Recorded named;
  ASSERT_TRUE(RunStaticWithMethod("min_max", 0, 6.0f, &named).ok());
  EXPECT_EQ(recorded.reports.size(), named.reports.size());
  EXPECT_FALSE(recorded.reports.empty());
  ASSERT_TRUE(r->summary.has_observer_choice());
  const quantd::v1::ObserverChoice& c = r->summary.observer_choice();
  std::vector<std::string> methods;
  int best = 0;
  for (int i = 0; i < c.candidates_size(); ++i) {
    methods.push_back(c.candidates(i).method());
    if (c.candidates(i).output_sqnr_db() >
        c.candidates(best).output_sqnr_db()) {
      best = i;
    }
  }
  EXPECT_THAT(methods, ElementsAre("min_max", "percentile", "mse", "entropy",
                                   "entropy_unguarded"));
  // Judged on the batches the ranges were fitted to, no widening is tried.
  for (const auto& k : c.candidates()) EXPECT_EQ(k.headroom(), 1.0);
  EXPECT_EQ(c.chosen_headroom(), 1.0);
  EXPECT_EQ(c.chosen(), c.candidates(best).method());
  EXPECT_EQ(c.batches(), 6);
  EXPECT_FALSE(c.held_out());
  // min_max clips nothing; the outlier makes at least one candidate clip x.
  EXPECT_EQ(c.candidates(0).clipped_tensors(), 0);
  int clipping = 0;
  for (const auto& k : c.candidates()) clipping += k.clipped_tensors() > 0;
  EXPECT_GT(clipping, 0);
  // The returned model is the kept candidate's: its fidelity report, on the
  // same batches, gives the same worst output SQNR.
  ASSERT_TRUE(r->summary.fidelity().evaluated());
  EXPECT_NEAR(WorstOutputSqnr(r->summary.fidelity()),
              c.candidates(best).output_sqnr_db(), 1e-9);
  // Every candidate's comparison is a stage of its own.
  int fidelity_stages = 0;
  for (const auto& d : r->summary.stage_durations()) {
    fidelity_stages += d.stage() == quantd::v1::STAGE_FIDELITY;
  }
  EXPECT_EQ(fidelity_stages, 6);
  // The chosen observer named directly gives the same model where it reads
  // the same histogram.
  if (c.chosen() == "min_max" || c.chosen() == "entropy" ||
      c.chosen() == "entropy_unguarded") {
    absl::StatusOr<QuantizeResult> replay = RunStaticWithMethod(c.chosen());
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(replay->model, r->model);
  }
}

TEST(RunQuantizeTest, AutoObserverJudgesOnHeldOutBatches) {
  absl::StatusOr<QuantizeResult> r = RunStaticWithMethod("auto", 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.observer_choice().batches(), 2);
  EXPECT_TRUE(r->summary.observer_choice().held_out());
  EXPECT_THAT(r->summary.fidelity().note(), HasSubstr("held out"));
  EXPECT_THAT(r->summary.fidelity().note(),
              ::testing::Not(HasSubstr("fitted to")));
}

// In-sample fidelity says it is in-sample: on unseen inputs the ranges can
// clip where they did not on the batches they were fitted to.
TEST(RunQuantizeTest, InSampleFidelitySaysSo) {
  absl::StatusOr<QuantizeResult> r = RunStaticWithMethod("min_max");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->summary.fidelity().evaluated());
  EXPECT_THAT(r->summary.fidelity().note(),
              HasSubstr("measured on the batches the activation ranges were "
                        "fitted to"));
  EXPECT_THAT(r->summary.fidelity().note(), HasSubstr("holdout_batches"));
}

// On held-out batches wider than the calibration ones, auto also tries
// min_max widened, keeps a widened candidate (every narrower one clips the
// held-out data), and replaying with that method and headroom gives the
// same model. A request headroom multiplies every candidate's.
TEST(RunQuantizeTest, AutoObserverTriesHeadroomOnHeldOutBatches) {
  absl::StatusOr<QuantizeResult> r = RunStaticWithMethod(
      "auto", 2, 0, nullptr, 6, /*headroom=*/0, /*shrinking=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  const quantd::v1::ObserverChoice& c = r->summary.observer_choice();
  EXPECT_TRUE(c.held_out());
  std::vector<std::pair<std::string, double>> tried;
  int best = 0;
  for (int i = 0; i < c.candidates_size(); ++i) {
    tried.emplace_back(c.candidates(i).method(), c.candidates(i).headroom());
    if (c.candidates(i).output_sqnr_db() >
        c.candidates(best).output_sqnr_db()) {
      best = i;
    }
  }
  using P = std::pair<std::string, double>;
  EXPECT_THAT(
      tried,
      ElementsAre(P{"min_max", 1}, P{"percentile", 1}, P{"mse", 1},
                  P{"entropy", 1}, P{"entropy_unguarded", 1}, P{"min_max", 1.1},
                  P{"min_max", 1.25}, P{"min_max", 1.5}, P{"min_max", 2}));
  EXPECT_EQ(c.chosen(), "min_max");
  EXPECT_EQ(c.chosen_headroom(), c.candidates(best).headroom());
  EXPECT_GT(c.chosen_headroom(), 1.25);
  EXPECT_GT(c.candidates(best).output_sqnr_db(),
            c.candidates(0).output_sqnr_db() + 6);
  EXPECT_NEAR(WorstOutputSqnr(r->summary.fidelity()),
              c.candidates(best).output_sqnr_db(), 1e-9);

  absl::StatusOr<QuantizeResult> replay =
      RunStaticWithMethod("min_max", 2, 0, nullptr, 6, c.chosen_headroom(),
                          /*shrinking=*/true);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->model, r->model);
  EXPECT_NEAR(WorstOutputSqnr(replay->summary.fidelity()),
              c.candidates(best).output_sqnr_db(), 1e-9);

  absl::StatusOr<QuantizeResult> scaled = RunStaticWithMethod(
      "auto", 2, 0, nullptr, 6, /*headroom=*/1.2, /*shrinking=*/true);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  const quantd::v1::ObserverChoice& s = scaled->summary.observer_choice();
  ASSERT_EQ(s.candidates_size(), 9);
  EXPECT_DOUBLE_EQ(s.candidates(0).headroom(), 1.2);
  EXPECT_DOUBLE_EQ(s.candidates(8).headroom(), 2.4);
}

// STATIC_RANGE min_max on batches for ConvModel's input x with the given
// spreads (one batch each): auto_headroom, or a fixed headroom.
absl::StatusOr<QuantizeResult> RunSpreads(const std::vector<float>& spreads,
                                          bool auto_headroom,
                                          double headroom = 0,
                                          int holdout = 0) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  config.mutable_calibration_config()->set_auto_headroom(auto_headroom);
  config.set_holdout_batches(holdout);
  if (headroom != 0)
    config.mutable_calibration_config()->set_headroom(headroom);
  BatchQueue queue(spreads.size() + 1);
  for (size_t b = 0; b < spreads.size(); ++b) {
    queue.Push(SpreadBatch(static_cast<int>(b), spreads[b]));
  }
  queue.Close();
  CancellationToken cancel;
  return RunQuantize(config, testing::ConvModel().Bytes(), {}, cancel, nullptr,
                     &queue);
}

// auto_headroom: 8 batches in 4 folds; the fold holding the widest batch
// is judged with ranges that clip it, so a widened min_max wins; the
// returned model is min_max at the kept factor over all batches, as a
// request with that headroom gives it.
TEST(RunQuantizeTest, AutoHeadroomChoosesTheFactorByCrossValidation) {
  const std::vector<float> spreads = {1.0f, 1.8f, 1.0f, 1.0f,
                                      2.6f, 1.0f, 1.0f, 1.3f};
  absl::StatusOr<QuantizeResult> r = RunSpreads(spreads, true);
  ASSERT_TRUE(r.ok()) << r.status();
  const quantd::v1::ObserverChoice& c = r->summary.observer_choice();
  EXPECT_EQ(c.folds(), 4);
  EXPECT_EQ(c.batches(), 8);
  EXPECT_FALSE(c.held_out());
  std::vector<double> factors;
  int best = 0;
  for (int i = 0; i < c.candidates_size(); ++i) {
    EXPECT_EQ(c.candidates(i).method(), "min_max");
    factors.push_back(c.candidates(i).headroom());
    if (c.candidates(i).output_sqnr_db() >
        c.candidates(best).output_sqnr_db()) {
      best = i;
    }
  }
  EXPECT_THAT(factors, ElementsAre(1, 1.1, 1.25, 1.5, 2));
  EXPECT_EQ(c.chosen(), "min_max");
  EXPECT_EQ(c.chosen_headroom(), c.candidates(best).headroom());
  EXPECT_GT(c.chosen_headroom(), 1.1);
  EXPECT_GT(c.candidates(best).output_sqnr_db(),
            c.candidates(0).output_sqnr_db() + 3);
  // One fidelity stage per factor and fold, and the final one.
  int fidelity_stages = 0;
  for (const auto& d : r->summary.stage_durations()) {
    fidelity_stages += d.stage() == quantd::v1::STAGE_FIDELITY;
  }
  EXPECT_EQ(fidelity_stages, 5 * 4 + 1);

  absl::StatusOr<QuantizeResult> direct =
      RunSpreads(spreads, false, c.chosen_headroom());
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->model, r->model);
}

// With held-out batches there are no folds: the held-out batch judges
// each factor on the ranges of all the others.
TEST(RunQuantizeTest, AutoHeadroomJudgesOnHeldOutBatchesWithoutFolds) {
  absl::StatusOr<QuantizeResult> r =
      RunSpreads({2.6f, 1.0f, 1.0f, 1.0f}, true, 0, /*holdout=*/1);
  ASSERT_TRUE(r.ok()) << r.status();
  const quantd::v1::ObserverChoice& c = r->summary.observer_choice();
  EXPECT_EQ(c.folds(), 0);
  EXPECT_TRUE(c.held_out());
  EXPECT_EQ(c.batches(), 1);
  EXPECT_EQ(c.candidates_size(), 5);
  EXPECT_GE(c.chosen_headroom(), 2.0);
}

// Many small batches: still 4 folds (batch n in fold n % 4), whatever the
// number of batches, so the state kept per tensor stays fixed.
TEST(RunQuantizeTest, AutoHeadroomFoldsStayFourOverManyBatches) {
  std::vector<float> spreads(60, 1.0f);
  spreads[17] = 2.0f;
  absl::StatusOr<QuantizeResult> r = RunSpreads(spreads, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.observer_choice().folds(), 4);
  EXPECT_EQ(r->summary.observer_choice().batches(), 60);
}

TEST(RunQuantizeTest, AutoHeadroomNeedsTwoBatchesToFold) {
  absl::StatusOr<QuantizeResult> r = RunSpreads({1.0f}, true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(r.status()), HasSubstr("at least 2"));
  EXPECT_THAT(Message(r.status()), HasSubstr("holdout_batches"));
}

TEST(RunQuantizeTest, HeadroomIsRefusedWhereNothingWouldBeWidened) {
  quantd::v1::QuantizeConfig dynamic = DynamicRange();
  dynamic.mutable_calibration_config()->set_headroom(1.5);
  absl::Status s = RunJob(dynamic, testing::ConvModel().Bytes()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("headroom"));
  EXPECT_THAT(Message(s), HasSubstr("STATIC_RANGE"));

  quantd::v1::QuantizeConfig ranges;
  ranges.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  ranges.mutable_calibration_config()->set_headroom(1.5);
  quantd::v1::TensorRange* t = ranges.mutable_calibration()->add_ranges();
  t->set_tensor_name("x");
  t->set_max(1);
  s = RunJob(ranges, testing::ConvModel().Bytes()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("used as given"));

  absl::StatusOr<QuantizeResult> below =
      RunStaticWithMethod("min_max", 0, 6.0f, nullptr, 2, /*headroom=*/0.5);
  EXPECT_EQ(below.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(below.status()),
              HasSubstr("headroom: must be in [1, 16]"));
}

TEST(RunQuantizeTest, AutoObserverIsRefusedWhereItCannotJudge) {
  quantd::v1::QuantizeConfig dynamic = DynamicRange();
  dynamic.mutable_calibration_config()->set_method("auto");
  absl::Status s = RunJob(dynamic, testing::ConvModel().Bytes()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("STATIC_RANGE"));

  quantd::v1::QuantizeConfig ranges;
  ranges.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  ranges.mutable_calibration_config()->set_method("auto");
  quantd::v1::TensorRange* t = ranges.mutable_calibration()->add_ranges();
  t->set_tensor_name("x");
  t->set_max(1);
  s = RunJob(ranges, testing::ConvModel().Bytes()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("calibration batches"));

  // Batches of observed activations: no model run to compare.
  quantd::v1::QuantizeConfig activations = ranges;
  activations.clear_calibration();
  BatchQueue queue(4);
  for (int b = 0; b < 2; ++b) {
    quantd::v1::TensorBatch batch;
    quantd::v1::NamedTensor* a = batch.add_tensors();
    a->set_name("conv");
    a->set_data_type(1);
    for (int64_t d : {1, 16, 8, 8}) a->add_shape(d);
    const std::vector<float> v(16 * 64, 0.5f + b);
    a->set_data(v.data(), v.size() * sizeof(float));
    queue.Push(std::move(batch));
  }
  queue.Close();
  CancellationToken cancel;
  s = RunQuantize(activations, testing::ConvModel().Bytes(), {}, cancel,
                  nullptr, &queue)
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), HasSubstr("calibration method auto"));
}

TEST(RunQuantizeTest, DefaultMinimumSkipsSmallWeights) {
  absl::StatusOr<QuantizeResult> r =
      RunJob(DynamicRange(0), testing::MatMulModel(16, 16).Bytes());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.quantized_tensors(), 0);
  ASSERT_EQ(r->summary.skipped_size(), 1);
  EXPECT_EQ(r->summary.skipped(0).reason(), quantd::v1::SKIP_TOO_FEW_ELEMENTS);
}

TEST(RunQuantizeTest, OptionErrorsComeBeforeParsing) {
  quantd::v1::QuantizeConfig c = DynamicRange();
  c.mutable_activation_params()->set_bits(8);
  absl::Status s = RunJob(c, "not even a model").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("activation_params.bits"));

  c = DynamicRange();
  c.mutable_options()->set_op_set(tfq::UNIFORM_QUANTIZED);
  EXPECT_EQ(RunJob(c, "x").status().code(), absl::StatusCode::kUnimplemented);
  c = DynamicRange();
  c.mutable_options()->set_min_num_elements_for_weights(-5);
  EXPECT_EQ(RunJob(c, "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RunQuantizeTest, Opset21ModelIsQuantizedWithStructuralChecks) {
  testing::ModelBuilder b = testing::MatMulModel(64, 32, 21);
  b.model().set_ir_version(10);
  absl::StatusOr<QuantizeResult> r = RunJob(DynamicRange(), b.Bytes());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.quantized_tensors(), 1);
  EXPECT_EQ(r->summary.output_opset(), 21);
  EXPECT_THAT(r->summary.validations(),
              ElementsAre(HasSubstr("opset 21"), HasSubstr("opset 21")));
}

TEST(RunQuantizeTest, CancelledJobReturnsCancelled) {
  CancellationToken cancel;
  QuantizeEvents events;
  // Cancel as soon as the first tensor is reported: the job stops before
  // the next stage.
  events.on_tensor_report = [&](const quantd::v1::TensorReport&) {
    cancel.Cancel();
  };
  absl::StatusOr<QuantizeResult> r = RunQuantize(
      DynamicRange(), testing::ConvModel().Bytes(), events, cancel, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);

  CancellationToken already;
  already.Cancel();
  r = RunQuantize(DynamicRange(), testing::ConvModel().Bytes(), {}, already,
                  nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(Message(r.status()), HasSubstr("parse"));
}

TEST(RunQuantizeTest, Opset9ModelIsUpgradedAndSaysSo) {
  testing::ModelBuilder b = testing::MatMulModel(64, 32, 9);
  b.model().set_ir_version(4);
  Recorded rec;
  absl::StatusOr<QuantizeResult> r = RunJob(DynamicRange(), b.Bytes(), &rec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.input_opset(), 9);
  EXPECT_EQ(r->summary.output_opset(), 13);
  EXPECT_EQ(r->summary.quantized_tensors(), 1);
  EXPECT_THAT(r->summary.validations(),
              ::testing::Contains(HasSubstr("upgraded from 9 to 13")));
  // Preparation upgrades the model before the pass: the tensor's report
  // has nothing to add about the opset.
  ASSERT_EQ(rec.reports.size(), 1u);
}

TEST(RunQuantizeTest, WithAPool) {
  ThreadPool pool(2);
  testing::ModelBuilder b(13);
  b.Input("x", {2, 64});
  for (int i = 0; i < 5; ++i) {
    const std::string w = "W" + std::to_string(i);
    b.Weight(w, {64, 64}, i)
        .Node("MatMul", {i ? "y" + std::to_string(i - 1) : "x", w},
              {"y" + std::to_string(i)});
  }
  b.Output("y4");
  Recorded rec;
  absl::StatusOr<QuantizeResult> r =
      RunJob(DynamicRange(), b.Bytes(), &rec, &pool);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.quantized_tensors(), 5);
  ASSERT_EQ(rec.reports.size(), 5u);
  EXPECT_EQ(rec.reports[4].tensor_name(), "W4");
}

TEST(RunQuantizeTest, DigitsExample) {
  const std::string path = testing::SourcePath("examples/digits/model.onnx");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not there yet";
  absl::StatusOr<QuantizeResult> r =
      RunJob(DynamicRange(-1), testing::ReadFileOrDie(path));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->summary.quantized_tensors(), 0);
  EXPECT_LT(r->summary.weight_bytes_after(), r->summary.weight_bytes_before());
}

TEST(RunQuantizeTest, OnnxBackendConvModel) {
  // Its weight is a graph input, so it is reported, not quantized.
  const std::string path =
      "/usr/include/onnx/backend/test/data/node/test_conv_with_strides_padding/"
      "model.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing";
  absl::StatusOr<QuantizeResult> r =
      RunJob(DynamicRange(-1), testing::ReadFileOrDie(path));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.quantized_tensors(), 0);
  ASSERT_EQ(r->summary.skipped_size(), 1);
  EXPECT_EQ(r->summary.skipped(0).reason(), quantd::v1::SKIP_NOT_CONSTANT);
}

}  // namespace
}  // namespace quantd
