#include "core/passes/weight_plan.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/tensor_util.h"
#include "core/numerics/int4.h"
#include "core/numerics/quantize_kernel.h"
#include "core/numerics/range_search.h"
#include "core/passes/gptq_weight.h"

namespace quantd::passes {
namespace {

using quantd::v1::SkippedTensor;
using quantd::v1::SkipReason;

// The `value` tensor of a Constant node, or null.
const onnx::TensorProto* ConstantValue(const onnx::NodeProto& node) {
  if (node.op_type() != "Constant" || !IsDefaultDomain(node)) return nullptr;
  for (const auto& a : node.attribute()) {
    if (a.name() == "value" && a.has_t()) return &a.t();
  }
  return nullptr;
}

// A skip decision: reason and detail.
struct Skip {
  SkipReason reason;
  std::string detail;
};

// The channel axis a consumer wants for its weight of rank `rank`: the axis
// of the output channels (Conv: M of [M, C/g, k...]; Gemm: N of B, which is
// [K, N] unless transB; MatMul: the last axis of B), -1 for a rank-1 MatMul
// B (one output channel). A Skip for layouts we do not quantize.
struct AxisOrSkip {
  int axis = -1;
  std::optional<Skip> skip;
};
AxisOrSkip ConsumerAxis(const onnx::NodeProto& node, int rank) {
  auto layout = [&](const std::string& want) {
    return AxisOrSkip{-1, Skip{quantd::v1::SKIP_UNSUPPORTED_LAYOUT,
                               absl::StrCat(node.op_type(), " '", node.name(),
                                            "' has a weight of rank ", rank,
                                            "; expected ", want)}};
  };
  if (node.op_type() == "Conv") {
    return rank >= 3 ? AxisOrSkip{0, {}} : layout("rank >= 3");
  }
  if (node.op_type() == "Gemm") {
    if (rank != 2) return layout("rank 2");
    return {graph::IntAttribute(node, "transB", 0) != 0 ? 0 : 1, {}};
  }
  if (rank == 0) return layout("rank >= 1");
  return {rank >= 2 ? rank - 1 : -1, {}};
}

std::string Describe(const onnx::NodeProto& node) {
  return absl::StrCat(node.op_type(), " '", node.name(), "'");
}

class Planner {
 public:
  Planner(const onnx::GraphProto& graph, const graph::GraphIndex& index,
          const WeightPassOptions& options, int64_t ir_version,
          const UnitPrecision* units, bool recurrent)
      : recurrent_(recurrent),
        graph_(graph),
        index_(index),
        options_(options),
        ir_version_(ir_version),
        default_units_(options.precision),
        units_(units != nullptr ? *units : default_units_) {}

  WeightPlanResult Run() {
    absl::flat_hash_set<std::string> seen;
    if (recurrent_) {
      for (const auto& node : graph_.node()) {
        if (!IsRecurrentOp(node)) continue;
        for (int slot = 1; slot <= 2 && slot < node.input_size(); ++slot) {
          const std::string& name = node.input(slot);
          if (name.empty() || !seen.insert(name).second) continue;
          // A tensor some Conv/Gemm/MatMul reads as its weight was the
          // main plan's to take or to skip (and report).
          const auto uses = index_.Uses(name);
          if (std::any_of(uses.begin(), uses.end(), [&](const graph::Use& u) {
                return u.slot == 1 && IsQuantizableOp(graph_.node(u.node));
              })) {
            continue;
          }
          Consider(name, node);
        }
      }
      return std::move(result_);
    }
    for (const auto& node : graph_.node()) {
      if (!IsQuantizableOp(node) || node.input_size() < 2) continue;
      const std::string& name = node.input(1);
      if (name.empty() || !seen.insert(name).second) continue;
      Consider(name, node);
    }
    return std::move(result_);
  }

 private:
  void Consider(const std::string& name, const onnx::NodeProto& first) {
    WeightPlan plan;
    plan.tensor = name;
    const onnx::TensorProto* tensor = nullptr;
    std::optional<Skip> skip = FindSource(name, &plan, &tensor);
    if (tensor != nullptr) {
      plan.dims = graph::Dims(*tensor);
      plan.num_elements = graph::NumElements(*tensor);
    }
    if (!skip) skip = CheckTensor(*tensor);
    if (!skip) skip = CheckConsumers(&plan);
    if (!skip) skip = CheckPrecision(&plan);
    if (!skip) skip = CheckScope(plan);
    if (!skip) skip = CheckSize(plan);
    if (skip) {
      AddSkip(name, first, plan.num_elements, std::move(*skip));
    } else {
      if (!options_.weights.per_channel || BatchedEightBitMatMulWeight(plan)) {
        plan.axis = -1;
      }
      if (options_.weights.block_size > 0 && !recurrent_) ApplyBlocks(&plan);
      result_.weights.push_back(std::move(plan));
    }
  }

