#include "core/passes/static_range_options.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;
namespace tfq = tensorflow::quantization;

TEST(StaticRangeOptionsTest, Defaults) {
  absl::StatusOr<StaticRangeOptions> o =
      ResolveStaticRangeOptions(quantd::v1::QuantizeConfig());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->activations.spec.bits, 8);
  EXPECT_FALSE(o->activations.spec.is_signed);
  EXPECT_FALSE(o->activations.spec.symmetric);
  EXPECT_FALSE(o->activations.spec.narrow_range);
  EXPECT_EQ(o->weights.spec.bits, 8);
  EXPECT_TRUE(o->weights.spec.symmetric);
  EXPECT_TRUE(o->weights.spec.narrow_range);
  EXPECT_TRUE(o->weights.per_channel);
  EXPECT_EQ(o->min_num_elements, kDefaultMinElementsForWeights);
  EXPECT_EQ(o->precision, tfq::PRECISION_W8A8);
  EXPECT_TRUE(o->tracking.moving_avg);
}

TEST(StaticRangeOptionsTest, ActivationOverrides) {
  quantd::v1::QuantizeConfig c;
  c.mutable_activation_params()->set_bits(4);
  c.mutable_activation_params()->set_symmetric(true);
  c.mutable_activation_params()->set_narrow_range(true);
  c.mutable_activation_params()->set_producer_scope("a/");
  c.mutable_activation_params()->set_consumer_scope("b/");
  c.mutable_weight_params()->set_per_channel(false);
  absl::StatusOr<StaticRangeOptions> o = ResolveStaticRangeOptions(c);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->activations.spec.bits, 4);
  EXPECT_TRUE(o->activations.spec.is_signed);
  EXPECT_TRUE(o->activations.spec.symmetric);
  EXPECT_TRUE(o->activations.spec.narrow_range);
  EXPECT_EQ(o->activations.producer_scope, "a/");
  EXPECT_EQ(o->activations.consumer_scope, "b/");
  EXPECT_FALSE(o->weights.per_channel);
}

TEST(StaticRangeOptionsTest, BadBitsAndPerChannelActivations) {
  quantd::v1::QuantizeConfig c;
  c.mutable_activation_params()->set_bits(9);
  absl::Status s = ResolveStaticRangeOptions(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("activation_params.bits"));
  c.mutable_activation_params()->set_bits(8);
  c.mutable_activation_params()->set_per_channel(true);
  EXPECT_EQ(ResolveStaticRangeOptions(c).status().code(),
            absl::StatusCode::kUnimplemented);
  quantd::v1::QuantizeConfig w;
  w.mutable_weight_params()->set_bits(1);
  EXPECT_THAT(ResolveStaticRangeOptions(w).status().message(),
              HasSubstr("weight_params.bits"));
}

TEST(StaticRangeOptionsTest, BlockSizeIsForWeightsOnly) {
  quantd::v1::QuantizeConfig c;
  c.mutable_weight_params()->set_block_size(64);
  absl::StatusOr<StaticRangeOptions> o = ResolveStaticRangeOptions(c);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->weights.block_size, 64);
  c.mutable_activation_params()->set_block_size(64);
  absl::Status s = ResolveStaticRangeOptions(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("activation_params.block_size"));
}

TEST(StaticRangeOptionsTest, RangeIsForWeightsOnly) {
  quantd::v1::QuantizeConfig c;
  c.mutable_weight_params()->set_range(quantd::v1::WEIGHT_RANGE_MSE);
  absl::StatusOr<StaticRangeOptions> o = ResolveStaticRangeOptions(c);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->weights.range.enabled());
  c.mutable_activation_params()->set_range(quantd::v1::WEIGHT_RANGE_MSE);
  absl::Status s = ResolveStaticRangeOptions(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("activation_params.range"));
}

TEST(StaticRangeOptionsTest, TrackingFieldsAreForActivationsOnly) {
  quantd::v1::QuantizeConfig c;
  auto* a = c.mutable_activation_params();
  a->set_moving_avg(false);
  a->set_ema_decay(0.9f);
  a->set_init_min(-1.0f);
  a->set_init_max(1.0f);
  a->set_quant_delay(100);
  absl::StatusOr<StaticRangeOptions> o = ResolveStaticRangeOptions(c);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->tracking.moving_avg);
  EXPECT_FLOAT_EQ(o->tracking.ema_decay, 0.9f);
  EXPECT_EQ(o->tracking.quant_delay, 100);
  a->set_ema_decay(1.5f);
  EXPECT_EQ(ResolveStaticRangeOptions(c).status().code(),
            absl::StatusCode::kInvalidArgument);
  a->set_ema_decay(0.9f);
  a->set_init_min(2.0f);
  EXPECT_EQ(ResolveStaticRangeOptions(c).status().code(),
            absl::StatusCode::kInvalidArgument);

  quantd::v1::QuantizeConfig w;
  w.mutable_weight_params()->set_quant_delay(5);
  absl::Status s = ResolveStaticRangeOptions(w).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("weight_params.quant_delay"));
  EXPECT_THAT(s.message(), HasSubstr("STATIC_RANGE"));
}

