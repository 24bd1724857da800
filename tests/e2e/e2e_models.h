// Models, batches and raw streaming calls shared by the e2e tests that need
// to control a call's timing (lifecycle, limits).
#ifndef QUANTD_TESTS_E2E_E2E_MODELS_H_
#define QUANTD_TESTS_E2E_E2E_MODELS_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The first line of `path` containing every one of `parts`, polled every
// millisecond until `timeout`; nullopt if none showed up.
inline std::optional<std::string> WaitForLine(
    const std::string& path, const std::vector<std::string>& parts,
    absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  do {
    std::istringstream text(ReadAll(path));
    std::string line;
    while (std::getline(text, line)) {
      bool all = true;
      for (const std::string& part : parts) {
        all = all && line.find(part) != std::string::npos;
      }
      if (all) return line;
    }
    absl::SleepFor(absl::Milliseconds(1));
  } while (absl::Now() < end);
  return std::nullopt;
}

// x -> MatMul(W0) -> ... -> MatMul(W{n-1}) -> y, with x [1, dim] and every W
// a dim x dim float initializer of pseudo-random values.
inline std::string MatMulChainModel(int dim, int layers) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("matmul_chain");
  auto add_value = [dim](onnx::ValueInfoProto* value, const std::string& name) {
    value->set_name(name);
    onnx::TypeProto::Tensor* type =
        value->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_value(1);
    type->mutable_shape()->add_dim()->set_dim_value(dim);
  };
  add_value(graph->add_input(), "x");
  uint32_t state = 12345;
  std::string previous = "x";
  for (int i = 0; i < layers; ++i) {
    const std::string w = "W" + std::to_string(i);
    const std::string out = i + 1 == layers ? "y" : "h" + std::to_string(i);
    onnx::TensorProto* init = graph->add_initializer();
    init->set_name(w);
    init->set_data_type(onnx::TensorProto::FLOAT);
    init->add_dims(dim);
    init->add_dims(dim);
    std::string* raw = init->mutable_raw_data();
    raw->resize(sizeof(float) * dim * dim);
    float* values = reinterpret_cast<float*>(raw->data());
    for (int64_t k = 0; k < int64_t{dim} * dim; ++k) {
      state = state * 1664525u + 1013904223u;
      values[k] = (static_cast<float>(state >> 8) / (1 << 24) - 0.5f) * 0.1f;
    }
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type("MatMul");
    node->set_name("matmul" + std::to_string(i));
    node->add_input(previous);
    node->add_input(w);
    node->add_output(out);
    previous = out;
  }
  add_value(graph->add_output(), "y");
  return model.SerializeAsString();
}

inline quantd::v1::TensorBatch InputBatch(int dim) {
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* x = batch.add_tensors();
  x->set_name("x");
  x->set_data_type(onnx::TensorProto::FLOAT);
  x->add_shape(1);
  x->add_shape(dim);
  std::vector<float> values(dim);
  for (int i = 0; i < dim; ++i) values[i] = 0.01f * (i - dim / 2);
  x->set_data(values.data(), values.size() * sizeof(float));
  return batch;
}

inline quantd::v1::QuantizeConfig DynamicRangeConfig() {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(
          tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE);
  return config;
}

inline std::unique_ptr<quantd::v1::QuantizationService::Stub> RawStub(
    const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(16 << 20);
  return quantd::v1::QuantizationService::NewStub(grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args));
}

// A sample of `name` from /metrics (the first series whose labels contain
// `labels`, e.g. "op_set=\"TF\""); -1 when absent.
inline double MetricValue(int metrics_port, const std::string& name,
                          const std::string& labels = "") {
  const std::string body = HttpGet(metrics_port, "/metrics");
  std::istringstream lines(body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const std::string rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != ' ' && rest[0] != '{')) continue;
    if (!labels.empty() && rest.find(labels) == std::string::npos) continue;
    const size_t space = rest.rfind(' ');
    if (space == std::string::npos) continue;
    return std::stod(rest.substr(space + 1));
  }
  return -1;
}

// Polls MetricValue until it equals `value` or `timeout`; true if it did.
inline bool WaitForMetric(int metrics_port, const std::string& name,
                          double value, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  do {
    if (MetricValue(metrics_port, name) == value) return true;
    absl::SleepFor(absl::Milliseconds(5));
  } while (absl::Now() < end);
  return false;
}

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_E2E_E2E_MODELS_H_
