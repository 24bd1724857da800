#include "core/passes/weight_pass_options.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::passes {
namespace {

using ::testing::HasSubstr;
namespace tfq = tensorflow::quantization;

std::string Message(const absl::StatusOr<WeightPassOptions>& options) {
  return std::string(options.status().message());
}

TEST(ResolveWeightPassOptionsTest, EmptyConfigGivesTheDocumentedDefaults) {
  const absl::StatusOr<WeightPassOptions> o =
      ResolveWeightPassOptions(quantd::v1::QuantizeConfig());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->precision, tfq::PRECISION_W8A8);
  EXPECT_EQ(o->op_set, tfq::TF);
  EXPECT_EQ(o->min_num_elements, kDefaultMinElementsForWeights);
  EXPECT_EQ(o->weights.spec.bits, 8);
  EXPECT_TRUE(o->weights.spec.symmetric);
  EXPECT_TRUE(o->weights.spec.narrow_range);
  EXPECT_TRUE(o->weights.per_channel);
  EXPECT_EQ(o->weights.block_size, 0);
  EXPECT_FALSE(o->weights.range.enabled());
  EXPECT_FALSE(o->gptq.range.enabled());
  EXPECT_FALSE(o->weights.bits_from_params);
  EXPECT_TRUE(o->units.empty());
}

TEST(ResolveWeightPassOptionsTest, MinElementsZeroIsDefaultMinusOneIsNone) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()->set_min_num_elements_for_weights(-1);
  EXPECT_EQ(ResolveWeightPassOptions(config)->min_num_elements, 0);
  config.mutable_options()->set_min_num_elements_for_weights(7);
  EXPECT_EQ(ResolveWeightPassOptions(config)->min_num_elements, 7);
  config.mutable_options()->set_min_num_elements_for_weights(-2);
  const auto refused = ResolveWeightPassOptions(config);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(refused), HasSubstr("min_num_elements_for_weights"));
}

TEST(ResolveWeightPassOptionsTest, WeightParamsOverrideTheGrid) {
  quantd::v1::QuantizeConfig config;
  quantd::v1::QuantOpParams* w = config.mutable_weight_params();
  w->set_bits(6);
  w->set_symmetric(false);
  w->set_narrow_range(false);
  w->set_per_channel(false);
  w->set_producer_scope("enc/");
  w->set_consumer_scope("enc/block");
  const absl::StatusOr<WeightPassOptions> o = ResolveWeightPassOptions(config);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->weights.spec.bits, 6);
  EXPECT_TRUE(o->weights.bits_from_params);
  EXPECT_FALSE(o->weights.spec.symmetric);
  EXPECT_FALSE(o->weights.spec.narrow_range);
  EXPECT_FALSE(o->weights.per_channel);
  EXPECT_EQ(o->weights.producer_scope, "enc/");
  EXPECT_EQ(o->weights.consumer_scope, "enc/block");
}

TEST(ResolveWeightPassOptionsTest, BitsOutsideTwoToEightAreRefused) {
  for (int bits : {0, 1, 9, 16}) {
    quantd::v1::QuantizeConfig config;
    config.mutable_weight_params()->set_bits(bits);
    const auto o = ResolveWeightPassOptions(config);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bits;
    EXPECT_THAT(Message(o), HasSubstr("2..8"));
  }
}

TEST(ResolveWeightPassOptionsTest, FourBitUnitsTakeFourBitsUnlessParamsSay) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()->set_quantization_precision(tfq::PRECISION_W4A8);
  absl::StatusOr<WeightPassOptions> o = ResolveWeightPassOptions(config);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W4A8).bits, 4);
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W8A8).bits, 8);
  config.mutable_weight_params()->set_bits(3);
  o = ResolveWeightPassOptions(config);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W4A8).bits, 3);
  EXPECT_EQ(o->weights.SpecFor(tfq::PRECISION_W8A8).bits, 3);
}

TEST(ResolveWeightPassOptionsTest, EightBitsDoNotFitAFourBitUnit) {
  quantd::v1::QuantizeConfig config;
  config.mutable_weight_params()->set_bits(8);
  auto* unit = config.mutable_options()->add_unit_wise_quantization_precision();
  unit->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_NODE);
  unit->set_unit_name("fc");
  unit->set_quantization_precision(tfq::PRECISION_W4A4);
  const auto o = ResolveWeightPassOptions(config);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o), HasSubstr("is 4-bit"));
  EXPECT_THAT(Message(o), HasSubstr("INT4"));
}

TEST(ResolveWeightPassOptionsTest, BlockSizesArePowersOfTwoInRange) {
  for (int block : {kMinWeightBlockSize, 128, kMaxWeightBlockSize}) {
    quantd::v1::QuantizeConfig config;
    config.mutable_weight_params()->set_block_size(block);
    const auto o = ResolveWeightPassOptions(config);
    ASSERT_TRUE(o.ok()) << block << ": " << o.status();
    EXPECT_EQ(o->weights.block_size, block);
  }
  for (int block : {8, 48, kMaxWeightBlockSize * 2}) {
    quantd::v1::QuantizeConfig config;
    config.mutable_weight_params()->set_block_size(block);
    const auto o = ResolveWeightPassOptions(config);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << block;
    EXPECT_THAT(Message(o), HasSubstr("power of two"));
  }
}

TEST(ResolveWeightPassOptionsTest, BlocksNeedPerChannelAndOpSetTf) {
  quantd::v1::QuantizeConfig config;
  config.mutable_weight_params()->set_block_size(32);
  config.mutable_weight_params()->set_per_channel(false);
  auto o = ResolveWeightPassOptions(config);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o), HasSubstr("per_channel is false"));

  for (tfq::OpSet op_set : {tfq::XLA, tfq::UNIFORM_QUANTIZED}) {
    config.mutable_weight_params()->clear_per_channel();
    config.mutable_options()->set_op_set(op_set);
    o = ResolveWeightPassOptions(config);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(Message(o), HasSubstr(tfq::OpSet_Name(op_set)));
    // The op set table's lowering names the ops that take no blocks.
    EXPECT_THAT(Message(o), HasSubstr(op_set == tfq::XLA ? "MatMulInteger"
                                                         : "QLinearConv"));
  }
}

TEST(ResolveWeightPassOptionsTest, RangeMseSearchesWeightsAndGptqRows) {
  quantd::v1::QuantizeConfig config;
  config.mutable_weight_params()->set_range(quantd::v1::WEIGHT_RANGE_MIN_MAX);
  auto o = ResolveWeightPassOptions(config);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->weights.range.enabled());

  config.mutable_weight_params()->set_range(quantd::v1::WEIGHT_RANGE_MSE);
  config.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_GPTQ);
  o = ResolveWeightPassOptions(config);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->weights.range.steps, numerics::kMseRangeSearch.steps);
  EXPECT_EQ(o->weights.range.min_ratio, numerics::kMseRangeSearch.min_ratio);
  EXPECT_EQ(o->gptq.range.steps, numerics::kMseRangeSearch.steps);

  config.mutable_weight_params()->set_range(
      static_cast<quantd::v1::WeightRange>(7));
  o = ResolveWeightPassOptions(config);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o), HasSubstr("weight_params.range 7"));
}

}  // namespace
}  // namespace quantd::passes
