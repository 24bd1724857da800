// Resize/Upsample, ConvTranspose, Depth/SpaceToDepth, the normalisations and
// pools of ops_image.cc against PyTorch goldens
// (scripts/make_rnn_image_golden.py), hand-worked cases and ONNX Runtime on a
// torch.onnx.export model.
#include <cmath>
#include <limits>
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

// ------------------------------------------------------------------- Resize

struct ResizeCase {
  const char* golden;
  const char* mode;
  const char* coord;
  const char* nearest_mode;  // nullptr: default.
  float cubic_a;
  bool antialias;
  bool exclude_outside = false;
};

OneNode ResizeNode(const ResizeCase& c, const Tensor& x,
                   std::vector<int64_t> sizes) {
  OneNode n("Resize", c.antialias ? 18 : 13);
  n.inputs = {x, Tensor(), Tensor(), Tensor::FromVector<int64_t>({4}, sizes)};
  n.constant = {false, false, false, true};
  n.attrs.push_back(StrAttr("mode", c.mode));
  n.attrs.push_back(StrAttr("coordinate_transformation_mode", c.coord));
  if (c.nearest_mode)
    n.attrs.push_back(StrAttr("nearest_mode", c.nearest_mode));
  n.attrs.push_back(FloatAttr("cubic_coeff_a", c.cubic_a));
  if (c.antialias) n.Int("antialias", 1);
  if (c.exclude_outside) n.Int("exclude_outside", 1);
  return n;
}

TEST(OpsImageTest, ResizeMatchesTorchInterpolate) {
  // [1, 2, 5, 7] -> [1, 2, 9, 4]: up in H, down in W.
  const ResizeCase cases[] = {
      {"bilinear_align", "linear", "align_corners", nullptr, -0.75f, false},
      {"bilinear_half", "linear", "half_pixel", nullptr, -0.75f, false},
      {"bilinear_half", "linear", "pytorch_half_pixel", nullptr, -0.75f, false},
      {"bicubic_half", "cubic", "half_pixel", nullptr, -0.75f, false},
      {"bicubic_align", "cubic", "align_corners", nullptr, -0.75f, false},
      // torch 'nearest' is asymmetric + floor; 'nearest-exact' half_pixel
      // rounding halves up.
      {"nearest", "nearest", "asymmetric", "floor", -0.75f, false},
      {"nearest_exact", "nearest", "half_pixel", "round_prefer_ceil", -0.75f,
       false},
  };
  const Tensor x = RnnImageGolden("resize_x");
  ThreadPool pool(2);
  for (const ResizeCase& c : cases) {
    for (bool dbl : {false, true}) {
      OneNode n = ResizeNode(c, dbl ? ToDouble(x) : x, {1, 2, 9, 4});
      absl::StatusOr<Tensor> y = n.Run1(dbl ? &pool : nullptr);
      ASSERT_TRUE(y.ok()) << c.golden << ": " << y.status();
      ExpectClose(*y, RnnImageGolden(absl::StrCat("resize_", c.golden)), 1e-5,
                  absl::StrCat(c.golden, " ", c.coord, dbl ? " double" : ""));
    }
  }
}

TEST(OpsImageTest, ResizeAntialiasMatchesTorch) {
  // [1, 1, 11, 13] -> [1, 1, 5, 4]. torch's antialiasing is PIL's: taps
  // outside the input are dropped (exclude_outside), and bicubic uses
  // A = -0.5.
  const ResizeCase cases[] = {
      {"bilinear_antialias", "linear", "half_pixel", nullptr, -0.75f, true,
       true},
      {"bicubic_antialias", "cubic", "half_pixel", nullptr, -0.5f, true, true},
  };
  for (const ResizeCase& c : cases) {
    absl::StatusOr<Tensor> y =
        ResizeNode(c, RnnImageGolden("resize_x_small"), {1, 1, 5, 4}).Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden(absl::StrCat("resize_", c.golden)), 1e-5,
                c.golden);
  }
}

