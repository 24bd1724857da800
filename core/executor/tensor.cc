#include "core/executor/tensor.h"

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/graph/tensor_util.h"

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
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
      return 8;
    case TensorProto::INT8:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

std::string DataTypeName(int32_t dtype) {
  if (TensorProto::DataType_IsValid(dtype)) {
    return TensorProto::DataType_Name(
        static_cast<TensorProto::DataType>(dtype));
  }
  return absl::StrCat("type ", dtype);
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

Tensor::Buffer::Buffer(int64_t bytes) {
  // aligned_alloc wants a multiple of the alignment; 64 suits AVX-512 loads.
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (data == nullptr) std::abort();  // Out of memory: nothing sane to do.
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
  size_ = NumElements(shape_);
  buffer_ = std::make_shared<Buffer>(size_ * ElementSize(dtype_));
}

Tensor Tensor::Reshaped(std::vector<int64_t> shape) const {
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
      return data<int8_t>()[i];
    case TensorProto::UINT8:
      return data<uint8_t>()[i];
    case TensorProto::BOOL:
      return data<bool>()[i];
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
  absl::Status s = graph::CheckTensorSize(proto);
  if (!s.ok()) return s;
  Tensor t(static_cast<DataType>(type), graph::Dims(proto));
  if (proto.has_raw_data()) {
    if (t.bytes() > 0) std::memcpy(t.raw(), proto.raw_data().data(), t.bytes());
    return t;
  }
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
  }
  return t;
}

TensorProto Tensor::ToProto(const std::string& name) const {
  TensorProto p;
  p.set_name(name);
  p.set_data_type(dtype_);
  for (int64_t d : shape_) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char*>(raw()), bytes()));
  return p;
}

}  // namespace quantd::executor
