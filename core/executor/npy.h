// NumPy .npy files <-> Tensor: the format calibration inputs and test
// fixtures come in (and what ort_eval.js reads and writes).
#ifndef QUANTD_CORE_EXECUTOR_NPY_H_
#define QUANTD_CORE_EXECUTOR_NPY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/executor/tensor.h"

namespace quantd::executor {

// Format versions 1-3, C order, little-endian float32/float64/int64/int32/
// int8/uint8/bool. INVALID_ARGUMENT for malformed bytes, UNIMPLEMENTED for
// Fortran order, big-endian or other element types.
absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes);
absl::StatusOr<Tensor> ReadNpyFile(const std::string& path);

// A version 1.0 file.
std::string SerializeNpy(const Tensor& t);
absl::Status WriteNpyFile(const std::string& path, const Tensor& t);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_NPY_H_
