// RunQuantize: one Quantize call from bytes to bytes, stage by stage:
// options -> parse -> validate -> plan -> quantize -> serialize (+ re-check).
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/engine/capabilities.h"
#include "core/engine/engine.h"
#include "core/engine/resolved_options.h"
#include "core/graph/model_io.h"
#include "core/graph/validate.h"
#include "core/passes/dynamic_range_options.h"
#include "core/passes/dynamic_range_pass.h"

namespace quantd {
namespace {

using quantd::v1::Stage;

class QuantizeJob {
 public:
  QuantizeJob(const quantd::v1::QuantizeConfig& config,
              const QuantizeEvents& events, const CancellationToken& cancel,
              ThreadPool* pool)
      : config_(config),
        events_(events),
        cancel_(cancel),
        pool_(pool),
        resolved_(Resolve(config.options())) {}

  absl::StatusOr<QuantizeResult> Run(std::string bytes);

 private:
  bool PassThrough() const {
    return resolved_.method == Method::kNone ||
           resolved_.precision == tensorflow::quantization::PRECISION_FULL;
  }
  std::string UnchangedReason() const;
  absl::Status Parse(std::string* bytes);
  absl::Status Quantize();
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
  const ResolvedOptions resolved_;
  passes::DynamicRangeOptions pass_options_;

  onnx::ModelProto model_;
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

std::string QuantizeJob::UnchangedReason() const {
  if (resolved_.method == Method::kNone) {
    return "no quantization_method set: the model is returned as received "
           "(do not quantize)";
  }
  return "quantization_precision is PRECISION_FULL: every unit stays float";
}

void QuantizeJob::FillOptionWords() {
  quantd::v1::QuantizeSummary& s = result_.summary;
  s.set_method(MethodName(resolved_.method));
  s.set_op_set(OpSetName(resolved_.op_set));
  s.set_precision(PrecisionName(resolved_.precision));
}

absl::Status QuantizeJob::Parse(std::string* bytes) {
  result_.summary.set_input_bytes(bytes->size());
  StartStage(quantd::v1::STAGE_PARSE, 1,
             absl::StrCat("parsing ", bytes->size(), " bytes"));
  absl::StatusOr<onnx::ModelProto> model = graph::ParseModel(*bytes);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  // The parsed model now holds everything; keep at most one copy around
  // unless the bytes are the answer.
  if (!PassThrough()) std::string().swap(*bytes);
  EndStage();
  absl::Status s = cancel_.Check("parse");
  if (!s.ok()) return s;

  StartStage(quantd::v1::STAGE_VALIDATE, 1, "checking the input model");
  std::vector<std::string> validations;
  s = graph::ValidateModel(model_, "input model", &validations);
  if (!s.ok()) return s;
  for (auto& v : validations) result_.summary.add_validations(std::move(v));
  result_.summary.set_input_opset(graph::DefaultOpset(model_));
  EndStage();
  return cancel_.Check("validate");
}

absl::Status QuantizeJob::Quantize() {
  StartStage(quantd::v1::STAGE_PLAN, 1, "choosing the weights to quantize");
  passes::PassHooks hooks;
  hooks.on_planned = [this](int64_t total) {
    EndStage();
    StartStage(quantd::v1::STAGE_QUANTIZE, total,
               absl::StrCat("quantizing ", total, " weights"));
  };
  hooks.on_report = events_.on_tensor_report;
  hooks.on_progress = [this](int64_t done, int64_t total) {
    Progress(done, total, "");
  };
  hooks.check_cancelled = [this] { return cancel_.Check("quantize"); };
  if (pool_ != nullptr) {
    hooks.parallel_for = [this](int64_t n,
                                const std::function<void(int64_t)>& fn) {
      pool_->ParallelFor(n, fn);
    };
    hooks.group_size = pool_->size() + 1;  // The caller works too.
  }
  absl::StatusOr<passes::PassStats> stats =
      passes::RunDynamicRangePass(pass_options_, hooks, &model_);
  if (!stats.ok()) return stats.status();
  EndStage();

  quantd::v1::QuantizeSummary& s = result_.summary;
  s.set_quantized_tensors(stats->quantized_tensors);
  s.set_quantized_nodes(stats->quantized_nodes);
  s.set_skipped_tensors(static_cast<int>(stats->skipped.size()));
  for (auto& skipped : stats->skipped) *s.add_skipped() = std::move(skipped);
  s.set_weight_bytes_before(stats->weight_bytes_before);
  s.set_weight_bytes_after(stats->weight_bytes_after);
  if (!stats->opset_note.empty()) {
    s.add_validations(absl::StrCat("note: ", stats->opset_note));
  }
  return cancel_.Check("quantize");
}

absl::Status QuantizeJob::Serialize() {
  StartStage(quantd::v1::STAGE_SERIALIZE, 1,
             "checking and serializing the output model");
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
  absl::StatusOr<std::string> bytes = graph::SerializeModel(model_);
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto().Swap(&model_);
  result_.model = std::move(*bytes);
  result_.summary.set_output_bytes(result_.model.size());
  EndStage();
  return absl::OkStatus();
}

absl::StatusOr<QuantizeResult> QuantizeJob::Run(std::string bytes) {
  // Options first: refusing a request should not cost a parse.
  absl::Status s = CheckSupported(config_.options());
  if (!s.ok()) return s;
  if (!PassThrough()) {
    absl::StatusOr<passes::DynamicRangeOptions> o =
        passes::ResolveDynamicRangeOptions(config_);
    if (!o.ok()) return o.status();
    pass_options_ = *o;
  }
  FillOptionWords();
  s = Parse(&bytes);
  if (!s.ok()) return s;
  if (PassThrough()) {
    quantd::v1::QuantizeSummary& summary = result_.summary;
    summary.set_model_unchanged(true);
    summary.set_unchanged_reason(UnchangedReason());
    summary.set_output_opset(summary.input_opset());
    summary.set_output_bytes(bytes.size());
    result_.model = std::move(bytes);
    return std::move(result_);
  }
  s = Quantize();
  if (s.ok()) s = Serialize();
  if (!s.ok()) return s;
  return std::move(result_);
}

}  // namespace

absl::StatusOr<QuantizeResult> RunQuantize(
    const quantd::v1::QuantizeConfig& config, std::string model_bytes,
    const QuantizeEvents& events, const CancellationToken& cancel,
    ThreadPool* pool, BatchQueue* calibration_batches) {
  // STATIC_RANGE (the only user of calibration batches) is refused by
  // CheckSupported until the calibration work lands.
  (void)calibration_batches;
  return QuantizeJob(config, events, cancel, pool).Run(std::move(model_bytes));
}

}  // namespace quantd
