#include "core/graph/model_io.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "core/base/cancellation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::graph {
namespace {

using ::testing::HasSubstr;

TEST(ParseModelTest, EmptyBytesAreInvalid) {
  absl::StatusOr<onnx::ModelProto> m = ParseModel("");
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("empty"));
}

TEST(ParseModelTest, GarbageIsInvalid) {
  absl::StatusOr<onnx::ModelProto> m = ParseModel("this is not an onnx file");
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("not a valid ONNX ModelProto"));
}

TEST(ParseModelTest, TruncatedIsInvalid) {
  std::string bytes = testing::MatMulModel().Bytes();
  bytes.resize(bytes.size() - 100);
  EXPECT_EQ(ParseModel(bytes).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseModelTest, MessageWithoutGraphIsInvalid) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  absl::StatusOr<onnx::ModelProto> parsed = ParseModel(m.SerializeAsString());
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()),
              HasSubstr("without a graph"));
}

TEST(ParseModelTest, RoundTrips) {
  testing::ModelBuilder b = testing::MatMulModel();
  absl::StatusOr<onnx::ModelProto> m = ParseModel(b.Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph().node(0).op_type(), "MatMul");
  EXPECT_EQ(m->graph().initializer(0).raw_data().size(), 64u * 32u * 4u);
}

