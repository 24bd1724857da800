#include "client/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/file_util.h"
#include "core/base/status_macros.h"
#include "core/graph/tensor_util.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "onnx/onnx_pb.h"

namespace quantd::client {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// ------------------------------------------------ the header-only walk

// The ONNX messages on the way from a ModelProto to its tensors.
enum class Kind {
  kNone,
  kModel,
  kTrainingInfo,
  kFunction,
  kGraph,
  kNode,
  kAttribute,
  kSparse,
  kTensor
};

// What field `field` of a `kind` message holds, kNone when no tensor can be
// inside it (field numbers of onnx.proto).
Kind ChildKind(Kind kind, int field) {
  switch (kind) {
    case Kind::kModel:
      if (field == 7) return Kind::kGraph;
      if (field == 20) return Kind::kTrainingInfo;
      if (field == 25) return Kind::kFunction;
      return Kind::kNone;
    case Kind::kTrainingInfo:  // initialization, algorithm.
      return field == 1 || field == 2 ? Kind::kGraph : Kind::kNone;
    case Kind::kFunction:
      return field == 7 ? Kind::kNode : Kind::kNone;
    case Kind::kGraph:
      if (field == 1) return Kind::kNode;
      if (field == 5) return Kind::kTensor;
      if (field == 15) return Kind::kSparse;
      return Kind::kNone;
    case Kind::kNode:
      return field == 5 ? Kind::kAttribute : Kind::kNone;
    case Kind::kAttribute:
      if (field == 5 || field == 10) return Kind::kTensor;
      if (field == 6 || field == 11) return Kind::kGraph;
      if (field == 22 || field == 23) return Kind::kSparse;
      return Kind::kNone;
    case Kind::kSparse:  // values, indices.
      return field == 1 || field == 2 ? Kind::kTensor : Kind::kNone;
    default:
      return Kind::kNone;
  }
}

constexpr int kTensorDataLocation = 14;
constexpr int kMaxDepth = 128;

enum class Walk { kNotFound, kFound, kMalformed };

// Walks the fields of one `kind` message up to the stream's limit.
Walk WalkMessage(CodedInputStream* in, Kind kind, int depth) {
  if (depth > kMaxDepth) return Walk::kMalformed;
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return Walk::kNotFound;  // End of the message (or error).
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (kind == Kind::kTensor && field == kTensorDataLocation &&
        wire == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t location = 0;
      if (!in->ReadVarint64(&location)) return Walk::kMalformed;
      if (location == onnx::TensorProto::EXTERNAL) return Walk::kFound;
      continue;
    }
    const Kind child = ChildKind(kind, field);
    if (child != Kind::kNone &&
        wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length)) return Walk::kMalformed;
      const CodedInputStream::Limit limit =
          in->PushLimit(static_cast<int>(length));
      const Walk found = WalkMessage(in, child, depth + 1);
      if (found != Walk::kNotFound) return found;
      if (!in->ConsumedEntireMessage()) return Walk::kMalformed;
      in->PopLimit(limit);
      continue;
    }
    if (!WireFormatLite::SkipField(in, tag)) return Walk::kMalformed;
  }
}

// ------------------------------------------------ every tensor of a model

using TensorFn = std::function<absl::Status(onnx::TensorProto*)>;

absl::Status ForEachTensor(onnx::GraphProto* graph, const TensorFn& fn);

absl::Status ForEachTensor(onnx::SparseTensorProto* sparse,
                           const TensorFn& fn) {
  if (sparse->has_values())
    QUANTD_RETURN_IF_ERROR(fn(sparse->mutable_values()));
  if (sparse->has_indices()) {
    QUANTD_RETURN_IF_ERROR(fn(sparse->mutable_indices()));
  }
  return absl::OkStatus();
}

absl::Status ForEachTensor(onnx::NodeProto* node, const TensorFn& fn) {
  for (onnx::AttributeProto& a : *node->mutable_attribute()) {
    if (a.has_t()) QUANTD_RETURN_IF_ERROR(fn(a.mutable_t()));
    for (onnx::TensorProto& t : *a.mutable_tensors()) {
      QUANTD_RETURN_IF_ERROR(fn(&t));
    }
    if (a.has_g()) QUANTD_RETURN_IF_ERROR(ForEachTensor(a.mutable_g(), fn));
    for (onnx::GraphProto& g : *a.mutable_graphs()) {
      QUANTD_RETURN_IF_ERROR(ForEachTensor(&g, fn));
    }
    if (a.has_sparse_tensor()) {
      QUANTD_RETURN_IF_ERROR(ForEachTensor(a.mutable_sparse_tensor(), fn));
    }
    for (onnx::SparseTensorProto& s : *a.mutable_sparse_tensors()) {
      QUANTD_RETURN_IF_ERROR(ForEachTensor(&s, fn));
    }
  }
  return absl::OkStatus();
}

