// LSTM, GRU and RNN kernels against PyTorch goldens
// (scripts/make_rnn_image_golden.py), a scalar reference LSTM for what
// PyTorch lacks (peepholes, input_forget, clip, reverse with
// sequence_lens), and ONNX Runtime on a torch.onnx.export model.
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/executor/executor.h"
#include "core/executor/npy.h"
#include "core/graph/model_io.h"
#include "gtest/gtest.h"
#include "tests/core/executor/node_tester.h"
#include "tests/support/ort.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;
using ::quantd::testing::SourcePath;

Tensor Random(std::vector<int64_t> shape, uint32_t seed, float scale = 1) {
  Tensor t(TP::FLOAT, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (int64_t i = 0; i < t.size(); ++i) t.mutable_data<float>()[i] = d(gen);
  return t;
}

// ------------------------------------------------------------ PyTorch goldens

OneNode LstmBidirNode(bool dbl) {
  auto cv = [&](const Tensor& t) { return dbl ? ToDouble(t) : t; };
  OneNode n("LSTM", 14);
  n.inputs = {cv(RnnImageGolden("lstm_bidir_x")),
              cv(RnnImageGolden("lstm_bidir_w")),
              cv(RnnImageGolden("lstm_bidir_r")),
              cv(RnnImageGolden("lstm_bidir_b")),
              Tensor(),
              cv(RnnImageGolden("lstm_bidir_h0")),
              cv(RnnImageGolden("lstm_bidir_c0"))};
  n.outputs = 3;
  n.Int("hidden_size", 4);
  n.attrs.push_back(StrAttr("direction", "bidirectional"));
  return n;
}

TEST(OpsRnnTest, LstmBidirectionalWithInitialStatesMatchesTorch) {
  for (bool dbl : {false, true}) {
    for (bool threaded : {false, true}) {
      ThreadPool pool(2);
      absl::StatusOr<std::vector<Tensor>> out =
          LstmBidirNode(dbl).Run(threaded ? &pool : nullptr);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ((*out)[0].dtype(), dbl ? TP::DOUBLE : TP::FLOAT);
      ExpectClose((*out)[0], RnnImageGolden("lstm_bidir_y"), 1e-5, "Y");
      ExpectClose((*out)[1], RnnImageGolden("lstm_bidir_yh"), 1e-5, "Y_h");
      ExpectClose((*out)[2], RnnImageGolden("lstm_bidir_yc"), 1e-5, "Y_c");
    }
  }
}

TEST(OpsRnnTest, GruBidirectionalBatchMajorPaddedMatchesTorch) {
  // PyTorch's GRU is ONNX's linear_before_reset = 1; layout 1 is its
  // batch_first; pack_padded_sequence is sequence_lens.
  OneNode n("GRU", 14);
  n.inputs = {RnnImageGolden("gru_bidir_x"),    RnnImageGolden("gru_bidir_w"),
              RnnImageGolden("gru_bidir_r"),    RnnImageGolden("gru_bidir_b"),
              RnnImageGolden("gru_bidir_lens"), RnnImageGolden("gru_bidir_h0")};
  n.outputs = 2;
  n.Int("hidden_size", 4).Int("linear_before_reset", 1).Int("layout", 1);
  n.attrs.push_back(StrAttr("direction", "bidirectional"));
  absl::StatusOr<std::vector<Tensor>> out = n.Run();
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectClose((*out)[0], RnnImageGolden("gru_bidir_y"), 1e-5, "Y");
  ExpectClose((*out)[1], RnnImageGolden("gru_bidir_yh"), 1e-5, "Y_h");
}

// A bidirectional node is a forward and a reverse node side by side.
TEST(OpsRnnTest, SingleDirectionsMatchBidirectionalHalves) {
  absl::StatusOr<std::vector<Tensor>> both = LstmBidirNode(false).Run();
  ASSERT_TRUE(both.ok()) << both.status();
  const int64_t seq = 6, batch = 3, hid = 4;
  for (int d = 0; d < 2; ++d) {
    OneNode n = LstmBidirNode(false);
    n.attrs.back() = StrAttr("direction", d == 0 ? "forward" : "reverse");
    for (int i : {1, 2, 3, 5, 6}) {
      const Tensor& full = n.inputs[i];
      std::vector<int64_t> shape = full.shape();
      shape[0] = 1;
      Tensor half(TP::FLOAT, shape);
      std::copy_n(full.data<float>() + d * half.size(), half.size(),
                  half.mutable_data<float>());
      n.inputs[i] = half;
    }
    absl::StatusOr<std::vector<Tensor>> one = n.Run();
    ASSERT_TRUE(one.ok()) << one.status();
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t i = 0; i < batch * hid; ++i) {
        EXPECT_EQ((*one)[0].data<float>()[t * batch * hid + i],
                  (*both)[0].data<float>()[(t * 2 + d) * batch * hid + i]);
      }
    }
  }
}

