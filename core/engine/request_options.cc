#include "core/engine/request_options.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/base/status_macros.h"
#include "core/engine/accuracy_search.h"
#include "core/engine/capabilities.h"
#include "core/passes/dynamic_range_options.h"

namespace quantd {
namespace {
namespace tfq = tensorflow::quantization;

// The options that need the values each layer reads on calibration batches
// in this call (InputMoments, ChannelExtremes).
bool IsAwq(const quantd::v1::QuantizeConfig& config) {
  return config.weight_algorithm() == quantd::v1::WEIGHT_ALGORITHM_AWQ ||
         config.weight_algorithm() == quantd::v1::WEIGHT_ALGORITHM_AWQ_GPTQ;
}
bool UsesLayerInputs(const quantd::v1::QuantizeConfig& config) {
  return config.weight_algorithm() == quantd::v1::WEIGHT_ALGORITHM_GPTQ ||
         IsAwq(config) || config.bias_correction() || config.has_smoothquant();
}
// "weight_algorithm AWQ_GPTQ" and the like, for messages.
std::string WeightAlgorithmWords(const quantd::v1::QuantizeConfig& config) {
  return absl::StrCat("weight_algorithm ",
                      absl::StripPrefix(quantd::v1::WeightAlgorithm_Name(
                                            config.weight_algorithm()),
                                        "WEIGHT_ALGORITHM_"));
}
std::string LayerInputUsers(const quantd::v1::QuantizeConfig& config) {
  std::vector<std::string> users;
  if (config.weight_algorithm() == quantd::v1::WEIGHT_ALGORITHM_GPTQ ||
      IsAwq(config)) {
    users.push_back(WeightAlgorithmWords(config));
  }
  if (config.bias_correction()) users.push_back("bias_correction");
  if (config.has_smoothquant()) users.push_back("smoothquant");
  return absl::StrJoin(users, " with ");
}

absl::Status CheckChannelScaling(const quantd::v1::QuantizeConfig& config,
                                 Method method) {
  if ((config.has_smoothquant() || config.equalize()) &&
      method == Method::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.has_smoothquant() ? "smoothquant" : "equalize",
        " needs a quantization_method: it prepares the weights and "
        "activations for quantizing"));
  }
  if (config.smoothquant().auto_alpha() && config.smoothquant().has_alpha()) {
    return absl::InvalidArgumentError(
        "smoothquant has both alpha and auto_alpha: auto_alpha chooses the "
        "alpha of each value; give one or the other");
  }
  if (config.has_smoothquant() && IsAwq(config)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "smoothquant and ", WeightAlgorithmWords(config),
        " both choose per-channel "
        "factors for the same values (SmoothQuant from activation and weight "
        "maxima, AWQ by the readers' output error); ask for one of them"));
  }
  if (config.has_smoothquant()) {
    const double alpha =
        config.smoothquant().has_alpha() ? config.smoothquant().alpha() : 0.5;
    if (!(alpha >= 0 && alpha <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "smoothquant.alpha is ", alpha, "; it must be in [0, 1]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSearchFields(const quantd::v1::QuantizeConfig& config,
                               const ResolvedOptions& resolved) {
  QUANTD_RETURN_IF_ERROR(CheckSearchTargets(config, resolved.precision));
  if (HasSearchTarget(config)) {
    const char* target =
        config.has_target_sqnr_db() ? "target_sqnr_db" : "target_agreement";
    if (resolved.method == Method::kDynamicRange) {
      return absl::UnimplementedError(absl::StrCat(
          target,
          " is not implemented for DYNAMIC_RANGE: the search "
          "measures each candidate on calibration batches, which "
          "DYNAMIC_RANGE does not take; use STATIC_RANGE with calibration "
          "batches"));
    }
    if (resolved.method != Method::kStaticRange) {
      return absl::InvalidArgumentError(
          absl::StrCat(target,
                       " needs quantization_method STATIC_RANGE: there is "
                       "nothing to search without quantizing"));
    }
  }
  if (config.holdout_batches() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "holdout_batches is ", config.holdout_batches(), "; it must be >= 0"));
  }
  if (UsesLayerInputs(config) && config.calibration().ranges_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        LayerInputUsers(config),
        " needs calibration batches of graph inputs in this call (the "
        "inputs each layer sees), but the request carries "
        "config.calibration ranges, which hold none; send the batches "
        "instead"));
  }
  if (config.holdout_batches() > 0 && resolved.method != Method::kStaticRange) {
    return absl::InvalidArgumentError(
        "holdout_batches needs quantization_method STATIC_RANGE with "
        "calibration batches: it keeps batches back from calibration");
  }
  return absl::OkStatus();
}

