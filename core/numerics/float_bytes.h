// A read-only view of float32 values as a TensorProto stores them: bytes in
// little-endian order with no alignment promised.
#ifndef QUANTD_CORE_NUMERICS_FLOAT_BYTES_H_
#define QUANTD_CORE_NUMERICS_FLOAT_BYTES_H_

#include <cstdint>

#include "absl/types/span.h"

namespace quantd::numerics {

// float32 values stored little-endian at `data`, possibly unaligned
// (TensorProto.raw_data): readers load them with memcpy.
struct FloatBytes {
  const char* data = nullptr;
  int64_t size = 0;  // Values, not bytes.

  static FloatBytes Of(absl::Span<const float> values) {
    return {reinterpret_cast<const char*>(values.data()),
            static_cast<int64_t>(values.size())};
  }
};

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_FLOAT_BYTES_H_