// ------------------------------------------------ scalar reference (LSTM)

float Sig(float v) { return 1 / (1 + std::exp(-v)); }

// One direction of an ONNX LSTM, written out per element (layout 0, default
// activations). Returns Y [seq, batch, hid] with zeros past each length.
std::vector<float> ReferenceLstm(const Tensor& x, const float* w,
                                 const float* r, const float* b, const float* p,
                                 const std::vector<int>& lens, bool reverse,
                                 bool input_forget, float clip, int64_t hid) {
  const int64_t seq = x.dim(0), batch = x.dim(1), in = x.dim(2);
  std::vector<float> y(seq * batch * hid, 0.0f);
  auto cl = [&](float v) {
    return clip > 0 ? std::max(-clip, std::min(clip, v)) : v;
  };
  for (int64_t bi = 0; bi < batch; ++bi) {
    std::vector<float> h(hid, 0.0f), c(hid, 0.0f);
    for (int s = 0; s < lens[bi]; ++s) {
      const int64_t t = reverse ? lens[bi] - 1 - s : s;
      std::vector<float> g(4 * hid);
      for (int64_t j = 0; j < 4 * hid; ++j) {
        float acc = b[j] + b[4 * hid + j];
        for (int64_t k = 0; k < in; ++k) {
          acc += x.data<float>()[(t * batch + bi) * in + k] * w[j * in + k];
        }
        for (int64_t k = 0; k < hid; ++k) acc += h[k] * r[j * hid + k];
        g[j] = acc;
      }
      std::vector<float> hn(hid), cn(hid);
      for (int64_t k = 0; k < hid; ++k) {
        const float i = Sig(cl(g[k] + p[k] * c[k]));
        const float f = input_forget
                            ? 1 - i
                            : Sig(cl(g[2 * hid + k] + p[2 * hid + k] * c[k]));
        const float cc = std::tanh(cl(g[3 * hid + k]));
        cn[k] = f * c[k] + i * cc;
        const float o = Sig(cl(g[hid + k] + p[hid + k] * cn[k]));
        hn[k] = o * std::tanh(cn[k]);
      }
      h = hn;
      c = cn;
      std::copy(h.begin(), h.end(), y.begin() + (t * batch + bi) * hid);
    }
  }
  return y;
}

TEST(OpsRnnTest, LstmPeepholesInputForgetClipReverseMatchReference) {
  const int64_t seq = 5, batch = 3, in = 3, hid = 4;
  const Tensor x = Random({seq, batch, in}, 1);
  const Tensor w = Random({1, 4 * hid, in}, 2);
  const Tensor r = Random({1, 4 * hid, hid}, 3);
  const Tensor b = Random({1, 8 * hid}, 4);
  const Tensor p = Random({1, 3 * hid}, 5);
  const std::vector<int> lens = {5, 0, 3};
  Tensor sl = Tensor::FromVector<int32_t>({batch}, {5, 0, 3});
  for (bool reverse : {false, true}) {
    for (bool input_forget : {false, true}) {
      for (float clip : {0.0f, 0.7f}) {
        OneNode n("LSTM", 7);
        n.inputs = {x, w, r, b, sl, Tensor(), Tensor(), p};
        n.outputs = 1;
        n.Int("hidden_size", hid).Int("input_forget", input_forget);
        n.attrs.push_back(
            StrAttr("direction", reverse ? "reverse" : "forward"));
        if (clip > 0) n.attrs.push_back(FloatAttr("clip", clip));
        absl::StatusOr<Tensor> y = n.Run1();
        ASSERT_TRUE(y.ok()) << y.status();
        const std::vector<float> want = ReferenceLstm(
            x, w.data<float>(), r.data<float>(), b.data<float>(),
            p.data<float>(), lens, reverse, input_forget, clip, hid);
        ASSERT_EQ(y->size(), static_cast<int64_t>(want.size()));
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(y->data<float>()[i], want[i], 1e-5)
              << "reverse " << reverse << " input_forget " << input_forget
              << " clip " << clip << " at " << i;
        }
      }
    }
  }
}

