// Fuzz target for the ONNX TensorProto readers: core/graph/tensor_util.h
// (NumElements, CheckTensorSize, ReadFloatTensor, DataBytes), the
// executor's Tensor::FromProto (core/executor/tensor.h: initializers, and
// the client's .pb calibration files) and graph::CheckModelFields /
// CheckStructure (core/graph/validate.h) on a model that carries the tensor
// as its one initializer and as a Constant node's value.
//
// Input: the bytes of one onnx::TensorProto (make_tensor_proto_seeds.py
// writes seeds). Inputs that do not parse are skipped: refusing them is
// protobuf's job.
//
// Checked (a violation aborts):
//  - a refusal is an error status with a non-empty message of at most
//    kMaxMessageBytes; the graph functions refuse with INVALID_ARGUMENT,
//    FromProto never with INTERNAL or UNKNOWN;
//  - NumElements is the product of the dims, -1 for a negative dim or a
//    product (of the non-zero dims) beyond int64;
//  - CheckTensorSize accepts raw_data of a fixed-size type only when it
//    holds exactly the dims' bytes (sub-byte types packed);
//  - ReadFloatTensor succeeds exactly when data_type is FLOAT, the data is
//    not external and CheckTensorSize accepts, and returns NumElements
//    values, bit for bit those of raw_data or float_data;
//  - DataBytes is raw_data's size when there is one, and never more than 8
//    bytes per input byte (a 1-byte varint int64_data entry weighs 8);
//  - FromProto succeeds only for what CheckTensorSize accepts, with the
//    proto's type and dims, at most 8 bytes per input byte, and its
//    ToProto reads back the same; it succeeds for every fixed-size type
//    the executor holds whose data CheckTensorSize accepts (4-bit
//    int32_data entries must be bytes);
//  - CheckModelFields accepts the model exactly when the tensor has an
//    ONNX type, no external data or segment, dims >= 0, a name of at most
//    kMaxNameBytes and a size CheckTensorSize accepts (validate.h);
//    CheckStructure accepts the one-initializer graph exactly when
//    CheckTensorSize accepts the tensor;
//  - replay builds (no sanitizer): no single allocation beyond
//    kAllocSlack + kAllocPerInputByte x the input size, so dims whose
//    product is 2^40 with no data are refused, never allocated (libFuzzer
//    builds have ASan's -malloc_limit_mb for that).
//
// Built two ways (fuzz/CMakeLists.txt): as a libFuzzer binary, and linked
// with fuzz/structured_corpus_main.cc as the ctest tensor_proto_fuzz_corpus.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/executor/tensor.h"
#include "core/graph/tensor_util.h"
#include "core/graph/validate.h"
#include "fuzz/alloc_limit.h"
#include "fuzz/quiet_protobuf.h"
#include "fuzz/tensor_bytes.h"
#include "onnx/onnx_pb.h"

