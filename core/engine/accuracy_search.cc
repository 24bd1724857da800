#include "core/engine/accuracy_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
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

bool ObserverCandidateBetter(const quantd::v1::ObserverCandidate& a,
                             const quantd::v1::ObserverCandidate& b,
                             bool by_agreement) {
  // NaN as -infinity, so that a number always beats it.
  auto rank = [](double v) {
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
  };
  if (by_agreement && rank(a.top1_agreement()) != rank(b.top1_agreement())) {
    return rank(a.top1_agreement()) > rank(b.top1_agreement());
  }
  return rank(a.output_sqnr_db()) > rank(b.output_sqnr_db());
}

namespace {

constexpr SearchPrecision kLadder[] = {
    tensorflow::quantization::PRECISION_W4A4,
    tensorflow::quantization::PRECISION_W4A8,
    tensorflow::quantization::PRECISION_W8A8,
    tensorflow::quantization::PRECISION_FULL};

// Position on kLadder; -1 for anything else (UNSPECIFIED is W8A8).
int Rung(SearchPrecision p) {
  if (p == tensorflow::quantization::PRECISION_UNSPECIFIED) {
    p = tensorflow::quantization::PRECISION_W8A8;
  }
  for (int i = 0; i < 4; ++i) {
    if (kLadder[i] == p) return i;
  }
  return -1;
}

std::string PrecisionName(int p) {
  return tensorflow::quantization::QuantizationPrecision_IsValid(p)
             ? tensorflow::quantization::QuantizationPrecision_Name(
                   static_cast<SearchPrecision>(p))
             : absl::StrCat("value ", p, " (unknown)");
}

}  // namespace

bool HasSearchTarget(const quantd::v1::QuantizeConfig& config) {
  return config.has_target_sqnr_db() || config.has_target_agreement();
}

std::vector<SearchPrecision> SearchLadder(
    const quantd::v1::QuantizeConfig& config) {
  std::vector<SearchPrecision> ladder;
  for (SearchPrecision p : kLadder) {
    const bool allowed =
        config.allowed_precisions().empty() ||
        std::find(config.allowed_precisions().begin(),
                  config.allowed_precisions().end(),
                  static_cast<int>(p)) != config.allowed_precisions().end();
    if (allowed) ladder.push_back(p);
  }
  return ladder;
}

std::optional<SearchPrecision> RaisedPrecision(
    SearchPrecision p, absl::Span<const SearchPrecision> ladder) {
  const int from = Rung(p);
  for (SearchPrecision q : ladder) {
    if (Rung(q) > from) return q;
  }
  return std::nullopt;
}

absl::Status CheckSearchTargets(const quantd::v1::QuantizeConfig& config,
                                SearchPrecision request_precision) {
  if (config.has_target_sqnr_db()) {
    const double t = config.target_sqnr_db();
    if (!(t > 0.0 && t <= 200.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target_sqnr_db is ", t,
                       "; it must be in (0, 200] dB (unset: no search)"));
    }
  }
  if (config.has_target_agreement()) {
    const double t = config.target_agreement();
    if (!(t > 0.0 && t <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target_agreement is ", t,
          "; it must be in (0, 1] (a fraction of rows; unset: no search)"));
    }
  }
  if (config.allowed_precisions().empty()) return absl::OkStatus();
  if (!HasSearchTarget(config)) {
    return absl::InvalidArgumentError(
        "allowed_precisions bounds the accuracy search, but the request "
        "asks for none: set target_sqnr_db or target_agreement");
  }
  for (int i = 0; i < config.allowed_precisions_size(); ++i) {
    const int p = config.allowed_precisions(i);
    if (p == tensorflow::quantization::PRECISION_UNSPECIFIED ||
        Rung(static_cast<SearchPrecision>(p)) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("allowed_precisions[", i, "] is ", PrecisionName(p),
                       "; it must be one of PRECISION_W4A4, PRECISION_W4A8, "
                       "PRECISION_W8A8, PRECISION_FULL"));
    }
    for (int j = 0; j < i; ++j) {
      if (config.allowed_precisions(j) == p) {
        return absl::InvalidArgumentError(
            absl::StrCat("allowed_precisions names ", PrecisionName(p),
                         " twice (entries ", j, " and ", i, ")"));
      }
    }
  }
  const std::vector<SearchPrecision> ladder = SearchLadder(config);
  if (std::find(ladder.begin(), ladder.end(), request_precision) ==
      ladder.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "allowed_precisions does not include the request's "
        "quantization_precision ",
        PrecisionName(request_precision),
        ": the search starts every node there and only raises; set "
        "quantization_precision to the cheapest precision you allow"));
  }
  if (!RaisedPrecision(request_precision, ladder).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("allowed_precisions holds nothing above the request's "
                     "quantization_precision ",
                     PrecisionName(request_precision),
                     ", so the search could raise no node"));
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

double WorstTop1Agreement(const quantd::v1::FidelityReport& report) {
  double worst = std::numeric_limits<double>::quiet_NaN();
  for (const auto& o : report.outputs()) {
    if (!o.has_top1()) continue;
    const double a = std::isnan(o.top1_agreement()) ? 0.0 : o.top1_agreement();
    worst = std::isnan(worst) ? a : std::min(worst, a);
  }
  return worst;
}

std::string SearchUnit::Describe() const {
  return scope.empty() ? name : absl::StrCat(name, " (in ", scope, ")");
}

std::vector<SearchUnit> PickNodesToRaise(
    const onnx::GraphProto& float_graph,
    const quantd::v1::FidelityReport& report,
    const absl::flat_hash_set<SearchUnit>& at_top,
    const absl::flat_hash_set<SearchUnit>& excluded, int count,
    const graph::InlinedFunctions* inlined, bool noisy_only) {
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
        at_top.contains(c.unit) || excluded.contains(c.unit) ||
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
    if (added > 0 || !noisy_only) drops.emplace_back(added, c.unit);
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
