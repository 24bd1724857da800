#include "core/numerics/decibels.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace quantd::numerics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(SqnrDbTest, EdgeCasesAndValues) {
  EXPECT_DOUBLE_EQ(SqnrDb(100.0, 1.0), 20.0);
  EXPECT_DOUBLE_EQ(SqnrDb(1.0, 1.0), 0.0);
  EXPECT_NEAR(SqnrDb(1.0, 10.0), -10.0, 1e-12);
  EXPECT_EQ(SqnrDb(5.0, 0.0), kInf);   // Exact.
  EXPECT_EQ(SqnrDb(0.0, 0.0), kInf);   // Exact, all zeros.
  EXPECT_EQ(SqnrDb(0.0, 2.0), -kInf);  // Zero signal, some error.
  // Energies are sums of squares; a negative one (rounding in a
  // difference of energies) counts as none.
  EXPECT_EQ(SqnrDb(5.0, -1e-12), kInf);
  EXPECT_EQ(SqnrDb(-1e-12, 2.0), -kInf);
  EXPECT_TRUE(std::isnan(SqnrDb(std::nan(""), 1.0)));
  EXPECT_TRUE(std::isnan(SqnrDb(1.0, std::nan(""))));
}

}  // namespace
}  // namespace quantd::numerics
