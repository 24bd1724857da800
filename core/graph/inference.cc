// GuardOnnxInference and the inference helpers built on it (see
// inference.h).
#include "core/graph/inference.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/base/call_once.h"
#include "core/graph/tensor_util.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

namespace quantd::graph {
namespace {

// More dims than any tensor has: ConstantOfShape and Expand make one per
// element of their shape input.
constexpr int64_t kMaxInferredRank = 1024;

// Initializers up to this size keep their values in an InferenceCopy.
constexpr uint64_t kInferenceDataBytes = 4096;

using onnx::AttributeProto;
using onnx::OpSchema;

template <typename Context>
const onnx::TensorShapeProto* InputShape(const Context& ctx, size_t i) {
  if (i >= ctx.getNumInputs()) return nullptr;
  const onnx::TypeProto* t = ctx.getInputType(i);
  if (t == nullptr || !t->has_tensor_type() || !t->tensor_type().has_shape()) {
    return nullptr;
  }
  return &t->tensor_type().shape();
}

// The rank of input i, -1 when unknown.
template <typename Context>
int RankOf(const Context& ctx, size_t i) {
  const onnx::TensorShapeProto* s = InputShape(ctx, i);
  return s == nullptr ? -1 : s->dim_size();
}

// Whether every input `schema` requires (a Single or Variadic formal
// parameter) has a type. ONNX passes a null type both for an omitted
// optional input and for a value earlier inference could not type; the
// functions test optional inputs for null but dereference required ones.
template <typename Context>
bool RequiredInputsTyped(const OpSchema& schema, const Context& ctx) {
  const auto& formal = schema.inputs();
  for (size_t i = 0; i < ctx.getNumInputs(); ++i) {
    if (ctx.getInputType(i) != nullptr) continue;
    if (formal.empty()) return false;
    const auto& param = formal[std::min(i, formal.size() - 1)];
    if (i >= formal.size() &&
        param.GetOption() != OpSchema::FormalParameterOption::Variadic) {
      return false;  // More inputs than the schema takes.
    }
    if (param.GetOption() != OpSchema::FormalParameterOption::Optional) {
      return false;
    }
  }
  return true;
}

// Whether "axis" (or the schema's default) lies in [-rank, rank] of input 0
// ([-rank-1, rank] for OneHot, whose axis counts its output's dims) where
// that rank is known. The ops' own bounds are tighter and their functions
// refuse the rest with an error; LayerNormalization adds the rank once and
// indexes dims with what is still out of range.
template <typename Context>
bool AxisInRange(const OpSchema& schema, const Context& ctx) {
  const AttributeProto* axis = ctx.getAttribute("axis");
  if (axis == nullptr) {
    auto it = schema.attributes().find("axis");
    if (it != schema.attributes().end() && it->second.default_value.has_i()) {
      axis = &it->second.default_value;
    }
  }
  const int rank = RankOf(ctx, 0);
  if (axis == nullptr || axis->type() != AttributeProto::INT || rank < 0) {
    return true;
  }
  const int64_t low = -rank - (schema.Name() == "OneHot" ? 1 : 0);
  return axis->i() >= low && axis->i() <= rank;
}

// Integer attributes the functions divide by or count with.
template <typename Context>
bool AttributesInRange(const Context& ctx) {
  if (const AttributeProto* b = ctx.getAttribute("batch_dims")) {
    if (b->type() == AttributeProto::INT && b->i() < 0) return false;
  }
  for (const char* name : {"strides", "dilations"}) {
    const AttributeProto* a = ctx.getAttribute(name);
    if (a == nullptr) continue;
    for (int64_t v : a->ints()) {
      if (v < 1) return false;
    }
  }
  return true;
}

// Whether the inputs whose dims the op's function indexes without looking
// at their rank have the rank it assumes (where known).
template <typename Context>
bool RanksAsRead(const OpSchema& schema, const Context& ctx) {
  const std::string& op = schema.Name();
  auto rank_is = [&ctx](size_t i, int want) {
    const int r = RankOf(ctx, i);
    return r < 0 || r == want;
  };
  if (op == "RNN" || op == "GRU" || op == "LSTM" || op == "STFT") {
    return rank_is(0, 3);
  }
  if (op == "Gemm") return rank_is(0, 2) && rank_is(1, 2);
  if (op == "MaxUnpool") {
    const int x = RankOf(ctx, 0), indices = RankOf(ctx, 1);
    return x < 0 || indices < 0 || x == indices;
  }
  // The convolutions read the weight's dim 0 and its dims by the data's
  // rank: the weight's rank must be known.
  int weight = -1;
  if (op == "Conv" || op == "ConvTranspose" || op == "ConvInteger") weight = 1;
  if (op == "QLinearConv") weight = 3;
  if (weight >= 0 && static_cast<size_t>(weight) < ctx.getNumInputs()) {
    const int w = RankOf(ctx, weight), x = RankOf(ctx, 0);
    return w >= 3 && (x < 0 || x == w);
  }
  if (op == "ConstantOfShape" || op == "Expand") {
    const onnx::TensorShapeProto* s =
        InputShape(ctx, op == "ConstantOfShape" ? 0 : 1);
    return s == nullptr || s->dim_size() != 1 || !s->dim(0).has_dim_value() ||
           s->dim(0).dim_value() <= kMaxInferredRank;
  }
  return true;
}

template <typename Context>
bool CanInfer(const OpSchema& schema, const Context& ctx) {
  return RequiredInputsTyped(schema, ctx) && AxisInRange(schema, ctx) &&
         AttributesInRange(ctx) && RanksAsRead(schema, ctx);
}

// SplitToSequence divides its input's dim by a scalar `split` it knows
// (an initializer or Constant): a 0 was a SIGFPE. A scalar it cannot read
// here is skipped too.
bool SplitSizeUsable(const OpSchema& schema, onnx::InferenceContext& ctx) {
  if (schema.Name() != "SplitToSequence" || ctx.getNumInputs() < 2) {
    return true;
  }
  const onnx::TensorProto* split = ctx.getInputData(1);
  if (split == nullptr || split->dims_size() != 0) return true;
  int64_t value = 0;
  if (split->data_type() == onnx::TensorProto::INT64) {
    if (split->has_raw_data() && split->raw_data().size() == sizeof(int64_t)) {
      std::memcpy(&value, split->raw_data().data(), sizeof(int64_t));
    } else if (!split->has_raw_data() && split->int64_data_size() == 1) {
      value = split->int64_data(0);
    }
  } else if (split->data_type() == onnx::TensorProto::INT32) {
    int32_t v32 = 0;
    if (split->has_raw_data() && split->raw_data().size() == sizeof(int32_t)) {
      std::memcpy(&v32, split->raw_data().data(), sizeof(int32_t));
    } else if (!split->has_raw_data() && split->int32_data_size() == 1) {
      v32 = split->int32_data(0);
    }
    value = v32;
  }
  return value > 0;
}

// The data propagation of the elementwise math ops reads past the end of
// an empty known value when the other one has one element.
bool CanPropagate(const OpSchema& schema, onnx::DataPropagationContext& ctx) {
  if (!CanInfer(schema, ctx)) return false;
  const std::string& op = schema.Name();
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    for (size_t i = 0; i < ctx.getNumInputs(); ++i) {
      const onnx::TensorShapeProto* data = ctx.getInputData(i);
      if (data != nullptr && data->dim_size() == 0) return false;
    }
  }
  return true;
}

void GuardSchema(OpSchema* schema) {
  if (schema->has_type_and_shape_inference_function()) {
    schema->TypeAndShapeInferenceFunction(
        [schema, fn = schema->GetTypeAndShapeInferenceFunction()](
            onnx::InferenceContext& ctx) {
          if (CanInfer(*schema, ctx) && SplitSizeUsable(*schema, ctx)) {
            fn(ctx);
          }
        });
  }
  if (schema->has_data_propagation_function()) {
    schema->PartialDataPropagationFunction(
        [schema, fn = schema->GetDataPropagationFunction()](
            onnx::DataPropagationContext& ctx) {
          if (CanPropagate(*schema, ctx)) fn(ctx);
        });
  }
}

}  // namespace