  // An 8-bit MatMul weight of rank >= 3 (one matrix per batch) gets one
  // scale: ONNX Runtime fuses DequantizeLinear -> MatMul into its integer
  // MatMul kernels, which take per-column scales only for a 2-D B, and the
  // session then fails at run time on per-column scales of a batched one.
  // 4-bit weights are not fused (ONNX Runtime dequantizes them), and blocks
  // are another form.
  bool BatchedEightBitMatMulWeight(const WeightPlan& plan) const {
    if (recurrent_ || plan.dims.size() < 3 ||
        HasFourBitWeights(plan.precision) || options_.weights.block_size > 0) {
      return false;
    }
    for (int n : plan.consumers) {
      if (graph_.node(n).op_type() != "MatMul") return false;
    }
    return true;
  }

  // Blocks run along the input (reduction) axis, which every reader must
  // agree on. For a Conv weight [M, C/group, kernel...] that is axis 1: a
  // block is block_size input channels at one kernel tap, for the weights
  // BlocksConvWeight allows.
  void ApplyBlocks(WeightPlan* plan) {
    const int rank = static_cast<int>(plan->dims.size());
    int axis = -1;
    for (int n : plan->consumers) {
      const onnx::NodeProto& node = graph_.node(n);
      if (node.op_type() == "Conv" &&
          !BlocksConvWeight(HasFourBitWeights(plan->precision), plan->dims)) {
        return;
      }
      const int a = InputAxis(node, rank);
      if (a < 0 || (axis >= 0 && a != axis)) return;
      axis = a;
    }
    if (axis < 0) return;
    plan->axis = axis;
    plan->block_size = options_.weights.block_size;
  }

  // The axis of a MatMul, Gemm or Conv weight that the product reduces
  // over (for a Conv, its input channels).
  static int InputAxis(const onnx::NodeProto& node, int rank) {
    if (node.op_type() == "Gemm") {
      return graph::IntAttribute(node, "transB", 0) != 0 ? 1 : 0;
    }
    if (node.op_type() == "MatMul") return rank >= 2 ? rank - 2 : 0;
    if (node.op_type() == "Conv") return rank >= 3 ? 1 : -1;
    return -1;
  }

  // Where the weight's values live; a Skip when it is not a constant.
  std::optional<Skip> FindSource(const std::string& name, WeightPlan* plan,
                                 const onnx::TensorProto** tensor) {
    const int init = index_.Initializer(name);
    if (init >= 0) {
      *tensor = &graph_.initializer(init);
      if (index_.IsGraphInput(name) && ir_version_ >= 4) {
        return Skip{quantd::v1::SKIP_NOT_CONSTANT,
                    absl::StrCat("initializer '", name,
                                 "' is also a graph input, so a caller can "
                                 "override it at run time (IR version ",
                                 ir_version_, " >= 4)")};
      }
      plan->initializer = init;
      return std::nullopt;
    }
    const int producer = index_.Producer(name);
    if (producer >= 0) {
      const onnx::TensorProto* value = ConstantValue(graph_.node(producer));
      if (value != nullptr) {
        *tensor = value;
        plan->constant_node = producer;
        return std::nullopt;
      }
    }
    return Skip{quantd::v1::SKIP_NOT_CONSTANT,
                absl::StrCat("'", name, "' is ",
                             producer >= 0
                                 ? absl::StrCat("computed at run time by ",
                                                Describe(graph_.node(producer)))
                                 : "a graph input",
                             ", not an initializer or Constant value")};
  }

  std::optional<Skip> CheckTensor(const onnx::TensorProto& tensor) {
    if (tensor.data_type() != onnx::TensorProto::FLOAT) {
      return Skip{
          quantd::v1::SKIP_NOT_FLOAT,
          absl::StrCat(
              "element type is ",
              onnx::TensorProto::DataType_Name(
                  static_cast<onnx::TensorProto::DataType>(tensor.data_type())),
              ", not FLOAT")};
    }
    if (graph::HasExternalData(tensor)) {
      return Skip{quantd::v1::SKIP_NOT_CONSTANT,
                  "values are stored in an external file, which is not part "
                  "of the model bytes"};
    }
    return std::nullopt;
  }

