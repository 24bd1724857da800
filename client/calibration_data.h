// Calibration batches from files, for quantctl and SDK users: NumPy .npy
// arrays or ONNX TensorProto (.pb) files, one per model tensor, whose first
// axis is the sample axis unless said otherwise (a recurrent state laid out
// [layers, batch, hidden] has it at 1). Several files are zipped sample by
// sample and cut into batches of `batch_size` samples as they are asked
// for. A scalar (a sample rate, a threshold) has no sample axis: it goes
// whole with every batch, and so does any array given kWhole.
#ifndef QUANTD_CLIENT_CALIBRATION_DATA_H_
#define QUANTD_CLIENT_CALIBRATION_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/quantd_client.h"
#include "core/executor/tensor.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::client {

// One --data value: "X.npy" (no name: the model's only graph input, or for a
// .pb file the TensorProto's own name if it has one) or "NAME=X.npy" (split
// at the first '='; NAME is a graph input or, for observed activations, any
// tensor of the model).
struct CalibrationInput {
  // sample_axis for an array that goes whole with every batch.
  static constexpr int kWhole = -1;

  std::string name;
  std::string path;
  // The axis the samples lie on; kWhole: none. Rank-0 arrays are always
  // kWhole.
  int sample_axis = 0;
};

// Applies --sample_axis values "NAME=K" (K >= 0) or "NAME=none" (kWhole) to
// the inputs of that name. INVALID_ARGUMENT for a malformed value, a NAME
// no input has, or one NAME given twice.
absl::Status ApplySampleAxes(const std::vector<std::string>& flags,
                             std::vector<CalibrationInput>* inputs);

// INVALID_ARGUMENT for an empty path or "=X.npy".
absl::StatusOr<CalibrationInput> ParseCalibrationInput(absl::string_view flag);

class CalibrationData {
 public:
  // Reads every file (whole, once) and checks they fit together:
  // INVALID_ARGUMENT naming the files when their sample axes differ in
  // length, for a sample axis the array does not have, when every input
  // goes whole (nothing to batch along), for two unnamed inputs or two
  // inputs of the same name, or batch_size < 1; the readers' codes for
  // unreadable files (NOT_FOUND for a missing one), UNIMPLEMENTED for
  // element types other than float32, float64 (sent as float32), int64,
  // int32, int8, uint8 and bool.
  //
  // `unbatched`: the model takes one sample at a time with no batch axis
  // (torchvision's detection models take an image [3, H, W]): each batch is
  // one sample, and every input with a sample axis is sent without it.
  // INVALID_ARGUMENT unless batch_size is 1.
  static absl::StatusOr<std::unique_ptr<CalibrationData>> Open(
      const std::vector<CalibrationInput>& inputs, int64_t batch_size,
      bool unbatched = false);

  // The next batch (the last may be smaller), or nullopt after the last.
  // Only this batch is materialized: the sources stay as they were read.
  std::optional<quantd::v1::TensorBatch> Next();

  // Next as a BatchSource for Client::Calibrate / Client::Quantize; the
  // source must not outlive this object.
  BatchSource AsSource();

  // Starts over at the first sample: the BatchRewind of AsSource(), so that
  // a call retried on another replica sends every batch again.
  void Rewind() { next_sample_ = 0; }

  int64_t num_samples() const { return num_samples_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t num_batches() const {
    return (num_samples_ + batch_size_ - 1) / batch_size_;
  }

 private:
  struct Source {
    std::string name;
    std::string path;
    quantd::executor::Tensor tensor;
    int sample_axis = 0;  // CalibrationInput::kWhole: sent whole.
  };

  CalibrationData(std::vector<Source> sources, int64_t num_samples,
                  int64_t batch_size, bool unbatched)
      : sources_(std::move(sources)),
        num_samples_(num_samples),
        batch_size_(batch_size),
        unbatched_(unbatched) {}

  const std::vector<Source> sources_;
  const int64_t num_samples_;
  const int64_t batch_size_;
  const bool unbatched_;  // Sample axes are dropped (batch_size_ is 1).
  int64_t next_sample_ = 0;
};

// Reads one file as a tensor: .npy by its magic bytes, otherwise an ONNX
// TensorProto (what .pb test data holds). `*proto_name` (may be null) gets the
// TensorProto's name ("" for .npy).
absl::StatusOr<quantd::executor::Tensor> ReadTensorFile(
    const std::string& path, std::string* proto_name);

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_CALIBRATION_DATA_H_
