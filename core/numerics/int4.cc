#include "core/numerics/int4.h"

#include "absl/strings/str_cat.h"
#include "core/base/multiversion.h"

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
      return absl::InvalidArgumentError(absl::StrCat(
          "value ", v, " at index ", i, " is outside the ",
          is_signed ? "INT4" : "UINT4", " range [", lo, ", ", hi, "]"));
    }
    const auto nibble = static_cast<uint8_t>(static_cast<uint32_t>(v) & 0xF);
    auto& byte = reinterpret_cast<uint8_t&>(packed[i / 2]);
    byte |= (i % 2 == 0) ? nibble : static_cast<uint8_t>(nibble << 4);
  }
  return packed;
}

namespace {

// Built per instruction set (the library targets baseline x86-64) and at O3,
// where GCC vectorizes both loops.
#if QUANTD_HAS_TARGET_CLONES
#define QUANTD_INT4_KERNEL                                                     \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), \
                 optimize("O3")))
#else
#define QUANTD_INT4_KERNEL
#endif

// Packs pairs (v[2i], v[2i+1]) into out[i] for i < pairs; returns nonzero
// when some v[k] + shift (mod 256) is not in [0, 15], i.e. off the grid.
QUANTD_INT4_KERNEL uint8_t PackPairs(const uint8_t* v, size_t pairs,
                                     uint8_t shift, uint8_t* out) {
  uint8_t off_grid = 0;
  for (size_t k = 0; k < 2 * pairs; ++k) {
    off_grid |= static_cast<uint8_t>(v[k] + shift) & 0xF0;
  }
  for (size_t i = 0; i < pairs; ++i) {
    out[i] = static_cast<uint8_t>((v[2 * i] & 0xF) | (v[2 * i + 1] << 4));
  }
  return off_grid;
}

}  // namespace

absl::StatusOr<std::string> PackInt4Bytes(absl::string_view values,
                                          bool is_signed) {
  const auto* v = reinterpret_cast<const uint8_t*>(values.data());
  const size_t n = values.size();
  std::string packed(PackedInt4Bytes(static_cast<int64_t>(n)), '\0');
  auto* out = reinterpret_cast<uint8_t*>(packed.data());
  // Signed nibbles are [-8, 7]: adding 8 maps them onto [0, 15].
  const uint8_t shift = is_signed ? 8 : 0;
  uint8_t off_grid = PackPairs(v, n / 2, shift, out);
  if (n % 2 != 0) {
    off_grid |= static_cast<uint8_t>(v[n - 1] + shift) & 0xF0;
    out[n / 2] = v[n - 1] & 0xF;
  }
  if (off_grid == 0) return packed;
  for (size_t i = 0;; ++i) {
    if ((static_cast<uint8_t>(v[i] + shift) & 0xF0) != 0) {
      const int32_t q = is_signed ? static_cast<int8_t>(v[i]) : v[i];
      return absl::InvalidArgumentError(
          absl::StrCat("value ", q, " at index ", i, " is outside the ",
                       is_signed ? "INT4" : "UINT4", " range [",
                       is_signed ? -8 : 0, ", ", is_signed ? 7 : 15, "]"));
    }
  }
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
