// Fuzz target for the client's calibration-data reader
// (client/calibration_data.h): the .npy parser it uses,
// quantd::executor::ParseNpy (core/executor/npy.h), on the bytes, then the
// client's own path on the same bytes written to a file: ReadTensorFile
// (.npy by its magic, otherwise an ONNX TensorProto through
// Tensor::FromProto) and, for an array it reads, CalibrationData::Open and
// every batch Next() cuts from it.
//
// Input: the whole file, as quantctl --data reads it (make_npy_seeds.py
// writes seeds). The client only reads from a path, so each input is
// written to a file of this process (/tmp/quantd_npy_fuzzer.<pid>) and
// removed afterwards.
//
// Checked (a violation aborts):
//  - a refusal is an error status with a non-empty message of at most
//    kMaxMessageBytes; ParseNpy's code is INVALID_ARGUMENT or UNIMPLEMENTED
//    (npy.h), none of the client's is INTERNAL or UNKNOWN;
//  - an accepted .npy array has a type npy.h lists, shape x element size
//    bytes, which are the last bytes of the input (a BOOL byte as 0 or 1), and
//    survives SerializeNpy + ParseNpy unchanged; ReadTensorFile agrees with
//    ParseNpy;
//  - an array read from a TensorProto holds at most 8 bytes per input byte
//    (a varint int64_data entry is 1 byte on the wire, 8 in memory);
//  - Open accepts the array on a sample axis exactly when the array has
//    that axis and it is not 0 long; its batches cover every sample once,
//    in order, with the shape, element type (float64 and float16 sent as
//    float32) and
//    values of the array's rows; Rewind starts over;
//  - replay builds (no sanitizer): no single allocation beyond
//    kAllocSlack + kAllocPerInputByte x the input size, so a header that
//    declares 2^60 elements must be refused before anything is allocated
//    (libFuzzer builds have ASan's -malloc_limit_mb for that).
//
// Built two ways (fuzz/CMakeLists.txt): as a libFuzzer binary, and linked
// with fuzz/structured_corpus_main.cc as the ctest npy_fuzz_corpus.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/calibration_data.h"
#include "core/base/checked_count.h"
#include "core/executor/npy.h"
#include "core/executor/tensor.h"
#include "core/numerics/float16.h"
#include "fuzz/alloc_limit.h"
#include "fuzz/quiet_protobuf.h"
#include "fuzz/tensor_bytes.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace {

using quantd::executor::ElementSize;
using quantd::executor::Tensor;
using TP = onnx::TensorProto;

// Seeds are a few hundred bytes; longer inputs only lengthen the data.
constexpr size_t kMaxInputBytes = 64 << 10;
constexpr size_t kMaxMessageBytes = 64 << 10;
// The largest allocation an input may cause: a few copies of the input
// (the array, the file read back, a batch's string growing by doubling)
// and an int64 TensorProto's varints widened to 8 bytes, plus fixed
// overhead.
constexpr size_t kAllocSlack = 1 << 20;
constexpr size_t kAllocPerInputByte = 16;
// Batches walked per Open: enough to cover first, middle and last batches.
constexpr int64_t kMaxBatches = 64;

constexpr absl::string_view kNpyMagic("\x93NUMPY", 6);

[[noreturn]] void Fail(const std::string& what, absl::string_view input) {
  std::fprintf(stderr, "npy_fuzzer: %s\ninput (%zu bytes): ", what.c_str(),
               input.size());
  for (size_t i = 0; i < input.size() && i < 4096; ++i) {
    std::fprintf(stderr, "%02x", static_cast<uint8_t>(input[i]));
  }
  std::fprintf(stderr, "\n");
  std::abort();
}