TEST(OpsImageTest, UpsampleAndResize10AreAsymmetric) {
  const Tensor x = Tensor::FromVector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor scales = Tensor::FromVector<float>({4}, {1, 1, 2, 2});
  // x_original = x / 2: rows 1, 2, 3, 3 (edge) interpolate as 1, 1.5, 2, 2.
  const std::vector<float> linear = {1, 1.5, 2, 2, 2, 2.5, 3, 3,
                                     3, 3.5, 4, 4, 3, 3.5, 4, 4};
  for (const auto& [op, opset] : std::vector<std::pair<std::string, int>>{
           {"Upsample", 9}, {"Resize", 10}}) {
    OneNode n(op, opset);
    n.inputs = {x, scales};
    n.attrs.push_back(StrAttr("mode", "linear"));
    absl::StatusOr<Tensor> y = n.Run1();
    ASSERT_TRUE(y.ok()) << op << ": " << y.status();
    ExpectClose(*y, Tensor::FromVector<float>({1, 1, 4, 4}, linear), 1e-6, op);
  }
  // Upsample-7 takes scales as an attribute.
  OneNode n("Upsample", 7);
  n.inputs = {x};
  onnx::AttributeProto a;
  a.set_name("scales");
  a.set_type(onnx::AttributeProto::FLOATS);
  for (float s : {1.0f, 1.0f, 2.0f, 1.5f}) a.add_floats(s);
  n.attrs.push_back(a);
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  // Nearest, W: 2 -> 3 at x / 1.5 truncated: 0, 0, 1.
  ExpectClose(*y,
              Tensor::FromVector<float>({1, 1, 4, 3},
                                        {1, 1, 2, 1, 1, 2, 3, 3, 4, 3, 3, 4}),
              0, "Upsample-7");
}

TEST(OpsImageTest, ResizeAxesAndKeepAspectRatio) {
  Tensor x(TP::FLOAT, {1, 1, 4, 6});
  for (int i = 0; i < 24; ++i) x.mutable_data<float>()[i] = i * 0.5f;
  auto run = [&](const std::string& policy, std::vector<int64_t> sizes) {
    OneNode n("Resize", 18);
    n.inputs = {x, Tensor(), Tensor(), Tensor::FromVector<int64_t>({2}, sizes)};
    n.attrs.push_back(StrAttr("mode", "linear"));
    n.attrs.push_back(StrAttr("keep_aspect_ratio_policy", policy));
    n.IntList("axes", {2, -1});
    return n.Run1();
  };
  // not_larger: scale min(3/4, 3/6) = 0.5 on both axes -> [2, 3], the same
  // as scales [1, 1, 0.5, 0.5].
  absl::StatusOr<Tensor> y = run("not_larger", {3, 3});
  ASSERT_TRUE(y.ok()) << y.status();
  OneNode ref("Resize", 13);
  ref.inputs = {x, Tensor(), Tensor::FromVector<float>({4}, {1, 1, 0.5, 0.5})};
  ref.attrs.push_back(StrAttr("mode", "linear"));
  absl::StatusOr<Tensor> want = ref.Run1();
  ASSERT_TRUE(want.ok()) << want.status();
  ExpectClose(*y, *want, 0, "not_larger");
  // not_smaller: scale 0.75 -> [3, round(4.5) = 5].
  y = run("not_smaller", {3, 3});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 1, 3, 5}));
  y = run("stretch", {3, 3});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 1, 3, 3}));
}

