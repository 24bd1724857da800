// Element-type conversion as ONNX Cast defines it, shared by Cast and
// CastLike: C++ conversions for numbers (float to integer truncates toward
// zero), x != 0 for BOOL, and exact 16-bit float handling (widening is exact,
// narrowing rounds to nearest even straight from the source type).
#ifndef QUANTD_CORE_EXECUTOR_CAST_H_
#define QUANTD_CORE_EXECUTOR_CAST_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"
#include "core/executor/tensor.h"

namespace quantd {
class ThreadPool;
}

namespace quantd::executor {

// A floating value converted to an integer type. C++ leaves NaN and values
// outside the type undefined, and ONNX leaves them unspecified: here NaN is
// 0 and the rest saturate to the type's range.
template <typename To>
To FloatToInteger(double v) {
  if (std::isnan(v)) return 0;
  constexpr double kLo = static_cast<double>(std::numeric_limits<To>::min());
  // max() as a double rounds up to a power of two for 64-bit types: every
  // value below it converts exactly.
  constexpr double kHi = static_cast<double>(std::numeric_limits<To>::max());
  if (v <= kLo) return std::numeric_limits<To>::min();
  if (v >= kHi) return std::numeric_limits<To>::max();
  return static_cast<To>(v);
}

// Whether CastTensor converts from and to `dtype`: every fixed-size ONNX
// number type and BOOL, FLOAT16 and BFLOAT16 included (not STRING, the
// 8-bit floats or the 4-bit integers).
bool CastableType(int32_t dtype);

// `x` as `to` (x itself, shared, when it already is). UNIMPLEMENTED for a
// type CastableType refuses. `pool` may be null.
absl::StatusOr<Tensor> CastTensor(const Tensor& x, int32_t to,
                                  ThreadPool* pool);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_CAST_H_
