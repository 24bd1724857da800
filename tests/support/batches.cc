#include "tests/support/batches.h"

#include <algorithm>
#include <cstdint>

namespace quantd::testing {

std::vector<quantd::v1::TensorBatch> BatchesOf(const executor::Tensor& x,
                                               int batch) {
  const int64_t n = x.dim(0);
  const int64_t per_sample = n == 0 ? 0 : x.size() / n;
  std::vector<quantd::v1::TensorBatch> out;
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int64_t end = std::min<int64_t>(n, begin + batch);
    quantd::v1::NamedTensor* t = out.emplace_back().add_tensors();
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_shape(end - begin);
    for (int i = 1; i < x.rank(); ++i) t->add_shape(x.dim(i));
    t->set_data(
        reinterpret_cast<const char*>(x.data<float>() + begin * per_sample),
        (end - begin) * per_sample * sizeof(float));
  }
  return out;
}

}  // namespace quantd::testing
