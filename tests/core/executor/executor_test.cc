#include "core/executor/executor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/core/graph/test_models.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::ModelBuilder;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

// Float Clip and Relu take a vectorised clamp: bounds, NaN kept, -0 kept,
// odd lengths, and lengths the pool splits.
TEST(ClipReluTest, FloatClampMatchesScalarRule) {
  ThreadPool pool(2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (int64_t n : {1, 7, 33, 100003}) {
      std::vector<float> x = Random(n, 5);
      for (float& v : x) v *= 10.0f;
      x[0] = nan;
      if (n > 1) x[1] = -0.0f;
      if (n > 2) x[2] = std::numeric_limits<float>::infinity();
      ModelBuilder mb(13);
      mb.Input("x", {n})
          .Initializer("lo", {}, {-1.5f})
          .Initializer("hi", {}, {6.0f})
          .Node("Clip", {"x", "lo", "hi"}, {"c"}, "clip")
          .Node("Relu", {"x"}, {"r"}, "relu")
          .Output("c")
          .Output("r");
      auto exec = MustCreate(mb.Build());
      ASSERT_NE(exec, nullptr);
      Executor::RunOptions ro;
      ro.pool = p;
      absl::StatusOr<std::vector<Tensor>> out =
          exec->Run({{"x", Tensor::FromVector<float>({n}, x)}}, ro);
      ASSERT_TRUE(out.ok()) << out.status();
      const float* c = (*out)[0].data<float>();
      const float* r = (*out)[1].data<float>();
      EXPECT_TRUE(std::isnan(c[0]));
      EXPECT_TRUE(std::isnan(r[0]));
      for (int64_t i = 1; i < n; ++i) {
        const float want_c = std::min(std::max(x[i], -1.5f), 6.0f);
        const float want_r = std::max(x[i], 0.0f);
        ASSERT_EQ(c[i], want_c) << "Clip at " << i << " of " << n;
        ASSERT_EQ(r[i], want_r) << "Relu at " << i << " of " << n;
        ASSERT_EQ(std::signbit(r[i]), std::signbit(want_r)) << i;
      }
    }
  }
}

// ------------------------------------------------------------ broadcasting

TEST(BroadcastTest, BinaryOpsMatchNaiveBroadcast) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      cases = {
          {{2, 3, 4}, {2, 3, 4}},    {{2, 3, 4}, {}},     {{}, {2, 3, 4}},
          {{2, 3, 4}, {4}},          {{2, 3, 4}, {3, 1}}, {{2, 1, 4}, {3, 1}},
          {{1, 3, 1}, {2, 1, 4}},    {{5, 1}, {1, 6}},    {{1}, {7}},
          {{2, 3, 1, 5}, {3, 4, 1}}, {{0, 3}, {1, 3}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const auto& [as, bs] : cases) {
      SCOPED_TRACE(
          absl::StrCat(op, " ", ShapeString(as), " ", ShapeString(bs)));
      const std::vector<float> a = Random(testing::Product(as), 7);
      std::vector<float> b = Random(testing::Product(bs), 8);
      for (float& v : b) v += 2.0f;  // No division by ~0.
      ModelBuilder mb(13);
      mb.Input("a", as).Input("b", bs).Node(op, {"a", "b"}, {"y"}).Output("y");
      auto exec = MustCreate(mb.Build());
      auto out = exec->Run({{"a", Tensor::FromVector<float>(as, a)},
                            {"b", Tensor::FromVector<float>(bs, b)}});
      ASSERT_TRUE(out.ok()) << out.status();
      const Tensor& y = (*out)[0];
      // Naive: for every output index, index each input right-aligned.
      const size_t rank = y.shape().size();
      std::vector<int64_t> idx(rank, 0);
      for (int64_t i = 0; i < y.size(); ++i) {
        int64_t rest = i;
        for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
          idx[d] = rest % y.dim(d);
          rest /= y.dim(d);
        }
        auto at = [&](const std::vector<int64_t>& s) {
          int64_t off = 0;
          for (size_t d = 0; d < s.size(); ++d) {
            const int64_t j = idx[rank - s.size() + d];
            off = off * s[d] + (s[d] == 1 ? 0 : j);
          }
          return off;
        };
        const float x0 = a[at(as)], x1 = b[at(bs)];
        const float want = std::string(op) == "Add"   ? x0 + x1
                           : std::string(op) == "Sub" ? x0 - x1
                           : std::string(op) == "Mul" ? x0 * x1
                                                      : x0 / x1;
        ASSERT_FLOAT_EQ(y.data<float>()[i], want) << "at flat position " << i;
      }
    }
  }
}