// ----------------------------------------------------- activations, outputs

// A 1x1 RNN step H = f(x) (W = 1, R = 0, no bias) shows which function and
// which alpha / beta a direction got.
float RnnStep(const std::vector<std::string>& acts,
              const std::vector<float>& alphas, const std::vector<float>& betas,
              float x, int dir = 0, float clip = 0) {
  const bool bidi = acts.size() == 2;
  const int64_t d = bidi ? 2 : 1;
  OneNode n("RNN", 14);
  n.inputs = {Tensor::FromVector<float>({1, 1, 1}, {x}),
              Tensor::FromVector<float>({d, 1, 1}, {1, 1}),
              Tensor::FromVector<float>({d, 1, 1}, {0, 0})};
  n.outputs = 2;
  n.Int("hidden_size", 1);
  n.attrs.push_back(StrsAttr("activations", acts));
  if (bidi) n.attrs.push_back(StrAttr("direction", "bidirectional"));
  if (!alphas.empty())
    n.attrs.push_back(FloatsAttr("activation_alpha", alphas));
  if (!betas.empty()) n.attrs.push_back(FloatsAttr("activation_beta", betas));
  if (clip > 0) n.attrs.push_back(FloatAttr("clip", clip));
  absl::StatusOr<std::vector<Tensor>> out = n.Run();
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[1].data<float>()[dir] : NAN;
}

TEST(OpsRnnTest, ActivationsConsumeAlphaAndBetaInOrder) {
  EXPECT_FLOAT_EQ(RnnStep({"Relu"}, {}, {}, -2), 0);
  EXPECT_FLOAT_EQ(RnnStep({"Sigmoid"}, {}, {}, 0.5f), Sig(0.5f));
  EXPECT_FLOAT_EQ(RnnStep({"Affine"}, {2}, {0.5f}, 3), 6.5f);
  EXPECT_FLOAT_EQ(RnnStep({"LeakyRelu"}, {0.1f}, {}, -3), -0.3f);
  EXPECT_FLOAT_EQ(RnnStep({"LeakyRelu"}, {}, {}, -3), -0.03f);  // Default.
  EXPECT_FLOAT_EQ(RnnStep({"ThresholdedRelu"}, {2}, {}, 1.5f), 0);
  EXPECT_FLOAT_EQ(RnnStep({"ThresholdedRelu"}, {2}, {}, 2.5f), 2.5f);
  EXPECT_FLOAT_EQ(RnnStep({"ScaledTanh"}, {2}, {0.5f}, 1), 2 * std::tanh(0.5f));
  EXPECT_FLOAT_EQ(RnnStep({"HardSigmoid"}, {0.3f}, {0.4f}, 1), 0.7f);
  EXPECT_FLOAT_EQ(RnnStep({"HardSigmoid"}, {}, {}, 1), 0.7f);  // 0.2, 0.5.
  EXPECT_FLOAT_EQ(RnnStep({"Elu"}, {1.5f}, {}, -1),
                  1.5f * (std::exp(-1.0f) - 1));
  EXPECT_FLOAT_EQ(RnnStep({"Softsign"}, {}, {}, 3), 0.75f);
  EXPECT_FLOAT_EQ(RnnStep({"Softplus"}, {}, {}, 1), std::log1p(std::exp(1.0f)));
  EXPECT_FLOAT_EQ(RnnStep({"softplus"}, {}, {}, 100), 100);  // No overflow.
  // Both directions: LeakyRelu takes alpha 0.1, HardSigmoid the next alpha
  // and the first beta.
  EXPECT_FLOAT_EQ(
      RnnStep({"LeakyRelu", "HardSigmoid"}, {0.1f, 0.3f}, {0.4f}, -1, 0),
      -0.1f);
  EXPECT_FLOAT_EQ(
      RnnStep({"LeakyRelu", "HardSigmoid"}, {0.1f, 0.3f}, {0.4f}, 1, 1), 0.7f);
  // clip bounds the activation's input.
  EXPECT_FLOAT_EQ(RnnStep({"Relu"}, {}, {}, 5, 0, 1.5f), 1.5f);
}

