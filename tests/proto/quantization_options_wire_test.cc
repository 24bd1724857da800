// Pins the wire format of the seed's QuantizationOptions: bytes written by
// hand from the field numbers (not by our generated code) must decode to the
// expected message, and the message must encode back to the same bytes.
#include <string>

#include "gtest/gtest.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace {

using tensorflow::quantization::OpSet;
using tensorflow::quantization::QuantizationMethod;
using tensorflow::quantization::QuantizationOptions;
using tensorflow::quantization::QuantizationPrecision;
using tensorflow::quantization::UnitWiseQuantizationPrecision;

// Tag byte for field `number` with wire type `type` (0 varint, 2 length).
constexpr char Tag(int number, int type) {
  return static_cast<char>((number << 3) | type);
}

std::string Bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST(QuantizationOptionsWireTest, HandWrittenBytesDecodeAndReencode) {
  // QuantizationOptions {
  //   quantization_method (1) { experimental_method (2): DYNAMIC_RANGE (2) }
  //   op_set (2): XLA (2)
  //   quantization_precision (3): PRECISION_W4A8 (3)
  //   unit_wise_quantization_precision (4) {
  //     unit_type (1): UNIT_NODE (1)
  //     func_name (2): "f"
  //     unit_name (3): "conv1"
  //     quantization_precision (5): PRECISION_FULL (1)
  //   }
  //   min_num_elements_for_weights (5): -1  (int64: ten-byte varint)
  // }
  std::string method = {Tag(2, 0), 2};
  std::string unit = {Tag(1, 0), 1,   Tag(2, 2), 1,   'f', Tag(3, 2), 5,
                      'c',       'o', 'n',       'v', '1', Tag(5, 0), 1};
  std::string wire;
  wire += Tag(1, 2);
  wire += static_cast<char>(method.size());
  wire += method;
  wire += Bytes({Tag(2, 0), 2});
  wire += Bytes({Tag(3, 0), 3});
  wire += Tag(4, 2);
  wire += static_cast<char>(unit.size());
  wire += unit;
  wire += Bytes(
      {Tag(5, 0), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01});

  QuantizationOptions options;
  ASSERT_TRUE(options.ParseFromString(wire));
  ASSERT_TRUE(options.has_quantization_method());
  EXPECT_EQ(options.quantization_method().method_oneof_case(),
            QuantizationMethod::kExperimentalMethod);
  EXPECT_EQ(options.quantization_method().experimental_method(),
            QuantizationMethod::DYNAMIC_RANGE);
  EXPECT_EQ(options.op_set(), tensorflow::quantization::XLA);
  EXPECT_EQ(options.quantization_precision(),
            tensorflow::quantization::PRECISION_W4A8);
  ASSERT_EQ(options.unit_wise_quantization_precision_size(), 1);
  const UnitWiseQuantizationPrecision& u =
      options.unit_wise_quantization_precision(0);
  EXPECT_EQ(u.unit_type(), UnitWiseQuantizationPrecision::UNIT_NODE);
  EXPECT_EQ(u.func_name(), "f");
  EXPECT_EQ(u.unit_name(), "conv1");
  EXPECT_EQ(u.quantization_precision(),
            tensorflow::quantization::PRECISION_FULL);
  EXPECT_EQ(options.min_num_elements_for_weights(), -1);

  std::string reencoded;
  ASSERT_TRUE(options.SerializeToString(&reencoded));
  EXPECT_EQ(reencoded, wire);
}

TEST(QuantizationOptionsWireTest, StableMethodOneofUsesFieldOne) {
  // quantization_method { method (1): METHOD_UNSPECIFIED (0) }: explicitly
  // set to zero, so the oneof case is still "method".
  std::string wire = {Tag(1, 2), 2, Tag(1, 0), 0};
  QuantizationOptions options;
  ASSERT_TRUE(options.ParseFromString(wire));
  EXPECT_EQ(options.quantization_method().method_oneof_case(),
            QuantizationMethod::kMethod);
  EXPECT_EQ(options.quantization_method().method(),
            QuantizationMethod::METHOD_UNSPECIFIED);
  std::string reencoded;
  ASSERT_TRUE(options.SerializeToString(&reencoded));
  EXPECT_EQ(reencoded, wire);
}

TEST(QuantizationOptionsWireTest, EnumNumbersMatchTheSeed) {
  EXPECT_EQ(tensorflow::quantization::OP_SET_UNSPECIFIED, 0);
  EXPECT_EQ(tensorflow::quantization::TF, 1);
  EXPECT_EQ(tensorflow::quantization::XLA, 2);
  EXPECT_EQ(tensorflow::quantization::UNIFORM_QUANTIZED, 3);
  EXPECT_EQ(tensorflow::quantization::PRECISION_UNSPECIFIED, 0);
  EXPECT_EQ(tensorflow::quantization::PRECISION_FULL, 1);
  EXPECT_EQ(tensorflow::quantization::PRECISION_W4A4, 2);
  EXPECT_EQ(tensorflow::quantization::PRECISION_W4A8, 3);
  EXPECT_EQ(tensorflow::quantization::PRECISION_W8A8, 4);
  EXPECT_EQ(QuantizationMethod::STATIC_RANGE, 1);
  EXPECT_EQ(QuantizationMethod::DYNAMIC_RANGE, 2);
  EXPECT_EQ(UnitWiseQuantizationPrecision::UNIT_NODE, 1);
  EXPECT_EQ(UnitWiseQuantizationPrecision::UNIT_OP, 2);
}

TEST(QuantizationOptionsWireTest, UnsetMethodMeansNoMethod) {
  QuantizationOptions options;
  ASSERT_TRUE(options.ParseFromString(std::string()));
  EXPECT_FALSE(options.has_quantization_method());
}

}  // namespace
