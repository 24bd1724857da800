#include "core/base/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace quantd {
namespace {

absl::Status FailIf(bool fail) {
  return fail ? absl::InvalidArgumentError("step failed") : absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeIf(bool ok, int v) {
  if (!ok) return absl::NotFoundError("no value");
  return std::make_unique<int>(v);
}

absl::Status TwoSteps(bool fail_first, bool fail_second, int* steps) {
  QUANTD_RETURN_IF_ERROR(FailIf(fail_first));
  ++*steps;
  QUANTD_RETURN_IF_ERROR(MakeIf(!fail_second, 1));
  ++*steps;
  return absl::OkStatus();
}

absl::StatusOr<int> Sum(bool a_ok, bool b_ok) {
  QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<int> a, MakeIf(a_ok, 2));
  QUANTD_ASSIGN_OR_RETURN(auto b, MakeIf(b_ok, 3));  // Move-only values.
  return *a + *b;
}

TEST(StatusMacrosTest, ReturnIfErrorStopsAtTheFirstFailure) {
  int steps = 0;
  EXPECT_EQ(TwoSteps(true, false, &steps).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(steps, 0);
  EXPECT_EQ(TwoSteps(false, true, &steps).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(steps, 1);
  steps = 0;
  EXPECT_TRUE(TwoSteps(false, false, &steps).ok());
  EXPECT_EQ(steps, 2);
}

TEST(StatusMacrosTest, AssignOrReturnBindsOrPropagates) {
  EXPECT_EQ(*Sum(true, true), 5);
  EXPECT_EQ(Sum(false, true).status().message(), "no value");
  EXPECT_EQ(Sum(true, false).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace quantd
