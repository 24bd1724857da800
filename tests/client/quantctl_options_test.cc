#include "client/quantctl_options.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::client {
namespace {

using tensorflow::quantization::QuantizationMethod;
using tensorflow::quantization::QuantizationOptions;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A text file under the test's temp dir, removed at the end of the test.
class OptionsFile {
 public:
  explicit OptionsFile(const std::string& text)
      : path_(::testing::TempDir() + "/options_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() +
              ".txtpb") {
    std::ofstream(path_) << text;
  }
  ~OptionsFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(BuildQuantizationOptionsTest, NothingGivenLeavesTheMethodUnset) {
  absl::StatusOr<QuantizationOptions> options =
      BuildQuantizationOptions(QuantctlOptionFlags());
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->has_quantization_method());
  EXPECT_EQ(options->ByteSizeLong(), 0u);
}

TEST(BuildQuantizationOptionsTest, ShortFlagsSetTheirFields) {
  QuantctlOptionFlags flags;
  flags.method = "dynamic_range";
  flags.precision = "w4a8";
  flags.op_set = "uniform_quantized";
  absl::StatusOr<QuantizationOptions> options = BuildQuantizationOptions(flags);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->quantization_method().experimental_method(),
            QuantizationMethod::DYNAMIC_RANGE);
  EXPECT_EQ(options->quantization_precision(),
            tensorflow::quantization::PRECISION_W4A8);
  EXPECT_EQ(options->op_set(), tensorflow::quantization::UNIFORM_QUANTIZED);
}

TEST(BuildQuantizationOptionsTest, FlagValuesAreCaseInsensitive) {
  QuantctlOptionFlags flags;
  flags.method = "STATIC_RANGE";
  flags.precision = "Full";
  flags.op_set = "XLA";
  absl::StatusOr<QuantizationOptions> options = BuildQuantizationOptions(flags);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->quantization_method().experimental_method(),
            QuantizationMethod::STATIC_RANGE);
  EXPECT_EQ(options->quantization_precision(),
            tensorflow::quantization::PRECISION_FULL);
  EXPECT_EQ(options->op_set(), tensorflow::quantization::XLA);
}

TEST(BuildQuantizationOptionsTest, ReadsATextProtoFile) {
  OptionsFile file(R"pb(
    quantization_method { experimental_method: DYNAMIC_RANGE }
    op_set: TF
    quantization_precision: PRECISION_W8A8
    unit_wise_quantization_precision {
      unit_type: UNIT_NODE
      unit_name: "/5/Gemm"
      quantization_precision: PRECISION_FULL
    }
    min_num_elements_for_weights: -1
  )pb");
  QuantctlOptionFlags flags;
  flags.options_file = file.path();
  absl::StatusOr<QuantizationOptions> options = BuildQuantizationOptions(flags);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->quantization_method().experimental_method(),
            QuantizationMethod::DYNAMIC_RANGE);
  ASSERT_EQ(options->unit_wise_quantization_precision_size(), 1);
  EXPECT_EQ(options->unit_wise_quantization_precision(0).unit_name(),
            "/5/Gemm");
  EXPECT_EQ(options->min_num_elements_for_weights(), -1);
}

TEST(BuildQuantizationOptionsTest, FlagsOverrideTheFile) {
  OptionsFile file(
      "quantization_method { experimental_method: STATIC_RANGE }\n"
      "op_set: XLA\n"
      "quantization_precision: PRECISION_W4A4\n"
      "min_num_elements_for_weights: 10\n");
  QuantctlOptionFlags flags;
  flags.options_file = file.path();
  flags.method = "dynamic_range";
  flags.precision = "w8a8";
  absl::StatusOr<QuantizationOptions> options = BuildQuantizationOptions(flags);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->quantization_method().experimental_method(),
            QuantizationMethod::DYNAMIC_RANGE);
  EXPECT_EQ(options->quantization_precision(),
            tensorflow::quantization::PRECISION_W8A8);
  // Not overridden: kept from the file.
  EXPECT_EQ(options->op_set(), tensorflow::quantization::XLA);
  EXPECT_EQ(options->min_num_elements_for_weights(), 10);
}

TEST(BuildQuantizationOptionsTest, ParseErrorNamesFileLineAndColumn) {
  OptionsFile file("op_set: TF\nquantization_precision: PRECISION_W9A9\n");
  QuantctlOptionFlags flags;
  flags.options_file = file.path();
  absl::StatusOr<QuantizationOptions> options = BuildQuantizationOptions(flags);
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(options.status().message()),
              AllOf(StartsWith(file.path() + ":"),
                    ContainsRegex("^[^:]+:[0-9]+:[0-9]+: "),
                    HasSubstr("PRECISION_W9A9")));
}

TEST(BuildQuantizationOptionsTest, UnknownFieldIsAnError) {
  absl::StatusOr<QuantizationOptions> options =
      ParseQuantizationOptionsText("  bits: 8\n", "inline");
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(options.status().message()),
              AllOf(StartsWith("inline:1:"), HasSubstr("bits")));
}

TEST(BuildQuantizationOptionsTest, MissingFileIsNotFound) {
  QuantctlOptionFlags flags;
  flags.options_file = ::testing::TempDir() + "/no/such/options.txtpb";
  absl::StatusOr<QuantizationOptions> options = BuildQuantizationOptions(flags);
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(options.status().message()),
              HasSubstr(flags.options_file));
}

TEST(BuildQuantizationOptionsTest, UnknownValuesListTheAcceptedOnes) {
  struct Case {
    QuantctlOptionFlags flags;
    std::string expected;
  };
  QuantctlOptionFlags method, precision, op_set;
  method.method = "weight_only";
  precision.precision = "w16a16";
  op_set.op_set = "tflite";
  for (const Case& c :
       std::vector<Case>{{method,
                          "--method=weight_only is not one of: dynamic_range, "
                          "static_range"},
                         {precision,
                          "--precision=w16a16 is not one of: w8a8, w4a8, w4a4, "
                          "full"},
                         {op_set,
                          "--op_set=tflite is not one of: tf, xla, "
                          "uniform_quantized"}}) {
    absl::StatusOr<QuantizationOptions> options =
        BuildQuantizationOptions(c.flags);
    ASSERT_FALSE(options.ok());
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(options.status().message(), c.expected);
  }
}

TEST(ParsePrecisionListTest, CommaSeparatedSpellings) {
  namespace tfq = tensorflow::quantization;
  absl::StatusOr<std::vector<tfq::QuantizationPrecision>> list =
      ParsePrecisionList("allowed_precisions", "w4a8, W8A8,full");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (std::vector<tfq::QuantizationPrecision>{
                       tfq::PRECISION_W4A8, tfq::PRECISION_W8A8,
                       tfq::PRECISION_FULL}));
  list = ParsePrecisionList("allowed_precisions", "w4a8,int4");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(list.status().message()),
              ::testing::HasSubstr("--allowed_precisions=int4 is not one of: "
                                   "w8a8, w4a8, w4a4, full"));
  EXPECT_FALSE(ParsePrecisionList("allowed_precisions", "").ok());
}

}  // namespace
}  // namespace quantd::client