// An option that judges candidate ranges by quantizing with each (`what`,
// which `does` to activation ranges and judges `each` on the batches): only
// where this call calibrates a STATIC_RANGE model.
absl::Status CheckJudgedInCall(const quantd::v1::QuantizeConfig& config,
                               Method method, bool batch_stream,
                               absl::string_view what, absl::string_view does,
                               absl::string_view each) {
  if (method != Method::kStaticRange) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration_config.", what, " ", does,
                     " activation ranges, which only quantization_method "
                     "STATIC_RANGE uses"));
  }
  if (config.calibration().ranges_size() > 0 || !batch_stream) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration_config.", what, " calibrates in this call and judges ",
        each,
        " on its batches: send calibration batches of graph inputs after the "
        "model (and no config.calibration ranges)"));
  }
  return absl::OkStatus();
}

absl::Status CheckAutoObserver(const quantd::v1::QuantizeConfig& config,
                               Method method, bool batch_stream) {
  if (config.calibration_config().method() != "auto") {
    return absl::OkStatus();
  }
  return CheckJudgedInCall(config, method, batch_stream, "method auto",
                           "chooses", "each candidate");
}

// calibration_config.headroom widens the ranges the call's own observers
// report; anywhere else it would be silently unused.
absl::Status CheckHeadroom(const quantd::v1::QuantizeConfig& config,
                           Method method, bool batch_stream) {
  const quantd::v1::CalibrateConfig& c = config.calibration_config();
  if (c.auto_headroom()) {
    QUANTD_RETURN_IF_ERROR(CheckJudgedInCall(config, method, batch_stream,
                                             "auto_headroom", "widens",
                                             "each factor"));
    if (c.method() == "auto") {
      return absl::UnimplementedError(
          "calibration_config.auto_headroom with method auto: auto already "
          "tries min_max widened when holdout_batches is set; use one or "
          "the other");
    }
    if (config.has_smoothquant() || IsAwq(config)) {
      return absl::UnimplementedError(absl::StrCat(
          "calibration_config.auto_headroom with ",
          config.has_smoothquant() ? "smoothquant"
                                   : WeightAlgorithmWords(config),
          ": the rescaled values' ranges are derived after calibration, "
          "outside the folds; set a headroom factor instead"));
    }
  }
  if (!c.has_headroom() || c.headroom() == 0.0) return absl::OkStatus();
  if (method != Method::kStaticRange) {
    return absl::InvalidArgumentError(
        "calibration_config.headroom widens activation ranges, which only "
        "quantization_method STATIC_RANGE uses (DYNAMIC_RANGE measures them "
        "at run time)");
  }
  if (config.calibration().ranges_size() > 0) {
    return absl::InvalidArgumentError(
        "calibration_config.headroom widens the ranges this call calibrates, "
        "but config.calibration ranges are used as given: widen them before "
        "sending, or send calibration batches instead");
  }
  return absl::OkStatus();
}

// The observers of in-call calibration: calibration_config, with the
// request's activation_params when it has none, on the pass's grid.
absl::StatusOr<calibration::ObserverConfig> InCallObservers(
    const quantd::v1::QuantizeConfig& config,
    const passes::ActivationQuantOptions& activations) {
  quantd::v1::CalibrateConfig calibrate = config.calibration_config();
  if (!calibrate.has_activation_params()) {
    *calibrate.mutable_activation_params() = config.activation_params();
  }
  calibration::ObserverConfig observers =
      calibration::ObserverConfigFromProto(calibrate);
  observers.bits = activations.spec.bits;
  observers.symmetric = activations.spec.symmetric;
  observers.narrow_range = activations.spec.narrow_range;
  QUANTD_RETURN_IF_ERROR(calibration::ValidateObserverConfig(observers));
  return observers;
}

}  // namespace

