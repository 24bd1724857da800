// RunQuantize: one Quantize call from bytes to bytes, stage by stage:
// options -> parse -> validate -> [calibrate] -> plan -> quantize ->
// fidelity -> serialize (+ re-check).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <new>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/base/status_macros.h"
#include "core/calibration/observers.h"
#include "core/engine/accuracy_search.h"
#include "core/engine/calibration_session.h"
#include "core/engine/engine.h"
#include "core/engine/fidelity.h"
#include "core/engine/request_options.h"
#include "core/engine/resolved_options.h"
#include "core/graph/function_inline.h"
#include "core/graph/model_io.h"
#include "core/graph/prepare.h"
#include "core/graph/validate.h"
#include "core/numerics/awq.h"
#include "core/numerics/decibels.h"
#include "core/numerics/quant_params.h"
#include "core/passes/channel_scaling.h"
#include "core/passes/dynamic_range_options.h"
#include "core/passes/dynamic_range_pass.h"
#include "core/passes/fold_constants.h"
#include "core/passes/input_moments.h"
#include "core/passes/static_range_options.h"
#include "core/passes/static_range_pass.h"
#include "core/passes/weight_plan.h"

namespace quantd {
namespace {

using quantd::v1::Stage;

// STATIC_RANGE weights left float for their size, whose nodes then compute
// in float and read float inputs: ONNX Runtime's extended level (its
// default) quantizes the float weight of a Conv or Gemm that reads a
// DequantizeLinear itself, one scale per tensor (docs/accuracy.md).
std::string SmallFloatWeightsNote(
    const std::vector<quantd::v1::SkippedTensor>& skipped, int64_t minimum) {
  int small = 0;
  for (const quantd::v1::SkippedTensor& t : skipped) {
    small += t.reason() == quantd::v1::SKIP_TOO_FEW_ELEMENTS ? 1 : 0;
  }
  if (small == 0) return "";
  return absl::StrCat(
      small, " weight(s) under min_num_elements_for_weights (", minimum,
      " elements) stay float, and their nodes read float inputs: behind a "
      "quantization point, ONNX Runtime's extended optimization level (its "
      "default) would quantize such a weight itself with one scale per "
      "tensor; min_num_elements_for_weights = -1 quantizes them here, per "
      "channel (docs/accuracy.md)");
}

// Operators that already compute on quantized values or carry them, in the
// default domain and ONNX Runtime's com.microsoft one.
bool IsQuantizedOp(const std::string& op_type) {
  static const absl::flat_hash_set<absl::string_view> kOps = {
      "ConvInteger",
      "MatMulInteger",
      "QLinearConv",
      "QLinearMatMul",
      "QuantizeLinear",
      "DequantizeLinear",
      "DynamicQuantizeLinear",
      "MatMulNBits",
      "MatMulIntegerToFloat",
      "DynamicQuantizeMatMul",
      "DynamicQuantizeLSTM",
      "QGemm",
      "QAttention",
      "QEmbedLayerNormalization"};
  return kOps.contains(op_type) || absl::StartsWith(op_type, "QLinear");
}

// Names the quantized operators the input already holds ("119 ConvInteger,
// 119 DynamicQuantizeLinear"), so that a call that quantized little or
// nothing says why: quantd quantizes float Conv, Gemm, MatMul and recurrent
// weights and leaves integer operators as they are. Empty when there are
// none. Main graph only: a quantized model's integer ops sit there.
std::string AlreadyQuantizedNote(const onnx::GraphProto& graph) {
  std::vector<std::pair<std::string, int>> counts;
  absl::flat_hash_map<std::string, size_t> index;
  for (const onnx::NodeProto& node : graph.node()) {
    if (!IsQuantizedOp(node.op_type())) continue;
    auto [it, added] = index.try_emplace(node.op_type(), counts.size());
    if (added) counts.emplace_back(node.op_type(), 0);
    ++counts[it->second].second;
  }
  if (counts.empty()) return "";
  std::sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<std::string> parts;
  for (const auto& [op, n] : counts) parts.push_back(absl::StrCat(n, " ", op));
  std::vector<std::string> ours(std::begin(passes::kQuantizableOpTypes),
                                std::end(passes::kQuantizableOpTypes));
  ours.insert(ours.end(), std::begin(passes::kWeightOnlyOpTypes),
              std::end(passes::kWeightOnlyOpTypes));
  return absl::StrCat(
      "the input model is already quantized in part (",
      absl::StrJoin(parts, ", "),
      "): those operators and their weights are left as they are; quantd "
      "quantizes the float weights of ",
      absl::StrJoin(ours, ", "), " (send the float model to quantize it all)");
}

class QuantizeJob {
 public:
  QuantizeJob(const quantd::v1::QuantizeConfig& config,
              const QuantizeEvents& events, const CancellationToken& cancel,
              ThreadPool* pool, BatchQueue* calibration_batches,
              const JobLimits& limits)
      : config_(config),
        events_(events),
        cancel_(cancel),
        pool_(pool),
        calibration_batches_(calibration_batches),
        limits_(limits),
        gptq_budget_(limits.max_observer_memory_bytes,
                     "GPTQ input-statistics budget of this call (quantd "
                     "--max_observer_bytes)") {}

  absl::StatusOr<QuantizeResult> Run(ModelUpload upload);

 private:
  bool PassThrough() const { return options_.pass_through; }
  const ResolvedOptions& resolved() const { return options_.resolved; }
  absl::Status Parse(ModelUpload* upload);
  // STATIC_RANGE: the activation ranges, from config.calibration or from
  // the batches that follow the model in this call.
  absl::Status Calibrate();
  // calibration method "auto": each candidate's ranges from the session's
  // histograms (auto_candidates_), then the candidate whose quantized model
  // compares best with the float one becomes ranges_
  // (summary.observer_choice).
  absl::Status ReadAutoCandidates(const CalibrationSession& session);
  // calibration_config.auto_headroom: min_max at each headroom factor as
  // candidates, judged by folds of the kept batches (or held-out ones).
  absl::Status ReadHeadroomCandidates(const CalibrationSession& session);
  // The ranges min_max would give without the batches of fold `fold`
  // (observed batches whose ordinal % kHeadroomFolds is `fold`), from
  // batch_extremes_, widened by `factor` on top of the config's headroom.
  passes::ActivationRanges FoldRanges(int fold, double factor) const;
  absl::Status ChooseObserver();
  // config.equalize: cross-layer equalization of the prepared float model.
  absl::Status Equalize();
  // config.smoothquant, after calibration: rescales the sites' channels
  // from their observed extremes, and (STATIC_RANGE) the ranges of the
  // rescaled values with them.
  absl::Status Smooth(const calibration::ObserverConfig& observers);
  // weight_algorithm AWQ, after calibration: per site, the factors that
  // lower its readers' output error most (or none), applied as Smooth's.
  absl::Status Awq(const calibration::ObserverConfig& observers);
  // The activation and weight grids of the request, for the noise models.
  passes::QuantGrids Grids(const calibration::ObserverConfig& observers) const;
  // Whether every value a rescale of `site` divides has per-channel
  // extremes (their STATIC ranges are derived from them).
  bool SiteSeen(const passes::ScalingSite& site) const;
  // Applies `s` to `site`: the graph, the layers' input statistics, and
  // with STATIC_RANGE the ranges of the divided values. Returns the
  // summary's new entry with the fields every algorithm shares filled.
  absl::StatusOr<quantd::v1::ChannelScaling*> Rescale(
      const passes::ScalingSite& site, const std::vector<double>& s,
      const char* algorithm, passes::ModelWeights* weights,
      const calibration::ObserverConfig& observers);
  passes::PassHooks MakeHooks();
  absl::Status Quantize();
  // The quantized model against the float one over the kept calibration
  // batches (summary.fidelity). Only cancellation fails the call: anything
  // else makes fidelity "skipped" with the reason.
  absl::Status Fidelity();
  void SkipFidelity(std::string reason);
  // Runs `evaluator` (built on the float model) against model_ over the kept
  // batches (those at the indices in `only` when given), freeing each batch
  // after use when `free_batches`. An error
  // message says why the comparison could not run (the caller checks
  // cancel_ first).
  absl::StatusOr<quantd::v1::FidelityReport> CompareWithFloat(
      FidelityEvaluator* evaluator, bool free_batches,
      const std::vector<int64_t>* only = nullptr);
  // What the report's note says about batches that were not compared.
  std::string FidelityNote() const;
  // config.target_sqnr_db / target_agreement: Quantize and compare,
  // raising more nodes' precision each round until the goals are met
  // (accuracy_search.h).
  absl::Status SearchForTarget();
  // Keeps a calibration batch for Fidelity, within the memory budget.
  // `ordinal`: the batch's place among the observed ones (-1 when held
  // out), for auto_headroom's folds.
  void KeepForFidelity(quantd::v1::TensorBatch batch, int64_t ordinal = -1);
  absl::Status Serialize();
  void FillOptionWords();

  // Stage bookkeeping: a Progress event when a stage starts and ends, and
  // its duration in the summary.
  void StartStage(Stage stage, int64_t total, std::string message);
  void EndStage();
  void Progress(int64_t done, int64_t total, std::string message);