TEST(BroadcastTest, IncompatibleShapesAreInvalid) {
  ModelBuilder mb(13);
  mb.Input("a", {2, 3})
      .Input("b", {4})
      .Node("Add", {"a", "b"}, {"y"}, "add")
      .Output("y");
  auto exec = MustCreate(mb.Build());
  auto out = exec->Run({{"a", Tensor::FromVector<float>({2, 3}, Random(6, 1))},
                        {"b", Tensor::FromVector<float>({4}, Random(4, 1))}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("broadcast"));
}

// ------------------------------------------------------------------ memory

TEST(MemoryTest, IntermediatesAreFreedAfterTheirLastReader) {
  // x -> 30 Relus -> y. Without freeing, 31 buffers would be alive at the
  // end; with it, at most the feed, the previous value and the new one.
  constexpr int kChain = 30;
  ModelBuilder mb(13);
  mb.Input("x", {1000});
  std::string prev = "x";
  for (int i = 0; i < kChain; ++i) {
    const std::string out = i + 1 == kChain ? "y" : absl::StrCat("r", i);
    mb.Node("Relu", {prev}, {out});
    prev = out;
  }
  mb.Output("y");
  auto exec = MustCreate(mb.Build());
  ASSERT_NE(exec, nullptr);
  const absl::flat_hash_map<std::string, Tensor> feeds = {
      {"x", Tensor::FromVector<float>({1000}, Random(1000, 1))}};
  const int64_t base = Tensor::LiveBuffers();  // The feed (and nothing else).
  int64_t peak = 0;
  int calls = 0;
  Executor::RunOptions ro;
  ro.on_tensor = [&](const std::string&, const Tensor&) {
    ++calls;
    peak = std::max(peak, Tensor::LiveBuffers() - base);
  };
  auto out = exec->Run(feeds, ro);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(calls, kChain + 1);  // The input, then every node output.
  EXPECT_LE(peak, 2);            // Previous value + the one just made.
  // After the run only the returned output is still ours.
  EXPECT_EQ(Tensor::LiveBuffers() - base, 1);
  out->clear();
  EXPECT_EQ(Tensor::LiveBuffers() - base, 0);
}

TEST(MemoryTest, FanOutKeepsValueUntilLastReader) {
  // a is read by the first and the last node: it must survive in between.
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"a"})
      .Node("Neg", {"a"}, {"b"})
      .Node("Neg", {"b"}, {"c"})
      .Node("Add", {"a", "c"}, {"y"})
      .Output("y");
  auto exec = MustCreate(mb.Build());
  auto out = exec->Run(
      {{"x", Tensor::FromVector<float>({4}, {-1.0f, 2.0f, -3.0f, 4.0f})}});
  ASSERT_TRUE(out.ok()) << out.status();
  const float* y = (*out)[0].data<float>();
  EXPECT_EQ(std::vector<float>(y, y + 4),
            (std::vector<float>{0.0f, 4.0f, 0.0f, 8.0f}));
}

TEST(MemoryTest, ExtraOutputsAreKept) {
  ModelBuilder mb(13);
  mb.Input("x", {3})
      .Node("Relu", {"x"}, {"a"})
      .Node("Neg", {"a"}, {"y"})
      .Output("y");
  auto exec = MustCreate(mb.Build());
  Executor::RunOptions ro;
  ro.extra_outputs = {"a"};
  auto out = exec->Run(
      {{"x", Tensor::FromVector<float>({3}, {-1.0f, 0.5f, 2.0f})}}, ro);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_FLOAT_EQ((*out)[1].data<float>()[2], 2.0f);
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[2], -2.0f);
}

// ----------------------------------------------------------------- refusal

