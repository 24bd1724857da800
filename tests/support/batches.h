// Calibration batches for core-level tests: a float32 tensor (batch first)
// cut into TensorBatch messages for a model's only input, as a client would
// stream them.
#ifndef QUANTD_TESTS_SUPPORT_BATCHES_H_
#define QUANTD_TESTS_SUPPORT_BATCHES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/executor/tensor.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::testing {

// Samples [begin, end) of `x` as one batch whose tensor is named `name`
// ("" = the model's only input).
quantd::v1::TensorBatch BatchOf(const executor::Tensor& x, int64_t begin,
                                int64_t end, const std::string& name = "");

// `x` in batches of `batch` samples (the last one may be shorter).
std::vector<quantd::v1::TensorBatch> BatchesOf(const executor::Tensor& x,
                                               int batch);

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_BATCHES_H_