  const quantd::v1::QuantizeConfig& config_;
  const QuantizeEvents& events_;
  const CancellationToken& cancel_;
  ThreadPool* pool_;
  BatchQueue* calibration_batches_;  // May be null.
  const JobLimits limits_;
  // weight_algorithm GPTQ: the layers' input statistics, gathered during
  // calibration, and the budget they are charged to.
  calibration::MemoryBudget gptq_budget_;
  std::unique_ptr<passes::InputMoments> input_moments_;
  // smoothquant and AWQ: the values to rescale and their per-channel
  // extremes on the calibration batches.
  std::vector<passes::ScalingSite> scaling_sites_;
  passes::ChannelExtremes channel_extremes_;
  QuantizeRequestOptions options_;  // Resolved first, by Run.
  passes::ActivationRanges ranges_;
  struct AutoCandidate {
    std::string method;
    double headroom = 1.0;  // The candidate's own factor (on the config's).
    passes::ActivationRanges ranges;
    int kept = 0;     // Ranges entropy's guard left at the observed extremes.
    int clipped = 0;  // Ranges narrower than the observed extremes.
  };
  std::vector<AutoCandidate> auto_candidates_;
  // calibration_config.auto_headroom: observed batch n belongs to fold
  // n % kHeadroomFolds (interleaved, so the memory is fixed whatever the
  // number of batches). Each calibrated tensor's raw extremes per fold
  // (+inf/-inf where a fold did not produce it), the ordinal of each kept
  // fidelity batch, and the folds that hold kept batches (none: judged on
  // held-out batches directly).
  static constexpr int kHeadroomFolds = 4;
  absl::flat_hash_map<std::string,
                      std::array<std::pair<float, float>, kHeadroomFolds>>
      batch_extremes_;
  std::vector<int64_t> fidelity_ordinals_;
  int64_t observed_batches_ = 0;
  struct Fold {
    int id = 0;  // Observed batch n is in fold n % kHeadroomFolds.
    std::vector<int64_t> batches;  // Its kept ones: fidelity_batches_ indices.
  };
  std::vector<Fold> folds_;
  // False while ChooseObserver quantizes its candidates: only the returned
  // model's tensors are reported to the client.
  bool stream_reports_ = true;

  // Fidelity: the float model's executor (built before the pass rewrites
  // model_), the batches kept for it and what happened to the others.
  std::unique_ptr<FidelityEvaluator> fidelity_;
  std::string fidelity_skipped_;  // Why fidelity_ could not be built.
  // Calibrated tensors, and those whose entropy observer kept the observed
  // range (TensorRange.kept_observed_range).
  int observed_tensors_ = 0;
  int kept_observed_ranges_ = 0;
  std::vector<quantd::v1::TensorBatch> fidelity_batches_;
  int64_t fidelity_bytes_ = 0;
  int64_t batches_received_ = 0;
  int64_t batches_over_budget_ = 0;
  int64_t activation_batches_ = 0;
  int64_t held_out_ = 0;  // Batches kept back from calibration.
  double fidelity_setup_seconds_ = 0;
  // Weights of the last pass where GPTQ ran: kept, or rounded to nearest
  // after losing its cross-check (reports may come from pool threads).
  std::atomic<int64_t> gptq_kept_{0};
  std::atomic<int64_t> gptq_lost_{0};

