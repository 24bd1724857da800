// The choices of an accuracy search (target_sqnr_db, target_agreement): how
// far a fidelity report is from the goal, and which quantized nodes add the
// most error and should get a finer precision next.
#ifndef QUANTD_CORE_ENGINE_ACCURACY_SEARCH_H_
#define QUANTD_CORE_ENGINE_ACCURACY_SEARCH_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
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

using SearchPrecision = tensorflow::quantization::QuantizationPrecision;

// Whether the request asks for an accuracy search (target_sqnr_db or
// target_agreement).
bool HasSearchTarget(const quantd::v1::QuantizeConfig& config);

// The precisions a raise may go to, cheapest first: config.allowed_precisions
// in ladder order (W4A4, W4A8, W8A8, FULL), or the whole ladder when empty.
std::vector<SearchPrecision> SearchLadder(
    const quantd::v1::QuantizeConfig& config);

// The first precision of `ladder` above `p` (UNSPECIFIED is W8A8); nullopt
// when nothing on it is above.
std::optional<SearchPrecision> RaisedPrecision(
    SearchPrecision p, absl::Span<const SearchPrecision> ladder);

// INVALID_ARGUMENT unless target_sqnr_db is finite and in (0, 200] (an SQNR
// above 200 dB asks for float32 rounding noise), target_agreement is in
// (0, 1], and allowed_precisions (only with a target) holds ladder
// precisions, each once, including `request_precision` and one above it.
absl::Status CheckSearchTargets(const quantd::v1::QuantizeConfig& config,
                                SearchPrecision request_precision);

// The smallest output SQNR of the report (NaN counts as -infinity); +inf
// when no output was compared.
double WorstOutputSqnr(const quantd::v1::FidelityReport& report);

// The smallest top1_agreement over the outputs with a class axis; NaN when
// none has one.
double WorstTop1Agreement(const quantd::v1::FidelityReport& report);

// Whether candidate `a` of calibration method "auto" beats `b`: the higher
// worst output SQNR, or with `by_agreement` (the request has a
// target_agreement) the higher worst top-1 agreement first, SQNR breaking
// ties. NaN ranks below every number; equal candidates do not beat each
// other (the earlier, simpler one stays).
bool ObserverCandidateBetter(const quantd::v1::ObserverCandidate& a,
                             const quantd::v1::ObserverCandidate& b,
                             bool by_agreement);

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
// `at_top` (nothing left to raise) nor `excluded` (named by the request's
// own unit entries; an entry without func_name excludes that name in every
// scope). Nodes inlined from local functions (in `inlined`, may be null) are
// left out: their precision is their function's, shared by every call.
// `noisy_only` false also returns the nodes that add no noise (last): a
// deep layer can lower the noise ratio its inputs bring and still add
// error of its own at a coarser precision.
std::vector<SearchUnit> PickNodesToRaise(
    const onnx::GraphProto& float_graph,
    const quantd::v1::FidelityReport& report,
    const absl::flat_hash_set<SearchUnit>& at_top,
    const absl::flat_hash_set<SearchUnit>& excluded, int count,
    const graph::InlinedFunctions* inlined = nullptr, bool noisy_only = true);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_ACCURACY_SEARCH_H_
