#!/usr/bin/env bash
#   scripts/sanitize.sh [address|thread]
#
# Builds the server and the suites that feed it client input (the server's
# unit tests, the engine's jobs and sessions, the hostile, corpus and fault
# end-to-end tests) with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ (default), or with ThreadSanitizer into build-tsan/ plus the
# executor's and the thread pool's tests (`thread`), and runs them. Override
# the folder with SANITIZE_BUILD_DIR. Any finding aborts the
# process it is in (-fno-sanitize-recover), so a server finding fails the
# end-to-end test that provoked it. Slow tests that only compare accuracy
# against ONNX Runtime stay out: they add build time, not coverage of input
# handling.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
MODE=${1:-address}
case "$MODE" in
  address) SANITIZE=address,undefined; DEFAULT_DIR=build-asan ;;
  thread) SANITIZE=thread; DEFAULT_DIR=build-tsan ;;
  *) echo "usage: $0 [address|thread]" >&2; exit 2 ;;
esac
BUILD_DIR=${SANITIZE_BUILD_DIR:-$DEFAULT_DIR}
SUITES=(
  # server/
  calibrate_service_test call_timer_test job_limits_test memory_test
  quantization_service_test security_test status_test
  # core/engine/
  batch_queue_test calibration_job_test calibration_session_test
  limits_test quantize_job_test
  # GPTQ: the statistics, the solve, the layouts
  gptq_test input_moments_test gptq_weight_test gptq_acceptance_test
  # SmoothQuant / equalization: the rescale, the noise model, through ORT
  channel_scaling_test channel_scaling_acceptance_test
  # AWQ: the scale search; the accuracy search's choices
  awq_test accuracy_search_test
  # end to end, through the sanitized quantd
  hostile_e2e_test hostile_corpus_e2e_test fault_e2e_test
)
if [[ "$MODE" == thread ]]; then
  # Where core's threads meet: the pool, the parallel executor, the jobs;
  # and the check that TSan sees absl::Mutex at all (core/base/tsan_absl_mutex.cc).
  SUITES+=(tsan_absl_mutex_test thread_pool_test serial_queue_test executor_test)
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQUANTD_SANITIZE="$SANITIZE" "${launcher[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target quantd "${SUITES[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# A data race fails the process it is in, server included. Debian's gRPC,
# protobuf, Abseil and libstdc++ are not instrumented: the libc calls they
# make are ignored like the rest of their code, and scripts/tsan.supp says
# which of gRPC's own inline code is left out, and why.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp}
# Tests that measure the real allocator stay out: ASan keeps freed memory
# in its quarantine (calibration_memory_test saw +310 MB over 1000
# batches, all of it the 256 MB quarantine and its bookkeeping) and never
# gives pages back through malloc_trim (IdleServerGivesMemoryBack), and its
# operator new reports an allocation that fails under RLIMIT_AS and exits
# instead of throwing std::bad_alloc (FailedAllocationEndsOnlyThatCall;
# TSan's does the same for a request past its allocation limit,
# AnImpossibleSizeIsResourceExhausted).
declare -A FILTER=(
  [hostile_e2e_test]="-*IdleServerGivesMemoryBack:*FailedAllocationEndsOnlyThatCall"
  [memory_test]="-*AnImpossibleSizeIsResourceExhausted"
)
failed=()
for suite in "${SUITES[@]}"; do
  echo "== $suite"
  if ! "$BUILD_DIR/tests/$suite" --gtest_brief=1 \
      --gtest_filter="${FILTER[$suite]:-*}"; then
    failed+=("$suite")
  fi
done
if ((${#failed[@]})); then
  echo "sanitize.sh: failed under $SANITIZE: ${failed[*]}"
  exit 1
fi
echo "sanitize.sh: ${#SUITES[@]} suites passed under $SANITIZE"
