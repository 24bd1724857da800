#include "core/passes/static_range_pass.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/graph_edit.h"
#include "core/graph/graph_index.h"
#include "core/graph/tensor_util.h"
#include "core/graph/unique_names.h"
#include "core/numerics/quant_params.h"
#include "core/passes/op_sets.h"
#include "core/passes/opset_upgrade.h"
#include "core/passes/recurrent_weights.h"
#include "core/passes/static_range_quant_point.h"
#include "core/passes/subgraph_bodies.h"
#include "core/passes/uniform_quantized_lowering.h"
#include "core/passes/weight_plan.h"
#include "core/passes/xla_lowering.h"

namespace quantd::passes {
namespace {

using onnx::NodeProto;
using onnx::TensorProto;
using quantd::v1::SkippedTensor;
using quantd::v1::SkipReason;

// Ops the runtimes (and the UNIFORM_QUANTIZED lowering) run on quantized
// values unchanged: a point before them serves the quantized op after.
bool IsPassThrough(const NodeProto& node) {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "Flatten",   "Reshape", "Transpose", "Squeeze",
      "Unsqueeze", "MaxPool", "Identity"};
  return ops->contains(node.op_type());
}

// An activation quantization point to insert.
struct ActivationPlan {
  std::string tensor;
  // The node named in the report: the first quantizable reader, else the
  // first reader.
  std::string node_name, op_type;
  // W4A4 when its point is 4-bit (UINT4), else the precision reported.
  tensorflow::quantization::QuantizationPrecision precision =
      tensorflow::quantization::PRECISION_W8A8;
};

// A bias to store as INT32.
struct BiasPlan {
  std::string tensor;
  std::string input;  // Input 0 of the node: its scale is the input scale.
  int weight = -1;    // Index into the weight plan.
  std::string node_name, op_type;
};

SkippedTensor MakeSkip(const std::string& tensor, const NodeProto& node,
                       int64_t num_elements, SkipReason reason,
                       std::string detail) {
  SkippedTensor s;
  s.set_tensor_name(tensor);
  s.set_node_name(node.name());
  s.set_op_type(node.op_type());
  s.set_num_elements(num_elements);
  s.set_reason(reason);
  s.set_detail(std::move(detail));
  return s;
}

std::string StorageType(const numerics::QuantSpec& spec, bool four_bit) {
  if (four_bit) return spec.is_signed ? "INT4" : "UINT4";
  return spec.is_signed ? "INT8" : "UINT8";
}

class StaticRangePass {
 public:
  // `body`: the pass runs on a subgraph body (subgraph_bodies.h), whose
  // opset it cannot change and whose outer names it must not reuse; null
  // for the main graph.
  StaticRangePass(const StaticRangeOptions& options,
                  const ActivationRanges& ranges, const PassHooks& hooks,
                  UnitPrecision units, onnx::ModelProto* model,
                  const Body* body = nullptr)
      : options_(options),
        ranges_(ranges),
        hooks_(hooks),
        model_(model),
        graph_(model->mutable_graph()),
        body_(body),
        units_(std::move(units)) {}

  absl::StatusOr<StaticRangeStats> Run();

 private:
  absl::Status CheckRangeNames() const;
  // Plans weights, activations and biases on the current graph; fails when
  // an activation to quantize has no range.
  absl::Status Plan();
  void PlanActivations(const graph::GraphIndex& index);
  void AddCandidate(const graph::GraphIndex& index, const std::string& tensor,
                    int node, absl::flat_hash_set<std::string>* seen);
  // True when every reader of `tensor` is a Softmax (and it is no graph
  // output).
  bool OnlySoftmaxReads(const graph::GraphIndex& index,
                        const std::string& tensor) const;
  void PlanBiases(const graph::GraphIndex& index);
  // A quantizable node that computes in float: PRECISION_FULL by
  // unit_wise_quantization_precision, or reading a weight left float for
  // its size (min_num_elements_for_weights). It proposes no activation
  // point (its inputs and output are candidates only when a quantized node
  // proposes them) and is never rewired to a dequantized tensor: it keeps
  // reading the float one. So a point goes on a tensor when a quantized
  // node proposes it (by the usual input/output rule) and at least one
  // reader remains once the float quantizable readers are left out; the
  // other readers (any non-quantizable op, quantized ops) read the
  // dequantized tensor as before. Why a small weight's node must not read a
  // point: ONNX Runtime's extended level (its default; WeightBiasQuantization)
  // quantizes the float weight of a Conv or Gemm fed by a DequantizeLinear
  // itself, one int8 scale per tensor, so that node would not stay float.
  bool KeepsFloat(const NodeProto& node) const {
    if (!IsQuantizableOp(node)) return false;
    if (units_.IsFull(node)) return true;
    return node.input_size() > 1 && small_weights_.contains(node.input(1));
  }
  std::vector<int> PointReaders(const std::vector<int>& readers) const {
    std::vector<int> out;
    for (int n : readers) {
      if (!KeepsFloat(graph_->node(n))) out.push_back(n);
    }
    return out;
  }
  // The precision reported for quantized tensors (a node quantized under a
  // model-wide FULL is W8A8 by its unit).
  tensorflow::quantization::QuantizationPrecision ReportPrecision() const {
    return options_.precision == tensorflow::quantization::PRECISION_FULL
               ? tensorflow::quantization::PRECISION_W8A8
               : options_.precision;
  }
  // The precision of an activation point on `tensor` read by `readers`
  // (unit-wise precision): W4A4 (a 4-bit point) when every non-FULL
  // quantizable node touching the tensor (its readers, and its producer or,
  // through one Relu/Clip, the producer's producer) is W4A4; with no such
  // node, the model-wide precision's activations; otherwise 8-bit.
  tensorflow::quantization::QuantizationPrecision PointPrecision(
      const graph::GraphIndex& index, const std::string& tensor,
      const std::vector<int>& readers) const;
  // A point on `x` rewired every reader inside `owner`'s bodies to
  // `dequantized`; a quantizable body node at PRECISION_FULL reads `x` again
  // (unit-wise precision, scoped to the body).
  void KeepFullBodyReadersFloat(NodeProto* owner, const std::string& x,
                                const std::string& dequantized) const;
  absl::Status PrepareOpset();
  absl::Status QuantizeWeights();
  void PlaceWeightNodes();
  absl::Status QuantizeActivations();
  // Whether a quantized op (not at PRECISION_FULL) reads `tensor`, directly
  // or through ops that pass quantized values on (Flatten, MaxPool, ...):
  // a point past a quantized op's Relu/Clip that reaches a subgraph
  // without reaching one goes on the quantized op's own output instead
  // (ONNX Runtime 1.30 aborts loading a point on a Relu read only by
  // Transposes feeding If bodies).
  bool ReachesQuantizedOp(const graph::GraphIndex& index,
                          const std::string& tensor, int depth) const;
  // Whether `tensor` is read inside an If/Loop/Scan body, directly or
  // through the ops ReachesQuantizedOp looks through.
  bool ReachesSubgraph(const graph::GraphIndex& index,
                       const std::string& tensor, int depth) const;
  absl::Status QuantizeBiases();
  absl::Status QuantizeBias(const BiasPlan& bias);
  // The weight channels whose scale was raised so that `bias` fits int32 at
  // input scale * weight scale (see the definition); 0 when none was.
  int WidenWeightScalesForBias(const BiasPlan& bias,
                               const std::vector<float>& bias_values,
                               float input_scale);
  void Progress() {
    ++done_;
    if (hooks_.on_progress) hooks_.on_progress(done_, total_);
  }
  int64_t Total() const {
    return static_cast<int64_t>(weights_.weights.size() + activations_.size() +
                                biases_.size());
  }
  // The op set's lowering (op_sets.h) rewrites the QDQ graph just written.
  absl::Status LowerOpSet();
  void Finish();

