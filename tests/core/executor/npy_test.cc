// ParseNpy: the header's shape is untrusted, so it is counted without
// overflow and compared with the data before anything is allocated.
#include "core/executor/npy.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::executor {
namespace {

using ::testing::HasSubstr;

// A version 1.0 .npy with `header` (padded) and `data`.
std::string Npy(const std::string& dict, const std::string& data) {
  std::string header = dict;
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

TEST(NpyTest, RoundTrips) {
  Tensor t = Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  absl::StatusOr<Tensor> back = ParseNpy(SerializeNpy(t));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), t.shape());
  EXPECT_EQ(back->data<float>()[3], 4.0f);
}

TEST(NpyTest, OverflowingShapesAreRefusedBeforeAllocating) {
  for (const char* shape :
       {"(4611686018427387904,)", "(2147483648, 2147483648, 4)",
        "(9223372036854775807, 2)"}) {
    absl::StatusOr<Tensor> t = ParseNpy(
        Npy(std::string("{'descr': '<f4', 'fortran_order': False, 'shape': ") +
                shape + ", }",
            ""));
    ASSERT_FALSE(t.ok()) << shape;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("64 bits")) << shape;
  }
}

TEST(NpyTest, DataLengthMustMatch) {
  absl::StatusOr<Tensor> t =
      ParseNpy(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                   std::string(8, '\0')));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("the header says 12"));
}

}  // namespace

// numpy's float16 and 16/32/64-bit integer files, as np.save writes
// [[1, 2, 3], [4, 5, 6]] in each (data bytes copied from numpy 1.24).
TEST(NpyTest, ReadsHalfAndTheOtherIntegerWidthsNumpyWrites) {
  struct Case {
    const char* descr;
    int32_t type;
    std::string hex;
  };
  const Case cases[] = {
      {"<f2", onnx::TensorProto::FLOAT16, "003c00400042004400450046"},
      {"<i2", onnx::TensorProto::INT16, "010002000300040005000600"},
      {"<u2", onnx::TensorProto::UINT16, "010002000300040005000600"},
      {"<u4", onnx::TensorProto::UINT32,
       "010000000200000003000000040000000500000006000000"},
      {"<u8", onnx::TensorProto::UINT64,
       "01000000000000000200000000000000030000000000000004000000000000000500"
       "0000000000000600000000000000"},
  };
  for (const Case& c : cases) {
    std::string data;
    for (size_t i = 0; i + 1 < c.hex.size(); i += 2) {
      data.push_back(
          static_cast<char>(std::stoi(c.hex.substr(i, 2), nullptr, 16)));
    }
    const std::string file =
        Npy(std::string("{'descr': '") + c.descr +
                "', 'fortran_order': False, 'shape': (2, 3), }",
            data);
    absl::StatusOr<Tensor> t = ParseNpy(file);
    ASSERT_TRUE(t.ok()) << c.descr << ": " << t.status();
    EXPECT_EQ(t->dtype(), c.type) << c.descr;
    EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 3})) << c.descr;
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(t->IntAt(i), i + 1) << c.descr << " " << i;
    }
    // Written back with the same descriptor and bytes.
    const std::string written = SerializeNpy(*t);
    EXPECT_THAT(written, HasSubstr(std::string("'descr': '") + c.descr + "'"));
    EXPECT_EQ(written.substr(written.size() - data.size()), data) << c.descr;
  }
}

}  // namespace quantd::executor
