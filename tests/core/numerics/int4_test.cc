// Tests of core/numerics/int4: the packing order and sign extension the ONNX
// spec defines (onnx/docs/Changelog.md, "INT4"), on hand-made vectors.
#include "core/numerics/int4.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::numerics {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Int4Test, PacksLowIndexIntoLowNibble) {
  // -1 = 0xF, 2 = 0x2 -> 0x2F; -8 = 0x8, 7 = 0x7 -> 0x78; 3 alone -> 0x03.
  auto packed = PackInt4({-1, 2, -8, 7, 3}, /*is_signed=*/true);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->size(), 3u);
  EXPECT_EQ(static_cast<uint8_t>((*packed)[0]), 0x2F);
  EXPECT_EQ(static_cast<uint8_t>((*packed)[1]), 0x78);
  EXPECT_EQ(static_cast<uint8_t>((*packed)[2]), 0x03);
}

TEST(Int4Test, UnpackSignExtends) {
  const std::string packed("\x2F\x78\x03", 3);
  auto values = UnpackInt4(packed, 5, /*is_signed=*/true);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(-1, 2, -8, 7, 3));
  auto unsigned_values = UnpackInt4(packed, 5, /*is_signed=*/false);
  ASSERT_TRUE(unsigned_values.ok());
  EXPECT_THAT(*unsigned_values, ElementsAre(15, 2, 8, 7, 3));
}

TEST(Int4Test, RoundTripsEveryValue) {
  for (bool is_signed : {true, false}) {
    std::vector<int32_t> values;
    for (int v = is_signed ? -8 : 0; v <= (is_signed ? 7 : 15); ++v) {
      values.push_back(v);
    }
    values.push_back(is_signed ? -3 : 9);  // Odd count: padded last byte.
    auto packed = PackInt4(values, is_signed);
    ASSERT_TRUE(packed.ok());
    EXPECT_EQ(packed->size(), PackedInt4Bytes(values.size()));
    auto back = UnpackInt4(*packed, values.size(), is_signed);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(std::vector<int32_t>(back->begin(), back->end()), values);
  }
}

TEST(Int4Test, RefusesValuesOffTheGrid) {
  auto s = PackInt4({0, 8}, /*is_signed=*/true);
  EXPECT_THAT(s.status().message(), HasSubstr("value 8 at index 1"));
  EXPECT_FALSE(PackInt4({-1}, /*is_signed=*/false).ok());
  EXPECT_FALSE(PackInt4({16}, /*is_signed=*/false).ok());
}

// PackInt4Bytes is PackInt4 on values stored one per byte, errors too.
TEST(Int4Test, PackFromBytesMatchesPackInt4) {
  std::mt19937 rng(4);
  for (bool is_signed : {true, false}) {
    std::uniform_int_distribution<int> grid(is_signed ? -8 : 0,
                                            is_signed ? 7 : 15);
    for (size_t n : {0, 1, 2, 7, 33, 1000}) {
      std::vector<int32_t> values(n);
      std::string bytes;
      for (int32_t& v : values) {
        v = grid(rng);
        bytes.push_back(static_cast<char>(v));
      }
      auto want = PackInt4(values, is_signed);
      auto got = PackInt4Bytes(bytes, is_signed);
      ASSERT_TRUE(want.ok() && got.ok()) << n;
      EXPECT_EQ(*got, *want) << "n = " << n << " signed = " << is_signed;
    }
    for (int32_t off : {is_signed ? -9 : 16, is_signed ? 8 : 255}) {
      const std::vector<int32_t> values = {1, 2, off, 3, off};
      std::string bytes;
      for (int32_t v : values) bytes.push_back(static_cast<char>(v));
      EXPECT_EQ(PackInt4Bytes(bytes, is_signed).status(),
                PackInt4(values, is_signed).status())
          << off;
    }
  }
}

TEST(Int4Test, RefusesWrongPackedLength) {
  auto s = UnpackInt4(std::string(2, '\0'), 5, /*is_signed=*/true);
  EXPECT_THAT(s.status().message(), HasSubstr("needs 3 bytes, got 2"));
}

}  // namespace
}  // namespace quantd::numerics