  const StaticRangeOptions& options_;
  const ActivationRanges& ranges_;
  const PassHooks& hooks_;
  onnx::ModelProto* model_;
  onnx::GraphProto* graph_;
  const Body* body_;
  int64_t ir_version_ = 0;
  UnitPrecision units_;

  WeightPlanResult weights_;
  std::vector<ActivationPlan> activations_;
  std::vector<BiasPlan> biases_;
  std::vector<SkippedTensor> skipped_;  // Activations and biases.
  // Weights left float for their size (SKIP_TOO_FEW_ELEMENTS): their
  // readers keep float inputs (KeepsFloat).
  absl::flat_hash_set<std::string> small_weights_;
  // Body tensors without a range, left float (see the header).
  std::vector<std::string> unreached_;
  std::vector<std::string> unbounded_;

  std::unique_ptr<graph::UniqueNames> names_;
  std::vector<WeightNames> weight_names_;
  QuantizedWeights quantized_weights_;
  // Activation tensor -> the parameters of its inserted point.
  absl::flat_hash_map<std::string, numerics::QuantParams> activation_params_;
  int64_t done_ = 0;
  int64_t total_ = 0;
  int lowered_nodes_ = 0;  // Now integer / QLinear ops (op_set XLA, UQ).
  const OpSetRow* op_set_ = nullptr;  // options_.op_set's row (op_sets.h).
  StaticRangeStats stats_;
};

absl::StatusOr<StaticRangeStats> StaticRangePass::Run() {
  ir_version_ = model_->ir_version();
  QUANTD_ASSIGN_OR_RETURN(op_set_,
                          PassRow(Method::kStaticRange, options_.op_set));
  // A body's ranges were checked against the whole model.
  QUANTD_RETURN_IF_ERROR(body_ != nullptr ? absl::OkStatus()
                                          : CheckRangeNames());
  QUANTD_RETURN_IF_ERROR(Plan());
  if (Total() > 0) {
    QUANTD_RETURN_IF_ERROR(PrepareOpset());
  }
  total_ = Total();
  if (hooks_.on_planned) hooks_.on_planned(total_);
  if (total_ > 0) {
    names_ = std::make_unique<graph::UniqueNames>(*graph_);
    if (body_ != nullptr) names_->AddGraph(*body_->outer_root);
    QUANTD_RETURN_IF_ERROR(QuantizeWeights());
    PlaceWeightNodes();
    QUANTD_RETURN_IF_ERROR(QuantizeActivations());
    QUANTD_RETURN_IF_ERROR(QuantizeBiases());
    QUANTD_RETURN_IF_ERROR(LowerOpSet());
  }
  Finish();
  return std::move(stats_);
}

// Every named range must be a tensor of the model (main graph or a
// subgraph body): a name that is not is a calibration of another model (or
// a typo), and silently ignoring it would hide that.
absl::Status StaticRangePass::CheckRangeNames() const {
  const std::vector<std::string> defined =
      graph::DefinedNames(*graph_, /*recursive=*/true);
  const absl::flat_hash_set<std::string> known(defined.begin(), defined.end());
  std::vector<std::string> unknown;
  for (const auto& [name, range] : ranges_) {
    if (!known.contains(name)) unknown.push_back(name);
  }
  if (unknown.empty()) return absl::OkStatus();
  std::sort(unknown.begin(), unknown.end());
  return absl::InvalidArgumentError(
      absl::StrCat("calibration names ", unknown.size(),
                   " tensor(s) the model does not have: '",
                   absl::StrJoin(unknown, "', '"), "'"));
}

absl::Status StaticRangePass::Plan() {
  activations_.clear();
  biases_.clear();
  skipped_.clear();
  const graph::GraphIndex index(*graph_);
  weights_ = PlanWeights(*graph_, index, options_, ir_version_, &units_);
  small_weights_.clear();
  for (const SkippedTensor& s : weights_.skipped) {
    if (s.reason() == quantd::v1::SKIP_TOO_FEW_ELEMENTS) {
      small_weights_.insert(s.tensor_name());
    }
  }
  PlanActivations(index);
  // In a body, a tensor without a range that the main graph does not
  // define was made in a branch or iteration calibration never ran: it
  // stays float. A main-graph tensor always runs, so its missing range is
  // a real gap in the calibration.
  absl::flat_hash_set<std::string> main_names;
  if (body_ != nullptr) {
    const std::vector<std::string> defined =
        graph::DefinedNames(*body_->outer_root, /*recursive=*/false);
    main_names.insert(defined.begin(), defined.end());
  }
  std::vector<std::string> missing;
  std::vector<ActivationPlan> planned;
  unreached_.clear();
  unbounded_.clear();
  for (ActivationPlan& a : activations_) {
    auto range = ranges_.find(a.tensor);
    if (range != ranges_.end() && range->second.unbounded) {
      unbounded_.push_back(a.tensor);
    } else if (range != ranges_.end()) {
      planned.push_back(std::move(a));
    } else if (body_ != nullptr && !main_names.contains(a.tensor)) {
      unreached_.push_back(a.tensor);
    } else {
      missing.push_back(a.tensor);
    }
  }
  activations_ = std::move(planned);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "STATIC_RANGE needs a calibrated range for every activation it "
        "quantizes; none for ",
        missing.size(), " tensor(s): '", absl::StrJoin(missing, "', '"), "'",
        ranges_.empty() ? " (no calibration ranges were given)" : ""));
  }
  PlanBiases(index);
  return absl::OkStatus();
}

