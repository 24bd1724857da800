#include "core/graph/model_io.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/huge_pages.h"
#include "core/base/onnx_names.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/message_lite.h"

namespace quantd::graph {
namespace {

bool Cancelled(const CancellationToken* cancel) {
  return cancel != nullptr && cancel->IsCancelled();
}

// How a parse is cut up: `cancel` is polled every `piece_bytes` or so, and
// only fields over `piece_bytes` are walked or copied here rather than by
// protobuf. kModelIoChunkBytes, except in internal::ParseModelInPieces.
struct Pieces {
  const CancellationToken* cancel;
  size_t piece_bytes;
};

// One field of a serialized message, as found on the wire.
struct WireField {
  int number = 0;
  int wire_type = 0;
  size_t size = 0;            // Tag through the end of the field.
  absl::string_view payload;  // Length-delimited fields only.
};

constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// Protobuf reads a varint value in up to 10 bytes, but a tag or a length in
// at most 5 (ReadTag, ReadSize) and rejects longer, zero-padded encodings of
// them: so must the walker, or it would accept such a field that protobuf's
// parse fails on.
constexpr int kMaxVarintBytes = 10, kMaxTagOrSizeBytes = 5;

bool ReadVarint(absl::string_view* in, uint64_t* value,
                int max_bytes = kMaxVarintBytes) {
  uint64_t result = 0;
  for (int shift = 0; shift < 7 * max_bytes && !in->empty(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    result |= uint64_t{byte & 0x7fu} << shift;
    if (byte < 0x80) {
      *value = result;
      return true;
    }
  }
  return false;
}

// Delimits the field at the front of `bytes`. False for anything but a
// well-formed varint, fixed or length-delimited field (groups, bad tags,
// truncation): those bytes are left to protobuf, which keeps or rejects them
// exactly as a whole-message parse would.
bool FrontField(absl::string_view bytes, WireField* field) {
  absl::string_view rest = bytes;
  uint64_t tag = 0;
  if (!ReadVarint(&rest, &tag, kMaxTagOrSizeBytes) ||
      tag > std::numeric_limits<uint32_t>::max() || (tag >> 3) == 0) {
    return false;
  }
  field->number = static_cast<int>(tag >> 3);
  field->wire_type = static_cast<int>(tag & 7);
  field->payload = {};
  uint64_t value = 0;
  switch (field->wire_type) {
    case kVarint:
      if (!ReadVarint(&rest, &value)) return false;
      break;
    case kFixed64:
    case kFixed32: {
      const size_t n = field->wire_type == kFixed64 ? 8 : 4;
      if (rest.size() < n) return false;
      rest.remove_prefix(n);
      break;
    }
    case kLengthDelimited:
      if (!ReadVarint(&rest, &value, kMaxTagOrSizeBytes) ||
          value > rest.size()) {
        return false;
      }
      field->payload = rest.substr(0, value);
      rest.remove_prefix(value);
      break;
    default:
      return false;
  }
  field->size = bytes.size() - rest.size();
  return true;
}

// Parses `bytes` into `message` from one flat buffer, so protobuf allocates
// each string at its final size (reading a stream in pieces, it grows a
// string over 50 MB by doubling: up to 2x the tensor). `message` is `depth`
// messages deep in the model (graph 1, initializer 2): a whole-model parse
// would have spent that much of protobuf's recursion limit on reaching it,
// so this parse gets only the rest, and rejects the same too-deep nesting.
bool MergeFlat(absl::string_view bytes, int depth,
               google::protobuf::MessageLite* message) {
  if (bytes.empty()) return true;
  using google::protobuf::io::CodedInputStream;
  CodedInputStream input(reinterpret_cast<const uint8_t*>(bytes.data()),
                         static_cast<int>(bytes.size()));
  input.SetRecursionLimit(CodedInputStream::GetDefaultRecursionLimit() - depth);
  // Not consumed: stopped early at a 0 or end-group tag, which a
  // whole-message parse rejects.
  return message->MergeFromCodedStream(&input) && input.ConsumedEntireMessage();
}

// Merges the serialized `bytes` into `message` as one protobuf parse would
// (merging serialized fields in order is what parsing their concatenation
// means), but with cancellation checks between pieces: the fields
// `claims(field)` accepts go to `take(field)`; the others are parsed by
// protobuf in runs of about `pieces.piece_bytes`. False when the bytes are
// invalid or the parse was cancelled.
template <typename Claims, typename Take>
bool MergeInPieces(absl::string_view bytes, int depth,
                   google::protobuf::MessageLite* message, const Pieces& pieces,
                   const Claims& claims, const Take& take) {
  size_t run_begin = 0;
  size_t at = 0;
  auto flush_run = [&]() {
    if (Cancelled(pieces.cancel)) return false;
    const bool ok =
        MergeFlat(bytes.substr(run_begin, at - run_begin), depth, message);
    run_begin = at;
    return ok;
  };
  WireField field;
  while (at < bytes.size() && FrontField(bytes.substr(at), &field)) {
    if (claims(field)) {
      if (!flush_run() || !take(field)) return false;
      at += field.size;
      run_begin = at;
    } else {
      at += field.size;
      if (at - run_begin >= pieces.piece_bytes && !flush_run()) {
        return false;
      }
    }
  }
  at = bytes.size();
  return flush_run();
}

// Copies `from` into `to` (sized once) in `pieces.piece_bytes` pieces: even a
// 1 GiB tensor stops within a piece once cancelled.
bool CopyInPieces(absl::string_view from, std::string* to,
                  const Pieces& pieces) {
  to->clear();
  to->reserve(from.size());
  AdviseHugePages(to->data(), to->capacity());
  for (size_t at = 0; at < from.size(); at += pieces.piece_bytes) {
    if (Cancelled(pieces.cancel)) return false;
    to->append(from.data() + at,
               std::min(pieces.piece_bytes, from.size() - at));
  }
  return true;
}

bool IsLargeField(const WireField& field, int number, const Pieces& pieces) {
  return field.number == number && field.wire_type == kLengthDelimited &&
         field.payload.size() > pieces.piece_bytes;
}

// A tensor's raw_data is where nearly all of a model's bytes are.
bool MergeTensor(absl::string_view bytes, onnx::TensorProto* tensor,
                 const Pieces& pieces) {
  return MergeInPieces(
      bytes, /*depth=*/2, tensor, pieces,
      [&](const WireField& field) {
        return IsLargeField(field, onnx::TensorProto::kRawDataFieldNumber,
                            pieces);
      },
      [&](const WireField& field) {
        return CopyInPieces(field.payload, tensor->mutable_raw_data(), pieces);
      });
}

bool MergeGraph(absl::string_view bytes, onnx::GraphProto* graph,
                const Pieces& pieces) {
  return MergeInPieces(
      bytes, /*depth=*/1, graph, pieces,
      [&](const WireField& field) {
        return IsLargeField(field, onnx::GraphProto::kInitializerFieldNumber,
                            pieces);
      },
      [&](const WireField& field) {
        return MergeTensor(field.payload, graph->add_initializer(), pieces);
      });
}

// Thrown by CancellableOutput::Next, caught in SerializeModel: nothing else
// stops protobuf's serializer midway. Failing Next does not: protobuf's error
// path goes on through the whole rest of the message (copying it into a
// scratch buffer), which for a large model takes as long as serializing it.
// Unwinding is safe here: serializing allocates nothing (SerializeModel
// skips the one destructor that would touch the abandoned stream).
struct SerializationCancelled {};

// A string of `capacity` reserved bytes, grown and handed out in
// kModelIoChunkBytes pieces (so even touching the output's pages happens
// piece by piece, between cancellation checks); throws
// SerializationCancelled once cancelled.
class CancellableOutput final
    : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  CancellableOutput(std::string* out, size_t capacity,
                    const CancellationToken* cancel)
      : out_(out), capacity_(capacity), cancel_(cancel) {
    out_->clear();
    out_->reserve(capacity_);  // No reallocation: pieces stay valid.
    AdviseHugePages(out_->data(), out_->capacity());
  }

  bool Next(void** data, int* size) override {
    if (Cancelled(cancel_)) throw SerializationCancelled();
    if (position_ >= capacity_) return false;
    const size_t n =
        std::min<size_t>(kModelIoChunkBytes, capacity_ - position_);
    out_->resize(position_ + n);
    *data = out_->data() + position_;
    *size = static_cast<int>(n);
    position_ += n;
    return true;
  }
  void BackUp(int count) override { position_ -= count; }
  int64_t ByteCount() const override { return position_; }

  // Drops the unwritten tail of the last piece. Not a destructor: that would
  // run after `out` was moved into SerializeModel's result and re-grow the
  // moved-from string to the full size (a second, zero-filled copy).
  void Finish() { out_->resize(position_); }

 private:
  std::string* const out_;
  const size_t capacity_;
  const CancellationToken* const cancel_;
  size_t position_ = 0;
};

}  // namespace

absl::StatusOr<onnx::ModelProto> ParseModel(absl::string_view bytes,
                                            const CancellationToken* cancel) {
  return internal::ParseModelInPieces(bytes, kModelIoChunkBytes, cancel);
}

namespace internal {

absl::StatusOr<onnx::ModelProto> ParseModelInPieces(
    absl::string_view bytes, size_t piece_bytes,
    const CancellationToken* cancel) {
  // A zero piece would never advance CopyInPieces.
  const Pieces pieces{cancel, std::max<size_t>(piece_bytes, 1)};
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        "model is empty (0 bytes); expected a serialized ONNX ModelProto");
  }
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model is ", bytes.size(),
        " bytes; protobuf cannot parse messages of 2 GiB or more"));
  }
  // The model's own fields, its graph's and its large initializers' are
  // walked here so that cancellation is checked every piece or so;
  // everything else is parsed by protobuf straight from `bytes`.
  onnx::ModelProto model;
  const bool parsed = MergeInPieces(
      bytes, /*depth=*/0, &model, pieces,
      [](const WireField& field) {
        return field.number == onnx::ModelProto::kGraphFieldNumber &&
               field.wire_type == kLengthDelimited;
      },
      [&](const WireField& field) {
        return MergeGraph(field.payload, model.mutable_graph(), pieces);
      });
  if (Cancelled(cancel)) return cancel->Check("parse");
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model bytes (", bytes.size(),
        " bytes) are not a valid ONNX ModelProto: the protobuf parse failed "
        "(truncated, not an ONNX file, or messages nested deeper than "
        "protobuf's limit of 100)"));
  }
  if (!model.has_graph()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model bytes (", bytes.size(),
        " bytes) parsed as a ModelProto without a graph; not an ONNX model"));
  }
  return model;
}

}  // namespace internal