  // Every reader must be a quantizable op reading it as its weight, and all
  // must agree on the channel axis: one DequantizeLinear serves them all.
  std::optional<Skip> CheckConsumers(WeightPlan* plan) {
    if (index_.IsGraphOutput(plan->tensor)) {
      return Skip{quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
                  "the tensor is also a graph output"};
    }
    const int rank = static_cast<int>(plan->dims.size());
    if (recurrent_) return CheckRecurrentConsumers(plan, rank);
    for (const graph::Use& use : index_.Uses(plan->tensor)) {
      const onnx::NodeProto& node = graph_.node(use.node);
      if (!IsQuantizableOp(node) || use.slot != 1) {
        return Skip{quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
                    absl::StrCat("also read by ", Describe(node),
                                 use.slot == graph::Use::kSubgraphSlot
                                     ? " (inside a subgraph)"
                                     : absl::StrCat(" as input ", use.slot),
                                 ", which cannot take it quantized")};
      }
      AxisOrSkip axis = ConsumerAxis(node, rank);
      if (axis.skip) return axis.skip;
      if (plan->consumers.empty()) {
        plan->axis = axis.axis;
      } else if (axis.axis != plan->axis && options_.weights.per_channel) {
        return Skip{
            quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
            absl::StrCat(Describe(node), " wants channel axis ", axis.axis,
                         " but ", Describe(graph_.node(plan->consumers[0])),
                         " wants ", plan->axis)};
      }
      if (plan->consumers.empty() || plan->consumers.back() != use.node) {
        plan->consumers.push_back(use.node);
      }
    }
    return std::nullopt;
  }

  // W [directions, gates x hidden, input] and R [directions, gates x hidden,
  // hidden] of LSTM/GRU/RNN: one scale per row of gates, the axis every
  // reader computes a separate output unit from.
  std::optional<Skip> CheckRecurrentConsumers(WeightPlan* plan, int rank) {
    for (const graph::Use& use : index_.Uses(plan->tensor)) {
      const onnx::NodeProto& node = graph_.node(use.node);
      if (!IsRecurrentOp(node) || (use.slot != 1 && use.slot != 2)) {
        return Skip{quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
                    absl::StrCat("also read by ", Describe(node),
                                 use.slot == graph::Use::kSubgraphSlot
                                     ? " (inside a subgraph)"
                                     : absl::StrCat(" as input ", use.slot),
                                 ", which cannot take it quantized")};
      }
      if (rank != 3) {
        return Skip{
            quantd::v1::SKIP_UNSUPPORTED_LAYOUT,
            absl::StrCat(Describe(node), " has a ", use.slot == 1 ? "W" : "R",
                         " of rank ", rank, "; expected 3")};
      }
      if (plan->consumers.empty() || plan->consumers.back() != use.node) {
        plan->consumers.push_back(use.node);
      }
    }
    plan->axis = 1;
    return std::nullopt;
  }

  // One DequantizeLinear serves every consumer: all must want the weight
  // quantized, at one precision.
  std::optional<Skip> CheckPrecision(WeightPlan* plan) {
    int full = -1, quantized = -1;
    for (int n : plan->consumers) {
      const UnitPrecision::Choice c = units_.For(graph_.node(n));
      if (c.precision == tensorflow::quantization::PRECISION_FULL) {
        if (full < 0) full = n;
      } else if (quantized < 0) {
        quantized = n;
        plan->precision = c.precision;
      } else if (HasFourBitWeights(plan->precision) &&
                 !HasFourBitWeights(c.precision)) {
        // One DequantizeLinear serves every reader: a weight shared by a
        // 4-bit and an 8-bit unit keeps the finer 8-bit grid.
        plan->precision = c.precision;
      }
    }
    if (full < 0) return std::nullopt;
    const onnx::NodeProto& f = graph_.node(full);
    if (quantized < 0) {
      return Skip{
          quantd::v1::SKIP_PRECISION_FULL,
          absl::StrCat(Describe(f), " is PRECISION_FULL by ", units_.Why(f))};
    }
    const onnx::NodeProto& q = graph_.node(quantized);
    return Skip{
        quantd::v1::SKIP_PRECISION_FULL,
        absl::StrCat(
            "consumers disagree on precision: ", Describe(f),
            " is PRECISION_FULL by ", units_.Why(f), " but ", Describe(q),
            " is ",
            tensorflow::quantization::QuantizationPrecision_Name(
                units_.For(q).precision),
            " by ", units_.Why(q),
            "; the shared weight stays float (one DequantizeLinear serves "
            "every reader)")};
  }

  std::optional<Skip> CheckScope(const WeightPlan& plan) {
    const std::string& producer = options_.weights.producer_scope;
    if (!absl::StartsWith(plan.tensor, producer)) {
      return Skip{quantd::v1::SKIP_OUT_OF_SCOPE,
                  absl::StrCat("tensor name does not start with "
                               "weight_params.producer_scope '",
                               producer, "'")};
    }
    const std::string& consumer = options_.weights.consumer_scope;
    for (int n : plan.consumers) {
      if (!absl::StartsWith(graph_.node(n).name(), consumer)) {
        return Skip{quantd::v1::SKIP_OUT_OF_SCOPE,
                    absl::StrCat("consumer ", Describe(graph_.node(n)),
                                 " does not start with "
                                 "weight_params.consumer_scope '",
                                 consumer, "'")};
      }
    }
    return std::nullopt;
  }

