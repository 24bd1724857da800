// The fuzzers' oracle for a tensor read from bytes (raw_data, .npy data).
#ifndef QUANTD_FUZZ_TENSOR_BYTES_H_
#define QUANTD_FUZZ_TENSOR_BYTES_H_

#include <cstdint>
#include <cstring>

#include "core/executor/tensor.h"

namespace quantd::fuzz {

// Whether `t` holds the t.bytes() bytes at `bytes`, as ONNX and numpy read
// them: a BOOL byte is true when it is not 0, and is held as 1.
inline bool TensorHoldsBytes(const executor::Tensor& t, const char* bytes) {
  if (t.bytes() == 0) return true;
  if (t.dtype() != onnx::TensorProto::BOOL) {
    return std::memcmp(t.raw(), bytes, t.bytes()) == 0;
  }
  const auto* held = static_cast<const uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.bytes(); ++i) {
    if (held[i] != (bytes[i] != 0 ? 1 : 0)) return false;
  }
  return true;
}

}  // namespace quantd::fuzz

#endif  // QUANTD_FUZZ_TENSOR_BYTES_H_
