// Request resolution: defaults, pass-through, the order of the checks (the
// first failing step is the one reported) and the observers of in-call
// calibration, all without a model.
#include "core/engine/request_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {
namespace tfq = tensorflow::quantization;

using ::testing::HasSubstr;

quantd::v1::QuantizeConfig WithMethod(
    tfq::QuantizationMethod::ExperimentalMethod method) {
  quantd::v1::QuantizeConfig c;
  c.mutable_options()->mutable_quantization_method()->set_experimental_method(
      method);
  return c;
}

TEST(ResolveQuantizeRequestTest, NoMethodPassesThrough) {
  absl::StatusOr<QuantizeRequestOptions> o =
      ResolveQuantizeRequest(quantd::v1::QuantizeConfig(), false);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->pass_through);
  EXPECT_EQ(o->resolved.method, Method::kNone);
  EXPECT_THAT(o->unchanged_reason, HasSubstr("no quantization_method"));
}

TEST(ResolveQuantizeRequestTest, FullPassesThroughUnlessUnitsAskForMore) {
  quantd::v1::QuantizeConfig c =
      WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE);
  c.mutable_options()->set_quantization_precision(tfq::PRECISION_FULL);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(c, false);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->pass_through);
  EXPECT_THAT(o->unchanged_reason, HasSubstr("PRECISION_FULL"));

  auto* unit = c.mutable_options()->add_unit_wise_quantization_precision();
  unit->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_NODE);
  unit->set_unit_name("conv1");
  unit->set_quantization_precision(tfq::PRECISION_W8A8);
  o = ResolveQuantizeRequest(c, false);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->pass_through);
  EXPECT_EQ(o->dynamic_range.units.size(), 1u);
}

TEST(ResolveQuantizeRequestTest, DefaultsOfEachMethod) {
  absl::StatusOr<QuantizeRequestOptions> d = ResolveQuantizeRequest(
      WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE), false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->resolved.op_set, tfq::TF);
  EXPECT_EQ(d->resolved.precision, tfq::PRECISION_W8A8);
  EXPECT_EQ(d->dynamic_range.weights.spec.bits, 8);
  EXPECT_TRUE(d->dynamic_range.weights.per_channel);

  quantd::v1::QuantizeConfig s =
      WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  s.mutable_options()->set_op_set(tfq::UNIFORM_QUANTIZED);
  s.mutable_weight_params()->set_bits(6);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(s, true);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->static_range.op_set, tfq::UNIFORM_QUANTIZED);
  EXPECT_EQ(o->static_range.weights.spec.bits, 6);
  EXPECT_EQ(o->static_range.activations.spec.bits, 8);
}

// Each request below breaks two steps; the earlier step is the one named.
TEST(ResolveQuantizeRequestTest, ChecksRunInTheDocumentedOrder) {
  // 1 (capability) before 2 (search fields).
  quantd::v1::QuantizeConfig c =
      WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE);
  c.mutable_options()->set_op_set(tfq::UNIFORM_QUANTIZED);
  c.set_holdout_batches(-1);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(c, false);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(o.status().message(), HasSubstr("UNIFORM_QUANTIZED"));

  // 2 (search fields) before 3 (pass options).
  c = WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  c.set_holdout_batches(-1);
  c.mutable_weight_params()->set_bits(12);
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("holdout_batches is -1"));

  // 3 (pass options) before 5 (observers).
  c = WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  c.mutable_weight_params()->set_bits(12);
  c.mutable_calibration_config()->set_method("no_such_observer");
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("weight_params.bits is 12"));

  // 4: batches with DYNAMIC_RANGE, before its pass options are looked at.
  c = WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE);
  c.mutable_activation_params()->set_bits(8);
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("calibration batches were sent"));
  o = ResolveQuantizeRequest(c, false);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("activation_params.bits"));
}