void StaticRangePass::PlanActivations(const graph::GraphIndex& index) {
  absl::flat_hash_set<std::string> seen;
  for (int n = 0; n < graph_->node_size(); ++n) {
    const NodeProto& node = graph_->node(n);
    if (!IsQuantizableOp(node) || KeepsFloat(node)) continue;
    if (node.input_size() > 0) AddCandidate(index, node.input(0), n, &seen);
    if (node.op_type() == "MatMul" && node.input_size() > 1) {
      AddCandidate(index, node.input(1), n, &seen);
    }
    if (node.output_size() == 0 || node.output(0).empty()) continue;
    // The output rule (see the header).
    std::string out = node.output(0);
    const std::vector<graph::Use>& uses = index.Uses(out);
    if (uses.size() == 1 && uses[0].slot == 0 && !index.IsGraphOutput(out)) {
      const NodeProto& next = graph_->node(uses[0].node);
      // Past the Relu/Clip, tf.contrib's point after the activation: its
      // range is the pre-activation range clamped, so the grid is finer
      // (a Relu6 after a conv whose outputs span +-16 gets steps 5x finer),
      // and ONNX Runtime folds the Relu/Clip into the QuantizeLinear either
      // way. When only float-weight ops read it, AddCandidate adds no point
      // there and the op's output gets none either: one before the
      // activation would quantize the unclamped range for nothing (M-LSD:
      // -9 dB at the output). The exception: ONNX Runtime 1.30 aborts
      // loading a model where Transposes feeding If bodies read a point on
      // a Relu, so when the activation's output reaches a subgraph without
      // reaching a quantized op (ReachesQuantizedOp) the point goes on the
      // op's own output. (A graph output nobody reads gets no point, as
      // AddCandidate decides.)
      if (IsDefaultDomain(next) &&
          (next.op_type() == "Relu" || next.op_type() == "Clip") &&
          next.output_size() > 0 && !next.output(0).empty()) {
        const std::string& relu_out = next.output(0);
        if (index.Uses(relu_out).empty() ||
            ReachesQuantizedOp(index, relu_out, 0) ||
            !ReachesSubgraph(index, relu_out, 0)) {
          AddCandidate(index, relu_out, uses[0].node, &seen);
          continue;
        }
      }
    }
    // Attention scores that only a Softmax reads keep no point: a Softmax
    // needs its input's precision relative to each row's maximum, which one
    // grid over the whole tensor cannot give, and a Softmax between a
    // DequantizeLinear and a QuantizeLinear becomes ONNX Runtime's
    // QLinearSoftmax at its default level, whose float lookup table
    // overflows once the output scale is finer than about 1/(148 x the
    // row length): a short, flat attention (12 tokens, probabilities below
    // 0.11) lost 30 -> 8 dB there. The Softmax output keeps its point.
    if (OnlySoftmaxReads(index, out)) continue;
    AddCandidate(index, out, n, &seen);
  }
}

bool StaticRangePass::OnlySoftmaxReads(const graph::GraphIndex& index,
                                       const std::string& tensor) const {
  const std::vector<graph::Use>& uses = index.Uses(tensor);
  if (uses.empty() || index.IsGraphOutput(tensor)) return false;
  for (const graph::Use& u : uses) {
    if (u.slot != 0) return false;
    const NodeProto& r = graph_->node(u.node);
    if (!IsDefaultDomain(r) || r.op_type() != "Softmax") return false;
  }
  return true;
}

bool StaticRangePass::ReachesQuantizedOp(const graph::GraphIndex& index,
                                         const std::string& tensor,
                                         int depth) const {
  if (depth > 8) return false;
  for (const graph::Use& u : index.Uses(tensor)) {
    if (u.slot == graph::Use::kSubgraphSlot) continue;
    const NodeProto& r = graph_->node(u.node);
    if (IsQuantizableOp(r) && !KeepsFloat(r)) return true;
    // Already quantized (a second run): AddCandidate leaves it as it is.
    if (IsOp(r, "QuantizeLinear")) return true;
    if (u.slot == 0 && IsDefaultDomain(r) && IsPassThrough(r) &&
        r.output_size() > 0 && !r.output(0).empty() &&
        ReachesQuantizedOp(index, r.output(0), depth + 1)) {
      return true;
    }
  }
  return false;
}

bool StaticRangePass::ReachesSubgraph(const graph::GraphIndex& index,
                                      const std::string& tensor,
                                      int depth) const {
  if (depth > 8) return true;  // Unknown: the cautious answer.
  for (const graph::Use& u : index.Uses(tensor)) {
    if (u.slot == graph::Use::kSubgraphSlot) return true;
    const NodeProto& r = graph_->node(u.node);
    if (u.slot == 0 && IsDefaultDomain(r) && IsPassThrough(r) &&
        r.output_size() > 0 && !r.output(0).empty() &&
        ReachesSubgraph(index, r.output(0), depth + 1)) {
      return true;
    }
  }
  return false;
}

