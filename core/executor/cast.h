// Element-type conversion as ONNX Cast defines it, shared by Cast and
// CastLike: C++ conversions for numbers (float to integer truncates toward
// zero), x != 0 for BOOL, and exact 16-bit float handling (widening is exact,
// narrowing rounds to nearest even straight from the source type).
#ifndef QUANTD_CORE_EXECUTOR_CAST_H_
#define QUANTD_CORE_EXECUTOR_CAST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/executor/tensor.h"

namespace quantd {
class ThreadPool;
}

namespace quantd::executor {

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
