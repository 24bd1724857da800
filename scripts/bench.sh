#!/usr/bin/env bash
# Builds quantd and prints two benchmark tables:
# 1. End to end: Quantize (DYNAMIC_RANGE W8A8) against a pass-through of the
#    same model, over loopback, and the server's peak memory per call, for
#    the bundled digits example and torchvision ResNet-18.
# 2. The FP32 executor that calibration runs on, against ONNX Runtime on the
#    same model and thread count (ResNet-18, MobileNetV2).
# 3. The executor's QLinearConv against its float Conv on a ResNet-18 layer.
# Models (random weights) are made by scripts/make_resnet18.py into
# build/bench/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR/bench"
resnet="$BUILD_DIR/bench/resnet18.onnx"
[[ -f "$resnet" ]] || /usr/bin/python3 scripts/make_resnet18.py "$resnet" >/dev/null
# quantd logs one line per call to stderr; keep the table readable.
"$BUILD_DIR/bench/quantize_bench" --models="examples/digits/model.onnx,$resnet" \
  --repeats="${REPEATS:-5}" "$@" 2>"$BUILD_DIR/bench/bench.log" || { cat "$BUILD_DIR/bench/bench.log"; exit 1; }
echo
"$BUILD_DIR/bench/executor_bench" --model_dir="$BUILD_DIR/bench" --threads=1,2 \
  2>>"$BUILD_DIR/bench/bench.log" || { cat "$BUILD_DIR/bench/bench.log"; exit 1; }
echo
"$BUILD_DIR/bench/qlinear_conv_bench" 2>>"$BUILD_DIR/bench/bench.log" ||
  { cat "$BUILD_DIR/bench/bench.log"; exit 1; }