TEST(CreateTest, UnsupportedOpNamesOpAndNode) {
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"a"})
      .Node("TfIdfVectorizer", {"a"}, {"y"}, "my_tfidf")
      .Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("TfIdfVectorizer"));
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("my_tfidf"));
}

TEST(CreateTest, UnsupportedAttributeValueIsRefusedByName) {
  ModelBuilder mb(13);
  mb.Input("x", {1, 1, 4, 4})
      .Weight("W", {1, 1, 3, 3})
      .Node("Conv", {"x", "W"}, {"y"}, "conv7");
  AddStringAttr(&mb.model(), "auto_pad", "SAME_SIDEWAYS");
  mb.Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg(e.status().message());
  EXPECT_THAT(msg, HasSubstr("auto_pad"));
  EXPECT_THAT(msg, HasSubstr("SAME_SIDEWAYS"));
  EXPECT_THAT(msg, HasSubstr("conv7"));
  EXPECT_THAT(msg, HasSubstr("Conv"));
}

TEST(CreateTest, UnknownAttributeIsNeverIgnored) {
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"y"}, "relu3")
      .Attr("fused_alpha", 2)
      .Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("fused_alpha"));
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("relu3"));
}

TEST(CreateTest, ForeignDomainsAndBranchlessIfAreRefused) {
  ModelBuilder mb(13);
  mb.Input("x", {4}).Node("Relu", {"x"}, {"y"}, "r");
  mb.model().mutable_graph()->mutable_node(0)->set_domain("com.microsoft");
  mb.Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("com.microsoft"));

  // A model importing only another domain (ONNX's training ops) says so
  // rather than "opsets 7 to 21; the model imports 0".
  onnx::ModelProto foreign = mb.Build();
  foreign.clear_opset_import();
  auto* training = foreign.add_opset_import();
  training->set_domain("ai.onnx.preview.training");
  training->set_version(1);
  foreign.mutable_graph()->mutable_node(0)->set_domain(
      "ai.onnx.preview.training");
  e = Executor::Create(foreign);
  ASSERT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(e.status().message()),
              HasSubstr("imports no default-domain (ai.onnx) opset: its ops "
                        "are from other domains (first: Relu of "
                        "'ai.onnx.preview.training')"));

  // Control flow runs (tests/core/executor/ops_control_test.cc); an If
  // without its branches is malformed.
  ModelBuilder ifb(13);
  ifb.Input("c", {}, TP::BOOL).Node("If", {"c"}, {"y"}, "branch").Output("y");
  e = Executor::Create(ifb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("then_branch"));
}

TEST(CreateTest, UndefinedInputIsInvalid) {
  ModelBuilder mb(13);
  mb.Input("x", {4}).Node("Add", {"x", "nowhere"}, {"y"}, "add").Output("y");
  auto e = Executor::Create(mb.Build());
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("nowhere"));
}

TEST(CreateTest, SupportedOpsListsTheCnnAndTransformerOps) {
  const std::vector<std::string> ops = Executor::SupportedOps();
  for (const char* op :
       {"Conv", "Gemm", "MatMul", "Softmax", "LayerNormalization", "Slice",
        "Where", "Pad", "Range", "Erf"}) {
    EXPECT_THAT(ops, ::testing::Contains(op));
  }
}

// -------------------------------------------------------------------- runs

