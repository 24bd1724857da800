// Fuzz target for the checks of a request's options before its model is
// read (core/engine/request_options.h): ResolveQuantizeRequest and
// ResolveCalibrateRequest on a QuantizeConfig or CalibrateConfig straight
// from the client, in binary or (for reach into enums and strings that
// mutations of binary seldom find) text format.
//
// Input: one byte of flags, then the config.
//   bit 0: CalibrateConfig (else QuantizeConfig)
//   bit 1: text format (google::protobuf::TextFormat), else binary
//   bit 2: Quantize only: batch_stream (the call carries batches)
// Inputs that do not parse are skipped: refusing them is protobuf's job.
//
// Checked (a violation aborts):
//  - a refusal is an error status whose code is neither INTERNAL nor
//    UNKNOWN, with a non-empty message of at most kMaxMessageBytes;
//  - the result depends on the config only: resolving it again, and
//    resolving its re-serialized copy, gives the same status;
//  - what the header promises is refused is refused: target_sqnr_db outside
//    (0, 200], holdout_batches < 0, batches with DYNAMIC_RANGE, and
//    observers that ValidateObserverConfig would refuse.
//
// Built two ways (fuzz/CMakeLists.txt): as a libFuzzer binary, and linked
// with fuzz/structured_corpus_main.cc as the ctest options_fuzz_corpus.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/calibration/observers.h"
#include "core/engine/request_options.h"
#include "core/engine/resolved_options.h"
#include "fuzz/quiet_protobuf.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "quantd/v1/quantization_service.pb.h"

namespace {

// Configs are a few hundred bytes; longer inputs only repeat fields.
constexpr size_t kMaxInputBytes = 16 << 10;
// A refusal's message is for a person: it may quote a field of the input
// (at most kMaxInputBytes) but must not grow beyond a few of those.
constexpr size_t kMaxMessageBytes = 64 << 10;

[[noreturn]] void Fail(const std::string& what, const std::string& input) {
  std::fprintf(stderr, "options_fuzzer: %s\ninput (%zu bytes): ", what.c_str(),
               input.size());
  for (size_t i = 0; i < input.size() && i < 4096; ++i) {
    std::fprintf(stderr, "%02x", static_cast<uint8_t>(input[i]));
  }
  std::fprintf(stderr, "\n");
  std::abort();
}

void CheckRefusal(const absl::Status& status, const std::string& input) {
  if (status.ok()) return;
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

// Text-format errors go nowhere: most mutated inputs do not parse, and
// protobuf would log each.
class QuietErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber,
                const std::string&) override {}
};

// A config as the server could receive it. The text parser accepts string
// fields that are not UTF-8, which the binary parse of a gRPC request
// refuses: such a config never reaches the checks, so it is skipped (false).
template <typename Config>
bool Parse(const std::string& bytes, bool text, Config* config) {
  if (!text) return config->ParseFromString(bytes);
  google::protobuf::TextFormat::Parser parser;
  QuietErrors quiet;
  parser.RecordErrorsTo(&quiet);
  Config parsed;
  return parser.ParseFromString(bytes, &parsed) &&
         config->ParseFromString(parsed.SerializeAsString());
}

void FuzzCalibrate(const quantd::v1::CalibrateConfig& config,
                   const std::string& input) {
  const absl::StatusOr<quantd::calibration::ObserverConfig> r =
      quantd::ResolveCalibrateRequest(config);
  CheckRefusal(r.status(), input);
  if (r.ok()) {
    const absl::Status again = quantd::calibration::ValidateObserverConfig(*r);
    if (!again.ok()) {
      Fail("accepted observers that ValidateObserverConfig refuses: " +
               again.ToString(),
           input);
    }
  }
  quantd::v1::CalibrateConfig copy;
  if (!copy.ParseFromString(config.SerializeAsString()) ||
      quantd::ResolveCalibrateRequest(copy).status() != r.status()) {
    Fail("the re-serialized config resolves differently", input);
  }
}

