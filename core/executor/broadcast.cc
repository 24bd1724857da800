#include "core/executor/broadcast.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quantd::executor {

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(
    absl::Span<const std::vector<int64_t>> shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    const size_t shift = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[shift + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o == 1) {
        o = s[i];
        continue;
      }
      std::vector<std::string> parts;
      for (const auto& t : shapes) {
        parts.push_back(absl::StrCat("[", absl::StrJoin(t, ","), "]"));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", absl::StrJoin(parts, " and "), " do not broadcast"));
    }
  }
  return out;
}

BroadcastWalk::BroadcastWalk(const std::vector<int64_t>& out,
                             absl::Span<const std::vector<int64_t>> inputs) {
  const int n = static_cast<int>(inputs.size());
  const int rank = static_cast<int>(out.size());
  // Per input and output dim: the input's element stride, 0 when broadcast.
  std::vector<std::vector<int64_t>> stride(n, std::vector<int64_t>(rank, 0));
  for (int k = 0; k < n; ++k) {
    const auto& s = inputs[k];
    const int shift = rank - static_cast<int>(s.size());
    int64_t st = 1;
    for (int d = rank - 1; d >= shift; --d) {
      stride[k][d] = s[d - shift] == 1 ? 0 : st;
      st *= s[d - shift];
    }
  }
  // Merge adjacent dims where every input is contiguous across the pair (or
  // broadcast in both), so the runs are as long as possible.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> st(n);
  for (int d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool merge = !dims.empty();
    for (int k = 0; k < n && merge; ++k) {
      const int64_t prev = st[k].back();
      merge = (prev == 0 && stride[k][d] == 0) ||
              (prev != 0 && stride[k][d] != 0 && prev == stride[k][d] * out[d]);
    }
    if (merge) {
      dims.back() *= out[d];
      for (int k = 0; k < n; ++k) st[k].back() = stride[k][d];
    } else {
      dims.push_back(out[d]);
      for (int k = 0; k < n; ++k) st[k].push_back(stride[k][d]);
    }
  }
  inner_stride_.assign(n, 0);
  if (!dims.empty()) {
    inner_ = dims.back();
    for (int k = 0; k < n; ++k) {
      inner_stride_[k] = st[k].back() == 0 ? 0 : 1;
      st[k].pop_back();
    }
    dims.pop_back();
  }
  for (int64_t d : dims) runs_ *= d;
  dims_ = std::move(dims);
  strides_ = std::move(st);
  if (std::find(out.begin(), out.end(), 0) != out.end()) {
    // Nothing to walk. No outer dims either: ForEachRun's odometer divides
    // by them, and a zero one would be a division by zero.
    runs_ = 0;
    inner_ = 0;
    dims_.clear();
    for (auto& s : strides_) s.clear();
  }
}

Tensor ExpandTo(const Tensor& t, const std::vector<int64_t>& shape) {
  Tensor out(t.dtype(), shape);
  const std::vector<int64_t> shapes[1] = {t.shape()};
  BroadcastWalk walk(shape, shapes);
  const int64_t esize = ElementSize(t.dtype());
  const int64_t n = walk.inner();
  const char* in = static_cast<const char*>(t.raw());
  char* o = static_cast<char*>(out.raw());
  const bool contiguous = walk.inner_stride(0) != 0;
  walk.ForEachRun(0, walk.runs(), [&](int64_t off, const int64_t* in_off) {
    if (contiguous) {
      std::memcpy(o + off * esize, in + in_off[0] * esize, n * esize);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(o + (off + i) * esize, in + in_off[0] * esize, esize);
      }
    }
  });
  return out;
}

}  // namespace quantd::executor
