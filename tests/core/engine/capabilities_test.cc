#include "core/engine/capabilities.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {

namespace tfq = tensorflow::quantization;
using ::testing::HasSubstr;

tfq::QuantizationOptions Options(
    tfq::QuantizationMethod::ExperimentalMethod m,
    tfq::OpSet op_set = tfq::OP_SET_UNSPECIFIED,
    tfq::QuantizationPrecision p = tfq::PRECISION_UNSPECIFIED) {
  tfq::QuantizationOptions o;
  o.mutable_quantization_method()->set_experimental_method(m);
  o.set_op_set(op_set);
  o.set_quantization_precision(p);
  return o;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(CheckSupportedTest, NoMethodIsPassThrough) {
  EXPECT_TRUE(CheckSupported(tfq::QuantizationOptions()).ok());
}

TEST(CheckSupportedTest, DynamicRangeDefaultsToTfW8A8) {
  EXPECT_TRUE(
      CheckSupported(Options(tfq::QuantizationMethod::DYNAMIC_RANGE)).ok());
  EXPECT_TRUE(CheckSupported(Options(tfq::QuantizationMethod::DYNAMIC_RANGE,
                                     tfq::TF, tfq::PRECISION_W8A8))
                  .ok());
}

TEST(CheckSupportedTest, StaticRangeDefaultsToTfW8A8) {
  EXPECT_TRUE(
      CheckSupported(Options(tfq::QuantizationMethod::STATIC_RANGE)).ok());
  EXPECT_TRUE(CheckSupported(Options(tfq::QuantizationMethod::STATIC_RANGE,
                                     tfq::TF, tfq::PRECISION_W8A8))
                  .ok());
}

TEST(CheckSupportedTest, FullIsServedForAnyMethod) {
  EXPECT_TRUE(CheckSupported(Options(tfq::QuantizationMethod::STATIC_RANGE,
                                     tfq::XLA, tfq::PRECISION_FULL))
                  .ok());
}

TEST(CheckSupportedTest, UnspecifiedMethodsAreInvalid) {
  tfq::QuantizationOptions o;
  o.mutable_quantization_method()->set_method(
      tfq::QuantizationMethod::METHOD_UNSPECIFIED);
  absl::Status s = CheckSupported(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("METHOD_UNSPECIFIED"));
  s = CheckSupported(
      Options(tfq::QuantizationMethod::EXPERIMENTAL_METHOD_UNSPECIFIED));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("EXPERIMENTAL_METHOD_UNSPECIFIED"));
}

TEST(CheckSupportedTest, OtherCombinationsAreUnimplementedAndNamed) {
  struct Case {
    tfq::QuantizationOptions options;
    std::string named;
  };
  for (const Case& c : {Case{Options(tfq::QuantizationMethod::STATIC_RANGE,
                                     tfq::XLA, tfq::PRECISION_W4A8),
                             "XLA"},
                        Case{Options(tfq::QuantizationMethod::DYNAMIC_RANGE,
                                     tfq::UNIFORM_QUANTIZED),
                             "UNIFORM_QUANTIZED"},
                        Case{Options(tfq::QuantizationMethod::DYNAMIC_RANGE,
                                     tfq::XLA, tfq::PRECISION_W4A8),
                             "PRECISION_W4A8"},
                        Case{Options(tfq::QuantizationMethod::DYNAMIC_RANGE,
                                     tfq::TF, tfq::PRECISION_W4A4),
                             "PRECISION_W4A4"}}) {
    absl::Status s = CheckSupported(c.options);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << c.named;
    EXPECT_THAT(Message(s), HasSubstr(c.named));
    EXPECT_THAT(Message(s), HasSubstr("DYNAMIC_RANGE + TF + PRECISION_W8A8"));
    EXPECT_THAT(Message(s), HasSubstr("DYNAMIC_RANGE + XLA + PRECISION_W8A8"));
    EXPECT_THAT(Message(s), HasSubstr("STATIC_RANGE + TF + PRECISION_W8A8"));
  }
}

