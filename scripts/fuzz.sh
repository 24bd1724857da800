#!/usr/bin/env bash
# Fuzzes ParseModel (core/graph/model_io.cc) against protobuf's own parse
# with libFuzzer + ASan + UBSan: fuzz/parse_model_fuzzer.cc.
#
#   scripts/fuzz.sh [seconds] [extra libFuzzer flags...]
#
# Configures clang in BUILD_DIR (default build-fuzz), builds only
# parse_model_fuzzer, and fuzzes for `seconds` (default 60) on one core,
# starting from a copy of the committed seeds (fuzz/corpus/parse_model/) in
# $BUILD_DIR/fuzz-corpus/, which keeps growing across runs. Crashes (a
# disagreement aborts) are written to $BUILD_DIR/fuzz-artifacts/; rerun one
# with  $BUILD_DIR/fuzz/parse_model_fuzzer <file>  and, once model_io.cc is
# fixed, add it to REGRESSIONS in fuzz/make_parse_seeds.py.
#
# A long run, e.g. overnight on 2 cores:
#   JOBS=2 scripts/fuzz.sh 28800
# The short deterministic version runs in CI as the ctest
# parse_model_fuzz_corpus (fuzz/parse_model_corpus_main.cc).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
shift || true
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-1}

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DQUANTD_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
ninja -C "$BUILD_DIR" -j"$JOBS" parse_model_fuzzer

corpus="$BUILD_DIR/fuzz-corpus"
artifacts="$BUILD_DIR/fuzz-artifacts"
mkdir -p "$corpus" "$artifacts"
cp -n fuzz/corpus/parse_model/* "$corpus"/
# -max_len: libFuzzer's default (4096) is plenty with 1- and 16-byte pieces.
# -print_final_stats: executions, exec/s and coverage (cov: edges, ft:
# features) at the end; the log lines show them as it goes.
# JOBS=1 fuzzes in this process (what -jobs=1 amounts to, with the log on
# the terminal); JOBS>1 runs that many workers, each logging to
# fuzz-<n>.log in the current directory.
parallel=()
if ((JOBS > 1)); then parallel=(-jobs="$JOBS" -workers="$JOBS"); fi
"$BUILD_DIR/fuzz/parse_model_fuzzer" "$corpus" \
  -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "${parallel[@]}" \
  -artifact_prefix="$artifacts/" "$@"