TEST(OpsImageTest, ResizeTfCropAndResizeExtrapolates) {
  const Tensor x = Tensor::FromVector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  OneNode n("Resize", 13);
  // roi past the right edge in W: the last column is outside.
  n.inputs = {x, Tensor::FromVector<float>({8}, {0, 0, 0, 0, 1, 1, 1, 2}),
              Tensor(), Tensor::FromVector<int64_t>({4}, {1, 1, 2, 3})};
  n.attrs.push_back(StrAttr("mode", "linear"));
  n.attrs.push_back(
      StrAttr("coordinate_transformation_mode", "tf_crop_and_resize"));
  n.attrs.push_back(FloatAttr("extrapolation_value", -7));
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  // W coordinates 0, 1, 2 (of 0..1): 2 is outside.
  ExpectClose(*y, Tensor::FromVector<float>({1, 1, 2, 3}, {1, 2, -7, 3, 4, -7}),
              1e-6, "tf_crop_and_resize");
}

TEST(OpsImageTest, ResizeNearestKeepsIntegerTypes) {
  OneNode n("Resize", 13);
  n.inputs = {Tensor::FromVector<int8_t>({1, 3}, {-5, 0, 7}), Tensor(),
              Tensor::FromVector<float>({2}, {1, 2})};
  n.attrs.push_back(StrAttr("coordinate_transformation_mode", "asymmetric"));
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->dtype(), TP::INT8);
  const std::vector<int8_t> want = {-5, -5, 0, 0, 7, 7};
  EXPECT_EQ(std::vector<int8_t>(y->data<int8_t>(), y->data<int8_t>() + 6),
            want);
}

// Sizes whose product overflows are refused before any tap is computed,
// and an output with a zero axis is empty whatever the scale (fuzz finding
// 28: sizes of INT64_MAX overflowed out * taps).
TEST(OpsImageTest, ResizeOverflowingAndEmptyOutputs) {
  const ResizeCase linear_aa{"",      "linear", "pytorch_half_pixel",
                             nullptr, -0.75f,   true};
  const Tensor x =
      Tensor::FromVector<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  OneNode huge = ResizeNode(linear_aa, x, {1, 1, kMax, kMax});
  ExpectError(huge.Run1(), absl::StatusCode::kInvalidArgument, "output shape");
  // A scale that makes an axis longer than int64 counts (fuzz finding 29:
  // floor(scale * in) cast to int64).
  OneNode scaled("Resize", 13);
  scaled.inputs = {x, Tensor(),
                   Tensor::FromVector<float>({4}, {1, 1, 1e36f, 1}), Tensor()};
  scaled.constant = {false, false, true, false};
  ExpectError(scaled.Run1(), absl::StatusCode::kInvalidArgument,
              "longer than 2^62");
  // not_smaller scales every axis by the largest size ratio: a size near
  // INT64_MAX on one axis made the other longer than int64 (fuzz finding
  // 30: floor(s * in + 0.5) cast to int64).
  OneNode keep("Resize", 18);
  keep.inputs = {x, Tensor(), Tensor(),
                 Tensor::FromVector<int64_t>({2}, {kMax, 1})};
  keep.attrs.push_back(StrAttr("keep_aspect_ratio_policy", "not_smaller"));
  keep.IntList("axes", {2, 3});
  ExpectError(keep.Run1(), absl::StatusCode::kInvalidArgument,
              "longer than 2^62");
  OneNode empty = ResizeNode(linear_aa, x, {1, 1, 0, 3});
  absl::StatusOr<Tensor> y = empty.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 1, 0, 3}));
}

TEST(OpsImageTest, ResizeRefusesByName) {
  const Tensor x = Tensor::FromVector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  OneNode n("Resize", 13);
  n.inputs = {x, Tensor(), Tensor::FromVector<float>({4}, {1, 1, 2, 2})};
  n.attrs.push_back(StrAttr("mode", "area"));
  absl::Status s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("area"), std::string::npos) << s;
  // half_pixel_symmetric arrived in opset 19.
  n.attrs = {StrAttr("coordinate_transformation_mode", "half_pixel_symmetric")};
  s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  n.opset = 19;
  EXPECT_TRUE(n.Run().ok());
  // scales and sizes together.
  n.inputs.push_back(Tensor::FromVector<int64_t>({4}, {1, 1, 3, 3}));
  s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// ------------------------------------------------------------ ConvTranspose