void FuzzQuantize(const quantd::v1::QuantizeConfig& config, bool batch_stream,
                  const std::string& input) {
  const absl::StatusOr<quantd::QuantizeRequestOptions> r =
      quantd::ResolveQuantizeRequest(config, batch_stream);
  CheckRefusal(r.status(), input);
  if (quantd::ResolveQuantizeRequest(config, batch_stream).status() !=
      r.status()) {
    Fail("resolving the same config twice differs", input);
  }
  quantd::v1::QuantizeConfig copy;
  if (!copy.ParseFromString(config.SerializeAsString()) ||
      quantd::ResolveQuantizeRequest(copy, batch_stream).status() !=
          r.status()) {
    Fail("the re-serialized config resolves differently", input);
  }
  if (!r.ok()) return;

  // What request_options.h says is refused.
  if (config.has_target_sqnr_db() &&
      !(config.target_sqnr_db() > 0 && config.target_sqnr_db() <= 200)) {
    Fail("accepted target_sqnr_db outside (0, 200]", input);
  }
  if (config.has_target_agreement() &&
      !(config.target_agreement() > 0 && config.target_agreement() <= 1)) {
    Fail("accepted target_agreement outside (0, 1]", input);
  }
  if (config.holdout_batches() < 0) Fail("accepted holdout_batches < 0", input);
  if (r->pass_through) return;
  const quantd::Method method = r->resolved.method;
  // Batches with DYNAMIC_RANGE feed only the weight algorithms that read
  // the layers' inputs (request_options.h, check 4).
  const quantd::v1::WeightAlgorithm algorithm = config.weight_algorithm();
  const bool weights_use_batches =
      algorithm == quantd::v1::WEIGHT_ALGORITHM_GPTQ ||
      algorithm == quantd::v1::WEIGHT_ALGORITHM_AWQ ||
      algorithm == quantd::v1::WEIGHT_ALGORITHM_AWQ_GPTQ ||
      config.bias_correction() || config.has_smoothquant();
  if (config.cross_check() && algorithm != quantd::v1::WEIGHT_ALGORITHM_GPTQ &&
      algorithm != quantd::v1::WEIGHT_ALGORITHM_AWQ &&
      algorithm != quantd::v1::WEIGHT_ALGORITHM_AWQ_GPTQ) {
    Fail("accepted cross_check without GPTQ or AWQ", input);
  }
  if (method == quantd::Method::kDynamicRange && batch_stream &&
      !weights_use_batches) {
    Fail("accepted calibration batches with DYNAMIC_RANGE", input);
  }
  if (method != quantd::Method::kStaticRange &&
      method != quantd::Method::kDynamicRange) {
    Fail(absl::StrCat("accepted method ", quantd::MethodName(method)), input);
  }
  if (method == quantd::Method::kStaticRange && batch_stream &&
      config.calibration().ranges_size() == 0) {
    const absl::Status observers =
        quantd::calibration::ValidateObserverConfig(r->observers);
    if (!observers.ok()) {
      Fail("accepted in-call observers that ValidateObserverConfig refuses: " +
               observers.ToString(),
           input);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Invalid UTF-8 in a string field is logged on every binary parse that
  // meets it; errors that matter abort the target instead.
  quantd::fuzz::SilenceProtobufLogs();
  if (size == 0 || size > kMaxInputBytes) return 0;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const uint8_t flags = data[0];
  const bool calibrate = (flags & 1) != 0;
  const bool text = (flags & 2) != 0;
  const bool batch_stream = (flags & 4) != 0;
  const std::string bytes = input.substr(1);
  if (calibrate) {
    quantd::v1::CalibrateConfig config;
    if (Parse(bytes, text, &config)) FuzzCalibrate(config, input);
  } else {
    quantd::v1::QuantizeConfig config;
    if (Parse(bytes, text, &config)) FuzzQuantize(config, batch_stream, input);
  }
  return 0;
}
