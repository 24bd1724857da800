// Limits on what one job may ask of core, set by whoever runs core (the
// server fills them from its flags). Core checks them right after parsing a
// model, before any other work, so an oversized model costs one parse.
#ifndef QUANTD_CORE_ENGINE_LIMITS_H_
#define QUANTD_CORE_ENGINE_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace quantd {

struct JobLimits {
  // Most elements one tensor may have: every initializer, Constant (or other
  // tensor-valued attribute) and declared graph input (its known dims), in
  // the main graph, subgraphs and functions. The executor materializes such
  // tensors as float, so this bounds the memory one of them can take.
  // Calibration batch tensors are held to it too (their symbolic dims are
  // otherwise unbounded). 0: no limit.
  int64_t max_tensor_elements = 0;
  // Most nodes in the model, counting subgraphs and functions. 0: no limit.
  int64_t max_graph_nodes = 0;
  // Most bytes the calibration observers of one call may hold: a histogram
  // observer (percentile, mse, entropy) holds num_bins counts (twice) per
  // tensor, and per channel too when per_channel, so a batch with many
  // channels can ask for gigabytes. Charged before an observer allocates;
  // over it, the call fails with RESOURCE_EXHAUSTED naming the tensor.
  // The default fits thousands of per-tensor histograms or a few large
  // per-channel ones. 0: no limit.
  int64_t max_observer_memory_bytes = int64_t{256} << 20;
};

// INVALID_ARGUMENT naming the first tensor over limits.max_tensor_elements
// (with its element count), or the node count when over
// limits.max_graph_nodes; OK otherwise.
absl::Status CheckJobLimits(const onnx::ModelProto& model,
                            const JobLimits& limits);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_LIMITS_H_
