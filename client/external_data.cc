#include "client/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "core/graph/external_stream.h"
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

// ------------------------------------------------ reading data files

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

// The tensor's external_data entries, with a location a reader may follow.
absl::StatusOr<graph::ExternalRef> ReadRef(const onnx::TensorProto& t) {
  QUANTD_ASSIGN_OR_RETURN(graph::ExternalRef ref, graph::ReadExternalRef(t));
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

// One external tensor's bytes: where they are in a data file, and where
// they go in the stream.
struct Segment {
  uint64_t stream_offset = 0;
  uint64_t length = 0;
  std::shared_ptr<const DataFile> file;
  int64_t file_offset = 0;
  std::string tensor;
};

// Reads stream bytes from the segments (sorted, packed).
absl::Status ReadSegments(const std::vector<Segment>& segments, uint64_t offset,
                          size_t size, char* out) {
  auto it = std::upper_bound(
      segments.begin(), segments.end(), offset,
      [](uint64_t at, const Segment& s) { return at < s.stream_offset; });
  if (it == segments.begin()) {
    return absl::OutOfRangeError("external data read before the stream");
  }
  --it;
  size_t done = 0;
  while (done < size) {
    if (it == segments.end()) {
      return absl::OutOfRangeError("external data read past the stream");
    }
    const uint64_t at = offset + done - it->stream_offset;
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(it->length - at, size - done));
    size_t got = 0;
    while (got < n) {
      const ssize_t r = pread(it->file->fd, out + done + got, n - got,
                              static_cast<off_t>(it->file_offset + at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        return absl::DataLossError(absl::StrCat(
            "cannot read external tensor '", it->tensor,
            "': ", r < 0 ? std::strerror(errno) : "the data file got shorter"));
      }
      got += static_cast<size_t>(r);
    }
    done += n;
    ++it;
  }
  return absl::OkStatus();
}

// Follows a model's external references into its data files.
class Relocator {
 public:
  explicit Relocator(std::string root) : root_(std::move(root)) {}

  // Checks the tensor's reference and file and moves it into the stream.
  absl::Status Relocate(onnx::TensorProto* t) {
    if (!graph::HasExternalData(*t)) return absl::OkStatus();
    QUANTD_ASSIGN_OR_RETURN(const graph::ExternalRef ref, ReadRef(*t));
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
    QUANTD_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file,
                            Open(ref.location, t->name()));
    if (ref.offset > file->size || *want > file->size - ref.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("external tensor '", t->name(), "' reads ", *want,
                       " bytes at offset ", ref.offset, " of '", ref.location,
                       "', which has ", file->size));
    }
    Segment segment;
    segment.stream_offset = size_;
    segment.length = static_cast<uint64_t>(*want);
    segment.file = std::move(file);
    segment.file_offset = ref.offset;
    segment.tensor = t->name();
    graph::ExternalRef to;
    to.location = std::string(graph::kExternalStreamLocation);
    to.offset = static_cast<int64_t>(size_);
    to.length = *want;
    graph::SetExternalRef(to, t);
    size_ += segment.length;
    ++info_.tensors;
    info_.bytes += *want;
    if (segment.length > 0) segments_.push_back(std::move(segment));
    return absl::OkStatus();
  }

  uint64_t size() const { return size_; }
  const ExternalDataInfo& info() const { return info_; }
  std::vector<Segment> TakeSegments() { return std::move(segments_); }

 private:
  absl::StatusOr<std::shared_ptr<const DataFile>> Open(
      const std::string& location, const std::string& tensor) {
    auto it = files_.find(location);
    if (it != files_.end()) return it->second;
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
    auto file = std::make_shared<DataFile>();
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
    files_[location] = file;
    return file;
  }

  const std::string root_;
  uint64_t size_ = 0;
  absl::flat_hash_map<std::string, std::shared_ptr<const DataFile>> files_;
  std::vector<Segment> segments_;
  ExternalDataInfo info_;
};

absl::StatusOr<onnx::ModelProto> Parse(absl::string_view bytes) {
  onnx::ModelProto model;
  if (bytes.size() > graph::kMaxMessageBytes ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "the model does not parse as an ONNX ModelProto");
  }
  return model;
}

absl::StatusOr<std::string> Serialize(const onnx::ModelProto& model) {
  if (model.ByteSizeLong() > graph::kMaxMessageBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model with its tensors inline is ", model.ByteSizeLong(),
        " bytes; one protobuf message holds at most 2 GB: keep its data "
        "external (quantctl --save_as_external_data=true)"));
  }
  return model.SerializeAsString();
}

