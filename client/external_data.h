// Models saved with ONNX external data: tensor bytes in files beside the
// .onnx, as onnx.save(..., save_as_external_data=True) and exporters of large
// models write them. quantd takes a model as one message whose tensors hold
// their own bytes (the server never opens a path a request names), so the
// SDK reads the files in before sending, and can write a returned model out
// the same way.
#ifndef QUANTD_CLIENT_EXTERNAL_DATA_H_
#define QUANTD_CLIENT_EXTERNAL_DATA_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quantd::client {

// What InlineExternalData read or WriteModelWithExternalData wrote.
struct ExternalDataInfo {
  int64_t tensors = 0;  // Tensors whose bytes live in a data file.
  int64_t bytes = 0;    // Their bytes.
  int64_t files = 0;    // Distinct data files.
};

// Whether any tensor of the serialized model keeps its bytes outside it:
// initializers of the graph and of subgraphs, attribute tensors (Constant
// and others), sparse tensors, function bodies. Reads only field headers,
// skipping the tensor bytes. False for bytes that are no ModelProto (the
// server says what is wrong with them).
bool UsesExternalData(absl::string_view model_bytes);

// The model with every external tensor's bytes read into raw_data from the
// file its `location` names relative to `base_dir` (the model file's
// directory), at `offset` for `length` bytes (the tensor's size when absent).
// INVALID_ARGUMENT naming the tensor for: an absolute location, a ".."
// component, a location that resolves outside base_dir (through symlinks
// too), a file that is missing or not regular, an offset or length past
// the file's end, a length other than the tensor's size, a tensor of no
// fixed size (strings). RESOURCE_EXHAUSTED when the result would pass the
// 2 GB a protobuf message can hold.
absl::StatusOr<std::string> InlineExternalData(
    absl::string_view model_bytes, const std::string& base_dir,
    ExternalDataInfo* info = nullptr);

// Writes the serialized model to `path` with every tensor of at least
// `min_bytes` bytes of raw_data moved, in order, into one data file beside it
// named after it (`path`'s file name + ".data"), each at a 64-byte aligned
// offset, as ONNX records it (location, offset, length). The data file is
// written before the model, each atomically: a reader never finds a model
// whose data is not there yet.
absl::Status WriteModelWithExternalData(absl::string_view model_bytes,
                                        const std::string& path,
                                        int64_t min_bytes = 1024,
                                        ExternalDataInfo* info = nullptr);

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_EXTERNAL_DATA_H_
