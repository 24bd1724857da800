#!/usr/bin/env bash
# What each accuracy algorithm costs against plain rounding to nearest: for
# each corpus model given, each method and each algorithm, a fresh quantd
# serves one W4A8 Quantize call with the model's calibration data (DYNAMIC
# rounding: none, as it takes none); prints quantctl's wall time and the
# server's peak resident memory (GNU time) as a markdown table, each
# algorithm's cell with its ratio to rounding.
#
#   scripts/bench_weight_algorithms.sh [model ...]   (default: ppocr_rec_v4 ppocr_det_v4)
#   ALGORITHMS="gptq awq" scripts/bench_weight_algorithms.sh ...
#     (default: gptq awq smoothquant bias_correction; each is quantctl's
#     --weight_algorithm=NAME, or --NAME for smoothquant / bias_correction /
#     equalize)
#
# Needs the corpus (scripts/corpus/fetch.sh) and a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
QUANTD=${QUANTD_BIN:-$BUILD_DIR/server/quantd}
QUANTCTL=${QUANTCTL_BIN:-$BUILD_DIR/client/quantctl}
CORPUS=${CORPUS:-$BUILD_DIR/corpus}
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(ppocr_rec_v4 ppocr_det_v4)
work=$(mktemp -d)
# Only the main shell cleans up (the runs are subshells).
trap '[[ $BASHPID == '$$' ]] && rm -rf "$work"' EXIT

# The model's --calibration_data flags, from the corpus manifest.
calib_flags() {
  node -e '
    const m = require("./scripts/corpus/manifest.json").models.find((x) => x.name === process.argv[1]);
    if (!m) { console.error("no corpus model " + process.argv[1]); process.exit(2); }
    const dir = process.argv[2] + "/" + m.name + "/";
    const out = m.calib.map((c) => { const i = c.indexOf("="); return "--calibration_data=" + (i >= 0 ? c.slice(0, i + 1) + dir + c.slice(i + 1) : dir + c); });
    out.push("--batch_size=" + (m.calib_batch || 16), ...(m.calib_args || []));
    console.log(out.join("\n"));' "$1" "$CORPUS"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run MODEL METHOD ALGORITHM -> "seconds peak_kib"
run() {
  local model=$1 method=$2 algorithm=$3 port
  port=$(free_port)
  /usr/bin/time -f '%M' -o "$work/rss" "$QUANTD" --port="$port" --metrics_port=0 >/dev/null \
    2>"$work/server.log" &
  local server=$!
  for _ in $(seq 50); do
    "$QUANTCTL" health --server="127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.1
  done
  # DYNAMIC rounding takes no calibration data; STATIC and every
  # algorithm but equalize do.
  local flags=()
  if [[ $method == static_range || ($algorithm != rtn && $algorithm != equalize) ]]; then
    mapfile -t flags < <(calib_flags "$model")
  fi
  case $algorithm in
    rtn | gptq | awq | awq+gptq) flags+=("--weight_algorithm=$algorithm") ;;
    *) flags+=("--$algorithm") ;;
  esac
  local t0 t1
  t0=$(date +%s.%N)
  local ok=1
  "$QUANTCTL" quantize --server="127.0.0.1:$port" --model="$CORPUS/$model/model.onnx" \
    --output="$work/out.onnx" --method="$method" --precision=w4a8 \
    "${flags[@]}" >/dev/null || ok=0
  t1=$(date +%s.%N)
  kill -TERM "$(pgrep -P "$server" quantd || echo "$server")" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  if [[ $ok == 1 ]]; then
    echo "$(echo "$t1 - $t0" | bc) $(cat "$work/rss")"
  else
    echo "nan nan"
  fi
}

read -r -a algorithms <<<"${ALGORITHMS:-gptq awq smoothquant bias_correction}"
header="| model | method | rtn time, peak RSS |"
rule="|---|---|---|"
for a in "${algorithms[@]}"; do
  header+=" $a time (x rtn), peak RSS (x rtn) |"
  rule+="---|"
done
echo "$header"
echo "$rule"
for model in "${models[@]}"; do
  for method in static_range dynamic_range; do
    read -r rt rss_r < <(run "$model" "$method" rtn)
    row=$(awk -v m="$model" -v me="$method" -v rt="$rt" -v rm="$rss_r" 'BEGIN {
      printf "| %s | %s W4A8 | %.2f s, %.0f MiB |", m, me, rt, rm / 1024 }')
    for a in "${algorithms[@]}"; do
      read -r at rss_a < <(run "$model" "$method" "$a")
      row+=$(awk -v rt="$rt" -v at="$at" -v rm="$rss_r" -v am="$rss_a" 'BEGIN {
        if (at == "nan") { printf " refused |"; exit }
        printf " %.2f s (%.2fx), %.0f MiB (%.2fx) |", at, at / rt, am / 1024, am / rm }')
    done
    echo "$row"
  done
done