  std::optional<Skip> CheckSize(const WeightPlan& plan) {
    if (plan.num_elements >= options_.min_num_elements) return std::nullopt;
    return Skip{quantd::v1::SKIP_TOO_FEW_ELEMENTS,
                absl::StrCat(plan.num_elements,
                             " elements, fewer than min_num_elements_for_"
                             "weights = ",
                             options_.min_num_elements)};
  }

  void AddSkip(const std::string& name, const onnx::NodeProto& node,
               int64_t num_elements, Skip skip) {
    SkippedTensor s;
    s.set_tensor_name(name);
    s.set_node_name(node.name());
    s.set_op_type(node.op_type());
    s.set_num_elements(num_elements);
    s.set_reason(skip.reason);
    s.set_detail(std::move(skip.detail));
    result_.skipped.push_back(std::move(s));
  }

  // Plans the W and R of LSTM/GRU/RNN instead of the Conv/Gemm/MatMul
  // weights.
  const bool recurrent_;
  const onnx::GraphProto& graph_;
  const graph::GraphIndex& index_;
  const WeightPassOptions& options_;
  const int64_t ir_version_;
  const UnitPrecision default_units_;
  const UnitPrecision& units_;
  WeightPlanResult result_;
};

// A default-domain node whose op type is one of `ops`.
template <size_t N>
bool IsDefaultDomainOpIn(const onnx::NodeProto& node,
                         const char* const (&ops)[N]) {
  if (!IsDefaultDomain(node)) return false;
  for (const char* op : ops) {
    if (node.op_type() == op) return true;
  }
  return false;
}

}  // namespace

bool IsQuantizableOp(const onnx::NodeProto& node) {
  return IsDefaultDomainOpIn(node, kQuantizableOpTypes);
}

WeightPlanResult PlanWeights(const onnx::GraphProto& graph,
                             const graph::GraphIndex& index,
                             const WeightPassOptions& options,
                             int64_t ir_version, const UnitPrecision* units) {
  return Planner(graph, index, options, ir_version, units,
                 /*recurrent=*/false)
      .Run();
}

bool IsRecurrentOp(const onnx::NodeProto& node) {
  return IsDefaultDomainOpIn(node, kWeightOnlyOpTypes);
}

WeightPlanResult PlanRecurrentWeights(const onnx::GraphProto& graph,
                                      const graph::GraphIndex& index,
                                      const WeightPassOptions& options,
                                      int64_t ir_version,
                                      const UnitPrecision* units) {
  WeightPlanResult result =
      Planner(graph, index, options, ir_version, units, /*recurrent=*/true)
          .Run();
  // Their error is fed back at every time step: 8 bits whatever the
  // consumers' precision says (ONNX Runtime's own LSTM quantization is 8-bit
  // only, too).
  for (WeightPlan& w : result.weights) {
    if (HasFourBitWeights(w.precision)) {
      w.precision = tensorflow::quantization::PRECISION_W8A8;
    }
  }
  return result;
}

onnx::TensorProto* WeightTensor(onnx::GraphProto* graph,
                                const WeightPlan& plan) {
  if (plan.initializer >= 0) {
    return graph->mutable_initializer(plan.initializer);
  }
  for (auto& a :
       *graph->mutable_node(plan.constant_node)->mutable_attribute()) {
    if (a.name() == "value" && a.has_t()) return a.mutable_t();
  }
  return nullptr;
}

namespace {

using onnx::TensorProto;

struct QuantizedWeight {
  absl::Status status;
  TensorProto values, scale, zero_point;
  quantd::v1::TensorReport report;
  uint64_t bytes_before = 0;
  std::vector<numerics::QuantParams> params;
  // bias_correction: per consumer node, the shift to add to its bias; and
  // why a consumer got none.
  std::vector<std::pair<int, std::vector<double>>> bias_shifts;
  std::vector<std::string> bias_notes;
};

// bias_correction: each consumer's expected output shift from the weight
// error `error` (tensor layout), or a note saying why there is none.
void ComputeBiasShifts(const onnx::GraphProto& graph, const WeightPlan& plan,
                       absl::Span<const float> error,
                       const WeightPassOptions& options, QuantizedWeight* out) {
  for (int c : plan.consumers) {
    const onnx::NodeProto& node = graph.node(c);
    const std::string who =
        absl::StrCat(node.op_type(), " '", node.name(), "'");
    if (node.op_type() == "MatMul") {
      out->bias_notes.push_back(
          absl::StrCat("bias not corrected: ", who, " has no bias input"));
      continue;
    }
    const LayerMoments* m =
        options.input_moments == nullptr || node.output_size() == 0
            ? nullptr
            : options.input_moments->Find(node.output(0));
    if (m == nullptr) {
      out->bias_notes.push_back(absl::StrCat(
          "bias not corrected: ", who, " has no input statistics",
          options.input_moments != nullptr && node.output_size() > 0
              ? absl::StrCat(": ",
                             options.input_moments->WhyNone(node.output(0)))
              : std::string()));
      continue;
    }
    absl::StatusOr<std::vector<double>> shift =
        ExpectedOutputShift(node, plan, error, *m);
    if (!shift.ok()) {
      out->bias_notes.push_back(
          absl::StrCat("bias not corrected: ", shift.status().message()));
      continue;
    }
    out->bias_shifts.emplace_back(c, std::move(*shift));
  }
}

// Adds `shift` (per output channel) to the float bias of node `c` (Conv B,
// Gemm C scaled by alpha / beta); the largest |shift| added, or a note.
absl::StatusOr<double> ApplyBiasShift(onnx::GraphProto* graph, int c,
                                      const std::vector<double>& shift) {
  const onnx::NodeProto& node = graph->node(c);
  const std::string who = absl::StrCat(node.op_type(), " '", node.name(), "'");
  if (node.input_size() < 3 || node.input(2).empty()) {
    return absl::FailedPreconditionError(absl::StrCat(who, " has no bias"));
  }
  const std::string& name = node.input(2);
  double scale = 1.0;
  if (node.op_type() == "Gemm") {
    const float alpha = graph::FloatAttribute(node, "alpha", 1.0f);
    const float beta = graph::FloatAttribute(node, "beta", 1.0f);
    if (beta == 0.0f) {
      return absl::FailedPreconditionError(absl::StrCat(who, " has beta 0"));
    }
    scale = double{alpha} / beta;
  }
  int readers = 0;
  for (const onnx::NodeProto& n : graph->node()) {
    for (const std::string& in : n.input()) readers += in == name ? 1 : 0;
  }
  TensorProto* bias = nullptr;
  for (TensorProto& t : *graph->mutable_initializer()) {
    if (t.name() == name) bias = &t;
  }
  if (bias == nullptr || bias->data_type() != TensorProto::FLOAT ||
      readers != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, "'s bias '", name,
                     "' is not a float initializer read by that node alone"));
  }
  QUANTD_ASSIGN_OR_RETURN(std::vector<float> values,
                          graph::ReadFloatTensor(*bias));
  if (values.size() != shift.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, "'s bias '", name, "' has ", values.size(),
                     " values for ", shift.size(), " output channels"));
  }
  double largest = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double add = shift[i] * scale;
    values[i] = static_cast<float>(values[i] + add);
    largest = std::max(largest, std::abs(add));
  }
  const std::vector<int64_t> dims(bias->dims().begin(), bias->dims().end());
  *bias = graph::MakeFloatTensor(name, dims, values);
  return largest;
}