  onnx::ModelProto model_;
  // The half graph inputs and outputs of a model that computed in
  // FLOAT16 / BFLOAT16 (graph::WidenHalfCompute), restored at the end.
  graph::HalfInterface half_interface_;
  // The input bytes' size and hash: the model is unchanged exactly when the
  // output bytes match them (the input is freed after parsing).
  size_t input_size_ = 0;
  size_t input_hash_ = 0;
  // The input came with an external_data stream: the output goes back the
  // same way.
  bool external_input_ = false;
  QuantizeResult result_;
  Stage stage_ = quantd::v1::STAGE_UNSPECIFIED;
  int64_t stage_total_ = 0;
  std::chrono::steady_clock::time_point stage_start_;
};

void QuantizeJob::Progress(int64_t done, int64_t total, std::string message) {
  if (!events_.on_progress) return;
  quantd::v1::Progress p;
  p.set_stage(stage_);
  p.set_done(done);
  p.set_total(total);
  p.set_message(std::move(message));
  events_.on_progress(p);
}

void QuantizeJob::StartStage(Stage stage, int64_t total, std::string message) {
  stage_ = stage;
  stage_total_ = total;
  stage_start_ = std::chrono::steady_clock::now();
  Progress(0, total, std::move(message));
}

void QuantizeJob::EndStage() {
  const std::chrono::duration<double> seconds =
      std::chrono::steady_clock::now() - stage_start_;
  quantd::v1::StageDuration* d = result_.summary.add_stage_durations();
  d->set_stage(stage_);
  d->set_seconds(seconds.count());
  Progress(stage_total_, stage_total_, "done");
}

void QuantizeJob::FillOptionWords() {
  quantd::v1::QuantizeSummary& s = result_.summary;
  s.set_method(MethodName(resolved().method));
  s.set_op_set(OpSetName(resolved().op_set));
  s.set_precision(PrecisionName(resolved().precision));
}

absl::Status QuantizeJob::Parse(ModelUpload* upload) {
  std::string* bytes = &upload->bytes;
  result_.summary.set_input_bytes(bytes->size() + upload->external.size());
  StartStage(quantd::v1::STAGE_PARSE, 1,
             absl::StrCat("parsing ", bytes->size(), " bytes"));
  QUANTD_ASSIGN_OR_RETURN(model_, graph::ParseModel(*bytes, &cancel_));
  // Before any other work: an oversized model costs one parse, no more.
  QUANTD_RETURN_IF_ERROR(CheckJobLimits(model_, limits_));
  external_input_ = !upload->external.empty();
  if (external_input_) {
    // A pass-through answers with the stream as it came; every other job
    // takes it apart into the model as it goes.
    QUANTD_ASSIGN_OR_RETURN(
        const graph::AttachedExternalData attached,
        graph::AttachExternalData(&upload->external,
                                  /*keep_stream=*/PassThrough(), &model_));
    result_.summary.add_validations(
        absl::StrCat("read ", attached.tensors, " tensors (", attached.bytes,
                     " bytes) from the request's external_data stream"));
  }
  input_size_ = bytes->size();
  // The parsed model now holds everything; keep at most one copy around
  // unless the bytes are the answer (then nothing needs comparing either).
  if (!PassThrough()) {
    input_hash_ = absl::HashOf(absl::string_view(*bytes));
    std::string().swap(*bytes);
  }
  EndStage();
  QUANTD_RETURN_IF_ERROR(cancel_.Check("parse"));

  StartStage(quantd::v1::STAGE_VALIDATE, 1, "checking the input model");
  // ONNX Runtime runs graphs in any node order; the checker and the passes
  // want them sorted (a cycle is still refused here).
  int64_t reordered = 0;
  QUANTD_RETURN_IF_ERROR(
      graph::SortTopologically(model_.mutable_graph(), &reordered));
  std::vector<std::string> validations;
  QUANTD_RETURN_IF_ERROR(
      graph::ValidateModel(model_, "input model", &validations));
  for (auto& v : validations) result_.summary.add_validations(std::move(v));
  result_.summary.set_input_opset(graph::DefaultOpset(model_));
  if (!PassThrough()) {
    // Calibration, the passes and the lowerings see local functions' nodes
    // as plain nodes (the Calibrate RPC inlines the same way, so its tensor
    // names match).
    QUANTD_ASSIGN_OR_RETURN(graph::InlinedFunctions inlined,
                            graph::InlineLocalFunctions(&model_));
    const std::string note = inlined.Note();
    if (!note.empty()) result_.summary.add_validations("note: " + note);
    options_.static_range.inlined = inlined;
    options_.dynamic_range.inlined = std::move(inlined);
    // As a runtime would run it (Calibrate prepares the same way, so its
    // tensor names match).
    QUANTD_ASSIGN_OR_RETURN(
        graph::PrepareReport prepared,
        graph::PrepareGraph(&model_, passes::FullPrepareOptions(&cancel_)));
    prepared.reordered_nodes += reordered;
    const std::string summary = prepared.Summary();
    if (!summary.empty()) result_.summary.add_validations("note: " + summary);
    half_interface_ = std::move(prepared.half_interface);
  }
  EndStage();
  return cancel_.Check("validate");
}

absl::Status QuantizeJob::Equalize() {
  if (!options_.equalize) return absl::OkStatus();
  const bool is_static = resolved().method == Method::kStaticRange;
  const passes::WeightPassOptions& weights =
      is_static ? options_.static_range : options_.dynamic_range;
  QUANTD_ASSIGN_OR_RETURN(
      std::vector<quantd::v1::ChannelScaling> scalings,
      passes::EqualizeLayers(&model_, weights.min_num_elements));
  result_.summary.add_validations(absl::StrCat(
      "note: equalize: ", scalings.size(),
      " layer pairs rescaled so that each channel's weight range is the "
      "same in both layers (summary.channel_scalings)"));
  for (auto& scaling : scalings) {
    *result_.summary.add_channel_scalings() = std::move(scaling);
  }
  return cancel_.Check("equalize");
}

bool QuantizeJob::SiteSeen(const passes::ScalingSite& site) const {
  bool seen = channel_extremes_.Find(site.value) != nullptr;
  for (const std::string& v : site.chain_values) {
    seen = seen && channel_extremes_.Find(v) != nullptr;
  }
  return seen;
}

absl::StatusOr<quantd::v1::ChannelScaling*> QuantizeJob::Rescale(
    const passes::ScalingSite& site, const std::vector<double>& s,
    const char* algorithm, passes::ModelWeights* weights,
    const calibration::ObserverConfig& observers) {
  QUANTD_ASSIGN_OR_RETURN(passes::AppliedScaling applied,
                          passes::ApplyChannelScales(site, s, weights));
  if (input_moments_ != nullptr) {
    std::vector<std::string> outputs;
    for (const onnx::NodeProto* n : site.readers) {
      if (n->output_size() > 0) outputs.push_back(n->output(0));
    }
    input_moments_->ScaleInputChannels(outputs, s);
  }
  if (resolved().method == Method::kStaticRange) {
    // Every divided value's range, exactly, from its per-channel extremes
    // (SiteSeen held them all).
    const passes::ChannelExtremes::Extremes* x =
        channel_extremes_.Find(site.value);
    for (const std::string& v : applied.scaled_values) {
      // An inserted Mul's output is X / s.
      const passes::ChannelExtremes::Extremes* e =
          site.absorber == nullptr ? x : channel_extremes_.Find(v);
      if (e == nullptr) {
        return absl::InternalError(
            absl::StrCat("no per-channel extremes of '", v, "'"));
      }
      float lo = std::numeric_limits<float>::infinity();
      float hi = -std::numeric_limits<float>::infinity();
      for (size_t c = 0; c < s.size(); ++c) {
        if (e->min[c] > e->max[c]) continue;
        lo = std::min(lo, static_cast<float>(e->min[c] / s[c]));
        hi = std::max(hi, static_cast<float>(e->max[c] / s[c]));
      }
      if (lo > hi) lo = hi = 0;
      passes::ActivationRange& r = ranges_[v];
      std::tie(r.min, r.max) = calibration::ReportedRange(observers, lo, hi);
      r.channels = 0;
    }
  }
  quantd::v1::ChannelScaling* report = result_.summary.add_channel_scalings();
  report->set_algorithm(algorithm);
  report->set_value(applied.value);
  report->set_absorbed_by(applied.absorbed_by);
  for (const onnx::NodeProto* n : site.readers) report->add_layers(n->name());
  report->set_channels(site.channels);
  report->set_min_scale(*std::min_element(s.begin(), s.end()));
  report->set_max_scale(*std::max_element(s.begin(), s.end()));
  return report;
}

passes::QuantGrids QuantizeJob::Grids(
    const calibration::ObserverConfig& observers) const {
  const bool is_static = resolved().method == Method::kStaticRange;
  const passes::WeightPassOptions& pass =
      is_static ? options_.static_range : options_.dynamic_range;
  passes::QuantGrids grids;
  // DYNAMIC_RANGE: DynamicQuantizeLinear's uint8 grid.
  grids.activation_bits = is_static ? observers.bits : 8;
  grids.activation_symmetric = is_static && observers.symmetric;
  grids.activation_ranges_fixed = is_static;
  grids.weight_bits = pass.weights.SpecFor(pass.precision).bits;
  grids.weight_per_channel = pass.weights.per_channel;
  grids.min_elements = pass.min_num_elements;
  return grids;
}

absl::Status QuantizeJob::Smooth(const calibration::ObserverConfig& observers) {
  const double alpha = *options_.smoothquant_alpha;
  const bool choose = options_.smoothquant_auto;
  const passes::QuantGrids grids = Grids(observers);
  passes::ModelWeights weights(&model_);
  int64_t unseen = 0, inserted = 0, kept = 0;
  for (const passes::ScalingSite& site : scaling_sites_) {
    // Every value the rescale changes must have been seen, or its range
    // would be stale.
    if (!SiteSeen(site)) {
      ++unseen;
      continue;
    }
    const passes::ChannelExtremes::Extremes* x =
        channel_extremes_.Find(site.value);
    const std::vector<double> act = passes::ChannelAbsMax(*x);
    std::vector<double> s;
    double used_alpha = alpha;
    if (choose) {
      QUANTD_ASSIGN_OR_RETURN(
          passes::SmoothingChoice choice,
          passes::ChooseSmoothing(site, weights, *x, grids));
      if (!choice.rescale) {
        ++kept;
        continue;
      }
      s = std::move(choice.s);
      used_alpha = choice.alpha;
    } else {
      QUANTD_ASSIGN_OR_RETURN(std::vector<double> wmax,
                              passes::ReaderChannelMax(site, weights));
      s = passes::SmoothQuantScales(act, wmax, alpha);
    }
    QUANTD_ASSIGN_OR_RETURN(
        quantd::v1::ChannelScaling * report,
        Rescale(site, s, "smoothquant", &weights, observers));
    if (site.absorber == nullptr) ++inserted;
    double before = 0, after = 0;
    for (size_t c = 0; c < act.size(); ++c) {
      before = std::max(before, act[c]);
      after = std::max(after, act[c] / s[c]);
    }
    report->set_before(before);
    report->set_after(after);
    report->set_alpha(used_alpha);
  }
  weights.DropUnread();
  const int64_t applied =
      static_cast<int64_t>(scaling_sites_.size()) - unseen - kept;
  result_.summary.add_validations(absl::StrCat(
      "note: smoothquant (",
      choose ? "auto_alpha" : absl::StrCat("alpha ", alpha), "): ", applied,
      " values rescaled (", applied - inserted, " folded into their producer, ",
      inserted, " through an inserted Mul)",
      kept > 0 ? absl::StrCat("; ", kept,
                              " left as they are (no alpha predicted less "
                              "noise)")
               : std::string(),
      unseen > 0 ? absl::StrCat("; ", unseen,
                                " left as they are: not reached by the "
                                "calibration batches, or not shaped as "
                                "their readers take them")
                 : std::string(),
      " (summary.channel_scalings)"));
  scaling_sites_.clear();
  return absl::OkStatus();
}

absl::Status QuantizeJob::Awq(const calibration::ObserverConfig& observers) {
  const bool is_static = resolved().method == Method::kStaticRange;
  passes::WeightPassOptions& pass =
      is_static ? options_.static_range : options_.dynamic_range;
  passes::AwqGrid grid;
  grid.spec = pass.weights.SpecFor(pass.precision);
  grid.per_channel = pass.weights.per_channel;
  grid.block_size = pass.weights.block_size;
  grid.four_bit_weights = passes::HasFourBitWeights(pass.precision);
  grid.min_elements = pass.min_num_elements;
  const passes::QuantGrids activations = Grids(observers);
  passes::ModelWeights weights(&model_);
  int64_t unseen = 0, inserted = 0, kept = 0, unjudged = 0, applied = 0,
          lost = 0;
  std::string why_unjudged;
  const int64_t total = static_cast<int64_t>(scaling_sites_.size());
  for (int64_t i = 0; i < total; ++i) {
    const passes::ScalingSite& site = scaling_sites_[i];
    QUANTD_RETURN_IF_ERROR(cancel_.Check("awq"));
    Progress(i, total,
             absl::StrCat("awq: searching the factors of '", site.value, "'"));
    // STATIC_RANGE: the rescaled values' ranges come from their extremes.
    if (is_static && !SiteSeen(site)) {
      ++unseen;
      continue;
    }
    QUANTD_ASSIGN_OR_RETURN(
        passes::AwqSiteChoice choice,
        passes::ChooseAwqScales(site, weights, *input_moments_, grid,
                                channel_extremes_.Find(site.value),
                                activations));
    if (!choice.why_not.empty()) {
      if (unjudged++ == 0) {
        why_unjudged = absl::StrCat("'", site.value, "': ", choice.why_not);
      }
      continue;
    }
    const numerics::AwqChoice& c = choice.choice;
    if (choice.lost_cross_check) {
      ++lost;
      continue;
    }
    if (!c.rescale) {
      ++kept;
      continue;
    }
    QUANTD_ASSIGN_OR_RETURN(quantd::v1::ChannelScaling * report,
                            Rescale(site, c.s, "awq", &weights, observers));
    ++applied;
    if (site.absorber == nullptr) ++inserted;
    report->set_before(numerics::SqnrDb(c.energy, c.rtn_error));
    report->set_after(numerics::SqnrDb(c.energy, c.error));
    report->set_alpha(c.alpha);
    for (const onnx::NodeProto* n : site.readers) {
      pass.awq_rescaled.insert(n->input(1));
    }
  }
  weights.DropUnread();
  result_.summary.add_validations(absl::StrCat(
      "note: weight_algorithm ",
      pass.algorithm == passes::WeightAlgorithm::kGptq ? "AWQ+GPTQ" : "AWQ",
      ": ", applied, " values rescaled (", applied - inserted,
      " folded into their producer, ", inserted, " through an inserted Mul)",
      kept > 0 ? absl::StrCat("; ", kept,
                              " left as they are (no alpha lowered their "
                              "readers' output error)")
               : std::string(),
      lost > 0 ? absl::StrCat("; ", lost,
                              " left as they are because factors searched "
                              "on half of the calibration samples raised "
                              "the readers' error on the other half (AWQ "
                              "fits the calibration inputs there; more "
                              "samples would help)")
               : std::string(),
      unjudged > 0 ? absl::StrCat("; ", unjudged, " not judged (e.g. ",
                                  why_unjudged, ")")
                   : std::string(),
      unseen > 0 ? absl::StrCat("; ", unseen,
                                " left as they are: not reached by the "
                                "calibration batches, or not shaped as "
                                "their readers take them")
                 : std::string(),
      "; the weights are then rounded ",
      pass.algorithm == passes::WeightAlgorithm::kGptq ? "with GPTQ"
                                                       : "to nearest",
      " (summary.channel_scalings)"));
  scaling_sites_.clear();
  return absl::OkStatus();
}

passes::PassHooks QuantizeJob::MakeHooks() {
  passes::PassHooks hooks;
  hooks.on_planned = [this](int64_t total) {
    EndStage();
    StartStage(quantd::v1::STAGE_QUANTIZE, total,
               absl::StrCat("quantizing ", total, " tensors"));
  };
  hooks.on_report = [this](const quantd::v1::TensorReport& r) {
    if (r.input_rows() > 0) {  // GPTQ ran.
      if (absl::StrContains(r.weight_algorithm(), "gptq")) {
        ++gptq_kept_;
      } else if (r.held_out_output_sqnr_db() != 0 ||
                 r.held_out_rtn_output_sqnr_db() != 0) {
        ++gptq_lost_;
      }
    }
    if (events_.on_tensor_report && stream_reports_) {
      events_.on_tensor_report(r);
    }
  };
  hooks.on_progress = [this](int64_t done, int64_t total) {
    Progress(done, total, "");
  };
  hooks.check_cancelled = [this] { return cancel_.Check("quantize"); };
  if (pool_ != nullptr) {
    hooks.parallel_for = [this](int64_t n,
                                const std::function<void(int64_t)>& fn) {
      pool_->ParallelFor(n, fn);
    };
    // One tensor per pool thread between two cancellation checks: a job
    // without calibration batches runs on a pool thread, so pool_->size()
    // workers (the caller among them) share a group and it takes about one
    // tensor's time; a larger group only makes a cancel wait for more
    // tensors.
    hooks.group_size = std::max(1, pool_->size());
  }
  return hooks;
}

absl::Status QuantizeJob::Calibrate() {
  const bool is_static = resolved().method == Method::kStaticRange;
  passes::WeightPassOptions& weights =
      is_static ? options_.static_range : options_.dynamic_range;
  // GPTQ and bias correction need the inputs each layer sees.
  const bool awq = weights.awq;
  const bool layer_inputs =
      weights.algorithm == passes::WeightAlgorithm::kGptq || awq ||
      weights.bias_correction;
  const bool smooth = options_.smoothquant_alpha.has_value();
  // The sites a rescale may change, and the per-channel extremes of every
  // value it divides (STATIC ranges; the activation noise a factor causes).
  const bool rescale = smooth || awq;
  const bool extremes = smooth || awq;
  // DYNAMIC_RANGE calibrates only to gather those.
  if (!is_static && !layer_inputs && !smooth) return absl::OkStatus();
  const bool has_ranges = config_.calibration().ranges_size() > 0;
  if (has_ranges) {
    QUANTD_ASSIGN_OR_RETURN(
        ranges_, passes::RangesFromCalibration(config_.calibration()));
    // Ranges and batches in one call would be two answers to one question.
    if (calibration_batches_ != nullptr && calibration_batches_->Pop()) {
      calibration_batches_->Abort();
      return absl::InvalidArgumentError(
          "the call has both config.calibration ranges and calibration "
          "batches: send one or the other");
    }
    return absl::OkStatus();
  }
  constexpr char kGptqNeedsBatches[] =
      "weight_algorithm GPTQ or AWQ, bias_correction and smoothquant need the "
      "inputs each layer sees: send calibration batches of graph inputs "
      "after the model in this call";
  if (calibration_batches_ == nullptr) {
    if (!is_static) return absl::FailedPreconditionError(kGptqNeedsBatches);
    return absl::FailedPreconditionError(
        "STATIC_RANGE needs activation ranges: put a CalibrationResult (from "
        "Calibrate) in config.calibration, or send calibration batches after "
        "the model in this call");
  }
  StartStage(quantd::v1::STAGE_CALIBRATE, 0,
             is_static ? "observing calibration batches"
                       : "observing the layers' inputs for the weights");
  // DYNAMIC_RANGE uses no ranges: the default observers run and are unused.
  const calibration::ObserverConfig observer_config =
      is_static ? options_.observers : calibration::ObserverConfig();
  absl::StatusOr<std::unique_ptr<CalibrationSession>> session =
      CalibrationSession::Create(model_, observer_config, limits_);
  if (!session.ok()) {
    calibration_batches_->Abort();
    return session.status();
  }
  if (layer_inputs) {
    absl::StatusOr<std::unique_ptr<passes::InputMoments>> moments =
        passes::InputMoments::Create(model_.graph(), weights.min_num_elements,
                                     &gptq_budget_,
                                     /*folds=*/weights.cross_check);
    if (!moments.ok()) {
      calibration_batches_->Abort();
      return moments.status();
    }
    input_moments_ = std::move(*moments);
  }
  if (rescale) {
    scaling_sites_ =
        passes::FindScalingSites(&model_, weights.min_num_elements);
  }
  if (extremes) {
    for (const passes::ScalingSite& site : scaling_sites_) {
      channel_extremes_.Track(site.value, site.axis, site.channels);
      for (const std::string& v : site.chain_values) {
        channel_extremes_.Track(v, site.axis, site.channels);
      }
    }
  }
  const bool auto_headroom =
      is_static && config_.calibration_config().auto_headroom();
  if (layer_inputs || extremes || auto_headroom) {
    (*session)->set_tensor_sink([this, extremes, auto_headroom](
                                    const std::string& name,
                                    const executor::Tensor& t) {
      if (auto_headroom) {
        // The session hands over one value at a time, in order, and a batch
        // ends (observed_batches_ moves on) only after all of them.
        auto [it, added] = batch_extremes_.try_emplace(name);
        if (added) {
          it->second.fill({std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()});
        }
        std::pair<float, float>& e =
            it->second[observed_batches_ % kHeadroomFolds];
        bool nan = false;  // The observer has refused NaN already.
        calibration::FoldMinMax(t.data<float>(), t.size(), e.first, e.second,
                                nan);
      }
      if (input_moments_ != nullptr) {
        QUANTD_RETURN_IF_ERROR(input_moments_->Observe(name, t));
      }
      return extremes ? channel_extremes_.Observe(name, t) : absl::OkStatus();
    });
  }
  {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<FidelityEvaluator>> evaluator =
        FidelityEvaluator::Create(model_, limits_.max_tensor_elements);
    if (evaluator.ok()) {
      fidelity_ = std::move(*evaluator);
    } else {
      fidelity_skipped_ =
          absl::StrCat("the executor cannot run the float model: ",
                       evaluator.status().message());
    }
    const std::chrono::duration<double> seconds =
        std::chrono::steady_clock::now() - start;
    fidelity_setup_seconds_ += seconds.count();
  }
  QUANTD_ASSIGN_OR_RETURN(
      quantd::v1::CalibrationResult result,
      CalibrateFromQueue(
          session->get(), calibration_batches_,
          [this](int64_t n) { Progress(n, 0, absl::StrCat(n, " batches")); },
          cancel_, pool_,
          [this](quantd::v1::TensorBatch batch) {
            // With held-out batches, fidelity is measured on those alone.
            if (config_.holdout_batches() > 0) {
              ++batches_received_;
            } else {
              KeepForFidelity(std::move(batch), observed_batches_);
            }
            ++observed_batches_;
          },
          config_.holdout_batches(),
          [this](quantd::v1::TensorBatch batch) {
            ++held_out_;
            KeepForFidelity(std::move(batch));
          }));
  if (result.batch_count() == 0) {
    if (held_out_ > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("holdout_batches is ", config_.holdout_batches(),
                       " but the call "
                       "sent only ",
                       held_out_,
                       " calibration batches: none was left to "
                       "calibrate with; send more batches or hold fewer back"));
    }
    if (!is_static) return absl::FailedPreconditionError(kGptqNeedsBatches);
    return absl::FailedPreconditionError(
        "STATIC_RANGE needs activation ranges, and the call sent no "
        "calibration batches and no config.calibration");
  }
  const std::vector<std::string> delayed = (*session)->DelayedTensors();
  if (!delayed.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "activation_params.quant_delay is ", observer_config.quant_delay,
        " but only ", result.batch_count(),
        " calibration batches were seen: tf.contrib would still pass ",
        delayed.size(), " tensors (e.g. ", delayed.front(),
        ") through unquantized; send more batches or lower quant_delay"));
  }
  if (is_static && observer_config.method == "auto") {
    QUANTD_RETURN_IF_ERROR(ReadAutoCandidates(**session));
    ranges_ = auto_candidates_.front().ranges;
    observed_tensors_ = result.ranges_size();
  } else if (auto_headroom) {
    QUANTD_RETURN_IF_ERROR(ReadHeadroomCandidates(**session));
    ranges_ = auto_candidates_.front().ranges;
    observed_tensors_ = result.ranges_size();
  } else if (is_static) {
    QUANTD_ASSIGN_OR_RETURN(ranges_, passes::RangesFromCalibration(result));
    for (const quantd::v1::TensorRange& r : result.ranges()) {
      kept_observed_ranges_ += r.kept_observed_range() ? 1 : 0;
    }
    observed_tensors_ = result.ranges_size();
  }
  if (input_moments_ != nullptr) input_moments_->Finish();
  // After Finish: the layers' statistics follow the rescale.
  if (smooth) QUANTD_RETURN_IF_ERROR(Smooth(observer_config));
  if (awq) QUANTD_RETURN_IF_ERROR(Awq(observer_config));
  if (input_moments_ != nullptr) {
    weights.input_moments = input_moments_.get();
    result_.summary.add_validations(absl::StrCat(
        "note: ",
        weights.algorithm != passes::WeightAlgorithm::kRoundToNearest ||
                weights.awq
            ? absl::StrCat(
                  "weight_algorithm ",
                  absl::AsciiStrToUpper(passes::WeightAlgorithmName(
                      weights.algorithm, weights.awq)),
                  weights.bias_correction ? " and bias_correction" : "")
            : "bias_correction",
        ": input statistics of ", input_moments_->matrices(), " layer inputs (",
        calibration::ByteText(input_moments_->bytes()), ") from ",
        result.batch_count(), " calibration batches",
        input_moments_->over_budget() > 0
            ? absl::StrCat("; ", input_moments_->over_budget(),
                           " larger ones did not fit the budget "
                           "(quantd --max_observer_bytes) and their weights "
                           "are rounded to nearest")
            : std::string(),
        "; each weight's report says what was applied"));
  }
  EndStage();
  return cancel_.Check("calibrate");
}

