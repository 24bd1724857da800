// The choices of a target_sqnr_db search: how far a fidelity report is from
// the goal, and which quantized nodes add the most error and should get a
// finer precision next.
#ifndef QUANTD_CORE_ENGINE_ACCURACY_SEARCH_H_
#define QUANTD_CORE_ENGINE_ACCURACY_SEARCH_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "core/graph/function_inline.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.pb.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace quantd {

// Rounds after the first one, and the nodes each raises: 1, 2, 4, 8, 16, 32
// (63 raises at most). Doubling keeps the number of pass and fidelity runs
// logarithmic in the raises the goal needs.
inline constexpr int kAccuracySearchRounds = 6;
int NodesToRaise(int round);

// One step up: W4A4 -> W4A8 -> W8A8 -> FULL (UNSPECIFIED is W8A8; FULL stays).
tensorflow::quantization::QuantizationPrecision RaisedPrecision(
    tensorflow::quantization::QuantizationPrecision p);

// INVALID_ARGUMENT unless config.target_sqnr_db is finite and in (0, 200]
// (an SQNR above 200 dB asks for float32 rounding noise).
absl::Status CheckTargetSqnr(const quantd::v1::QuantizeConfig& config);

// The smallest output SQNR of the report (NaN counts as -infinity); +inf
// when no output was compared.
double WorstOutputSqnr(const quantd::v1::FidelityReport& report);

// A node the search can give its own precision, as a UNIT_NODE entry names
// it: `scope` is the entry's func_name ("" for the main graph, else the
// owning If node's unit scope, passes::BodyScope) and `name` the node's name
// there.
struct SearchUnit {
  std::string scope;
  std::string name;

  friend bool operator==(const SearchUnit& a, const SearchUnit& b) {
    return a.scope == b.scope && a.name == b.name;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SearchUnit& u) {
    return H::combine(std::move(h), u.scope, u.name);
  }
  // "name", or "name (in scope)" for a node inside an If branch.
  std::string Describe() const;
};

// Up to `count` Conv / Gemm / MatMul nodes of `float_graph` (main graph and
// If branches, the nodes the fidelity report compares) to raise next, the
// ones that add the most error first: for each node the noise-to-signal
// power ratio (10^(-SQNR/10)) of its output in `report` minus the largest
// ratio among its inputs (a graph input or constant is exact: 0). In linear
// power, not dB: a first layer going from exact to 40 dB adds 1e-4, far less
// than a layer going from 20 to 10 dB (0.09). Only nodes that add noise,
// have a name no other node of their scope has, and are in neither
// `at_full` (nothing left to raise) nor `excluded` (named by the request's
// own unit entries; an entry without func_name excludes that name in every
// scope). Nodes inlined from local functions (in `inlined`, may be null) are
// left out: their precision is their function's, shared by every call.
std::vector<SearchUnit> PickNodesToRaise(
    const onnx::GraphProto& float_graph,
    const quantd::v1::FidelityReport& report,
    const absl::flat_hash_set<SearchUnit>& at_full,
    const absl::flat_hash_set<SearchUnit>& excluded, int count,
    const graph::InlinedFunctions* inlined = nullptr);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_ACCURACY_SEARCH_H_