quantd::v1::TensorReport MakeReport(const onnx::GraphProto& graph,
                                    const WeightPlan& plan,
                                    const WeightPassOptions& options,
                                    const numerics::QuantizedTensor& q) {
  quantd::v1::TensorReport r;
  const onnx::NodeProto& consumer = graph.node(plan.consumers.front());
  r.set_node_name(consumer.name());
  r.set_op_type(consumer.op_type());
  r.set_tensor_name(plan.tensor);
  r.set_precision(plan.precision);
  r.set_num_elements(plan.num_elements);
  quantd::v1::QuantScheme* s = r.mutable_scheme();
  s->set_bits(q.spec.bits);
  s->set_symmetric(q.spec.symmetric);
  s->set_narrow_range(q.spec.narrow_range);
  s->set_per_channel(q.axis >= 0 && q.block_size == 0);
  s->set_axis(std::max(q.axis, 0));
  s->set_block_size(static_cast<int32_t>(q.block_size));
  s->set_range(options.weights.range.enabled() ? "mse" : "min_max");
  s->set_storage_type(HasFourBitWeights(plan.precision)
                          ? (q.spec.is_signed ? "INT4" : "UINT4")
                          : "INT8");
  absl::StatusOr<numerics::QuantGrid> grid = numerics::GridFor(q.spec);
  if (grid.ok()) {
    s->set_quant_min(grid->quant_min);
    s->set_quant_max(grid->quant_max);
  }
  auto [lo, hi] = std::minmax_element(
      q.params.begin(), q.params.end(),
      [](const auto& a, const auto& b) { return a.scale < b.scale; });
  r.set_scale_min(lo->scale);
  r.set_scale_max(hi->scale);
  return r;
}

// A tensor of 4-bit values (INT4, or UINT4 when !is_signed) already packed.
TensorProto FourBitTensor(const std::string& name,
                          absl::Span<const int64_t> dims, std::string packed,
                          bool is_signed) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(is_signed ? numerics::kOnnxInt4 : numerics::kOnnxUint4);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::move(packed));
  return t;
}

// A tensor of packed 4-bit values, from values already on the grid.
absl::StatusOr<TensorProto> MakeFourBitTensor(const std::string& name,
                                              absl::Span<const int64_t> dims,
                                              absl::Span<const int32_t> values,
                                              bool is_signed) {
  QUANTD_ASSIGN_OR_RETURN(std::string packed,
                          numerics::PackInt4(values, is_signed));
  return FourBitTensor(name, dims, std::move(packed), is_signed);
}