TEST(OpsImageTest, ConvTransposeMatchesTorch) {
  ThreadPool pool(2);
  for (bool dbl : {false, true}) {
    auto cv = [&](const Tensor& t) { return dbl ? ToDouble(t) : t; };
    // 2-D: groups 2, strides (2, 3), pads (1, 0), output_padding (1, 2),
    // dilations (2, 1).
    OneNode n("ConvTranspose", 11);
    n.inputs = {cv(RnnImageGolden("convt2d_x")),
                cv(RnnImageGolden("convt2d_w")),
                cv(RnnImageGolden("convt2d_b"))};
    n.constant = {false, true, true};
    n.Int("group", 2)
        .IntList("strides", {2, 3})
        .IntList("pads", {1, 0, 1, 0})
        .IntList("output_padding", {1, 2})
        .IntList("dilations", {2, 1})
        .IntList("kernel_shape", {3, 2});
    absl::StatusOr<Tensor> y = n.Run1(dbl ? &pool : nullptr);
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("convt2d_y"), 1e-5, "2-D");

    // The same through output_shape: H keeps its begin pad of 1, W extends
    // by 2 at the end.
    OneNode o("ConvTranspose", 11);
    o.inputs = n.inputs;
    o.Int("group", 2)
        .IntList("strides", {2, 3})
        .IntList("dilations", {2, 1})
        .IntList("output_shape", {12, 13});
    y = o.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("convt2d_y"), 1e-5, "2-D output_shape");

    OneNode one("ConvTranspose", 11);
    one.inputs = {cv(RnnImageGolden("convt1d_x")),
                  cv(RnnImageGolden("convt1d_w")),
                  cv(RnnImageGolden("convt1d_b"))};
    one.IntList("strides", {2}).IntList("pads", {1, 1});
    y = one.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("convt1d_y"), 1e-5, "1-D");
  }
}

TEST(OpsImageTest, ConvTransposeRejectsMismatches) {
  OneNode n("ConvTranspose", 11);
  n.inputs = {RnnImageGolden("convt2d_x"), RnnImageGolden("convt1d_w")};
  absl::Status s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  n.inputs = {Tensor(TP::FLOAT, {1, 1, 2, 2, 2, 2}),
              Tensor(TP::FLOAT, {1, 1, 1, 1, 1, 1})};
  s = n.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

// ------------------------------------------------ Depth/SpaceToDepth

TEST(OpsImageTest, SpaceToDepthInvertsDepthToSpaceDcr) {
  Tensor x(TP::INT8, {2, 3, 4, 6});
  for (int64_t i = 0; i < x.size(); ++i) {
    x.mutable_data<int8_t>()[i] = static_cast<int8_t>(i % 251 - 120);
  }
  OneNode s2d("SpaceToDepth", 13);
  s2d.inputs = {x};
  s2d.Int("blocksize", 2);
  absl::StatusOr<Tensor> deep = s2d.Run1();
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(deep->shape(), (std::vector<int64_t>{2, 12, 2, 3}));
  OneNode d2s("DepthToSpace", 13);
  d2s.inputs = {*deep};
  d2s.Int("blocksize", 2);
  absl::StatusOr<Tensor> back = d2s.Run1();
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->shape(), x.shape());
  for (int64_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(back->data<int8_t>()[i], x.data<int8_t>()[i]) << i;
  }
  // CRD: channel c*4 + i*2 + j lands at (2h + i, 2w + j) of channel c.
  Tensor one(TP::FLOAT, {1, 4, 1, 1});
  for (int i = 0; i < 4; ++i) one.mutable_data<float>()[i] = i;
  d2s.inputs = {one};
  d2s.attrs.push_back(StrAttr("mode", "CRD"));
  absl::StatusOr<Tensor> y = d2s.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, Tensor::FromVector<float>({1, 1, 2, 2}, {0, 1, 2, 3}), 0,
              "CRD");
  d2s.attrs.back() = StrAttr("mode", "XYZ");
  EXPECT_EQ(d2s.Run().status().code(), absl::StatusCode::kUnimplemented);
}