// Protobuf's default total-bytes limit is 64 MiB; a 100+ MB model must parse.
TEST(ParseModelTest, ParsesModelsOver64MiB) {
  testing::ModelBuilder b(13);
  const int64_t n = 27 * 1024 * 1024;  // 108 MiB of floats.
  b.Input("x", {1, 1024});
  b.Initializer("W", {1024, n / 1024}, std::vector<float>(n, 0.5f));
  b.Node("MatMul", {"x", "W"}, {"y"}).Output("y");
  std::string bytes = b.Bytes();
  b = testing::ModelBuilder();  // Free the builder's copy.
  ASSERT_GT(bytes.size(), 100u * 1024 * 1024);
  absl::StatusOr<onnx::ModelProto> m = ParseModel(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string& raw = m->graph().initializer(0).raw_data();
  EXPECT_EQ(raw.size(), static_cast<size_t>(n) * 4);
  // Allocated once at its size: read through a stream, protobuf grows a
  // string over 50 MB by doubling (here to 200 MB).
  EXPECT_LE(raw.capacity(), raw.size() + 64);
}

// Large initializers (copied in pieces) among small ones, nodes and fields
// around them: the same model as protobuf's own parse, in the same order.
TEST(ParseModelTest, MatchesProtobufsParse) {
  testing::ModelBuilder b(13);
  b.Input("x", {1, 1024});
  b.Initializer("small", {4}, std::vector<float>{1, 2, 3, 4});
  b.Initializer("W", {1024, 1024}, std::vector<float>(1024 * 1024, 0.5f));
  b.Initializer("B", {1024}, std::vector<float>(1024, 0.25f));
  b.Node("MatMul", {"x", "W"}, {"h"}).Node("Add", {"h", "B"}, {"y"});
  b.Output("y");
  onnx::ModelProto model = b.Build();
  model.set_producer_name("test");
  model.mutable_graph()->mutable_initializer(1)->set_doc_string("after");
  const std::string bytes = model.SerializeAsString();
  onnx::ModelProto expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  absl::StatusOr<onnx::ModelProto> parsed = ParseModel(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(parsed->graph().initializer(1).name(), "W");
}

// Parsing concatenated messages merges them: repeated fields append, a
// repeated large raw_data replaces the earlier one, as protobuf does.
TEST(ParseModelTest, MergesRepeatedFieldsAsProtobufDoes) {
  onnx::ModelProto first = testing::MatMulModel(1024, 512).Build();
  onnx::ModelProto second;
  *second.mutable_graph()->add_initializer() = first.graph().initializer(0);
  onnx::TensorProto* tensor = second.mutable_graph()->mutable_initializer(0);
  tensor->set_name("again");
  tensor->set_raw_data(std::string(3 << 20, 'a'));
  second.set_producer_name("second");
  std::string bytes = first.SerializeAsString() + second.SerializeAsString();
  // The same tensor twice in one initializer: the later raw_data wins.
  onnx::ModelProto third;
  third.mutable_graph()->add_initializer()->set_raw_data(
      std::string(2 << 20, 'b'));
  std::string twice = third.SerializeAsString();
  bytes += twice;
  onnx::ModelProto expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  absl::StatusOr<onnx::ModelProto> parsed = ParseModel(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(parsed->graph().initializer_size(), 3);
}

TEST(ParseModelTest, TruncatedInsideALargeTensorIsInvalid) {
  std::string bytes = testing::MatMulModel(1024, 1024).Bytes();
  for (size_t cut : {bytes.size() - 1, bytes.size() / 2, size_t{40}}) {
    EXPECT_EQ(ParseModel(bytes.substr(0, cut)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << cut;
  }
}

TEST(SerializeModelTest, IsDeterministicAndParsesBack) {
  onnx::ModelProto m = testing::ConvModel().Build();
  absl::StatusOr<std::string> a = SerializeModel(m);
  absl::StatusOr<std::string> b = SerializeModel(m);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_TRUE(ParseModel(*a).ok());
}

TEST(ParseModelTest, CancelledBeforeIsCancelled) {
  CancellationToken cancel;
  cancel.Cancel();
  absl::StatusOr<onnx::ModelProto> m =
      ParseModel(testing::MatMulModel().Bytes(), &cancel);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(m.status().message(), "cancelled during parse");
}

TEST(SerializeModelTest, CancelledBeforeIsCancelled) {
  CancellationToken cancel;
  cancel.Cancel();
  absl::StatusOr<std::string> bytes =
      SerializeModel(testing::MatMulModel().Build(), &cancel);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(bytes.status().message(), "cancelled during serialize");
}

// 12 weights of 4 MiB: 48 MiB, tens of milliseconds to parse or serialize.
onnx::ModelProto BigModel() {
  testing::ModelBuilder b(13);
  b.Input("x", {1, 1024});
  std::string previous = "x";
  for (int i = 0; i < 12; ++i) {
    const std::string w = "W" + std::to_string(i);
    const std::string out = "h" + std::to_string(i);
    b.Initializer(w, {1024, 1024}, std::vector<float>(1024 * 1024, 0.25f * i));
    b.Node("MatMul", {previous, w}, {out});
    previous = out;
  }
  b.Output(previous);
  return b.Build();
}

// Cancels from another thread `after` the work started; returns how long the
// work went on after the cancel (negative: it had ended before). A work
// that was still going when cancelled must say CANCELLED.
template <typename Work>
double CancelDuring(std::chrono::microseconds after, Work work,
                    absl::StatusCode* code) {
  CancellationToken cancel;
  std::chrono::steady_clock::time_point cancelled_at;
  std::thread canceller([&] {
    std::this_thread::sleep_for(after);
    cancelled_at = std::chrono::steady_clock::now();
    cancel.Cancel();
  });
  *code = work(&cancel);
  const auto returned_at = std::chrono::steady_clock::now();
  canceller.join();
  return std::chrono::duration<double, std::milli>(returned_at - cancelled_at)
      .count();
}

TEST(ModelIoCancellationTest, StopsWithinAPieceOfTheModel) {
  const onnx::ModelProto model = BigModel();
  const std::string bytes = model.SerializeAsString();
  double parse_max = 0, serialize_max = 0;
  int parse_cancelled = 0, serialize_cancelled = 0;
  for (int i = 0; i < 5; ++i) {
    const std::chrono::microseconds after(1000 + 1000 * i);
    absl::StatusCode code;
    double ms = CancelDuring(
        after,
        [&](const CancellationToken* cancel) {
          return ParseModel(bytes, cancel).status().code();
        },
        &code);
    if (ms > 1) {  // Still parsing well after the cancel.
      EXPECT_EQ(code, absl::StatusCode::kCancelled) << ms << " ms";
    }
    if (code == absl::StatusCode::kCancelled) {
      ++parse_cancelled;
      parse_max = std::max(parse_max, ms);
    }
    ms = CancelDuring(
        after,
        [&](const CancellationToken* cancel) {
          return SerializeModel(model, cancel).status().code();
        },
        &code);
    if (ms > 1) {
      EXPECT_EQ(code, absl::StatusCode::kCancelled) << ms << " ms";
    }
    if (code == absl::StatusCode::kCancelled) {
      ++serialize_cancelled;
      serialize_max = std::max(serialize_max, ms);
    }
  }
  std::printf(
      "measured: %.1f MiB model, cancel -> return: parse max %.2f ms (%d of "
      "5 cancelled mid-way), serialize max %.2f ms (%d of 5)\n",
      bytes.size() / 1048576.0, parse_max, parse_cancelled, serialize_max,
      serialize_cancelled);
}

TEST(OpsetTest, ReadsAndSetsTheDefaultDomain) {
  onnx::ModelProto m = testing::MatMulModel(64, 32, 11).Build();
  auto* ml = m.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(3);
  EXPECT_EQ(DefaultOpset(m), 11);
  SetDefaultOpset(&m, 13);
  EXPECT_EQ(DefaultOpset(m), 13);
  EXPECT_EQ(m.opset_import_size(), 2);
  m.clear_opset_import();
  EXPECT_EQ(DefaultOpset(m), 0);
}

}  // namespace
}  // namespace quantd::graph