void StaticRangePass::AddCandidate(const graph::GraphIndex& index,
                                   const std::string& tensor, int node,
                                   absl::flat_hash_set<std::string>* seen) {
  if (tensor.empty() || !seen->insert(tensor).second) return;
  const NodeProto& owner = graph_->node(node);
  // Constants are weights, not activations (an initializer that is also a
  // graph input may be fed at run time: that one is an activation).
  const int init = index.Initializer(tensor);
  const int producer = index.Producer(tensor);
  if ((init >= 0 && !(index.IsGraphInput(tensor) && ir_version_ >= 4)) ||
      (producer >= 0 && graph_->node(producer).op_type() == "Constant")) {
    return;
  }
  // The element type, where the model declares it.
  auto declared = [&](const auto& infos) {
    for (const auto& v : infos) {
      if (v.name() == tensor && v.type().has_tensor_type()) {
        return v.type().tensor_type().elem_type();
      }
    }
    return 0;
  };
  int32_t type = declared(graph_->input());
  if (type == 0) type = declared(graph_->value_info());
  if (type == 0) type = declared(graph_->output());
  if (type != 0 && type != TensorProto::FLOAT) {
    skipped_.push_back(
        MakeSkip(tensor, owner, 0, quantd::v1::SKIP_NOT_FLOAT,
                 absl::StrCat("activation element type is ",
                              TensorProto::DataType_Name(
                                  static_cast<TensorProto::DataType>(type)),
                              ", not FLOAT")));
    return;
  }
  std::vector<int> consumers;
  for (const graph::Use& use : index.Uses(tensor)) {
    // A node reading the tensor inside its subgraphs is a consumer too:
    // the point rewires its bodies (InsertQuantPoint).
    if (consumers.empty() || consumers.back() != use.node) {
      consumers.push_back(use.node);
    }
  }
  consumers = PointReaders(consumers);
  // A graph output with no reader (or only FULL readers): nothing
  // downstream to quantize for.
  if (consumers.empty()) return;
  absl::StatusOr<QuantPoint> point = CheckQuantPoint(
      *graph_, tensor, consumers, options_.activations.producer_scope,
      options_.activations.consumer_scope);
  if (!point.ok()) return;  // Cannot happen: consumers read the tensor.
  switch (point->outcome) {
    case QuantPoint::kInserted: {
      int report_node = consumers.front();
      for (int c : consumers) {
        if (IsQuantizableOp(graph_->node(c))) {
          report_node = c;
          break;
        }
      }
      const NodeProto& r = graph_->node(report_node);
      activations_.push_back({tensor, r.name(), r.op_type(),
                              PointPrecision(index, tensor, consumers)});
      break;
    }
    case QuantPoint::kProducerOutOfScope:
    case QuantPoint::kConsumerOutOfScope:
      skipped_.push_back(
          MakeSkip(tensor, owner, 0, quantd::v1::SKIP_OUT_OF_SCOPE,
                   absl::StrCat("activation_params: ", point->detail)));
      break;
    case QuantPoint::kAlreadyQuantized:
      break;  // Quantized already: nothing left float.
  }
}

void StaticRangePass::PlanBiases(const graph::GraphIndex& index) {
  absl::flat_hash_map<std::string, int> weight_of;
  for (int k = 0; k < static_cast<int>(weights_.weights.size()); ++k) {
    weight_of[weights_.weights[k].tensor] = k;
  }
  absl::flat_hash_set<std::string> planned_inputs;
  for (const ActivationPlan& a : activations_) planned_inputs.insert(a.tensor);

  for (int n = 0; n < graph_->node_size(); ++n) {
    const NodeProto& node = graph_->node(n);
    if (!IsQuantizableOp(node) || node.op_type() == "MatMul" ||
        node.input_size() < 3 || node.input(2).empty()) {
      continue;
    }
    const std::string& b = node.input(2);
    const int producer = index.Producer(b);
    if (producer >= 0 &&
        graph_->node(producer).op_type() == "DequantizeLinear") {
      continue;  // Quantized by an earlier run.
    }
    const int init = index.Initializer(b);
    const TensorProto* t = init >= 0 ? &graph_->initializer(init) : nullptr;
    const int64_t elements = t != nullptr ? graph::NumElements(*t) : 0;
    auto skip = [&](SkipReason reason, std::string detail) {
      skipped_.push_back(
          MakeSkip(b, node, elements, reason, absl::StrCat("bias: ", detail)));
    };
    auto weight = weight_of.find(node.input(1));
    if (weight == weight_of.end()) {
      skip(quantd::v1::SKIP_REASON_UNSPECIFIED,
           absl::StrCat("the weight '", node.input(1),
                        "' stays float, so there is no weight scale"));
      continue;
    }
    if (!planned_inputs.contains(node.input(0))) {
      skip(quantd::v1::SKIP_REASON_UNSPECIFIED,
           absl::StrCat("the input '", node.input(0),
                        "' gets no quantization point here, so there is "
                        "no input scale"));
      continue;
    }
    if (t == nullptr || (index.IsGraphInput(b) && ir_version_ >= 4)) {
      skip(quantd::v1::SKIP_NOT_CONSTANT,
           "not an initializer (or one a caller can override)");
      continue;
    }
    if (t->data_type() != TensorProto::FLOAT || graph::HasExternalData(*t)) {
      skip(quantd::v1::SKIP_NOT_FLOAT, "not a FLOAT initializer in the model");
      continue;
    }
    const WeightPlan& w = weights_.weights[weight->second];
    if (w.block_size > 0) {
      skip(quantd::v1::SKIP_REASON_UNSPECIFIED,
           absl::StrCat("the weight '", node.input(1), "' is blockwise (",
                        w.block_size,
                        " per block), so no one weight scale per output "
                        "channel makes an int32 bias scale"));
      continue;
    }
    int64_t channels = 0;
    if (node.op_type() == "Conv") {
      channels = w.dims.empty() ? 0 : w.dims[0];
    } else if (w.dims.size() == 2) {
      channels = w.dims[graph::IntAttribute(node, "transB", 0) != 0 ? 0 : 1];
    }
    if (t->dims_size() != 1 || t->dims(0) != channels) {
      skip(quantd::v1::SKIP_UNSUPPORTED_LAYOUT,
           absl::StrCat("shape is not [", channels,
                        "] (one value per output channel)"));
      continue;
    }
    if (index.Uses(b).size() != 1 || index.IsGraphOutput(b)) {
      skip(quantd::v1::SKIP_SHARED_WITH_UNSUPPORTED_CONSUMER,
           "also read elsewhere; its int32 scale depends on this node's "
           "input scale");
      continue;
    }
    biases_.push_back(
        {b, node.input(0), weight->second, node.name(), node.op_type()});
  }
}

