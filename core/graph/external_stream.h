// ONNX external data as quantd carries it. A model over 2 GB cannot be one
// protobuf message, so its large tensors travel beside it: the request (and
// the response) carries the model with each such tensor marked EXTERNAL and
// located in one byte stream that follows the model on the wire, and the
// stream itself as external_data chunks. The server never opens a path a
// request names; the SDKs read data files and write them.
//
// Protobuf messages only (part of the tensor_io library): the client uses it
// to build and take apart the same form.
#ifndef QUANTD_CORE_GRAPH_EXTERNAL_STREAM_H_
#define QUANTD_CORE_GRAPH_EXTERNAL_STREAM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// The `location` of a tensor whose bytes are in the call's external_data
// stream; its `offset` and `length` are positions in that stream.
inline constexpr absl::string_view kExternalStreamLocation =
    "quantd:external_data";

// The largest message protobuf serializes or parses (2 GiB - 1).
inline constexpr uint64_t kMaxMessageBytes = 2147483647;

// Tensors smaller than this stay inside a model written with external data
// (onnx.save_model's size_threshold).
inline constexpr int64_t kExternalMinBytes = 1024;

// Offsets of tensors a writer puts in a stream or file are multiples of this,
// so that a reader that maps the file can use the values in place.
inline constexpr int64_t kExternalDataAlignment = 64;

// Visits every TensorProto of the model: initializers and sparse
// initializers of the graph and of every subgraph, tensor-valued attributes
// (Constant and others), training info and function bodies, in that order
// (the Python SDK's walk is the same).
using TensorVisitor = std::function<absl::Status(onnx::TensorProto*)>;
absl::Status ForEachTensor(onnx::ModelProto* model, const TensorVisitor& fn);

// The entries ONNX defines for an external tensor.
struct ExternalRef {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;  // -1: not given (the tensor's size).
};

// The tensor's external_data entries; INVALID_ARGUMENT naming the tensor for
// an offset or length that is no non-negative integer, a key given twice or
// no location.
absl::StatusOr<ExternalRef> ReadExternalRef(const onnx::TensorProto& tensor);

// Marks the tensor EXTERNAL at `ref` (replacing any entries it had) and
// drops its raw_data.
void SetExternalRef(const ExternalRef& ref, onnx::TensorProto* tensor);

// Bytes [0, size()) of a stream, in the pieces they arrived (or will leave)
// in: a piece is a message's payload on the way in and a tensor's raw_data
// on the way out, so neither direction copies the stream into one buffer.
class ExternalDataStream {
 public:
  void Append(std::string piece);
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::vector<std::string>& pieces() const { return pieces_; }
  // Empties the stream.
  std::vector<std::string> TakePieces();

 private:
  std::vector<std::string> pieces_;
  uint64_t size_ = 0;
};

// What AttachExternalData found.
struct AttachedExternalData {
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// Moves every EXTERNAL tensor's bytes from `stream` into its raw_data and
// makes it an ordinary tensor. Each must be located at
// kExternalStreamLocation with a length equal to its dims and type's size,
// lie inside the stream and overlap no other; the stream may hold alignment
// padding between tensors (at most kExternalDataAlignment - 1 bytes per
// tensor) and nothing else. INVALID_ARGUMENT naming the tensor otherwise, or
// when the stream is not empty and no tensor refers to it. Pieces are freed
// as soon as every tensor they hold has been copied out (unless
// `keep_stream`), so the model and the stream together stay near the
// stream's size.
absl::StatusOr<AttachedExternalData> AttachExternalData(
    ExternalDataStream* stream, bool keep_stream, onnx::ModelProto* model);

// Moves the raw_data of every tensor of at least `min_bytes` bytes into a
// stream (in ForEachTensor order, each at a kExternalDataAlignment-aligned
// offset, zero padding between) and marks it EXTERNAL at
// kExternalStreamLocation. No tensor bytes are copied.
ExternalDataStream DetachExternalData(int64_t min_bytes,
                                      onnx::ModelProto* model);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_EXTERNAL_STREAM_H_
