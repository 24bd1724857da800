// Narrowing double to the 16-bit float formats with one rounding.
#include "core/numerics/float16.h"

#include <cmath>
#include <cstdint>

namespace quantd::numerics {
namespace {

// The bits of d in a binary format with `mant_bits` stored mantissa bits and
// exponent bias `bias` (all-ones exponent for inf/NaN), rounded to nearest
// even. Scaling by powers of two is exact in double, so std::nearbyint (in
// the default nearest-even mode) is the only rounding.
uint16_t RoundDouble(double d, int mant_bits, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t max_exp = (1u << exp_bits) - 1;
  const uint16_t sign =
      std::signbit(d) ? static_cast<uint16_t>(1u << (mant_bits + exp_bits)) : 0;
  const uint16_t inf = static_cast<uint16_t>(max_exp << mant_bits);
  if (std::isnan(d)) {
    return sign | inf | static_cast<uint16_t>(1u << (mant_bits - 1));
  }
  const double a = std::fabs(d);
  if (std::isinf(a)) return sign | inf;
  if (a == 0) return sign;  // frexp gives no usable exponent for zero.
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1).
  --e;                // a = g * 2^e, g in [1, 2).
  if (e < 1 - bias) {
    // Subnormal (or zero): multiples of 2^(1 - bias - mant_bits). A result
    // of 2^mant_bits is the smallest normal, whose bits are the same number.
    const double m = std::nearbyint(std::ldexp(a, bias - 1 + mant_bits));
    return sign | static_cast<uint16_t>(m);
  }
  double m = std::nearbyint(std::ldexp(a, mant_bits - e));
  if (m >= std::ldexp(1.0, mant_bits + 1)) {  // Rounded up to 2^(e+1).
    m /= 2;
    ++e;
  }
  const uint32_t biased = static_cast<uint32_t>(e + bias);
  if (biased >= max_exp) return sign | inf;
  return sign |
         static_cast<uint16_t>((biased << mant_bits) |
                               (static_cast<uint32_t>(m) - (1u << mant_bits)));
}

}  // namespace

uint16_t DoubleToHalf(double d) { return RoundDouble(d, 10, 5); }

uint16_t DoubleToBFloat16(double d) { return RoundDouble(d, 7, 8); }

}  // namespace quantd::numerics