tensorflow::quantization::QuantizationPrecision StaticRangePass::PointPrecision(
    const graph::GraphIndex& index, const std::string& tensor,
    const std::vector<int>& readers) const {
  std::vector<int> touching;
  for (int n : readers) {
    if (IsQuantizableOp(graph_->node(n))) touching.push_back(n);
  }
  int producer = index.Producer(tensor);
  if (producer >= 0) {
    const NodeProto& p = graph_->node(producer);
    if (IsDefaultDomain(p) &&
        (p.op_type() == "Relu" || p.op_type() == "Clip") &&
        p.input_size() > 0) {
      producer = index.Producer(p.input(0));
    }
  }
  if (producer >= 0 && IsQuantizableOp(graph_->node(producer)) &&
      !KeepsFloat(graph_->node(producer))) {
    touching.push_back(producer);
  }
  if (touching.empty()) return ReportPrecision();
  // 4-bit activations only around layers whose weights are 4-bit too: a
  // layer whose weight stays float (too small, FULL, out of scope) computes
  // in float anyway, and ONNX Runtime 1.30's extended optimizations fuse
  // DequantizeLinear(UINT4) -> Conv(float weight) -> QuantizeLinear into a
  // QLinearConv on uint4, which it then refuses as an invalid model.
  absl::flat_hash_set<int> quantized_weight_readers;
  for (const WeightPlan& w : weights_.weights) {
    quantized_weight_readers.insert(w.consumers.begin(), w.consumers.end());
  }
  for (int n : touching) {
    const auto p = units_.For(graph_->node(n)).precision;
    if (!HasFourBitActivations(p)) return p;
    if (!quantized_weight_readers.contains(n)) {
      return tensorflow::quantization::PRECISION_W4A8;
    }
  }
  return tensorflow::quantization::PRECISION_W4A4;
}

absl::Status StaticRangePass::PrepareOpset() {
  // INT4 weights and UINT4 activations need opset 21.
  bool four_bit = false;
  for (const WeightPlan& w : weights_.weights) {
    // Blocked DequantizeLinear arrived with INT4, in opset 21.
    four_bit |= HasFourBitWeights(w.precision) || w.block_size > 0;
  }
  for (const ActivationPlan& a : activations_) {
    four_bit |= HasFourBitActivations(a.precision);
  }
  const int64_t needed = four_bit ? kInt4Opset : kPerChannelOpset;
  QUANTD_ASSIGN_OR_RETURN(OpsetOutcome outcome,
                          body_ != nullptr ? BodyOpset(*body_, needed)
                                           : EnsureOpset(model_, needed));
  stats_.opset_note = outcome.note;
  switch (outcome.mode) {
    case OpsetOutcome::kAlreadyNewEnough:
      break;
    case OpsetOutcome::kUpgraded: {
      // The converter replaced the whole model and may renumber nodes.
      graph_ = model_->mutable_graph();
      QUANTD_RETURN_IF_ERROR(Plan());
      break;
    }
    case OpsetOutcome::kPerTensorFallback:
      for (WeightPlan& w : weights_.weights) w.axis = -1;
      break;
  }
  return absl::OkStatus();
}

absl::Status StaticRangePass::QuantizeWeights() {
  weight_names_ = MakeWeightNames(weights_.weights, names_.get());
  QUANTD_ASSIGN_OR_RETURN(
      quantized_weights_,
      QuantizePlannedWeights(weights_.weights, weight_names_, options_, hooks_,
                             stats_.opset_note, 0, total_, model_));
  done_ = quantized_weights_.quantized;
  stats_.quantized_weights = quantized_weights_.quantized;
  stats_.weight_bytes_before = quantized_weights_.bytes_before;
  stats_.weight_bytes_after = quantized_weights_.bytes_after;
  return absl::OkStatus();
}

// A Constant weight's node becomes its DequantizeLinear in place; the
// DequantizeLinear of an initializer weight reads only initializers, so it
// goes first.
void StaticRangePass::PlaceWeightNodes() {
  const std::vector<WeightPlan>& plan = weights_.weights;
  for (size_t k = 0; k < plan.size(); ++k) {
    if (plan[k].constant_node >= 0) {
      *graph_->mutable_node(plan[k].constant_node) =
          WeightDequantizeNode(plan[k], weight_names_[k]);
    }
  }
  int front = 0;
  for (size_t k = 0; k < plan.size(); ++k) {
    if (plan[k].initializer >= 0) {
      graph::InsertNode(WeightDequantizeNode(plan[k], weight_names_[k]),
                        front++, graph_);
    }
  }
  RemoveQuantizedInitializers(plan, graph_);
}

void StaticRangePass::KeepFullBodyReadersFloat(
    NodeProto* owner, const std::string& x,
    const std::string& dequantized) const {
  const UnitPrecision body_units =
      units_.InBody(BodyScope(*owner, &options_.inlined));
  for (onnx::AttributeProto& a : *owner->mutable_attribute()) {
    std::vector<onnx::GraphProto*> bodies;
    if (a.has_g()) bodies.push_back(a.mutable_g());
    for (onnx::GraphProto& g : *a.mutable_graphs()) bodies.push_back(&g);
    for (onnx::GraphProto* body : bodies) {
      for (NodeProto& node : *body->mutable_node()) {
        if (IsQuantizableOp(node) && body_units.IsFull(node)) {
          for (std::string& in : *node.mutable_input()) {
            if (in == dequantized) in = x;
          }
        }
        if (graph::HasSubgraph(node)) {
          KeepFullBodyReadersFloat(&node, x, dequantized);
        }
      }
    }
  }
}

