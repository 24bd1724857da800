#!/usr/bin/env bash
# Goodput against concurrent clients with quantd's DEFAULT limits (issue 13,
# goal 4): starts build/server/quantd with no limit flags, then for each
# client count runs quantd_loadgen (one connection per client, mixed
# Quantize/Calibrate on 8 KB / 0.8 MB / 12 MB models) and prints one row:
# calls, OK, refused (RESOURCE_EXHAUSTED), other errors, OK calls/s and
# latency. The peer is the 1-client row: goodput should grow or hold as
# clients are added, never collapse into refusals.
#
#   scripts/bench_concurrency.sh              # 1,2,4,8 clients, 15 s each
#   CLIENTS=1,8,16 SECONDS_EACH=30 scripts/bench_concurrency.sh
#   QUANTD_FLAGS="--max_queued_jobs=0" scripts/bench_concurrency.sh  # no queue
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
QUANTD=${QUANTD:-$BUILD_DIR/server/quantd}
LOADGEN=${LOADGEN:-$BUILD_DIR/bench/quantd_loadgen}
CLIENTS=${CLIENTS:-1,2,4,8}
SECONDS_EACH=${SECONDS_EACH:-15}
for bin in "$QUANTD" "$LOADGEN"; do
  [[ -x "$bin" ]] || { echo "bench_concurrency.sh: $bin missing; run scripts/build.sh" >&2; exit 4; }
done

work=$(mktemp -d)
server_pid=""
# shellcheck disable=SC2317  # Run by the trap.
cleanup() {
  [[ -n "$server_pid" ]] && kill -KILL "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# QUANTD_FLAGS is split into words on purpose.
# shellcheck disable=SC2086
"$QUANTD" --port=0 --metrics_port=0 --host=127.0.0.1 ${QUANTD_FLAGS:-} \
  >"$work/quantd.out" 2>"$work/quantd.err" &
server_pid=$!
port=""
for _ in $(seq 300); do
  port=$(sed -n 's/^quantd listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$work/quantd.out")
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$port" ]] || { cat "$work/quantd.out" "$work/quantd.err" >&2; exit 4; }
head -n 1 "$work/quantd.out"

echo
echo "| clients | calls | OK | refused | other errors | OK calls/s | OK p50 ms | OK p99 ms |"
echo "|---|---|---|---|---|---|---|---|"
IFS=, read -r -a counts <<<"$CLIENTS"
for n in "${counts[@]}"; do
  "$LOADGEN" --target="127.0.0.1:$port" --clients="$n" --seconds="$SECONDS_EACH" \
    --sizes=small=64x2,medium=512x3,large=2048x3 --progress_seconds=0 \
    --allowed_codes=OK,RESOURCE_EXHAUSTED,UNAVAILABLE,DEADLINE_EXCEEDED,CANCELLED,INTERNAL,INVALID_ARGUMENT \
    >"$work/load.txt" 2>&1 || true
  # The loadgen's last line: "loadgen: calls=N ok=N errors={CODE:N,...} ..."
  awk -v n="$n" -v secs="$SECONDS_EACH" '
    /^loadgen: / {
      for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
      refused = 0; other = 0
      e = v["errors"]; gsub(/[{}]/, "", e)
      m = split(e, parts, ",")
      for (j = 1; j <= m; ++j) {
        if (parts[j] == "") continue
        split(parts[j], ce, ":")
        if (ce[1] == "RESOURCE_EXHAUSTED") refused += ce[2]; else other += ce[2]
      }
      printf "| %d | %d | %d | %d | %d | %.2f | %s | %s |\n", n, v["calls"],
             v["ok"], refused, other, v["ok"] / secs, v["p50_ms"], v["p99_ms"]
    }' "$work/load.txt"
  grep -q '^loadgen: ' "$work/load.txt" || { cat "$work/load.txt" >&2; exit 1; }
done
kill -TERM "$server_pid"
wait "$server_pid" || { echo "quantd did not exit 0 on SIGTERM" >&2; exit 4; }
server_pid=""
