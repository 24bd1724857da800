// CalibrationSession: every batch tensor is checked (counts without
// overflow, data length, dtype / rank / known dims against the model,
// element and observer-memory limits, zero size) before anything reads it,
// and observed activations need no executor.
#include "core/engine/calibration_session.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
namespace tfq = tensorflow::quantization;

constexpr int64_t k2p31 = int64_t{1} << 31;
constexpr int64_t k2p62 = int64_t{1} << 62;

void SetType(onnx::ValueInfoProto* v, const std::string& name,
             const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = t->mutable_shape();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      shape->add_dim()->set_dim_param("d" + std::to_string(i));
    } else {
      shape->add_dim()->set_dim_value(dims[i]);
    }
  }
}

// x (dims; -1 = symbolic) -> Relu -> r -> `op` -> y. `op` "Mystery" is a
// custom-domain op the executor does not have.
onnx::ModelProto Model(const std::vector<int64_t>& x_dims,
                       const std::string& op = "Relu") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("quantd-tests");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  auto* custom = m.add_opset_import();
  custom->set_domain("com.quantd.test");
  custom->set_version(1);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("test");
  SetType(g->add_input(), "x", x_dims);
  onnx::NodeProto* relu = g->add_node();
  relu->set_name("relu");
  relu->set_op_type("Relu");
  relu->add_input("x");
  relu->add_output("r");
  onnx::NodeProto* last = g->add_node();
  last->set_name("last");
  last->set_op_type(op);
  if (op == "Mystery") last->set_domain("com.quantd.test");
  last->add_input("r");
  last->add_output("y");
  // The checker wants a shape on graph outputs; a symbolic one of x's rank.
  SetType(g->add_output(), "y", std::vector<int64_t>(x_dims.size(), -1));
  return m;
}

quantd::v1::TensorBatch Batch(const std::string& name,
                              const std::vector<int64_t>& shape,
                              int64_t values = -1,
                              int32_t dtype = onnx::TensorProto::FLOAT) {
  quantd::v1::TensorBatch batch;
  auto* t = batch.add_tensors();
  t->set_name(name);
  t->set_data_type(dtype);
  for (int64_t d : shape) t->add_shape(d);
  if (values < 0) {
    values = 1;
    for (int64_t d : shape) values *= d;
  }
  std::vector<float> data(values);
  for (int64_t i = 0; i < values; ++i) data[i] = static_cast<float>(i % 7) - 3;
  t->set_data(reinterpret_cast<const char*>(data.data()),
              data.size() * sizeof(float));
  return batch;
}

