// End to end: a real quantd on free ports, driven by the real quantctl, with
// the output checked by an independent runtime (ONNX Runtime for Node.js) and
// by the ONNX checker.
#include <filesystem>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "tests/support/ort.h"
#include "tests/support/quantd_fixture.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kModel = SourcePath("examples/digits/model.onnx");
const std::string kTestX = SourcePath("examples/digits/test_x.npy");
const std::string kTestY = SourcePath("examples/digits/test_y.npy");

class QuantizeE2eTest : public QuantdServerTest {
 protected:
  // Top-1 accuracy of `model` on the digits test set, in ONNX Runtime.
  double OrtAccuracy(const std::string& model) {
    return testing::OrtAccuracy(model, kTestX, kTestY);
  }
};

TEST_F(QuantizeE2eTest, DynamicRangeW8A8KeepsAccuracyAndShrinksTheModel) {
  TempDir tmp;
  const std::string out = tmp.File("digits_w8a8.onnx");
  CommandResult r = Quantctl({"quantize", "--model=" + kModel,
                              "--output=" + out, "--method=dynamic_range",
                              "--precision=w8a8", "--op_set=tf", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // --json prints one object with the summary and per-tensor reports.
  EXPECT_THAT(r.out, StartsWith("{"));
  EXPECT_THAT(r.out, HasSubstr("\"summary\""));
  EXPECT_THAT(r.out, HasSubstr("\"tensors\""));
  // The first conv (144 elements) and the last Linear (640) are below the
  // default minimum of 1024 elements and stay float.
  EXPECT_THAT(r.out, HasSubstr("SKIP_TOO_FEW_ELEMENTS"));

  const std::string input = ReadFileOrDie(kModel);
  const std::string output = ReadFileOrDie(out);
  ASSERT_FALSE(output.empty());
  EXPECT_LE(output.size(), input.size() * 35 / 100)
      << "output " << output.size() << " bytes, input " << input.size();

  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(output));
  EXPECT_NO_THROW(onnx::checker::check_model(model));
  int dequantize = 0, dynamic_quantize = 0;
  for (const auto& node : model.graph().node()) {
    dequantize += node.op_type() == "DequantizeLinear";
    dynamic_quantize += node.op_type() == "DynamicQuantizeLinear";
  }
  // Two weights (conv2, fc1) and their two activations.
  EXPECT_EQ(dynamic_quantize, 2);
  EXPECT_EQ(dequantize, 4);

  const double float_acc = OrtAccuracy(kModel);
  const double quant_acc = OrtAccuracy(out);
  std::printf(
      "digits top-1 in ONNX Runtime: float %.4f, DYNAMIC_RANGE W8A8 %.4f; size "
      "%zu -> %zu bytes (%.1f%%)\n",
      float_acc, quant_acc, input.size(), output.size(),
      100.0 * output.size() / input.size());
  EXPECT_GT(float_acc, 0.9);
  EXPECT_GE(quant_acc, float_acc - 0.01);
}

// A model saved by ONNX's own writer with its tensors in a data file beside
// it: quantctl reads the data in, and writes the quantized model the same
// way, which ONNX Runtime loads. The result equals quantizing the inline
// model.
TEST_F(QuantizeE2eTest, AModelSavedWithExternalDataComesBackTheSameWay) {
  TempDir tmp;
  const std::string dir = tmp.File("saved");
  std::filesystem::create_directories(dir);
  const std::string external = dir + "/digits.onnx";
  CommandResult save = RunCommand(
      {"/usr/bin/python3", "-c",
       "import onnx, sys\n"
       "m = onnx.load(sys.argv[1])\n"
       "onnx.save_model(m, sys.argv[2], save_as_external_data=True,\n"
       "                all_tensors_to_one_file=True,\n"
       "                location='digits.weights', size_threshold=256)\n",
       kModel, external});
  ASSERT_EQ(save.exit_code, 0) << save.err;
  ASSERT_LT(ReadFileOrDie(external).size(), 4096u);  // The data is outside.

  const std::vector<std::string> common = {"quantize", "--method=dynamic_range",
                                           "--precision=w8a8", "--op_set=tf"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = common;
    args.insert(args.end(), more.begin(), more.end());
    return Quantctl(args);
  };
  const std::string out = tmp.File("out/digits_w8a8.onnx");
  std::filesystem::create_directories(tmp.File("out"));
  CommandResult r = with({"--model=" + external, "--output=" + out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, ContainsRegex("sending [0-9]+ external tensors"));
  EXPECT_THAT(r.out, HasSubstr(out + ".data"));
  ASSERT_TRUE(std::filesystem::exists(out + ".data"));
  onnx::ModelProto saved;
  ASSERT_TRUE(saved.ParseFromString(ReadFileOrDie(out)));
  int external_tensors = 0;
  for (const auto& t : saved.graph().initializer()) {
    external_tensors += t.data_location() == onnx::TensorProto::EXTERNAL;
  }
  EXPECT_GT(external_tensors, 0);

  // The same call on the inline model, written inline.
  const std::string inline_out = tmp.File("inline_w8a8.onnx");
  r = with({"--model=" + kModel, "--output=" + inline_out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(inline_out + ".data"));
  // And inline again, from the external model, by request.
  const std::string one_file = tmp.File("one_file.onnx");
  r = with({"--model=" + external, "--output=" + one_file,
            "--save_as_external_data=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFileOrDie(one_file), ReadFileOrDie(inline_out));

  // ONNX Runtime loads the external form (it reads the data file itself)
  // and computes what the inline one does.
  const double inline_acc = OrtAccuracy(inline_out);
  const double external_acc = OrtAccuracy(out);
  std::printf("digits W8A8 top-1 in ONNX Runtime: inline %.4f, external %.4f\n",
              inline_acc, external_acc);
  EXPECT_GT(inline_acc, 0.9);
  EXPECT_EQ(external_acc, inline_acc);

  // A data file missing: refused by the client, nothing written.
  std::filesystem::remove(dir + "/digits.weights");
  const std::string never = tmp.File("never.onnx");
  r = with({"--model=" + external, "--output=" + never});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r.err, HasSubstr("digits.weights"));
  EXPECT_FALSE(std::filesystem::exists(never));
  r = with({"--model=" + kModel, "--output=" + never,
            "--save_as_external_data=maybe"});
  EXPECT_EQ(r.exit_code, 2);
}

// A model that takes one sample with no batch axis (torchvision's detection
// models take an image [3, H, W]): calibration data stacked along a sample
// axis is refused with a hint, and --unbatched sends each sample alone,
// without that axis.
TEST_F(QuantizeE2eTest, AnUnbatchedModelIsCalibratedOneSampleAtATime) {
  TempDir tmp;
  const std::string model = tmp.File("unbatched.onnx");
  CommandResult make =
      RunCommand({"/usr/bin/python3", "-c",
                  "import onnx, sys\n"
                  "from onnx import helper, numpy_helper, TensorProto\n"
                  "import numpy as np\n"
                  "m = onnx.load(sys.argv[1])\n"
                  "g = m.graph\n"
                  "name = g.input[0].name\n"
                  "g.input.remove(g.input[0])\n"
                  "g.input.insert(0, helper.make_tensor_value_info(\n"
                  "    'image', TensorProto.FLOAT, [1, 8, 8]))\n"
                  "g.initializer.append(numpy_helper.from_array(\n"
                  "    np.array([1, 1, 8, 8], np.int64), 'image_shape'))\n"
                  "g.node.insert(0, helper.make_node('Reshape', ['image', "
                  "'image_shape'],\n"
                  "                                  [name]))\n"
                  "onnx.checker.check_model(m)\n"
                  "onnx.save(m, sys.argv[2])\n",
                  kModel, model});
  ASSERT_EQ(make.exit_code, 0) << make.err;
  const std::vector<std::string> common = {
      "quantize", "--model=" + model, "--method=static_range",
      "--calibration_data=image=" + kTestX, "--json"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = common;
    args.insert(args.end(), more.begin(), more.end());
    return Quantctl(args);
  };
  const std::string batched = tmp.File("batched.onnx");
  CommandResult r = with({"--output=" + batched, "--batch_size=4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r.err, HasSubstr("quantctl --unbatched"));
  EXPECT_FALSE(std::filesystem::exists(batched));

  r = with(
      {"--output=" + tmp.File("bad.onnx"), "--batch_size=4", "--unbatched"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("batch size must be 1, not 4"));

  const std::string out = tmp.File("static.onnx");
  r = with({"--output=" + out, "--unbatched"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Every sample of the file was a batch of its own, and compared.
  const int64_t samples = 360;  // examples/digits/test_x.npy
  EXPECT_THAT(r.out,
              HasSubstr(absl::StrCat("\"batchesReceived\":\"", samples, "\"")));
  onnx::ModelProto quantized;
  ASSERT_TRUE(quantized.ParseFromString(ReadFileOrDie(out)));
  int quantize_linear = 0;
  for (const auto& node : quantized.graph().node()) {
    quantize_linear += node.op_type() == "QuantizeLinear";
  }
  EXPECT_GT(quantize_linear, 0);
  EXPECT_EQ(quantized.graph().input(0).name(), "image");
}

TEST_F(QuantizeE2eTest, NoMethodReturnsTheModelUnchanged) {
  TempDir tmp;
  const std::string out = tmp.File("same.onnx");
  CommandResult r =
      Quantctl({"quantize", "--model=" + kModel, "--output=" + out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("\"modelUnchanged\": *true"));
  EXPECT_EQ(ReadFileOrDie(out), ReadFileOrDie(kModel));
}

TEST_F(QuantizeE2eTest, PrecisionFullReturnsTheModelUnchanged) {
  TempDir tmp;
  const std::string out = tmp.File("full.onnx");
  CommandResult r =
      Quantctl({"quantize", "--model=" + kModel, "--output=" + out,
                "--method=dynamic_range", "--precision=full", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("\"modelUnchanged\": *true"));
  EXPECT_EQ(ReadFileOrDie(out), ReadFileOrDie(kModel));
}

TEST_F(QuantizeE2eTest, GarbageBytesAreInvalidArgument) {
  TempDir tmp;
  WriteFileOrDie(tmp.File("garbage.onnx"), std::string(4096, '\xff'));
  CommandResult r =
      Quantctl({"quantize", "--model=" + tmp.File("garbage.onnx"),
                "--output=" + tmp.File("out.onnx"), "--method=dynamic_range"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, StartsWith("INVALID_ARGUMENT: "));
  EXPECT_FALSE(std::filesystem::exists(tmp.File("out.onnx")))
      << "a failed call must not leave an output file";
  ExpectServing();
}

TEST_F(QuantizeE2eTest, TruncatedModelIsInvalidArgument) {
  TempDir tmp;
  std::string model = ReadFileOrDie(kModel);
  WriteFileOrDie(tmp.File("cut.onnx"), model.substr(0, model.size() / 2));
  CommandResult r =
      Quantctl({"quantize", "--model=" + tmp.File("cut.onnx"),
                "--output=" + tmp.File("out.onnx"), "--method=dynamic_range"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, StartsWith("INVALID_ARGUMENT: "));
  ExpectServing();
}

TEST_F(QuantizeE2eTest, OptionsFileThatDoesNotParseIsInvalidArgument) {
  TempDir tmp;
  WriteFileOrDie(tmp.File("bad.textproto"), "quantization_method { nope: 1 ");
  CommandResult r = Quantctl({"quantize", "--model=" + kModel,
                              "--output=" + tmp.File("out.onnx"),
                              "--options=" + tmp.File("bad.textproto")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, StartsWith("INVALID_ARGUMENT: "));
  ExpectServing();
}

TEST_F(QuantizeE2eTest, MethodUnspecifiedIsInvalidArgument) {
  TempDir tmp;
  WriteFileOrDie(tmp.File("unspecified.textproto"),
                 "quantization_method { method: METHOD_UNSPECIFIED }\n");
  CommandResult r = Quantctl(
      {"quantize", "--model=" + kModel, "--output=" + tmp.File("out.onnx"),
       "--options=" + tmp.File("unspecified.textproto")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, StartsWith("INVALID_ARGUMENT: "));
  EXPECT_THAT(r.err, HasSubstr("METHOD_UNSPECIFIED"));
  ExpectServing();
}

TEST_F(QuantizeE2eTest, NotYetImplementedValuesAreUnimplementedByName) {
  TempDir tmp;
  CommandResult r = Quantctl(
      {"quantize", "--model=" + kModel, "--output=" + tmp.File("out.onnx"),
       "--method=dynamic_range", "--op_set=uniform_quantized"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, StartsWith("UNIMPLEMENTED: "));
  EXPECT_THAT(r.err, HasSubstr("UNIFORM_QUANTIZED"));
  ExpectServing();
}

TEST_F(QuantizeE2eTest, EmptyStreamIsInvalidArgument) {
  auto channel = grpc::CreateChannel(server_->target(),
                                     grpc::InsecureChannelCredentials());
  auto stub = quantd::v1::QuantizationService::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Quantize(&ctx);
  ASSERT_TRUE(stream->WritesDone());
  quantd::v1::QuantizeResponse response;
  while (stream->Read(&response)) {
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(status.error_message().empty());
  ExpectServing();
}

TEST_F(QuantizeE2eTest, InfoListsCapabilities) {
  CommandResult r = Quantctl({"info", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("DYNAMIC_RANGE"));
  EXPECT_THAT(r.out, HasSubstr("MatMul"));
}

TEST_F(QuantizeE2eTest, MetricsCountCallsByCode) {
  TempDir tmp;
  WriteFileOrDie(tmp.File("garbage.onnx"), "not a model");
  Quantctl({"quantize", "--model=" + tmp.File("garbage.onnx"),
            "--output=" + tmp.File("out.onnx"), "--method=dynamic_range"});
  const std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("quantd_requests_total"));
  EXPECT_THAT(metrics, HasSubstr("code=\"INVALID_ARGUMENT\""));
  EXPECT_THAT(metrics, HasSubstr("quantd_request_duration_seconds_bucket"));
}

}  // namespace
}  // namespace quantd::testing
