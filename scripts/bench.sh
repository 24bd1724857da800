#!/usr/bin/env bash
# Builds quantd and prints the end-to-end benchmark table: Quantize
# (DYNAMIC_RANGE W8A8) against a pass-through of the same model, over
# loopback, and the server's peak memory per call. Models: the bundled
# digits example and torchvision ResNet-18 (random weights, ~47 MB, made by
# scripts/make_resnet18.py into build/bench/ on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR/bench"
resnet="$BUILD_DIR/bench/resnet18.onnx"
[[ -f "$resnet" ]] || /usr/bin/python3 scripts/make_resnet18.py "$resnet" >/dev/null
"$BUILD_DIR/bench/quantize_bench" --models="examples/digits/model.onnx,$resnet" \
  --repeats="${REPEATS:-5}" "$@"
