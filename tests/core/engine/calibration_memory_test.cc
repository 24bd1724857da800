// Calibration memory does not grow with the number of batches: observers
// keep fixed state per tensor and the executor frees every intermediate
// after its last reader. Measured as this process's peak RSS (VmHWM, reset
// through /proc/self/clear_refs) above its RSS before each run.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "core/engine/batch_queue.h"
#include "core/engine/engine.h"
#include "core/executor/npy.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd {
namespace {

using ::quantd::testing::ProcStatusBytes;
using ::quantd::testing::ReadFileOrDie;
using ::quantd::testing::ResetPeakRss;
using ::quantd::testing::SourcePath;

// Peak RSS growth while calibrating the digits CNN on `batches` batches of
// 8 samples with the percentile observer (a 2048-bin histogram per tensor).
int64_t CalibrationPeakBytes(int batches) {
  const executor::Tensor all =
      *executor::ReadNpyFile(SourcePath("examples/digits/calib_x.npy"));
  const int64_t per_sample = all.size() / all.dim(0);
  const std::string model =
      ReadFileOrDie(SourcePath("examples/digits/model.onnx"));
  // A small queue, fed from another thread, as the server does: the batches
  // never all exist at once.
  auto queue = std::make_shared<BatchQueue>(4);
  absl::Mutex mu;
  int grants = 0;
  queue->SetOnRoom([&] {
    absl::MutexLock lock(&mu);
    ++grants;
  });
  const int64_t before = ProcStatusBytes(getpid(), "VmRSS");
  EXPECT_TRUE(ResetPeakRss(getpid()));
  std::thread producer([&] {
    for (int b = 0; b < batches; ++b) {
      quantd::v1::TensorBatch batch;
      auto* t = batch.add_tensors();
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : {int64_t{8}, int64_t{1}, int64_t{8}, int64_t{8}}) {
        t->add_shape(d);
      }
      const int first = (b * 8) % 56;
      t->set_data(
          reinterpret_cast<const char*>(all.data<float>() + first * per_sample),
          8 * per_sample * sizeof(float));
      if (queue->Push(std::move(batch))) continue;
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](int* g) { return *g > 0; }, &grants));
      --grants;
    }
    queue->Close();
  });
  quantd::v1::CalibrateConfig config;
  config.set_method("percentile");
  CancellationToken cancel;
  auto result = RunCalibrate(config, model, queue.get(), {}, cancel, nullptr);
  producer.join();
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) {
    EXPECT_EQ(result->batch_count(), batches);
  }
  return ProcStatusBytes(getpid(), "VmHWM") - before;
}

TEST(CalibrationMemoryTest, ThousandBatchesPeakNoHigherThanTen) {
  CalibrationPeakBytes(10);  // Warm up the allocator and lazy statics.
  const int64_t ten = CalibrationPeakBytes(10);
  const int64_t thousand = CalibrationPeakBytes(1000);
  std::printf(
      "calibration peak RSS growth: 10 batches %.2f MB, 1000 batches %.2f MB\n",
      ten / 1e6, thousand / 1e6);
  // One page-granular allocator arena of slack; growth per batch would show
  // as ~100x the 10-batch figure.
  EXPECT_LE(thousand, ten + (1 << 20));
}

}  // namespace
}  // namespace quantd
