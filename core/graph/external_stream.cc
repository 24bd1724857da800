#include "core/graph/external_stream.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/huge_pages.h"
#include "core/base/status_macros.h"
#include "core/graph/tensor_util.h"

namespace quantd::graph {
namespace {

absl::Status ForEachTensor(onnx::GraphProto* graph, const TensorVisitor& fn);

absl::Status ForEachTensor(onnx::SparseTensorProto* sparse,
                           const TensorVisitor& fn) {
  if (sparse->has_values()) {
    QUANTD_RETURN_IF_ERROR(fn(sparse->mutable_values()));
  }
  if (sparse->has_indices()) {
    QUANTD_RETURN_IF_ERROR(fn(sparse->mutable_indices()));
  }
  return absl::OkStatus();
}

absl::Status ForEachTensor(onnx::NodeProto* node, const TensorVisitor& fn) {
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

absl::Status ForEachTensor(onnx::GraphProto* graph, const TensorVisitor& fn) {
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

std::string TensorWhere(const onnx::TensorProto& t) {
  return t.name().empty() ? std::string("an unnamed external tensor")
                          : absl::StrCat("external tensor '", t.name(), "'");
}

}  // namespace

absl::Status ForEachTensor(onnx::ModelProto* model, const TensorVisitor& fn) {
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

absl::StatusOr<ExternalRef> ReadExternalRef(const onnx::TensorProto& tensor) {
  ExternalRef ref;
  bool seen_location = false, seen_offset = false, seen_length = false;
  for (const onnx::StringStringEntryProto& e : tensor.external_data()) {
    bool* seen = e.key() == "location" ? &seen_location
                 : e.key() == "offset" ? &seen_offset
                 : e.key() == "length" ? &seen_length
                                       : nullptr;
    if (seen == nullptr) continue;  // "checksum" and keys of later versions.
    if (*seen) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorWhere(tensor), " gives external_data '", e.key(), "' twice"));
    }
    *seen = true;
    if (e.key() == "location") {
      ref.location = e.value();
      continue;
    }
    int64_t* number = e.key() == "offset" ? &ref.offset : &ref.length;
    if (!absl::SimpleAtoi(e.value(), number) || *number < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorWhere(tensor), " has ", e.key(), " '", e.value(),
                       "', not a non-negative integer"));
    }
  }
  if (ref.location.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorWhere(tensor), " names no location"));
  }
  return ref;
}

void SetExternalRef(const ExternalRef& ref, onnx::TensorProto* tensor) {
  tensor->clear_external_data();
  auto entry = [tensor](const char* key, std::string value) {
    onnx::StringStringEntryProto* e = tensor->add_external_data();
    e->set_key(key);
    e->set_value(std::move(value));
  };
  entry("location", ref.location);
  entry("offset", absl::StrCat(ref.offset));
  if (ref.length >= 0) entry("length", absl::StrCat(ref.length));
  tensor->clear_raw_data();
  tensor->set_data_location(onnx::TensorProto::EXTERNAL);
}

void ExternalDataStream::Append(std::string piece) {
  if (piece.empty()) return;
  size_ += piece.size();
  pieces_.push_back(std::move(piece));
}

std::vector<std::string> ExternalDataStream::TakePieces() {
  size_ = 0;
  return std::move(pieces_);
}

