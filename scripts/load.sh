#!/usr/bin/env bash
# Load and soak run: starts build/server/quantd on a free port with limits
# tight enough that the load below makes it refuse calls
# (RESOURCE_EXHAUSTED), warms it up, runs quantd_loadgen against it for
# SECONDS (default 60), then prints the loadgen table and the server's
# memory: idle RSS cold and warm, peak RSS (VmHWM) under load, and the idle
# RSS it settles at afterwards. Stops the server with SIGTERM and checks that
# it exits 0.
#
#   scripts/load.sh            # 60 s
#   scripts/load.sh 1800       # the soak: 30 min
#   CLIENTS=12 scripts/load.sh 120 --mix=1:1 --sizes=small=64x2
#
# Arguments after SECONDS go to quantd_loadgen (they override the defaults
# below). Environment: BUILD_DIR (default build; or QUANTD and LOADGEN, the
# two binaries' paths), WARMUP seconds (default 5),
# CLIENTS (default 8), QUANTD_FLAGS (extra server flags, e.g.
# "--threads=4"). Exit status: 1 when quantd_loadgen failed (a call ended
# with a code outside --allowed_codes), 3 when the settled RSS is above the
# warm baseline + 10% + 8 MiB (memory not given back), 4 when the server did
# not start or did not exit 0 on SIGTERM. Build first: scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
SECONDS_TO_RUN=${1:-60}
shift || true
WARMUP=${WARMUP:-5}
CLIENTS=${CLIENTS:-8}
QUANTD=${QUANTD:-$BUILD_DIR/server/quantd}
LOADGEN=${LOADGEN:-$BUILD_DIR/bench/quantd_loadgen}
for bin in "$QUANTD" "$LOADGEN"; do
  [[ -x "$bin" ]] || { echo "load.sh: $bin missing; run scripts/build.sh" >&2; exit 4; }
done

work=$(mktemp -d)
server_pid=""
# shellcheck disable=SC2317  # Run by the trap.
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Two jobs at once and two waiting, for 8 clients; models up to 64 MiB, and
# an upload budget (80 MiB) that holds one large model (50 MB) and a medium
# one but not two large ones. Both admission paths refuse calls all along.
# QUANTD_FLAGS is split into words on purpose.
# shellcheck disable=SC2086
"$QUANTD" --port=0 --metrics_port=0 --host=127.0.0.1 \
  --max_concurrent_jobs=2 --max_queued_jobs=2 \
  --max_model_bytes=$((64 << 20)) --max_uploading_bytes=$((80 << 20)) \
  --shutdown_grace=30s ${QUANTD_FLAGS:-} \
  >"$work/quantd.out" 2>"$work/quantd.err" &
server_pid=$!
port=""
for _ in $(seq 300); do
  port=$(sed -n 's/^quantd listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$work/quantd.out")
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$port" ]]; then
  echo "load.sh: quantd did not start:" >&2
  cat "$work/quantd.out" "$work/quantd.err" >&2
  exit 4
fi
head -n 1 "$work/quantd.out"

# A field of /proc/PID/status in kB.
status_kb() { awk -v f="$1:" '$1 == f { print $2 }' "/proc/$server_pid/status"; }
# The idle RSS the server settles at (kB): sampled every 200 ms until it has
# not fallen for 2 s (its idle trimmer runs twice a second), at most 30 s.
settled_rss_kb() {
  local lowest now since=0
  lowest=$(status_kb VmRSS)
  for _ in $(seq 150); do
    sleep 0.2
    now=$(status_kb VmRSS)
    if ((now < lowest)); then lowest=$now; since=0; else since=$((since + 1)); fi
    ((since >= 10)) && break
  done
  echo "$lowest"
}
mb() { awk -v kb="$1" 'BEGIN { printf "%.1f MB", kb * 1024 / 1e6 }'; }

loadgen() {
  "$LOADGEN" --target="127.0.0.1:$port" --clients="$CLIENTS" --mix=3:1 \
    --sizes=small=64x2,medium=512x3,large=2048x3 --static=0.25 --seed=1 "$@"
}

cold_kb=$(settled_rss_kb)
# The warm-up loads what every later call shares (ONNX's schemas, code
# pages, pool thread stacks, one connection per client): the baseline that
# the settled RSS after the run is held to.
if ((WARMUP > 0)); then
  loadgen --seconds="$WARMUP" --progress_seconds=0 "$@" >"$work/warmup.out" ||
    { echo "load.sh: warm-up failed:" >&2; cat "$work/warmup.out" >&2; }
  echo "warm-up ($WARMUP s) $(tail -n 1 "$work/warmup.out")"
fi
warm_kb=$(settled_rss_kb)
# VmHWM from here on is the peak of the run itself.
echo 5 >"/proc/$server_pid/clear_refs" 2>/dev/null || true

echo "load.sh: ${SECONDS_TO_RUN} s of load, $CLIENTS clients"
set +e
loadgen --seconds="$SECONDS_TO_RUN" "$@" | tee "$work/loadgen.out"
loadgen_rc=${PIPESTATUS[0]}
set -e
if ! kill -0 "$server_pid" 2>/dev/null; then
  set +e
  wait "$server_pid"
  echo "load.sh: FAIL: quantd died during the run (exit status $?); its last lines:" >&2
  set -e
  server_pid=""
  tail -n 30 "$work/quantd.err" >&2
  cp "$work/quantd.err" "${TMPDIR:-/tmp}/load_quantd.err"
  echo "load.sh: server log kept in ${TMPDIR:-/tmp}/load_quantd.err" >&2
  exit 4
fi
peak_kb=$(status_kb VmHWM)
after_kb=$(settled_rss_kb)
bound_kb=$((warm_kb * 11 / 10 + 8192))

echo
echo "server memory: idle cold $(mb "$cold_kb"), idle warm $(mb "$warm_kb"), peak under load $(mb "$peak_kb"), idle after $(mb "$after_kb") (bound $(mb "$bound_kb"))"
# The server's own view (one log line per call, warm-up included), to check
# against the client's.
echo "server log, calls by code: $(grep -o ' code=[A-Z_]*' "$work/quantd.err" |
  sort | uniq -c | awk '{ sub(/code=/, "", $2); printf "%s%s:%d", sep, $2, $1; sep = "," }')"

kill -TERM "$server_pid"
# The server drains its calls for at most --shutdown_grace (30 s); past that
# and some slack it is hung.
for _ in $(seq 225); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.2
done
if kill -0 "$server_pid" 2>/dev/null; then
  echo "load.sh: quantd still running 45 s after SIGTERM; killing it" >&2
  kill -KILL "$server_pid"
fi
set +e
wait "$server_pid"
server_rc=$?
set -e
server_pid=""
echo "server exit code after SIGTERM: $server_rc"

rc=0
if ((loadgen_rc != 0)); then
  echo "load.sh: FAIL: quantd_loadgen exited $loadgen_rc" >&2
  rc=1
fi
if ((after_kb > bound_kb)); then
  echo "load.sh: FAIL: idle RSS after the run $(mb "$after_kb") is above $(mb "$bound_kb") (warm baseline + 10% + 8 MiB)" >&2
  rc=3
fi
if ((server_rc != 0)); then
  echo "load.sh: FAIL: quantd exited $server_rc on SIGTERM" >&2
  tail -n 20 "$work/quantd.err" >&2
  rc=4
fi
if ((rc != 0)); then
  cp "$work/quantd.err" "${TMPDIR:-/tmp}/load_quantd.err"
  echo "load.sh: server log kept in ${TMPDIR:-/tmp}/load_quantd.err" >&2
fi
exit "$rc"
