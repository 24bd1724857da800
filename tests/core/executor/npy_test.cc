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
}  // namespace quantd::executor
