#include "client/calibration_data.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace quantd::client {
namespace {

using quantd::executor::Tensor;
using ::testing::HasSubstr;

// [n, 2] float32 with values 10*sample + column.
Tensor Samples(int64_t n) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) {
    v.push_back(10.0f * i);
    v.push_back(10.0f * i + 1);
  }
  return Tensor::FromVector<float>({n, 2}, v);
}

std::vector<float> Floats(const quantd::v1::NamedTensor& t) {
  std::vector<float> v(t.data().size() / sizeof(float));
  std::memcpy(v.data(), t.data().data(), t.data().size());
  return v;
}

class CalibrationDataTest : public ::testing::Test {
 protected:
  std::string Npy(const std::string& name, const Tensor& t) {
    const std::string path = tmp_.File(name);
    EXPECT_TRUE(quantd::executor::WriteNpyFile(path, t).ok());
    return path;
  }
  std::string Pb(const std::string& file, const Tensor& t,
                 const std::string& proto_name) {
    const std::string path = tmp_.File(file);
    quantd::testing::WriteFileOrDie(path,
                                    t.ToProto(proto_name).SerializeAsString());
    return path;
  }
  quantd::testing::TempDir tmp_;
};

TEST(ParseCalibrationInputTest, NamedAndUnnamed) {
  auto unnamed = ParseCalibrationInput("x.npy");
  ASSERT_TRUE(unnamed.ok());
  EXPECT_EQ(unnamed->name, "");
  EXPECT_EQ(unnamed->path, "x.npy");
  auto named = ParseCalibrationInput("input=dir/x=1.npy");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->name, "input");
  EXPECT_EQ(named->path, "dir/x=1.npy");  // Split at the first '='.
  EXPECT_EQ(ParseCalibrationInput("=x.npy").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCalibrationInput("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCalibrationInput("name=").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CalibrationDataTest, SplitsTheFirstAxisIntoBatches) {
  auto data = CalibrationData::Open({{"", Npy("x.npy", Samples(5))}}, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->num_samples(), 5);
  EXPECT_EQ((*data)->num_batches(), 3);
  std::vector<std::vector<float>> seen;
  std::vector<int64_t> rows;
  while (auto batch = (*data)->Next()) {
    ASSERT_EQ(batch->tensors_size(), 1);
    const auto& t = batch->tensors(0);
    EXPECT_EQ(t.name(), "");  // The model's only input.
    EXPECT_EQ(t.data_type(), 1);
    ASSERT_EQ(t.shape_size(), 2);
    EXPECT_EQ(t.shape(1), 2);
    rows.push_back(t.shape(0));
    seen.push_back(Floats(t));
  }
  EXPECT_EQ(rows, (std::vector<int64_t>{2, 2, 1}));  // The last is smaller.
  EXPECT_EQ(seen[0], (std::vector<float>{0, 1, 10, 11}));
  EXPECT_EQ(seen[2], (std::vector<float>{40, 41}));
  EXPECT_FALSE((*data)->Next().has_value());
}

TEST_F(CalibrationDataTest, ZipsNamedInputsSampleWise) {
  const Tensor ids = Tensor::FromVector<int64_t>({3}, {7, 8, 9});
  auto data = CalibrationData::Open(
      {{"a", Npy("a.npy", Samples(3))}, {"ids", Npy("ids.npy", ids)}}, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  auto first = (*data)->Next();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->tensors_size(), 2);
  EXPECT_EQ(first->tensors(0).name(), "a");
  EXPECT_EQ(first->tensors(1).name(), "ids");
  EXPECT_EQ(first->tensors(1).data_type(), 7);  // INT64
  std::vector<int64_t> v(2);
  ASSERT_EQ(first->tensors(1).data().size(), 2 * sizeof(int64_t));
  std::memcpy(v.data(), first->tensors(1).data().data(), 16);
  EXPECT_EQ(v, (std::vector<int64_t>{7, 8}));
  auto second = (*data)->Next();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->tensors(0).shape(0), 1);
  EXPECT_EQ(second->tensors(1).shape(0), 1);
  EXPECT_EQ(Floats(second->tensors(0)), (std::vector<float>{20, 21}));
}

TEST_F(CalibrationDataTest, DifferentSampleCountsNameTheFiles) {
  const std::string a = Npy("a.npy", Samples(3));
  const std::string b = Npy("b.npy", Samples(4));
  auto data = CalibrationData::Open({{"a", a}, {"b", b}}, 2);
  ASSERT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr("a=" + a + " has 3"));
  EXPECT_THAT(data.status().message(), HasSubstr("b=" + b + " has 4"));
}