absl::StatusOr<std::string> SerializeModel(const onnx::ModelProto& model,
                                           const CancellationToken* cancel) {
  const size_t size = model.ByteSizeLong();
  if (size > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("output model would be ", size,
                     " bytes, over protobuf's 2 GiB message limit"));
  }
  std::string out;
  CancellableOutput pieces(&out, size, cancel);
  // The CodedOutputStream lives in raw storage so that a cancel can skip its
  // destructor: unwound from inside protobuf, it is mid-way through a piece
  // and its Trim would flush into stale pointers. It owns no heap memory,
  // so skipping the destructor leaks nothing.
  using google::protobuf::io::CodedOutputStream;
  alignas(CodedOutputStream) unsigned char storage[sizeof(CodedOutputStream)];
  CodedOutputStream* output = nullptr;
  try {
    output = new (storage) CodedOutputStream(&pieces);
    output->SetSerializationDeterministic(true);
    model.SerializeWithCachedSizes(output);
  } catch (const SerializationCancelled&) {
    return cancel->Check("serialize");
  }
  output->Trim();
  const bool failed = output->HadError();
  output->~CodedOutputStream();
  const int64_t written = pieces.ByteCount();
  if (failed || static_cast<size_t>(written) != size) {
    return absl::InternalError("serializing the output model failed");
  }
  pieces.Finish();
  return out;
}

int64_t DefaultOpset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (IsDefaultDomain(opset.domain())) return opset.version();
  }
  return 0;
}

void SetDefaultOpset(onnx::ModelProto* model, int64_t version) {
  for (auto& opset : *model->mutable_opset_import()) {
    if (IsDefaultDomain(opset.domain())) {
      opset.set_version(version);
      return;
    }
  }
  auto* opset = model->add_opset_import();
  opset->set_domain("");
  opset->set_version(version);
}

}  // namespace quantd::graph
