#include "client/calibration_data.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/file_util.h"
#include "core/executor/npy.h"
#include "onnx/onnx_pb.h"

namespace quantd::client {
namespace {

using quantd::executor::Tensor;
using TP = onnx::TensorProto;

constexpr absl::string_view kNpyMagic("\x93NUMPY", 6);

bool Sendable(int32_t dtype) {
  switch (dtype) {
    case TP::FLOAT:
    case TP::DOUBLE:
    case TP::INT64:
    case TP::INT32:
    case TP::INT8:
    case TP::UINT8:
    case TP::BOOL:
      return true;
    default:
      return false;
  }
}

std::string Label(const CalibrationInput& input) {
  return input.name.empty() ? input.path
                            : absl::StrCat(input.name, "=", input.path);
}

}  // namespace

absl::StatusOr<CalibrationInput> ParseCalibrationInput(absl::string_view flag) {
  CalibrationInput input;
  const size_t eq = flag.find('=');
  if (eq == absl::string_view::npos) {
    input.path = std::string(flag);
  } else {
    input.name = std::string(flag.substr(0, eq));
    input.path = std::string(flag.substr(eq + 1));
    if (input.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration data '", flag,
          "' has an empty tensor name: use NAME=FILE or just FILE"));
    }
  }
  if (input.path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration data '", flag, "' has no file"));
  }
  return input;
}

absl::StatusOr<Tensor> ReadTensorFile(const std::string& path,
                                      std::string* proto_name) {
  if (proto_name != nullptr) proto_name->clear();
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<Tensor> tensor;
  if (absl::StartsWith(*bytes, kNpyMagic)) {
    tensor = quantd::executor::ParseNpy(*bytes);
  } else {
    TP proto;
    if (!proto.ParseFromString(*bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": neither a .npy file nor an ONNX TensorProto (.pb)"));
    }
    bytes->clear();
    if (proto_name != nullptr) *proto_name = proto.name();
    tensor = Tensor::FromProto(proto);
  }
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(),
                        absl::StrCat(path, ": ", tensor.status().message()));
  }
  return tensor;
}

absl::StatusOr<std::unique_ptr<CalibrationData>> CalibrationData::Open(
    const std::vector<CalibrationInput>& inputs, int64_t batch_size) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size must be >= 1, not ", batch_size));
  }
  if (inputs.empty()) {
    return absl::InvalidArgumentError("no calibration data files");
  }
  std::vector<Source> sources;
  for (const CalibrationInput& input : inputs) {
    std::string proto_name;
    absl::StatusOr<Tensor> tensor = ReadTensorFile(input.path, &proto_name);
    if (!tensor.ok()) return tensor.status();
    if (!Sendable(tensor->dtype())) {
      return absl::UnimplementedError(absl::StrCat(
          input.path, ": element type ",
          quantd::executor::DataTypeName(tensor->dtype()),
          " is not supported for calibration data (float32, float64, int64, "
          "int32, int8, uint8, bool)"));
    }
    if (tensor->rank() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(input.path,
                       ": a scalar has no sample axis (the first axis of the "
                       "array is the sample axis)"));
    }
    Source source;
    source.name = input.name.empty() ? proto_name : input.name;
    source.path = Label(input);
    source.tensor = std::move(*tensor);
    for (const Source& other : sources) {
      if (other.name == source.name) {
        return absl::InvalidArgumentError(
            source.name.empty()
                ? absl::StrCat("two unnamed calibration inputs (", other.path,
                               ", ", source.path,
                               "): only a model with one input may leave it "
                               "unnamed; use NAME=FILE")
                : absl::StrCat("two calibration inputs for tensor '",
                               source.name, "' (", other.path, ", ",
                               source.path, ")"));
      }
    }
    sources.push_back(std::move(source));
  }
  const int64_t num_samples = sources.front().tensor.dim(0);
  if (num_samples == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(sources.front().path, " has no samples (first axis 0)"));
  }
  for (const Source& source : sources) {
    if (source.tensor.dim(0) != num_samples) {
      std::vector<std::string> sizes;
      for (const Source& s : sources) {
        sizes.push_back(absl::StrCat(s.path, " has ", s.tensor.dim(0)));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration inputs must have as many samples (first axis) as each "
          "other: ",
          absl::StrJoin(sizes, ", ")));
    }
  }
  return std::unique_ptr<CalibrationData>(
      new CalibrationData(std::move(sources), num_samples, batch_size));
}

std::optional<quantd::v1::TensorBatch> CalibrationData::Next() {
  if (next_sample_ >= num_samples_) return std::nullopt;
  const int64_t n = std::min(batch_size_, num_samples_ - next_sample_);
  quantd::v1::TensorBatch batch;
  for (const Source& source : sources_) {
    const Tensor& t = source.tensor;
    const int64_t per_sample = t.size() / std::max<int64_t>(t.dim(0), 1);
    quantd::v1::NamedTensor* named = batch.add_tensors();
    named->set_name(source.name);
    named->add_shape(n);
    for (int i = 1; i < t.rank(); ++i) named->add_shape(t.dim(i));
    const int64_t first = next_sample_ * per_sample;
    const int64_t count = n * per_sample;
    std::string* data = named->mutable_data();
    if (t.dtype() == TP::DOUBLE) {
      // Sent as float32: what models take, at half the bytes.
      named->set_data_type(TP::FLOAT);
      data->resize(static_cast<size_t>(count) * sizeof(float));
      const double* in = t.data<double>() + first;
      for (int64_t i = 0; i < count; ++i) {
        const float f = static_cast<float>(in[i]);
        std::memcpy(&(*data)[static_cast<size_t>(i) * sizeof(float)], &f,
                    sizeof(float));
      }
    } else {
      named->set_data_type(t.dtype());
      const int64_t element = quantd::executor::ElementSize(t.dtype());
      data->assign(static_cast<const char*>(t.raw()) + first * element,
                   static_cast<size_t>(count * element));
    }
  }
  next_sample_ += n;
  return batch;
}

BatchSource CalibrationData::AsSource() {
  return [this]() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
    return Next();
  };
}

}  // namespace quantd::client
