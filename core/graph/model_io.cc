#include "core/graph/model_io.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/base/onnx_names.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace quantd::graph {
namespace {

bool Cancelled(const CancellationToken* cancel) {
  return cancel != nullptr && cancel->IsCancelled();
}

// The model bytes in kModelIoChunkBytes pieces, ending early (as if the
// input were exhausted) once cancelled. Protobuf copies long fields (a
// tensor's raw_data) piece by piece, so even one 1 GiB tensor is
// interruptible.
class CancellableInput final
    : public google::protobuf::io::ZeroCopyInputStream {
 public:
  CancellableInput(absl::string_view bytes, const CancellationToken* cancel)
      : bytes_(bytes), cancel_(cancel) {}

  bool Next(const void** data, int* size) override {
    if (position_ >= bytes_.size() || Cancelled(cancel_)) return false;
    const size_t n =
        std::min<size_t>(kModelIoChunkBytes, bytes_.size() - position_);
    *data = bytes_.data() + position_;
    *size = static_cast<int>(n);
    position_ += n;
    return true;
  }
  void BackUp(int count) override { position_ -= count; }
  bool Skip(int count) override {
    if (static_cast<size_t>(count) > bytes_.size() - position_) {
      position_ = bytes_.size();
      return false;
    }
    position_ += count;
    return true;
  }
  int64_t ByteCount() const override { return position_; }

 private:
  const absl::string_view bytes_;
  const CancellationToken* const cancel_;
  size_t position_ = 0;
};

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
  }
  ~CancellableOutput() override { out_->resize(position_); }

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

 private:
  std::string* const out_;
  const size_t capacity_;
  const CancellationToken* const cancel_;
  size_t position_ = 0;
};

}  // namespace

absl::StatusOr<onnx::ModelProto> ParseModel(absl::string_view bytes,
                                            const CancellationToken* cancel) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        "model is empty (0 bytes); expected a serialized ONNX ModelProto");
  }
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model is ", bytes.size(),
        " bytes; protobuf cannot parse messages of 2 GiB or more"));
  }
  // CodedInputStream makes the size limit explicit (models of hundreds of
  // MiB are normal), and over a CancellableInput the parse can be stopped.
  CancellableInput pieces(bytes, cancel);
  onnx::ModelProto model;
  bool parsed = false;
  {
    google::protobuf::io::CodedInputStream input(&pieces);
    input.SetTotalBytesLimit(std::numeric_limits<int>::max());
    parsed =
        model.ParseFromCodedStream(&input) && input.ConsumedEntireMessage();
  }
  if (Cancelled(cancel)) return cancel->Check("parse");
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model bytes (", bytes.size(),
        " bytes) are not a valid ONNX ModelProto: the protobuf parse failed "
        "(truncated or not an ONNX file)"));
  }
  if (!model.has_graph()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model bytes (", bytes.size(),
        " bytes) parsed as a ModelProto without a graph; not an ONNX model"));
  }
  return model;
}

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
  return out;  // `pieces` trims it to `written` as it goes.
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