absl::Status QuantizeJob::ReadAutoCandidates(
    const CalibrationSession& session) {
  // min_max comes first: the others' clipping is counted against it.
  struct Candidate {
    const char* method;
    double headroom;
  };
  std::vector<Candidate> candidates;
  for (const char* method : calibration::kAutoCandidates) {
    candidates.push_back({method, 1.0});
  }
  if (held_out_ > 0) {
    for (double h : calibration::kAutoHeadroomCandidates) {
      candidates.push_back({"min_max", h});
    }
  }
  quantd::v1::CalibrationResult observed;
  for (const Candidate& candidate : candidates) {
    const quantd::v1::CalibrationResult r =
        session.ResultAs(candidate.method, candidate.headroom);
    if (auto_candidates_.empty()) observed = r;
    AutoCandidate c;
    c.method = candidate.method;
    c.headroom = candidate.headroom;
    QUANTD_ASSIGN_OR_RETURN(c.ranges, passes::RangesFromCalibration(r));
    for (int i = 0; i < r.ranges_size(); ++i) {
      const quantd::v1::TensorRange& t = r.ranges(i);
      const quantd::v1::TensorRange& o = observed.ranges(i);
      c.kept += t.kept_observed_range() ? 1 : 0;
      c.clipped += t.min() > o.min() || t.max() < o.max() ? 1 : 0;
    }
    auto_candidates_.push_back(std::move(c));
  }
  return absl::OkStatus();
}

