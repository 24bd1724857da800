#include "core/graph/tensor_util.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/checked_count.h"
#include "core/base/status_macros.h"

namespace quantd::graph {
namespace {

// ONNX stores raw_data little-endian; memcpy is only right on such hosts.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "raw_data decoding assumes a little-endian host");

using onnx::TensorProto;

// Bits per element in raw_data; 0 for types with no fixed size (strings)
// and for numbers that are no ONNX type.
int64_t ElementBits(int32_t type) {
  switch (type) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
    case TensorProto::UINT32:
      return 32;
    case TensorProto::UINT8:
    case TensorProto::INT8:
    case TensorProto::BOOL:
    case kFloat8E4M3Fn:
    case kFloat8E4M3Fnuz:
    case kFloat8E5M2:
    case kFloat8E5M2Fnuz:
    case kFloat8E8M0:
      return 8;
    case TensorProto::UINT16:
    case TensorProto::INT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      return 16;
    case TensorProto::INT64:
    case TensorProto::UINT64:
    case TensorProto::DOUBLE:
    case TensorProto::COMPLEX64:
      return 64;
    case TensorProto::COMPLEX128:
      return 128;
    case kUint4:
    case kInt4:
    case kFloat4E2M1:
      return 4;
    case kUint2:
    case kInt2:
      return 2;
    default:
      return 0;
  }
}

// Bytes per element in raw_data for whole-byte types; 0 otherwise.
int64_t RawElementBytes(int32_t type) {
  const int64_t bits = ElementBits(type);
  return bits % 8 == 0 ? bits / 8 : 0;
}

// Number of entries of the typed field that holds `type`, and how many
// entries one element takes.
std::pair<int64_t, int64_t> TypedFieldSize(const TensorProto& t) {
  switch (t.data_type()) {
    case TensorProto::FLOAT:
      return {t.float_data_size(), 1};
    case TensorProto::COMPLEX64:
      return {t.float_data_size(), 2};
    case TensorProto::DOUBLE:
      return {t.double_data_size(), 1};
    case TensorProto::COMPLEX128:
      return {t.double_data_size(), 2};
    case TensorProto::INT64:
      return {t.int64_data_size(), 1};
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      return {t.uint64_data_size(), 1};
    case TensorProto::STRING:
      return {t.string_data_size(), 1};
    case kUint4:
    case kInt4:
    case kFloat4E2M1:
    case kUint2:
    case kInt2:
      // Packed as in raw_data, one byte per int32_data entry; the caller
      // counts bytes for these.
      return {t.int32_data_size(), 1};
    default:
      return {t.int32_data_size(), 1};
  }
}

}  // namespace

int64_t NumElements(const TensorProto& tensor) {
  absl::StatusOr<int64_t> n = CheckedElementCount(
      absl::MakeConstSpan(tensor.dims().data(), tensor.dims().size()));
  return n.ok() ? *n : -1;
}

std::vector<int64_t> Dims(const TensorProto& tensor) {
  return {tensor.dims().begin(), tensor.dims().end()};
}

bool HasExternalData(const TensorProto& tensor) {
  return tensor.data_location() == TensorProto::EXTERNAL;
}

bool IsOnnxDataType(int32_t type) {
  return type > TensorProto::UNDEFINED && type <= kNewestOnnxDataType;
}

absl::StatusOr<int64_t> RawDataBytes(const TensorProto& tensor) {
  const int64_t n = NumElements(tensor);
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name(), "' has a negative or overflowing shape"));
  }
  const int64_t bits = ElementBits(tensor.data_type());
  if (bits == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' of element type ",
                     tensor.data_type(), " has no fixed size in bytes"));
  }
  const int64_t per_byte = bits < 8 ? 8 / bits : 1;
  absl::StatusOr<int64_t> bytes = n / per_byte + (n % per_byte != 0);
  if (bits >= 8) bytes = CheckedByteSize(n, bits / 8);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name(), "': ", bytes.status().message()));
  }
  return *bytes;
}

