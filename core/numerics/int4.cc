#include "core/numerics/int4.h"

#include "absl/strings/str_cat.h"

namespace quantd::numerics {

absl::StatusOr<std::string> PackInt4(absl::Span<const int32_t> values,
                                     bool is_signed) {
  const int32_t lo = is_signed ? -8 : 0;
  const int32_t hi = is_signed ? 7 : 15;
  std::string packed(PackedInt4Bytes(static_cast<int64_t>(values.size())),
                     '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const int32_t v = values[i];
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("value ", v, " at index ", i, " is outside the ",
                       is_signed ? "INT4" : "UINT4", " range [", lo, ", ", hi,
                       "]"));
    }
    const auto nibble = static_cast<uint8_t>(static_cast<uint32_t>(v) & 0xF);
    auto& byte = reinterpret_cast<uint8_t&>(packed[i / 2]);
    byte |= (i % 2 == 0) ? nibble : static_cast<uint8_t>(nibble << 4);
  }
  return packed;
}

absl::StatusOr<std::vector<int8_t>> UnpackInt4(const std::string& packed,
                                               int64_t n, bool is_signed) {
  if (n < 0 || static_cast<int64_t>(packed.size()) != PackedInt4Bytes(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed 4-bit data of ", n, " elements needs ",
                     PackedInt4Bytes(n), " bytes, got ", packed.size()));
  }
  std::vector<int8_t> values(n);
  for (int64_t i = 0; i < n; ++i) {
    const auto byte = static_cast<uint8_t>(packed[i / 2]);
    int32_t nibble = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    if (is_signed && nibble >= 8) nibble -= 16;  // Sign-extend bit 3.
    values[i] = static_cast<int8_t>(nibble);
  }
  return values;
}

}  // namespace quantd::numerics
