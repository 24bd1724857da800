#include "core/executor/tensor.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/checked_count.h"
#include "core/base/huge_pages.h"
#include "core/base/status_macros.h"
#include "core/graph/tensor_util.h"
#include "core/numerics/int4.h"

namespace quantd::executor {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "raw_data decoding assumes a little-endian host");

std::atomic<int64_t> live_buffers{0};

using onnx::TensorProto;

template <typename T, typename Field>
void CopyTyped(const Field& field, Tensor* t) {
  T* out = t->mutable_data<T>();
  int64_t i = 0;
  for (auto v : field) out[i++] = static_cast<T>(v);
}

}  // namespace

int64_t ElementSize(int32_t dtype) {
  switch (dtype) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
      return 4;
    case TensorProto::UINT32:
      return 4;
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
    case TensorProto::UINT64:
      return 8;
    case TensorProto::INT16:
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      return 2;
    case TensorProto::INT8:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
    // 4-bit values are held one per byte (sign-extended for INT4) so
    // kernels index them like int8; only FromProto/ToProto see the packing.
    case numerics::kOnnxInt4:
    case numerics::kOnnxUint4:
      return 1;
    default:
      return 0;
  }
}

std::string DataTypeName(int32_t dtype) {
  // Types newer than Debian's libonnx (1.12), whose enum lacks their names.
  switch (dtype) {
    case 17:
      return "FLOAT8E4M3FN";
    case 18:
      return "FLOAT8E4M3FNUZ";
    case 19:
      return "FLOAT8E5M2";
    case 20:
      return "FLOAT8E5M2FNUZ";
    case numerics::kOnnxUint4:
      return "UINT4";
    case numerics::kOnnxInt4:
      return "INT4";
    case 23:
      return "FLOAT4E2M1";
  }
  if (TensorProto::DataType_IsValid(dtype)) {
    return TensorProto::DataType_Name(
        static_cast<TensorProto::DataType>(dtype));
  }
  return absl::StrCat("type ", dtype);
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  return SaturatingElementCount(shape);
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

namespace {
constexpr size_t kFreshMappingBytes = size_t{32} << 20;
thread_local int64_t tensor_limit = 0;  // 0: none.
}  // namespace

ScopedTensorLimit::ScopedTensorLimit(int64_t max_elements)
    : previous_(tensor_limit) {
  if (max_elements > 0 && (tensor_limit == 0 || max_elements < tensor_limit)) {
    tensor_limit = max_elements;
  }
}

ScopedTensorLimit::~ScopedTensorLimit() { tensor_limit = previous_; }

Tensor::Buffer::Buffer(int64_t bytes) {
  // aligned_alloc wants a multiple of the alignment; 64 suits AVX-512 loads.
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  // Out of memory: the job boundary turns this into RESOURCE_EXHAUSTED for
  // the one call instead of taking the process down.
  if (data == nullptr) throw std::bad_alloc();
  // Buffers above glibc's largest mmap threshold (32 MiB) come fresh from
  // mmap on every allocation (IS-Net: 64 MB per 64-channel map at 512x512),
  // and 2 MiB pages fault them in 512 times less often. Smaller ones are
  // recycled from the heap, already faulted in; advising those made
  // MobileNetV2 at batch 16 40-80% slower (docs/benchmarks.md).
  if (rounded >= kFreshMappingBytes) AdviseHugePages(data, rounded);
  live_buffers.fetch_add(1, std::memory_order_relaxed);
}

Tensor::Buffer::~Buffer() {
  std::free(data);
  live_buffers.fetch_sub(1, std::memory_order_relaxed);
}

int64_t Tensor::LiveBuffers() {
  return live_buffers.load(std::memory_order_relaxed);
}

Tensor::Tensor(DataType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  // Shapes from untrusted data are checked before they get here; one that
  // is not (negative or overflowing, even with a zero dim) cannot be
  // allocated, never wraps.
  absl::StatusOr<int64_t> count = CheckedElementCount(shape_);
  if (!count.ok()) throw std::bad_alloc();
  size_ = *count;
  if (tensor_limit > 0 && size_ > tensor_limit) {
    throw TensorLimitExceeded(size_, tensor_limit);
  }
  absl::StatusOr<int64_t> bytes = CheckedByteSize(size_, ElementSize(dtype_));
  if (!bytes.ok()) throw std::bad_alloc();
  buffer_ = std::make_shared<Buffer>(*bytes);
}

Tensor Tensor::Reshaped(std::vector<int64_t> shape) const {
  if (!CheckedElementCount(shape).ok()) throw std::bad_alloc();
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

int64_t Tensor::IntAt(int64_t i) const {
  switch (dtype_) {
    case TensorProto::INT64:
      return data<int64_t>()[i];
    case TensorProto::INT32:
      return data<int32_t>()[i];
    case TensorProto::INT8:
    case numerics::kOnnxInt4:
      return data<int8_t>()[i];
    case TensorProto::UINT8:
    case numerics::kOnnxUint4:
      return data<uint8_t>()[i];
    case TensorProto::BOOL:
      return data<bool>()[i];
    case TensorProto::INT16:
      return data<int16_t>()[i];
    case TensorProto::UINT16:
      return data<uint16_t>()[i];
    case TensorProto::UINT32:
      return data<uint32_t>()[i];
    case TensorProto::UINT64:
      return static_cast<int64_t>(data<uint64_t>()[i]);
    case TensorProto::FLOAT16:
      return static_cast<int64_t>(static_cast<float>(data<Float16>()[i]));
    case TensorProto::BFLOAT16:
      return static_cast<int64_t>(static_cast<float>(data<BFloat16>()[i]));
    case TensorProto::FLOAT:
      return static_cast<int64_t>(data<float>()[i]);
    case TensorProto::DOUBLE:
      return static_cast<int64_t>(data<double>()[i]);
    default:
      return 0;
  }
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  std::vector<int64_t> v(size_);
  for (int64_t i = 0; i < size_; ++i) v[i] = IntAt(i);
  return v;
}

namespace {

// INT4 / UINT4: raw_data holds the packed bytes; int32_data holds one packed
// byte per entry (onnx.proto: "UINT4 and INT4 values must be packed to
// 4bitx2 prior to writing to the buffer").
absl::StatusOr<Tensor> FourBitFromProto(const TensorProto& proto) {
  const int64_t n = graph::NumElements(proto);
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", proto.name(), "' has a negative or overflowing shape"));
  }
  std::string packed;
  if (proto.has_raw_data()) {
    packed = proto.raw_data();
  } else {
    packed.reserve(proto.int32_data_size());
    for (int32_t v : proto.int32_data()) {
      if (v < 0 || v > 255) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", proto.name(), "': int32_data entry ", v,
                         " is not a byte of packed 4-bit values"));
      }
      packed.push_back(static_cast<char>(v));
    }
  }
  const bool is_signed = proto.data_type() == numerics::kOnnxInt4;
  absl::StatusOr<std::vector<int8_t>> values =
      numerics::UnpackInt4(packed, n, is_signed);
  if (!values.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", proto.name(), "': ", values.status().message()));
  }
  Tensor t(static_cast<DataType>(proto.data_type()), graph::Dims(proto));
  if (n > 0) std::memcpy(t.raw(), values->data(), n);
  return t;
}

}  // namespace

