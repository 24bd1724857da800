#include "client/quantctl_options.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/file_util.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace quantd::client {
namespace {

using tensorflow::quantization::OpSet;
using tensorflow::quantization::QuantizationMethod;
using tensorflow::quantization::QuantizationOptions;
using tensorflow::quantization::QuantizationPrecision;

// Keeps the first error of the text-format parser, with its position.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!error_.empty()) return;
    // The parser counts from 0; editors and people count from 1.
    error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// The accepted spellings of one flag, in the order they are listed.
template <typename T>
struct FlagValue {
  const char* name;
  T value;
};

template <typename T>
absl::StatusOr<T> LookUp(absl::string_view flag, absl::string_view given,
                         const std::vector<FlagValue<T>>& accepted) {
  const std::string lower = absl::AsciiStrToLower(given);
  std::vector<std::string> names;
  for (const FlagValue<T>& entry : accepted) {
    if (lower == entry.name) return entry.value;
    names.push_back(entry.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, "=", given, " is not one of: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<QuantizationPrecision> LookUpPrecision(absl::string_view flag,
                                                      absl::string_view given) {
  return LookUp(flag, given,
                std::vector<FlagValue<QuantizationPrecision>>{
                    {"w8a8", tensorflow::quantization::PRECISION_W8A8},
                    {"w4a8", tensorflow::quantization::PRECISION_W4A8},
                    {"w4a4", tensorflow::quantization::PRECISION_W4A4},
                    {"full", tensorflow::quantization::PRECISION_FULL}});
}

}  // namespace

absl::StatusOr<std::vector<QuantizationPrecision>> ParsePrecisionList(
    absl::string_view flag, absl::string_view given) {
  std::vector<QuantizationPrecision> out;
  for (absl::string_view item : absl::StrSplit(given, ',')) {
    absl::StatusOr<QuantizationPrecision> p =
        LookUpPrecision(flag, absl::StripAsciiWhitespace(item));
    if (!p.ok()) return p.status();
    out.push_back(*p);
  }
  return out;
}

absl::StatusOr<QuantizationOptions> ParseQuantizationOptionsText(
    absl::string_view text, absl::string_view source) {
  QuantizationOptions options;
  FirstErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &options)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":",
        errors.error().empty() ? "0:0: parse error" : errors.error()));
  }
  return options;
}

absl::StatusOr<QuantizationOptions> BuildQuantizationOptions(
    const QuantctlOptionFlags& flags) {
  QuantizationOptions options;
  if (!flags.options_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(flags.options_file);
    if (!text.ok()) return text.status();
    absl::StatusOr<QuantizationOptions> parsed =
        ParseQuantizationOptionsText(*text, flags.options_file);
    if (!parsed.ok()) return parsed.status();
    options = std::move(*parsed);
  }
  if (!flags.method.empty()) {
    absl::StatusOr<QuantizationMethod::ExperimentalMethod> method =
        LookUp("method", flags.method,
               std::vector<FlagValue<QuantizationMethod::ExperimentalMethod>>{
                   {"dynamic_range", QuantizationMethod::DYNAMIC_RANGE},
                   {"static_range", QuantizationMethod::STATIC_RANGE}});
    if (!method.ok()) return method.status();
    options.mutable_quantization_method()->set_experimental_method(*method);
  }
  if (!flags.precision.empty()) {
    absl::StatusOr<QuantizationPrecision> precision =
        LookUpPrecision("precision", flags.precision);
    if (!precision.ok()) return precision.status();
    options.set_quantization_precision(*precision);
  }
  if (!flags.op_set.empty()) {
    absl::StatusOr<OpSet> op_set =
        LookUp("op_set", flags.op_set,
               std::vector<FlagValue<OpSet>>{
                   {"tf", tensorflow::quantization::TF},
                   {"xla", tensorflow::quantization::XLA},
                   {"uniform_quantized",
                    tensorflow::quantization::UNIFORM_QUANTIZED}});
    if (!op_set.ok()) return op_set.status();
    options.set_op_set(*op_set);
  }
  return options;
}

}  // namespace quantd::client