// The data file ONNX names beside a model written to `path`.
struct DataFilePaths {
  std::string name;  // The file name the model's tensors record.
  std::string path;
};
DataFilePaths DataFileBeside(const std::string& path) {
  const std::filesystem::path model_path(path);
  DataFilePaths paths;
  paths.name = model_path.filename().string() + ".data";
  paths.path = (model_path.parent_path() / paths.name).string();
  return paths;
}

// The serialized model with every tensor located in a returned external
// data stream of `stream_size` bytes relocated, at the same offset, to
// `data_name` (the stream written as that file). INTERNAL when a tensor lies
// outside the stream: the server broke the protocol.
absl::StatusOr<std::string> NameDataFile(absl::string_view model_bytes,
                                         const std::string& data_name,
                                         uint64_t stream_size,
                                         ExternalDataInfo* info) {
  QUANTD_ASSIGN_OR_RETURN(onnx::ModelProto model, Parse(model_bytes));
  ExternalDataInfo wrote;
  QUANTD_RETURN_IF_ERROR(
      graph::ForEachTensor(&model, [&](onnx::TensorProto* t) -> absl::Status {
        if (!graph::HasExternalData(*t)) return absl::OkStatus();
        QUANTD_ASSIGN_OR_RETURN(graph::ExternalRef ref,
                                graph::ReadExternalRef(*t));
        QUANTD_ASSIGN_OR_RETURN(const int64_t want, graph::RawDataBytes(*t));
        if (ref.location != graph::kExternalStreamLocation ||
            static_cast<uint64_t>(ref.offset) > stream_size ||
            static_cast<uint64_t>(want) >
                stream_size - static_cast<uint64_t>(ref.offset)) {
          return absl::InternalError(
              absl::StrCat("the server returned tensor '", t->name(),
                           "' outside the external data it sent"));
        }
        ref.location = data_name;
        ref.length = want;
        graph::SetExternalRef(ref, t);
        ++wrote.tensors;
        wrote.bytes += want;
        return absl::OkStatus();
      }));
  wrote.files = 1;
  *info = wrote;
  return Serialize(model);
}

}  // namespace

bool UsesExternalData(absl::string_view model_bytes) {
  if (model_bytes.size() > graph::kMaxMessageBytes) return false;
  CodedInputStream in(reinterpret_cast<const uint8_t*>(model_bytes.data()),
                      static_cast<int>(model_bytes.size()));
  return WalkMessage(&in, Kind::kModel, 0) == Walk::kFound;
}

absl::StatusOr<StreamedModel> OpenModelForStreaming(
    absl::string_view model_bytes, const std::string& base_dir) {
  QUANTD_ASSIGN_OR_RETURN(onnx::ModelProto model, Parse(model_bytes));
  QUANTD_ASSIGN_OR_RETURN(std::string root,
                          RealPath(base_dir.empty() ? "." : base_dir));
  Relocator relocator(std::move(root));
  QUANTD_RETURN_IF_ERROR(graph::ForEachTensor(
      &model, [&](onnx::TensorProto* t) { return relocator.Relocate(t); }));
  StreamedModel out;
  out.info = relocator.info();
  out.model = model.SerializeAsString();
  auto segments =
      std::make_shared<const std::vector<Segment>>(relocator.TakeSegments());
  out.external.size = relocator.size();
  out.external.read = [segments](uint64_t offset, size_t size, char* to) {
    return ReadSegments(*segments, offset, size, to);
  };
  return out;
}

absl::StatusOr<std::string> InlineExternalData(absl::string_view model_bytes,
                                               const std::string& base_dir,
                                               ExternalDataInfo* info) {
  QUANTD_ASSIGN_OR_RETURN(StreamedModel streamed,
                          OpenModelForStreaming(model_bytes, base_dir));
  const uint64_t total = model_bytes.size() + streamed.external.size;
  if (total > graph::kMaxMessageBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the model with its external data is over ", total,
                     " bytes; one protobuf message holds at most 2 GB (",
                     graph::kMaxMessageBytes,
                     " bytes): send it with its external data streamed "
                     "(OpenModelForStreaming)"));
  }
  std::string stream(streamed.external.size, '\0');
  QUANTD_RETURN_IF_ERROR(
      streamed.external.read(0, stream.size(), stream.data()));
  QUANTD_ASSIGN_OR_RETURN(
      std::string inlined,
      InlineStreamedData(streamed.model, std::move(stream)));
  if (info != nullptr) *info = streamed.info;
  return inlined;
}