Tensor Tensor::FromBytes(DataType dtype, std::vector<int64_t> shape,
                         absl::string_view bytes) {
  Tensor t(dtype, std::move(shape));
  assert(static_cast<uint64_t>(t.bytes()) == bytes.size());
  if (dtype == TensorProto::BOOL) {
    uint8_t* out = static_cast<uint8_t*>(t.raw());
    for (int64_t i = 0; i < t.size(); ++i) out[i] = bytes[i] != 0 ? 1 : 0;
  } else if (t.bytes() > 0) {
    std::memcpy(t.raw(), bytes.data(), t.bytes());
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::FromProto(const TensorProto& proto) {
  const int32_t type = proto.data_type();
  if (ElementSize(type) == 0) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", proto.name(), "' has element type ",
                     DataTypeName(type), ", which the executor does not hold"));
  }
  if (graph::HasExternalData(proto)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", proto.name(), "' stores its values in an external file"));
  }
  if (numerics::IsFourBitType(type)) return FourBitFromProto(proto);
  QUANTD_RETURN_IF_ERROR(graph::CheckTensorSize(proto));
  if (proto.has_raw_data()) {
    return FromBytes(static_cast<DataType>(type), graph::Dims(proto),
                     proto.raw_data());
  }
  Tensor t(static_cast<DataType>(type), graph::Dims(proto));
  switch (type) {
    case TensorProto::FLOAT:
      CopyTyped<float>(proto.float_data(), &t);
      break;
    case TensorProto::DOUBLE:
      CopyTyped<double>(proto.double_data(), &t);
      break;
    case TensorProto::INT64:
      CopyTyped<int64_t>(proto.int64_data(), &t);
      break;
    case TensorProto::INT32:
      CopyTyped<int32_t>(proto.int32_data(), &t);
      break;
    case TensorProto::INT8:
      CopyTyped<int8_t>(proto.int32_data(), &t);
      break;
    case TensorProto::UINT8:
      CopyTyped<uint8_t>(proto.int32_data(), &t);
      break;
    case TensorProto::BOOL:
      CopyTyped<bool>(proto.int32_data(), &t);
      break;
    case TensorProto::INT16:
      CopyTyped<int16_t>(proto.int32_data(), &t);
      break;
    // 16-bit floats: one value's bits per int32_data entry.
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      CopyTyped<uint16_t>(proto.int32_data(), &t);
      break;
    case TensorProto::UINT32:
      CopyTyped<uint32_t>(proto.uint64_data(), &t);
      break;
    case TensorProto::UINT64:
      CopyTyped<uint64_t>(proto.uint64_data(), &t);
      break;
  }
  return t;
}

