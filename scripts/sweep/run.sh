#!/usr/bin/env bash
# Every ONNX backend node model through a fresh quantd, DYNAMIC and STATIC
# W8A8 (scripts/sweep/backend_nodes.py), then every model it served through
# ONNX Runtime beside the float original (scripts/sweep/ort_check.js).
# Exit 1 on any finding: INTERNAL / UNKNOWN / crash / hang from quantd, or a
# quantized model ONNX Runtime cannot run where it runs the float one.
#
#   scripts/sweep/run.sh [OUT] [backend_nodes.py args, e.g. --filter=conv]
#
# QUANTD_BIN, QUANTCTL_BIN and ORT_DIR (onnxruntime-node's node_modules)
# default to the build tree's. OUT "-" is a temporary folder, removed after.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
QUANTD_BIN=${QUANTD_BIN:-$REPO/build/server/quantd}
QUANTCTL_BIN=${QUANTCTL_BIN:-$REPO/build/client/quantctl}
ORT_DIR=${ORT_DIR:-$REPO/build/ort/node_modules}
OUT=${1:--}
shift || true
cleanup_out=
if [[ $OUT == - ]]; then
  OUT=$(mktemp -d)
  cleanup_out=$OUT
fi
log=$(mktemp)
source "$REPO/scripts/lib/quantd_server.sh"
trap 'kill $QUANTD_PID 2>/dev/null; rm -f "$log"; [[ -n $cleanup_out ]] && rm -rf "$cleanup_out"' EXIT
start_quantd "$QUANTD_BIN" "$log" --metrics_port=-1
pid=$QUANTD_PID port=$QUANTD_PORT
rc=0
/usr/bin/python3 "$REPO/scripts/sweep/backend_nodes.py" --server=127.0.0.1:"$port" \
  --quantctl="$QUANTCTL_BIN" --out="$OUT" "$@" || rc=1
kill -0 $pid 2>/dev/null || { echo "quantd died"; cat "$log"; exit 1; }
NODE_PATH="$ORT_DIR" node "$REPO/scripts/sweep/ort_check.js" "$OUT/manifest.json" || rc=1
[[ -z $cleanup_out ]] && echo "work dir: $OUT"
exit $rc