absl::Status StaticRangePass::QuantizeActivations() {
  if (hooks_.check_cancelled) {
    QUANTD_RETURN_IF_ERROR(hooks_.check_cancelled());
  }
  for (size_t i = 0; i < activations_.size(); ++i) {
    const std::string& x = activations_[i].tensor;
    const bool four_bit = HasFourBitActivations(activations_[i].precision);
    const numerics::QuantSpec spec =
        options_.activations.SpecFor(activations_[i].precision);
    QUANTD_ASSIGN_OR_RETURN(numerics::QuantGrid grid, numerics::GridFor(spec));
    const ActivationRange& range = ranges_.at(x);
    absl::StatusOr<numerics::QuantParams> qp =
        numerics::ChooseQuantParams(range.min, range.max, spec);
    if (!qp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "range of activation '", x, "': ", qp.status().message()));
    }
    QuantPointParams params{*qp, spec, four_bit,
                            options_.activations.producer_scope,
                            options_.activations.consumer_scope};
    const std::vector<int> readers = PointReaders(ConsumersOf(*graph_, x));
    std::vector<NodeProto*> owners;  // Readers holding bodies.
    for (int n : readers) {
      NodeProto* node = graph_->mutable_node(n);
      if (graph::HasSubgraph(*node)) owners.push_back(node);
    }
    QUANTD_ASSIGN_OR_RETURN(
        QuantPoint point,
        InsertQuantPoint(graph_, x, readers, params, names_.get()));
    if (point.outcome == QuantPoint::kInserted) {
      // InsertNode keeps NodeProto objects in place: `owners` still holds.
      for (NodeProto* owner : owners) {
        KeepFullBodyReadersFloat(owner, x, point.dequantized);
      }
      activation_params_[x] = *qp;
      ++stats_.quantized_activations;
      quantd::v1::TensorReport r;
      r.set_node_name(activations_[i].node_name);
      r.set_op_type(activations_[i].op_type);
      r.set_tensor_name(x);
      r.set_precision(four_bit ? activations_[i].precision : ReportPrecision());
      r.set_num_elements(0);  // Not known without shapes; unused here.
      quantd::v1::QuantScheme* s = r.mutable_scheme();
      s->set_bits(spec.bits);
      s->set_symmetric(spec.symmetric);
      s->set_narrow_range(spec.narrow_range);
      s->set_per_channel(false);
      s->set_storage_type(StorageType(spec, four_bit));
      s->set_quant_min(grid.quant_min);
      s->set_quant_max(grid.quant_max);
      r.set_scale_min(qp->scale);
      r.set_scale_max(qp->scale);
      std::string note = absl::StrCat(
          "activation: zero point ", qp->zero_point, ", calibrated range [",
          range.min, ", ", range.max, "] -> [",
          numerics::DequantizeValue(grid.quant_min, *qp), ", ",
          numerics::DequantizeValue(grid.quant_max, *qp), "]");
      if (point.clipped) {
        absl::StrAppend(&note,
                        "; a Clip to that range precedes "
                        "QuantizeLinear (the grid is smaller than ",
                        StorageType(spec, four_bit), ")");
      }
      if (range.channels > 0) {
        absl::StrAppend(&note, "; calibration gave per-channel ranges (",
                        range.channels, " channels on axis ", range.axis,
                        "): quantized per tensor with their overall range");
      }
      r.set_note(std::move(note));
      if (hooks_.on_report) hooks_.on_report(r);
    }
    Progress();
  }
  return absl::OkStatus();
}

absl::Status StaticRangePass::QuantizeBiases() {
  if (hooks_.check_cancelled) {
    QUANTD_RETURN_IF_ERROR(hooks_.check_cancelled());
  }
  for (const BiasPlan& bias : biases_) {
    QUANTD_RETURN_IF_ERROR(QuantizeBias(bias));
    Progress();
  }
  return absl::OkStatus();
}

// b_q[c] = round_half_even(b[c] / (s_in * s_w[c])), zero point 0, the
// scale s_in * s_w[c] computed in float as ONNX Runtime's QDQ tools do.
// A channel whose weights are all but zero (a BatchNormalization folded in
// with a tiny gamma) gets a tiny weight scale, while its bias need not be
// small: b / (s_in * s_w) then overflows int32 and the saturated bias shifts
// every output of the channel. As ONNX Runtime's quantizer does (since
// 1.17), such a channel's weight scale is raised until the bias fits, and
// its int8 weights are re-expressed on the coarser grid: they were near
// zero, so they lose little, and the bias is exact. 8-bit weights per
// channel or per tensor; blocked and 4-bit weights keep the saturating bias
// (the report says so).
int StaticRangePass::WidenWeightScalesForBias(
    const BiasPlan& bias, const std::vector<float>& bias_values,
    float input_scale) {
  const WeightPlan& w = weights_.weights[bias.weight];
  std::vector<numerics::QuantParams>& wp =
      quantized_weights_.params[bias.weight];
  if (w.block_size > 0 || HasFourBitWeights(w.precision) || wp.empty() ||
      !(input_scale > 0.0f)) {
    return 0;
  }
  const bool per_channel = wp.size() > 1;
  if (per_channel && wp.size() != bias_values.size()) return 0;
  // Headroom below 2^31 - 1 for the float rounding of s_in * s_w.
  constexpr double kInt32Room = 2147483647.0 * 0.999;
  std::vector<double> needed(wp.size(), 0.0);
  for (size_t c = 0; c < bias_values.size(); ++c) {
    double& n = needed[per_channel ? c : 0];
    n = std::max(n,
                 std::fabs(static_cast<double>(bias_values[c])) / kInt32Room);
  }
  std::vector<size_t> widen;
  for (size_t k = 0; k < wp.size(); ++k) {
    if (static_cast<double>(input_scale) * wp[k].scale < needed[k]) {
      widen.push_back(k);
    }
  }
  if (widen.empty()) return 0;
  const WeightNames& names = weight_names_[bias.weight];
  TensorProto* values = nullptr;
  TensorProto* scales = nullptr;
  for (auto& t : *graph_->mutable_initializer()) {
    if (t.name() == names.values) values = &t;
    if (t.name() == names.scale) scales = &t;
  }
  if (values == nullptr || scales == nullptr ||
      (values->data_type() != TensorProto::INT8 &&
       values->data_type() != TensorProto::UINT8) ||
      static_cast<int64_t>(values->raw_data().size()) != w.num_elements ||
      scales->raw_data().size() != wp.size() * sizeof(float)) {
    return 0;
  }
  numerics::ChannelLayout layout;
  layout.inner = w.num_elements;
  if (per_channel) {
    absl::StatusOr<numerics::ChannelLayout> l =
        numerics::LayoutFor(w.dims, w.axis);
    if (!l.ok() || l->channels != static_cast<int64_t>(wp.size())) return 0;
    layout = *l;
  }
  const bool is_signed = values->data_type() == TensorProto::INT8;
  char* q = values->mutable_raw_data()->data();
  float* scale_values =
      reinterpret_cast<float*>(scales->mutable_raw_data()->data());
  for (size_t k : widen) {
    // Rounded up, so that s_in * s_w reaches what the bias needs.
    const float raised =
        std::nextafter(static_cast<float>(needed[k] / input_scale),
                       std::numeric_limits<float>::infinity());
    const double ratio = static_cast<double>(wp[k].scale) / raised;
    const int32_t zp = wp[k].zero_point;
    for (int64_t o = 0; o < layout.outer; ++o) {
      char* row =
          q + (o * layout.channels + static_cast<int64_t>(k)) * layout.inner;
      for (int64_t i = 0; i < layout.inner; ++i) {
        const int32_t old =
            is_signed ? static_cast<int8_t>(row[i])
                      : static_cast<int32_t>(static_cast<uint8_t>(row[i]));
        // |old - zp| only shrinks (ratio < 1): no clamping is needed.
        const int32_t now =
            zp + static_cast<int32_t>(std::nearbyint((old - zp) * ratio));
        row[i] = static_cast<char>(now);
      }
    }
    wp[k].scale = raised;
    scale_values[k] = raised;
  }
  return static_cast<int>(widen.size());
}

