// The executor's value type: a dense row-major tensor whose storage is shared
// between copies (values are immutable once produced), plus conversion from
// and to onnx::TensorProto.
#ifndef QUANTD_CORE_EXECUTOR_TENSOR_H_
#define QUANTD_CORE_EXECUTOR_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/numerics/float16.h"
#include "onnx/onnx_pb.h"

namespace quantd::executor {

// Element types use ONNX's numbering so the two never need a mapping table.
using DataType = onnx::TensorProto::DataType;

// Bytes per element for the types a Tensor can hold; 0 for any other type.
// INT4 / UINT4 (numerics::kOnnxInt4 / kOnnxUint4) are held one value per
// byte (int8_t / uint8_t storage), keeping their dtype so kernels know the
// grid; only FromProto and ToProto see the packed form.
int64_t ElementSize(int32_t dtype);
// "FLOAT", "INT64", ... (ONNX's enum names).
std::string DataTypeName(int32_t dtype);

template <typename T>
struct TypeOf;
template <>
struct TypeOf<float> {
  static constexpr DataType value = onnx::TensorProto::FLOAT;
};
template <>
struct TypeOf<double> {
  static constexpr DataType value = onnx::TensorProto::DOUBLE;
};
template <>
struct TypeOf<int64_t> {
  static constexpr DataType value = onnx::TensorProto::INT64;
};
template <>
struct TypeOf<int32_t> {
  static constexpr DataType value = onnx::TensorProto::INT32;
};
template <>
struct TypeOf<int8_t> {
  static constexpr DataType value = onnx::TensorProto::INT8;
};
template <>
struct TypeOf<uint8_t> {
  static constexpr DataType value = onnx::TensorProto::UINT8;
};
template <>
struct TypeOf<bool> {
  static constexpr DataType value = onnx::TensorProto::BOOL;
};
template <>
struct TypeOf<int16_t> {
  static constexpr DataType value = onnx::TensorProto::INT16;
};
template <>
struct TypeOf<uint16_t> {
  static constexpr DataType value = onnx::TensorProto::UINT16;
};
template <>
struct TypeOf<uint32_t> {
  static constexpr DataType value = onnx::TensorProto::UINT32;
};
template <>
struct TypeOf<uint64_t> {
  static constexpr DataType value = onnx::TensorProto::UINT64;
};

// FLOAT16 / BFLOAT16 elements are held as their bits (numerics/float16.h).
// Kernels compute in float: unless an op handles them itself, the executor
// widens such inputs to FLOAT and narrows the outputs back (HalfAdapter in
// executor.cc), so most kernels never see them.
using numerics::BFloat16;
using numerics::Float16;
template <>
struct TypeOf<Float16> {
  static constexpr DataType value = onnx::TensorProto::FLOAT16;
};
template <>
struct TypeOf<BFloat16> {
  static constexpr DataType value = onnx::TensorProto::BFLOAT16;
};
inline bool IsHalfFloat(int32_t dtype) {
  return dtype == onnx::TensorProto::FLOAT16 ||
         dtype == onnx::TensorProto::BFLOAT16;
}

// Product of dims (1 for rank 0), saturating: -1 for a negative dim,
// kMaxCount when it overflows (core/base/checked_count.h). Shapes from
// untrusted data go through CheckedElementCount first.
int64_t NumElements(absl::Span<const int64_t> shape);
std::string ShapeString(absl::Span<const int64_t> shape);

// Thrown by the Tensor constructor when a ScopedTensorLimit on this thread
// forbids the size. A std::bad_alloc, so code that does not look for it
// still fails the one call (RESOURCE_EXHAUSTED at the job boundary).
class TensorLimitExceeded : public std::bad_alloc {
 public:
  TensorLimitExceeded(int64_t elements, int64_t limit)
      : elements_(elements), limit_(limit) {}
  const char* what() const noexcept override {
    return "tensor over the element limit";
  }
  int64_t elements() const { return elements_; }
  int64_t limit() const { return limit_; }

