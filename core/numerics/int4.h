// ONNX's 4-bit integer element types (INT4 / UINT4, IR 10, opset 21) and
// their packed storage: two values per byte, the element with the lower
// index in the low nibble, an odd count padded with a zero high nibble.
// Debian's libonnx (1.12) predates these types, so their enum values are
// spelled out here; this is the one place that knows the packing.
#ifndef QUANTD_CORE_NUMERICS_INT4_H_
#define QUANTD_CORE_NUMERICS_INT4_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace quantd::numerics {

// onnx.TensorProto.DataType values (onnx.proto, ONNX >= 1.16).
inline constexpr int32_t kOnnxUint4 = 21;
inline constexpr int32_t kOnnxInt4 = 22;
// The IR version that introduced INT4 / UINT4.
inline constexpr int64_t kInt4MinIrVersion = 10;
// The default-domain opset whose QuantizeLinear / DequantizeLinear accept
// INT4 / UINT4 and block_size.
inline constexpr int64_t kInt4MinOpset = 21;

inline bool IsFourBitType(int32_t onnx_type) {
  return onnx_type == kOnnxInt4 || onnx_type == kOnnxUint4;
}

// Bytes needed for n packed 4-bit values.
// Written so that no n >= 0 overflows (n + 1 would at INT64_MAX).
inline int64_t PackedInt4Bytes(int64_t n) { return n / 2 + (n & 1); }

// Packs values already on a 4-bit grid: [-8, 7] when is_signed, else
// [0, 15]. INVALID_ARGUMENT naming the first value off the grid.
absl::StatusOr<std::string> PackInt4(absl::Span<const int32_t> values,
                                     bool is_signed);

// PackInt4 of values stored one per byte (QuantizedTensor::values: the int8
// bit pattern when is_signed, else uint8), without widening them to int32.
absl::StatusOr<std::string> PackInt4Bytes(absl::string_view values,
                                          bool is_signed);

// Unpacks n values from `packed` (sign-extended when is_signed).
// INVALID_ARGUMENT when `packed` is not PackedInt4Bytes(n) long.
absl::StatusOr<std::vector<int8_t>> UnpackInt4(const std::string& packed,
                                               int64_t n, bool is_signed);

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_INT4_H_
