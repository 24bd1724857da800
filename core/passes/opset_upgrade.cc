#include "core/passes/opset_upgrade.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/graph/model_io.h"
#include "onnx/version_converter/convert.h"

namespace quantd::passes {
namespace {

// IR version 7 came with opset 13; newer opsets in an older IR version are
// refused by the checker.
int64_t MinIrVersionFor(int64_t opset) { return opset >= 13 ? 7 : 6; }

// Moves every initializer's values out of `graph`, leaving name, type and
// dims, so a copy of the graph costs little.
std::vector<onnx::TensorProto> StashInitializerData(onnx::GraphProto* graph) {
  std::vector<onnx::TensorProto> stash(graph->initializer_size());
  for (int i = 0; i < graph->initializer_size(); ++i) {
    onnx::TensorProto* t = graph->mutable_initializer(i);
    stash[i].Swap(t);
    t->set_name(stash[i].name());
    t->set_data_type(stash[i].data_type());
    *t->mutable_dims() = stash[i].dims();
  }
  return stash;
}

// Puts stashed values back into the initializers of the same name (the
// converter may have added or dropped some; new ones keep their values).
void RestoreInitializerData(std::vector<onnx::TensorProto> stash,
                            onnx::GraphProto* graph) {
  absl::flat_hash_map<std::string, onnx::TensorProto*> by_name;
  for (auto& t : *graph->mutable_initializer()) by_name[t.name()] = &t;
  for (auto& saved : stash) {
    auto it = by_name.find(saved.name());
    if (it != by_name.end()) it->second->Swap(&saved);
  }
}

}  // namespace

absl::Status ConvertOpset(onnx::ModelProto* model, int64_t target) {
  std::vector<onnx::TensorProto> stash =
      StashInitializerData(model->mutable_graph());
  onnx::ModelProto converted;
  std::string error;
  try {
    converted = onnx::version_conversion::ConvertVersion(
        *model, static_cast<int>(target));
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    RestoreInitializerData(std::move(stash), model->mutable_graph());
    return absl::InvalidArgumentError(error);
  }
  model->Swap(&converted);
  RestoreInitializerData(std::move(stash), model->mutable_graph());
  if (model->ir_version() < MinIrVersionFor(target)) {
    model->set_ir_version(MinIrVersionFor(target));
  }
  return absl::OkStatus();
}

absl::StatusOr<OpsetOutcome> EnsureOpset(onnx::ModelProto* model,
                                         int64_t needed) {
  OpsetOutcome out;
  out.from = graph::DefaultOpset(*model);
  out.to = out.from;
  if (out.from >= needed) return out;
  absl::Status converted = ConvertOpset(model, needed);
  if (converted.ok()) {
    out.mode = OpsetOutcome::kUpgraded;
    out.to = graph::DefaultOpset(*model);
    out.note = absl::StrCat("opset upgraded from ", out.from, " to ", out.to,
                            " with the ONNX version converter (",
                            needed == kPerChannelOpset
                                ? "per-channel DequantizeLinear needs 13"
                                : "DynamicQuantizeLinear needs 11",
                            ")");
    return out;
  }
  if (out.from >= kDynamicQuantizeOpset) {
    out.mode = OpsetOutcome::kPerTensorFallback;
    out.note = absl::StrCat(
        "per-tensor scales: per-channel DequantizeLinear needs opset 13, the "
        "model has ",
        out.from, " and the ONNX version converter could not upgrade it (",
        converted.message(), ")");
    return out;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the model's default opset is ", out.from,
      "; DYNAMIC_RANGE needs opset >= 11 (DynamicQuantizeLinear) and the "
      "ONNX version converter could not upgrade it to ",
      needed, ": ", converted.message(),
      ". Export the model with opset 13 or newer"));
}

}  // namespace quantd::passes
