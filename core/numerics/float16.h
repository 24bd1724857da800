// IEEE binary16 (FLOAT16) and bfloat16 (BFLOAT16) values: exact widening to
// float and round-to-nearest-even narrowing from float and double (as numpy,
// ONNX Runtime and the ONNX >= 1.14 Cast spec do), plus 16-bit value types
// the executor's tensors and kernels hold.
#ifndef QUANTD_CORE_NUMERICS_FLOAT16_H_
#define QUANTD_CORE_NUMERICS_FLOAT16_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace quantd::numerics {

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// Exact: every binary16 value is a float.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    return BitsToFloat(
        sign | FloatToBits(static_cast<float>(mant) * 5.9604644775390625e-8f));
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest, ties to even; overflow (|x| >= 65520) gives infinity,
// NaN stays a (quiet) NaN.
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00 | ((ax >> 13) & 0x3ff);
  if (ax >= 0x477ff000u) return sign | 0x7c00;  // 65520 and up (incl. inf).
  if (ax < 0x38800000u) {
    // Below 2^-14, the half subnormals are multiples of 2^-24: adding 0.5
    // puts the value where a float's ulp is 2^-24, so the FPU's own
    // nearest-even rounding does the work.
    const float r = BitsToFloat(ax) + 0.5f;
    return sign | static_cast<uint16_t>(FloatToBits(r) - 0x3f000000u);
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped bits to even.
  ax += 0xc8000fffu + ((ax >> 13) & 1);
  return sign | static_cast<uint16_t>(ax >> 13);
}

inline float BFloat16ToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

// Round to nearest, ties to even (not truncation); NaN stays a quiet NaN.
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40);
  }
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

// Narrowing straight from double, rounded once (double -> float -> 16 bits
// would round twice and can land one step off).
uint16_t DoubleToHalf(double d);
uint16_t DoubleToBFloat16(double d);

// 16-bit float values as the executor's kernels hold them: the bits, with
// conversions that round like the functions above. The implicit widening to
// float lets generic code (Cast's loop, comparisons) treat them as numbers.
struct BFloat16;
struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  explicit Float16(float f) : bits(FloatToHalf(f)) {}
  explicit Float16(double d) : bits(DoubleToHalf(d)) {}
  // Integers go through double, exact up to 2^53 (far past half's range).
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  explicit Float16(I v) : bits(DoubleToHalf(static_cast<double>(v))) {}
  inline explicit Float16(BFloat16 b);
  static Float16 FromBits(uint16_t b) {
    Float16 h;
    h.bits = b;
    return h;
  }
  operator float() const { return HalfToFloat(bits); }
};

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float f) : bits(FloatToBFloat16(f)) {}
  explicit BFloat16(double d) : bits(DoubleToBFloat16(d)) {}
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  explicit BFloat16(I v) : bits(DoubleToBFloat16(static_cast<double>(v))) {}
  explicit BFloat16(Float16 h) : bits(FloatToBFloat16(static_cast<float>(h))) {}
  static BFloat16 FromBits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  operator float() const { return BFloat16ToFloat(bits); }
};

inline Float16::Float16(BFloat16 b)
    : bits(FloatToHalf(static_cast<float>(b))) {}

static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2,
              "16-bit floats are stored as their bits");

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_FLOAT16_H_