absl::StatusOr<QuantizeRequestOptions> ResolveQuantizeRequest(
    const quantd::v1::QuantizeConfig& config, bool batch_stream) {
  QuantizeRequestOptions out;
  out.resolved = Resolve(config.options());
  const Method method = out.resolved.method;
  QUANTD_RETURN_IF_ERROR(CheckSupported(config.options()));
  QUANTD_RETURN_IF_ERROR(CheckSearchFields(config, out.resolved));
  QUANTD_RETURN_IF_ERROR(CheckAutoObserver(config, method, batch_stream));
  QUANTD_RETURN_IF_ERROR(CheckHeadroom(config, method, batch_stream));
  QUANTD_RETURN_IF_ERROR(CheckChannelScaling(config, method));
  if (config.has_smoothquant()) {
    out.smoothquant_alpha =
        config.smoothquant().has_alpha() ? config.smoothquant().alpha() : 0.5;
  }
  out.smoothquant_auto = config.smoothquant().auto_alpha();
  out.equalize = config.equalize();
  // A model-wide FULL with unit entries runs the pass: units may ask for
  // W8A8 (and the entries must be checked against the model).
  if (method == Method::kNone) {
    out.pass_through = true;
    out.unchanged_reason =
        "no quantization_method set: the model is returned as received (do "
        "not quantize)";
    return out;
  }
  if (out.resolved.precision == tfq::PRECISION_FULL &&
      config.options().unit_wise_quantization_precision_size() == 0) {
    out.pass_through = true;
    out.unchanged_reason =
        "quantization_precision is PRECISION_FULL: every unit stays float";
    return out;
  }
  if (method == Method::kStaticRange) {
    QUANTD_ASSIGN_OR_RETURN(out.static_range,
                            passes::ResolveStaticRangeOptions(config));
    if (batch_stream && config.calibration().ranges_size() == 0) {
      QUANTD_ASSIGN_OR_RETURN(
          out.observers, InCallObservers(config, out.static_range.activations));
      const bool awq = IsAwq(config);
      if (config.calibration_config().auto_headroom() &&
          out.observers.method != "min_max") {
        return absl::UnimplementedError(absl::StrCat(
            "calibration_config.auto_headroom is implemented for the min_max "
            "observer only (its folds' ranges come from each batch's "
            "extremes), not for calibration method '",
            out.observers.method, "'"));
      }
      if ((out.smoothquant_alpha || awq) && out.observers.method != "min_max") {
        return absl::UnimplementedError(absl::StrCat(
            awq ? WeightAlgorithmWords(config) : "smoothquant",
            " with STATIC_RANGE is implemented for the min_max "
            "observer only (the ranges of the rescaled values are derived "
            "from per-channel minima and maxima), not for calibration "
            "method '",
            out.observers.method, "'"));
      }
    }
    return out;
  }
  // DYNAMIC_RANGE quantizes activations at run time: calibration has no
  // place in it (ResolveDynamicRangeOptions refuses config.calibration).
  // Batches are GPTQ's data (the layers' inputs), nothing else.
  if (batch_stream && !UsesLayerInputs(config)) {
    return absl::InvalidArgumentError(
        "calibration batches were sent with DYNAMIC_RANGE, which quantizes "
        "activations at run time; use STATIC_RANGE to calibrate (or "
        "weight_algorithm GPTQ or AWQ, bias_correction or smoothquant, which "
        "use "
        "them for the weights)");
  }
  QUANTD_ASSIGN_OR_RETURN(out.dynamic_range,
                          passes::ResolveDynamicRangeOptions(config));
  return out;
}

absl::StatusOr<calibration::ObserverConfig> ResolveCalibrateRequest(
    const quantd::v1::CalibrateConfig& config) {
  calibration::ObserverConfig observers =
      calibration::ObserverConfigFromProto(config);
  if (observers.method == "auto") {
    return absl::InvalidArgumentError(
        "method auto keeps the observer whose quantized model comes closest "
        "to the float one, which only a Quantize call measures (send the "
        "batches with calibration_config.method auto there); Calibrate "
        "returns one observer's ranges: name it");
  }
  if (config.auto_headroom()) {
    return absl::InvalidArgumentError(
        "auto_headroom keeps the headroom whose quantized model comes "
        "closest to the float one, which only a Quantize call measures; "
        "Calibrate returns ranges: set headroom to a factor");
  }
  QUANTD_RETURN_IF_ERROR(calibration::ValidateObserverConfig(observers));
  return observers;
}

}  // namespace quantd