Tensor Tensor::WidenedToFloat() const {
  if (!IsHalfFloat(dtype_)) return *this;
  Tensor out(TensorProto::FLOAT, shape_);
  float* o = out.mutable_data<float>();
  const uint16_t* in = static_cast<const uint16_t*>(raw());
  if (dtype_ == TensorProto::FLOAT16) {
    for (int64_t i = 0; i < size_; ++i) o[i] = numerics::HalfToFloat(in[i]);
  } else {
    for (int64_t i = 0; i < size_; ++i) o[i] = numerics::BFloat16ToFloat(in[i]);
  }
  return out;
}

Tensor Tensor::NarrowedTo(DataType to) const {
  Tensor out(to, shape_);
  const float* in = data<float>();
  uint16_t* o = static_cast<uint16_t*>(out.raw());
  if (to == TensorProto::FLOAT16) {
    for (int64_t i = 0; i < size_; ++i) o[i] = numerics::FloatToHalf(in[i]);
  } else {
    for (int64_t i = 0; i < size_; ++i) o[i] = numerics::FloatToBFloat16(in[i]);
  }
  return out;
}

TensorProto Tensor::ToProto(const std::string& name) const {
  TensorProto p;
  p.set_name(name);
  p.set_data_type(dtype_);
  for (int64_t d : shape_) p.add_dims(d);
  if (numerics::IsFourBitType(dtype_)) {
    // Every producer of 4-bit values (FromProto, the quantize kernels)
    // keeps them on the grid, so the clamp never changes a value; it only
    // makes PackInt4's error unreachable.
    const bool is_signed = dtype_ == numerics::kOnnxInt4;
    const int64_t lo = is_signed ? -8 : 0, hi = is_signed ? 7 : 15;
    std::vector<int32_t> values(size_);
    for (int64_t i = 0; i < size_; ++i) {
      values[i] = static_cast<int32_t>(std::clamp(IntAt(i), lo, hi));
    }
    p.set_raw_data(numerics::PackInt4(values, is_signed).value());
    return p;
  }
  p.set_raw_data(std::string(static_cast<const char*>(raw()), bytes()));
  return p;
}

}  // namespace quantd::executor