TEST_F(CalibrationDataTest, Float64IsSentAsFloat32) {
  const Tensor d = Tensor::FromVector<double>({2, 1}, {1.5, -2.25});
  auto data = CalibrationData::Open({{"", Npy("d.npy", d)}}, 8);
  ASSERT_TRUE(data.ok()) << data.status();
  auto batch = (*data)->Next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->tensors(0).data_type(), 1);
  EXPECT_EQ(Floats(batch->tensors(0)), (std::vector<float>{1.5f, -2.25f}));
}

// float16 (0x3c00 = 1, 0xc100 = -2.5, 0x3555 ~ 1/3) goes as float32 too,
// with each half's exact value.
TEST_F(CalibrationDataTest, Float16IsSentAsFloat32) {
  Tensor h(onnx::TensorProto::FLOAT16, {3, 1});
  const uint16_t bits[] = {0x3c00, 0xc100, 0x3555};
  std::memcpy(h.mutable_data<uint16_t>(), bits, sizeof(bits));
  auto data = CalibrationData::Open({{"", Npy("h.npy", h)}}, 8);
  ASSERT_TRUE(data.ok()) << data.status();
  auto batch = (*data)->Next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->tensors(0).data_type(), 1);
  EXPECT_EQ(Floats(batch->tensors(0)),
            (std::vector<float>{1.0f, -2.5f, 0.333251953125f}));
}

TEST_F(CalibrationDataTest, OtherIntegerAndBoolTypesPassThrough) {
  auto data = CalibrationData::Open(
      {{"i32", Npy("i32.npy", Tensor::FromVector<int32_t>({2}, {1, 2}))},
       {"u8", Npy("u8.npy", Tensor::FromVector<uint8_t>({2}, {3, 4}))},
       {"b", Npy("b.npy", Tensor::FromVector<bool>({2}, {true, false}))},
       {"u16", Npy("u16.npy", Tensor::FromVector<uint16_t>({2}, {5, 6}))},
       {"i16", Npy("i16.npy", Tensor::FromVector<int16_t>({2}, {-7, 8}))},
       {"u32", Npy("u32.npy", Tensor::FromVector<uint32_t>({2}, {9, 10}))},
       {"u64", Npy("u64.npy", Tensor::FromVector<uint64_t>({2}, {11, 12}))}},
      1);
  ASSERT_TRUE(data.ok()) << data.status();
  auto batch = (*data)->Next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->tensors(0).data_type(), 6);  // INT32
  EXPECT_EQ(batch->tensors(0).data().size(), 4u);
  EXPECT_EQ(batch->tensors(1).data_type(), 2);  // UINT8
  EXPECT_EQ(batch->tensors(1).data(), std::string("\x03", 1));
  EXPECT_EQ(batch->tensors(2).data_type(), 9);  // BOOL
  EXPECT_EQ(batch->tensors(2).data(), std::string("\x01", 1));
  EXPECT_EQ(batch->tensors(3).data_type(), 4);  // UINT16
  EXPECT_EQ(batch->tensors(3).data(), std::string("\x05\x00", 2));
  EXPECT_EQ(batch->tensors(4).data_type(), 5);  // INT16
  EXPECT_EQ(batch->tensors(4).data(), std::string("\xf9\xff", 2));
  EXPECT_EQ(batch->tensors(5).data_type(), 12);  // UINT32
  EXPECT_EQ(batch->tensors(5).data(), std::string("\x09\x00\x00\x00", 4));
  EXPECT_EQ(batch->tensors(6).data_type(), 13);  // UINT64
  EXPECT_EQ(batch->tensors(6).data().size(), 8u);
}

TEST_F(CalibrationDataTest, TensorProtoFilesUseTheirNameUnlessGivenOne) {
  const std::string pb = Pb("input_0.pb", Samples(4), "input");
  auto data = CalibrationData::Open({{"", pb}}, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  auto batch = (*data)->Next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->tensors(0).name(), "input");
  EXPECT_EQ(batch->tensors(0).shape(0), 4);
  EXPECT_EQ(Floats(batch->tensors(0))[7], 31.0f);

  auto renamed = CalibrationData::Open({{"other", pb}}, 4);
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ((*renamed)->Next()->tensors(0).name(), "other");
}