void CheckMessage(const absl::Status& status, absl::string_view input) {
  if (status.code() == absl::StatusCode::kInternal ||
      status.code() == absl::StatusCode::kUnknown) {
    Fail("refused with " + status.ToString().substr(0, 2000), input);
  }
  if (status.message().empty()) Fail("refusal without a message", input);
  if (status.message().size() > kMaxMessageBytes) {
    Fail(absl::StrCat("refusal message of ", status.message().size(), " bytes"),
         input);
  }
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.bytes() == b.bytes() &&
         (a.bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

// What npy.h says ParseNpy returns.
void CheckParsed(const absl::StatusOr<Tensor>& parsed,
                 absl::string_view input) {
  if (!parsed.ok()) {
    CheckMessage(parsed.status(), input);
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument &&
        parsed.status().code() != absl::StatusCode::kUnimplemented) {
      Fail("ParseNpy refused with " + parsed.status().ToString(), input);
    }
    return;
  }
  const Tensor& t = *parsed;
  switch (t.dtype()) {
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
      break;
    default:
      Fail(absl::StrCat("ParseNpy accepted element type ", t.dtype()), input);
  }
  const absl::StatusOr<int64_t> count = quantd::CheckedElementCount(t.shape());
  if (!count.ok() || *count != t.size()) {
    Fail("ParseNpy accepted a shape that does not count to its size", input);
  }
  if (static_cast<uint64_t>(t.bytes()) !=
          static_cast<uint64_t>(*count) *
              static_cast<uint64_t>(ElementSize(t.dtype())) ||
      static_cast<uint64_t>(t.bytes()) > input.size()) {
    Fail(absl::StrCat("ParseNpy accepted ", t.bytes(), " bytes for ", *count,
                      " elements from ", input.size(), " input bytes"),
         input);
  }
  if (!quantd::fuzz::TensorHoldsBytes(
          t, input.data() + input.size() - t.bytes())) {
    Fail("ParseNpy's values are not the file's last bytes", input);
  }
  const absl::StatusOr<Tensor> again =
      quantd::executor::ParseNpy(quantd::executor::SerializeNpy(t));
  if (!again.ok() || !SameTensor(t, *again)) {
    Fail("SerializeNpy + ParseNpy changes the array", input);
  }
}

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

// The bytes a batch of rows [first, first + n) of `axis` must carry,
// computed element by element (Next() copies runs): float64 and float16 as
// float32.
std::string ExpectedBatchData(const Tensor& t, int axis, int64_t first,
                              int64_t n) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < t.rank(); ++i) {
    if (i < axis) outer *= t.dim(i);
    if (i > axis) inner *= t.dim(i);
  }
  // No values (a 0-long other axis): no bytes however many samples, and
  // the loops below would count up to 2^62 of them.
  if (outer == 0 || inner == 0) return "";
  const bool as_float = t.dtype() == TP::DOUBLE || t.dtype() == TP::FLOAT16;
  const int64_t element = ElementSize(t.dtype());
  std::string out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t s = first; s < first + n; ++s) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (o * t.dim(axis) + s) * inner + i;
        if (as_float) {
          const float f =
              t.dtype() == TP::DOUBLE
                  ? static_cast<float>(t.data<double>()[at])
                  : quantd::numerics::HalfToFloat(t.data<uint16_t>()[at]);
          out.append(reinterpret_cast<const char*>(&f), sizeof(f));
        } else {
          out.append(static_cast<const char*>(t.raw()) + at * element,
                     static_cast<size_t>(element));
        }
      }
    }
  }
  return out;
}

// CalibrationData::Open on the file with the array `t` at `axis`, and
// every batch it cuts.
void CheckBatches(const Tensor& t, const std::string& name,
                  const std::string& path, int axis, absl::string_view input) {
  quantd::client::CalibrationInput in;
  in.path = path;
  in.sample_axis = axis;
  // Open takes an axis with samples, and refuses samples of no values.
  const bool has_axis = t.rank() > 0 && axis >= 0 && axis < t.rank() &&
                        t.dim(axis) > 0 && t.size() > 0;
  // Small batches on small arrays, at most kMaxBatches on large ones.
  int64_t batch_size = 1 + static_cast<int64_t>(input.size() % 3);
  if (has_axis) {
    batch_size =
        std::max(batch_size, (t.dim(axis) + kMaxBatches - 1) / kMaxBatches);
  }
  absl::StatusOr<std::unique_ptr<quantd::client::CalibrationData>> data =
      quantd::client::CalibrationData::Open({in}, batch_size);
  if (!data.ok()) {
    CheckMessage(data.status(), input);
    if (has_axis) {
      Fail(absl::StrCat("Open refused sample axis ", axis, ": ",
                        data.status().ToString()),
           input);
    }
    return;
  }
  if (!has_axis) Fail(absl::StrCat("Open accepted sample axis ", axis), input);
  quantd::client::CalibrationData& d = **data;
  if (d.num_samples() != t.dim(axis) || d.batch_size() != batch_size) {
    Fail("Open counts the samples wrong", input);
  }
  const int32_t sent_type = t.dtype() == TP::DOUBLE || t.dtype() == TP::FLOAT16
                                ? TP::FLOAT
                                : t.dtype();
  int64_t next = 0, batches = 0;
  std::string first_batch;
  while (std::optional<quantd::v1::TensorBatch> batch = d.Next()) {
    if (batches == 0) first_batch = batch->SerializeAsString();
    ++batches;
    const int64_t n = std::min(batch_size, t.dim(axis) - next);
    if (n <= 0 || batch->tensors_size() != 1) {
      Fail("a batch past the end, or not one tensor", input);
    }
    const quantd::v1::NamedTensor& named = batch->tensors(0);
    bool shape_ok = named.name() == name && named.data_type() == sent_type &&
                    named.shape_size() == t.rank();
    for (int i = 0; shape_ok && i < t.rank(); ++i) {
      shape_ok = named.shape(i) == (i == axis ? n : t.dim(i));
    }
    if (!shape_ok) {
      Fail(
          absl::StrCat("batch ", batches, " has the wrong name, type or shape"),
          input);
    }
    if (named.data() != ExpectedBatchData(t, axis, next, n)) {
      Fail(absl::StrCat("batch ", batches, " does not hold rows ", next, "..",
                        next + n - 1),
           input);
    }
    next += n;
  }
  if (next != t.dim(axis) || batches != d.num_batches() || d.Next()) {
    Fail("the batches do not cover the samples once", input);
  }
  d.Rewind();
  std::optional<quantd::v1::TensorBatch> again = d.Next();
  if (!again || again->SerializeAsString() != first_batch) {
    Fail("Rewind does not start over", input);
  }
}

