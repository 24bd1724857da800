#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit and end-to-end).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "$@"