std::unique_ptr<CalibrationSession> Session(
    const onnx::ModelProto& model, calibration::ObserverConfig config = {},
    const JobLimits& limits = JobLimits()) {
  absl::StatusOr<std::unique_ptr<CalibrationSession>> s =
      CalibrationSession::Create(model, config, limits);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

absl::Status Add(CalibrationSession* session,
                 const quantd::v1::TensorBatch& batch) {
  CancellationToken cancel;
  return session->AddBatch(batch, nullptr, cancel);
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(CalibrationSessionTest, GraphInputWithOverflowingShapeAndNoData) {
  auto session = Session(Model({-1}));
  // [2^62] floats: a signed byte count wraps to 0, which "matches" no data.
  absl::Status s = Add(session.get(), Batch("x", {k2p62}, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("'x'"), HasSubstr("4611686018427387904"),
                            HasSubstr("64 bits")));
  // Unnamed: the only input.
  s = Add(session.get(), Batch("", {k2p62}, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), HasSubstr("'x'"));
  EXPECT_FALSE(session->has_executor());
  EXPECT_EQ(session->batch_count(), 0);
}

TEST(CalibrationSessionTest, ObservedActivationWithOverflowingShapeAndNoData) {
  auto session = Session(Model({-1}));
  absl::Status s = Add(session.get(), Batch("r", {k2p62}, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("'r'"), HasSubstr("64 bits")));
  EXPECT_TRUE(session->Result().ranges().empty());
}

TEST(CalibrationSessionTest, ElementCountOverflowIsRefused) {
  auto session = Session(Model({-1, -1, -1}));
  for (const char* name : {"x", "r"}) {
    absl::Status s = Add(session.get(), Batch(name, {k2p31, k2p31, 4}, 0));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(Msg(s), AllOf(HasSubstr(name), HasSubstr("[2147483648,"),
                              HasSubstr("64 bits")));
  }
}

TEST(CalibrationSessionTest, NegativeDimsAreRefused) {
  auto session = Session(Model({-1, -1}));
  for (const char* name : {"x", "r"}) {
    absl::Status s = Add(session.get(), Batch(name, {2, -3}, 0));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(Msg(s), AllOf(HasSubstr(name), HasSubstr("negative")));
  }
}

TEST(CalibrationSessionTest, DataLengthMustMatchTheShape) {
  auto session = Session(Model({-1, 4}));
  for (const char* name : {"x", "r"}) {
    absl::Status s = Add(session.get(), Batch(name, {2, 4}, 7));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(Msg(s), AllOf(HasSubstr(name), HasSubstr("needs 32 bytes"),
                              HasSubstr("got 28")));
  }
  EXPECT_EQ(session->batch_count(), 0);
}

TEST(CalibrationSessionTest, DtypeRankAndDimsMustMatchTheModel) {
  auto session = Session(Model({-1, 4}));
  for (const char* name : {"x", "r"}) {
    // INT64 data of the right length for its shape.
    quantd::v1::TensorBatch b = Batch(name, {2, 4}, 16);
    b.mutable_tensors(0)->set_data_type(onnx::TensorProto::INT64);
    absl::Status s = Add(session.get(), b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Msg(s),
                AllOf(HasSubstr(name), HasSubstr("FLOAT"), HasSubstr("INT64")));

    s = Add(session.get(), Batch(name, {8}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Msg(s), AllOf(HasSubstr(name), HasSubstr("[?,4] (rank 2"),
                              HasSubstr("[8] (rank 1)")));

    s = Add(session.get(), Batch(name, {2, 5}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Msg(s),
                AllOf(HasSubstr(name), HasSubstr("[?,4]"), HasSubstr("[2,5]")));
    EXPECT_THAT(Msg(s), Not(HasSubstr("--unbatched")));

    // One leading axis too many, the rest as declared: a batch sent to a
    // model that takes no batch axis. The message says how to send it.
    s = Add(session.get(), Batch(name, {1, 2, 4}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Msg(s),
                AllOf(HasSubstr("[1,2,4] (rank 3)"), HasSubstr("no batch axis"),
                      HasSubstr("quantctl --unbatched")));
  }
  // r's shape comes from shape inference (the model declares none).
  EXPECT_TRUE(Add(session.get(), Batch("r", {3, 4})).ok());
  EXPECT_TRUE(Add(session.get(), Batch("x", {3, 4})).ok());
  EXPECT_EQ(session->batch_count(), 2);
}

// The SDKs send floating data as FLOAT; a graph input the model declares
// DOUBLE takes it widened (exactly), and the ranges are those of the values.
// Other mismatches stay refused.
TEST(CalibrationSessionTest, FloatDataFeedsADoubleInputWidened) {
  // x (DOUBLE) -> Cast to FLOAT -> r -> Relu -> y: r is observed.
  onnx::ModelProto m = Model({-1, 4});
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->set_elem_type(onnx::TensorProto::DOUBLE);
  onnx::NodeProto* cast = m.mutable_graph()->mutable_node(0);
  cast->set_op_type("Cast");
  onnx::AttributeProto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  auto session = Session(m);
  ASSERT_TRUE(Add(session.get(), Batch("x", {2, 4})).ok());
  quantd::v1::CalibrationResult result = session->Result();
  bool saw_r = false;
  for (const auto& r : result.ranges()) {
    if (r.tensor_name() != "r") continue;
    saw_r = true;
    // Batch() writes (i % 7) - 3 for i in [0, 8): -3 .. 3.
    EXPECT_EQ(r.min(), -3.0f);
    EXPECT_EQ(r.max(), 3.0f);
  }
  EXPECT_TRUE(saw_r);

  quantd::v1::TensorBatch b = Batch("x", {2, 4}, 16);
  b.mutable_tensors(0)->set_data_type(onnx::TensorProto::INT64);
  absl::Status s = Add(session.get(), b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("DOUBLE"), HasSubstr("INT64")));

  // The other way round (DOUBLE data for a FLOAT input) is not widened.
  auto float_session = Session(Model({-1, 4}));
  quantd::v1::TensorBatch d = Batch("x", {1, 4}, 8);
  d.mutable_tensors(0)->set_data_type(onnx::TensorProto::DOUBLE);
  s = Add(float_session.get(), d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("FLOAT"), HasSubstr("DOUBLE")));
}

TEST(CalibrationSessionTest, DeclaredValueInfoIsChecked) {
  onnx::ModelProto m = Model({-1, -1}, "Mystery");
  // Inference knows nothing of Mystery's output; the model says [?,3].
  SetType(m.mutable_graph()->add_value_info(), "y", {-1, 3});
  auto session = Session(m);
  absl::Status s = Add(session.get(), Batch("y", {2, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("'y'"), HasSubstr("[?,3]")));
  EXPECT_TRUE(Add(session.get(), Batch("y", {2, 3})).ok());
}

TEST(CalibrationSessionTest, ZeroSizeBatchesAreRefused) {
  auto session = Session(Model({-1, 4}));
  absl::Status s = Add(session.get(), Batch("x", {0, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("x [0,4]"),
                            HasSubstr("cannot calibrate anything")));
  s = Add(session.get(), Batch("r", {0, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s),
              AllOf(HasSubstr("'r'"), HasSubstr("cannot calibrate anything")));
  EXPECT_EQ(session->batch_count(), 0);
}

TEST(CalibrationSessionTest, SymbolicDimsAreBoundedByMaxTensorElements) {
  JobLimits limits;
  limits.max_tensor_elements = 100;
  auto session = Session(Model({-1, 4}), {}, limits);
  for (const char* name : {"x", "r"}) {
    absl::Status s = Add(session.get(), Batch(name, {50, 4}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Msg(s), AllOf(HasSubstr(name), HasSubstr("200 elements"),
                              HasSubstr("limit of 100")));
  }
  EXPECT_TRUE(Add(session.get(), Batch("x", {25, 4})).ok());
}

TEST(CalibrationSessionTest, PerChannelHistogramsOverTheBudgetAreRefused) {
  calibration::ObserverConfig config;
  config.method = "percentile";
  config.per_channel = true;
  auto session = Session(Model({-1, -1}), config);  // Default budget.
  // 400 KB of data asking for 100,001 histograms (about 3 GiB).
  absl::Status s = Add(session.get(), Batch("r", {1, 100000}));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Msg(s),
              AllOf(HasSubstr("'r'"), HasSubstr("100000 channels"),
                    HasSubstr("observer memory budget"), HasSubstr("256 MiB")));
  EXPECT_TRUE(session->Result().ranges().empty());
  // A smaller batch then fits.
  EXPECT_TRUE(Add(session.get(), Batch("r", {2, 16})).ok());
}

TEST(CalibrationSessionTest, ObservedActivationsNeedNoExecutor) {
  auto session = Session(Model({-1, 4}, "Mystery"));
  ASSERT_TRUE(Add(session.get(), Batch("r", {2, 4})).ok());
  ASSERT_TRUE(Add(session.get(), Batch("y", {2, 4})).ok());
  EXPECT_FALSE(session->has_executor());
  quantd::v1::CalibrationResult result = session->Result();
  ASSERT_EQ(result.ranges_size(), 2);
  EXPECT_EQ(result.ranges(0).tensor_name(), "r");
  EXPECT_FLOAT_EQ(result.ranges(0).min(), -3.0f);
  // Graph inputs need the model to run, which the executor cannot.
  absl::Status s = Add(session.get(), Batch("x", {2, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Msg(s), HasSubstr("Mystery"));
}

TEST(CalibrationSessionTest, GraphInputsRunTheModelOnce) {
  auto session = Session(Model({-1, 4}));
  EXPECT_FALSE(session->has_executor());
  ASSERT_TRUE(Add(session.get(), Batch("x", {2, 4})).ok());
  EXPECT_TRUE(session->has_executor());
  ASSERT_TRUE(Add(session.get(), Batch("", {1, 4})).ok());
  quantd::v1::CalibrationResult result = session->Result();
  EXPECT_EQ(result.batch_count(), 2);
  EXPECT_EQ(result.ranges_size(), 3);  // x, r, y.
}

// Batch `b` of `rows` x 4 values that differ from batch to batch, so that
// an order-sensitive observer would notice values observed out of order.
quantd::v1::TensorBatch VaryingBatch(int b, int rows) {
  quantd::v1::TensorBatch batch;
  auto* t = batch.add_tensors();
  t->set_name("x");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_shape(rows);
  t->add_shape(4);
  std::vector<float> data(rows * 4);
  for (int i = 0; i < rows * 4; ++i) {
    data[i] = static_cast<float>((i * 37 + b * 11) % 23) * (1.0f + 0.3f * b) -
              7.0f - static_cast<float>(b);
  }
  t->set_data(reinterpret_cast<const char*>(data.data()),
              data.size() * sizeof(float));
  return batch;
}

TEST(CalibrationSessionTest,
     ObservingOnThePoolGivesTheRangesOfObservingInline) {
  // The observations of a model run go to the pool's workers in order; with
  // the EMA observer (order-sensitive) and the histogram one the ranges must
  // be those of observing each value as it is produced.
  for (const char* method : {"moving_average", "percentile", "min_max"}) {
    calibration::ObserverConfig config;
    config.method = method;
    auto inline_session = Session(Model({-1, 4}), config);
    auto pooled_session = Session(Model({-1, 4}), config);
    ThreadPool pool(2);
    CancellationToken cancel;
    for (int b = 0; b < 12; ++b) {
      const int rows = 1 + (b * 5) % 9;
      ASSERT_TRUE(Add(inline_session.get(), VaryingBatch(b, rows)).ok());
      ASSERT_TRUE(
          pooled_session->AddBatch(VaryingBatch(b, rows), &pool, cancel).ok());
    }
    const quantd::v1::CalibrationResult a = inline_session->Result();
    const quantd::v1::CalibrationResult b = pooled_session->Result();
    ASSERT_EQ(a.ranges_size(), 3) << method;
    ASSERT_EQ(b.ranges_size(), 3) << method;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(a.ranges(i).tensor_name(), b.ranges(i).tensor_name());
      EXPECT_EQ(a.ranges(i).min(), b.ranges(i).min()) << method << " " << i;
      EXPECT_EQ(a.ranges(i).max(), b.ranges(i).max()) << method << " " << i;
    }
  }
}

TEST(CalibrationSessionTest,
     ARefusedFirstObservationOnThePoolLeavesNoObserver) {
  // NaN reaches r's observer on a worker; the batch fails and r, seen for the
  // first time, keeps no observer (an unobserved range would be reported).
  auto session = Session(Model({-1, 4}));
  ThreadPool pool(2);
  CancellationToken cancel;
  quantd::v1::TensorBatch batch = Batch("x", {2, 4});
  std::string data = batch.tensors(0).data();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&data[0], &nan, sizeof(nan));
  batch.mutable_tensors(0)->set_data(data);
  absl::Status s = session->AddBatch(batch, &pool, cancel);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("'x'"), HasSubstr("NaN")));
  EXPECT_TRUE(session->Result().ranges().empty());
  EXPECT_EQ(session->Result().batch_count(), 0);
  ASSERT_TRUE(session->AddBatch(Batch("x", {2, 4}), &pool, cancel).ok());
  EXPECT_EQ(session->Result().ranges_size(), 3);
}

// A model importing the default domain at `opset` (IR 8, or 3 before opset
// 13), its graph named `name` and empty.
onnx::ModelProto EmptyModel(int opset, const std::string& name) {
  onnx::ModelProto m;
  m.set_ir_version(opset >= 13 ? 8 : 3);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name(name);
  return m;
}

// Appends node `out`_node: op(in...) -> out.
onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                         const std::vector<std::string>& in,
                         const std::string& out) {
  onnx::NodeProto* n = g->add_node();
  n->set_name(out + "_node");
  n->set_op_type(op);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

TEST(CalibrationSessionTest, BoolBatchBytesEnterAsZeroOrOne) {
  // mask (BOOL [1, 4]) -> Cast to FLOAT -> y. A client's BOOL byte other
  // than 0 or 1 is true, as numpy reads it; copied as is it was a C++ bool
  // no kernel may read (undefined behaviour).
  onnx::ModelProto m = EmptyModel(13, "mask");
  onnx::GraphProto* g = m.mutable_graph();
  onnx::ValueInfoProto* in = g->add_input();
  in->set_name("mask");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::BOOL);
  in->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->add_dim()
      ->set_dim_value(4);
  onnx::AttributeProto* to = AddNode(g, "Cast", {"mask"}, "y")->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  SetType(g->add_output(), "y", {4});
  auto session = Session(m);
  quantd::v1::TensorBatch batch;
  quantd::v1::NamedTensor* t = batch.add_tensors();
  t->set_name("mask");
  t->set_data_type(onnx::TensorProto::BOOL);
  t->add_shape(4);
  t->set_data(std::string("\x00\xbe\x01\xff", 4));
  ASSERT_TRUE(Add(session.get(), batch).ok());
  const quantd::v1::CalibrationResult result = session->Result();
  bool found = false;
  for (const auto& r : result.ranges()) {
    if (r.tensor_name() != "y") continue;
    found = true;
    EXPECT_EQ(r.min(), 0.0f);
    EXPECT_EQ(r.max(), 1.0f);
  }
  EXPECT_TRUE(found);
}

// x [-1, 4] -> Clip(lo, hi) -> y, x -> Relu -> r, x -> Clip(lo, -lo) -> z
// (a bound computed by a node). Opset 13: lo an initializer, hi a Constant
// node; opset 6: attributes.
onnx::ModelProto ClipModel(int opset) {
  onnx::ModelProto m = EmptyModel(opset, "clips");
  onnx::GraphProto* g = m.mutable_graph();
  SetType(g->add_input(), "x", {-1, 4});
  auto add = [&](const std::string& op, std::vector<std::string> in,
                 const std::string& out) { return AddNode(g, op, in, out); };
  if (opset >= 11) {
    onnx::TensorProto* lo = g->add_initializer();
    lo->set_name("lo");
    lo->set_data_type(onnx::TensorProto::FLOAT);
    lo->add_float_data(-1.0f);
    onnx::NodeProto* hi = add("Constant", {}, "hi");
    onnx::AttributeProto* v = hi->add_attribute();
    v->set_name("value");
    v->set_type(onnx::AttributeProto::TENSOR);
    v->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    v->mutable_t()->add_float_data(2.5f);
    add("Clip", {"x", "lo", "hi"}, "y");
    add("Neg", {"lo"}, "neg_lo");  // 1, but computed.
    add("Clip", {"x", "lo", "neg_lo"}, "z");
  } else {
    onnx::NodeProto* clip = add("Clip", {"x"}, "y");
    onnx::AttributeProto* mn = clip->add_attribute();
    mn->set_name("min");
    mn->set_type(onnx::AttributeProto::FLOAT);
    mn->set_f(-1.0f);
    onnx::AttributeProto* mx = clip->add_attribute();
    mx->set_name("max");
    mx->set_type(onnx::AttributeProto::FLOAT);
    mx->set_f(2.5f);
  }
  add("Relu", {"x"}, "r");
  for (const char* out : {"y", "r", "z"}) {
    if (opset < 11 && std::string(out) == "z") continue;
    SetType(g->add_output(), out, {-1, 4});
  }
  return m;
}

TEST(CalibrationSessionTest, ReluAndConstantClipOutputsAreFoundAsClamps) {
  for (int opset : {6, 13}) {
    const auto clamps = CalibrationSession::FindClamps(ClipModel(opset));
    ASSERT_TRUE(clamps.contains("y")) << opset;
    EXPECT_EQ(clamps.at("y").input, "x");
    EXPECT_EQ(clamps.at("y").lo, -1.0f);
    EXPECT_EQ(clamps.at("y").hi, 2.5f);
    ASSERT_TRUE(clamps.contains("r")) << opset;
    EXPECT_EQ(clamps.at("r").lo, 0.0f);
    EXPECT_EQ(clamps.at("r").hi, std::numeric_limits<float>::infinity());
    // A bound computed at run time is observed from the values.
    EXPECT_FALSE(clamps.contains("z")) << opset;
  }
}

TEST(CalibrationSessionTest, ClampedOutputsGetTheRangesOfTheirValues) {
  // Whichever way an observer takes a Relu or Clip output (its input's
  // extremes clamped, or the values), the ranges are those of the values.
  for (int opset : {6, 13}) {
    for (const char* method : {"min_max", "moving_average", "percentile"}) {
      for (bool pooled : {false, true}) {
        calibration::ObserverConfig config;
        config.method = method;
        auto session = Session(ClipModel(opset), config);
        auto reference = Session(ClipModel(opset), config);
        ThreadPool pool(2);
        CancellationToken cancel;
        for (int b = 0; b < 6; ++b) {
          quantd::v1::TensorBatch batch = VaryingBatch(b, 3 + b);
          absl::Status added =
              session->AddBatch(batch, pooled ? &pool : nullptr, cancel);
          ASSERT_TRUE(added.ok()) << added;
          // The reference is sent the clamped values as observed activations
          // (a batch of them cannot hold the graph input).
          const std::string raw = batch.tensors(0).data();
          std::vector<float> x(raw.size() / sizeof(float));
          std::memcpy(x.data(), raw.data(), raw.size());
          quantd::v1::TensorBatch values;
          auto put = [&](const std::string& name, float lo, float hi) {
            std::vector<float> v(x.size());
            for (size_t i = 0; i < x.size(); ++i) {
              v[i] = std::min(std::max(x[i], lo), hi);
            }
            auto* t = values.add_tensors();
            *t = batch.tensors(0);
            t->set_name(name);
            t->set_data(reinterpret_cast<const char*>(v.data()),
                        v.size() * sizeof(float));
          };
          constexpr float kInf = std::numeric_limits<float>::infinity();
          put("y", -1.0f, 2.5f);
          put("r", 0.0f, kInf);
          ASSERT_TRUE(Add(reference.get(), values).ok());
        }
        const quantd::v1::CalibrationResult a = session->Result();
        const quantd::v1::CalibrationResult e = reference->Result();
        const std::string where =
            absl::StrCat("opset ", opset, " ", method, pooled ? " pooled" : "");
        ASSERT_EQ(e.ranges_size(), 2) << where;  // r, y.
        for (const auto& range : e.ranges()) {
          bool found = false;
          for (const auto& got : a.ranges()) {
            if (got.tensor_name() != range.tensor_name()) continue;
            found = true;
            EXPECT_EQ(got.min(), range.min())
                << where << " " << got.tensor_name();
            EXPECT_EQ(got.max(), range.max())
                << where << " " << got.tensor_name();
          }
          EXPECT_TRUE(found) << where << " " << range.tensor_name();
        }
      }
    }
  }
}

TEST(CalibrationSessionTest, AClampOfAValueTheRunNeverProducedReadsItsValues) {
  // r = Relu(w), w an initializer: no run produces w, so an observer named w
  // (made by a batch of observed activations) holds other extremes than
  // this run's; r must be observed from its own values.
  onnx::ModelProto m = EmptyModel(13, "relu_of_weight");
  onnx::GraphProto* g = m.mutable_graph();
  SetType(g->add_input(), "x", {-1, 2});
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_float_data(-1.0f);
  w->add_float_data(5.0f);
  AddNode(g, "Relu", {"w"}, "r");
  AddNode(g, "Add", {"x", "r"}, "y");
  SetType(g->add_output(), "y", {-1, 2});
  ASSERT_TRUE(CalibrationSession::FindClamps(m).contains("r"));
  auto session = Session(m);
  quantd::v1::TensorBatch activations;
  auto* t = activations.add_tensors();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_shape(2);
  const float wide[2] = {-100.0f, 100.0f};
  t->set_data(reinterpret_cast<const char*>(wide), sizeof(wide));
  ASSERT_TRUE(Add(session.get(), activations).ok());
  ThreadPool pool(2);
  CancellationToken cancel;
  ASSERT_TRUE(session->AddBatch(Batch("x", {3, 2}), &pool, cancel).ok());
  const quantd::v1::CalibrationResult result = session->Result();
  for (const auto& range : result.ranges()) {
    if (range.tensor_name() != "r") continue;
    EXPECT_EQ(range.min(), 0.0f);
    EXPECT_EQ(range.max(), 5.0f);
    return;
  }
  ADD_FAILURE() << "no range for r";
}

absl::StatusOr<quantd::v1::CalibrationResult> RunCalibrateOn(
    const onnx::ModelProto& model, quantd::v1::TensorBatch batch) {
  auto q = std::make_shared<BatchQueue>(2);
  q->Push(std::move(batch));
  q->Close();
  CancellationToken cancel;
  return RunCalibrate({}, model.SerializeAsString(), q.get(), {}, cancel,
                      nullptr);
}

TEST(RunCalibrateChecksTest, ObservedOnlyCalibrationOfAModelWithAnUnknownOp) {
  auto r = RunCalibrateOn(Model({-1, 4}, "Mystery"), Batch("r", {2, 4}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->ranges_size(), 1);
  EXPECT_EQ(r->ranges(0).tensor_name(), "r");
  EXPECT_EQ(r->batch_count(), 1);
}

TEST(RunCalibrateChecksTest, OverflowingBatchIsInvalidArgument) {
  auto r = RunCalibrateOn(Model({-1}), Batch("x", {k2p62}, 0));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()),
              AllOf(HasSubstr("calibration batch 1"), HasSubstr("'x'")));
  r = RunCalibrateOn(Model({-1}), Batch("r", {k2p62}, 0));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), AllOf(HasSubstr("'r'"), HasSubstr("64 bits")));
}

TEST(RunQuantizeChecksTest, StaticBatchWithOverflowingShapeIsInvalidArgument) {
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
  for (const char* name : {"x", "r"}) {
    auto q = std::make_shared<BatchQueue>(2);
    q->Push(Batch(name, {k2p62}, 0));
    q->Close();
    CancellationToken cancel;
    absl::StatusOr<QuantizeResult> r = RunQuantize(
        config, Model({-1}).SerializeAsString(), {}, cancel, nullptr, q.get());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(Msg(r.status()), AllOf(HasSubstr("calibration batch 1"),
                                       HasSubstr(absl::StrCat("'", name, "'")),
                                       HasSubstr("64 bits")));
  }
}

}  // namespace
}  // namespace quantd
