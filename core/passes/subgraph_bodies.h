// Quantizing inside If/Loop/Scan bodies with the passes written for a main
// graph: each body is presented to the pass as the main graph of a model of
// its own (same IR version and opsets), one body at a time, outer bodies
// before the bodies nested in them.
//
// What makes a body stand alone:
//  - Weights and biases from outside. A body's Conv/Gemm/MatMul (or
//    LSTM/GRU/RNN) often reads its weights or bias from an initializer of
//    an enclosing graph. ONNX forbids a body to define an outer name, so the
//    body gets a copy of that initializer under a fresh name for the pass
//    to quantize. A copy the pass left float is folded back (the body reads
//    the outer initializer again); an outer initializer that nothing reads
//    any more once the bodies are done is removed.
//  - Names. Every name of the whole model is reserved, so nothing the pass
//    adds in the body shadows an outer name.
//  - Outer activations and body inputs have no producer in the body: the
//    passes treat them as they treat graph inputs (their quantization point
//    is placed at the start of the body and reads the outer name).
#ifndef QUANTD_CORE_PASSES_SUBGRAPH_BODIES_H_
#define QUANTD_CORE_PASSES_SUBGRAPH_BODIES_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/graph/function_inline.h"
#include "core/passes/opset_upgrade.h"
#include "onnx/onnx_pb.h"

namespace quantd::passes {

struct Body {
  // The body as the main graph of a model with the outer model's IR version
  // and opset imports. The pass may rewrite its graph but not its opsets.
  onnx::ModelProto model;
  // The unit-wise precision scope of its nodes: the owner node's name (its
  // name in its local function when it was inlined from one).
  std::string scope;
  // "body of Loop 'loop0'", for messages.
  std::string where;
  // The whole model, whose names the pass must not reuse (the body itself
  // is swapped out of it while the pass runs).
  const onnx::GraphProto* outer_root = nullptr;
};

// The opset a pass may use in a body, which it cannot change (the opsets are
// the whole model's): kAlreadyNewEnough when the model's default opset is
// >= `needed`; kPerTensorFallback when it is at least 11 and `needed` is the
// per-channel 13 (weights then get one scale each, as EnsureOpset does);
// otherwise UNIMPLEMENTED naming the body and the opsets.
absl::StatusOr<OpsetOutcome> BodyOpset(const Body& body, int64_t needed);

// True when some If/Loop/Scan body of `graph` (at any depth) holds a
// default-domain Conv, Gemm or MatMul, or an LSTM, GRU or RNN.
bool HasQuantizableBodies(const onnx::GraphProto& graph);

// After a pass quantized the main graph: when some body holds a quantizable
// node, raises the model's opset to what the bodies may need (kInt4Opset
// when `four_bit`, else kPerChannelOpset; EnsureOpset may replace the whole
// graph) and runs `pass` on every body of the model (see above), outer
// bodies first. Stops at the first error, leaving that body's graph as the
// pass left it (the caller discards the model). `inlined` names the owners
// inlined from functions. Returns the opset note ("" when unchanged).
absl::StatusOr<std::string> QuantizeBodies(
    onnx::ModelProto* model, const graph::InlinedFunctions& inlined,
    bool four_bit, const std::function<absl::Status(Body*)>& pass);

}  // namespace quantd::passes

#endif  // QUANTD_CORE_PASSES_SUBGRAPH_BODIES_H_