void GuardOnnxInference() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    // The registry hands out const pointers to the schemas it owns (plain
    // objects in its maps); they are changed here once, before any caller
    // of this function lets ONNX read them for inference.
    for (const OpSchema& s :
         onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
      const OpSchema* live = onnx::OpSchemaRegistry::Schema(
          s.Name(), s.SinceVersion(), s.domain());
      if (live != nullptr && live->SinceVersion() == s.SinceVersion()) {
        GuardSchema(const_cast<OpSchema*>(live));
      }
    }
  });
}

bool InferShapesGuarded(onnx::ModelProto* model, bool data_propagation) {
  GuardOnnxInference();
  try {
    onnx::shape_inference::InferShapes(
        *model, onnx::OpSchemaRegistry::Instance(),
        onnx::ShapeInferenceOptions(/*check_type_val=*/false,
                                    /*strict_mode_val=*/0, data_propagation));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

onnx::ModelProto InferenceCopy(const onnx::ModelProto& model) {
  onnx::ModelProto copy;
  copy.set_ir_version(model.ir_version());
  *copy.mutable_opset_import() = model.opset_import();
  *copy.mutable_functions() = model.functions();
  const onnx::GraphProto& g = model.graph();
  onnx::GraphProto* cg = copy.mutable_graph();
  cg->set_name(g.name());
  *cg->mutable_input() = g.input();
  *cg->mutable_output() = g.output();
  *cg->mutable_value_info() = g.value_info();
  *cg->mutable_node() = g.node();
  for (const onnx::TensorProto& t : g.initializer()) {
    onnx::TensorProto* c = cg->add_initializer();
    if (DataBytes(t) <= kInferenceDataBytes && !HasExternalData(t)) {
      *c = t;
    } else {
      c->set_name(t.name());
      c->set_data_type(t.data_type());
      *c->mutable_dims() = t.dims();
    }
  }
  return copy;
}

absl::flat_hash_map<std::string, onnx::TypeProto> InferValueTypes(
    const onnx::ModelProto& model) {
  onnx::ModelProto copy = InferenceCopy(model);
  // On failure, partial results are still in the copy's value_info.
  InferShapesGuarded(&copy, /*data_propagation=*/true);
  const onnx::GraphProto& g = copy.graph();
  absl::flat_hash_map<std::string, onnx::TypeProto> types;
  for (const auto& v : g.input()) types[v.name()] = v.type();
  for (const auto& v : g.value_info()) types[v.name()] = v.type();
  for (const auto& v : g.output()) types[v.name()] = v.type();
  return types;
}

}  // namespace quantd::graph
