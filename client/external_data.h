// Models saved with ONNX external data: tensor bytes in files beside the
// .onnx, as onnx.save(..., save_as_external_data=True) and exporters of large
// models write them. The server never opens a path a request names, so the
// SDK reads the files: it streams their bytes after the model (the
// external_data stream of core/graph/external_stream.h), or reads them inline
// for a model under 2 GB, and writes a returned model out either way.
#ifndef QUANTD_CLIENT_EXTERNAL_DATA_H_
#define QUANTD_CLIENT_EXTERNAL_DATA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/file_util.h"
#include "client/quantd_client.h"

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

// A model saved with external data, ready to send without holding its data
// in memory: the ModelProto with every external tensor relocated into one
// stream (location "quantd:external_data", packed in the order of
// graph::ForEachTensor), and a source that reads the stream from the data
// files while the SDK sends it. Any size: the only way to send a model over
// 2 GB. Every reference is checked here, before anything is sent:
// INVALID_ARGUMENT naming the tensor for an absolute location, a ".."
// component, a location that resolves outside base_dir (the model file's
// directory; through symlinks too), a file that is missing or not regular,
// an offset or length past the file's end, a length other than the
// tensor's size, a tensor of no fixed size (strings).
struct StreamedModel {
  std::string model;
  ExternalDataSource external;
  ExternalDataInfo info;
};
absl::StatusOr<StreamedModel> OpenModelForStreaming(
    absl::string_view model_bytes, const std::string& base_dir);

// The model with every external tensor's bytes read into raw_data (checks
// as OpenModelForStreaming's). RESOURCE_EXHAUSTED when the result would pass
// the 2 GB a protobuf message can hold.
absl::StatusOr<std::string> InlineExternalData(
    absl::string_view model_bytes, const std::string& base_dir,
    ExternalDataInfo* info = nullptr);

// A model whose tensors are located in `external_data` (a returned
// QuantizeOutcome) with every tensor's bytes inside it; RESOURCE_EXHAUSTED
// past 2 GB.
absl::StatusOr<std::string> InlineStreamedData(absl::string_view model_bytes,
                                               std::string external_data);

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

// Writes a Quantize result to `path`: with `as_external`, as ONNX's model
// and data file (`path` + ".data"; the returned stream is already laid out
// as one, so it is written as it came); otherwise as one file with every
// tensor inline (RESOURCE_EXHAUSTED past 2 GB). A result without external
// data is written as WriteModelWithExternalData or as it came. Data file
// first, each atomically.
absl::Status SaveQuantizedModel(const std::string& model_bytes,
                                std::string external_data,
                                const std::string& path, bool as_external,
                                ExternalDataInfo* info = nullptr);

// A Quantize result written to `path` while it arrives, so that the client
// holds one chunk of its external data at a time, however large the model:
// Sink() is QuantizeCallbacks::on_external_data and appends each chunk to
// the data file (`path` + ".data", the stream as it came), Finish writes the
// model naming it. Both files appear whole or not at all, the data file
// first; a writer destroyed before Finish succeeds leaves neither behind
// (and an existing file at either path untouched). A result that came
// without external data is written as SaveQuantizedModel(as_external=true)
// writes it.
class StreamedModelWriter {
 public:
  // INVALID_ARGUMENT (NOT_FOUND for a missing directory) when the data
  // file's temporary file cannot be created.
  static absl::StatusOr<std::unique_ptr<StreamedModelWriter>> Create(
      const std::string& path);
  ~StreamedModelWriter();
  StreamedModelWriter(const StreamedModelWriter&) = delete;
  StreamedModelWriter& operator=(const StreamedModelWriter&) = delete;

  // For QuantizeCallbacks::on_external_data; valid while the writer lives.
  std::function<absl::Status(absl::string_view chunk)> Sink();
  // Writes the returned model (QuantizeOutcome::model) and commits the data
  // file. INTERNAL when a tensor lies outside the bytes received. Once.
  absl::Status Finish(const std::string& model_bytes,
                      ExternalDataInfo* info = nullptr);

 private:
  StreamedModelWriter(std::string path, std::unique_ptr<AtomicFile> data)
      : path_(std::move(path)), data_(std::move(data)) {}

  std::string path_;
  std::unique_ptr<AtomicFile> data_;  // Null once Finish ran.
};

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_EXTERNAL_DATA_H_
