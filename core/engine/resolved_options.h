// QuantizationOptions with the documented defaults applied, and the words
// for each value (for summaries, errors and GetServerInfo).
#ifndef QUANTD_CORE_ENGINE_RESOLVED_OPTIONS_H_
#define QUANTD_CORE_ENGINE_RESOLVED_OPTIONS_H_

#include <string>

#include "core/passes/op_sets.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace quantd {

using passes::Method;

struct ResolvedOptions {
  Method method = Method::kNone;
  // OP_SET_UNSPECIFIED resolves to TF, PRECISION_UNSPECIFIED to W8A8.
  tensorflow::quantization::OpSet op_set = tensorflow::quantization::TF;
  tensorflow::quantization::QuantizationPrecision precision =
      tensorflow::quantization::PRECISION_W8A8;
};

// Applies the defaults; never fails (CheckSupported judges the values).
// No method set (or an empty QuantizationMethod) is Method::kNone.
ResolvedOptions Resolve(
    const tensorflow::quantization::QuantizationOptions& options);

// "DYNAMIC_RANGE", "none" (no method: do not quantize), ...
std::string MethodName(Method method);
// Enum value names; "value 42 (unknown)" for numbers outside the enum.
std::string OpSetName(int op_set);
std::string PrecisionName(int precision);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_RESOLVED_OPTIONS_H_
