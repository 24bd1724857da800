// How quantctl turns --options (a text-format QuantizationOptions file) and
// the short flags into the QuantizationOptions it sends.
#ifndef QUANTD_CLIENT_QUANTCTL_OPTIONS_H_
#define QUANTD_CLIENT_QUANTCTL_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace quantd::client {

// The option-related command-line values; empty means "not given".
struct QuantctlOptionFlags {
  std::string options_file;  // --options
  std::string method;        // --method: dynamic_range | static_range
  std::string precision;     // --precision: w8a8 | w4a8 | w4a4 | full
  std::string op_set;        // --op_set: tf | xla | uniform_quantized
};

// A comma-separated list of --precision's spellings ("w4a8,w8a8,full") for
// --`flag`; INVALID_ARGUMENT names the first unknown item and the accepted
// ones.
absl::StatusOr<std::vector<tensorflow::quantization::QuantizationPrecision>>
ParsePrecisionList(absl::string_view flag, absl::string_view given);

// Parses protobuf text format. INVALID_ARGUMENT names `source`, the line and
// column (1-based) and the parser's message.
absl::StatusOr<tensorflow::quantization::QuantizationOptions>
ParseQuantizationOptionsText(absl::string_view text, absl::string_view source);

// The file (if any), then the flags on top of it. With neither, the options
// are empty and quantization_method is unset ("do not quantize"). Unknown
// flag values are INVALID_ARGUMENT listing the accepted ones.
absl::StatusOr<tensorflow::quantization::QuantizationOptions>
BuildQuantizationOptions(const QuantctlOptionFlags& flags);

}  // namespace quantd::client

#endif  // QUANTD_CLIENT_QUANTCTL_OPTIONS_H_