// ------------------------------------------------- normalisations and pools

TEST(OpsImageTest, NormalisationsMatchTorch) {
  const Tensor x = RnnImageGolden("norm_x");
  ThreadPool pool(2);
  for (bool dbl : {false, true}) {
    auto cv = [&](const Tensor& t) { return dbl ? ToDouble(t) : t; };
    OneNode in("InstanceNormalization", 7);
    in.inputs = {cv(x), cv(RnnImageGolden("norm_w")),
                 cv(RnnImageGolden("norm_b"))};
    absl::StatusOr<Tensor> y = in.Run1(&pool);
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_instance"), 1e-5,
                "InstanceNormalization");

    OneNode g21("GroupNormalization", 21);
    g21.inputs = {cv(x), cv(RnnImageGolden("norm_w")),
                  cv(RnnImageGolden("norm_b"))};
    g21.Int("num_groups", 3);
    y = g21.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_group21"), 1e-5,
                "GroupNormalization-21");

    OneNode g18("GroupNormalization", 18);
    g18.inputs = {cv(x), cv(RnnImageGolden("norm_wg")),
                  cv(RnnImageGolden("norm_bg"))};
    g18.Int("num_groups", 3);
    y = g18.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_group18"), 1e-5,
                "GroupNormalization-18");
    // Opset 18 scales are per group: per-channel ones do not fit.
    g18.inputs = g21.inputs;
    EXPECT_EQ(g18.Run().status().code(), absl::StatusCode::kInvalidArgument);

    OneNode lp1("LpNormalization", 7);
    lp1.inputs = {cv(x)};
    lp1.Int("p", 1).Int("axis", 1);
    y = lp1.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_lp1_axis1"), 1e-6,
                "LpNormalization p=1");
    OneNode lp2("LpNormalization", 7);
    lp2.inputs = {cv(x)};
    y = lp2.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_lp2_last"), 1e-6,
                "LpNormalization p=2");

    OneNode gm("GlobalMaxPool", 7);
    gm.inputs = {cv(x)};
    y = gm.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_globalmax"), 0, "GlobalMaxPool");

    OneNode gl("GlobalLpPool", 7);
    gl.inputs = {cv(x)};
    gl.Int("p", 3);
    y = gl.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_globallp3"), 1e-5, "GlobalLpPool p=3");

    OneNode lpp("LpPool", 18);
    lpp.inputs = {cv(x)};
    lpp.IntList("kernel_shape", {2, 3}).IntList("strides", {1, 2});
    y = lpp.Run1();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, RnnImageGolden("norm_lppool"), 1e-5, "LpPool");
  }
  OneNode lp3("LpNormalization", 7);
  lp3.inputs = {x};
  lp3.Int("p", 3);
  absl::Status s = lp3.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  OneNode g("GroupNormalization", 21);
  g.inputs = {x, RnnImageGolden("norm_w"), RnnImageGolden("norm_b")};
  g.Int("num_groups", 4);  // 6 channels.
  EXPECT_EQ(g.Run().status().code(), absl::StatusCode::kInvalidArgument);

  // Zero channels (per-channel scale and bias of none) is an empty output,
  // not a division by zero (fuzz finding 24).
  OneNode empty("GroupNormalization", 21);
  empty.inputs = {Tensor::FromVector<float>({1, 0}, {}),
                  Tensor::FromVector<float>({0}, {}),
                  Tensor::FromVector<float>({0}, {})};
  empty.Int("num_groups", 4);
  absl::StatusOr<Tensor> e = empty.Run1();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->shape(), (std::vector<int64_t>{1, 0}));
}

