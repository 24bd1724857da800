// ONNX shape inference (libonnx 1.12) made safe for a request's model.
//
// libonnx's inference and data-propagation functions trust what they read:
// probes of every ONNX schema with wild inputs and attributes found a dozen
// ways a small model that passes onnx.checker segfaults or divides by zero
// in them (docs/reliability.md). Any code path of quantd that lets libonnx
// infer shapes (InferShapes, the version converter) must call
// GuardOnnxInference() first: it puts a precondition in front of every
// registered schema's functions, and a node failing it is skipped, its
// outputs left untyped as when its inference fails.
#ifndef QUANTD_CORE_GRAPH_INFERENCE_H_
#define QUANTD_CORE_GRAPH_INFERENCE_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {

// Wraps, once per process, the inference and data-propagation function of
// every schema in ONNX's global registry so that they skip a node:
// - whose required input has no type (ONNX passes a value it could not
//   type as null; EyeLike, Shape's data propagation dereference it);
// - whose "axis" (or the schema's default) lies outside [-rank, rank]
//   ([-rank-1, rank] for OneHot) of input 0 (LayerNormalization indexes
//   dims with it);
// - whose "batch_dims" is negative (GatherND);
// - whose "strides" or "dilations" hold a value below 1 (the pooling and
//   convolution ops divide by them);
// - whose inputs do not have the ranks the function indexes unchecked (the
//   X of RNN, GRU and LSTM, Gemm's A and B, MaxUnpool's indices, STFT's
//   signal, the weight of the convolutions);
// - whose shape input declares more dims than any tensor has (ConstantOfShape
//   and Expand build every one of them: minutes for 2^24);
// - for the data propagation of Add, Sub, Mul and Div, whose known input
//   values are empty (read past their end).
// Thread-safe; later calls return at once.
void GuardOnnxInference();

// ONNX shape inference on `model` in place (its value_info grows), through
// the guards above. Not strict: a failing node leaves its outputs untyped
// and inference goes on. False when inference threw all the same (declared
// shapes that contradict it); what it inferred before stays.
bool InferShapesGuarded(onnx::ModelProto* model, bool data_propagation);

// What inference needs of `model`: its opsets, functions and main graph
// (nodes, inputs, outputs, value_info), and its initializers with their
// values only when small (shape inputs such as Reshape's), so a copy of a
// large model costs little.
onnx::ModelProto InferenceCopy(const onnx::ModelProto& model);

// Element types of the main graph's values from ONNX shape inference (with
// the declared inputs, outputs and value_info, and data propagation), by
// name. Never fails: what inference cannot tell is simply missing.
absl::flat_hash_map<std::string, onnx::TypeProto> InferValueTypes(
    const onnx::ModelProto& model);

}  // namespace quantd::graph

#endif  // QUANTD_CORE_GRAPH_INFERENCE_H_