absl::Status QuantizeJob::ReadHeadroomCandidates(
    const CalibrationSession& session) {
  const int64_t kept = static_cast<int64_t>(fidelity_batches_.size());
  // No batch to compare on at all: ChooseObserver says why.
  if (held_out_ == 0 && kept > 0) {
    std::array<std::vector<int64_t>, kHeadroomFolds> by_fold;
    for (int64_t i = 0; i < kept; ++i) {
      by_fold[fidelity_ordinals_[i] % kHeadroomFolds].push_back(i);
    }
    for (int f = 0; f < kHeadroomFolds; ++f) {
      if (!by_fold[f].empty()) folds_.push_back({f, std::move(by_fold[f])});
    }
    if (folds_.size() < 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          "calibration_config.auto_headroom holds each fold of the "
          "calibration batches (batch n in fold n % ",
          kHeadroomFolds,
          ") out in turn to judge the others' ranges, which needs batches of "
          "graph inputs in at least 2 folds (at least 2 batches) to compare "
          "on; this call has ",
          kept, " in ", folds_.size(),
          ": send more batches, or set holdout_batches to judge on those"));
    }
  }
  std::vector<double> factors = {1.0};
  for (double h : calibration::kAutoHeadroomCandidates) factors.push_back(h);
  for (double h : factors) {
    AutoCandidate c;
    c.method = "min_max";
    c.headroom = h;
    QUANTD_ASSIGN_OR_RETURN(c.ranges, passes::RangesFromCalibration(
                                          session.ResultAs("min_max", h)));
    auto_candidates_.push_back(std::move(c));
  }
  return absl::OkStatus();
}

passes::ActivationRanges QuantizeJob::FoldRanges(int fold,
                                                 double factor) const {
  passes::ActivationRanges ranges = auto_candidates_.front().ranges;
  for (auto& [name, range] : ranges) {
    if (range.unbounded) continue;  // No range to widen: a mask.
    auto it = batch_extremes_.find(name);
    if (it != batch_extremes_.end()) {
      float lo = std::numeric_limits<float>::infinity();
      float hi = -lo;
      for (int f = 0; f < kHeadroomFolds; ++f) {
        if (f == fold) continue;
        lo = std::min(lo, it->second[f].first);
        hi = std::max(hi, it->second[f].second);
      }
      // Else seen only in the left-out batches: all batches' range.
      if (lo <= hi) {
        std::tie(range.min, range.max) =
            calibration::ReportedRange(options_.observers, lo, hi);
      }
    }
    range.min *= static_cast<float>(factor);
    range.max *= static_cast<float>(factor);
  }
  return ranges;
}

absl::Status QuantizeJob::ChooseObserver() {
  const bool headroom = config_.calibration_config().auto_headroom();
  const char* what =
      headroom ? "calibration_config.auto_headroom" : "calibration method auto";
  const char* instead =
      headroom ? "set a headroom factor instead" : "name an observer instead";
  if (fidelity_ == nullptr || fidelity_batches_.empty()) {
    std::string why = fidelity_skipped_;
    if (why.empty()) why = "no calibration batch fed the graph inputs";
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        " keeps the candidate whose quantized model is closest to the float "
        "one on this call's batches of graph inputs, but ",
        why, "; ", instead));
  }
  const onnx::ModelProto float_model = model_;
  const quantd::v1::QuantizeSummary base = result_.summary;
  // Each candidate's stages stay in the summary's durations.
  auto durations = base.stage_durations();
  quantd::v1::ObserverChoice choice;
  const int64_t total = static_cast<int64_t>(fidelity_batches_.size());
  choice.set_batches(total);
  choice.set_held_out(held_out_ > 0);
  const bool by_agreement = config_.has_target_agreement();
  size_t best = 0;
  stream_reports_ = false;
  // Without folds, every kept batch judges the candidate's own ranges;
  // with folds, each fold judges the other batches' ranges widened alike.
  const bool by_folds = !folds_.empty();
  const int folds = by_folds ? static_cast<int>(folds_.size()) : 1;
  for (size_t i = 0; i < auto_candidates_.size(); ++i) {
    const AutoCandidate& c = auto_candidates_[i];
    QUANTD_ASSIGN_OR_RETURN(
        std::unique_ptr<FidelityEvaluator> evaluator,
        FidelityEvaluator::Create(float_model, limits_.max_tensor_elements));
    absl::StatusOr<quantd::v1::FidelityReport> report;
    for (int k = 0; k < folds; ++k) {
      model_ = float_model;
      result_.summary = base;
      *result_.summary.mutable_stage_durations() = durations;
      ranges_ = by_folds ? FoldRanges(folds_[k].id, c.headroom) : c.ranges;
      QUANTD_RETURN_IF_ERROR(Quantize());
      const std::vector<int64_t>* judges =
          by_folds ? &folds_[k].batches : nullptr;
      StartStage(
          quantd::v1::STAGE_FIDELITY,
          judges != nullptr ? static_cast<int64_t>(judges->size()) : total,
          absl::StrCat(by_folds ? "auto_headroom" : "calibration method auto",
                       ": candidate ", i + 1, " of ", auto_candidates_.size(),
                       " (", c.method,
                       c.headroom != 1.0 ? absl::StrCat(" x", c.headroom)
                                         : std::string(),
                       ")",
                       by_folds ? absl::StrCat(", fold ", k + 1, " of ", folds)
                                : std::string()));
      report =
          CompareWithFloat(evaluator.get(), /*free_batches=*/false, judges);
      EndStage();
      durations = result_.summary.stage_durations();
      if (!report.ok()) break;
    }
    if (!report.ok()) {
      QUANTD_RETURN_IF_ERROR(cancel_.Check("fidelity"));
      return absl::FailedPreconditionError(
          absl::StrCat(what, " could not compare candidate ", c.method,
                       " with the float model (", report.status().message(),
                       "); ", instead));
    }
    quantd::v1::ObserverCandidate* out = choice.add_candidates();
    out->set_method(c.method);
    out->set_headroom(options_.observers.headroom * c.headroom);
    out->set_output_sqnr_db(WorstOutputSqnr(*report));
    out->set_top1_agreement(WorstTop1Agreement(*report));
    out->set_clipped_tensors(c.clipped);
    if (i > 0 &&
        ObserverCandidateBetter(*out, choice.candidates(best), by_agreement)) {
      best = i;
    }
  }
  stream_reports_ = true;
  model_ = float_model;
  result_.summary = base;
  *result_.summary.mutable_stage_durations() = durations;
  ranges_ = std::move(auto_candidates_[best].ranges);
  kept_observed_ranges_ = auto_candidates_[best].kept;
  choice.set_chosen(auto_candidates_[best].method);
  choice.set_chosen_headroom(options_.observers.headroom *
                             auto_candidates_[best].headroom);
  choice.set_folds(static_cast<int>(folds_.size()));
  *result_.summary.mutable_observer_choice() = std::move(choice);
  std::vector<AutoCandidate>().swap(auto_candidates_);
  return cancel_.Check("calibrate");
}

