#!/usr/bin/env bash
# Builds quantd and prints these benchmark tables:
# 1. End to end: a zero-copy gRPC echo of the model (the peer), a
#    pass-through and Quantize (DYNAMIC_RANGE W8A8) of the same model, over
#    loopback, and the server's peak memory per call, for the bundled digits
#    example, torchvision ResNet-18 and a generated 512 MB MatMul chain.
# 2. The FP32 executor that calibration runs on, against ONNX Runtime on the
#    same model and thread count (ResNet-18, MobileNetV2).
# 3. The executor's QLinearConv against its float Conv on a ResNet-18 layer.
# 4. Weight quantization of one 4096x4096 tensor (numerics::QuantizeAndMeasure)
#    against memcpy, the path it replaced, and torch.quantize_per_channel
#    (bench/torch_quantize_per_channel.py, Debian's python3-torch).
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
# MATMUL_MB=0 skips the generated LLM-shaped model (2048x2048 MatMuls).
"$BUILD_DIR/bench/quantize_bench" --models="examples/digits/model.onnx,$resnet" \
  --matmul_mb="${MATMUL_MB:-512}" \
  --repeats="${REPEATS:-5}" "$@" 2>"$BUILD_DIR/bench/bench.log" || { cat "$BUILD_DIR/bench/bench.log"; exit 1; }
echo
"$BUILD_DIR/bench/executor_bench" --model_dir="$BUILD_DIR/bench" --threads=1,2 \
  2>>"$BUILD_DIR/bench/bench.log" || { cat "$BUILD_DIR/bench/bench.log"; exit 1; }
echo
"$BUILD_DIR/bench/qlinear_conv_bench" 2>>"$BUILD_DIR/bench/bench.log" ||
  { cat "$BUILD_DIR/bench/bench.log"; exit 1; }
echo
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 bench/torch_quantize_per_channel.py >"$BUILD_DIR/bench/torch_peer.txt"
else
  echo "(python3-torch missing: no torch column)"
  : >"$BUILD_DIR/bench/torch_peer.txt"
fi
"$BUILD_DIR/bench/weight_kernel_bench" --peer_file="$BUILD_DIR/bench/torch_peer.txt" \
  2>>"$BUILD_DIR/bench/bench.log" || { cat "$BUILD_DIR/bench/bench.log"; exit 1; }