TEST(CheckSupportedTest, UnknownEnumNumbersAreInvalid) {
  tfq::QuantizationOptions o = Options(tfq::QuantizationMethod::DYNAMIC_RANGE);
  o.set_op_set(static_cast<tfq::OpSet>(42));
  EXPECT_EQ(CheckSupported(o).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(CheckSupported(o)),
              HasSubstr("op_set has unknown value 42"));
  o = Options(tfq::QuantizationMethod::DYNAMIC_RANGE);
  o.set_quantization_precision(static_cast<tfq::QuantizationPrecision>(9));
  EXPECT_EQ(CheckSupported(o).code(), absl::StatusCode::kInvalidArgument);
  o = Options(static_cast<tfq::QuantizationMethod::ExperimentalMethod>(7));
  EXPECT_EQ(CheckSupported(o).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckSupportedTest, UnitWiseIsAcceptedAndCheckedByThePasses) {
  tfq::QuantizationOptions o = Options(tfq::QuantizationMethod::DYNAMIC_RANGE);
  auto* u = o.add_unit_wise_quantization_precision();
  u->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_OP);
  u->set_unit_name("Conv");
  u->set_quantization_precision(tfq::PRECISION_FULL);
  EXPECT_TRUE(CheckSupported(o).ok());
  // Model-wide FULL with a W8A8 unit needs the method/op_set at W8A8.
  o.set_quantization_precision(tfq::PRECISION_FULL);
  u->set_quantization_precision(tfq::PRECISION_W8A8);
  EXPECT_TRUE(CheckSupported(o).ok());
  o.set_op_set(tfq::XLA);
  EXPECT_TRUE(CheckSupported(o).ok());
  o.set_op_set(tfq::UNIFORM_QUANTIZED);
  absl::Status s = CheckSupported(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), HasSubstr("unit_wise_quantization_precision[0]"));
}

TEST(CapabilityTableTest, CoversEveryCombinationOnce) {
  // 2 methods x 3 op sets x 4 precisions.
  ASSERT_EQ(CapabilityTable().size(), 24u);
  int supported = 0;
  for (const auto& c : CapabilityTable()) supported += c.supported();
  // FULL everywhere, plus TF/W8A8 and XLA/W8A8 for both methods,
  // UNIFORM_QUANTIZED/W8A8 for STATIC_RANGE, TF/W4A8 for both methods and
  // TF/W4A4 for STATIC_RANGE.
  EXPECT_EQ(supported, 2 * 3 + 5 + 3);
}

TEST(FillServerInfoTest, FillsCapabilities) {
  quantd::v1::ServerInfo info;
  FillServerInfo(&info);
  EXPECT_EQ(info.version(), QUANTD_VERSION);
  EXPECT_THAT(info.methods(),
              ::testing::ElementsAre("STATIC_RANGE", "DYNAMIC_RANGE"));
  EXPECT_THAT(info.op_sets(), ::testing::ElementsAre(tfq::TF, tfq::XLA,
                                                     tfq::UNIFORM_QUANTIZED));
  EXPECT_THAT(info.precisions(),
              ::testing::ElementsAre(tfq::PRECISION_FULL, tfq::PRECISION_W4A4,
                                     tfq::PRECISION_W4A8, tfq::PRECISION_W8A8));
  EXPECT_THAT(
      info.quantizable_op_types(),
      ::testing::ElementsAre("Conv", "Gemm", "MatMul", "LSTM", "GRU", "RNN"));
  EXPECT_EQ(info.capabilities_size(), 24);
  EXPECT_EQ(info.max_checked_opset(), 17);
  EXPECT_GE(info.min_input_opset(), 1);
}

TEST(CheckSupportedTest, FourBitPrecisions) {
  // W4A8 with op set TF: both methods; W4A4: STATIC_RANGE only.
  EXPECT_TRUE(CheckSupported(Options(tfq::QuantizationMethod::DYNAMIC_RANGE,
                                     tfq::TF, tfq::PRECISION_W4A8))
                  .ok());
  EXPECT_TRUE(CheckSupported(Options(tfq::QuantizationMethod::STATIC_RANGE,
                                     tfq::TF, tfq::PRECISION_W4A8))
                  .ok());
  EXPECT_TRUE(CheckSupported(Options(tfq::QuantizationMethod::STATIC_RANGE,
                                     tfq::TF, tfq::PRECISION_W4A4))
                  .ok());
  // DYNAMIC_RANGE cannot express 4-bit activations: the error says why.
  absl::Status s = CheckSupported(Options(
      tfq::QuantizationMethod::DYNAMIC_RANGE, tfq::TF, tfq::PRECISION_W4A4));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), HasSubstr("PRECISION_W4A4"));
  EXPECT_THAT(Message(s), HasSubstr("DynamicQuantizeLinear"));
  // The same for a unit under a W8A8 default.
  tfq::QuantizationOptions o = Options(tfq::QuantizationMethod::DYNAMIC_RANGE,
                                       tfq::TF, tfq::PRECISION_W8A8);
  auto* u = o.add_unit_wise_quantization_precision();
  u->set_unit_type(tfq::UnitWiseQuantizationPrecision::UNIT_OP);
  u->set_unit_name("Conv");
  u->set_quantization_precision(tfq::PRECISION_W4A4);
  s = CheckSupported(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), HasSubstr("unit_wise_quantization_precision[0]"));
  EXPECT_THAT(Message(s), HasSubstr("DynamicQuantizeLinear"));
  u->set_quantization_precision(tfq::PRECISION_W4A8);
  EXPECT_TRUE(CheckSupported(o).ok());
  o.set_op_set(tfq::XLA);  // 4-bit weights have no XLA lowering.
  s = CheckSupported(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), HasSubstr("MatMulInteger"));
}

}  // namespace
}  // namespace quantd
