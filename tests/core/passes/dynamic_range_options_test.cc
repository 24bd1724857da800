#include "core/passes/dynamic_range_options.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<WeightPassOptions> ResolveWith(
    const std::function<void(quantd::v1::QuantizeConfig*)>& edit) {
  quantd::v1::QuantizeConfig config;
  edit(&config);
  return ResolveDynamicRangeOptions(config);
}

std::string Message(const absl::StatusOr<WeightPassOptions>& o) {
  return std::string(o.status().message());
}

TEST(DynamicRangeOptionsTest, Defaults) {
  auto o = ResolveWith([](auto*) {});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->min_num_elements, 1024);
  EXPECT_EQ(o->weights.spec.bits, 8);
  EXPECT_TRUE(o->weights.spec.is_signed);
  EXPECT_TRUE(o->weights.spec.symmetric);
  EXPECT_TRUE(o->weights.spec.narrow_range);
  EXPECT_TRUE(o->weights.per_channel);
  EXPECT_EQ(o->precision, tensorflow::quantization::PRECISION_W8A8);
}

TEST(DynamicRangeOptionsTest, MinNumElements) {
  auto set = [](int64_t v) {
    return ResolveWith([v](auto* c) {
      c->mutable_options()->set_min_num_elements_for_weights(v);
    });
  };
  EXPECT_EQ(set(0)->min_num_elements, 1024);
  EXPECT_EQ(set(-1)->min_num_elements, 0);
  EXPECT_EQ(set(10)->min_num_elements, 10);
  auto bad = set(-5);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad), HasSubstr("min_num_elements_for_weights is -5"));
}

TEST(DynamicRangeOptionsTest, WeightOverrides) {
  auto o = ResolveWith([](auto* c) {
    auto* w = c->mutable_weight_params();
    w->set_bits(4);
    w->set_symmetric(false);
    w->set_narrow_range(false);
    w->set_per_channel(false);
    w->set_producer_scope("enc/");
    w->set_consumer_scope("enc/block");
  });
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->weights.spec.bits, 4);
  EXPECT_FALSE(o->weights.spec.symmetric);
  EXPECT_FALSE(o->weights.spec.narrow_range);
  EXPECT_FALSE(o->weights.per_channel);
  EXPECT_EQ(o->weights.producer_scope, "enc/");
  EXPECT_EQ(o->weights.consumer_scope, "enc/block");
}

TEST(DynamicRangeOptionsTest, BitsOutOfRange) {
  for (int bits : {0, 1, 9, 16}) {
    auto o = ResolveWith(
        [bits](auto* c) { c->mutable_weight_params()->set_bits(bits); });
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bits;
    EXPECT_THAT(Message(o), HasSubstr("weight_params.bits"));
  }
}

TEST(DynamicRangeOptionsTest, RangeTrackingOnWeightsIsRefusedByName) {
  auto o = ResolveWith([](auto* c) {
    c->mutable_weight_params()->set_ema_decay(0.99f);
    c->mutable_weight_params()->set_quant_delay(10);
  });
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o), HasSubstr("weight_params.ema_decay"));
  EXPECT_THAT(Message(o), HasSubstr("weight_params.quant_delay"));
  EXPECT_THAT(Message(o), HasSubstr("offline"));
}

TEST(DynamicRangeOptionsTest, ActivationParamsAreRefusedByName) {
  auto o = ResolveWith(
      [](auto* c) { c->mutable_activation_params()->set_narrow_range(true); });
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o), HasSubstr("activation_params.narrow_range"));
  EXPECT_THAT(Message(o), HasSubstr("run time"));
}

TEST(DynamicRangeOptionsTest, CalibrationIsRefused) {
  auto o = ResolveWith([](auto* c) {
    c->mutable_calibration()->add_ranges()->set_tensor_name("x");
  });
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o), HasSubstr("calibration"));
  // An empty calibration message is as good as none.
  EXPECT_TRUE(ResolveWith([](auto* c) { c->mutable_calibration(); }).ok());
}

namespace tfq = tensorflow::quantization;

