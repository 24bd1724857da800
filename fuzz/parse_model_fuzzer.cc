// Differential fuzz target for ParseModel (core/graph/model_io.cc), whose
// hand-written wire-format walker reads untrusted bytes from the network.
// Its contract: the same model as protobuf's own ParseFromArray, except that
// a parse without a graph is INVALID_ARGUMENT. Checked here for the real
// piece size and for tiny ones (internal::ParseModelInPieces), with which
// small inputs reach the large-field paths (claimed initializers, raw_data
// copied in pieces); then SerializeModel must round-trip the result.
//
// Built two ways (fuzz/CMakeLists.txt): as a libFuzzer binary, and linked
// with fuzz/parse_model_corpus_main.cc as the ctest parse_model_fuzz_corpus.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/cancellation.h"
#include "core/graph/model_io.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "onnx/onnx_pb.h"

namespace {

using quantd::graph::internal::ParseModelInPieces;

// Larger inputs add nothing the walker does not already see at small piece
// sizes, and only slow the fuzzer down.
constexpr size_t kMaxInputBytes = 1 << 20;

// Piece sizes besides kModelIoChunkBytes: 1 claims every non-empty graph
// initializer and raw_data and flushes a run after every field; 16 mixes
// claimed fields with multi-field runs.
constexpr size_t kSmallPieces[] = {1, 16};

[[noreturn]] void Fail(const char* what, absl::string_view input,
                       const std::string& detail = "") {
  std::fprintf(stderr, "parse_model_fuzzer: %s%s%s\ninput (%zu bytes): ", what,
               detail.empty() ? "" : ": ", detail.c_str(), input.size());
  for (size_t i = 0; i < input.size() && i < 4096; ++i) {
    std::fprintf(stderr, "%02x", static_cast<uint8_t>(input[i]));
  }
  std::fprintf(stderr, "%s\n", input.size() > 4096 ? "..." : "");
  std::abort();
}

// Deterministic serialization: equal messages give equal bytes whatever
// order their fields were set in.
std::string Canonical(const onnx::ModelProto& model) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    model.SerializeToCodedStream(&coded);
  }
  return out;
}

// `result` (from ParseModel or ParseModelInPieces) against protobuf's parse.
void Compare(const absl::StatusOr<onnx::ModelProto>& result, bool reference_ok,
             const std::string& reference, absl::string_view input,
             const char* which) {
  if (result.ok() != reference_ok) {
    Fail(reference_ok ? "protobuf parses a model, ParseModel fails"
                      : "ParseModel accepts what protobuf rejects",
         input,
         std::string(which) + (result.ok() ? "" : " says: ") +
             (result.ok() ? "" : result.status().ToString()));
  }
  if (!result.ok() &&
      result.status().code() != absl::StatusCode::kInvalidArgument) {
    Fail("failed parse is not INVALID_ARGUMENT", input,
         std::string(which) + ": " + result.status().ToString());
  }
  if (result.ok() && Canonical(*result) != reference) {
    Fail("ParseModel's model differs from protobuf's", input, which);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);

  // The reference: protobuf's flat-array parse (no 64 MiB total-bytes
  // limit applies to it) plus ParseModel's "no graph" rule.
  onnx::ModelProto expected;
  const bool reference_ok =
      size > 0 && expected.ParseFromArray(data, static_cast<int>(size)) &&
      expected.has_graph();
  const std::string reference = reference_ok ? Canonical(expected) : "";

  const absl::StatusOr<onnx::ModelProto> parsed =
      quantd::graph::ParseModel(input);
  Compare(parsed, reference_ok, reference, input, "ParseModel");
  for (size_t piece : kSmallPieces) {
    Compare(ParseModelInPieces(input, piece), reference_ok, reference, input,
            piece == 1 ? "ParseModelInPieces(1)" : "ParseModelInPieces(16)");
  }

  // A cancelled parse of anything non-empty is CANCELLED, never a model.
  quantd::CancellationToken cancelled;
  cancelled.Cancel();
  const absl::StatusOr<onnx::ModelProto> stopped =
      ParseModelInPieces(input, 16, &cancelled);
  if (size > 0 && stopped.status().code() != absl::StatusCode::kCancelled) {
    Fail("cancelled parse is not CANCELLED", input,
         stopped.status().ToString());
  }

  if (!parsed.ok()) return 0;
  // SerializeModel writes the canonical bytes, and they parse back to the
  // same model, at any piece size.
  const absl::StatusOr<std::string> bytes =
      quantd::graph::SerializeModel(*parsed);
  if (!bytes.ok())
    Fail("SerializeModel failed", input, bytes.status().ToString());
  if (*bytes != reference) {
    Fail("SerializeModel's bytes differ from deterministic protobuf", input);
  }
  Compare(quantd::graph::ParseModel(*bytes), true, reference, input,
          "ParseModel(SerializeModel(m))");
  Compare(ParseModelInPieces(*bytes, 1), true, reference, input,
          "ParseModelInPieces(SerializeModel(m), 1)");
  return 0;
}
