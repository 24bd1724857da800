#include "core/engine/accuracy_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/engine/fidelity.h"
#include "core/passes/unit_precision.h"
#include "core/passes/weight_plan.h"

namespace quantd {
namespace {

// Noise power over signal power: 10^(-SQNR/10); 0 for an exact tensor,
// +inf for NaN (a broken tensor is the worst).
double NoiseRatio(double sqnr_db) {
  if (std::isnan(sqnr_db)) return std::numeric_limits<double>::infinity();
  return std::pow(10.0, -sqnr_db / 10.0);
}

}  // namespace

int NodesToRaise(int round) { return round <= 1 ? 1 : 1 << (round - 1); }

tensorflow::quantization::QuantizationPrecision RaisedPrecision(
    tensorflow::quantization::QuantizationPrecision p) {
  switch (p) {
    case tensorflow::quantization::PRECISION_W4A4:
      return tensorflow::quantization::PRECISION_W4A8;
    case tensorflow::quantization::PRECISION_W4A8:
      return tensorflow::quantization::PRECISION_W8A8;
    default:
      return tensorflow::quantization::PRECISION_FULL;
  }
}

absl::Status CheckTargetSqnr(const quantd::v1::QuantizeConfig& config) {
  if (!config.has_target_sqnr_db()) return absl::OkStatus();
  const double t = config.target_sqnr_db();
  if (!(t > 0.0 && t <= 200.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("target_sqnr_db is ", t,
                     "; it must be in (0, 200] dB (unset: no search)"));
  }
  return absl::OkStatus();
}

double WorstOutputSqnr(const quantd::v1::FidelityReport& report) {
  double worst = std::numeric_limits<double>::infinity();
  for (const auto& o : report.outputs()) {
    const double s = std::isnan(o.sqnr_db())
                         ? -std::numeric_limits<double>::infinity()
                         : o.sqnr_db();
    worst = std::min(worst, s);
  }
  return worst;
}

std::string SearchUnit::Describe() const {
  return scope.empty() ? name : absl::StrCat(name, " (in ", scope, ")");
}

std::vector<SearchUnit> PickNodesToRaise(
    const onnx::GraphProto& float_graph,
    const quantd::v1::FidelityReport& report,
    const absl::flat_hash_set<SearchUnit>& at_full,
    const absl::flat_hash_set<SearchUnit>& excluded, int count,
    const graph::InlinedFunctions* inlined) {
  absl::flat_hash_map<std::string, double> sqnr;
  for (const auto& l : report.layers()) sqnr[l.tensor_name()] = l.sqnr_db();

  struct Candidate {
    SearchUnit unit;
    const onnx::NodeProto* node;
  };
  std::vector<Candidate> nodes;
  absl::flat_hash_map<SearchUnit, int> unit_count;
  ForEachComparedNode(
      float_graph, [&](const onnx::NodeProto& n, const onnx::NodeProto* owner) {
        if (!passes::IsQuantizableOp(n)) return;
        SearchUnit u{owner == nullptr ? "" : passes::BodyScope(*owner, inlined),
                     n.name()};
        ++unit_count[u];
        if (inlined != nullptr && inlined->origins.contains(n.name())) return;
        nodes.push_back({std::move(u), &n});
      });

  std::vector<std::pair<double, SearchUnit>> drops;
  for (const Candidate& c : nodes) {
    const onnx::NodeProto& n = *c.node;
    if (n.name().empty() || unit_count[c.unit] != 1 ||
        at_full.contains(c.unit) || excluded.contains(c.unit) ||
        excluded.contains(SearchUnit{"", n.name()}) || n.output_size() == 0) {
      continue;
    }
    auto out = sqnr.find(n.output(0));
    if (out == sqnr.end()) continue;
    double in = 0;
    for (const std::string& i : n.input()) {
      auto it = sqnr.find(i);
      if (it != sqnr.end()) in = std::max(in, NoiseRatio(it->second));
    }
    const double added = NoiseRatio(out->second) - in;
    if (added > 0) drops.emplace_back(added, c.unit);
  }
  // Most noise added first; ties in visiting order (stable).
  std::stable_sort(
      drops.begin(), drops.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<SearchUnit> out;
  for (int i = 0; i < count && i < static_cast<int>(drops.size()); ++i) {
    out.push_back(std::move(drops[i].second));
  }
  return out;
}

}  // namespace quantd
