#!/usr/bin/env bash
# Quantizes LLM-shaped models of several GB, sent with external data, and
# prints one table: time, the server's and the client's peak RSS, and ONNX
# Runtime's verdict on the output against the float model (issue 13, goal 5).
#
#   scripts/large_model.sh [--gib 3] [--dtypes float32,float16] [--check]
#                          [--hidden 4096 --ffn 16384]
#
# Models are generated once into $BUILD_DIR/large/<dtype>-<gib>gib-<hidden>
# (scripts/make_large_model.py; ~3.2 GB each at 3 GiB, 32 GB of disk for
# everything at the default size). Each is quantized by a fresh quantd, DYNAMIC_RANGE W8A8
# (per-channel int8 weights) and W4A8 with blockwise int4 weights (block 32,
# DequantizeLinear block_size), the output written as model + data file.
# --check exits 1 unless every call succeeds and ONNX Runtime's output SQNR
# reaches the floor (20 dB for W8A8, 10 dB for blockwise W4: a random
# Gaussian MLP is the hardest case for 4 bits); the ctest large_model_3gb
# (label "large", -DQUANTD_LARGE=ON) runs it that way.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
GIB=3
DTYPES=float32,float16
CHECK=0
HIDDEN=4096
FFN=16384
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gib) GIB=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    --check) CHECK=1; shift ;;
    --hidden) HIDDEN=$2; shift 2 ;;
    --ffn) FFN=$2; shift 2 ;;
    *) echo "usage: $0 [--gib G] [--dtypes float32,float16] [--check] [--hidden H --ffn F]" >&2; exit 2 ;;
  esac
done
QUANTD=${QUANTD_BIN:-$BUILD_DIR/server/quantd}
QUANTCTL=${QUANTCTL_BIN:-$BUILD_DIR/client/quantctl}
WORK=$BUILD_DIR/large
mkdir -p "$WORK"
LOG=$WORK/quantd.err
failed=0

gb() {  # Bytes as GB with two decimals.
  /usr/bin/python3 -c "print(f'{$1 / 1e9:.2f}')"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

rows=()
for dtype in ${DTYPES//,/ }; do
  dir=$WORK/$dtype-${GIB}gib-$HIDDEN
  if [[ ! -f $dir/model.onnx ]]; then
    /usr/bin/python3 scripts/make_large_model.py "$dir" --dtype "$dtype" \
      --gib "$GIB" --hidden "$HIDDEN" --ffn "$FFN" >&2
  fi
  model_bytes=$(( $(stat -c %s "$dir/model.onnx") + $(stat -c %s "$dir/model.onnx.data") ))
  for config in w8a8 w4a8_b32; do
    out=$dir/out-$config/model.onnx
    rm -rf "$dir/out-$config"
    mkdir -p "$dir/out-$config"
    flags=(--precision=w8a8)
    [[ $config == w4a8_b32 ]] && flags=(--precision=w4a8 --block_size=32)
    port=$(free_port)
    # Limits raised for the model (the defaults take 1 GiB); one job.
    "$QUANTD" --port="$port" --metrics_port=-1 --max_model_bytes=34359738368 \
      --max_uploading_bytes=34359738368 --max_concurrent_jobs=1 \
      > "$WORK/quantd.out" 2> "$LOG" &
    server=$!
    for _ in $(seq 100); do
      "$QUANTCTL" health --server="127.0.0.1:$port" > /dev/null 2>&1 && break
      sleep 0.1
    done
    start=$(date +%s.%N)
    set +e
    /usr/bin/time -f '%M' -o "$WORK/client_rss" "$QUANTCTL" quantize \
      --server="127.0.0.1:$port" --model="$dir/model.onnx" --output="$out" --method=dynamic_range \
      --op_set=tf "${flags[@]}" > "$WORK/quantctl.out" 2> "$WORK/quantctl.err"
    rc=$?
    set -e
    seconds=$(/usr/bin/python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")
    server_hwm_kb=$(awk '/VmHWM/ {print $2}' "/proc/$server/status")
    kill "$server"; wait "$server" || true
    client_kb=$(tail -n 1 "$WORK/client_rss")
    if [[ $rc -ne 0 ]]; then
      echo "$dtype $config: quantctl failed ($rc):" >&2
      tail -n 5 "$WORK/quantctl.err" >&2
      rows+=("| $dtype | $config | $(gb "$model_bytes") GB | failed | | | | |")
      failed=1
      continue
    fi
    out_bytes=$(( $(stat -c %s "$out") + $(stat -c %s "$out.data" 2>/dev/null || echo 0) ))
    verdict=$(node scripts/ort_eval.js compare --model "$dir/model.onnx" --model2 "$out" \
      --x "$dir/x.npy" --threads 2)
    sqnr=$(echo "$verdict" | /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["sqnr_db"], 1))')
    floor=20
    [[ $config == w4a8_b32 ]] && floor=10
    if /usr/bin/python3 -c "import sys; sys.exit(0 if $sqnr >= $floor else 1)"; then :; else
      echo "$dtype $config: ONNX Runtime output SQNR $sqnr dB under $floor" >&2
      failed=1
    fi
    rows+=("| $dtype | $config | $(gb "$model_bytes") GB | $(gb "$out_bytes") GB | $seconds s | $(gb "$server_hwm_kb*1024") GB | $(gb "$client_kb*1024") GB | $sqnr dB |")
    rm -rf "$dir/out-$config"
  done
done

echo "| model | quantized | in | out | quantctl wall | quantd peak RSS | quantctl peak RSS | ORT output SQNR vs float |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if [[ $CHECK -eq 1 && $failed -ne 0 ]]; then exit 1; fi
exit 0
