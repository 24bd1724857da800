// CastTensor: one conversion loop per (from, to) pair of the castable types.
#include "core/executor/cast.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/base/parallel.h"
#include "core/executor/kernel.h"

namespace quantd::executor {
namespace {

using CastTypes =
    TypeList<float, double, int64_t, int32_t, int16_t, int8_t, uint64_t,
             uint32_t, uint16_t, uint8_t, bool, Float16, BFloat16>;

template <typename... Ts>
bool InList(int32_t dtype, TypeList<Ts...>) {
  return ((dtype == TypeOf<Ts>::value) || ...);
}

template <typename From, typename To>
void CastLoop(const From* in, To* out, int64_t n) {
  constexpr bool kFloatFrom =
      std::is_floating_point_v<From> || std::is_class_v<From>;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<To, bool> && std::is_class_v<From>) {
      out[i] = static_cast<float>(in[i]) != 0;  // -0 is false too.
    } else if constexpr (std::is_same_v<To, bool>) {
      out[i] = in[i] != From(0);
    } else if constexpr (kFloatFrom && std::is_integral_v<To>) {
      if constexpr (std::is_class_v<From>) {  // Float16, BFloat16.
        out[i] = FloatToInteger<To>(static_cast<float>(in[i]));
      } else {
        out[i] = FloatToInteger<To>(in[i]);
      }
    } else {
      out[i] = static_cast<To>(in[i]);
    }
  }
}

}  // namespace

bool CastableType(int32_t dtype) { return InList(dtype, CastTypes{}); }

absl::StatusOr<Tensor> CastTensor(const Tensor& x, int32_t to,
                                  ThreadPool* pool) {
  if (x.dtype() == to) return x;
  if (!CastableType(x.dtype()) || !CastableType(to)) {
    return absl::UnimplementedError(
        absl::StrCat("Cast from ", DataTypeName(x.dtype()), " to ",
                     DataTypeName(to), " is not supported"));
  }
  Tensor y(static_cast<DataType>(to), x.shape());
  absl::Status s = DispatchImpl(
      x.dtype(),
      [&](auto from) {
        using F = decltype(from);
        return DispatchImpl(
            to,
            [&](auto to_tag) {
              using T = decltype(to_tag);
              const F* in = x.data<F>();
              T* out = y.mutable_data<T>();
              ParallelRange(pool, x.size(), 1 << 16, [&](int64_t b, int64_t e) {
                CastLoop<F, T>(in + b, out + b, e - b);
              });
              return absl::OkStatus();
            },
            CastTypes{});
      },
      CastTypes{});
  if (!s.ok()) return s;
  return y;
}

}  // namespace quantd::executor