absl::StatusOr<AttachedExternalData> AttachExternalData(
    ExternalDataStream* stream, bool keep_stream, onnx::ModelProto* model) {
  struct Wanted {
    onnx::TensorProto* tensor;
    uint64_t offset;
    uint64_t length;
  };
  std::vector<Wanted> wanted;
  const uint64_t size = stream->size();
  QUANTD_RETURN_IF_ERROR(
      ForEachTensor(model, [&](onnx::TensorProto* t) -> absl::Status {
        if (!HasExternalData(*t)) return absl::OkStatus();
        QUANTD_ASSIGN_OR_RETURN(const ExternalRef ref, ReadExternalRef(*t));
        if (ref.location != kExternalStreamLocation) {
          return absl::InvalidArgumentError(absl::StrCat(
              TensorWhere(*t), " keeps its values in the file '", ref.location,
              "', which quantd never opens: its bytes must come in the "
              "request's external_data stream, located at '",
              kExternalStreamLocation,
              "' (the SDKs and quantctl send models saved with external "
              "data that way)"));
        }
        absl::StatusOr<int64_t> need = RawDataBytes(*t);
        if (!need.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(TensorWhere(*t), ": ", need.status().message()));
        }
        if (ref.length >= 0 && ref.length != *need) {
          return absl::InvalidArgumentError(
              absl::StrCat(TensorWhere(*t), " has length ", ref.length,
                           " but its dims and type need ", *need, " bytes"));
        }
        const auto offset = static_cast<uint64_t>(ref.offset);
        const auto length = static_cast<uint64_t>(*need);
        if (offset > size || length > size - offset) {
          return absl::InvalidArgumentError(absl::StrCat(
              TensorWhere(*t), " reads ", length, " bytes at offset ", offset,
              " of the external_data stream, which has ", size));
        }
        wanted.push_back({t, offset, length});
        return absl::OkStatus();
      }));
  if (wanted.empty()) {
    if (size == 0) return AttachedExternalData();
    return absl::InvalidArgumentError(
        absl::StrCat("the request sent ", size,
                     " bytes of external_data but no tensor of the model is "
                     "located in them"));
  }
  std::sort(wanted.begin(), wanted.end(), [](const Wanted& a, const Wanted& b) {
    return a.offset < b.offset;
  });
  uint64_t covered = 0, end = 0;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i].offset < end) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorWhere(*wanted[i].tensor), " at offset ", wanted[i].offset,
          " overlaps ", TensorWhere(*wanted[i - 1].tensor),
          " in the external_data stream"));
    }
    end = wanted[i].offset + wanted[i].length;
    covered += wanted[i].length;
  }
  const uint64_t padding_allowed =
      static_cast<uint64_t>(kExternalDataAlignment - 1) * wanted.size();
  if (size - covered > padding_allowed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the external_data stream has ", size - covered,
        " bytes no tensor is located in (at most ", padding_allowed,
        " of alignment padding for its ", wanted.size(), " tensors)"));
  }

  // Tensors in stream order, so pieces behind the current offset can go.
  std::vector<std::string> owned;
  if (!keep_stream) owned = stream->TakePieces();
  const std::vector<std::string>& pieces =
      keep_stream ? stream->pieces() : owned;
  size_t piece = 0;
  uint64_t piece_start = 0;  // Offset of pieces[piece] in the stream.
  AttachedExternalData attached;
  for (const Wanted& w : wanted) {
    while (piece < pieces.size() &&
           piece_start + pieces[piece].size() <= w.offset) {
      piece_start += pieces[piece].size();
      if (!keep_stream) std::string().swap(owned[piece]);
      ++piece;
    }
    // Appended piece by piece into reserved memory: written once, not
    // zero-filled first; big tensors on huge pages (each fresh page is a
    // fault).
    std::string* raw = w.tensor->mutable_raw_data();
    raw->clear();
    raw->reserve(w.length);
    AdviseHugePages(raw->data(), raw->capacity());
    uint64_t done = 0;
    size_t p = piece;
    uint64_t p_start = piece_start;
    while (done < w.length) {
      const std::string& from = pieces[p];
      const uint64_t at = w.offset + done - p_start;
      const uint64_t n = std::min<uint64_t>(from.size() - at, w.length - done);
      raw->append(from, at, n);
      done += n;
      if (done < w.length) {
        p_start += from.size();
        ++p;
      }
    }
    w.tensor->clear_external_data();
    w.tensor->clear_data_location();
    ++attached.tensors;
    attached.bytes += static_cast<int64_t>(w.length);
  }
  return attached;
}

ExternalDataStream DetachExternalData(int64_t min_bytes,
                                      onnx::ModelProto* model) {
  ExternalDataStream stream;
  // Never fails: the visitor returns OK.
  ForEachTensor(model, [&](onnx::TensorProto* t) {
    if (!t->has_raw_data() ||
        static_cast<int64_t>(t->raw_data().size()) < min_bytes) {
      return absl::OkStatus();
    }
    const uint64_t pad =
        (kExternalDataAlignment - stream.size() % kExternalDataAlignment) %
        kExternalDataAlignment;
    stream.Append(std::string(pad, '\0'));
    ExternalRef ref;
    ref.location = std::string(kExternalStreamLocation);
    ref.offset = static_cast<int64_t>(stream.size());
    ref.length = static_cast<int64_t>(t->raw_data().size());
    stream.Append(std::move(*t->mutable_raw_data()));
    SetExternalRef(ref, t);
    return absl::OkStatus();
  }).IgnoreError();
  return stream;
}

}  // namespace quantd::graph
