#!/usr/bin/env bash
# Builds the server and the suites that feed it client input (the server's
# unit tests, the engine's jobs and sessions, the hostile end-to-end tests)
# with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/
# (override with SANITIZE_BUILD_DIR) and runs them. Any finding aborts the
# process it is in (-fno-sanitize-recover), so a server finding fails the
# end-to-end test that provoked it. Slow tests that only compare accuracy
# against ONNX Runtime stay out: they add build time, not coverage of input
# handling.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${SANITIZE_BUILD_DIR:-build-asan}
SUITES=(
  # server/
  calibrate_service_test call_timer_test job_limits_test memory_test
  quantization_service_test security_test status_test
  # core/engine/
  batch_queue_test calibration_job_test calibration_session_test
  limits_test quantize_job_test
  # end to end, through the sanitized quantd
  hostile_e2e_test
)
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQUANTD_SANITIZE=address,undefined "${launcher[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target quantd "${SUITES[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# Tests that measure the real allocator stay out: ASan keeps freed memory
# in its quarantine (calibration_memory_test saw +310 MB over 1000
# batches, all of it the 256 MB quarantine and its bookkeeping) and never
# gives pages back through malloc_trim (IdleServerGivesMemoryBack), and its
# operator new reports an allocation that fails under RLIMIT_AS and exits
# instead of throwing std::bad_alloc (FailedAllocationEndsOnlyThatCall).
declare -A FILTER=(
  [hostile_e2e_test]="-*IdleServerGivesMemoryBack:*FailedAllocationEndsOnlyThatCall"
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
  echo "sanitize.sh: failed under ASan+UBSan: ${failed[*]}"
  exit 1
fi
echo "sanitize.sh: ${#SUITES[@]} suites passed under ASan+UBSan"
