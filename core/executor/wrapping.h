// Integer arithmetic that wraps around (two's complement), as numpy and ONNX
// Runtime compute it. In C++ a signed overflow is undefined, and so is a
// small unsigned type's product once promoted to int: every integer sum,
// difference and product a kernel computes from model values goes through
// these, computed in the unsigned type of the promoted operands.
#ifndef QUANTD_CORE_EXECUTOR_WRAPPING_H_
#define QUANTD_CORE_EXECUTOR_WRAPPING_H_

#include <cmath>
#include <type_traits>

namespace quantd::executor {

struct Plus {
  template <typename X, typename Y>
  auto operator()(const X& x, const Y& y) const {
    return x + y;
  }
};
struct Minus {
  template <typename X, typename Y>
  auto operator()(const X& x, const Y& y) const {
    return x - y;
  }
};
struct Times {
  template <typename X, typename Y>
  auto operator()(const X& x, const Y& y) const {
    return x * y;
  }
};

// op(x, y) for an integer type T, wrapping: Wrapping(x, y, Plus{}).
template <typename T, typename F>
T Wrapping(T x, T y, F op) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<decltype(x + y)>;
  return static_cast<T>(op(static_cast<U>(x), static_cast<U>(y)));
}

// -x and |x| (MIN stays MIN, as in two's complement).
template <typename T>
T WrappingNeg(T x) {
  return Wrapping(T{0}, x, Minus{});
}
template <typename T>
T WrappingAbs(T x) {
  if constexpr (std::is_signed_v<T>) {
    return x < 0 ? WrappingNeg(x) : x;
  } else {
    return x;
  }
}

// x + y, x * y and |x| as a kernel computes model values of type T:
// wrapping for integers, IEEE arithmetic for floating point.
template <typename T>
T ValueAdd(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return Wrapping(x, y, Plus{});
  } else {
    return x + y;
  }
}
template <typename T>
T ValueMul(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return Wrapping(x, y, Times{});
  } else {
    return x * y;
  }
}
template <typename T>
T ValueAbs(T x) {
  if constexpr (std::is_integral_v<T>) {
    return WrappingAbs(x);
  } else {
    using std::abs;
    return abs(x);
  }
}

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_WRAPPING_H_
