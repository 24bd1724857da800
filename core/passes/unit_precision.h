// unit_wise_quantization_precision: the precision of each node of the main
// graph, from the model-wide default and the per-unit entries.
//
// Rules (this slice):
//  - A node's precision is that of the UNIT_NODE entry whose unit_name is
//    the node's name, else that of the UNIT_OP entry whose unit_name is the
//    node's op_type, else the default (quantization_precision, UNSPECIFIED =
//    W8A8). Only entries with an empty func_name apply to the main graph.
//  - INVALID_ARGUMENT, listing every offending entry (index and content) in
//    one message: unit_type UNIT_UNSPECIFIED (or unknown); empty unit_name;
//    quantization_precision PRECISION_UNSPECIFIED (or unknown); a unit that
//    matches nothing (no main-graph node with that name / of that op type;
//    with a func_name: no local function and no node holding a subgraph of
//    that name); two entries for the same unit (unit_type, func_name,
//    unit_name) with different precisions; a UNIT_NODE entry whose name is
//    carried by more than one main-graph node (ambiguous).
//  - Then UNIMPLEMENTED, listing every such entry: a func_name naming an
//    existing local function or subgraph (quantd quantizes only the main
//    graph).
//  - An entry may be FULL, W8A8, W4A8 or W4A4, so W8A8 and 4-bit layers mix
//    in one model (4-bit weights are INT4, opset 21). Whether the method
//    can express the precision is checked by the pass options: DYNAMIC_RANGE
//    refuses W4A4 units (ResolveDynamicRangeOptions: DynamicQuantizeLinear
//    is uint8 only), and op_set XLA refuses 4-bit weights.
#ifndef QUANTD_CORE_PASSES_UNIT_PRECISION_H_
#define QUANTD_CORE_PASSES_UNIT_PRECISION_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace quantd::passes {

using UnitPrecisionEntries =
    std::vector<tensorflow::quantization::UnitWiseQuantizationPrecision>;

class UnitPrecision {
 public:
  // The default alone (no entries): every node at `default_precision`
  // (UNSPECIFIED = W8A8).
  explicit UnitPrecision(
      tensorflow::quantization::QuantizationPrecision default_precision =
          tensorflow::quantization::PRECISION_W8A8);

  // Checks `entries` against `model` (see the rules above).
  static absl::StatusOr<UnitPrecision> Resolve(
      const onnx::ModelProto& model,
      tensorflow::quantization::QuantizationPrecision default_precision,
      const UnitPrecisionEntries& entries);

  struct Choice {
    tensorflow::quantization::QuantizationPrecision precision;
    int entry = -1;  // Index of the deciding entry; -1 for the default.
  };
  // Depends only on the node's name and op_type, so it stays right when a
  // pass renumbers or adds nodes.
  Choice For(const onnx::NodeProto& node) const;
  bool IsFull(const onnx::NodeProto& node) const {
    return For(node).precision == tensorflow::quantization::PRECISION_FULL;
  }
  // What decided the node's precision, for skip details:
  // "unit_wise_quantization_precision[1] {unit_type: UNIT_NODE ...}" or
  // "the model-wide quantization_precision PRECISION_FULL".
  std::string Why(const onnx::NodeProto& node) const;

 private:
  tensorflow::quantization::QuantizationPrecision default_;
  UnitPrecisionEntries entries_;
  absl::flat_hash_map<std::string, int> by_node_;  // name -> entry
  absl::flat_hash_map<std::string, int> by_op_;    // op_type -> entry
};

// "unit_wise_quantization_precision[i] {<entry as text>}".
std::string DescribeUnitEntry(
    int index,
    const tensorflow::quantization::UnitWiseQuantizationPrecision& entry);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_UNIT_PRECISION_H_
