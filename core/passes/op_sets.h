// The op sets as data: one row per (method, op set) naming the lowering the
// passes apply and, per precision, whether the combination is produced and
// what it produces (or why not). The passes dispatch on Lowering from this
// table; the engine's capability matrix (GetServerInfo, request checks,
// docs/capabilities.md) is built from it. A new op-set lowering is one row
// here plus the lowering's own file.
#ifndef QUANTD_CORE_PASSES_OP_SETS_H_
#define QUANTD_CORE_PASSES_OP_SETS_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace quantd::passes {

// A request's quantization method. kNone: no method set (return the model
// unchanged); kUnspecified and kUnknown are never valid.
enum class Method {
  kNone,
  kUnspecified,
  kStaticRange,
  kDynamicRange,
  kUnknown
};

// What a pass writes after planning its quantization points.
enum class Lowering {
  kNotProduced,  // The (method, op set) pair cannot be produced.
  // QuantizeLinear (STATIC_RANGE) or DynamicQuantizeLinear (DYNAMIC_RANGE)
  // -> DequantizeLinear around the float ops.
  kQdq,
  // ConvInteger / MatMulInteger with an explicit rescale (xla_lowering.h).
  kIntegerOps,
  // QLinearConv / QLinearMatMul (uniform_quantized_lowering.h).
  kQLinearOps,
};

// One precision of a row: produced or not, and the sentence saying what it
// produces or why it is refused.
struct PrecisionSupport {
  bool supported = false;
  const char* note = "";
};

struct OpSetRow {
  Method method;
  tensorflow::quantization::OpSet op_set;
  Lowering lowering;
  // The ops the lowering writes, for notes ("ConvInteger / MatMulInteger").
  const char* lowered_ops;
  PrecisionSupport w8a8;
  PrecisionSupport w4a8;
  PrecisionSupport w4a4;

  // The entry for W8A8, W4A8 or W4A4; null for FULL and UNSPECIFIED (which
  // are not about the op set).
  const PrecisionSupport* For(
      tensorflow::quantization::QuantizationPrecision precision) const;
};

// Every row: STATIC_RANGE and DYNAMIC_RANGE x TF, XLA, UNIFORM_QUANTIZED.
absl::Span<const OpSetRow> OpSetTable();

// The row of (method, op_set); null when the table has none (a method other
// than STATIC_RANGE / DYNAMIC_RANGE, or an op set outside the enum).
const OpSetRow* FindOpSet(Method method,
                          tensorflow::quantization::OpSet op_set);

// The row a pass runs by: INVALID_ARGUMENT for an op set outside the table,
// UNIMPLEMENTED with the table's reason when the pair is not produced.
absl::StatusOr<const OpSetRow*> PassRow(Method method,
                                        tensorflow::quantization::OpSet op_set);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_OP_SETS_H_