TEST(OpsRnnTest, AnySubsetOfOutputs) {
  OneNode n = LstmBidirNode(false);
  onnx::ModelProto m = n.Model();
  // Only Y_c: Y and Y_h are omitted by empty names.
  onnx::NodeProto* node = m.mutable_graph()->mutable_node(0);
  node->set_output(0, "");
  node->set_output(1, "");
  m.mutable_graph()->mutable_output()->DeleteSubrange(0, 2);
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(m);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::flat_hash_map<std::string, Tensor> feeds;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i].empty()) feeds[absl::StrCat("in", i)] = n.inputs[i];
  }
  absl::StatusOr<std::vector<Tensor>> out = (*e)->Run(feeds);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  ExpectClose((*out)[0], RnnImageGolden("lstm_bidir_yc"), 1e-5, "Y_c");
}

// ---------------------------------------------------------------- refusals

TEST(OpsRnnTest, RefusesWhatItDoesNotImplementByName) {
  OneNode n = LstmBidirNode(false);
  n.attrs.back() = StrAttr("direction", "sideways");
  absl::Status s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("sideways"), std::string::npos) << s;

  n = LstmBidirNode(false);
  n.attrs.push_back(StrsAttr("activations", {"Sigmoid", "Gelu", "Tanh"}));
  s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("Gelu"), std::string::npos) << s;

  n = LstmBidirNode(false);
  n.Int("output_sequence", 1);  // Opset 1 only: never silently dropped.
  s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("output_sequence"), std::string::npos) << s;
}

TEST(OpsRnnTest, RejectsShapesThatDoNotFit) {
  OneNode n = LstmBidirNode(false);
  n.inputs[1] = Random({2, 15, 5}, 1);  // 4*H = 16 rows expected.
  absl::Status s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("W is"), std::string::npos) << s;

  n = LstmBidirNode(false);
  n.inputs[4] = Tensor::FromVector<int32_t>({3}, {6, 7, 1});  // seq = 6.
  s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("sequence_lens[1] = 7"), std::string::npos) << s;
}

// ------------------------------------------------------ speed and ORT parity

TEST(OpsRnnTest, BidirectionalLstmIsFastEnough) {
  // seq 100, batch 8, 64 -> 128 bidirectional: 2 * 100 * 8 * 4*128 *
  // (64 + 128) * 2 = 315 MFLOP.
  const int64_t seq = 100, batch = 8, in = 64, hid = 128;
  OneNode n("LSTM", 14);
  n.inputs = {Random({seq, batch, in}, 1), Random({2, 4 * hid, in}, 2, 0.1f),
              Random({2, 4 * hid, hid}, 3, 0.1f), Random({2, 8 * hid}, 4)};
  n.constant = {false, true, true, true};
  n.Int("hidden_size", hid);
  n.attrs.push_back(StrAttr("direction", "bidirectional"));
  ThreadPool pool(2);
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(n.Model());
  ASSERT_TRUE(e.ok()) << e.status();
  Executor::RunOptions ro;
  ro.pool = &pool;
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<Tensor>> out =
        (*e)->Run({{"in0", n.inputs[0]}}, ro);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
    ASSERT_TRUE(out.ok()) << out.status();
    best = std::min(best, ms);
  }
  std::cout << "LSTM seq 100 batch 8 64->128 bidirectional: " << best
            << " ms (315 MFLOP)" << std::endl;
  // A per-element scalar loop takes seconds; the GEMM path well under one
  // on a loaded 2-core machine.
  EXPECT_LT(best, 2000);
}

TEST(OpsRnnTest, TorchExportedLstmGruMatchesOnnxRuntime) {
  testing::TempDir tmp;
  testing::CommandResult r = testing::RunCommand(
      {"/usr/bin/python3", SourcePath("scripts/make_rnn_image_golden.py"),
       "--export", tmp.path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string model = tmp.File("rnn.onnx"), x = tmp.File("rnn_x.npy");
  absl::StatusOr<onnx::ModelProto> m =
      graph::ParseModel(testing::ReadFileOrDie(model));
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*m);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<Tensor> xt = ReadNpyFile(x);
  ASSERT_TRUE(xt.ok()) << xt.status();
  absl::StatusOr<std::vector<Tensor>> ours =
      (*e)->Run({{(*e)->input_names()[0], *xt}});
  ASSERT_TRUE(ours.ok()) << ours.status();
  const std::string out = tmp.File("ort.npy");
  testing::OrtEval({"run", "--model", model, "--x", x, "--out", out});
  absl::StatusOr<Tensor> theirs = ReadNpyFile(out);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ExpectClose((*ours)[0], *theirs, 1e-5, "LSTM -> GRU vs ORT");
}

}  // namespace
}  // namespace quantd::executor
