# Sourced by the scripts that drive a real quantd (scripts/corpus/run.sh,
# scripts/sweep/run.sh, scripts/probe/run.sh): starts one on a free loopback
# port and waits until it listens.
#
#   start_quantd BINARY LOG [quantd flags...]
#
# Sets QUANTD_PID and QUANTD_PORT. Exits the calling script (printing the
# log) when quantd exits or does not listen within 30 s. The caller owns the
# process: its trap kills QUANTD_PID.
start_quantd() {
  local bin=$1 log=$2
  shift 2
  "$bin" --host=127.0.0.1 --port=0 "$@" >"$log" 2>&1 &
  QUANTD_PID=$!
  local _
  for _ in $(seq 300); do
    grep -q "listening on" "$log" && break
    kill -0 "$QUANTD_PID" 2>/dev/null || { echo "quantd exited:"; cat "$log"; exit 1; }
    sleep 0.1
  done
  QUANTD_PORT=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$log" | head -n1)
  [[ -n "$QUANTD_PORT" ]] || { echo "quantd did not start:"; cat "$log"; exit 1; }
}