absl::Status QuantizeJob::Quantize() {
  StartStage(quantd::v1::STAGE_PLAN, 1, "choosing the tensors to quantize");
  const passes::PassHooks hooks = MakeHooks();
  gptq_kept_ = 0;
  gptq_lost_ = 0;
  quantd::v1::QuantizeSummary& s = result_.summary;
  std::vector<quantd::v1::SkippedTensor> skipped;
  std::string opset_note;
  const std::string quantized_before = AlreadyQuantizedNote(model_.graph());
  if (resolved().method == Method::kStaticRange) {
    QUANTD_ASSIGN_OR_RETURN(
        passes::StaticRangeStats stats,
        passes::RunStaticRangePass(options_.static_range, ranges_, hooks,
                                   &model_));
    s.set_quantized_tensors(stats.quantized_weights +
                            stats.quantized_activations +
                            stats.quantized_biases);
    s.set_quantized_nodes(stats.quantized_nodes);
    s.set_weight_bytes_before(stats.weight_bytes_before);
    s.set_weight_bytes_after(stats.weight_bytes_after);
    skipped = std::move(stats.skipped);
    opset_note = std::move(stats.opset_note);
    if (!stats.lowering_note.empty()) {
      s.add_validations(absl::StrCat("note: ", stats.lowering_note));
    }
    if (!stats.unbounded_note.empty()) {
      s.add_validations(absl::StrCat("note: ", stats.unbounded_note));
    }
    if (!stats.unreached_note.empty()) {
      s.add_validations(absl::StrCat("note: ", stats.unreached_note));
    }
    const std::string small =
        SmallFloatWeightsNote(skipped, options_.static_range.min_num_elements);
    if (!small.empty()) s.add_validations(absl::StrCat("note: ", small));
  } else {
    QUANTD_ASSIGN_OR_RETURN(
        passes::PassStats stats,
        passes::RunDynamicRangePass(options_.dynamic_range, hooks, &model_));
    s.set_quantized_tensors(stats.quantized_tensors);
    s.set_quantized_nodes(stats.quantized_nodes);
    s.set_weight_bytes_before(stats.weight_bytes_before);
    s.set_weight_bytes_after(stats.weight_bytes_after);
    skipped = std::move(stats.skipped);
    opset_note = std::move(stats.opset_note);
  }
  EndStage();
  s.set_skipped_tensors(static_cast<int>(skipped.size()));
  for (auto& t : skipped) *s.add_skipped() = std::move(t);
  if (!opset_note.empty()) {
    s.add_validations(absl::StrCat("note: ", opset_note));
  }
  if (!quantized_before.empty()) {
    s.add_validations(absl::StrCat("note: ", quantized_before));
  }
  if (kept_observed_ranges_ > 0) {
    s.add_validations(absl::StrCat(
        "note: entropy kept the observed range of ", kept_observed_ranges_,
        " of ", observed_tensors_,
        " calibrated tensors: there the KL threshold would have cost more "
        "squared error than it saved (calibration_method "
        "entropy_unguarded clips them anyway)"));
  }
  if (gptq_lost_ > 0) {
    s.add_validations(absl::StrCat(
        "note: GPTQ's cross-check kept it on ", gptq_kept_.load(), " of ",
        gptq_kept_ + gptq_lost_,
        " weights; the others are rounded to nearest: fitted on half of the "
        "calibration samples, GPTQ did worse than rounding on the other half "
        "(each report says by how much). More calibration samples, at least "
        "as many as the widest layer has inputs, let GPTQ generalise"));
  }
  return cancel_.Check("quantize");
}

void QuantizeJob::KeepForFidelity(quantd::v1::TensorBatch batch,
                                  int64_t ordinal) {
  ++batches_received_;
  if (fidelity_ == nullptr) return;
  if (!fidelity_->FeedsGraphInputs(batch)) {
    ++activation_batches_;
    return;
  }
  const int64_t bytes = static_cast<int64_t>(batch.ByteSizeLong());
  if (batches_over_budget_ > 0 ||
      fidelity_bytes_ + bytes > kFidelityBatchBudgetBytes) {
    ++batches_over_budget_;
    return;
  }
  fidelity_bytes_ += bytes;
  fidelity_batches_.push_back(std::move(batch));
  fidelity_ordinals_.push_back(ordinal);
}

void QuantizeJob::SkipFidelity(std::string reason) {
  quantd::v1::FidelityReport* f = result_.summary.mutable_fidelity();
  f->Clear();
  f->set_evaluated(false);
  f->set_skipped_reason(std::move(reason));
  f->set_batches_received(batches_received_);
  fidelity_.reset();
  std::vector<quantd::v1::TensorBatch>().swap(fidelity_batches_);
}

absl::Status QuantizeJob::Fidelity() {
  if (resolved().method != Method::kStaticRange && batches_received_ == 0) {
    SkipFidelity(
        "DYNAMIC_RANGE quantizes activations at run time and takes no "
        "calibration batches: there is no data to compare the models on");
    return absl::OkStatus();
  }
  if (batches_received_ == 0) {
    SkipFidelity(
        "the activation ranges came from config.calibration: the call "
        "carried no calibration batches to compare the models on");
    return absl::OkStatus();
  }
  if (fidelity_ == nullptr) {
    SkipFidelity(fidelity_skipped_);
    return absl::OkStatus();
  }
  if (fidelity_batches_.empty()) {
    SkipFidelity(absl::StrCat(
        "all ", batches_received_,
        " calibration batches held observed activations, not graph inputs: "
        "there is no model run to compare"));
    return absl::OkStatus();
  }
  const int64_t total = static_cast<int64_t>(fidelity_batches_.size());
  StartStage(quantd::v1::STAGE_FIDELITY, total,
             absl::StrCat("comparing the quantized model with the float one "
                          "on ",
                          total, " batches"));
  // The float model's executor was built before the pass (which rewrites
  // the model in place); its cost belongs to this stage too.
  stage_start_ -=
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(fidelity_setup_seconds_));
  absl::StatusOr<quantd::v1::FidelityReport> report =
      CompareWithFloat(fidelity_.get(), /*free_batches=*/true);
  if (!report.ok()) {
    QUANTD_RETURN_IF_ERROR(cancel_.Check("fidelity"));
    SkipFidelity(std::string(report.status().message()));
    EndStage();
    return absl::OkStatus();
  }
  report->set_batches_received(batches_received_);
  report->set_note(FidelityNote());
  *result_.summary.mutable_fidelity() = std::move(*report);
  fidelity_.reset();
  std::vector<quantd::v1::TensorBatch>().swap(fidelity_batches_);
  EndStage();
  return cancel_.Check("fidelity");
}

absl::StatusOr<quantd::v1::FidelityReport> QuantizeJob::CompareWithFloat(
    FidelityEvaluator* evaluator, bool free_batches,
    const std::vector<int64_t>* only) {
  absl::Status s = evaluator->SetQuantizedModel(model_);
  if (!s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the executor cannot run the quantized model: ", s.message()));
  }
  const int64_t total = only != nullptr
                            ? static_cast<int64_t>(only->size())
                            : static_cast<int64_t>(fidelity_batches_.size());
  for (int64_t n = 0; n < total; ++n) {
    const int64_t i = only != nullptr ? (*only)[n] : n;
    QUANTD_RETURN_IF_ERROR(cancel_.Check("fidelity"));
    s = evaluator->AddBatch(fidelity_batches_[i], pool_, cancel_);
    if (!s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("calibration batch ", i + 1, ": ", s.message()));
    }
    // Done with it: free its data now rather than at the end.
    if (free_batches) quantd::v1::TensorBatch().Swap(&fidelity_batches_[i]);
    Progress(n + 1, total, "");
  }
  return evaluator->Report();
}

