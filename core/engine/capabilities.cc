#include "core/engine/capabilities.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/engine/resolved_options.h"
#include "core/graph/validate.h"
#include "core/passes/op_sets.h"
#include "core/passes/weight_plan.h"

namespace quantd {
namespace {
namespace tfq = tensorflow::quantization;

constexpr tfq::QuantizationPrecision kPrecisions[] = {
    tfq::PRECISION_FULL, tfq::PRECISION_W4A4, tfq::PRECISION_W4A8,
    tfq::PRECISION_W8A8};

// Below opset 11 the converter must lift the model first (see passes/).
constexpr int64_t kMinInputOpset = 1;

// One cell of the capability matrix, read from the op-set table's row.
quantd::v1::Capability MakeCapability(const passes::OpSetRow& row,
                                      tfq::QuantizationPrecision precision) {
  quantd::v1::Capability c;
  c.set_method(MethodName(row.method));
  c.set_op_set(row.op_set);
  c.set_precision(precision);
  if (precision == tfq::PRECISION_FULL) {
    c.set_supported(true);
    c.set_note("model returned unchanged (FULL = do not quantize)");
  } else if (const passes::PrecisionSupport* cell = row.For(precision)) {
    c.set_supported(cell->supported);
    c.set_note(cell->note);
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
    for (const passes::OpSetRow& row : passes::OpSetTable()) {
      for (tfq::QuantizationPrecision p : kPrecisions) {
        t->push_back(MakeCapability(row, p));
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
  // Weight-only ops (recurrent layers keep computing in float) count too:
  // the field lists whose weights shrink.
  for (const char* t : passes::kQuantizableOpTypes) {
    info->add_quantizable_op_types(t);
  }
  for (const char* t : passes::kWeightOnlyOpTypes) {
    info->add_quantizable_op_types(t);
  }
  for (const auto& c : CapabilityTable()) *info->add_capabilities() = c;
  info->set_min_input_opset(kMinInputOpset);
  info->set_max_checked_opset(graph::kMaxCheckedOpset);
}

}  // namespace quantd
