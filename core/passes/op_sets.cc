#include "core/passes/op_sets.h"

#include "absl/strings/str_cat.h"

namespace quantd::passes {
namespace {
namespace tfq = tensorflow::quantization;

// Sentences shared by several cells.
constexpr char kDynamicNoA4[] =
    "cannot be produced: DYNAMIC_RANGE quantizes activations at run time "
    "with DynamicQuantizeLinear, whose output is uint8 only, so 4-bit "
    "activations cannot be expressed; use STATIC_RANGE with op_set TF";
constexpr char kDynamicNoQLinear[] =
    "cannot be produced: QLinearConv / QLinearMatMul need a static output "
    "scale and zero point, which DYNAMIC_RANGE does not have (activations are "
    "quantized at run time); use STATIC_RANGE with op_set UNIFORM_QUANTIZED "
    "(needs calibration), or DYNAMIC_RANGE with op_set XLA or TF";
constexpr char kStaticIntegerNoW4[] =
    "4-bit weights: ConvInteger / MatMulInteger take 8-bit inputs only; use "
    "op_set TF for 4-bit weights";
constexpr char kStaticQLinearNoW4[] =
    "4-bit weights: QLinearConv / QLinearMatMul take 8-bit inputs only; use "
    "op_set TF for 4-bit weights";

constexpr OpSetRow kRows[] = {
    {Method::kStaticRange,
     tfq::TF,
     Lowering::kQdq,
     "QuantizeLinear / DequantizeLinear",
     {true,
      "QDQ: Conv/Gemm/MatMul weights INT8 (per-channel, symmetric, narrow "
      "range), biases INT32 (scale = input scale x weight scale), one "
      "QuantizeLinear -> DequantizeLinear (uint8, calibrated range) per "
      "activation between its producer and all its consumers; needs "
      "config.calibration or calibration batches"},
     {true,
      "Conv/Gemm/MatMul weights stored INT4 (two per byte; per-channel, "
      "symmetric, narrow range [-7, 7]) behind DequantizeLinear; the model is "
      "raised to opset 21 / IR 10 after checking every op against the changes "
      "up to 21 (changed ops are rewritten or refused by name); biases INT32, "
      "one QuantizeLinear -> DequantizeLinear (uint8, calibrated range) per "
      "activation; needs calibration"},
     {true,
      "as W4A8, with activations QuantizeLinear -> DequantizeLinear to UINT4 "
      "(calibrated range on the 16-value grid, opset 21); needs "
      "calibration"}},
    {Method::kStaticRange,
     tfq::XLA,
     Lowering::kIntegerOps,
     "ConvInteger / MatMulInteger",
     {true,
      "integer compute from the calibrated QDQ graph: QuantizeLinear (uint8, "
      "calibrated scale) -> MatMulInteger with INT8 weights (MatMul; Gemm "
      "with alpha = beta = 1, transA = 0) or ConvInteger with UINT8 weights "
      "(int8 + 128, zero point 128) -> int32 [+ int32 bias] -> Cast -> "
      "Mul(x_scale * w_scale); nodes it cannot express stay QDQ and are named "
      "in the summary; needs calibration"},
     {false, kStaticIntegerNoW4},
     {false, kStaticIntegerNoW4}},
    {Method::kStaticRange,
     tfq::UNIFORM_QUANTIZED,
     Lowering::kQLinearOps,
     "QLinearConv / QLinearMatMul",
     {true,
      "QLinearConv (per-channel INT8 weights, INT32 bias, Relu folded when "
      "its output's zero point is 0) and QLinearMatMul (per-column weights; a "
      "Gemm with a bias becomes a 1x1 QLinearConv), uint8 between "
      "consecutive quantized ops, QuantizeLinear / DequantizeLinear only at "
      "the edges of quantized regions; a node whose output has no calibrated "
      "quantization point (e.g. a graph output) stays QDQ and is named in "
      "the summary; needs calibration"},
     {false, kStaticQLinearNoW4},
     {false, kStaticQLinearNoW4}},
    {Method::kDynamicRange,
     tfq::TF,
     Lowering::kQdq,
     "DynamicQuantizeLinear / DequantizeLinear",
     {true,
      "Conv/Gemm/MatMul weights stored INT8 (per-channel, symmetric, narrow "
      "range) behind DequantizeLinear; activations quantized at run time by "
      "DynamicQuantizeLinear -> DequantizeLinear (uint8)"},
     {true,
      "Conv/Gemm/MatMul weights stored INT4 (two per byte; per-channel, "
      "symmetric, narrow range [-7, 7]) behind DequantizeLinear; the model is "
      "raised to opset 21 / IR 10 after checking every op against the changes "
      "up to 21 (changed ops are rewritten or refused by name); activations "
      "quantized at run time by DynamicQuantizeLinear -> DequantizeLinear "
      "(uint8)"},
     {false, kDynamicNoA4}},
    {Method::kDynamicRange,
     tfq::XLA,
     Lowering::kIntegerOps,
     "ConvInteger / MatMulInteger",
     {true,
      "integer compute: activations quantized at run time by "
      "DynamicQuantizeLinear (uint8); MatMul and Gemm (alpha = beta = 1, "
      "transA = 0) -> MatMulInteger with INT8 weights (per-channel, "
      "symmetric, narrow range), Conv -> ConvInteger with UINT8 weights "
      "(int8 + 128, zero point 128: ONNX Runtime's CPU ConvInteger takes "
      "uint8 x uint8 only); int32 -> Cast -> Mul(x_scale * w_scale) -> Add "
      "bias; other Gemms are UNIMPLEMENTED"},
     {false,
      "4-bit weights: the XLA lowering feeds MatMulInteger / ConvInteger, "
      "which take 8-bit inputs only; use op_set TF for W4A8"},
     {false, kDynamicNoA4}},
    {Method::kDynamicRange,
     tfq::UNIFORM_QUANTIZED,
     Lowering::kNotProduced,
     "",
     {false, kDynamicNoQLinear},
     {false, kDynamicNoQLinear},
     {false, kDynamicNoQLinear}},
};

}  // namespace

const PrecisionSupport* OpSetRow::For(
    tfq::QuantizationPrecision precision) const {
  switch (precision) {
    case tfq::PRECISION_W8A8:
      return &w8a8;
    case tfq::PRECISION_W4A8:
      return &w4a8;
    case tfq::PRECISION_W4A4:
      return &w4a4;
    default:
      return nullptr;
  }
}

absl::Span<const OpSetRow> OpSetTable() { return kRows; }

const OpSetRow* FindOpSet(Method method, tfq::OpSet op_set) {
  for (const OpSetRow& row : kRows) {
    if (row.method == method && row.op_set == op_set) return &row;
  }
  return nullptr;
}

absl::StatusOr<const OpSetRow*> PassRow(Method method, tfq::OpSet op_set) {
  const OpSetRow* row = FindOpSet(method, op_set);
  const char* method_name =
      method == Method::kStaticRange ? "STATIC_RANGE" : "DYNAMIC_RANGE";
  if (row == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("op_set ", static_cast<int>(op_set), " has no ",
                     method_name, " lowering (not in the OpSet enum)"));
  }
  if (row->lowering == Lowering::kNotProduced) {
    return absl::UnimplementedError(absl::StrCat(method_name, " with op_set ",
                                                 tfq::OpSet_Name(op_set), " ",
                                                 row->w8a8.note));
  }
  return row;
}

}  // namespace quantd::passes