absl::Status StaticRangePass::QuantizeBias(const BiasPlan& bias) {
  auto in = activation_params_.find(bias.input);
  const WeightPlan& w = weights_.weights[bias.weight];
  const std::vector<numerics::QuantParams>& wp =
      quantized_weights_.params[bias.weight];
  TensorProto* tensor = nullptr;
  for (auto& t : *graph_->mutable_initializer()) {
    if (t.name() == bias.tensor) tensor = &t;
  }
  NodeProto owner;
  owner.set_name(bias.node_name);
  owner.set_op_type(bias.op_type);
  if (in == activation_params_.end() || tensor == nullptr) {
    skipped_.push_back(MakeSkip(bias.tensor, owner, 0,
                                quantd::v1::SKIP_REASON_UNSPECIFIED,
                                "bias: the input got no quantization point"));
    return absl::OkStatus();
  }
  QUANTD_ASSIGN_OR_RETURN(std::vector<float> values,
                          graph::ReadFloatTensor(*tensor));
  const int widened = WidenWeightScalesForBias(bias, values, in->second.scale);
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<float> scales(n);
  std::vector<int32_t> q(n);
  std::vector<float> approx(n);
  int saturated = 0;
  for (int64_t c = 0; c < n; ++c) {
    const float s_w = wp[wp.size() == 1 ? 0 : c].scale;
    scales[c] = in->second.scale * s_w;
    if (!(scales[c] > 0.0f) || !std::isfinite(values[c])) {
      skipped_.push_back(MakeSkip(
          bias.tensor, owner, n, quantd::v1::SKIP_REASON_UNSPECIFIED,
          absl::StrCat("bias: value ", values[c], " or scale ", scales[c],
                       " (input scale ", in->second.scale, " * weight scale ",
                       s_w, ") cannot be represented in int32")));
      return absl::OkStatus();
    }
    const double v = std::nearbyint(static_cast<double>(values[c]) /
                                    static_cast<double>(scales[c]));
    constexpr double kMin = std::numeric_limits<int32_t>::min();
    constexpr double kMax = std::numeric_limits<int32_t>::max();
    if (v < kMin || v > kMax) ++saturated;
    q[c] = static_cast<int32_t>(std::clamp(v, kMin, kMax));
    approx[c] = scales[c] * static_cast<float>(q[c]);
  }
  const bool per_channel = w.axis >= 0 && wp.size() > 1;
  std::vector<int64_t> param_dims;
  if (per_channel) {
    param_dims.push_back(n);
  } else {
    scales.resize(1);
  }
  const std::string values_name = names_->Make(bias.tensor + "_quantized");
  const std::string scale_name = names_->Make(bias.tensor + "_scale");
  const std::string zp_name = names_->Make(bias.tensor + "_zero_point");
  const std::string node_name = names_->Make(bias.tensor + "_DequantizeLinear");
  std::vector<TensorProto> added;
  added.push_back(graph::MakeInt32Tensor(values_name, {n}, q));
  added.push_back(graph::MakeFloatTensor(scale_name, param_dims, scales));
  added.push_back(graph::MakeInt32Tensor(
      zp_name, param_dims, std::vector<int32_t>(per_channel ? n : 1, 0)));
  stats_.weight_bytes_before += graph::DataBytes(*tensor);
  for (const TensorProto& t : added) {
    stats_.weight_bytes_after += graph::DataBytes(t);
  }
  for (TensorProto& t : added) *graph_->add_initializer() = std::move(t);
  NodeProto dq =
      graph::MakeNode("DequantizeLinear", node_name,
                      {values_name, scale_name, zp_name}, {bias.tensor});
  if (per_channel) graph::SetIntAttribute(&dq, "axis", 0);
  graph::InsertNode(std::move(dq), 0, graph_);
  graph::RemoveInitializers({bias.tensor}, TensorProto::FLOAT, graph_);
  ++stats_.quantized_biases;

  quantd::v1::TensorReport r;
  r.set_node_name(bias.node_name);
  r.set_op_type(bias.op_type);
  r.set_tensor_name(bias.tensor);
  r.set_precision(ReportPrecision());
  r.set_num_elements(n);
  quantd::v1::QuantScheme* s = r.mutable_scheme();
  s->set_bits(32);
  s->set_symmetric(true);
  s->set_per_channel(per_channel);
  s->set_axis(0);
  s->set_storage_type("INT32");
  s->set_quant_min(std::numeric_limits<int32_t>::min());
  s->set_quant_max(std::numeric_limits<int32_t>::max());
  auto [lo, hi] = std::minmax_element(scales.begin(), scales.end());
  r.set_scale_min(*lo);
  r.set_scale_max(*hi);
  numerics::ErrorStats err = numerics::MeasureError(values, approx);
  r.set_mse(err.mse);
  r.set_sqnr_db(err.sqnr_db);
  std::string note = absl::StrCat(
      "bias: scale = input scale of '", bias.input, "' (", in->second.scale,
      ") * weight scale of '", w.tensor, "', zero point 0");
  if (widened > 0) {
    absl::StrAppend(&note, "; the weight scale of ", widened,
                    widened == 1 ? " channel was" : " channels were",
                    " raised so that the bias fits int32 (the weights there "
                    "are near zero; ONNX Runtime's quantizer does the same)");
  }
  if (saturated > 0) {
    absl::StrAppend(&note, "; ", saturated,
                    " value(s) saturated to the int32 range");
  }
  r.set_note(std::move(note));
  if (hooks_.on_report) hooks_.on_report(r);
  return absl::OkStatus();
}

