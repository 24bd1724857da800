#include "client/calibration_data.h"

#include <cstring>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/file_util.h"
#include "core/executor/npy.h"
#include "core/numerics/float16.h"
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
    case TP::FLOAT16:
    case TP::INT64:
    case TP::INT32:
    case TP::INT16:
    case TP::INT8:
    case TP::UINT64:
    case TP::UINT32:
    case TP::UINT16:
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

// The type a tensor of `dtype` is sent as: floating data goes as float32,
// the type quantd calibrates in (a FLOAT16 model is widened before it is
// run; quantd widens float32 exactly for a DOUBLE input), at half the bytes
// of float64.
int32_t SentType(int32_t dtype) {
  return dtype == TP::DOUBLE || dtype == TP::FLOAT16 ? TP::FLOAT : dtype;
}

// Appends `count` elements of `t` from flat element `first` to `data`, as
// SentType.
void AppendElements(const Tensor& t, int64_t first, int64_t count,
                    std::string* data) {
  if (t.dtype() == TP::DOUBLE || t.dtype() == TP::FLOAT16) {
    const size_t at = data->size();
    data->resize(at + static_cast<size_t>(count) * sizeof(float));
    for (int64_t i = 0; i < count; ++i) {
      const float f =
          t.dtype() == TP::DOUBLE
              ? static_cast<float>(t.data<double>()[first + i])
              : quantd::numerics::HalfToFloat(t.data<uint16_t>()[first + i]);
      std::memcpy(&(*data)[at + static_cast<size_t>(i) * sizeof(float)], &f,
                  sizeof(float));
    }
    return;
  }
  const int64_t element = quantd::executor::ElementSize(t.dtype());
  data->append(static_cast<const char*>(t.raw()) + first * element,
               static_cast<size_t>(count * element));
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

absl::Status ApplySampleAxes(const std::vector<std::string>& flags,
                             std::vector<CalibrationInput>* inputs) {
  std::vector<std::string> seen;
  for (const std::string& flag : flags) {
    const size_t eq = flag.find('=');
    const std::string name = flag.substr(0, eq);
    const std::string value =
        eq == std::string::npos ? "" : flag.substr(eq + 1);
    int axis = 0;
    if (value == "none") {
      axis = CalibrationInput::kWhole;
    } else if (name.empty() || !absl::SimpleAtoi(value, &axis) || axis < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sample_axis '", flag,
          "' is not NAME=K (K >= 0, the axis the samples lie on) or NAME=none "
          "(the array goes whole with every batch)"));
    }
    if (absl::c_linear_search(seen, name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sample_axis gives tensor '", name, "' twice"));
    }
    seen.push_back(name);
    bool found = false;
    for (CalibrationInput& input : *inputs) {
      if (input.name != name) continue;
      input.sample_axis = axis;
      found = true;
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sample_axis names tensor '", name,
          "', which no calibration data file is given for (NAME=FILE)"));
    }
  }
  return absl::OkStatus();
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
    const std::vector<CalibrationInput>& inputs, int64_t batch_size,
    bool unbatched) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size must be >= 1, not ", batch_size));
  }
  if (unbatched && batch_size != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unbatched calibration data is sent one sample per batch without its "
        "sample axis; the batch size must be 1, not ",
        batch_size));
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
          " is not supported for calibration data (float32, float64, float16, "
          "signed and unsigned integers of 8 to 64 bits, bool)"));
    }
    Source source;
    source.name = input.name.empty() ? proto_name : input.name;
    source.path = Label(input);
    source.sample_axis =
        tensor->rank() == 0 ? CalibrationInput::kWhole : input.sample_axis;
    if (source.sample_axis >= tensor->rank() ||
        (tensor->rank() == 0 && input.sample_axis > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          source.path, ": sample axis ", input.sample_axis,
          " is out of range for an array of rank ", tensor->rank()));
    }
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
  const Source* first = nullptr;
  for (const Source& source : sources) {
    if (source.sample_axis != CalibrationInput::kWhole) {
      first = &source;
      break;
    }
  }
  if (first == nullptr) {
    return absl::InvalidArgumentError(
        "every calibration input goes whole with each batch (a scalar, or "
        "--sample_axis=NAME=none): at least one needs a sample axis to cut "
        "batches along");
  }
  // Samples of no values each (an empty `axes` input of a ReduceSum) go
  // beside an input whose samples hold values, which bounds their count by
  // its file; alone, a 128-byte file could declare 2^62 of them and make an
  // endless stream of empty batches.
  const Source* with_values = nullptr;
  for (const Source& source : sources) {
    if (source.sample_axis != CalibrationInput::kWhole &&
        source.tensor.size() > 0) {
      with_values = &source;
      break;
    }
  }
  if (with_values == nullptr && first->tensor.dim(first->sample_axis) > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        first->path, ": an array of shape ",
        quantd::executor::ShapeString(first->tensor.shape()), " has ",
        first->tensor.dim(first->sample_axis), " samples on axis ",
        first->sample_axis,
        " but no values, and no other input's samples hold any: every batch "
        "would be empty"));
  }
  const int64_t num_samples = first->tensor.dim(first->sample_axis);
  if (num_samples == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(first->path, " has no samples (sample axis ",
                     first->sample_axis, " is 0 long)"));
  }
  for (const Source& source : sources) {
    if (source.sample_axis != CalibrationInput::kWhole &&
        source.tensor.dim(source.sample_axis) != num_samples) {
      std::vector<std::string> sizes;
      for (const Source& s : sources) {
        if (s.sample_axis == CalibrationInput::kWhole) continue;
        sizes.push_back(absl::StrCat(s.path, " has ",
                                     s.tensor.dim(s.sample_axis), " on axis ",
                                     s.sample_axis));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration inputs must have as many samples (along their sample "
          "axes) as each other: ",
          absl::StrJoin(sizes, ", ")));
    }
  }
  return std::unique_ptr<CalibrationData>(new CalibrationData(
      std::move(sources), num_samples, batch_size, unbatched));
}

std::optional<quantd::v1::TensorBatch> CalibrationData::Next() {
  if (next_sample_ >= num_samples_) return std::nullopt;
  const int64_t n = std::min(batch_size_, num_samples_ - next_sample_);
  quantd::v1::TensorBatch batch;
  for (const Source& source : sources_) {
    const Tensor& t = source.tensor;
    quantd::v1::NamedTensor* named = batch.add_tensors();
    named->set_name(source.name);
    named->set_data_type(SentType(t.dtype()));
    std::string* data = named->mutable_data();
    if (source.sample_axis == CalibrationInput::kWhole) {
      for (int i = 0; i < t.rank(); ++i) named->add_shape(t.dim(i));
      AppendElements(t, 0, t.size(), data);
      continue;
    }
    // Rows [next_sample_, next_sample_ + n) of the sample axis, for every
    // index of the axes before it.
    const int axis = source.sample_axis;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < t.rank(); ++i) {
      if (i == axis && unbatched_) continue;  // n is 1: the axis goes.
      named->add_shape(i == axis ? n : t.dim(i));
      if (i < axis) outer *= t.dim(i);
      if (i > axis) inner *= t.dim(i);
    }
    for (int64_t o = 0; o < outer; ++o) {
      AppendElements(t, (o * t.dim(axis) + next_sample_) * inner, n * inner,
                     data);
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