namespace {

namespace graph = quantd::graph;
using quantd::executor::Tensor;
using TP = onnx::TensorProto;

// Seeds are tens of bytes; longer inputs only lengthen the data.
constexpr size_t kMaxInputBytes = 64 << 10;
constexpr size_t kMaxMessageBytes = 64 << 10;
// The largest allocation an input may cause: the tensor copied into two
// models and a few widened copies of its values (a 1-byte varint to an
// 8-byte int64), plus fixed overhead.
constexpr size_t kAllocSlack = 1 << 20;
constexpr size_t kAllocPerInputByte = 16;

[[noreturn]] void Fail(const std::string& what, const std::string& input) {
  std::fprintf(stderr,
               "tensor_proto_fuzzer: %s\ninput (%zu bytes): ", what.c_str(),
               input.size());
  for (size_t i = 0; i < input.size() && i < 4096; ++i) {
    std::fprintf(stderr, "%02x", static_cast<uint8_t>(input[i]));
  }
  std::fprintf(stderr, "\n");
  std::abort();
}

void CheckMessage(const absl::Status& status, const std::string& input) {
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

void CheckInvalidArgument(const absl::Status& status, const char* what,
                          const std::string& input) {
  if (status.ok()) return;
  CheckMessage(status, input);
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    Fail(absl::StrCat(what, " refused with ", status.ToString()), input);
  }
}

// NumElements as tensor_util.h defines it, without its helpers.
int64_t ExpectedElements(const TP& t) {
  int64_t n = 1;
  bool zero = false, overflow = false;
  for (int64_t d : t.dims()) {
    if (d < 0) return -1;
    if (d == 0) {
      zero = true;
    } else if (!overflow && __builtin_mul_overflow(n, d, &n)) {
      overflow = true;
    }
  }
  if (overflow) return -1;
  return zero ? 0 : n;
}

// Bits per element of the types whose raw_data size the dims fix; 0 for
// the rest (strings, numbers that are no ONNX type).
int RawBits(int32_t type) {
  switch (type) {
    case TP::FLOAT:
    case TP::INT32:
    case TP::UINT32:
      return 32;
    case TP::DOUBLE:
    case TP::INT64:
    case TP::UINT64:
    case TP::COMPLEX64:
      return 64;
    case TP::COMPLEX128:
      return 128;
    case TP::INT16:
    case TP::UINT16:
    case TP::FLOAT16:
    case TP::BFLOAT16:
      return 16;
    case TP::INT8:
    case TP::UINT8:
    case TP::BOOL:
    case graph::kFloat8E4M3Fn:
    case graph::kFloat8E4M3Fnuz:
    case graph::kFloat8E5M2:
    case graph::kFloat8E5M2Fnuz:
    case graph::kFloat8E8M0:
      return 8;
    case graph::kUint4:
    case graph::kInt4:
    case graph::kFloat4E2M1:
      return 4;
    case graph::kUint2:
    case graph::kInt2:
      return 2;
    default:
      return 0;
  }
}

void CheckReadFloat(const TP& t, bool size_ok, int64_t n,
                    const std::string& input) {
  const absl::StatusOr<std::vector<float>> values = graph::ReadFloatTensor(t);
  const bool expect_ok =
      t.data_type() == TP::FLOAT && !graph::HasExternalData(t) && size_ok;
  if (values.ok() != expect_ok) {
    Fail(absl::StrCat("ReadFloatTensor ", values.ok() ? "accepted" : "refused",
                      " a tensor of type ", t.data_type(), ", CheckTensorSize ",
                      size_ok ? "OK" : "refusing"),
         input);
  }
  CheckInvalidArgument(values.status(), "ReadFloatTensor", input);
  if (!values.ok()) return;
  if (static_cast<int64_t>(values->size()) != n) {
    Fail(absl::StrCat("ReadFloatTensor returned ", values->size(),
                      " values for ", n, " elements"),
         input);
  }
  const bool same =
      t.has_raw_data()
          ? t.raw_data().size() == values->size() * sizeof(float) &&
                (values->empty() ||
                 std::memcmp(values->data(), t.raw_data().data(),
                             t.raw_data().size()) == 0)
          : t.float_data_size() == n &&
                (values->empty() ||
                 std::memcmp(values->data(), t.float_data().data(),
                             values->size() * sizeof(float)) == 0);
  if (!same) Fail("ReadFloatTensor's values are not the tensor's", input);
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.bytes() == b.bytes() &&
         (a.bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

bool IsFourBit(int32_t type) {
  return type == graph::kInt4 || type == graph::kUint4;
}

void CheckFromProto(const TP& t, bool size_ok, const std::string& input) {
  const absl::StatusOr<Tensor> r = Tensor::FromProto(t);
  bool bytes_entries = true;  // 4-bit int32_data entries are packed bytes.
  if (IsFourBit(t.data_type()) && !t.has_raw_data()) {
    for (int32_t v : t.int32_data()) bytes_entries &= v >= 0 && v <= 255;
  }
  const bool expect_ok = quantd::executor::ElementSize(t.data_type()) > 0 &&
                         !graph::HasExternalData(t) && size_ok && bytes_entries;
  if (r.ok() != expect_ok) {
    Fail(absl::StrCat("FromProto ", r.ok() ? "accepted" : "refused",
                      " a tensor of type ", t.data_type(), ", CheckTensorSize ",
                      size_ok ? "OK" : "refusing", ": ", r.status().ToString()),
         input);
  }
  if (!r.ok()) {
    CheckMessage(r.status(), input);
    return;
  }
  if (r->dtype() != t.data_type() || r->shape() != graph::Dims(t)) {
    Fail("FromProto changed the type or the dims", input);
  }
  if (static_cast<uint64_t>(r->bytes()) > 8 * input.size() + 8) {
    Fail(absl::StrCat("a ", input.size(), "-byte TensorProto read as ",
                      r->bytes(), " bytes"),
         input);
  }
  if (t.has_raw_data() && !IsFourBit(t.data_type()) &&
      (static_cast<size_t>(r->bytes()) != t.raw_data().size() ||
       !quantd::fuzz::TensorHoldsBytes(*r, t.raw_data().data()))) {
    Fail("FromProto's values are not raw_data", input);
  }
  const absl::StatusOr<Tensor> back = Tensor::FromProto(r->ToProto("t"));
  if (!back.ok() || !SameTensor(*r, *back)) {
    Fail("FromProto(ToProto(FromProto(t))) differs", input);
  }
}

// What validate.h says CheckModelFields accepts, for a model whose only
// content is `t`.
bool FieldsOk(const TP& t, bool size_ok) {
  if (!graph::IsOnnxDataType(t.data_type())) return false;
  if (graph::HasExternalData(t) || t.external_data_size() > 0) return false;
  if (t.has_segment() || t.name().size() > graph::kMaxNameBytes) return false;
  for (int64_t d : t.dims()) {
    if (d < 0) return false;
  }
  return size_ok;
}

void CheckModels(const TP& t, bool size_ok, const std::string& input) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("g");
  *g->add_initializer() = t;
  const bool expect_ok = FieldsOk(t, size_ok);
  const absl::Status fields = graph::CheckModelFields(model);
  if (fields.ok() != expect_ok) {
    Fail("CheckModelFields on the initializer: " + fields.ToString(), input);
  }
  CheckInvalidArgument(fields, "CheckModelFields", input);
  const absl::Status structure = graph::CheckStructure(*g);
  if (structure.ok() != size_ok) {
    Fail("CheckStructure on the initializer: " + structure.ToString(), input);
  }
  CheckInvalidArgument(structure, "CheckStructure", input);

  // The same tensor as a Constant's value: the attribute walk.
  g->clear_initializer();
  onnx::NodeProto* node = g->add_node();
  node->set_op_type("Constant");
  node->add_output("c");
  onnx::AttributeProto* value = node->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() = t;
  const absl::Status constant = graph::CheckModelFields(model);
  if (constant.ok() != expect_ok) {
    Fail("CheckModelFields on the Constant: " + constant.ToString(), input);
  }
  CheckInvalidArgument(constant, "CheckModelFields", input);
}

void FuzzTensor(const TP& t, const std::string& input) {
  const int64_t n = graph::NumElements(t);
  if (n != ExpectedElements(t)) {
    Fail(absl::StrCat("NumElements is ", n, ", not ", ExpectedElements(t)),
         input);
  }
  if (graph::Dims(t) !=
      std::vector<int64_t>(t.dims().begin(), t.dims().end())) {
    Fail("Dims differs from the dims", input);
  }

  const absl::Status size = graph::CheckTensorSize(t);
  CheckInvalidArgument(size, "CheckTensorSize", input);
  const bool size_ok = size.ok();
  if (size_ok && !graph::HasExternalData(t)) {
    if (n < 0) Fail("CheckTensorSize accepted a bad shape", input);
    const int bits = RawBits(t.data_type());
    if (t.has_raw_data() && bits > 0) {
      const unsigned __int128 want =
          (static_cast<unsigned __int128>(n) * bits + 7) / 8;
      if (want != t.raw_data().size()) {
        Fail(absl::StrCat("CheckTensorSize accepted ", t.raw_data().size(),
                          " raw bytes for ", n, " elements of ", bits, " bits"),
             input);
      }
    }
  }

  const uint64_t data_bytes = graph::DataBytes(t);
  if ((t.has_raw_data() && data_bytes != t.raw_data().size()) ||
      data_bytes > 8 * input.size()) {
    Fail(absl::StrCat("DataBytes is ", data_bytes, " for ", input.size(),
                      " input bytes"),
         input);
  }

  CheckReadFloat(t, size_ok, n, input);
  CheckFromProto(t, size_ok, input);
  CheckModels(t, size_ok, input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Protobuf logs invalid UTF-8 in string fields on each parse; a violated
  // check aborts instead.
  quantd::fuzz::SilenceProtobufLogs();
  if (size > kMaxInputBytes) return 0;
  const std::string input(reinterpret_cast<const char*>(data), size);
  quantd::fuzz::ScopedAllocLimit limit("tensor_proto_fuzzer", size, kAllocSlack,
                                       kAllocPerInputByte);
  TP t;
  if (!t.ParseFromString(input)) return 0;
  FuzzTensor(t, input);
  return 0;
}
