// Reading and building ONNX TensorProtos (initializers, Constant values).
#ifndef QUANTD_CORE_GRAPH_TENSOR_UTIL_H_
#define QUANTD_CORE_GRAPH_TENSOR_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/numerics/float_bytes.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// ONNX element types newer than libonnx 1.12's enum (onnx.proto's
// TensorProto.DataType numbers), which models may carry: ONNX Runtime 1.30
// loads all of them.
inline constexpr int32_t kFloat8E4M3Fn = 17;
inline constexpr int32_t kFloat8E4M3Fnuz = 18;
inline constexpr int32_t kFloat8E5M2 = 19;
inline constexpr int32_t kFloat8E5M2Fnuz = 20;
inline constexpr int32_t kUint4 = 21;
inline constexpr int32_t kInt4 = 22;
inline constexpr int32_t kFloat4E2M1 = 23;
inline constexpr int32_t kFloat8E8M0 = 24;
inline constexpr int32_t kUint2 = 25;
inline constexpr int32_t kInt2 = 26;
inline constexpr int32_t kNewestOnnxDataType = kInt2;

// True for a TensorProto.DataType number ONNX defines (UNDEFINED is not).
bool IsOnnxDataType(int32_t type);

// Product of the dims (1 for a scalar). -1 when a dim is negative or the
// product overflows.
int64_t NumElements(const onnx::TensorProto& tensor);

std::vector<int64_t> Dims(const onnx::TensorProto& tensor);

// The bytes raw_data holds for the tensor's dims and element type (sub-byte
// types packed); INVALID_ARGUMENT for a negative or overflowing shape and for
// types of no fixed size (strings, unknown numbers).
absl::StatusOr<int64_t> RawDataBytes(const onnx::TensorProto& tensor);

// OK when the tensor's data (raw_data or the typed field) holds exactly
// NumElements values (sub-byte types packed, as ONNX stores them); external
// data is not checked (it is not in the bytes).
absl::Status CheckTensorSize(const onnx::TensorProto& tensor);

// True when the values live outside the model bytes.
bool HasExternalData(const onnx::TensorProto& tensor);

// The values of a FLOAT tensor, from raw_data (little-endian) or float_data.
// INVALID_ARGUMENT for another type, external data or a size mismatch.
absl::StatusOr<std::vector<float>> ReadFloatTensor(
    const onnx::TensorProto& tensor);

// The values of a FLOAT tensor in place, without ReadFloatTensor's copy:
// raw_data (unaligned) or float_data. Valid while the tensor is unchanged.
// Errors as ReadFloatTensor; UNIMPLEMENTED for raw_data on a big-endian
// host (the caller copies with ReadFloatTensor).
absl::StatusOr<numerics::FloatBytes> ViewFloatTensor(
    const onnx::TensorProto& tensor);

// Bytes of the tensor's stored values (what it weighs in the model).
uint64_t DataBytes(const onnx::TensorProto& tensor);

// A FLOAT tensor with raw_data.
onnx::TensorProto MakeFloatTensor(const std::string& name,
                                  absl::Span<const int64_t> dims,
                                  absl::Span<const float> values);

// An INT8 (or UINT8) tensor whose raw_data is `bytes` (one byte per value,
// the two's-complement bit pattern for INT8).
onnx::TensorProto MakeByteTensor(const std::string& name,
                                 onnx::TensorProto::DataType type,
                                 absl::Span<const int64_t> dims,
                                 std::string bytes);

// Frees a tensor's value storage (all data fields), keeping name and dims.
void ClearTensorData(onnx::TensorProto* tensor);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_TENSOR_UTIL_H_
