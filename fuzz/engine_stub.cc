// The Engine members the server's code refers to, for the libFuzzer build of
// request_stream_fuzzer only (fuzz/CMakeLists.txt). quantization_service.cc
// can wrap an Engine (EngineJobRunner), so linking it needs these symbols,
// and the real ones pull in all of core, whose executor does not build with
// clang (Eigen's AVX inline assembly in gemm_avx2.cc). The fuzzer gives the
// service a fake JobRunner, so none of them is ever called.
#include <cstdio>
#include <cstdlib>

#include "core/engine/engine.h"

namespace quantd {
namespace {

[[noreturn]] void NotInTheFuzzer(const char* what) {
  std::fprintf(stderr, "engine_stub: %s called: the fuzzer runs fake jobs\n",
               what);
  std::abort();
}

}  // namespace

void Engine::SubmitQuantize(quantd::v1::QuantizeConfig, ModelUpload,
                            QuantizeEvents,
                            std::shared_ptr<const CancellationToken>,
                            QuantizeDone, std::shared_ptr<BatchQueue>) {
  NotInTheFuzzer("Engine::SubmitQuantize");
}

void Engine::SubmitCalibrate(quantd::v1::CalibrateConfig, ModelUpload,
                             std::shared_ptr<BatchQueue>, CalibrateEvents,
                             std::shared_ptr<const CancellationToken>,
                             CalibrateDone) {
  NotInTheFuzzer("Engine::SubmitCalibrate");
}

int Engine::threads() const { NotInTheFuzzer("Engine::threads"); }

}  // namespace quantd