TEST(StaticRangeOptionsTest, PrecisionImpliesBitsUnlessSet) {
  quantd::v1::QuantizeConfig c;
  c.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A4);
  absl::StatusOr<StaticRangeOptions> o = ResolveStaticRangeOptions(c);
  ASSERT_TRUE(o.ok());
  // Bits follow each unit's precision.
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W4A4).bits, 4);
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W4A8).bits, 4);
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W8A8).bits, 8);
  EXPECT_EQ(o->activations.SpecFor(tfq::PRECISION_W4A4).bits, 4);
  EXPECT_EQ(o->activations.SpecFor(tfq::PRECISION_W4A8).bits, 8);
  EXPECT_EQ(o->activations.SpecFor(tfq::PRECISION_W8A8).bits, 8);
  c.mutable_activation_params()->set_bits(3);
  c.mutable_weight_params()->set_bits(2);
  o = ResolveStaticRangeOptions(c);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->activations.SpecFor(tfq::PRECISION_W4A4).bits, 3);
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W4A4).bits, 2);
}

TEST(StaticRangeOptionsTest, FourBitStorageRefusesWiderBits) {
  quantd::v1::QuantizeConfig c;
  c.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A4);
  c.mutable_activation_params()->set_bits(8);
  absl::Status s = ResolveStaticRangeOptions(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("activation_params.bits is 8"));
  EXPECT_THAT(s.message(), HasSubstr("PRECISION_W4A4"));

  // A W4A4 unit under a W8A8 default needs 4-bit activations too.
  quantd::v1::QuantizeConfig u;
  auto* unit = u.mutable_options()->add_unit_wise_quantization_precision();
  unit->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_OP);
  unit->set_unit_name("Conv");
  unit->set_quantization_precision(tfq::PRECISION_W4A4);
  u.mutable_activation_params()->set_bits(6);
  s = ResolveStaticRangeOptions(u).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unit_wise_quantization_precision[0]"));
  u.mutable_activation_params()->clear_bits();
  u.mutable_weight_params()->set_bits(8);
  s = ResolveStaticRangeOptions(u).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("weight_params.bits is 8"));
  // W4A4 is fine for STATIC_RANGE (it is DYNAMIC_RANGE that refuses it).
  u.mutable_weight_params()->clear_bits();
  EXPECT_TRUE(ResolveStaticRangeOptions(u).ok());
}

TEST(StaticRangeOptionsTest, RangesFromCalibration) {
  quantd::v1::CalibrationResult cal;
  auto* r = cal.add_ranges();
  r->set_tensor_name("x");
  r->set_min(-1.0f);
  r->set_max(2.0f);
  r = cal.add_ranges();
  r->set_tensor_name("y");
  r->set_axis(1);
  r->add_channel_min(-3.0f);
  r->add_channel_max(1.0f);
  r->add_channel_min(0.0f);
  r->add_channel_max(5.0f);
  absl::StatusOr<ActivationRanges> ranges = RangesFromCalibration(cal);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_FLOAT_EQ(ranges->at("x").min, -1.0f);
  EXPECT_EQ(ranges->at("x").channels, 0);
  EXPECT_FLOAT_EQ(ranges->at("y").min, -3.0f);
  EXPECT_FLOAT_EQ(ranges->at("y").max, 5.0f);
  EXPECT_EQ(ranges->at("y").channels, 2);
  EXPECT_EQ(ranges->at("y").axis, 1);

  quantd::v1::CalibrationResult dup = cal;
  dup.add_ranges()->set_tensor_name("x");
  EXPECT_THAT(RangesFromCalibration(dup).status().message(),
              HasSubstr("more than one range"));
  quantd::v1::CalibrationResult bad;
  r = bad.add_ranges();
  r->set_tensor_name("z");
  r->set_min(2.0f);
  r->set_max(1.0f);
  EXPECT_EQ(RangesFromCalibration(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  r->set_min(0.0f);
  r->add_channel_min(0.0f);
  EXPECT_THAT(RangesFromCalibration(bad).status().message(),
              HasSubstr("channel_max"));

  // An unbounded range (a mask) carries no bounds to check, only its name.
  quantd::v1::CalibrationResult mask;
  r = mask.add_ranges();
  r->set_tensor_name("scores");
  r->set_unbounded(true);
  r->set_min(std::numeric_limits<float>::quiet_NaN());
  ranges = RangesFromCalibration(mask);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_TRUE(ranges->at("scores").unbounded);
  EXPECT_FALSE(RangesFromCalibration(cal)->at("x").unbounded);
  mask.add_ranges()->set_tensor_name("scores");
  EXPECT_THAT(RangesFromCalibration(mask).status().message(),
              HasSubstr("more than one range"));
}

}  // namespace
}  // namespace quantd::passes
