// End to end: a corpus of malformed models, options and request sequences,
// each with the status code and message fragment it must get from the real
// quantd binary (issue 14). After every case the server must answer
// GetServerInfo; after the whole corpus its idle RSS must be back within 10%
// (+8 MiB) of the baseline measured after a first pass.
//
// A case that runs a call the core must finish (the 100k-node chain, the
// all-zero weights) expects OK: valid input is part of the corpus because a
// check that refuses it is as wrong as one that lets garbage through.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/graph/external_stream.h"
#include "core/graph/tensor_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "tests/e2e/e2e_models.h"
#include "tests/e2e/raw_call.h"
#include "tests/support/sanitizers.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {
namespace {

using quantd::v1::CalibrateConfig;
using quantd::v1::CalibrateRequest;
using quantd::v1::QuantizeConfig;
using quantd::v1::QuantizeRequest;
using quantd::v1::TensorBatch;
using tensorflow::quantization::QuantizationMethod;
using tensorflow::quantization::UnitWiseQuantizationPrecision;
using ::testing::HasSubstr;
using Code = grpc::StatusCode;

constexpr int kDim = 8;

// kDim: weights of 64 values, below the 1024 the passes quantize by default;
// kWideDim: weights of 1024 values, which they quantize.
constexpr int kWideDim = 32;

onnx::ModelProto BaseModel(int dim) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(MatMulChainModel(dim, 2)));
  return m;
}

// The base model with `edit` applied.
std::string Edited(const std::function<void(onnx::ModelProto*)>& edit,
                   int dim = kDim) {
  onnx::ModelProto m = BaseModel(dim);
  edit(&m);
  return m.SerializeAsString();
}

onnx::TensorProto* W0(onnx::ModelProto* m) {
  return m->mutable_graph()->mutable_initializer(0);
}

float* W0Values(onnx::ModelProto* m) {
  return reinterpret_cast<float*>(W0(m)->mutable_raw_data()->data());
}

// x -> Relu -> ... -> Relu -> y, `n` nodes: deep enough to overflow the
// stack of any walk that recurses once per node.
std::string ReluChain(int n) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("chain");
  auto typed = [](onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(1);
    t->mutable_shape()->add_dim()->set_dim_value(kDim);
  };
  typed(g->add_input(), "x");
  std::string previous = "x";
  for (int i = 0; i < n; ++i) {
    onnx::NodeProto* node = g->add_node();
    node->set_op_type("Relu");
    node->add_input(previous);
    previous = i + 1 == n ? "y" : absl::StrCat("t", i);
    node->add_output(previous);
  }
  typed(g->add_output(), "y");
  return m.SerializeAsString();
}

QuantizeConfig StaticConfig() {
  QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(QuantizationMethod::STATIC_RANGE);
  return config;
}

TensorBatch Batch(const std::string& name, int32_t type,
                  const std::vector<int64_t>& shape, size_t bytes) {
  TensorBatch batch;
  quantd::v1::NamedTensor* t = batch.add_tensors();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : shape) t->add_shape(d);
  t->set_data(std::string(bytes, '\0'));
  return batch;
}

TensorBatch NanBatch() {
  TensorBatch batch = InputBatch(kDim);
  float* v = reinterpret_cast<float*>(
      batch.mutable_tensors(0)->mutable_data()->data());
  for (int i = 0; i < kDim; ++i) v[i] = std::nanf("");
  return batch;
}

struct Case {
  std::string name;
  Code code;
  std::string fragment;  // Must appear in the status message ("" for OK).
  std::function<grpc::Status()> send;
};

class HostileCorpusE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = tmp_.File("quantd.err");
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--max_model_bytes=67108864",
                                 "--max_tensor_elements=4194304"},
        QUANTD_SERVER_BIN, log_);
    ASSERT_TRUE(server_->ok()) << server_->startup_output() << ReadAll(log_);
    stub_ = RawStub(server_->target());
    model_ = MatMulChainModel(kDim, 2);
  }

  auto QuantizeStarter() {
    return [this](grpc::ClientContext* c) { return stub_->Quantize(c); };
  }
  auto CalibrateStarter() {
    return [this](grpc::ClientContext* c) { return stub_->Calibrate(c); };
  }

  // Quantize `model` with `config`, then the extra `requests`.
  grpc::Status Quantize(const std::string& model, const QuantizeConfig& config,
                        const std::vector<QuantizeRequest>& requests = {}) {
    QuantizeCall call(QuantizeStarter(), config, model, absl::Seconds(60));
    for (const auto& r : requests) call.Write(r);
    return call.Finish();
  }
  grpc::Status Dynamic(const std::string& model) {
    return Quantize(model, DynamicRangeConfig());
  }
  grpc::Status StaticWith(const TensorBatch& batch,
                          QuantizeConfig config = StaticConfig()) {
    QuantizeRequest r;
    *r.mutable_calibration_batch() = batch;
    return Quantize(model_, config, {r});
  }
  grpc::Status Calibrate(const std::vector<TensorBatch>& batches,
                         CalibrateConfig config = {},
                         const std::string* model = nullptr) {
    if (config.method().empty()) config.set_method("min_max");
    CalibrateCall call(CalibrateStarter(), config,
                       model != nullptr ? *model : model_, absl::Seconds(60));
    for (const auto& b : batches) {
      CalibrateRequest r;
      *r.mutable_batch() = b;
      call.Write(r);
    }
    return call.Finish();
  }
  // A Quantize stream of raw messages, config included (or not).
  grpc::Status RawQuantize(const std::vector<QuantizeRequest>& requests) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    auto stream = stub_->Quantize(&context);
    for (const auto& r : requests) {
      if (!stream->Write(r)) break;
    }
    stream->WritesDone();
    quantd::v1::QuantizeResponse response;
    while (stream->Read(&response)) {
    }
    return stream->Finish();
  }
  grpc::Status RawCalibrate(const std::vector<CalibrateRequest>& requests) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    auto stream = stub_->Calibrate(&context);
    for (const auto& r : requests) {
      if (!stream->Write(r)) break;
    }
    stream->WritesDone();
    quantd::v1::CalibrateResponse response;
    while (stream->Read(&response)) {
    }
    return stream->Finish();
  }

  bool Serving() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    quantd::v1::ServerInfo info;
    return stub_
        ->GetServerInfo(&context, quantd::v1::GetServerInfoRequest(), &info)
        .ok();
  }

  std::vector<Case> Corpus();

  TempDir tmp_;
  std::string log_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub_;
  std::string model_;
};

QuantizeRequest ConfigMessage(const QuantizeConfig& config) {
  QuantizeRequest r;
  *r.mutable_config() = config;
  return r;
}
QuantizeRequest ChunkMessage(const std::string& bytes) {
  QuantizeRequest r;
  r.set_model_chunk(bytes);
  return r;
}
QuantizeRequest ExternalMessage(const std::string& bytes) {
  QuantizeRequest r;
  r.set_external_data_chunk(bytes);
  return r;
}