TEST(OpsImageTest, MeanVarianceNormalizationOverAxes) {
  // Over axes {1}: each column of a [2, 3] matrix... here each row.
  const Tensor x = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 10, 10, 16});
  OneNode n("MeanVarianceNormalization", 13);
  n.inputs = {x};
  n.IntList("axes", {1});
  absl::StatusOr<Tensor> y = n.Run1();
  ASSERT_TRUE(y.ok()) << y.status();
  const double s1 = std::sqrt(2.0 / 3), s2 = std::sqrt(8.0);
  ExpectClose(*y,
              Tensor::FromVector<float>(
                  {2, 3}, {float(-1 / s1), 0, float(1 / s1), float(-2 / s2),
                           float(-2 / s2), float(4 / s2)}),
              1e-6, "MVN");
}

// ONNX's node tests for GlobalMaxPool (opset 1) and InstanceNormalization
// (opset 6) fall below the executor's opset range, so the conformance run
// skips them; the ops are unchanged since, so run them at opset 7.
TEST(OpsImageTest, OnnxNodeTestsBelowOpset7PassAtOpset7) {
  const std::string root = "/usr/include/onnx/backend/test/data/node/";
  for (const char* name :
       {"test_globalmaxpool", "test_globalmaxpool_precomputed",
        "test_instancenorm_epsilon", "test_instancenorm_example"}) {
    absl::StatusOr<onnx::ModelProto> m =
        graph::ParseModel(testing::ReadFileOrDie(root + name + "/model.onnx"));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    m->mutable_opset_import(0)->set_version(7);
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*m);
    ASSERT_TRUE(e.ok()) << name << ": " << e.status();
    absl::flat_hash_map<std::string, Tensor> feeds;
    const std::string set = root + name + "/test_data_set_0/";
    for (int i = 0; i < m->graph().input_size(); ++i) {
      TP proto;
      ASSERT_TRUE(proto.ParseFromString(
          testing::ReadFileOrDie(set + absl::StrCat("input_", i, ".pb"))));
      absl::StatusOr<Tensor> t = Tensor::FromProto(proto);
      ASSERT_TRUE(t.ok()) << t.status();
      feeds[m->graph().input(i).name()] = *t;
    }
    absl::StatusOr<std::vector<Tensor>> out = (*e)->Run(feeds);
    ASSERT_TRUE(out.ok()) << name << ": " << out.status();
    TP proto;
    ASSERT_TRUE(
        proto.ParseFromString(testing::ReadFileOrDie(set + "output_0.pb")));
    absl::StatusOr<Tensor> want = Tensor::FromProto(proto);
    ASSERT_TRUE(want.ok()) << want.status();
    ExpectClose((*out)[0], *want, 1e-5, name);
  }
}

// --------------------------------------------------------------- ORT parity

TEST(OpsImageTest, TorchExportedConvTransposeResizeMatchesOnnxRuntime) {
  testing::TempDir tmp;
  testing::CommandResult r = testing::RunCommand(
      {"/usr/bin/python3", SourcePath("scripts/make_rnn_image_golden.py"),
       "--export", tmp.path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string model = tmp.File("image.onnx"), x = tmp.File("image_x.npy");
  absl::StatusOr<onnx::ModelProto> m =
      graph::ParseModel(testing::ReadFileOrDie(model));
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*m);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<Tensor> xt = ReadNpyFile(x);
  ASSERT_TRUE(xt.ok()) << xt.status();
  ThreadPool pool(2);
  Executor::RunOptions ro;
  ro.pool = &pool;
  absl::StatusOr<std::vector<Tensor>> ours =
      (*e)->Run({{(*e)->input_names()[0], *xt}}, ro);
  ASSERT_TRUE(ours.ok()) << ours.status();
  const std::string out = tmp.File("ort.npy");
  testing::OrtEval({"run", "--model", model, "--x", x, "--out", out});
  absl::StatusOr<Tensor> theirs = ReadNpyFile(out);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ExpectClose((*ours)[0], *theirs, 1e-4, "ConvTranspose -> Resize vs ORT");
}

}  // namespace
}  // namespace quantd::executor
