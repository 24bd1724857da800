#include "core/engine/capabilities.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/engine/resolved_options.h"
#include "core/graph/validate.h"

namespace quantd {
namespace {
namespace tfq = tensorflow::quantization;

constexpr Method kMethods[] = {Method::kStaticRange, Method::kDynamicRange};
constexpr tfq::OpSet kOpSets[] = {tfq::TF, tfq::XLA, tfq::UNIFORM_QUANTIZED};
constexpr tfq::QuantizationPrecision kPrecisions[] = {
    tfq::PRECISION_FULL, tfq::PRECISION_W4A4, tfq::PRECISION_W4A8,
    tfq::PRECISION_W8A8};

// Below opset 11 the converter must lift the model first (see passes/).
constexpr int64_t kMinInputOpset = 1;

quantd::v1::Capability MakeCapability(Method method, tfq::OpSet op_set,
                                      tfq::QuantizationPrecision precision) {
  quantd::v1::Capability c;
  c.set_method(MethodName(method));
  c.set_op_set(op_set);
  c.set_precision(precision);
  if (precision == tfq::PRECISION_FULL) {
    c.set_supported(true);
    c.set_note("model returned unchanged (FULL = do not quantize)");
  } else if (method == Method::kDynamicRange && op_set == tfq::TF &&
             precision == tfq::PRECISION_W8A8) {
    c.set_supported(true);
    c.set_note(
        "Conv/Gemm/MatMul weights stored INT8 (per-channel, symmetric, "
        "narrow range) behind DequantizeLinear; activations quantized at run "
        "time by DynamicQuantizeLinear -> DequantizeLinear (uint8)");
  } else if (method == Method::kDynamicRange && op_set == tfq::XLA &&
             precision == tfq::PRECISION_W8A8) {
    c.set_supported(true);
    c.set_note(
        "integer compute: activations quantized at run time by "
        "DynamicQuantizeLinear (uint8); MatMul and Gemm (alpha = beta = 1, "
        "transA = 0) -> MatMulInteger with INT8 weights (per-channel, "
        "symmetric, narrow range), Conv -> ConvInteger with UINT8 weights "
        "(int8 + 128, zero point 128: ONNX Runtime's CPU ConvInteger takes "
        "uint8 x uint8 only); int32 -> Cast -> Mul(x_scale * w_scale) -> Add "
        "bias; other Gemms are UNIMPLEMENTED");
  } else if (method == Method::kStaticRange && op_set == tfq::TF &&
             precision == tfq::PRECISION_W8A8) {
    c.set_supported(true);
    c.set_note(
        "QDQ: Conv/Gemm/MatMul weights INT8 (per-channel, symmetric, narrow "
        "range), biases INT32 (scale = input scale x weight scale), one "
        "QuantizeLinear -> DequantizeLinear (uint8, calibrated range) per "
        "activation between its producer and all its consumers; needs "
        "config.calibration or calibration batches");
  } else if (method == Method::kStaticRange && op_set == tfq::XLA &&
             precision == tfq::PRECISION_W8A8) {
    c.set_supported(true);
    c.set_note(
        "integer compute from the calibrated QDQ graph: QuantizeLinear "
        "(uint8, calibrated scale) -> MatMulInteger with INT8 weights "
        "(MatMul; Gemm with alpha = beta = 1, transA = 0) or ConvInteger "
        "with UINT8 weights (int8 + 128, zero point 128) -> int32 [+ int32 "
        "bias] -> Cast -> Mul(x_scale * w_scale); nodes it cannot express "
        "stay QDQ and are named in the summary; needs calibration");
  } else if (method == Method::kStaticRange &&
             op_set == tfq::UNIFORM_QUANTIZED &&
             precision == tfq::PRECISION_W8A8) {
    c.set_supported(true);
    c.set_note(
        "QLinearConv (per-channel INT8 weights, INT32 bias, Relu folded when "
        "its output's zero point is 0) and QLinearMatMul (per-column "
        "weights; a Gemm with a bias becomes a 1x1 QLinearConv), uint8 "
        "between consecutive quantized ops, QuantizeLinear / "
        "DequantizeLinear only at the edges of quantized regions; a node "
        "whose output has no calibrated quantization point (e.g. a graph "
        "output) stays QDQ and is named in the summary; needs calibration");
  } else if (method == Method::kDynamicRange &&
             op_set == tfq::UNIFORM_QUANTIZED) {
    c.set_supported(false);
    c.set_note(
        "cannot be produced: QLinearConv / QLinearMatMul need a static "
        "output scale and zero point, which DYNAMIC_RANGE does not have "
        "(activations are quantized at run time); use STATIC_RANGE with "
        "op_set UNIFORM_QUANTIZED (needs calibration), or DYNAMIC_RANGE with "
        "op_set XLA or TF");
  } else if (method == Method::kStaticRange &&
             (op_set == tfq::XLA || op_set == tfq::UNIFORM_QUANTIZED) &&
             (precision == tfq::PRECISION_W4A8 ||
              precision == tfq::PRECISION_W4A4)) {
    c.set_supported(false);
    c.set_note(op_set == tfq::XLA
                   ? "4-bit weights: ConvInteger / MatMulInteger take 8-bit "
                     "inputs only; use op_set TF for 4-bit weights"
                   : "4-bit weights: QLinearConv / QLinearMatMul take 8-bit "
                     "inputs only; use op_set TF for 4-bit weights");
  } else if (op_set == tfq::TF && precision == tfq::PRECISION_W4A8) {
    c.set_supported(true);
    c.set_note(absl::StrCat(
        "Conv/Gemm/MatMul weights stored INT4 (two per byte; per-channel, "
        "symmetric, narrow range [-7, 7]) behind DequantizeLinear; the model "
        "is raised to opset 21 / IR 10 after checking every op against the "
        "changes up to 21 (changed ops are rewritten or refused by name); ",
        method == Method::kDynamicRange
            ? "activations quantized at run time by DynamicQuantizeLinear -> "
              "DequantizeLinear (uint8)"
            : "biases INT32, one QuantizeLinear -> DequantizeLinear (uint8, "
              "calibrated range) per activation; needs calibration"));
  } else if (method == Method::kStaticRange && op_set == tfq::TF &&
             precision == tfq::PRECISION_W4A4) {
    c.set_supported(true);
    c.set_note(
        "as W4A8, with activations QuantizeLinear -> DequantizeLinear to "
        "UINT4 (calibrated range on the 16-value grid, opset 21); needs "
        "calibration");
  } else if (method == Method::kDynamicRange &&
             precision == tfq::PRECISION_W4A4) {
    c.set_supported(false);
    c.set_note(
        "cannot be produced: DYNAMIC_RANGE quantizes activations at run time "
        "with DynamicQuantizeLinear, whose output is uint8 only, so 4-bit "
        "activations cannot be expressed; use STATIC_RANGE with op_set TF");
  } else if (method == Method::kDynamicRange && op_set == tfq::XLA &&
             precision == tfq::PRECISION_W4A8) {
    c.set_supported(false);
    c.set_note(
        "4-bit weights: the XLA lowering feeds MatMulInteger / ConvInteger, "
        "which take 8-bit inputs only; use op_set TF for W4A8");
  } else {
    c.set_supported(false);
    c.set_note("not implemented yet");
  }
  return c;
}

std::string SupportedList() {
  std::vector<std::string> served;
  for (const auto& c : CapabilityTable()) {
    if (c.supported() && c.precision() != tfq::PRECISION_FULL) {
      served.push_back(absl::StrCat(c.method(), " + ", OpSetName(c.op_set()),
                                    " + ", PrecisionName(c.precision())));
    }
  }
  return absl::StrCat(
      "supported: ", absl::StrJoin(served, ", "),
      " (op_set defaults to TF, precision to W8A8; PRECISION_FULL returns the "
      "model unchanged with any method)");
}

absl::Status CheckMethod(const tfq::QuantizationOptions& options,
                         Method method) {
  const auto& m = options.quantization_method();
  switch (method) {
    case Method::kUnspecified:
      return absl::InvalidArgumentError(absl::StrCat(
          "quantization_method is ",
          m.has_method() ? "METHOD_UNSPECIFIED"
                         : "EXPERIMENTAL_METHOD_UNSPECIFIED",
          ", which is never valid; leave quantization_method unset to return "
          "the model unchanged, or set experimental_method; ",
          SupportedList()));
    case Method::kUnknown:
      return absl::InvalidArgumentError(absl::StrCat(
          "quantization_method has unknown value ",
          m.has_method() ? static_cast<int>(m.method())
                         : static_cast<int>(m.experimental_method()),
          " (not in the QuantizationMethod enums)"));
    default:
      return absl::OkStatus();
  }
}

absl::Status CheckEnums(const tfq::QuantizationOptions& options) {
  if (!tfq::OpSet_IsValid(options.op_set())) {
    return absl::InvalidArgumentError(absl::StrCat("op_set has unknown value ",
                                                   options.op_set(),
                                                   " (not in the OpSet enum)"));
  }
  if (!tfq::QuantizationPrecision_IsValid(options.quantization_precision())) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantization_precision has unknown value ",
                     options.quantization_precision(),
                     " (not in the QuantizationPrecision enum)"));
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<quantd::v1::Capability>& CapabilityTable() {
  static const auto* table = [] {
    auto* t = new std::vector<quantd::v1::Capability>();
    for (Method m : kMethods) {
      for (tfq::OpSet o : kOpSets) {
        for (tfq::QuantizationPrecision p : kPrecisions) {
          t->push_back(MakeCapability(m, o, p));
        }
      }
    }
    return t;
  }();
  return *table;
}

absl::Status CheckSupported(const tfq::QuantizationOptions& options) {
  const ResolvedOptions resolved = Resolve(options);
  if (resolved.method == Method::kNone) return absl::OkStatus();
  absl::Status s = CheckMethod(options, resolved.method);
  if (s.ok()) s = CheckEnums(options);
  if (!s.ok()) return s;
  // unit_wise_quantization_precision entries are checked against the model
  // by the passes (passes/unit_precision.h). Each unit's precision (other
  // than FULL) needs the method and op_set at that precision, whatever the
  // model-wide one.
  for (int i = 0; i < options.unit_wise_quantization_precision_size(); ++i) {
    const auto& unit = options.unit_wise_quantization_precision(i);
    const tfq::QuantizationPrecision p = unit.quantization_precision();
    if (p == tfq::PRECISION_FULL || p == tfq::PRECISION_UNSPECIFIED) continue;
    for (const auto& c : CapabilityTable()) {
      if (c.method() == MethodName(resolved.method) &&
          c.op_set() == resolved.op_set && c.precision() == p &&
          !c.supported()) {
        return absl::UnimplementedError(absl::StrCat(
            "unit_wise_quantization_precision[", i, "] asks for ",
            PrecisionName(p), ", but method ", MethodName(resolved.method),
            " with op_set ", OpSetName(resolved.op_set), " and precision ",
            PrecisionName(p), " is not available (", c.note(), "); ",
            SupportedList()));
      }
    }
  }
  std::string why = "not implemented";
  for (const auto& c : CapabilityTable()) {
    if (c.method() == MethodName(resolved.method) &&
        c.op_set() == resolved.op_set && c.precision() == resolved.precision) {
      if (c.supported()) return absl::OkStatus();
      why = c.note();  // The table says why the combination is refused.
      break;
    }
  }
  return absl::UnimplementedError(
      absl::StrCat("method ", MethodName(resolved.method), " with op_set ",
                   OpSetName(resolved.op_set), " and precision ",
                   PrecisionName(resolved.precision),
                   " is not available: ", why, "; ", SupportedList()));
}

const std::vector<std::string>& QuantizableOpTypes() {
  static const auto* types =
      new std::vector<std::string>{"Conv", "Gemm", "MatMul"};
  return *types;
}

void FillServerInfo(quantd::v1::ServerInfo* info) {
  info->set_version(QUANTD_VERSION);
  std::vector<std::string> methods;
  for (const auto& c : CapabilityTable()) {
    if (!c.supported() || c.precision() == tfq::PRECISION_FULL) continue;
    if (std::find(methods.begin(), methods.end(), c.method()) ==
        methods.end()) {
      methods.push_back(c.method());
    }
    bool has_op_set = false;
    for (int o : info->op_sets()) has_op_set |= o == c.op_set();
    if (!has_op_set) info->add_op_sets(c.op_set());
  }
  for (const auto& m : methods) info->add_methods(m);
  // Every precision some (method, op set) serves, in the table's order.
  for (const auto& c : CapabilityTable()) {
    if (!c.supported()) continue;
    bool listed = false;
    for (int p : info->precisions()) listed |= p == c.precision();
    if (!listed) info->add_precisions(c.precision());
  }
  for (const auto& t : QuantizableOpTypes()) info->add_quantizable_op_types(t);
  for (const auto& c : CapabilityTable()) *info->add_capabilities() = c;
  info->set_min_input_opset(kMinInputOpset);
  info->set_max_checked_opset(graph::kMaxCheckedOpset);
}

}  // namespace quantd
