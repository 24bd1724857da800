#include "core/graph/model_io.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace quantd::graph {
namespace {

bool IsDefaultDomain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx";
}

}  // namespace

absl::StatusOr<onnx::ModelProto> ParseModel(absl::string_view bytes) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        "model is empty (0 bytes); expected a serialized ONNX ModelProto");
  }
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model is ", bytes.size(),
        " bytes; protobuf cannot parse messages of 2 GiB or more"));
  }
  // ParseFromString would do, but CodedInputStream makes the size limit
  // explicit: models of hundreds of MiB are normal.
  google::protobuf::io::ArrayInputStream array(bytes.data(),
                                               static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream input(&array);
  input.SetTotalBytesLimit(std::numeric_limits<int>::max());
  onnx::ModelProto model;
  if (!model.ParseFromCodedStream(&input) || !input.ConsumedEntireMessage()) {
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

absl::StatusOr<std::string> SerializeModel(const onnx::ModelProto& model) {
  const size_t size = model.ByteSizeLong();
  if (size > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("output model would be ", size,
                     " bytes, over protobuf's 2 GiB message limit"));
  }
  std::string out;
  out.resize(size);
  google::protobuf::io::ArrayOutputStream array(out.data(),
                                                static_cast<int>(size));
  google::protobuf::io::CodedOutputStream output(&array);
  output.SetSerializationDeterministic(true);
  model.SerializeWithCachedSizes(&output);
  if (output.HadError()) {
    return absl::InternalError("serializing the output model failed");
  }
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