// Scale and zero point initializers: [C] when per channel, the weight's
// shape with ceil(dim / block_size) on the block axis when blocked, scalars
// else. The zero point has the values' type (INT8, or INT4 when
// `four_bit`), as DequantizeLinear requires.
absl::Status MakeParamTensors(const numerics::QuantizedTensor& q,
                              absl::Span<const int64_t> weight_dims,
                              const WeightNames& names, bool four_bit,
                              QuantizedWeight* out) {
  std::vector<float> scales;
  std::vector<int32_t> zero_points;
  for (const auto& p : q.params) {
    scales.push_back(p.scale);
    zero_points.push_back(p.zero_point);
  }
  std::vector<int64_t> dims;
  if (q.block_size > 0) {
    dims = numerics::BlockedParamShape(weight_dims, q.axis, q.block_size);
  } else if (q.axis >= 0) {
    dims.push_back(static_cast<int64_t>(q.params.size()));
  }
  out->scale = graph::MakeFloatTensor(names.scale, dims, scales);
  if (four_bit) {
    QUANTD_ASSIGN_OR_RETURN(
        out->zero_point, MakeFourBitTensor(names.zero_point, dims, zero_points,
                                           q.spec.is_signed));
    return absl::OkStatus();
  }
  std::string bytes;
  for (int32_t z : zero_points) {
    bytes.push_back(static_cast<char>(static_cast<int8_t>(z)));
  }
  out->zero_point = graph::MakeByteTensor(names.zero_point, TensorProto::INT8,
                                          dims, std::move(bytes));
  return absl::OkStatus();
}

// GPTQ on one weight with the statistics of its readers; an error says why
// it could not run (the caller then rounds to nearest).
absl::StatusOr<GptqWeight> RunGptq(const onnx::GraphProto& graph,
                                   const WeightPlan& plan,
                                   absl::Span<const float> values,
                                   const numerics::QuantSpec& spec,
                                   const WeightPassOptions& options) {
  if (options.input_moments == nullptr) {
    return absl::FailedPreconditionError(
        "the call gathered no input statistics");
  }
  const GptqInputs inputs = GptqInputsFor(graph, plan, *options.input_moments);
  if (!inputs.why_not.empty()) {
    return absl::FailedPreconditionError(inputs.why_not);
  }
  return GptqQuantizeWeight(graph.node(plan.consumers.front()), plan, values,
                            inputs, spec, options.gptq);
}

