#!/usr/bin/env bash
# Sets up, builds, starts quantd on a free port and quantizes the bundled
# digits example with it (DYNAMIC_RANGE, W8A8, op set TF), printing the
# per-tensor table and the summary. The result is build/example/model_w8a8.onnx.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR/example"
log="$BUILD_DIR/example/quantd.log"
"$BUILD_DIR/server/quantd" --host=127.0.0.1 --port=0 --metrics_port=0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "listening on" "$log" && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$log" | head -n1)
[[ -n "$port" ]] || { echo "quantd did not start:"; cat "$log"; exit 1; }
echo "quantd is serving on 127.0.0.1:$port"
"$BUILD_DIR/client/quantctl" quantize --server="127.0.0.1:$port" \
  --model=examples/digits/model.onnx \
  --output="$BUILD_DIR/example/model_w8a8.onnx" \
  --method=dynamic_range --precision=w8a8 --op_set=tf
# scripts/setup.sh installs ONNX Runtime for Node.js into build/ort.
if [[ -d build/ort/node_modules ]]; then
  echo
  echo "Top-1 accuracy on the digits test set, in ONNX Runtime:"
  for m in examples/digits/model.onnx "$BUILD_DIR/example/model_w8a8.onnx"; do
    NODE_PATH=build/ort/node_modules node scripts/ort_eval.js accuracy \
      --model "$m" --x examples/digits/test_x.npy --y examples/digits/test_y.npy
  done
fi
