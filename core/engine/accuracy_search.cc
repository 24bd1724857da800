#include "core/engine/accuracy_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
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

std::vector<std::string> PickNodesToRaise(
    const onnx::GraphProto& float_graph,
    const quantd::v1::FidelityReport& report,
    const absl::flat_hash_set<std::string>& at_full,
    const absl::flat_hash_set<std::string>& excluded, int count) {
  absl::flat_hash_map<std::string, double> sqnr;
  for (const auto& l : report.layers()) sqnr[l.tensor_name()] = l.sqnr_db();
  absl::flat_hash_map<std::string, int> name_count;
  for (const auto& n : float_graph.node()) ++name_count[n.name()];

  std::vector<std::pair<double, std::string>> drops;
  for (const auto& n : float_graph.node()) {
    if (!passes::IsQuantizableOp(n) || n.name().empty() ||
        name_count[n.name()] != 1 || at_full.contains(n.name()) ||
        excluded.contains(n.name()) || n.output_size() == 0) {
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
    if (added > 0) drops.emplace_back(added, n.name());
  }
  // Most noise added first; ties in graph order (stable).
  std::stable_sort(
      drops.begin(), drops.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (int i = 0; i < count && i < static_cast<int>(drops.size()); ++i) {
    out.push_back(drops[i].second);
  }
  return out;
}

}  // namespace quantd