TEST(ResolveQuantizeRequestTest, TargetNeedsStaticRange) {
  quantd::v1::QuantizeConfig c =
      WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE);
  c.set_target_sqnr_db(30);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(c, false);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
  c = quantd::v1::QuantizeConfig();
  c.set_target_sqnr_db(30);
  o = ResolveQuantizeRequest(c, false);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  c = WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  c.set_target_sqnr_db(500);
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
}

// target_agreement is a search goal like target_sqnr_db; allowed_precisions
// is checked against the request's own precision.
TEST(ResolveQuantizeRequestTest, AgreementTargetAndAllowedPrecisions) {
  quantd::v1::QuantizeConfig c =
      WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE);
  c.set_target_agreement(0.95);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(c, false);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(o.status().message(), HasSubstr("target_agreement"));
  c = WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  c.set_target_agreement(0.95);
  c.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  c.add_allowed_precisions(tfq::PRECISION_W4A8);
  c.add_allowed_precisions(tfq::PRECISION_W8A8);
  EXPECT_TRUE(ResolveQuantizeRequest(c, true).ok());
  // The model-wide default (W8A8) is not allowed.
  c.mutable_options()->clear_quantization_precision();
  c.clear_allowed_precisions();
  c.add_allowed_precisions(tfq::PRECISION_W4A8);
  c.add_allowed_precisions(tfq::PRECISION_FULL);
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("PRECISION_W8A8"));
}

// weight_algorithm AWQ takes batches with either method, refuses
// smoothquant beside it and, with STATIC_RANGE, observers other than min_max.
TEST(ResolveQuantizeRequestTest, AwqNeedsBatchesAndMinMax) {
  quantd::v1::QuantizeConfig c =
      WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE);
  c.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_AWQ);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(c, true);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->dynamic_range.awq);
  EXPECT_EQ(o->dynamic_range.algorithm,
            passes::WeightAlgorithm::kRoundToNearest);

  c.mutable_smoothquant();
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("weight_algorithm AWQ"));

  c = WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  c.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_AWQ);
  c.mutable_calibration_config()->set_method("percentile");
  c.mutable_calibration_config()->set_percentile(99.9);
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(o.status().message(), HasSubstr("weight_algorithm AWQ"));
  EXPECT_THAT(o.status().message(), HasSubstr("percentile"));
  c.clear_calibration_config();
  o = ResolveQuantizeRequest(c, true);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->static_range.awq);

  // AWQ_GPTQ: AWQ's factors, GPTQ's rounding, GPTQ's conditions.
  c.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_AWQ_GPTQ);
  c.mutable_gptq()->set_act_order(true);
  o = ResolveQuantizeRequest(c, true);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->static_range.awq);
  EXPECT_EQ(o->static_range.algorithm, passes::WeightAlgorithm::kGptq);
  EXPECT_TRUE(o->static_range.gptq.act_order);
  c.mutable_weight_params()->set_per_channel(false);
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("weight_algorithm AWQ_GPTQ"));
  c.clear_weight_params();
  c.mutable_smoothquant();
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(),
              HasSubstr("smoothquant and weight_algorithm AWQ_GPTQ"));
  c.clear_smoothquant();
  c.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_AWQ);

  // Ranges from a Calibrate call hold no layer inputs.
  c.mutable_calibration()->add_ranges()->set_tensor_name("x");
  o = ResolveQuantizeRequest(c, false);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("weight_algorithm AWQ"));
}

TEST(ResolveQuantizeRequestTest, InCallObserversRunOnThePassGrid) {
  quantd::v1::QuantizeConfig c =
      WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  c.mutable_activation_params()->set_bits(6);
  c.mutable_activation_params()->set_symmetric(true);
  c.mutable_calibration_config()->set_method("percentile");
  c.mutable_calibration_config()->set_percentile(99.9);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(c, true);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->observers.method, "percentile");
  EXPECT_EQ(o->observers.bits, 6);
  EXPECT_TRUE(o->observers.symmetric);

  // A bad observer is refused before any model is parsed.
  c.mutable_calibration_config()->set_method("no_such_observer");
  o = ResolveQuantizeRequest(c, true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("no_such_observer"));
  // With ranges given the observers are not run, so not judged here.
  c.mutable_calibration()->add_ranges()->set_tensor_name("x");
  EXPECT_TRUE(ResolveQuantizeRequest(c, false).ok());
}