// Quantizes one weight; runs concurrently with others (touches only its own
// tensor). Rounding to nearest reads the float values in place and gets the
// error statistics from the same pass (numerics::QuantizeAndMeasure, its
// tiles split over `parallel_for`); GPTQ and bias correction need the values
// as floats, copied out first. The float values are freed from the model as
// soon as they are no longer read. `check_cancelled` (may be empty; must be
// thread-safe) is polled between the steps over the whole tensor, so a
// cancelled job does not wait for a large weight to finish.
QuantizedWeight QuantizeWeight(
    const onnx::GraphProto& graph, const WeightPlan& plan, TensorProto* tensor,
    const WeightNames& names, const WeightPassOptions& options,
    const std::function<absl::Status()>& check_cancelled,
    const numerics::ParallelFor& parallel_for) {
  QuantizedWeight out;
  auto cancelled = [&] {
    if (!check_cancelled) return false;
    absl::Status s = check_cancelled();
    if (s.ok()) return false;
    out.status = std::move(s);
    return true;
  };
  out.bytes_before = graph::DataBytes(*tensor);
  const bool four_bit = HasFourBitWeights(plan.precision);
  const numerics::QuantSpec spec = options.weights.SpecFor(plan.precision);
  const bool gptq_asked = options.algorithm == WeightAlgorithm::kGptq;
  const numerics::RangeSearch& range = options.weights.range;
  // The values as floats, when an algorithm or the range search needs them;
  // else a view of the tensor's own bytes.
  std::vector<float> values;
  absl::StatusOr<numerics::FloatBytes> view =
      absl::UnimplementedError("values are copied");
  if (!gptq_asked && !options.bias_correction && !range.enabled()) {
    view = graph::ViewFloatTensor(*tensor);
  }
  if (!view.ok() && !absl::IsUnimplemented(view.status())) {
    out.status = view.status();
    return out;
  }
  if (!view.ok()) {
    absl::StatusOr<std::vector<float>> read = graph::ReadFloatTensor(*tensor);
    if (!read.ok()) {
      out.status = read.status();
      return out;
    }
    values = std::move(*read);
    view = numerics::FloatBytes::Of(values);
  }
  if (cancelled()) return out;
  if (!values.empty()) graph::ClearTensorData(tensor);
  std::optional<GptqWeight> gptq;
  // GPTQ that lost its cross-check: reported, not used.
  std::optional<GptqWeight> held_out;
  std::string fallback;  // Why a GPTQ request rounded to nearest.
  if (gptq_asked) {
    absl::StatusOr<GptqWeight> g = RunGptq(graph, plan, values, spec, options);
    if (g.ok() && g->cross_checked &&
        !(g->held_out_sqnr_db > g->held_out_rtn_sqnr_db)) {
      fallback = absl::StrFormat(
          "GPTQ fitted on half of the calibration samples reached %.1f dB "
          "output SQNR on the other half against %.1f dB for rounding to "
          "nearest (it fits the calibration inputs, not the layer: more "
          "samples would help); rounded to nearest",
          g->held_out_sqnr_db, g->held_out_rtn_sqnr_db);
      held_out = std::move(*g);
    } else if (g.ok()) {
      gptq = std::move(*g);
    } else {
      fallback = absl::StrCat("GPTQ was asked for but not applied: ",
                              g.status().message(), "; rounded to nearest");
    }
  }
  absl::StatusOr<numerics::QuantizedWithError> q;
  if (gptq) {
    q = numerics::QuantizedWithError{std::move(gptq->q), {}};
    std::vector<float> approx = numerics::DequantizeTensor(q->q, plan.dims);
    q->error = numerics::MeasureError(values, approx);
  } else if (range.enabled()) {
    q = numerics::QuantizeSearchedAndMeasure(
        values, plan.dims, plan.axis >= 0 && plan.block_size == 0, plan.axis,
        plan.block_size, spec, range, parallel_for);
  } else {
    q = numerics::QuantizeAndMeasure(
        *view, plan.dims, plan.axis >= 0 && plan.block_size == 0, plan.axis,
        plan.block_size, spec, parallel_for);
  }
  if (values.empty()) graph::ClearTensorData(tensor);
  if (!q.ok()) {
    out.status = absl::InvalidArgumentError(absl::StrCat(
        "cannot quantize weight '", plan.tensor, "': ", q.status().message()));
    return out;
  }
  if (cancelled()) return out;
  out.report = MakeReport(graph, plan, options, q->q);
  out.report.set_weight_algorithm(WeightAlgorithmName(
      gptq ? WeightAlgorithm::kGptq : WeightAlgorithm::kRoundToNearest,
      options.awq_rescaled.contains(plan.tensor)));
  if (const GptqWeight* g = gptq ? &*gptq : held_out ? &*held_out : nullptr) {
    out.report.set_output_sqnr_db(g->output_sqnr_db);
    out.report.set_rtn_output_sqnr_db(g->rtn_output_sqnr_db);
    out.report.set_input_rows(g->input_rows);
    out.report.set_algorithm_seconds(g->seconds);
    if (g->cross_checked) {
      out.report.set_held_out_output_sqnr_db(g->held_out_sqnr_db);
      out.report.set_held_out_rtn_output_sqnr_db(g->held_out_rtn_sqnr_db);
    }
  }
  out.report.set_note(fallback);
  out.report.set_mse(q->error.mse);
  out.report.set_sqnr_db(q->error.sqnr_db);
  if (options.bias_correction) {
    std::vector<float> error = numerics::DequantizeTensor(q->q, plan.dims);
    if (error.size() == values.size()) {
      for (size_t i = 0; i < error.size(); ++i) {
        error[i] = values[i] - error[i];
      }
      ComputeBiasShifts(graph, plan, error, options, &out);
    }
  }
  std::vector<float>().swap(values);
  if (cancelled()) return out;
  numerics::QuantizedTensor& qt = q->q;
  absl::Status made = MakeParamTensors(qt, plan.dims, names, four_bit, &out);
  if (!made.ok()) {
    out.status = made;
    return out;
  }
  out.params = qt.params;
  if (four_bit) {
    // The quantizer writes one byte per value (the int8 / uint8 bit
    // pattern); INT4 storage packs two per byte.
    absl::StatusOr<std::string> packed =
        numerics::PackInt4Bytes(qt.values, qt.spec.is_signed);
    std::string().swap(qt.values);
    if (!packed.ok()) {
      out.status = packed.status();
      return out;
    }
    out.values = FourBitTensor(names.values, plan.dims, std::move(*packed),
                               qt.spec.is_signed);
    return out;
  }
  out.values = graph::MakeByteTensor(names.values, TensorProto::INT8, plan.dims,
                                     std::move(qt.values));
  return out;
}

uint64_t NewBytes(const QuantizedWeight& w) {
  return graph::DataBytes(w.values) + graph::DataBytes(w.scale) +
         graph::DataBytes(w.zero_point);
}

}  // namespace