absl::Status CheckTensorSize(const TensorProto& tensor) {
  if (HasExternalData(tensor)) return absl::OkStatus();
  const int64_t n = NumElements(tensor);
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name(), "' has a negative or overflowing shape"));
  }
  const int64_t bits = ElementBits(tensor.data_type());
  int64_t have = 0;
  int64_t want = n;
  if (tensor.has_raw_data() || bits % 8 != 0) {
    // Sub-byte types are packed in raw_data and in int32_data alike.
    if (bits == 0) return absl::OkStatus();  // Strings: not checkable.
    have = tensor.has_raw_data()
               ? static_cast<int64_t>(tensor.raw_data().size())
               : TypedFieldSize(tensor).first;
    QUANTD_ASSIGN_OR_RETURN(want, RawDataBytes(tensor));
  } else {
    auto [entries, per_element] = TypedFieldSize(tensor);
    have = entries;
    absl::StatusOr<int64_t> count = CheckedByteSize(n, per_element);
    if (!count.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name(), "': ", count.status().message()));
    }
    want = *count;
  }
  if (have != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name(), "' has dims for ", n, " elements but its ",
        tensor.has_raw_data() ? "raw_data has " : "data field has ", have,
        tensor.has_raw_data() ? " bytes" : " entries", " (expected ", want,
        ")"));
  }
  return absl::OkStatus();
}

namespace {

// What reading a tensor's values as floats needs: FLOAT, held in the model,
// data of the declared size.
absl::Status CheckFloatTensor(const TensorProto& tensor) {
  if (tensor.data_type() != TensorProto::FLOAT) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' is not FLOAT"));
  }
  if (HasExternalData(tensor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name(),
        "' stores its values in an external file, which is not part of the "
        "model bytes"));
  }
  QUANTD_RETURN_IF_ERROR(CheckTensorSize(tensor));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<float>> ReadFloatTensor(const TensorProto& tensor) {
  QUANTD_RETURN_IF_ERROR(CheckFloatTensor(tensor));
  std::vector<float> values(NumElements(tensor));
  if (tensor.has_raw_data()) {
    // An empty vector's data() may be null, which memcpy must not see.
    if (!values.empty()) {
      std::memcpy(values.data(), tensor.raw_data().data(),
                  values.size() * sizeof(float));
    }
  } else {
    std::copy(tensor.float_data().begin(), tensor.float_data().end(),
              values.begin());
  }
  return values;
}

absl::StatusOr<numerics::FloatBytes> ViewFloatTensor(
    const TensorProto& tensor) {
  QUANTD_RETURN_IF_ERROR(CheckFloatTensor(tensor));
  const int64_t n = NumElements(tensor);
  if (!tensor.has_raw_data()) {
    return numerics::FloatBytes::Of(tensor.float_data());
  }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return absl::UnimplementedError("raw_data is little-endian");
#else
  return numerics::FloatBytes{tensor.raw_data().data(), n};
#endif
}

uint64_t DataBytes(const TensorProto& tensor) {
  if (tensor.has_raw_data()) return tensor.raw_data().size();
  auto [entries, per_element] = TypedFieldSize(tensor);
  const int64_t elem = RawElementBytes(tensor.data_type());
  // Typed fields are wider than the values; count what the values weigh.
  return elem > 0 ? static_cast<uint64_t>(entries / per_element * elem)
                  : static_cast<uint64_t>(entries);
}

TensorProto MakeFloatTensor(const std::string& name,
                            absl::Span<const int64_t> dims,
                            absl::Span<const float> values) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(reinterpret_cast<const char*>(values.data()),
                 values.size() * sizeof(float));
  return t;
}

TensorProto MakeByteTensor(const std::string& name, TensorProto::DataType type,
                           absl::Span<const int64_t> dims, std::string bytes) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::move(bytes));
  return t;
}

void ClearTensorData(TensorProto* tensor) {
  // clear_* keeps the capacity of repeated fields; swapping with empty ones
  // actually returns the memory.
  std::string().swap(*tensor->mutable_raw_data());
  tensor->clear_raw_data();
  google::protobuf::RepeatedField<float>().Swap(tensor->mutable_float_data());
  google::protobuf::RepeatedField<int32_t>().Swap(tensor->mutable_int32_data());
  google::protobuf::RepeatedField<int64_t>().Swap(tensor->mutable_int64_data());
  google::protobuf::RepeatedField<double>().Swap(tensor->mutable_double_data());
  google::protobuf::RepeatedField<uint64_t>().Swap(
      tensor->mutable_uint64_data());
  tensor->clear_string_data();
}

}  // namespace quantd::graph