TEST(DynamicRangeOptionsTest, FourBitWeightsFollowTheUnitPrecision) {
  auto o = ResolveWith([](auto* c) {
    c->mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  });
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->precision, tfq::PRECISION_W4A8);
  const numerics::QuantSpec w4 = o->weights.SpecFor(tfq::PRECISION_W4A8);
  EXPECT_EQ(w4.bits, 4);
  EXPECT_TRUE(w4.is_signed);
  EXPECT_TRUE(w4.narrow_range);
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W8A8).bits, 8);
  // weight_params.bits, when set, applies to every unit...
  o = ResolveWith([](auto* c) {
    c->mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
    c->mutable_weight_params()->set_bits(3);
  });
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W4A8).bits, 3);
  // ...but INT4 storage holds no more than 4 bits.
  o = ResolveWith([](auto* c) {
    auto* u = c->mutable_options()->add_unit_wise_quantization_precision();
    u->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_OP);
    u->set_unit_name("MatMul");
    u->set_quantization_precision(tfq::PRECISION_W4A8);
    c->mutable_weight_params()->set_bits(6);
  });
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o), HasSubstr("weight_params.bits is 6"));
  EXPECT_THAT(Message(o), HasSubstr("unit_wise_quantization_precision[0]"));
}

TEST(DynamicRangeOptionsTest, FourBitActivationsAreRefusedWithTheReason) {
  auto o = ResolveWith([](auto* c) {
    c->mutable_options()->set_quantization_precision(tfq::PRECISION_W4A4);
  });
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(o), HasSubstr("PRECISION_W4A4"));
  EXPECT_THAT(Message(o), HasSubstr("DynamicQuantizeLinear"));
  EXPECT_THAT(Message(o), HasSubstr("uint8 only"));
  o = ResolveWith([](auto* c) {
    auto* u = c->mutable_options()->add_unit_wise_quantization_precision();
    u->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_NODE);
    u->set_unit_name("m1");
    u->set_quantization_precision(tfq::PRECISION_W4A4);
  });
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(o), HasSubstr("unit_wise_quantization_precision[0]"));
  EXPECT_THAT(Message(o), HasSubstr("DynamicQuantizeLinear"));
}

TEST(DynamicRangeOptionsTest, BlockSize) {
  auto with = [](int32_t b) {
    return ResolveWith(
        [b](auto* c) { c->mutable_weight_params()->set_block_size(b); });
  };
  EXPECT_EQ(with(0)->weights.block_size, 0);
  EXPECT_EQ(with(16)->weights.block_size, 16);
  EXPECT_EQ(with(128)->weights.block_size, 128);
  EXPECT_EQ(with(4096)->weights.block_size, 4096);
  for (int32_t bad : {-32, 8, 24, 100, 8192}) {
    auto o = with(bad);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(Message(o), HasSubstr("weight_params.block_size is"));
    EXPECT_THAT(Message(o), HasSubstr("power of two"));
  }
  auto per_tensor = ResolveWith([](auto* c) {
    c->mutable_weight_params()->set_block_size(32);
    c->mutable_weight_params()->set_per_channel(false);
  });
  EXPECT_EQ(per_tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(per_tensor), HasSubstr("per_channel is false"));
  for (auto op_set : {tensorflow::quantization::XLA,
                      tensorflow::quantization::UNIFORM_QUANTIZED}) {
    auto o = ResolveWith([op_set](auto* c) {
      c->mutable_weight_params()->set_block_size(32);
      c->mutable_options()->set_op_set(op_set);
    });
    EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(Message(o), HasSubstr("block_size is not implemented for "
                                      "op_set"));
  }
  auto act = ResolveWith(
      [](auto* c) { c->mutable_activation_params()->set_block_size(32); });
  EXPECT_EQ(act.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(act), HasSubstr("activation_params.block_size"));
}

TEST(DynamicRangeOptionsTest, RangeIsForWeightsOnly) {
  auto o = ResolveWith([](auto* c) {
    c->mutable_weight_params()->set_range(quantd::v1::WEIGHT_RANGE_MSE);
  });
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->weights.range.enabled());
  auto act = ResolveWith([](auto* c) {
    c->mutable_activation_params()->set_range(quantd::v1::WEIGHT_RANGE_MSE);
  });
  EXPECT_EQ(act.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(act), HasSubstr("activation_params.range"));
}

}  // namespace
}  // namespace quantd::passes