std::vector<WeightNames> MakeWeightNames(const std::vector<WeightPlan>& weights,
                                         graph::UniqueNames* names) {
  std::vector<WeightNames> out;
  for (const WeightPlan& w : weights) {
    out.push_back({names->Make(w.tensor + "_quantized"),
                   names->Make(w.tensor + "_scale"),
                   names->Make(w.tensor + "_zero_point"),
                   names->Make(w.tensor + "_DequantizeLinear")});
  }
  return out;
}

onnx::NodeProto WeightDequantizeNode(const WeightPlan& plan,
                                     const WeightNames& names) {
  onnx::NodeProto node = graph::MakeNode(
      "DequantizeLinear", names.node,
      {names.values, names.scale, names.zero_point}, {plan.tensor});
  if (plan.axis >= 0) graph::SetIntAttribute(&node, "axis", plan.axis);
  if (plan.block_size > 0) {
    graph::SetIntAttribute(&node, "block_size", plan.block_size);
  }
  return node;
}

absl::StatusOr<QuantizedWeights> QuantizePlannedWeights(
    const std::vector<WeightPlan>& weights,
    const std::vector<WeightNames>& names, const WeightPassOptions& options,
    const PassHooks& hooks, const std::string& note, int64_t progress_offset,
    int64_t progress_total, onnx::ModelProto* model) {
  onnx::GraphProto* graph = model->mutable_graph();
  QuantizedWeights result;
  const int64_t total = static_cast<int64_t>(weights.size());
  const int64_t group = std::max(1, hooks.group_size);
  std::vector<TensorProto*> tensors;
  for (const WeightPlan& w : weights) tensors.push_back(WeightTensor(graph, w));
  for (int64_t begin = 0; begin < total; begin += group) {
    if (hooks.check_cancelled) {
      QUANTD_RETURN_IF_ERROR(hooks.check_cancelled());
    }
    const int64_t n = std::min(group, total - begin);
    std::vector<QuantizedWeight> done(n);
    auto work = [&](int64_t i) {
      const int64_t k = begin + i;
      done[i] =
          QuantizeWeight(*graph, weights[k], tensors[k], names[k], options,
                         hooks.check_cancelled, hooks.parallel_for);
    };
    if (hooks.parallel_for && n > 1) {
      hooks.parallel_for(n, work);
    } else {
      for (int64_t i = 0; i < n; ++i) work(i);
    }
    for (int64_t i = 0; i < n; ++i) {
      QuantizedWeight& w = done[i];
      QUANTD_RETURN_IF_ERROR(w.status);
      result.bytes_before += w.bytes_before;
      result.bytes_after += NewBytes(w);
      result.params.push_back(std::move(w.params));
      if (!note.empty()) {
        w.report.set_note(w.report.note().empty()
                              ? note
                              : absl::StrCat(note, "; ", w.report.note()));
      }
      // Adding to the graph only here, on one thread: RepeatedPtrField is
      // not safe to grow concurrently.
      const bool also_input = model->ir_version() < 4;
      graph::AddInitializer(std::move(w.values), also_input, graph);
      graph::AddInitializer(std::move(w.scale), also_input, graph);
      graph::AddInitializer(std::move(w.zero_point), also_input, graph);
      double corrected = 0;
      for (const auto& [consumer, shift] : w.bias_shifts) {
        absl::StatusOr<double> added = ApplyBiasShift(graph, consumer, shift);
        if (added.ok()) {
          corrected = std::max(corrected, *added);
        } else {
          w.bias_notes.push_back(
              absl::StrCat("bias not corrected: ", added.status().message()));
        }
      }
      w.report.set_bias_correction_max(corrected);
      for (const std::string& n : w.bias_notes) {
        w.report.set_note(w.report.note().empty()
                              ? n
                              : absl::StrCat(w.report.note(), "; ", n));
      }
      ++result.quantized;
      if (hooks.on_report) hooks.on_report(w.report);
      if (hooks.on_progress) {
        hooks.on_progress(progress_offset + begin + i + 1, progress_total);
      }
    }
  }
  return result;
}

void RemoveQuantizedInitializers(const std::vector<WeightPlan>& weights,
                                 onnx::GraphProto* graph) {
  absl::flat_hash_set<std::string> gone;
  for (const WeightPlan& w : weights) {
    if (w.initializer >= 0) gone.insert(w.tensor);
  }
  graph::RemoveInitializers(gone, TensorProto::FLOAT, graph);
}

bool BlocksConvWeight(bool four_bit_weights, const std::vector<int64_t>& dims) {
  return four_bit_weights && dims.size() >= 3 && dims[1] > 1;
}

void TapMajorGram(const float* h, int64_t channels, int64_t taps, float* out) {
  const int64_t k = channels * taps;
  for (int64_t a = 0; a < k; ++a) {
    const float* from = h + TapMajorColumn(a, channels, taps) * k;
    for (int64_t b = 0; b < k; ++b) {
      out[a * k + b] = from[TapMajorColumn(b, channels, taps)];
    }
  }
}

}  // namespace quantd::passes