absl::Status ForEachTensor(onnx::GraphProto* graph, const TensorFn& fn) {
  for (onnx::TensorProto& t : *graph->mutable_initializer()) {
    QUANTD_RETURN_IF_ERROR(fn(&t));
  }
  for (onnx::SparseTensorProto& s : *graph->mutable_sparse_initializer()) {
    QUANTD_RETURN_IF_ERROR(ForEachTensor(&s, fn));
  }
  for (onnx::NodeProto& n : *graph->mutable_node()) {
    QUANTD_RETURN_IF_ERROR(ForEachTensor(&n, fn));
  }
  return absl::OkStatus();
}

absl::Status ForEachTensor(onnx::ModelProto* model, const TensorFn& fn) {
  if (model->has_graph()) {
    QUANTD_RETURN_IF_ERROR(ForEachTensor(model->mutable_graph(), fn));
  }
  for (onnx::TrainingInfoProto& info : *model->mutable_training_info()) {
    if (info.has_initialization()) {
      QUANTD_RETURN_IF_ERROR(ForEachTensor(info.mutable_initialization(), fn));
    }
    if (info.has_algorithm()) {
      QUANTD_RETURN_IF_ERROR(ForEachTensor(info.mutable_algorithm(), fn));
    }
  }
  for (onnx::FunctionProto& f : *model->mutable_functions()) {
    for (onnx::NodeProto& n : *f.mutable_node()) {
      QUANTD_RETURN_IF_ERROR(ForEachTensor(&n, fn));
    }
  }
  return absl::OkStatus();
}

// ------------------------------------------------ reading data files

// The largest message protobuf serializes.
constexpr uint64_t kMaxMessageBytes = INT_MAX;

struct DataFile {
  int fd = -1;
  int64_t size = 0;
  ~DataFile() {
    if (fd >= 0) close(fd);
  }
};

absl::StatusOr<std::string> RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> real(
      realpath(path.c_str(), nullptr), &std::free);
  if (real == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", path, ": ", std::strerror(errno)));
  }
  return std::string(real.get());
}

// The entries ONNX defines for an external tensor.
struct ExternalRef {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;  // -1: the tensor's size.
};

absl::StatusOr<ExternalRef> ReadRef(const onnx::TensorProto& t) {
  ExternalRef ref;
  for (const onnx::StringStringEntryProto& e : t.external_data()) {
    int64_t* number = e.key() == "offset"   ? &ref.offset
                      : e.key() == "length" ? &ref.length
                                            : nullptr;
    if (e.key() == "location") {
      ref.location = e.value();
    } else if (number != nullptr &&
               (!absl::SimpleAtoi(e.value(), number) || *number < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("external tensor '", t.name(), "' has ", e.key(), " '",
                       e.value(), "', not a non-negative integer"));
    }
  }
  if (ref.location.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("external tensor '", t.name(), "' names no location"));
  }
  const std::filesystem::path location(ref.location);
  bool climbs = false;
  for (const auto& part : location) climbs |= part == "..";
  if (location.is_absolute() || climbs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "external tensor '", t.name(), "' has location '", ref.location,
        "': a location must be a path below the model's directory (no "
        "absolute path, no '..')"));
  }
  return ref;
}

class Inliner {
 public:
  Inliner(std::string root, uint64_t model_bytes)
      : root_(std::move(root)), total_(model_bytes) {}

  absl::Status Inline(onnx::TensorProto* t) {
    if (!graph::HasExternalData(*t)) return absl::OkStatus();
    QUANTD_ASSIGN_OR_RETURN(const ExternalRef ref, ReadRef(*t));
    absl::StatusOr<int64_t> want = graph::RawDataBytes(*t);
    if (!want.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "external tensor '", t->name(), "': ", want.status().message()));
    }
    if (ref.length >= 0 && ref.length != *want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "external tensor '", t->name(), "' has length ", ref.length,
          " but its dims and type need ", *want, " bytes"));
    }
    QUANTD_ASSIGN_OR_RETURN(DataFile * file, Open(ref.location, t->name()));
    if (ref.offset > file->size || *want > file->size - ref.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("external tensor '", t->name(), "' reads ", *want,
                       " bytes at offset ", ref.offset, " of '", ref.location,
                       "', which has ", file->size));
    }
    total_ += static_cast<uint64_t>(*want);
    if (total_ > kMaxMessageBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the model with its external data is over ", total_,
          " bytes; one protobuf message holds at most 2 GB (", kMaxMessageBytes,
          " bytes), and quantd takes a model as one message"));
    }
    std::string* raw = t->mutable_raw_data();
    raw->resize(static_cast<size_t>(*want));
    int64_t done = 0;
    while (done < *want) {
      const ssize_t n =
          pread(file->fd, raw->data() + done, static_cast<size_t>(*want - done),
                static_cast<off_t>(ref.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot read external tensor '", t->name(), "' from ", ref.location,
            ": ", n < 0 ? std::strerror(errno) : "unexpected end"));
      }
      done += n;
    }
    t->clear_external_data();
    t->clear_data_location();
    ++info_.tensors;
    info_.bytes += *want;
    return graph::CheckTensorSize(*t);
  }

  const ExternalDataInfo& info() const { return info_; }

 private:
  absl::StatusOr<DataFile*> Open(const std::string& location,
                                 const std::string& tensor) {
    auto it = files_.find(location);
    if (it != files_.end()) return it->second.get();
    absl::StatusOr<std::string> real = RealPath(root_ + "/" + location);
    if (!real.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "external tensor '", tensor, "': ", real.status().message()));
    }
    if (real->compare(0, root_.size() + 1, root_ + "/") != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("external tensor '", tensor, "' has location '",
                       location, "', which resolves to ", *real,
                       ", outside the model's directory ", root_));
    }
    auto file = std::make_unique<DataFile>();
    do {
      file->fd = open(real->c_str(), O_RDONLY | O_CLOEXEC);
    } while (file->fd < 0 && errno == EINTR);
    struct stat st;
    if (file->fd < 0 || fstat(file->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "external tensor '", tensor, "': ", *real, " is not a readable file",
          file->fd < 0 ? absl::StrCat(" (", std::strerror(errno), ")") : ""));
    }
    file->size = st.st_size;
    ++info_.files;
    return (files_[location] = std::move(file)).get();
  }

  const std::string root_;
  uint64_t total_;
  absl::flat_hash_map<std::string, std::unique_ptr<DataFile>> files_;
  ExternalDataInfo info_;
};