TEST(RunTest, FeedsAreChecked) {
  auto exec = MustCreate(testing::MatMulModel(4, 3).Build());
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(exec->Run({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exec->Run({{"x", Tensor::FromVector<float>({2, 5}, Random(10, 1))}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exec->Run({{"x", Tensor::FromVector<int64_t>(
                                 {2, 4}, {0, 0, 0, 0, 0, 0, 0, 0})}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exec->Run({{"x", Tensor::FromVector<float>({2, 4}, Random(8, 1))},
                       {"zzz", Tensor::Scalar<float>(1)}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RunTest, CancelledBeforeOrDuringRun) {
  ModelBuilder mb(13);
  mb.Input("x", {4})
      .Node("Relu", {"x"}, {"a"})
      .Node("Neg", {"a"}, {"y"})
      .Output("y");
  auto exec = MustCreate(mb.Build());
  const absl::flat_hash_map<std::string, Tensor> feeds = {
      {"x", Tensor::FromVector<float>({4}, Random(4, 1))}};
  CancellationToken token;
  Executor::RunOptions ro;
  ro.cancel = &token;
  EXPECT_TRUE(exec->Run(feeds, ro).ok());
  // Cancel once the first node's output appears: the second never runs.
  int produced = 0;
  ro.on_tensor = [&](const std::string& name, const Tensor&) {
    ++produced;
    if (name == "a") token.Cancel();
  };
  auto out = exec->Run(feeds, ro);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(produced, 2);  // x and a, not y.
  EXPECT_EQ(exec->Run(feeds, ro).status().code(), absl::StatusCode::kCancelled);
}

TEST(RunTest, ConcurrentRunsOnThePoolAgree) {
  auto exec = MustCreate(testing::ConvModel(8, 16).Build());
  ASSERT_NE(exec, nullptr);
  ThreadPool pool(2);
  constexpr int kBatches = 8;
  std::vector<Tensor> inputs, results(kBatches);
  for (int i = 0; i < kBatches; ++i) {
    inputs.push_back(
        Tensor::FromVector<float>({1, 8, 8, 8}, Random(512, 10 + i)));
  }
  std::atomic<int> failures{0};
  pool.ParallelFor(kBatches, [&](int64_t i) {
    Executor::RunOptions ro;
    ro.pool = &pool;  // Nested: kernels fan out on the same pool.
    auto out = exec->Run({{"x", inputs[i]}}, ro);
    if (!out.ok()) {
      ++failures;
      return;
    }
    results[i] = (*out)[0];
  });
  ASSERT_EQ(failures.load(), 0);
  for (int i = 0; i < kBatches; ++i) {
    auto serial = exec->Run({{"x", inputs[i]}});
    ASSERT_TRUE(serial.ok());
    const Tensor& a = (*serial)[0];
    ASSERT_EQ(a.shape(), results[i].shape());
    for (int64_t j = 0; j < a.size(); ++j) {
      ASSERT_FLOAT_EQ(a.data<float>()[j], results[i].data<float>()[j]);
    }
  }
}

TEST(RunTest, OnTensorSeesEveryValueOnce) {
  auto exec = MustCreate(testing::ConvModel(2, 3).Build());
  std::vector<std::string> names;
  Executor::RunOptions ro;
  ro.on_tensor = [&](const std::string& n, const Tensor& t) {
    names.push_back(n);
    EXPECT_FALSE(t.empty());
  };
  ASSERT_TRUE(exec->Run({{"x", Tensor::FromVector<float>({1, 2, 8, 8},
                                                         Random(128, 1))}},
                        ro)
                  .ok());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "conv", "y"}));
}

// ------------------------------------------------------------ tensor / npy

TEST(TensorTest, ProtoRoundTripAndTypedFields) {
  onnx::TensorProto p;
  p.set_data_type(TP::INT64);
  p.add_dims(3);
  for (int64_t v : {5, -2, 7}) p.add_int64_data(v);
  auto t = Tensor::FromProto(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToInt64Vector(), (std::vector<int64_t>{5, -2, 7}));
  auto back = Tensor::FromProto(t->ToProto("z"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ToInt64Vector(), (std::vector<int64_t>{5, -2, 7}));

  onnx::TensorProto b;
  b.set_data_type(TP::BOOL);
  b.add_dims(2);
  b.add_int32_data(1);
  b.add_int32_data(0);
  auto bt = Tensor::FromProto(b);
  ASSERT_TRUE(bt.ok());
  EXPECT_TRUE(bt->data<bool>()[0]);
  EXPECT_FALSE(bt->data<bool>()[1]);

  onnx::TensorProto h;
  h.set_data_type(TP::COMPLEX64);
  EXPECT_EQ(Tensor::FromProto(h).status().code(),
            absl::StatusCode::kUnimplemented);
  onnx::TensorProto bad;
  bad.set_data_type(TP::FLOAT);
  bad.add_dims(3);
  bad.add_float_data(1.0f);
  EXPECT_EQ(Tensor::FromProto(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A BOOL byte other than 0 or 1 is no C++ bool (reading it is undefined:
// libFuzzer found Loop's condition read from one); it enters as true.
TEST(TensorTest, BoolBytesEnterAsZeroOrOne) {
  onnx::TensorProto p;
  p.set_data_type(TP::BOOL);
  p.add_dims(4);
  p.set_raw_data(std::string("\x00\xbe\x01\xff", 4));
  absl::StatusOr<Tensor> t = Tensor::FromProto(p);
  ASSERT_TRUE(t.ok()) << t.status();
  const uint8_t* bytes = static_cast<const uint8_t*>(t->raw());
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + 4),
            (std::vector<uint8_t>{0, 1, 1, 1}));

  std::string npy =
      SerializeNpy(Tensor::FromVector<bool>({3}, {false, true, true}));
  npy[npy.size() - 2] = '\x80';  // The middle value's byte.
  absl::StatusOr<Tensor> parsed = ParseNpy(npy);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const uint8_t* npy_bytes = static_cast<const uint8_t*>(parsed->raw());
  EXPECT_EQ(std::vector<uint8_t>(npy_bytes, npy_bytes + 3),
            (std::vector<uint8_t>{0, 1, 1}));
}

TEST(NpyTest, RoundTripsEveryType) {
  const Tensor f = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor i = Tensor::FromVector<int64_t>({4}, {1, -2, 3, 1LL << 40});
  const Tensor u = Tensor::FromVector<uint8_t>({2, 1}, {7, 255});
  const Tensor s = Tensor::Scalar<int32_t>(-9);
  for (const Tensor* t : {&f, &i, &u, &s}) {
    auto back = ParseNpy(SerializeNpy(*t));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), t->dtype());
    EXPECT_EQ(back->shape(), t->shape());
    EXPECT_EQ(std::string(static_cast<const char*>(back->raw()), back->bytes()),
              std::string(static_cast<const char*>(t->raw()), t->bytes()));
  }
}

TEST(NpyTest, ReadsNumpyWrittenFilesAndRefusesTheRest) {
  // The digits example was written by numpy (v1 header, '<f4').
  auto x = ReadNpyFile(std::string(QUANTD_SOURCE_DIR) +
                       "/examples/digits/test_x.npy");
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->dtype(), TP::FLOAT);
  EXPECT_EQ(x->rank(), 4);
  // A version 2 header (4-byte length).
  std::string v1 = SerializeNpy(Tensor::FromVector<float>({2}, {1.5f, -1.0f}));
  const uint16_t len =
      static_cast<uint8_t>(v1[8]) | (static_cast<uint8_t>(v1[9]) << 8);
  std::string v2 = v1.substr(0, 6) + std::string("\x02\x00", 2);
  const uint32_t len32 = len;
  v2.append(reinterpret_cast<const char*>(&len32), 4);
  v2 += v1.substr(10);
  auto t2 = ParseNpy(v2);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_FLOAT_EQ(t2->data<float>()[0], 1.5f);

  std::string fortran = v1;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_EQ(ParseNpy(fortran).status().code(),
            absl::StatusCode::kUnimplemented);
  std::string big = v1;
  big.replace(big.find("<f4"), 3, ">f4");
  EXPECT_EQ(ParseNpy(big).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ParseNpy("garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNpy(v1.substr(0, v1.size() - 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Opsets 1-6: an op that means the same at 7 runs; one that changed is
// refused by name (Add-6 still had its `broadcast` attribute).
TEST(ExecutorTest, OldOpsetsRunWhenTheirOpsAreUnchangedSinceThen) {
  OneNode softplus("Softplus", 1);
  softplus.inputs = {T1<float>({3}, {-1.0f, 0.0f, 2.0f})};
  absl::StatusOr<Tensor> y = softplus.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y,
              T1<float>({3}, {std::log1p(std::exp(-1.0f)), std::log(2.0f),
                              std::log1p(std::exp(2.0f))}),
              1e-6, "Softplus-1");

  OneNode add("Add", 6);
  add.inputs = {T1<float>({1}, {1.0f}), T1<float>({1}, {2.0f})};
  absl::StatusOr<Tensor> sum = add.Run1();
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(sum.status().message(),
              HasSubstr("imports 6 and its op Add changed at opset 7"));
}

}  // namespace
}  // namespace quantd::executor