absl::Status StaticRangePass::LowerOpSet() {
  if (op_set_->lowering == Lowering::kQdq) return absl::OkStatus();
  if (hooks_.check_cancelled) {
    QUANTD_RETURN_IF_ERROR(hooks_.check_cancelled());
  }
  QUANTD_ASSIGN_OR_RETURN(
      QdqLoweringStats lowered,
      op_set_->lowering == Lowering::kIntegerOps
          ? LowerQdqToXla(model_->ir_version(), graph_)
          : LowerQdqToUniformQuantized(model_->ir_version(), graph_));
  lowered_nodes_ = lowered.lowered_nodes;
  std::string& note = stats_.lowering_note;
  note = absl::StrCat(
      "op_set ", tensorflow::quantization::OpSet_Name(options_.op_set), ": ",
      lowered.lowered_nodes, " node(s) lowered to ", op_set_->lowered_ops, ", ",
      lowered.kept.size(), " left in QDQ form; ", lowered.quantize_linear,
      " QuantizeLinear and ", lowered.dequantize_linear,
      " DequantizeLinear left");
  if (!lowered.kept.empty()) {
    absl::StrAppend(&note, " (", absl::StrJoin(lowered.kept, "; "), ")");
  }
  return absl::OkStatus();
}

void StaticRangePass::Finish() {
  // Before IR version 4 every initializer must also be a graph input.
  if (model_->ir_version() < 4) {
    absl::flat_hash_set<std::string> inputs;
    for (const auto& v : graph_->input()) inputs.insert(v.name());
    for (const auto& t : graph_->initializer()) {
      if (inputs.contains(t.name())) continue;
      onnx::ValueInfoProto* input = graph_->add_input();
      input->set_name(t.name());
      auto* type = input->mutable_type()->mutable_tensor_type();
      type->set_elem_type(t.data_type());
      auto* shape = type->mutable_shape();
      for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    }
  }
  const graph::GraphIndex index(*graph_);
  stats_.quantized_nodes = lowered_nodes_;
  for (const NodeProto& node : graph_->node()) {
    if (!IsQuantizableOp(node)) continue;
    for (const std::string& in : node.input()) {
      const int p = index.Producer(in);
      if (p >= 0 && graph_->node(p).op_type() == "DequantizeLinear") {
        ++stats_.quantized_nodes;
        break;
      }
    }
  }
  stats_.skipped = std::move(weights_.skipped);
  for (auto& s : skipped_) stats_.skipped.push_back(std::move(s));
  stats_.unreached = std::move(unreached_);
  stats_.unbounded = std::move(unbounded_);
}

// "<count><what>'a', 'b', ..." naming the first five tensors (Silero VAD
// has 26 unreached ones); "" when there are none.
std::string TensorListNote(const std::vector<std::string>& tensors,
                           absl::string_view what) {
  if (tensors.empty()) return "";
  constexpr size_t kNamed = 5;
  const size_t named = std::min(tensors.size(), kNamed);
  std::string note = absl::StrCat(
      tensors.size(), what, "'",
      absl::StrJoin(tensors.begin(), tensors.begin() + named, "', '"), "'");
  if (tensors.size() > named) {
    absl::StrAppend(&note, " (and ", tensors.size() - named, " more)");
  }
  return note;
}

std::string UnreachedNote(const std::vector<std::string>& unreached) {
  return TensorListNote(
      unreached,
      " tensor(s) in If/Loop/Scan bodies were never reached by calibration "
      "and stay float (no quantization point; nodes reading them keep a "
      "float input): ");
}

std::string UnboundedNote(const std::vector<std::string>& unbounded) {
  return TensorListNote(
      unbounded,
      " tensor(s) held an infinity or a value of magnitude >= 1e30 in "
      "calibration (an additive mask, e.g. a causal attention mask of -inf) "
      "and stay float, as no 8-bit grid holds both the mask and the values "
      "it masks: ");
}

}  // namespace

absl::StatusOr<StaticRangeStats> RunStaticRangePass(
    const StaticRangeOptions& options, const ActivationRanges& ranges,
    const PassHooks& hooks, onnx::ModelProto* model) {
  QUANTD_ASSIGN_OR_RETURN(
      UnitPrecision units,
      UnitPrecision::Resolve(*model, options.precision, options.units,
                             &options.inlined));
  QUANTD_ASSIGN_OR_RETURN(
      StaticRangeStats stats,
      StaticRangePass(options, ranges, hooks, units, model).Run());
  QUANTD_RETURN_IF_ERROR(
      AddRecurrentWeights(options, units, hooks, nullptr, model, &stats,
                          &StaticRangeStats::quantized_weights));

  // Then every If/Loop/Scan body, as a graph of its own.
  const PassHooks body_hooks = BodyHooks(hooks);
  absl::flat_hash_set<std::string> unreached;
  absl::flat_hash_set<std::string> unbounded(stats.unbounded.begin(),
                                             stats.unbounded.end());
  auto quantize_body = [&](Body* body) -> absl::Status {
    QUANTD_ASSIGN_OR_RETURN(
        StaticRangeStats b,
        StaticRangePass(options, ranges, body_hooks, units.InBody(body->scope),
                        &body->model, body)
            .Run());
    QUANTD_RETURN_IF_ERROR(AddRecurrentWeights(
        options, units.InBody(body->scope), body_hooks, body, &body->model, &b,
        &StaticRangeStats::quantized_weights));
    stats.quantized_weights += b.quantized_weights;
    stats.quantized_activations += b.quantized_activations;
    stats.quantized_biases += b.quantized_biases;
    stats.quantized_nodes += b.quantized_nodes;
    stats.weight_bytes_before += b.weight_bytes_before;
    stats.weight_bytes_after += b.weight_bytes_after;
    for (auto& skip : b.skipped) stats.skipped.push_back(std::move(skip));
    // Sibling bodies may reuse a name; the note names each once.
    for (auto& t : b.unreached) {
      if (unreached.insert(t).second) {
        stats.unreached.push_back(std::move(t));
      }
    }
    for (auto& t : b.unbounded) {
      if (unbounded.insert(t).second) stats.unbounded.push_back(std::move(t));
    }
    AppendNote(&stats.opset_note, b.opset_note);
    if (!b.lowering_note.empty()) {
      AppendNote(&stats.lowering_note,
                 absl::StrCat("in the ", body->where, ": ", b.lowering_note));
    }
    return absl::OkStatus();
  };
  QUANTD_ASSIGN_OR_RETURN(
      std::string note,
      QuantizeBodies(model, options.inlined,
                     MayUseFourBitWeights(options.precision, options.units),
                     quantize_body));
  if (stats.opset_note.empty()) stats.opset_note = std::move(note);
  stats.unreached_note = UnreachedNote(stats.unreached);
  stats.unbounded_note = UnboundedNote(stats.unbounded);
  return stats;
}

}  // namespace quantd::passes