 private:
  int64_t elements_;
  int64_t limit_;
};

// While it lives, every Tensor constructed on this thread may hold at most
// `max_elements` elements (0: no limit); nested scopes keep the tighter
// limit. Bounds what a model run allocates per value before it allocates
// it: an Expand or a ConstantOfShape of a tiny model can ask for more
// memory than the machine has, and with overcommit the allocation succeeds
// and the process dies writing it.
class ScopedTensorLimit {
 public:
  explicit ScopedTensorLimit(int64_t max_elements);
  ~ScopedTensorLimit();
  ScopedTensorLimit(const ScopedTensorLimit&) = delete;
  ScopedTensorLimit& operator=(const ScopedTensorLimit&) = delete;

 private:
  int64_t previous_;
};

class Tensor {
 public:
  // An empty value (dtype UNDEFINED); what an omitted optional input reads as.
  Tensor() = default;
  // Allocates uninitialized storage (64-byte aligned) for `shape`. Every
  // tensor's shape has non-negative dims whose non-zero ones multiply
  // within int64 (an empty tensor included), so kernels may multiply and
  // add dims freely: std::bad_alloc otherwise, as for any shape that
  // cannot be allocated.
  Tensor(DataType dtype, std::vector<int64_t> shape);

  template <typename T>
  static Tensor FromVector(std::vector<int64_t> shape,
                           const std::vector<T>& values) {
    Tensor t(TypeOf<T>::value, std::move(shape));
    for (size_t i = 0; i < values.size() && i < size_t(t.size()); ++i) {
      t.mutable_data<T>()[i] = values[i];
    }
    return t;
  }
  template <typename T>
  static Tensor Scalar(T v) {
    return FromVector<T>({}, {v});
  }

  // A copy of bytes.size() bytes in ONNX's layout (little-endian, one byte
  // per BOOL), which must be exactly what `shape` holds. A BOOL byte other
  // than 0 reads as true (1), as numpy reads it: no other byte is a C++
  // bool.
  static Tensor FromBytes(DataType dtype, std::vector<int64_t> shape,
                          absl::string_view bytes);

  // Raw data or the typed field (for INT4 / UINT4: packed raw_data, or
  // int32_data holding one packed byte per entry); INVALID_ARGUMENT for size
  // mismatches and external data, UNIMPLEMENTED for element types a Tensor
  // cannot hold.
  static absl::StatusOr<Tensor> FromProto(const onnx::TensorProto& proto);
  // Always raw_data (packed two values per byte for INT4 / UINT4).
  onnx::TensorProto ToProto(const std::string& name = "") const;

  bool empty() const { return dtype_ == onnx::TensorProto::UNDEFINED; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t size() const { return size_; }
  int64_t bytes() const { return size_ * ElementSize(dtype_); }

  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }
  // Only for a tensor this code just allocated: storage is shared by copies.
  template <typename T>
  T* mutable_data() {
    return static_cast<T*>(raw());
  }
  const void* raw() const { return buffer_ ? buffer_->data : nullptr; }
  void* raw() { return buffer_ ? buffer_->data : nullptr; }

  // The same values under another shape with as many elements (no copy);
  // the shape is held to the constructor's rule.
  Tensor Reshaped(std::vector<int64_t> shape) const;
  // Element i converted to int64 (for shape-like inputs of any int type).
  int64_t IntAt(int64_t i) const;
  std::vector<int64_t> ToInt64Vector() const;

  // A FLOAT16 / BFLOAT16 tensor widened to FLOAT (exact); any other tensor
  // unchanged (no copy).
  Tensor WidenedToFloat() const;
  // A FLOAT tensor rounded to `to` (FLOAT16 or BFLOAT16, nearest even).
  Tensor NarrowedTo(DataType to) const;

  // Buffers currently allocated by all Tensors of the process: lets tests
  // see that the executor really frees intermediates.
  static int64_t LiveBuffers();

 private:
  struct Buffer {
    explicit Buffer(int64_t bytes);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    void* data = nullptr;
  };

  DataType dtype_ = onnx::TensorProto::UNDEFINED;
  std::vector<int64_t> shape_;
  int64_t size_ = 0;
  std::shared_ptr<Buffer> buffer_;
};

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_TENSOR_H_
