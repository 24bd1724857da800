// Which constant weights of a model the weight pass quantizes, on which
// channel axis, and why the others stay float.
#ifndef QUANTD_CORE_PASSES_WEIGHT_PLAN_H_
#define QUANTD_CORE_PASSES_WEIGHT_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/graph_index.h"
#include "core/passes/dynamic_range_options.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::passes {

// One weight to quantize. Exactly one of `initializer` and `constant_node`
// is >= 0 (indices into the graph's initializers / nodes).
struct WeightPlan {
  std::string tensor;
  int initializer = -1;
  int constant_node = -1;
  // Distinct nodes reading the weight (all read it as input 1 of a
  // quantizable op), in graph order.
  std::vector<int> consumers;
  std::vector<int64_t> dims;
  int64_t num_elements = 0;
  // Channel axis of the scales, or -1 for one scale for the whole tensor.
  int axis = -1;
};

struct WeightPlanResult {
  std::vector<WeightPlan> weights;
  std::vector<quantd::v1::SkippedTensor> skipped;
};

// Looks at every tensor read as input 1 (the weight) of a default-domain
// Conv, Gemm or MatMul. `ir_version` is the input model's: below 4 every
// initializer must also be a graph input, so being one does not make it
// overridable.
WeightPlanResult PlanWeights(const onnx::GraphProto& graph,
                             const graph::GraphIndex& index,
                             const DynamicRangeOptions& options,
                             int64_t ir_version);

// The float TensorProto a planned weight's values live in.
onnx::TensorProto* WeightTensor(onnx::GraphProto* graph,
                                const WeightPlan& plan);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_WEIGHT_PLAN_H_
