#include "core/executor/layout.h"

#include <cstring>

#include "core/executor/tensor.h"

namespace quantd::executor {
namespace {

template <typename U>
void StridedCopyT(const U* in, const std::vector<int64_t>& strides,
                  const std::vector<int64_t>& shape, U* out) {
  const int rank = static_cast<int>(shape.size());
  const int64_t total = NumElements(shape);
  if (total == 0) return;
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  const int64_t n = shape.back(), s = strides.back();
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t o = 0; o < total; o += n) {
    if (s == 1) {
      std::memcpy(out + o, in + off, n * sizeof(U));
    } else {
      for (int64_t i = 0; i < n; ++i) out[o + i] = in[off + i * s];
    }
    for (int d = rank - 2; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    s[i] = s[i + 1] * shape[i + 1];
  }
  return s;
}

void StridedCopy(const void* in, int64_t esize,
                 const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& shape, void* out) {
  switch (esize) {
    case 1:
      StridedCopyT(static_cast<const uint8_t*>(in), strides, shape,
                   static_cast<uint8_t*>(out));
      break;
    case 2:
      StridedCopyT(static_cast<const uint16_t*>(in), strides, shape,
                   static_cast<uint16_t*>(out));
      break;
    case 4:
      StridedCopyT(static_cast<const uint32_t*>(in), strides, shape,
                   static_cast<uint32_t*>(out));
      break;
    case 8:
      StridedCopyT(static_cast<const uint64_t*>(in), strides, shape,
                   static_cast<uint64_t*>(out));
      break;
  }
}

}  // namespace quantd::executor