std::string QuantizeJob::FidelityNote() const {
  std::vector<std::string> notes;
  if (held_out_ > 0) {
    notes.push_back(
        absl::StrCat("measured on the first ", held_out_,
                     " batches of the stream, held out from calibration"));
  } else if (resolved().method == Method::kStaticRange) {
    // On the corpus this overstated ONNX Runtime on new inputs by up to
    // 12 dB (docs/accuracy.md, "Ranges that hold on unseen data").
    notes.push_back(
        "measured on the batches the activation ranges were fitted to: new "
        "inputs beyond their extremes are clipped, so expect less on unseen "
        "data (holdout_batches measures on batches kept back; auto_headroom "
        "widens the ranges where cross-validation says it pays)");
  }
  if (activation_batches_ > 0) {
    notes.push_back(absl::StrCat(activation_batches_,
                                 " batches of observed activations were not "
                                 "compared (no graph inputs to run)"));
  }
  if (batches_over_budget_ > 0) {
    notes.push_back(absl::StrCat(
        batches_over_budget_, " batches past the first ",
        kFidelityBatchBudgetBytes >> 20,
        " MiB of calibration data were calibrated with but not compared"));
  }
  return absl::StrJoin(notes, "; ");
}

absl::Status QuantizeJob::SearchForTarget() {
  const char* goal =
      config_.has_target_sqnr_db() ? "target_sqnr_db" : "target_agreement";
  if (fidelity_ == nullptr || fidelity_batches_.empty()) {
    std::string why = fidelity_skipped_;
    if (why.empty()) {
      why = batches_received_ == 0
                ? "the ranges came from config.calibration and the call "
                  "carried no calibration batches"
                : "no calibration batch fed the graph inputs";
    }
    return absl::FailedPreconditionError(absl::StrCat(
        goal,
        " needs the quantized model compared with the float "
        "one on calibration batches of graph inputs sent in this call, "
        "but ",
        why));
  }
  using Entry = tensorflow::quantization::UnitWiseQuantizationPrecision;
  const onnx::ModelProto float_model = model_;
  const quantd::v1::QuantizeSummary base = result_.summary;
  const passes::UnitPrecisionEntries user_units = options_.static_range.units;
  absl::flat_hash_set<SearchUnit> excluded;
  for (const Entry& e : user_units) {
    if (e.unit_type() == Entry::UNIT_NODE) {
      excluded.insert(SearchUnit{e.func_name(), e.unit_name()});
    }
  }
  using tensorflow::quantization::QuantizationPrecision;
  // Nodes the search raised, in the order it first raised them, and where
  // each stands now; the others are at the model-wide precision.
  std::vector<SearchUnit> raised;
  absl::flat_hash_map<SearchUnit, QuantizationPrecision> level;
  // Nodes with nothing above them on the ladder.
  absl::flat_hash_set<SearchUnit> at_top;
  const std::vector<SearchPrecision> ladder = SearchLadder(config_);
  auto units_now = [&] {
    passes::UnitPrecisionEntries units = user_units;
    for (const SearchUnit& unit : raised) {
      Entry e;
      e.set_unit_type(Entry::UNIT_NODE);
      e.set_unit_name(unit.name);
      if (!unit.scope.empty()) e.set_func_name(unit.scope);
      e.set_quantization_precision(level[unit]);
      units.push_back(std::move(e));
    }
    return units;
  };

  quantd::v1::AccuracySearch search;
  search.set_target_sqnr_db(config_.target_sqnr_db());
  search.set_target_agreement(config_.target_agreement());
  for (SearchPrecision p : ladder) search.add_allowed_precisions(p);
  // A round meets the goals when each one asked for is met; among rounds
  // that meet none, the best is the one nearest the agreement goal (the
  // task's own terms), then the SQNR goal.
  auto meets = [&](double sqnr, double agreement) {
    return (!config_.has_target_sqnr_db() ||
            sqnr >= config_.target_sqnr_db()) &&
           (!config_.has_target_agreement() ||
            agreement >= config_.target_agreement());
  };
  // Among rounds that meet the goals the smallest model wins.
  auto better = [&](double sqnr, double agreement, uint64_t bytes,
                    double best_sqnr, double best_agreement,
                    uint64_t best_bytes) {
    const bool ok = meets(sqnr, agreement);
    if (ok != meets(best_sqnr, best_agreement)) return ok;
    if (ok && bytes != best_bytes) return bytes < best_bytes;
    if (config_.has_target_agreement() && agreement != best_agreement) {
      return agreement > best_agreement;
    }
    return sqnr > best_sqnr;
  };
  onnx::ModelProto best_model;
  quantd::v1::QuantizeSummary best_summary;
  double best = -std::numeric_limits<double>::infinity();
  double best_agreement = 0;
  uint64_t best_bytes = 0;
  int best_round = -1;
  // Quantizes with the nodes at `level`, measures, records the round (with
  // `changes`, "NODE: PRECISION") and keeps it if it is the best so far.
  // The report comes back for the next choice.
  // Errors are the call's; a round the comparison cannot run on ends the
  // search with what it has (`unmeasurable` says why).
  struct Measured {
    quantd::v1::FidelityReport report;
    bool met = false;
    std::string unmeasurable;
  };
  auto run_round =
      [&](std::vector<std::string> changes) -> absl::StatusOr<Measured> {
    const int round = search.rounds_size();
    std::unique_ptr<FidelityEvaluator> evaluator;
    if (round == 0) {
      evaluator = std::move(fidelity_);
    } else {
      model_ = float_model;
      result_.summary = base;
      options_.static_range.units = units_now();
      QUANTD_ASSIGN_OR_RETURN(
          evaluator,
          FidelityEvaluator::Create(float_model, limits_.max_tensor_elements));
    }
    QUANTD_RETURN_IF_ERROR(Quantize());
    const int64_t total = static_cast<int64_t>(fidelity_batches_.size());
    StartStage(quantd::v1::STAGE_FIDELITY, total,
               absl::StrCat("accuracy search round ", round + 1, ": ",
                            raised.size(), " nodes raised"));
    absl::StatusOr<quantd::v1::FidelityReport> report =
        CompareWithFloat(evaluator.get(), /*free_batches=*/false);
    EndStage();
    if (!report.ok()) {
      QUANTD_RETURN_IF_ERROR(cancel_.Check("fidelity"));
      Measured m;
      m.unmeasurable = std::string(report.status().message());
      return m;
    }
    const double worst = WorstOutputSqnr(*report);
    const double agreement = WorstTop1Agreement(*report);
    if (round == 0 && config_.has_target_agreement() && std::isnan(agreement)) {
      return absl::FailedPreconditionError(
          "target_agreement needs an output with a class axis ([N, classes], "
          "[N, T, classes] or channels-last [N, H, W, classes]) to measure "
          "top-1 agreement on, and this model has none; use target_sqnr_db");
    }
    const uint64_t bytes = model_.ByteSizeLong();
    quantd::v1::AccuracySearchRound* r = search.add_rounds();
    r->set_raised_nodes(static_cast<int32_t>(raised.size()));
    for (std::string& n : changes) r->add_raised_this_round(std::move(n));
    r->set_output_sqnr_db(worst);
    r->set_model_bytes(bytes);
    r->set_top1_agreement(agreement);
    if (best_round < 0 ||
        better(worst, agreement, bytes, best, best_agreement, best_bytes)) {
      best = worst;
      best_agreement = agreement;
      best_bytes = bytes;
      best_round = round;
      best_model = std::move(model_);
      best_summary = result_.summary;
      report->set_batches_received(batches_received_);
      report->set_note(FidelityNote());
      *best_summary.mutable_fidelity() = *report;
      *search.mutable_unit_wise_quantization_precision() = {
          options_.static_range.units.begin(),
          options_.static_range.units.end()};
    }
    return Measured{std::move(*report), meets(worst, agreement), ""};
  };
  auto describe = [](const SearchUnit& n, QuantizationPrecision p) {
    return absl::StrCat(
        n.Describe(), ": ",
        tensorflow::quantization::QuantizationPrecision_Name(p));
  };

  const QuantizationPrecision start = options_.static_range.precision;
  std::string stop;
  QUANTD_ASSIGN_OR_RETURN(Measured measured, run_round({}));
  if (!measured.unmeasurable.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        goal, ": cannot measure the quantized model: ", measured.unmeasurable));
  }
  // Why a later round ended the search.
  auto unmeasurable = [&](const Measured& m) {
    return absl::StrCat("round ", search.rounds_size() + 1,
                        " could not be measured: ", m.unmeasurable);
  };
  bool done = measured.met;
  if (done) stop = "met in round 1 with no node raised";
  quantd::v1::FidelityReport last = std::move(measured.report);

  // A middle rung (W4A8 -> W8A8 below FULL): most layers may take the
  // cheaper one. If every candidate (every Conv / Gemm / MatMul the search
  // may touch, most error-adding first) at the middle rung meets the goals,
  // bisect on how many of the most error-adding ones need it (the rest
  // stay at the request's precision): log2(candidates) rounds for the
  // cheapest such mix. Otherwise the ascending search below starts from
  // there.
  const std::optional<QuantizationPrecision> middle =
      RaisedPrecision(start, ladder);
  if (!done && middle.has_value() &&
      *middle != tensorflow::quantization::PRECISION_FULL) {
    const std::vector<SearchUnit> ranked = PickNodesToRaise(
        float_model.graph(), last, at_top, excluded,
        std::numeric_limits<int>::max(), &options_.static_range.inlined,
        /*noisy_only=*/false);
    auto set_prefix = [&](size_t count) {
      std::vector<std::string> changes;
      for (size_t i = 0; i < ranked.size(); ++i) {
        const QuantizationPrecision want = i < count ? *middle : start;
        const auto it = level.find(ranked[i]);
        const QuantizationPrecision now =
            it == level.end() ? start : it->second;
        if (want != now) changes.push_back(describe(ranked[i], want));
      }
      raised.assign(ranked.begin(), ranked.begin() + count);
      level.clear();
      for (const SearchUnit& n : raised) level[n] = *middle;
      return changes;
    };
    if (!ranked.empty()) {
      QUANTD_ASSIGN_OR_RETURN(measured, run_round(set_prefix(ranked.size())));
      if (!measured.unmeasurable.empty()) {
        stop = unmeasurable(measured);
        done = true;
      } else if (measured.met) {
        // Invariant: `lo` of the ranked nodes at the middle rung falls
        // short, `hi` meets.
        size_t lo = 0, hi = ranked.size();
        while (hi - lo > 1) {
          const size_t mid = lo + (hi - lo) / 2;
          QUANTD_ASSIGN_OR_RETURN(measured, run_round(set_prefix(mid)));
          if (!measured.unmeasurable.empty()) break;
          (measured.met ? hi : lo) = mid;
        }
        // The returned round is the smallest that met, `hi` unless the
        // measure was not monotonic in the count.
        stop = absl::StrCat(
            "met with ", search.rounds(best_round).raised_nodes(), " of ",
            ranked.size(), " nodes at ",
            tensorflow::quantization::QuantizationPrecision_Name(*middle),
            " and the rest at ",
            tensorflow::quantization::QuantizationPrecision_Name(start),
            " (bisected in ", search.rounds_size() - 2, " rounds)");
        done = true;
      } else {
        last = std::move(measured.report);
        for (const SearchUnit& n : ranked) {
          if (!RaisedPrecision(*middle, ladder).has_value()) at_top.insert(n);
        }
      }
    }
  }

  // Ascending: raise the most error-adding nodes one rung, 1, 2, 4, ...
  // more each round, re-ranked on the last round's report.
  for (int step = 1; !done && step <= kAccuracySearchRounds; ++step) {
    const std::vector<SearchUnit> picks =
        PickNodesToRaise(float_model.graph(), last, at_top, excluded,
                         NodesToRaise(step), &options_.static_range.inlined);
    if (picks.empty()) {
      stop = "no quantized Conv, Gemm or MatMul node loses SQNR any more";
      break;
    }
    std::vector<std::string> changes;
    for (const SearchUnit& n : picks) {
      auto [it, first] = level.try_emplace(n, start);
      if (first) raised.push_back(n);
      // PickNodesToRaise leaves out nodes in at_top, so there is a rung
      // above.
      it->second = RaisedPrecision(it->second, ladder)
                       .value_or(tensorflow::quantization::PRECISION_FULL);
      if (!RaisedPrecision(it->second, ladder).has_value()) {
        at_top.insert(n);
      }
      changes.push_back(describe(n, it->second));
    }
    QUANTD_ASSIGN_OR_RETURN(measured, run_round(std::move(changes)));
    if (!measured.unmeasurable.empty()) {
      stop = unmeasurable(measured);
      break;
    }
    if (measured.met) {
      stop = absl::StrCat(
          "met in round ", search.rounds_size(), " with ", raised.size(),
          " nodes raised (", at_top.size(), " to ",
          tensorflow::quantization::QuantizationPrecision_Name(ladder.back()),
          ")");
      break;
    }
    last = std::move(measured.report);
  }
  if (stop.empty()) {
    stop = absl::StrCat("stopped after ", search.rounds_size(),
                        " rounds without meeting the target");
  }
  model_ = std::move(best_model);
  result_.summary = std::move(best_summary);
  search.set_met(meets(best, best_agreement));
  search.set_chosen_round(best_round);
  search.set_note(
      search.met()
          ? stop
          : absl::StrCat(
                stop, "; returning round ", best_round + 1, " (", best, " dB",
                config_.has_target_agreement()
                    ? absl::StrCat(", top-1 agreement ", best_agreement)
                    : "",
                ", the best tried)"));
  *result_.summary.mutable_accuracy_search() = std::move(search);
  std::vector<quantd::v1::TensorBatch>().swap(fidelity_batches_);
  return cancel_.Check("fidelity");
}

