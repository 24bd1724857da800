#!/usr/bin/env bash
# Robustness probe, part 2: quantizes every model scripts/probe/export.py
# wrote DYNAMIC and STATIC W8A8 (STATIC calibrated on calib.npy) through a
# fresh quantd, and compares each with the float model in ONNX Runtime at its
# default level on eval.npy; prints a markdown table with quantd's own
# fidelity beside ONNX Runtime's SQNR (a gap between them is a finding).
#
#   scripts/probe/run.sh OUT
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: scripts/probe/run.sh OUT}
log=$(mktemp)
source "$REPO/scripts/lib/quantd_server.sh"
trap 'kill $QUANTD_PID 2>/dev/null; rm -f "$log"' EXIT
start_quantd "$REPO/build/server/quantd" "$log" --metrics_port=-1
port=$QUANTD_PORT
printf '| model | config | quantd | ORT SQNR dB / top-1 | note |\n|---|---|---|---|---|\n'
for d in "$OUT"/*/; do
  name=$(basename "$d")
  for cfg in dynamic static; do
    args=(--method=${cfg}_range --precision=w8a8 --op_set=tf)
    [[ $cfg == static ]] && args+=(--calibration_data="$d/calib.npy" --batch_size=2)
    out="$d/q_$cfg.onnx"
    rm -f "$out"
    if ! "$REPO/build/client/quantctl" quantize --server=127.0.0.1:$port --model="$d/model.onnx" \
        --output="$out" "${args[@]}" >"$d/q_$cfg.txt" 2>&1; then
      printf '| %s | %s | REFUSED | - | %s |\n' "$name" "$cfg" "$(grep -i -m1 'error\|code' "$d/q_$cfg.txt" | cut -c1-200)"
      continue
    fi
    fid=$(grep -m1 "output .*SQNR" "$d/q_$cfg.txt" | sed 's/.*SQNR \([^ ]*\) dB.*/\1/')
    # ONNX Runtime's default session options, as a deployment has them
    # (ort_eval's --x64quantprecision=1 trips an ONNX Runtime 1.30 bug on a
    # quantized weight shared by several Convs, e.g. RAFT's update block).
    if ! json=$(node "$REPO/scripts/ort_eval.js" compare --model "$d/model.onnx" --model2 "$out" \
        --x "$d/eval.npy" --batch 2 --x64quantprecision=0 2>"$d/ort_$cfg.err"); then
      printf '| %s | %s | ok | FAIL | %s |\n' "$name" "$cfg" "$(head -c 200 "$d/ort_$cfg.err" | tr '\n' ' ')"
      continue
    fi
    s=$(echo "$json" | sed 's/.*"sqnr_db":\([^,]*\).*/\1/')
    t=$(echo "$json" | sed 's/.*"top1_agreement":\([^,]*\).*/\1/')
    printf '| %s | %s | ok | %s / %s | quantd fidelity %s dB |\n' "$name" "$cfg" "$s" "$t" "${fid:-n/a}"
  done
done