absl::StatusOr<onnx::ModelProto> Parse(absl::string_view bytes) {
  onnx::ModelProto model;
  if (bytes.size() > kMaxMessageBytes ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "the model does not parse as an ONNX ModelProto");
  }
  return model;
}

}  // namespace

bool UsesExternalData(absl::string_view model_bytes) {
  if (model_bytes.size() > kMaxMessageBytes) return false;
  CodedInputStream in(reinterpret_cast<const uint8_t*>(model_bytes.data()),
                      static_cast<int>(model_bytes.size()));
  return WalkMessage(&in, Kind::kModel, 0) == Walk::kFound;
}

absl::StatusOr<std::string> InlineExternalData(absl::string_view model_bytes,
                                               const std::string& base_dir,
                                               ExternalDataInfo* info) {
  QUANTD_ASSIGN_OR_RETURN(onnx::ModelProto model, Parse(model_bytes));
  QUANTD_ASSIGN_OR_RETURN(std::string root,
                          RealPath(base_dir.empty() ? "." : base_dir));
  Inliner inliner(std::move(root), model_bytes.size());
  QUANTD_RETURN_IF_ERROR(ForEachTensor(
      &model, [&](onnx::TensorProto* t) { return inliner.Inline(t); }));
  if (model.ByteSizeLong() > kMaxMessageBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model with its external data is ", model.ByteSizeLong(),
        " bytes; one protobuf message holds at most 2 GB"));
  }
  if (info != nullptr) *info = inliner.info();
  return model.SerializeAsString();
}

absl::Status WriteModelWithExternalData(absl::string_view model_bytes,
                                        const std::string& path,
                                        int64_t min_bytes,
                                        ExternalDataInfo* info) {
  QUANTD_ASSIGN_OR_RETURN(onnx::ModelProto model, Parse(model_bytes));
  const std::filesystem::path model_path(path);
  const std::string data_name = model_path.filename().string() + ".data";
  const std::string data_path = (model_path.parent_path() / data_name).string();
  std::string data;
  ExternalDataInfo wrote;
  QUANTD_RETURN_IF_ERROR(ForEachTensor(&model, [&](onnx::TensorProto* t) {
    if (!t->has_raw_data() ||
        static_cast<int64_t>(t->raw_data().size()) < min_bytes) {
      return absl::OkStatus();
    }
    // 64-byte aligned, so a reader that maps the file can use the values
    // in place.
    data.resize((data.size() + 63) / 64 * 64, '\0');
    const size_t offset = data.size();
    data.append(t->raw_data());
    auto entry = [t](const char* key, const std::string& value) {
      onnx::StringStringEntryProto* e = t->add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    entry("location", data_name);
    entry("offset", absl::StrCat(offset));
    entry("length", absl::StrCat(t->raw_data().size()));
    wrote.bytes += static_cast<int64_t>(t->raw_data().size());
    ++wrote.tensors;
    t->clear_raw_data();
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    return absl::OkStatus();
  }));
  if (wrote.tensors > 0) {
    wrote.files = 1;
    QUANTD_RETURN_IF_ERROR(WriteFileAtomically(data_path, data));
  }
  QUANTD_RETURN_IF_ERROR(WriteFileAtomically(path, model.SerializeAsString()));
  if (info != nullptr) *info = wrote;
  return absl::OkStatus();
}

}  // namespace quantd::client