// The file each input is written to: one per process, so that parallel
// fuzzing jobs do not share it.
const std::string& InputPath() {
  static const std::string* path =
      new std::string(absl::StrCat("/tmp/quantd_npy_fuzzer.", getpid()));
  return *path;
}

bool WriteInput(absl::string_view input) {
  std::FILE* f = std::fopen(InputPath().c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(input.data(), 1, input.size(), f) == input.size();
  return std::fclose(f) == 0 && ok;
}

void FuzzClient(const absl::StatusOr<Tensor>& parsed, absl::string_view input) {
  if (!WriteInput(input)) {
    std::fprintf(stderr, "npy_fuzzer: cannot write %s\n", InputPath().c_str());
    std::abort();
  }
  const std::string& path = InputPath();
  std::string name = "unset";
  const absl::StatusOr<Tensor> read =
      quantd::client::ReadTensorFile(path, &name);
  const bool npy = absl::StartsWith(input, kNpyMagic);
  if (!read.ok()) {
    CheckMessage(read.status(), input);
    if (npy && read.status().code() != parsed.status().code()) {
      Fail("ReadTensorFile and ParseNpy refuse differently: " +
               read.status().ToString() + " / " + parsed.status().ToString(),
           input);
    }
  } else if (npy) {
    if (!parsed.ok() || !SameTensor(*read, *parsed) || !name.empty()) {
      Fail("ReadTensorFile reads a .npy file differently from ParseNpy", input);
    }
  } else {
    TP proto;
    if (!proto.ParseFromArray(input.data(), static_cast<int>(input.size())) ||
        name != proto.name()) {
      Fail("ReadTensorFile read a TensorProto protobuf does not", input);
    }
    if (static_cast<uint64_t>(read->bytes()) > 8 * input.size() + 8) {
      Fail(absl::StrCat("a ", input.size(), "-byte TensorProto read as ",
                        read->bytes(), " bytes"),
           input);
    }
  }
  if (read.ok() && !Sendable(read->dtype())) {
    absl::StatusOr<std::unique_ptr<quantd::client::CalibrationData>> data =
        quantd::client::CalibrationData::Open({{"", path, 0}}, 1);
    if (data.ok() || data.status().code() != absl::StatusCode::kUnimplemented) {
      Fail("Open did not refuse an unsendable type as UNIMPLEMENTED", input);
    }
  } else if (read.ok()) {
    const Tensor& t = *read;
    CheckBatches(t, name, path, 0, input);
    if (t.rank() > 1) CheckBatches(t, name, path, t.rank() - 1, input);
    // Out of range, and an array that goes whole alone: refused.
    CheckBatches(t, name, path, t.rank(), input);
    CheckBatches(t, name, path, quantd::client::CalibrationInput::kWhole,
                 input);
  }
  unlink(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A TensorProto's name need not be UTF-8, a NamedTensor's must: protobuf
  // logs each batch that carries such a name (the batch is still sent; the
  // server refuses it).
  quantd::fuzz::SilenceProtobufLogs();
  if (size > kMaxInputBytes) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  quantd::fuzz::ScopedAllocLimit limit("npy_fuzzer", size, kAllocSlack,
                                       kAllocPerInputByte);
  const absl::StatusOr<Tensor> parsed = quantd::executor::ParseNpy(input);
  CheckParsed(parsed, input);
  FuzzClient(parsed, input);
  return 0;
}
