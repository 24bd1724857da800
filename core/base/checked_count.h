// Overflow-checked element counts and byte sizes: the one way core counts a
// shape, whether it comes from a client, a model or a kernel.
#ifndef QUANTD_CORE_BASE_CHECKED_COUNT_H_
#define QUANTD_CORE_BASE_CHECKED_COUNT_H_

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace quantd {

inline constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max();

// Product of `dims` (1 for rank 0), -1 when a dim is negative, 0 when a dim
// is 0, and kMaxCount when the product of the non-zero dims does not fit in
// int64 (so a crafted shape never wraps around to a small count). Whatever
// the order of the dims: a zero dim does not hide an overflow elsewhere from
// a caller that computes strides, and SaturatingElementCount never says 0
// for a shape whose strides overflow (CheckedElementCount refuses it).
inline int64_t SaturatingElementCount(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  bool zero = false;
  bool saturated = false;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d == 0) {
      zero = true;
      continue;
    }
    if (saturated) continue;
    if (n > kMaxCount / d) {
      saturated = true;
      continue;
    }
    n *= d;
  }
  if (zero) return 0;
  return saturated ? kMaxCount : n;
}

// Product of `dims` (1 for rank 0). INVALID_ARGUMENT for a negative dim, or
// when the product of the non-zero dims overflows int64 (a zero dim does not
// excuse it: strides over the other dims would still overflow).
inline absl::StatusOr<int64_t> CheckedElementCount(
    absl::Span<const int64_t> dims) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(dims, ","), "] has a negative dimension"));
    }
    if (d == 0) {
      zero = true;
      continue;
    }
    if (n > kMaxCount / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(dims, ","),
                       "] has more elements than fit in 64 bits"));
    }
    n *= d;
  }
  return zero ? 0 : n;
}

// count * element_size; INVALID_ARGUMENT when either is negative or the
// product overflows int64.
inline absl::StatusOr<int64_t> CheckedByteSize(int64_t count,
                                               int64_t element_size) {
  if (count < 0 || element_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "negative size: ", count, " elements of ", element_size, " bytes"));
  }
  if (element_size != 0 && count > kMaxCount / element_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " elements of ", element_size,
                     " bytes are more bytes than fit in 64 bits"));
  }
  return count * element_size;
}

// a * b for non-negative a and b, saturating at kMaxCount (for budgets and
// estimates, where "too many" is all that matters).
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > kMaxCount / b ? kMaxCount : a * b;
}

// a + b for non-negative a and b, saturating at kMaxCount.
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > kMaxCount - b ? kMaxCount : a + b;
}

}  // namespace quantd

#endif  // QUANTD_CORE_BASE_CHECKED_COUNT_H_
