// Float Conv2D per layer shape, by images per GEMM: the layers of ResNet-18
// and MobileNetV2 at batch 16, 64x64 (calibration's shape, where the last
// stages have 2x2..8x8 outputs), each timed with 1, 2, 4, 8 and 16 images per
// GEMM and with ConvImagesPerGemm's choice; then depthwise layers (MobileNetV2,
// EfficientNet-B0) with each depthwise kernel and ChooseDepthwiseKernel's.
// The runs of one shape are interleaved, so other load on a shared machine
// spreads over all columns.
//
//   conv_bench [--threads=1] [--reps=15]
//
// Prints two Markdown tables of minimum ms per call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/base/thread_pool.h"
#include "core/executor/conv.h"

ABSL_FLAG(int, threads, 1, "Threads, the caller included.");
ABSL_FLAG(int, reps, 15, "Timed calls per column; the minimum is printed.");

namespace {

using quantd::executor::Conv2DShape;

struct Layer {
  const char* name;
  int64_t c, h, m, k, stride, group = 1;
};

Conv2DShape ShapeOf(const Layer& l, int64_t n) {
  Conv2DShape s;
  s.n = n;
  s.c = l.c;
  s.h = s.w = l.h;
  s.m = l.m;
  s.group = l.group;
  s.kh = s.kw = l.k;
  s.sh = s.sw = l.stride;
  s.pt = s.pl = s.pb = s.pr = l.k / 2;
  s.oh = (s.h + 2 * s.pt - s.kh) / s.sh + 1;
  s.ow = s.oh;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  std::unique_ptr<quantd::ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<quantd::ThreadPool>(threads - 1);
  const std::vector<Layer> layers = {
      {"resnet stem 7x7/2", 3, 64, 64, 7, 2},
      {"resnet layer1 3x3", 64, 16, 64, 3, 1},
      {"resnet layer2 3x3/2", 64, 16, 128, 3, 2},
      {"resnet layer2 3x3", 128, 8, 128, 3, 1},
      {"resnet layer3 3x3/2", 128, 8, 256, 3, 2},
      {"resnet layer3 3x3", 256, 4, 256, 3, 1},
      {"resnet layer4 3x3/2", 256, 4, 512, 3, 2},
      {"resnet layer4 3x3", 512, 2, 512, 3, 1},
      {"mobilenet 1x1 16->96", 16, 32, 96, 1, 1},
      {"mobilenet 1x1 144->24", 144, 16, 24, 1, 1},
      {"mobilenet 1x1 32->192", 32, 8, 192, 1, 1},
      {"mobilenet 1x1 192->32", 192, 8, 32, 1, 1},
      {"mobilenet 1x1 64->384", 64, 4, 384, 1, 1},
      {"mobilenet 1x1 384->64", 384, 4, 64, 1, 1},
      {"mobilenet 1x1 576->96", 576, 4, 96, 1, 1},
      {"mobilenet 1x1 160->960", 160, 2, 960, 1, 1},
      {"mobilenet 1x1 960->160", 960, 2, 160, 1, 1},
      {"mobilenet 1x1 320->1280", 320, 2, 1280, 1, 1},
  };
  // Depthwise layers, timed per kernel: MobileNetV2's at 64x64 and
  // EfficientNet-B0's 5x5 ones at 64x64.
  const std::vector<Layer> depthwise = {
      {"mobilenet dw 3x3 32", 32, 32, 32, 3, 1, 32},
      {"mobilenet dw 3x3/2 96", 96, 32, 96, 3, 2, 96},
      {"mobilenet dw 3x3 144", 144, 16, 144, 3, 1, 144},
      {"mobilenet dw 3x3/2 144", 144, 16, 144, 3, 2, 144},
      {"mobilenet dw 3x3 192", 192, 8, 192, 3, 1, 192},
      {"mobilenet dw 3x3/2 192", 192, 8, 192, 3, 2, 192},
      {"mobilenet dw 3x3 384", 384, 4, 384, 3, 1, 384},
      {"mobilenet dw 3x3/2 576", 576, 4, 576, 3, 2, 576},
      {"mobilenet dw 3x3 960", 960, 2, 960, 3, 1, 960},
      {"dw 5x5 96 at 32x32", 96, 32, 96, 5, 1, 96},
      {"efficientnet dw 5x5/2 144", 144, 16, 144, 5, 2, 144},
      {"efficientnet dw 5x5 240", 240, 8, 240, 5, 1, 240},
      {"efficientnet dw 5x5 672", 672, 4, 672, 5, 1, 672},
      {"efficientnet dw 5x5 1152", 1152, 2, 1152, 5, 1, 1152},
  };
  const std::vector<int64_t> per_gemm = {1, 2, 4, 8, 16};
  std::printf("| layer | positions | ");
  for (int64_t nb : per_gemm) std::printf("%lld/GEMM ms | ", (long long)nb);
  std::printf("chosen | chosen ms |\n|---|---|");
  for (size_t i = 0; i <= per_gemm.size() + 1; ++i) std::printf("---|");
  std::printf("\n");
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (const Layer& l : layers) {
    const Conv2DShape s = ShapeOf(l, 16);
    std::vector<float> x(s.n * s.c * s.h * s.w),
        w(s.m * (s.c / s.group) * s.kh * s.kw), b(s.m),
        y(s.n * s.m * s.oh * s.ow);
    for (float& v : x) v = d(gen);
    for (float& v : w) v = d(gen);
    for (float& v : b) v = d(gen);
    const int64_t chosen = quantd::executor::ConvImagesPerGemm(s);
    std::vector<int64_t> columns = per_gemm;
    columns.push_back(chosen);
    std::vector<double> best(columns.size(), 1e30);
    for (int r = 0; r < absl::GetFlag(FLAGS_reps) + 1; ++r) {
      for (size_t i = 0; i < columns.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        quantd::executor::Conv2DWithImagesPerGemm(
            x.data(), w.data(), b.data(), y.data(), s, columns[i], pool.get());
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count();
        if (r > 0) best[i] = std::min(best[i], ms);  // r == 0 warms up.
      }
    }
    std::printf("| %s | %lld | ", l.name, (long long)(s.oh * s.ow));
    for (size_t i = 0; i < per_gemm.size(); ++i)
      std::printf("%.3f | ", best[i]);
    std::printf("%lld | %.3f |\n", (long long)chosen, best.back());
    std::fflush(stdout);
  }
  using quantd::executor::DepthwiseKernel;
  const std::vector<std::pair<const char*, DepthwiseKernel>> kernels = {
      {"lanes", DepthwiseKernel::kLanes},
      {"planes", DepthwiseKernel::kPlanes},
      {"direct", DepthwiseKernel::kDirect}};
  std::printf("\n| depthwise layer | positions | ");
  for (const auto& k : kernels) std::printf("%s ms | ", k.first);
  std::printf("chosen | chosen ms |\n|---|---|---|---|---|---|---|\n");
  for (const Layer& l : depthwise) {
    const Conv2DShape s = ShapeOf(l, 16);
    std::vector<float> x(s.n * s.c * s.h * s.w), w(s.m * s.kh * s.kw), b(s.m),
        y(s.n * s.m * s.oh * s.ow);
    for (float& v : x) v = d(gen);
    for (float& v : w) v = d(gen);
    for (float& v : b) v = d(gen);
    const DepthwiseKernel chosen = quantd::executor::ChooseDepthwiseKernel(s);
    std::vector<double> best(kernels.size() + 1, 1e30);
    for (int r = 0; r < absl::GetFlag(FLAGS_reps) + 1; ++r) {
      for (size_t i = 0; i <= kernels.size(); ++i) {
        const DepthwiseKernel k =
            i < kernels.size() ? kernels[i].second : chosen;
        const auto t0 = std::chrono::steady_clock::now();
        quantd::executor::DepthwiseConv2D(x.data(), w.data(), b.data(),
                                          y.data(), s, k, pool.get());
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count();
        if (r > 0) best[i] = std::min(best[i], ms);
      }
    }
    const char* chosen_name = "";
    for (const auto& k : kernels)
      if (k.second == chosen) chosen_name = k.first;
    std::printf("| %s | %lld | ", l.name, (long long)(s.oh * s.ow));
    for (size_t i = 0; i < kernels.size(); ++i) std::printf("%.3f | ", best[i]);
    std::printf("%s | %.3f |\n", chosen_name, best.back());
    std::fflush(stdout);
  }
  return 0;
}
