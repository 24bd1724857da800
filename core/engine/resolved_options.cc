#include "core/engine/resolved_options.h"

#include "absl/strings/str_cat.h"

namespace quantd {
namespace tfq = tensorflow::quantization;

namespace {

Method FromExperimental(int value) {
  switch (value) {
    case tfq::QuantizationMethod::EXPERIMENTAL_METHOD_UNSPECIFIED:
      return Method::kUnspecified;
    case tfq::QuantizationMethod::STATIC_RANGE:
      return Method::kStaticRange;
    case tfq::QuantizationMethod::DYNAMIC_RANGE:
      return Method::kDynamicRange;
    default:
      return Method::kUnknown;
  }
}

}  // namespace

ResolvedOptions Resolve(const tfq::QuantizationOptions& options) {
  ResolvedOptions resolved;
  const tfq::QuantizationMethod& method = options.quantization_method();
  switch (method.method_oneof_case()) {
    case tfq::QuantizationMethod::kMethod:
      resolved.method =
          method.method() == tfq::QuantizationMethod::METHOD_UNSPECIFIED
              ? Method::kUnspecified
              : Method::kUnknown;
      break;
    case tfq::QuantizationMethod::kExperimentalMethod:
      resolved.method = FromExperimental(method.experimental_method());
      break;
    case tfq::QuantizationMethod::METHOD_ONEOF_NOT_SET:
      resolved.method = Method::kNone;
      break;
  }
  if (options.op_set() != tfq::OP_SET_UNSPECIFIED) {
    resolved.op_set = options.op_set();
  }
  if (options.quantization_precision() != tfq::PRECISION_UNSPECIFIED) {
    resolved.precision = options.quantization_precision();
  }
  return resolved;
}

std::string MethodName(Method method) {
  switch (method) {
    case Method::kNone:
      return "none";
    case Method::kUnspecified:
      return "METHOD_UNSPECIFIED";
    case Method::kStaticRange:
      return "STATIC_RANGE";
    case Method::kDynamicRange:
      return "DYNAMIC_RANGE";
    case Method::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string OpSetName(int op_set) {
  if (!tfq::OpSet_IsValid(op_set)) {
    return absl::StrCat("value ", op_set, " (unknown)");
  }
  return tfq::OpSet_Name(static_cast<tfq::OpSet>(op_set));
}

std::string PrecisionName(int precision) {
  if (!tfq::QuantizationPrecision_IsValid(precision)) {
    return absl::StrCat("value ", precision, " (unknown)");
  }
  return tfq::QuantizationPrecision_Name(
      static_cast<tfq::QuantizationPrecision>(precision));
}

}  // namespace quantd