// `model` sent with external data: every tensor's bytes in the stream.
struct Streamed {
  std::string model;
  std::string external;
};
Streamed WithExternalData(
    const std::string& model,
    const std::function<void(onnx::ModelProto*)>& edit = nullptr) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(model));
  quantd::graph::ExternalDataStream stream =
      quantd::graph::DetachExternalData(1, &m);
  if (edit) edit(&m);
  Streamed out;
  out.model = m.SerializeAsString();
  for (const std::string& p : stream.pieces()) out.external += p;
  return out;
}

std::vector<Case> HostileCorpusE2eTest::Corpus() {
  std::vector<Case> c;
  auto model_case = [&](std::string name, Code code, std::string fragment,
                        std::function<void(onnx::ModelProto*)> edit,
                        int dim = kDim) {
    std::string bytes = Edited(edit, dim);
    c.push_back({std::move(name), code, std::move(fragment),
                 [this, bytes] { return Dynamic(bytes); }});
  };
  auto static_model_case = [&](std::string name, Code code,
                               std::string fragment,
                               std::function<void(onnx::ModelProto*)> edit) {
    std::string bytes = Edited(edit);
    c.push_back({std::move(name), code, std::move(fragment), [this, bytes] {
                   QuantizeRequest r;
                   *r.mutable_calibration_batch() = InputBatch(kDim);
                   return Quantize(bytes, StaticConfig(), {r});
                 }});
  };
  auto options_case = [&](std::string name, Code code, std::string fragment,
                          std::function<void(QuantizeConfig*)> edit,
                          QuantizeConfig base = DynamicRangeConfig()) {
    edit(&base);
    c.push_back({std::move(name), code, std::move(fragment),
                 [this, base] { return Quantize(model_, base); }});
  };
  auto calibrate_case = [&](std::string name, Code code, std::string fragment,
                            std::vector<TensorBatch> batches,
                            CalibrateConfig config = {}) {
    c.push_back(
        {std::move(name), code, std::move(fragment),
         [this, batches, config] { return Calibrate(batches, config); }});
  };
  const std::string base = MatMulChainModel(kDim, 2);

  // --- Model bytes.
  c.push_back({"empty model", Code::INVALID_ARGUMENT,
               "model_size_bytes is required", [this] { return Dynamic(""); }});
  c.push_back({"random bytes", Code::INVALID_ARGUMENT, "parse", [this] {
                 std::string junk(4096, '\0');
                 uint32_t s = 7;
                 for (char& ch : junk) {
                   s = s * 1664525u + 1013904223u;
                   ch = static_cast<char>(s >> 24);
                 }
                 return Dynamic(junk);
               }});
  c.push_back(
      {"truncated to half", Code::INVALID_ARGUMENT, "parse",
       [this, base] { return Dynamic(base.substr(0, base.size() / 2)); }});
  c.push_back({"one byte short", Code::INVALID_ARGUMENT, "parse", [this, base] {
                 return Dynamic(base.substr(0, base.size() - 1));
               }});
  c.push_back(
      {"text instead of protobuf", Code::INVALID_ARGUMENT, "parse",
       [this] { return Dynamic("ir_version: 8\ngraph { name: 'g' }\n"); }});

  // --- Tensors.
  model_case("dims whose product overflows", Code::INVALID_ARGUMENT, "2^63",
             [](onnx::ModelProto* m) {
               W0(m)->set_dims(0, int64_t{1} << 40);
               W0(m)->set_dims(1, int64_t{1} << 40);
             });
  model_case("negative dim", Code::INVALID_ARGUMENT, "negative dim",
             [](onnx::ModelProto* m) { W0(m)->set_dims(0, -8); });
  model_case(
      "short raw data", Code::INVALID_ARGUMENT, "raw_data has 10 bytes",
      [](onnx::ModelProto* m) { W0(m)->mutable_raw_data()->resize(10); });
  model_case(
      "long raw data", Code::INVALID_ARGUMENT, "expected 256",
      [](onnx::ModelProto* m) { W0(m)->mutable_raw_data()->append("x"); });
  model_case("typed data of the wrong count", Code::INVALID_ARGUMENT,
             "data field has 3 entries", [](onnx::ModelProto* m) {
               W0(m)->clear_raw_data();
               for (int i = 0; i < 3; ++i) W0(m)->add_float_data(1.0F);
             });
  model_case("element type no ONNX type", Code::INVALID_ARGUMENT,
             "element type 77",
             [](onnx::ModelProto* m) { W0(m)->set_data_type(77); });
  model_case("element type UNDEFINED", Code::INVALID_ARGUMENT, "element type 0",
             [](onnx::ModelProto* m) { W0(m)->set_data_type(0); });
  model_case("graph input of type 99", Code::INVALID_ARGUMENT,
             "element type 99", [](onnx::ModelProto* m) {
               m->mutable_graph()
                   ->mutable_input(0)
                   ->mutable_type()
                   ->mutable_tensor_type()
                   ->set_elem_type(99);
             });
  model_case("external data", Code::INVALID_ARGUMENT, "never opens",
             [](onnx::ModelProto* m) {
               W0(m)->clear_raw_data();
               W0(m)->set_data_location(onnx::TensorProto::EXTERNAL);
               auto* e = W0(m)->add_external_data();
               e->set_key("location");
               e->set_value("../../../../etc/passwd");
             });
  model_case("external data entries without the location flag",
             Code::INVALID_ARGUMENT, "never opens", [](onnx::ModelProto* m) {
               auto* e = W0(m)->add_external_data();
               e->set_key("location");
               e->set_value("/proc/self/mem");
             });
  model_case("sparse initializer", Code::UNIMPLEMENTED, "sparse",
             [](onnx::ModelProto* m) {
               auto* s = m->mutable_graph()->add_sparse_initializer();
               s->mutable_values()->set_name("s");
               s->mutable_values()->set_data_type(onnx::TensorProto::FLOAT);
               s->add_dims(4);
             });
  model_case("segmented tensor", Code::INVALID_ARGUMENT, "segment",
             [](onnx::ModelProto* m) {
               W0(m)->mutable_segment()->set_begin(0);
               W0(m)->mutable_segment()->set_end(4);
             });
  // Weights the passes quantize must be finite: a NaN or infinity has no
  // place on an integer grid (documented in docs/reliability.md). Small
  // weights the passes leave float are passed through as they are.
  model_case(
      "NaN weights", Code::INVALID_ARGUMENT, "NaN",
      [](onnx::ModelProto* m) { W0Values(m)[5] = std::nanf(""); }, kWideDim);
  model_case(
      "Inf weights", Code::INVALID_ARGUMENT, "finite",
      [](onnx::ModelProto* m) {
        W0Values(m)[0] = std::numeric_limits<float>::infinity();
      },
      kWideDim);
  model_case("NaN in a weight left float", Code::OK, "",
             [](onnx::ModelProto* m) { W0Values(m)[5] = std::nanf(""); });
  model_case(
      "all-zero weights are valid", Code::OK, "",
      [](onnx::ModelProto* m) {
        std::fill_n(W0Values(m), kWideDim * kWideDim, 0.0F);
      },
      kWideDim);
  model_case("Constant of the wrong size", Code::INVALID_ARGUMENT,
             "raw_data has 3 bytes", [](onnx::ModelProto* m) {
               onnx::NodeProto* k = m->mutable_graph()->add_node();
               k->set_op_type("Constant");
               k->add_output("k");
               auto* a = k->add_attribute();
               a->set_name("value");
               a->set_type(onnx::AttributeProto::TENSOR);
               a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
               a->mutable_t()->add_dims(2);
               a->mutable_t()->set_raw_data("abc");
             });

  // --- Graph structure.
  model_case("cycle", Code::INVALID_ARGUMENT, "cycle", [](onnx::ModelProto* m) {
    m->mutable_graph()->mutable_node(0)->set_input(0, "y");
  });
  model_case("dangling input", Code::INVALID_ARGUMENT, "nowhere",
             [](onnx::ModelProto* m) {
               m->mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
             });
  model_case("two nodes write one tensor", Code::INVALID_ARGUMENT,
             "'h0' has been used as output names multiple times",
             [](onnx::ModelProto* m) {
               m->mutable_graph()->mutable_node(1)->set_output(0, "h0");
             });
  model_case("initializer defined twice", Code::INVALID_ARGUMENT,
             "W0 initializer name is not unique", [](onnx::ModelProto* m) {
               *m->mutable_graph()->add_initializer() = *W0(m);
             });
  model_case("output nothing produces", Code::INVALID_ARGUMENT, "not produced",
             [](onnx::ModelProto* m) {
               m->mutable_graph()->mutable_output(0)->set_name("ghost");
             });
  model_case("graph input without type", Code::INVALID_ARGUMENT,
             "'type' of 'value_info' is required", [](onnx::ModelProto* m) {
               m->mutable_graph()->mutable_input(0)->clear_type();
             });
  model_case("node without op_type", Code::INVALID_ARGUMENT, "op_type",
             [](onnx::ModelProto* m) {
               m->mutable_graph()->mutable_node(0)->clear_op_type();
             });
  model_case("unknown op", Code::INVALID_ARGUMENT, "NoSuchOp",
             [](onnx::ModelProto* m) {
               m->mutable_graph()->mutable_node(1)->set_op_type("NoSuchOp");
             });
  model_case("attribute declared FLOAT holding an INT", Code::INVALID_ARGUMENT,
             "declared FLOAT", [](onnx::ModelProto* m) {
               auto* a = m->mutable_graph()->mutable_node(0)->add_attribute();
               a->set_name("alpha");
               a->set_type(onnx::AttributeProto::FLOAT);
               a->set_i(3);
             });
  model_case("attribute with two values", Code::INVALID_ARGUMENT,
             "value fields", [](onnx::ModelProto* m) {
               auto* a = m->mutable_graph()->mutable_node(0)->add_attribute();
               a->set_name("alpha");
               a->set_type(onnx::AttributeProto::INT);
               a->set_i(3);
               a->add_ints(4);
             });
  // 33 graphs nested in If bodies, the innermost empty: the deepest
  // protobuf's recursion limit parses, one past quantd's bound.
  model_case("graphs nested 33 deep", Code::INVALID_ARGUMENT,
             "nested 33 graphs deep", [](onnx::ModelProto* m) {
               onnx::NodeProto* node = m->mutable_graph()->add_node();
               node->set_op_type("If");
               node->add_input("x");
               node->add_output("unused");
               for (int d = 0; d < 33; ++d) {
                 auto* a = node->add_attribute();
                 a->set_name("then_branch");
                 a->set_type(onnx::AttributeProto::GRAPH);
                 onnx::GraphProto* body = a->mutable_g();
                 body->set_name(absl::StrCat("body", d));
                 if (d == 32) break;
                 node = body->add_node();
                 node->set_op_type("If");
               }
             });
  model_case("graphs nested 40 deep", Code::INVALID_ARGUMENT,
             "nested deeper than protobuf's limit", [](onnx::ModelProto* m) {
               onnx::NodeProto* node = m->mutable_graph()->add_node();
               node->set_op_type("If");
               for (int d = 0; d < 40; ++d) {
                 auto* a = node->add_attribute();
                 a->set_name("then_branch");
                 a->set_type(onnx::AttributeProto::GRAPH);
                 node = a->mutable_g()->add_node();
                 node->set_op_type("If");
               }
             });
  model_case("megabyte node name", Code::INVALID_ARGUMENT, "1048576 bytes",
             [](onnx::ModelProto* m) {
               m->mutable_graph()->mutable_node(0)->set_name(
                   std::string(1 << 20, 'n'));
             });
  model_case("megabyte tensor name", Code::INVALID_ARGUMENT, "1048576 bytes",
             [](onnx::ModelProto* m) {
               const std::string big(1 << 20, 't');
               m->mutable_graph()->mutable_node(0)->set_output(0, big);
               m->mutable_graph()->mutable_node(1)->set_input(0, big);
             });
  c.push_back({"100k-node chain", Code::OK, "",
               [this] { return Dynamic(ReluChain(100000)); }});
  c.push_back({"100k-node chain calibrated", Code::OK, "", [this] {
                 const std::string chain = ReluChain(100000);
                 return Calibrate({InputBatch(kDim)}, {}, &chain);
               }});
  // ONNX 1.12's EyeLike inference dereferenced the null type of a value
  // inference could not type (a Trilu of a vector): this model passes
  // onnx.checker and crashed the server in Calibrate (fuzzer, 2026-12-04).
  c.push_back({"EyeLike of an untyped value, calibrated",
               Code::INVALID_ARGUMENT, "Trilu", [this] {
                 const std::string model = Edited([](onnx::ModelProto* m) {
                   m->mutable_opset_import(0)->set_version(14);
                   onnx::GraphProto* g = m->mutable_graph();
                   auto add = [g](const char* op, const char* in,
                                  const char* out) {
                     onnx::NodeProto* n = g->add_node();
                     n->set_op_type(op);
                     n->set_name(out);
                     n->add_input(in);
                     n->add_output(out);
                     return n;
                   };
                   auto int_attr = [](onnx::NodeProto* n, const char* name,
                                      int64_t value) {
                     onnx::AttributeProto* a = n->add_attribute();
                     a->set_name(name);
                     a->set_type(onnx::AttributeProto::INT);
                     a->set_i(value);
                   };
                   int_attr(add("Flatten", "y", "flat"), "axis", 0);
                   add("Squeeze", "flat", "vec");
                   add("Trilu", "vec", "tri");
                   int_attr(add("EyeLike", "tri", "eye"), "dtype",
                            onnx::TensorProto::FLOAT);
                   onnx::ValueInfoProto* out = g->add_output();
                   out->set_name("eye");
                   auto* type = out->mutable_type()->mutable_tensor_type();
                   type->set_elem_type(onnx::TensorProto::FLOAT);
                   type->mutable_shape()->add_dim()->set_dim_param("n");
                 });
                 return Calibrate({InputBatch(kDim)}, {}, &model);
               }});

  // Models on which libonnx 1.12's shape inference divided by zero or read
  // out of bounds; each killed the server in a DYNAMIC_RANGE call (a probe
  // of every ONNX schema, 2026-12-04). The second one passes onnx.checker
  // and went through the version converter's own inference.
  auto typed = [](onnx::ValueInfoProto* v, const char* name, int32_t type,
                  std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    t->mutable_shape();  // A scalar has a shape with no dims.
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  model_case("Mul of an empty shape and one value (data propagation)", Code::OK,
             "", [typed](onnx::ModelProto* m) {
               m->mutable_opset_import(0)->set_version(17);
               onnx::GraphProto* g = m->mutable_graph();
               typed(g->add_input(), "scalar", onnx::TensorProto::FLOAT, {});
               onnx::TensorProto* five = g->add_initializer();
               five->set_name("five");
               five->set_data_type(onnx::TensorProto::INT64);
               five->add_dims(1);
               five->add_int64_data(5);
               onnx::NodeProto* shape = g->add_node();
               shape->set_op_type("Shape");
               shape->add_input("scalar");
               shape->add_output("no_dims");
               onnx::NodeProto* mul = g->add_node();
               mul->set_op_type("Mul");
               mul->add_input("no_dims");
               mul->add_input("five");
               mul->add_output("product");
               typed(g->add_output(), "product", onnx::TensorProto::INT64, {1});
             });
  model_case(
      "AveragePool with strides 0 at opset 11 (version converter)", Code::OK,
      "", [typed](onnx::ModelProto* m) {
        m->mutable_opset_import(0)->set_version(11);
        onnx::GraphProto* g = m->mutable_graph();
        typed(g->add_input(), "image", onnx::TensorProto::FLOAT, {1, 1, 4, 4});
        onnx::NodeProto* pool = g->add_node();
        pool->set_op_type("AveragePool");
        pool->add_input("image");
        pool->add_output("pooled");
        for (const char* name : {"kernel_shape", "strides"}) {
          onnx::AttributeProto* a = pool->add_attribute();
          a->set_name(name);
          a->set_type(onnx::AttributeProto::INTS);
          a->add_ints(name[0] == 'k' ? 1 : 0);
          a->add_ints(name[0] == 'k' ? 1 : 0);
        }
        typed(g->add_output(), "pooled", onnx::TensorProto::FLOAT,
              {1, 1, 4, 4});
      });

  // libonnx's SplitToSequence inference divided by a known scalar split of
  // 0 (SIGFPE): in the version converter here, in calibration otherwise.
  model_case(
      "SplitToSequence with a split of 0 at opset 11 (inference)", Code::OK, "",
      [typed](onnx::ModelProto* m) {
        m->mutable_opset_import(0)->set_version(11);
        onnx::GraphProto* g = m->mutable_graph();
        typed(g->add_input(), "cube", onnx::TensorProto::FLOAT, {3, 4, 5});
        onnx::NodeProto* zero = g->add_node();
        zero->set_op_type("Constant");
        zero->add_output("zero");
        onnx::AttributeProto* value = zero->add_attribute();
        value->set_name("value");
        value->set_type(onnx::AttributeProto::TENSOR);
        value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
        value->mutable_t()->add_int64_data(0);
        onnx::NodeProto* split = g->add_node();
        split->set_op_type("SplitToSequence");
        split->add_input("cube");
        split->add_input("zero");
        split->add_output("pieces");
        onnx::NodeProto* count = g->add_node();
        count->set_op_type("SequenceLength");
        count->add_input("pieces");
        count->add_output("count");
        typed(g->add_output(), "count", onnx::TensorProto::INT64, {});
      });

  // A Loop with no trip count whose body passes its condition through
  // unchanged never stops; each iteration stacks a [4096, 8] scan output.
  // Calibration grew it until memory ran out (the probe, 2026-12-04): now the
  // stack is held to --max_tensor_elements.
  c.push_back(
      {"Loop that never stops, stacking a scan output, calibrated",
       Code::RESOURCE_EXHAUSTED, "the most a scan output may stack", [this] {
         const std::string model = Edited([](onnx::ModelProto* m) {
           onnx::GraphProto* g = m->mutable_graph();
           onnx::TensorProto* go = g->add_initializer();
           go->set_name("go");
           go->set_data_type(onnx::TensorProto::BOOL);
           go->add_int32_data(1);
           onnx::TensorProto* rows = g->add_initializer();
           rows->set_name("rows_shape");
           rows->set_data_type(onnx::TensorProto::INT64);
           rows->add_dims(2);
           rows->add_int64_data(4096);
           rows->add_int64_data(kDim);
           onnx::NodeProto* loop = g->add_node();
           loop->set_op_type("Loop");
           loop->set_name("endless");
           loop->add_input("");
           loop->add_input("go");
           loop->add_output("stacked");
           onnx::AttributeProto* body = loop->add_attribute();
           body->set_name("body");
           body->set_type(onnx::AttributeProto::GRAPH);
           onnx::GraphProto* b = body->mutable_g();
           b->set_name("endless_body");
           auto scalar = [](onnx::ValueInfoProto* v, const char* name,
                            int32_t type) {
             v->set_name(name);
             v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
             v->mutable_type()->mutable_tensor_type()->mutable_shape();
           };
           scalar(b->add_input(), "i", onnx::TensorProto::INT64);
           scalar(b->add_input(), "keep_going", onnx::TensorProto::BOOL);
           scalar(b->add_output(), "still_going", onnx::TensorProto::BOOL);
           b->add_output()->set_name("row");
           b->mutable_output(1)
               ->mutable_type()
               ->mutable_tensor_type()
               ->set_elem_type(onnx::TensorProto::FLOAT);
           onnx::NodeProto* keep = b->add_node();
           keep->set_op_type("Identity");
           keep->add_input("keep_going");
           keep->add_output("still_going");
           onnx::NodeProto* expand = b->add_node();
           expand->set_op_type("Expand");
           expand->add_input("x");
           expand->add_input("rows_shape");
           expand->add_output("row");
           g->add_output()->set_name("stacked");
           auto* stacked =
               g->mutable_output(1)->mutable_type()->mutable_tensor_type();
           stacked->set_elem_type(onnx::TensorProto::FLOAT);
           for (int d = 0; d < 3; ++d) {
             stacked->mutable_shape()->add_dim()->set_dim_param(
                 absl::StrCat("d", d));
           }
         });
         return Calibrate({InputBatch(kDim)}, {}, &model);
       }});

  // Expand to 2^31 floats (8 GiB) from a 100-byte model: of a constant, the
  // folding in a DYNAMIC call computed it before finding it too big to keep
  // (the server peaked at 16.8 GB); of the input, calibration would run it.
  // Both are bounded by --max_tensor_elements before anything is allocated.
  auto expand_model = [](const char* what) {
    return [what](onnx::ModelProto* m) {
      onnx::GraphProto* g = m->mutable_graph();
      onnx::TensorProto* shape = g->add_initializer();
      shape->set_name("huge_shape");
      shape->set_data_type(onnx::TensorProto::INT64);
      shape->add_dims(2);
      shape->add_int64_data(int64_t{1} << 28);
      shape->add_int64_data(kDim);
      onnx::NodeProto* expand = g->add_node();
      expand->set_op_type("Expand");
      expand->set_name("huge");
      expand->add_input(what);
      expand->add_input("huge_shape");
      expand->add_output("huge_out");
      g->add_output()->set_name("huge_out");
      auto* t = g->mutable_output(1)->mutable_type()->mutable_tensor_type();
      t->set_elem_type(onnx::TensorProto::FLOAT);
      t->mutable_shape()->add_dim()->set_dim_param("n");
      t->mutable_shape()->add_dim()->set_dim_value(kDim);
    };
  };
  model_case("Expand of a constant to 2^31 floats (folding)", Code::OK, "",
             [expand_model](onnx::ModelProto* m) {
               onnx::TensorProto* row = m->mutable_graph()->add_initializer();
               row->set_name("row");
               row->set_data_type(onnx::TensorProto::FLOAT);
               row->add_dims(1);
               row->add_dims(kDim);
               for (int i = 0; i < kDim; ++i) row->add_float_data(1);
               expand_model("row")(m);
             });
  c.push_back({"Expand of the input to 2^31 floats, calibrated",
               Code::RESOURCE_EXHAUSTED, "elements, more than the",
               [this, expand_model] {
                 const std::string model = Edited(expand_model("x"));
                 return Calibrate({InputBatch(kDim)}, {}, &model);
               }});

  // ONNX 1.12's version converter applies ONNX's adapters to custom-domain
  // nodes with ONNX op names; on ConstantFill it looped forever, pinning a
  // thread and writing 50 MB/s of warnings to the server's log.
  model_case(
      "custom-domain ConstantFill at opset 9 (version converter)",
      Code::FAILED_PRECONDITION, "default-domain models only",
      [](onnx::ModelProto* m) {
        m->mutable_opset_import(0)->set_version(9);
        auto* custom = m->add_opset_import();
        custom->set_domain("com.example");
        custom->set_version(1);
        onnx::NodeProto* fill = m->mutable_graph()->add_node();
        fill->set_op_type("ConstantFill");
        fill->set_domain("com.example");
        fill->add_output("filled");
      },
      kWideDim);

  // --- Versions.
  model_case("IR version 999", Code::INVALID_ARGUMENT, "IR version 999",
             [](onnx::ModelProto* m) { m->set_ir_version(999); });
  model_case("negative IR version", Code::INVALID_ARGUMENT, "IR version -1",
             [](onnx::ModelProto* m) { m->set_ir_version(-1); });
  model_case("opset 999", Code::INVALID_ARGUMENT, "opset 999",
             [](onnx::ModelProto* m) {
               m->mutable_opset_import(0)->set_version(999);
             });
  model_case(
      "opset 0", Code::INVALID_ARGUMENT, "version 0",
      [](onnx::ModelProto* m) { m->mutable_opset_import(0)->set_version(0); });
  model_case("no opset import", Code::INVALID_ARGUMENT, "opset",
             [](onnx::ModelProto* m) { m->clear_opset_import(); });
  model_case("default domain imported twice", Code::INVALID_ARGUMENT, "twice",
             [](onnx::ModelProto* m) {
               auto* o = m->add_opset_import();
               o->set_domain("ai.onnx");
               o->set_version(13);
             });

  // --- Same models through STATIC_RANGE (calibration runs the executor).
  static_model_case("STATIC: element type no ONNX type", Code::INVALID_ARGUMENT,
                    "element type 77",
                    [](onnx::ModelProto* m) { W0(m)->set_data_type(77); });
  static_model_case(
      "STATIC: NaN weights", Code::INVALID_ARGUMENT, "NaN",
      [](onnx::ModelProto* m) { W0Values(m)[1] = std::nanf(""); });
  static_model_case(
      "STATIC: unknown op at opset 21", Code::UNIMPLEMENTED, "NoSuchOp",
      [](onnx::ModelProto* m) {
        m->set_ir_version(10);
        m->mutable_opset_import(0)->set_version(21);
        m->mutable_graph()->mutable_node(1)->set_op_type("NoSuchOp");
      });

  // --- Options.
  options_case(
      "method number 99", Code::INVALID_ARGUMENT, "method",
      [](QuantizeConfig* q) {
        q->mutable_options()
            ->mutable_quantization_method()
            ->set_experimental_method(
                static_cast<QuantizationMethod::ExperimentalMethod>(99));
      });
  // Documented: no method returns the model unchanged.
  options_case("no method", Code::OK, "",
               [](QuantizeConfig* q) { q->clear_options(); });
  options_case("op set number 99", Code::INVALID_ARGUMENT, "op_set",
               [](QuantizeConfig* q) {
                 q->mutable_options()->set_op_set(
                     static_cast<tensorflow::quantization::OpSet>(99));
               });
  options_case(
      "weight bits 1", Code::INVALID_ARGUMENT, "bits",
      [](QuantizeConfig* q) { q->mutable_weight_params()->set_bits(1); });
  options_case(
      "weight bits 9", Code::INVALID_ARGUMENT, "bits",
      [](QuantizeConfig* q) { q->mutable_weight_params()->set_bits(9); });
  options_case(
      "ema_decay NaN", Code::INVALID_ARGUMENT, "ema_decay",
      [](QuantizeConfig* q) {
        q->mutable_activation_params()->set_ema_decay(std::nanf(""));
      },
      StaticConfig());
  options_case(
      "target_sqnr_db NaN", Code::INVALID_ARGUMENT, "target_sqnr_db",
      [](QuantizeConfig* q) { q->set_target_sqnr_db(std::nan("")); },
      StaticConfig());
  options_case(
      "target_agreement 1.5", Code::INVALID_ARGUMENT, "target_agreement",
      [](QuantizeConfig* q) { q->set_target_agreement(1.5); }, StaticConfig());
  options_case(
      "allowed_precisions 42", Code::INVALID_ARGUMENT, "allowed_precisions",
      [](QuantizeConfig* q) {
        q->set_target_sqnr_db(30);
        q->add_allowed_precisions(
            static_cast<tensorflow::quantization::QuantizationPrecision>(42));
      },
      StaticConfig());
  options_case(
      "holdout_batches -1", Code::INVALID_ARGUMENT, "holdout_batches",
      [](QuantizeConfig* q) { q->set_holdout_batches(-1); }, StaticConfig());
  options_case(
      "unit-wise precision 99", Code::INVALID_ARGUMENT, "precision",
      [](QuantizeConfig* q) {
        auto* u = q->mutable_options()->add_unit_wise_quantization_precision();
        u->set_unit_type(UnitWiseQuantizationPrecision::UNIT_NODE);
        u->set_unit_name("matmul0");
        u->set_quantization_precision(
            static_cast<tensorflow::quantization::QuantizationPrecision>(99));
      });
  options_case(
      "megabyte unit name", Code::INVALID_ARGUMENT, "bytes",
      [](QuantizeConfig* q) {
        auto* u = q->mutable_options()->add_unit_wise_quantization_precision();
        u->set_unit_type(UnitWiseQuantizationPrecision::UNIT_NODE);
        u->set_unit_name(std::string(1 << 20, 'u'));
        u->set_quantization_precision(
            tensorflow::quantization::QuantizationPrecision::PRECISION_W8A8);
      });
  options_case(
      "100k unit-wise entries", Code::INVALID_ARGUMENT, "no_such_node_0",
      [](QuantizeConfig* q) {
        for (int i = 0; i < 100000; ++i) {
          auto* u =
              q->mutable_options()->add_unit_wise_quantization_precision();
          u->set_unit_type(UnitWiseQuantizationPrecision::UNIT_NODE);
          u->set_unit_name(absl::StrCat("no_such_node_", i));
          u->set_quantization_precision(
              tensorflow::quantization::QuantizationPrecision::PRECISION_W8A8);
        }
      });
  options_case(
      "range with NaN min", Code::INVALID_ARGUMENT, "h0",
      [](QuantizeConfig* q) {
        auto* r = q->mutable_calibration()->add_ranges();
        r->set_tensor_name("h0");
        r->set_min(std::nanf(""));
        r->set_max(1.0F);
      },
      StaticConfig());
  options_case(
      "range of a tensor the model lacks", Code::INVALID_ARGUMENT, "ghost",
      [](QuantizeConfig* q) {
        auto* r = q->mutable_calibration()->add_ranges();
        r->set_tensor_name("ghost");
        r->set_min(-1.0F);
        r->set_max(1.0F);
      },
      StaticConfig());
  options_case(
      "STATIC with neither batches nor ranges", Code::FAILED_PRECONDITION,
      "no calibration batches", [](QuantizeConfig*) {}, StaticConfig());
  c.push_back({"DYNAMIC with a calibration batch", Code::INVALID_ARGUMENT,
               "DYNAMIC", [this] {
                 QuantizeRequest r;
                 *r.mutable_calibration_batch() = InputBatch(kDim);
                 return Quantize(model_, DynamicRangeConfig(), {r});
               }});

  // --- Request sequences.
  c.push_back({"no config, only a chunk", Code::INVALID_ARGUMENT, "config",
               [this] { return RawQuantize({ChunkMessage(model_)}); }});
  c.push_back({"nothing at all", Code::INVALID_ARGUMENT, "config",
               [this] { return RawQuantize({}); }});
  c.push_back({"config twice", Code::INVALID_ARGUMENT, "config", [this] {
                 QuantizeConfig config = DynamicRangeConfig();
                 config.set_model_size_bytes(model_.size());
                 return RawQuantize({ConfigMessage(config),
                                     ConfigMessage(config),
                                     ChunkMessage(model_)});
               }});
  c.push_back(
      {"more bytes than declared", Code::INVALID_ARGUMENT,
       "more model bytes than config.model_size_bytes", [this] {
         QuantizeConfig config = DynamicRangeConfig();
         config.set_model_size_bytes(model_.size() - 10);
         return RawQuantize({ConfigMessage(config), ChunkMessage(model_)});
       }});
  c.push_back(
      {"fewer bytes than declared", Code::INVALID_ARGUMENT, "declared", [this] {
         QuantizeConfig config = DynamicRangeConfig();
         config.set_model_size_bytes(model_.size() + 10);
         return RawQuantize({ConfigMessage(config), ChunkMessage(model_)});
       }});
  c.push_back({"a chunk after the declared end", Code::INVALID_ARGUMENT,
               "more model bytes than config.model_size_bytes", [this] {
                 QuantizeConfig config = DynamicRangeConfig();
                 config.set_model_size_bytes(model_.size());
                 return RawQuantize({ConfigMessage(config),
                                     ChunkMessage(model_),
                                     ChunkMessage("more")});
               }});
  c.push_back(
      {"declared size past the limit", Code::RESOURCE_EXHAUSTED,
       "over this server's limit", [this] {
         QuantizeConfig config = DynamicRangeConfig();
         config.set_model_size_bytes(uint64_t{1} << 40);
         return RawQuantize({ConfigMessage(config), ChunkMessage(model_)});
       }});
  c.push_back({"a batch before the model ends", Code::INVALID_ARGUMENT, "batch",
               [this] {
                 QuantizeConfig config = StaticConfig();
                 config.set_model_size_bytes(model_.size());
                 QuantizeRequest batch;
                 *batch.mutable_calibration_batch() = InputBatch(kDim);
                 return RawQuantize({ConfigMessage(config),
                                     ChunkMessage(model_.substr(0, 10)), batch,
                                     ChunkMessage(model_.substr(10))});
               }});
  // --- Models sent with external data (the external_data stream).
  auto streamed_case = [&](std::string name, Code code, std::string fragment,
                           std::function<std::vector<QuantizeRequest>(
                               const Streamed&, QuantizeConfig)>
                               sequence,
                           std::function<void(onnx::ModelProto*)> edit =
                               nullptr) {
    c.push_back(
        {std::move(name), code, std::move(fragment), [this, sequence, edit] {
           const Streamed s = WithExternalData(model_, edit);
           QuantizeConfig config = DynamicRangeConfig();
           config.set_model_size_bytes(s.model.size());
           config.set_external_data_bytes(s.external.size());
           return RawQuantize(sequence(s, config));
         }});
  };
  auto in_order = [](const Streamed& s, QuantizeConfig config) {
    return std::vector<QuantizeRequest>{ConfigMessage(config),
                                        ChunkMessage(s.model),
                                        ExternalMessage(s.external)};
  };
  streamed_case("external data, well formed", Code::OK, "", in_order);
  streamed_case("external data in one-byte pieces", Code::OK, "",
                [](const Streamed& s, QuantizeConfig config) {
                  std::vector<QuantizeRequest> r = {ConfigMessage(config),
                                                    ChunkMessage(s.model)};
                  for (size_t i = 0; i < s.external.size() && i < 300; ++i) {
                    r.push_back(ExternalMessage(s.external.substr(i, 1)));
                  }
                  r.push_back(ExternalMessage(s.external.substr(300)));
                  return r;
                });
  streamed_case("external data before the model ends", Code::INVALID_ARGUMENT,
                "before the model is complete",
                [](const Streamed& s, QuantizeConfig config) {
                  return std::vector<QuantizeRequest>{
                      ConfigMessage(config), ChunkMessage(s.model.substr(0, 5)),
                      ExternalMessage(s.external),
                      ChunkMessage(s.model.substr(5))};
                });
  streamed_case("external data not declared", Code::INVALID_ARGUMENT,
                "external_data_bytes is 0",
                [](const Streamed& s, QuantizeConfig config) {
                  config.set_external_data_bytes(0);
                  return std::vector<QuantizeRequest>{
                      ConfigMessage(config), ChunkMessage(s.model),
                      ExternalMessage(s.external)};
                });
  streamed_case("more external data than declared", Code::INVALID_ARGUMENT,
                "more external data than",
                [](const Streamed& s, QuantizeConfig config) {
                  return std::vector<QuantizeRequest>{
                      ConfigMessage(config), ChunkMessage(s.model),
                      ExternalMessage(s.external), ExternalMessage("x")};
                });
  streamed_case("less external data than declared", Code::INVALID_ARGUMENT,
                "before the external data is complete",
                [](const Streamed& s, QuantizeConfig config) {
                  return std::vector<QuantizeRequest>{
                      ConfigMessage(config), ChunkMessage(s.model),
                      ExternalMessage(s.external.substr(1))};
                });
  streamed_case("declared external data never sent", Code::INVALID_ARGUMENT,
                "before the external data is complete",
                [](const Streamed& s, QuantizeConfig config) {
                  return std::vector<QuantizeRequest>{ConfigMessage(config),
                                                      ChunkMessage(s.model)};
                });
  streamed_case("a batch before the external data ends", Code::INVALID_ARGUMENT,
                "before the external data is complete",
                [](const Streamed& s, QuantizeConfig config) {
                  QuantizeRequest batch;
                  *batch.mutable_calibration_batch() = InputBatch(kDim);
                  return std::vector<QuantizeRequest>{
                      ConfigMessage(config), ChunkMessage(s.model),
                      ExternalMessage(s.external.substr(0, 8)), batch};
                });
  streamed_case("a model chunk after external data", Code::INVALID_ARGUMENT,
                "the whole model must come first",
                [](const Streamed& s, QuantizeConfig config) {
                  return std::vector<QuantizeRequest>{
                      ConfigMessage(config), ChunkMessage(s.model),
                      ExternalMessage(s.external.substr(0, 8)),
                      ChunkMessage("x")};
                });
  streamed_case("external data past the size limit", Code::RESOURCE_EXHAUSTED,
                "external_data_bytes",
                [](const Streamed& s, QuantizeConfig config) {
                  config.set_external_data_bytes(uint64_t{1} << 62);
                  return std::vector<QuantizeRequest>{ConfigMessage(config),
                                                      ChunkMessage(s.model)};
                });
  streamed_case("external data declared near 2^64", Code::RESOURCE_EXHAUSTED,
                "max_model_bytes",
                [](const Streamed& s, QuantizeConfig config) {
                  config.set_external_data_bytes(~uint64_t{0});
                  return std::vector<QuantizeRequest>{ConfigMessage(config),
                                                      ChunkMessage(s.model)};
                });
  streamed_case(
      "external data no tensor refers to", Code::INVALID_ARGUMENT,
      "no tensor of the model",
      [](const Streamed& s, QuantizeConfig config) {
        // The original model: every tensor inline.
        return std::vector<QuantizeRequest>{ConfigMessage(config),
                                            ChunkMessage(s.model),
                                            ExternalMessage(s.external)};
      },
      [](onnx::ModelProto* m) {
        (void)quantd::graph::ForEachTensor(m, [](onnx::TensorProto* t) {
          if (!t->external_data().empty()) {
            t->clear_external_data();
            t->clear_data_location();
            t->set_raw_data(
                std::string(quantd::graph::RawDataBytes(*t).value(), '\0'));
          }
          return absl::OkStatus();
        });
      });
  streamed_case("external tensor naming a file beside a stream",
                Code::INVALID_ARGUMENT, "never opens", in_order,
                [](onnx::ModelProto* m) {
                  m->mutable_graph()
                      ->mutable_initializer(0)
                      ->mutable_external_data(0)
                      ->set_value("/etc/passwd");
                });
  streamed_case("external tensor past the stream", Code::INVALID_ARGUMENT,
                "of the external_data stream, which has", in_order,
                [](onnx::ModelProto* m) {
                  m->mutable_graph()
                      ->mutable_initializer(0)
                      ->mutable_external_data(1)
                      ->set_value("1000000");
                });
  streamed_case("two external tensors in the same bytes",
                Code::INVALID_ARGUMENT, "overlaps", in_order,
                [](onnx::ModelProto* m) {
                  onnx::GraphProto* g = m->mutable_graph();
                  ASSERT_GE(g->initializer_size(), 2);
                  // Same dims: the second now reads the first's bytes.
                  *g->mutable_initializer(1)->mutable_external_data() =
                      g->initializer(0).external_data();
                });
  c.push_back(
      {"calibrate a model sent with external data", Code::OK, "", [this] {
         const Streamed s = WithExternalData(model_);
         std::vector<CalibrateRequest> r(4);
         r[0].mutable_config()->set_method("min_max");
         r[0].mutable_config()->set_model_size_bytes(s.model.size());
         r[0].mutable_config()->set_external_data_bytes(s.external.size());
         r[1].set_model_chunk(s.model);
         r[2].set_external_data_chunk(s.external);
         *r[3].mutable_batch() = InputBatch(kDim);
         return RawCalibrate(r);
       }});
  c.push_back(
      {"calibrate: a batch before the external data", Code::INVALID_ARGUMENT,
       "before the external data is complete", [this] {
         const Streamed s = WithExternalData(model_);
         std::vector<CalibrateRequest> r(3);
         r[0].mutable_config()->set_method("min_max");
         r[0].mutable_config()->set_model_size_bytes(s.model.size());
         r[0].mutable_config()->set_external_data_bytes(s.external.size());
         r[1].set_model_chunk(s.model);
         *r[2].mutable_batch() = InputBatch(kDim);
         return RawCalibrate(r);
       }});
  c.push_back({"empty request message", Code::INVALID_ARGUMENT, "", [this] {
                 QuantizeConfig config = DynamicRangeConfig();
                 config.set_model_size_bytes(model_.size());
                 return RawQuantize({ConfigMessage(config), QuantizeRequest(),
                                     ChunkMessage(model_)});
               }});

  // --- Batches.
  calibrate_case("batch of an unknown tensor", Code::INVALID_ARGUMENT, "nope",
                 {Batch("nope", onnx::TensorProto::FLOAT, {1, kDim},
                        kDim * sizeof(float))});
  calibrate_case("batch of the wrong type", Code::INVALID_ARGUMENT, "INT64",
                 {Batch("x", onnx::TensorProto::INT64, {1, kDim},
                        kDim * sizeof(int64_t))});
  calibrate_case("batch of type 99", Code::INVALID_ARGUMENT, "99",
                 {Batch("x", 99, {1, kDim}, kDim * sizeof(float))});
  calibrate_case("batch of the wrong shape", Code::INVALID_ARGUMENT, "shape",
                 {Batch("x", onnx::TensorProto::FLOAT, {2, kDim + 1},
                        2 * (kDim + 1) * sizeof(float))});
  calibrate_case("scalar where a tensor is expected", Code::INVALID_ARGUMENT,
                 "shape", {Batch("x", onnx::TensorProto::FLOAT, {}, 4)});
  calibrate_case("data shorter than the shape", Code::INVALID_ARGUMENT, "bytes",
                 {Batch("x", onnx::TensorProto::FLOAT, {1, kDim}, 3)});
  calibrate_case(
      "data longer than the shape", Code::INVALID_ARGUMENT, "bytes",
      {Batch("x", onnx::TensorProto::FLOAT, {1, kDim}, 4 * kDim + 4)});
  calibrate_case("negative batch dim", Code::INVALID_ARGUMENT, "",
                 {Batch("x", onnx::TensorProto::FLOAT, {-1, kDim}, 0)});
  calibrate_case("the same tensor twice in a batch", Code::INVALID_ARGUMENT,
                 "twice", [] {
                   TensorBatch b = InputBatch(kDim);
                   *b.add_tensors() = b.tensors(0);
                   return std::vector<TensorBatch>{b};
                 }());
  calibrate_case("megabyte tensor name in a batch", Code::INVALID_ARGUMENT,
                 "bytes",
                 {Batch(std::string(1 << 20, 'b'), onnx::TensorProto::FLOAT,
                        {1, kDim}, kDim * sizeof(float))});
  // proto3 strings must be UTF-8: such a message does not parse. The
  // batches before it must not make the call succeed without it.
  calibrate_case("tensor name that is not UTF-8", Code::INVALID_ARGUMENT,
                 "message 4 is not a valid quantd.v1.CalibrateRequest",
                 {InputBatch(kDim),
                  Batch("\xff\xfe", onnx::TensorProto::FLOAT, {1, kDim},
                        kDim * sizeof(float)),
                  InputBatch(kDim)});
  options_case(
      "unit name that is not UTF-8", Code::INVALID_ARGUMENT,
      "message 1 is not a valid quantd.v1.QuantizeRequest",
      [](QuantizeConfig* q) {
        auto* u = q->mutable_options()->add_unit_wise_quantization_precision();
        u->set_unit_type(UnitWiseQuantizationPrecision::UNIT_NODE);
        u->set_unit_name("matmul\xc3");
        u->set_quantization_precision(
            tensorflow::quantization::QuantizationPrecision::PRECISION_W8A8);
      });
  calibrate_case("no batches", Code::INVALID_ARGUMENT, "batch", {});
  calibrate_case("empty batch", Code::INVALID_ARGUMENT, "batch",
                 {TensorBatch()});
  calibrate_case("NaN batch values", Code::INVALID_ARGUMENT, "NaN",
                 {NanBatch()});
  {
    CalibrateConfig unknown;
    unknown.set_method("no_such_observer");
    calibrate_case("unknown observer", Code::INVALID_ARGUMENT,
                   "no_such_observer", {InputBatch(kDim)}, unknown);
    CalibrateConfig pct;
    pct.set_method("percentile");
    pct.set_percentile(150);
    calibrate_case("percentile 150", Code::INVALID_ARGUMENT, "percentile",
                   {InputBatch(kDim)}, pct);
    CalibrateConfig bins;
    bins.set_method("percentile");
    bins.set_num_bins(-5);
    calibrate_case("num_bins -5", Code::INVALID_ARGUMENT, "num_bins",
                   {InputBatch(kDim)}, bins);
  }
  c.push_back({"STATIC: NaN batch values", Code::INVALID_ARGUMENT, "NaN",
               [this] { return StaticWith(NanBatch()); }});
  c.push_back(
      {"Calibrate: config twice", Code::INVALID_ARGUMENT, "config", [this] {
         CalibrateRequest config;
         config.mutable_config()->set_method("min_max");
         config.mutable_config()->set_model_size_bytes(model_.size());
         CalibrateRequest chunk;
         chunk.set_model_chunk(model_);
         return RawCalibrate({config, config, chunk});
       }});
  c.push_back(
      {"Calibrate: batch first", Code::INVALID_ARGUMENT, "config", [this] {
         CalibrateRequest batch;
         *batch.mutable_batch() = InputBatch(kDim);
         return RawCalibrate({batch});
       }});
  return c;
}

TEST_F(HostileCorpusE2eTest, EveryCaseGetsItsCodeAndTheServerRecovers) {
  const std::vector<Case> corpus = Corpus();
  ASSERT_GE(corpus.size(), 60u);
  auto run_all = [&](bool report) {
    int passed = 0;
    for (const Case& hostile : corpus) {
      SCOPED_TRACE(hostile.name);
      const grpc::Status s = hostile.send();
      const std::string message = s.error_message().substr(0, 400);
      EXPECT_EQ(s.error_code(), hostile.code) << message;
      EXPECT_THAT(s.error_message(), HasSubstr(hostile.fragment));
      EXPECT_NE(s.error_code(), Code::INTERNAL) << message;
      EXPECT_NE(s.error_code(), Code::UNKNOWN) << message;
      EXPECT_LE(s.error_message().size(), 4096u);
      if (!Serving()) {
        ADD_FAILURE() << "the server stopped answering\n" << ReadAll(log_);
        return passed;
      }
      passed += s.error_code() == hostile.code &&
                s.error_message().find(hostile.fragment) != std::string::npos;
      if (report) {
        std::printf("case %-50s -> %d %s\n", hostile.name.c_str(),
                    s.error_code(), message.substr(0, 160).c_str());
      }
    }
    return passed;
  };
  // The first pass loads what every later call shares (schemas, code
  // pages, pool stacks); the baseline is the idle server after it.
  const int passed = run_all(true);
  const int64_t baseline = SettledRssBytes(server_->pid(), absl::Seconds(10));
  run_all(false);
  const int64_t rss = SettledRssBytes(server_->pid(), absl::Seconds(10));
  std::printf(
      "measured: %d of %zu hostile cases as expected; idle RSS %.1f MB after "
      "a second pass, baseline %.1f MB\n",
      passed, corpus.size(), rss / 1e6, baseline / 1e6);
  if (!kSanitizedBuild) {
    EXPECT_LE(rss, baseline * 11 / 10 + (int64_t{8} << 20));
  }
  EXPECT_EQ(server_->Terminate(), 0) << ReadAll(log_);
}

}  // namespace
}  // namespace quantd::testing