TEST(ResolveCalibrateRequestTest, ChecksTheObservers) {
  quantd::v1::CalibrateConfig c;
  c.set_method("mse");
  absl::StatusOr<calibration::ObserverConfig> o = ResolveCalibrateRequest(c);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->method, "mse");
  c.set_num_bins(-3);
  o = ResolveCalibrateRequest(c);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResolveCalibrateRequestTest, AutoIsForQuantizeCalls) {
  quantd::v1::CalibrateConfig c;
  c.set_method("auto");
  absl::StatusOr<calibration::ObserverConfig> o = ResolveCalibrateRequest(c);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("only a Quantize call"));
}

// auto_headroom is judged by quantizing the model: every request it could
// not apply to is refused by name, with the code that says why.
TEST(ResolveQuantizeRequestTest, AutoHeadroomIsRefusedWhereItCannotApply) {
  auto refused = [](quantd::v1::QuantizeConfig c, bool batch_stream,
                    absl::StatusCode code, const char* words) {
    c.mutable_calibration_config()->set_auto_headroom(true);
    absl::StatusOr<QuantizeRequestOptions> o =
        ResolveQuantizeRequest(c, batch_stream);
    ASSERT_FALSE(o.ok()) << words;
    EXPECT_EQ(o.status().code(), code) << o.status();
    EXPECT_THAT(o.status().message(), HasSubstr("auto_headroom"));
    EXPECT_THAT(o.status().message(), HasSubstr(words));
  };
  const quantd::v1::QuantizeConfig stat =
      WithMethod(tfq::QuantizationMethod::STATIC_RANGE);
  refused(WithMethod(tfq::QuantizationMethod::DYNAMIC_RANGE), true,
          absl::StatusCode::kInvalidArgument, "STATIC_RANGE");
  refused(stat, false, absl::StatusCode::kInvalidArgument,
          "send calibration batches");
  quantd::v1::QuantizeConfig ranges = stat;
  ranges.mutable_calibration()->add_ranges()->set_tensor_name("x");
  refused(ranges, true, absl::StatusCode::kInvalidArgument,
          "no config.calibration ranges");
  quantd::v1::QuantizeConfig automatic = stat;
  automatic.mutable_calibration_config()->set_method("auto");
  refused(automatic, true, absl::StatusCode::kUnimplemented, "method auto");
  quantd::v1::QuantizeConfig percentile = stat;
  percentile.mutable_calibration_config()->set_method("percentile");
  refused(percentile, true, absl::StatusCode::kUnimplemented, "'percentile'");
  quantd::v1::QuantizeConfig smooth = stat;
  smooth.mutable_smoothquant()->set_alpha(0.5);
  refused(smooth, true, absl::StatusCode::kUnimplemented, "smoothquant");

  quantd::v1::QuantizeConfig ok = stat;
  ok.mutable_calibration_config()->set_auto_headroom(true);
  ok.mutable_calibration_config()->set_headroom(1.2);
  absl::StatusOr<QuantizeRequestOptions> o = ResolveQuantizeRequest(ok, true);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->observers.method, "min_max");
  EXPECT_EQ(o->observers.headroom, 1.2);
}

TEST(ResolveCalibrateRequestTest, AutoHeadroomIsForQuantizeCalls) {
  quantd::v1::CalibrateConfig c;
  c.set_auto_headroom(true);
  absl::StatusOr<calibration::ObserverConfig> o = ResolveCalibrateRequest(c);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("only a Quantize call"));
  c.set_auto_headroom(false);
  c.set_headroom(2);
  o = ResolveCalibrateRequest(c);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->headroom, 2.0);
}

}  // namespace
}  // namespace quantd
