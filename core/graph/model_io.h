// Reading and writing serialized ONNX models, and the model-level facts
// (opset) the rest of core asks about.
#ifndef QUANTD_CORE_GRAPH_MODEL_IO_H_
#define QUANTD_CORE_GRAPH_MODEL_IO_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/cancellation.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// Parsing and serializing poll `cancel` every this many bytes (between runs
// of fields, and within a large tensor's raw_data), so a cancelled parse or
// serialization stops within one piece (well under a millisecond of copying)
// rather than after the whole model.
inline constexpr int kModelIoChunkBytes = 1 << 20;

// Parses a serialized ModelProto of any size protobuf can represent (the
// default 64 MiB total-bytes limit is lifted). INVALID_ARGUMENT for empty,
// truncated or otherwise unparsable bytes, and for a parse that yields no
// graph (almost any byte string is a valid empty message). CANCELLED
// ("cancelled during parse") once `cancel` (may be null) is set. Protobuf
// reads from `bytes` directly, so every string (raw_data) is allocated once
// at its final size: the parsed model holds about bytes.size().
absl::StatusOr<onnx::ModelProto> ParseModel(
    absl::string_view bytes, const CancellationToken* cancel = nullptr);

// Serializes deterministically into one string allocated at the final size.
// INVALID_ARGUMENT when the model is over protobuf's 2 GiB message limit;
// CANCELLED ("cancelled during serialize") once `cancel` (may be null) is set.
absl::StatusOr<std::string> SerializeModel(
    const onnx::ModelProto& model, const CancellationToken* cancel = nullptr);

// The version of the default ("" or "ai.onnx") domain in opset_import; 0 when
// the model imports none.
int64_t DefaultOpset(const onnx::ModelProto& model);

// Sets the default-domain opset import (adding one when missing).
void SetDefaultOpset(onnx::ModelProto* model, int64_t version);

namespace internal {

// ParseModel with the piece size as a parameter (ParseModel passes
// kModelIoChunkBytes; 0 counts as 1). Only fields over a piece take the
// hand-walked paths, so tests and the fuzzer (fuzz/parse_model_fuzzer.cc)
// pass a few bytes to reach them with small inputs. Not for production use.
absl::StatusOr<onnx::ModelProto> ParseModelInPieces(
    absl::string_view bytes, size_t piece_bytes,
    const CancellationToken* cancel = nullptr);

}  // namespace internal

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_MODEL_IO_H_