absl::Status QuantizeJob::Serialize() {
  StartStage(quantd::v1::STAGE_SERIALIZE, 1,
             "checking and serializing the output model");
  // A half model was quantized computing in float32; its callers still
  // feed and read half tensors.
  graph::RestoreHalfInterface(half_interface_, &model_);
  // Checking the in-memory model is the same as checking its bytes, and
  // lets the model be freed right after serializing.
  std::vector<std::string> validations;
  absl::Status s = graph::ValidateModel(model_, "output model", &validations);
  if (!s.ok()) {
    // The input passed the same checks, so this is our bug.
    return absl::InternalError(
        absl::StrCat("the quantized model fails validation: ", s.message()));
  }
  for (auto& v : validations) result_.summary.add_validations(std::move(v));
  result_.summary.set_output_opset(graph::DefaultOpset(model_));
  // One protobuf message holds at most 2 GB: past that, or when the input
  // came that way, the large tensors leave beside the model.
  if (external_input_ || model_.ByteSizeLong() > graph::kMaxMessageBytes) {
    result_.external =
        graph::DetachExternalData(graph::kExternalMinBytes, &model_);
  }
  QUANTD_ASSIGN_OR_RETURN(std::string bytes,
                          graph::SerializeModel(model_, &cancel_));
  onnx::ModelProto().Swap(&model_);
  result_.model = std::move(bytes);
  result_.summary.set_output_bytes(result_.model.size() +
                                   result_.external.size());
  if (result_.external.empty() && !external_input_ &&
      result_.model.size() == input_size_ &&
      absl::HashOf(absl::string_view(result_.model)) == input_hash_) {
    result_.summary.set_model_unchanged(true);
    result_.summary.set_unchanged_reason(
        "nothing in the model was quantized or rewritten: the output bytes "
        "are the input bytes");
  }
  EndStage();
  return absl::OkStatus();
}

absl::StatusOr<QuantizeResult> QuantizeJob::Run(ModelUpload upload) {
  // Options first: refusing a request should not cost a parse.
  QUANTD_ASSIGN_OR_RETURN(
      options_,
      ResolveQuantizeRequest(config_, calibration_batches_ != nullptr));
  FillOptionWords();
  absl::Status s = Parse(&upload);
  if (!s.ok()) return s;
  if (PassThrough()) {
    quantd::v1::QuantizeSummary& summary = result_.summary;
    summary.set_model_unchanged(true);
    summary.set_unchanged_reason(options_.unchanged_reason);
    summary.set_output_opset(summary.input_opset());
    summary.set_output_bytes(upload.bytes.size() + upload.external.size());
    result_.model = std::move(upload.bytes);
    result_.external = std::move(upload.external);
    return std::move(result_);
  }
  s = Equalize();
  if (s.ok()) s = Calibrate();
  if (s.ok() && !auto_candidates_.empty()) s = ChooseObserver();
  if (HasSearchTarget(config_)) {
    if (s.ok()) s = SearchForTarget();
  } else {
    if (s.ok()) s = Quantize();
    if (s.ok()) s = Fidelity();
  }
  if (s.ok()) s = Serialize();
  if (!s.ok()) return s;
  return std::move(result_);
}

}  // namespace

absl::StatusOr<QuantizeResult> RunQuantize(
    const quantd::v1::QuantizeConfig& config, ModelUpload model,
    const QuantizeEvents& events, const CancellationToken& cancel,
    ThreadPool* pool, BatchQueue* calibration_batches,
    const JobLimits& limits) {
  // Whatever happens, a producer must not wait for room that never comes.
  struct AbortOnExit {
    BatchQueue* q;
    ~AbortOnExit() {
      if (q != nullptr) q->Abort();
    }
  } abort_on_exit{calibration_batches};
  // Running out of memory fails this call, not the process (the job's
  // memory is freed by the unwinding).
  try {
    return QuantizeJob(config, events, cancel, pool, calibration_batches,
                       limits)
        .Run(std::move(model));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "the Quantize job ran out of memory; send a smaller model or smaller "
        "calibration batches, or ask the operator for more memory per call");
  }
}

}  // namespace quantd