// Found by fuzzing: a 128-byte .npy of shape (2^62, 0) holds no values but
// would have made 2^62 empty samples, an endless stream of empty batches.
TEST_F(CalibrationDataTest, SamplesWithoutValuesAreRefused) {
  const std::string empty =
      Npy("empty.npy", Tensor::FromVector<float>({int64_t{1} << 40, 0}, {}));
  auto data = CalibrationData::Open({{"", empty}}, 4);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr("no values"));
  // No samples at all is refused as before.
  const std::string none =
      Npy("none.npy", Tensor::FromVector<float>({0, 3}, {}));
  EXPECT_FALSE(CalibrationData::Open({{"", none}}, 4).ok());
  // Beside an input whose samples hold values (which bounds their count),
  // empty samples are sent: a ReduceSum's empty `axes` (ONNX's
  // test_reduce_sum_empty_axes_input_noop).
  const std::string axes =
      Npy("axes.npy", Tensor::FromVector<int64_t>({2, 0}, {}));
  const std::string x =
      Npy("x.npy", Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  auto zipped = CalibrationData::Open({{"data", x}, {"axes", axes}}, 1, true);
  ASSERT_TRUE(zipped.ok()) << zipped.status();
  auto batch = (*zipped)->Next();
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->tensors_size(), 2);
  EXPECT_EQ(batch->tensors(1).name(), "axes");
  EXPECT_EQ(batch->tensors(1).shape_size(), 1);
  EXPECT_EQ(batch->tensors(1).shape(0), 0);
  EXPECT_TRUE(batch->tensors(1).data().empty());
  EXPECT_TRUE((*zipped)->Next().has_value());
  EXPECT_FALSE((*zipped)->Next().has_value());
  // Two empty inputs are still refused.
  auto both = CalibrationData::Open({{"a", axes}, {"b", empty}}, 1);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CalibrationDataTest, ErrorsAreNamed) {
  const std::string x = Npy("x.npy", Samples(2));
  EXPECT_EQ(CalibrationData::Open({{"", x}}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CalibrationData::Open({}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Two unnamed, or two of the same name.
  auto two = CalibrationData::Open({{"", x}, {"", x}}, 1);
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(two.status().message(), HasSubstr("unnamed"));
  auto same = CalibrationData::Open({{"a", x}, {"a", x}}, 1);
  EXPECT_EQ(same.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(same.status().message(), HasSubstr("'a'"));
  // Missing file, garbage, scalar.
  auto missing = CalibrationData::Open({{"", tmp_.File("nope.npy")}}, 1);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.npy"));
  quantd::testing::WriteFileOrDie(tmp_.File("junk.pb"), "\xff\xff\xff");
  auto junk = CalibrationData::Open({{"", tmp_.File("junk.pb")}}, 1);
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(junk.status().message(), HasSubstr("junk.pb"));
  // Only scalars: nothing to cut batches along.
  auto scalar =
      CalibrationData::Open({{"", Npy("s.npy", Tensor::Scalar(1.0f))}}, 1);
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(scalar.status().message(), HasSubstr("sample axis"));
}

// A recurrent state laid out [layers, batch, hidden] is cut along axis 1,
// a scalar (a sample rate) goes whole with every batch, and so does an
// array given NAME=none.
TEST_F(CalibrationDataTest, SampleAxesAndWholeInputs) {
  std::vector<float> state;  // [2 layers, 3 samples, 2]: 100*l + 10*s + h.
  for (int l = 0; l < 2; ++l) {
    for (int n = 0; n < 3; ++n) {
      for (int h = 0; h < 2; ++h) state.push_back(100.0f * l + 10.0f * n + h);
    }
  }
  std::vector<CalibrationInput> inputs = {
      {"x", Npy("x.npy", Samples(3))},
      {"state", Npy("state.npy", Tensor::FromVector<float>({2, 3, 2}, state))},
      {"sr", Npy("sr.npy", Tensor::Scalar<int64_t>(16000))},
      {"table", Npy("table.npy", Tensor::FromVector<float>({2}, {7, 8}))}};
  ASSERT_TRUE(ApplySampleAxes({"state=1", "table=none"}, &inputs).ok());
  auto data = CalibrationData::Open(inputs, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->num_samples(), 3);
  auto first = (*data)->Next();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->tensors_size(), 4);
  const quantd::v1::NamedTensor& s0 = first->tensors(1);
  EXPECT_THAT(s0.shape(), ::testing::ElementsAre(2, 2, 2));
  EXPECT_EQ(Floats(s0), (std::vector<float>{0, 1, 10, 11, 100, 101, 110, 111}));
  const quantd::v1::NamedTensor& sr = first->tensors(2);
  EXPECT_EQ(sr.shape_size(), 0);
  EXPECT_EQ(sr.data_type(), onnx::TensorProto::INT64);
  int64_t rate = 0;
  ASSERT_EQ(sr.data().size(), sizeof(rate));
  std::memcpy(&rate, sr.data().data(), sizeof(rate));
  EXPECT_EQ(rate, 16000);
  EXPECT_EQ(Floats(first->tensors(3)), (std::vector<float>{7, 8}));
  auto second = (*data)->Next();
  ASSERT_TRUE(second.has_value());
  EXPECT_THAT(second->tensors(1).shape(), ::testing::ElementsAre(2, 1, 2));
  EXPECT_EQ(Floats(second->tensors(1)), (std::vector<float>{20, 21, 120, 121}));
  EXPECT_THAT(second->tensors(0).shape(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(second->tensors(2).data(), sr.data());
  EXPECT_FALSE((*data)->Next().has_value());
}

TEST_F(CalibrationDataTest, UnbatchedSendsEachSampleWithoutItsAxis) {
  // A model that takes one image [2] (no batch axis) and a state [2, 2]
  // whose samples lie on axis 1; a scalar still goes whole.
  std::vector<CalibrationInput> inputs = {
      {"x", Npy("x.npy", Samples(3))},
      {"state", Npy("state.npy",
                    Tensor::FromVector<float>({2, 3}, {0, 1, 2, 10, 11, 12}))},
      {"sr", Npy("sr.npy", Tensor::Scalar<int64_t>(16000))}};
  ASSERT_TRUE(ApplySampleAxes({"state=1"}, &inputs).ok());
  auto data = CalibrationData::Open(inputs, 1, /*unbatched=*/true);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->num_batches(), 3);
  std::vector<std::vector<float>> xs, states;
  while (auto batch = (*data)->Next()) {
    ASSERT_EQ(batch->tensors_size(), 3);
    EXPECT_THAT(batch->tensors(0).shape(), ::testing::ElementsAre(2));
    EXPECT_THAT(batch->tensors(1).shape(), ::testing::ElementsAre(2));
    EXPECT_EQ(batch->tensors(2).shape_size(), 0);
    xs.push_back(Floats(batch->tensors(0)));
    states.push_back(Floats(batch->tensors(1)));
  }
  EXPECT_EQ(xs, (std::vector<std::vector<float>>{{0, 1}, {10, 11}, {20, 21}}));
  EXPECT_EQ(states,
            (std::vector<std::vector<float>>{{0, 10}, {1, 11}, {2, 12}}));

  auto batched = CalibrationData::Open(inputs, 4, /*unbatched=*/true);
  EXPECT_EQ(batched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(batched.status().message()),
              ::testing::HasSubstr("batch size must be 1, not 4"));
}

TEST_F(CalibrationDataTest, BadSampleAxesAreInvalidArgument) {
  std::vector<CalibrationInput> inputs = {{"x", Npy("x.npy", Samples(3))}};
  for (const char* flag : {"x=-1", "x=one", "x", "=1"}) {
    std::vector<CalibrationInput> copy = inputs;
    EXPECT_EQ(ApplySampleAxes({flag}, &copy).code(),
              absl::StatusCode::kInvalidArgument)
        << flag;
  }
  std::vector<CalibrationInput> copy = inputs;
  EXPECT_THAT(ApplySampleAxes({"y=1"}, &copy).message(),
              HasSubstr("no calibration data file"));
  EXPECT_THAT(ApplySampleAxes({"x=1", "x=0"}, &copy).message(),
              HasSubstr("twice"));
  // Axis 2 of a rank-2 array; lengths that differ along the chosen axes.
  copy = inputs;
  ASSERT_TRUE(ApplySampleAxes({"x=2"}, &copy).ok());
  auto out_of_range = CalibrationData::Open(copy, 1);
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("out of range"));
  copy = inputs;
  copy.push_back({"y", Npy("y.npy", Samples(3))});
  ASSERT_TRUE(ApplySampleAxes({"y=1"}, &copy).ok());
  auto differ = CalibrationData::Open(copy, 1);
  EXPECT_EQ(differ.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(differ.status().message(), HasSubstr("y.npy has 2 on axis 1"));
}

TEST_F(CalibrationDataTest, AsSourceEndsWithNullopt) {
  auto data = CalibrationData::Open({{"", Npy("x.npy", Samples(3))}}, 3);
  ASSERT_TRUE(data.ok());
  BatchSource source = (*data)->AsSource();
  auto first = source();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->has_value());
  auto end = source();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

}  // namespace
}  // namespace quantd::client
