#include "tests/support/batches.h"

#include <algorithm>
#include <cstdint>

namespace quantd::testing {

quantd::v1::TensorBatch BatchOf(const executor::Tensor& x, int64_t begin,
                                int64_t end, const std::string& name) {
  const int64_t per_sample = x.dim(0) == 0 ? 0 : x.size() / x.dim(0);
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* t = batch.add_tensors();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_shape(end - begin);
  for (int i = 1; i < x.rank(); ++i) t->add_shape(x.dim(i));
  t->set_data(
      reinterpret_cast<const char*>(x.data<float>() + begin * per_sample),
      (end - begin) * per_sample * sizeof(float));
  return batch;
}

std::vector<quantd::v1::TensorBatch> BatchesOf(const executor::Tensor& x,
                                               int batch) {
  std::vector<quantd::v1::TensorBatch> out;
  for (int64_t begin = 0; begin < x.dim(0); begin += batch) {
    out.push_back(
        BatchOf(x, begin, std::min<int64_t>(x.dim(0), begin + batch)));
  }
  return out;
}

}  // namespace quantd::testing
