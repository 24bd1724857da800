#!/usr/bin/env bash
# Regenerates the docs that are derived from code (docs/capabilities.md from
# the capability table), through the same test that checks them.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target capability_matrix_test
QUANTD_UPDATE_DOCS=1 "$BUILD_DIR/tests/capability_matrix_test" \
  --gtest_filter=CapabilityMatrixTest.DocsMatchTheTable
echo "update_docs: wrote docs/capabilities.md"