absl::StatusOr<std::string> InlineStreamedData(absl::string_view model_bytes,
                                               std::string external_data) {
  QUANTD_ASSIGN_OR_RETURN(onnx::ModelProto model, Parse(model_bytes));
  graph::ExternalDataStream stream;
  stream.Append(std::move(external_data));
  QUANTD_RETURN_IF_ERROR(
      graph::AttachExternalData(&stream, /*keep_stream=*/false, &model)
          .status());
  return Serialize(model);
}

absl::Status WriteModelWithExternalData(absl::string_view model_bytes,
                                        const std::string& path,
                                        int64_t min_bytes,
                                        ExternalDataInfo* info) {
  QUANTD_ASSIGN_OR_RETURN(onnx::ModelProto model, Parse(model_bytes));
  const DataFilePaths paths = DataFileBeside(path);
  const std::string& data_name = paths.name;
  std::string data;
  ExternalDataInfo wrote;
  QUANTD_RETURN_IF_ERROR(
      graph::ForEachTensor(&model, [&](onnx::TensorProto* t) {
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
    QUANTD_RETURN_IF_ERROR(WriteFileAtomically(paths.path, data));
  }
  QUANTD_RETURN_IF_ERROR(WriteFileAtomically(path, model.SerializeAsString()));
  if (info != nullptr) *info = wrote;
  return absl::OkStatus();
}

absl::Status SaveQuantizedModel(const std::string& model_bytes,
                                std::string external_data,
                                const std::string& path, bool as_external,
                                ExternalDataInfo* info) {
  if (external_data.empty()) {
    if (as_external) {
      return WriteModelWithExternalData(model_bytes, path,
                                        graph::kExternalMinBytes, info);
    }
    if (info != nullptr) *info = ExternalDataInfo();
    return WriteFileAtomically(path, model_bytes);
  }
  if (!as_external) {
    QUANTD_ASSIGN_OR_RETURN(
        std::string inlined,
        InlineStreamedData(model_bytes, std::move(external_data)));
    if (info != nullptr) *info = ExternalDataInfo();
    return WriteFileAtomically(path, inlined);
  }
  // The stream is laid out as ONNX's data file (64-byte aligned offsets):
  // it becomes the file as it is, and the model only names it.
  const DataFilePaths paths = DataFileBeside(path);
  ExternalDataInfo wrote;
  QUANTD_ASSIGN_OR_RETURN(
      std::string model,
      NameDataFile(model_bytes, paths.name, external_data.size(), &wrote));
  QUANTD_RETURN_IF_ERROR(WriteFileAtomically(paths.path, external_data));
  QUANTD_RETURN_IF_ERROR(WriteFileAtomically(path, model));
  if (info != nullptr) *info = wrote;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StreamedModelWriter>>
StreamedModelWriter::Create(const std::string& path) {
  QUANTD_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> data,
                          AtomicFile::Create(DataFileBeside(path).path));
  return std::unique_ptr<StreamedModelWriter>(
      new StreamedModelWriter(path, std::move(data)));
}

StreamedModelWriter::~StreamedModelWriter() = default;

std::function<absl::Status(absl::string_view)> StreamedModelWriter::Sink() {
  return [this](absl::string_view chunk) { return data_->Append(chunk); };
}

absl::Status StreamedModelWriter::Finish(const std::string& model_bytes,
                                         ExternalDataInfo* info) {
  if (data_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " was already written"));
  }
  std::unique_ptr<AtomicFile> data = std::move(data_);
  if (data->size() == 0 && !UsesExternalData(model_bytes)) {
    data.reset();  // Removes the empty temporary file.
    return WriteModelWithExternalData(model_bytes, path_,
                                      graph::kExternalMinBytes, info);
  }
  ExternalDataInfo wrote;
  QUANTD_ASSIGN_OR_RETURN(std::string model,
                          NameDataFile(model_bytes, DataFileBeside(path_).name,
                                       data->size(), &wrote));
  QUANTD_RETURN_IF_ERROR(data->Commit());
  QUANTD_RETURN_IF_ERROR(WriteFileAtomically(path_, model));
  if (info != nullptr) *info = wrote;
  return absl::OkStatus();
}

}  // namespace quantd::client
