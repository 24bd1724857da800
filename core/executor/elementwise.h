// The loops behind the elementwise kernels (ops_elementwise.cc,
// ops_activation.cc): each inner run is one Eigen array expression over
// contiguous memory, so the compiler vectorizes it and nothing is called per
// element through a pointer; big tensors are split over the pool.
#ifndef QUANTD_CORE_EXECUTOR_ELEMENTWISE_H_
#define QUANTD_CORE_EXECUTOR_ELEMENTWISE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "core/base/parallel.h"
#include "core/executor/broadcast.h"
#include "core/executor/kernel.h"
#include "core/executor/tensor.h"

namespace quantd::executor {

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using CMap = Eigen::Map<const Arr<T>>;
template <typename T>
using MMap = Eigen::Map<Arr<T>>;

// Element types by family. FLOAT16 / BFLOAT16 never reach these kernels:
// the executor computes them in FLOAT (HalfAdapter in executor.cc).
using FloatTypes = TypeList<float, double>;
using IntTypes = TypeList<int64_t, int32_t, int16_t, int8_t, uint64_t, uint32_t,
                          uint16_t, uint8_t>;
using UnsignedTypes = TypeList<uint64_t, uint32_t, uint16_t, uint8_t>;
using SignedTypes = TypeList<float, double, int64_t, int32_t, int16_t, int8_t>;
using NumberTypes = TypeList<float, double, int64_t, int32_t, int16_t, int8_t,
                             uint64_t, uint32_t, uint16_t, uint8_t>;

// NodeInfo::RequireType over a TypeList.
template <typename... Ts>
absl::Status RequireTypes(const NodeInfo& info, int i, TypeList<Ts...>) {
  return info.RequireType(i, {TypeOf<Ts>::value...});
}

// Work below this many elements stays on the calling thread.
inline constexpr int64_t kElementwiseGrain = 1 << 15;

// y = f(x) over the flat input, f an Eigen array expression builder; the
// output has element type O (T unless the op yields e.g. BOOL).
template <typename T, typename O = T, typename F>
Tensor UnaryMap(const Tensor& x, ThreadPool* pool, F f) {
  Tensor out(TypeOf<O>::value, x.shape());
  const T* in = x.data<T>();
  O* o = out.mutable_data<O>();
  ParallelRange(pool, x.size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    MMap<O>(o + b, e - b) = f(CMap<T>(in + b, e - b));
  });
  return out;
}

// out = Op::Apply(a, b) with a, b (element type T) broadcast to out's shape;
// Op::Apply takes and returns Eigen array expressions and Op::Out<T> is the
// output element type.
template <typename Op, typename T>
void BinaryBroadcast(const Tensor& a, const Tensor& b, Tensor* out,
                     ThreadPool* pool) {
  using O = typename Op::template Out<T>;
  const std::vector<int64_t> shapes[2] = {a.shape(), b.shape()};
  BroadcastWalk walk(out->shape(), shapes);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  O* po = out->mutable_data<O>();
  const bool sa = walk.inner_stride(0) != 0, sb = walk.inner_stride(1) != 0;
  auto run = [&](int64_t o, const int64_t* off, int64_t n) {
    MMap<O> y(po + o, n);
    const T* x0 = pa + off[0];
    const T* x1 = pb + off[1];
    if (sa && sb) {
      y = Op::Apply(CMap<T>(x0, n), CMap<T>(x1, n));
    } else if (sa) {
      y = Op::Apply(CMap<T>(x0, n), Arr<T>::Constant(n, *x1));
    } else if (sb) {
      y = Op::Apply(Arr<T>::Constant(n, *x0), CMap<T>(x1, n));
    } else {
      y = Op::Apply(Arr<T>::Constant(n, *x0), Arr<T>::Constant(n, *x1));
    }
  };
  const int64_t inner = walk.inner();
  if (walk.runs() == 1) {
    // One long run (same shapes, or a scalar operand): cut it into pieces.
    ParallelRange(pool, inner, kElementwiseGrain, [&](int64_t b0, int64_t b1) {
      const int64_t off[2] = {sa ? b0 : 0, sb ? b0 : 0};
      run(b0, off, b1 - b0);
    });
    return;
  }
  ParallelRange(
      pool, walk.runs(),
      std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
      [&](int64_t r0, int64_t r1) {
        walk.ForEachRun(
            r0, r1, [&](int64_t o, const int64_t* off) { run(o, off, inner); });
      });
}

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_ELEMENTWISE_H_
