#!/usr/bin/env bash
# Runs one of the libFuzzer targets of fuzz/ (clang + ASan + UBSan):
#
#   scripts/fuzz.sh [target] [seconds] [extra libFuzzer flags...]
#
#   parse_model     (default) ParseModel (core/graph/model_io.cc) against
#                   protobuf's own parse: fuzz/parse_model_fuzzer.cc
#   request_stream  the Quantize/Calibrate request-stream state machine
#                   (server/job_reactor.cc) through the real service on
#                   localhost, with fake jobs: fuzz/request_stream_fuzzer.cc
#   options         ResolveQuantizeRequest / ResolveCalibrateRequest
#                   (core/engine/request_options.h): fuzz/options_fuzzer.cc
#   npy             the client's calibration-data reader (ParseNpy,
#                   ReadTensorFile, CalibrationData batches):
#                   fuzz/npy_fuzzer.cc
#   tensor_proto    the TensorProto readers (core/graph/tensor_util.h,
#                   Tensor::FromProto, CheckModelFields):
#                   fuzz/tensor_proto_fuzzer.cc
#   executor        the float executor on small fuzzed graphs (1-8 ops,
#                   fuzzed attributes, shapes and values) after the entry
#                   checks and preparation; 1- vs 2-thread runs must agree:
#                   fuzz/executor_fuzzer.cc
#
# `scripts/fuzz.sh [seconds]` (a number first) fuzzes parse_model, as it
# always did.
#
# Configures clang in BUILD_DIR (default build-fuzz), builds only
# <target>_fuzzer, and fuzzes for `seconds` (default 60) on one core,
# starting from a copy of the committed seeds (fuzz/corpus/<target>/) in
# $BUILD_DIR/fuzz-corpus/ (parse_model) or $BUILD_DIR/fuzz-corpus-<target>/,
# which keeps growing across runs. Crashes (a violated check aborts) are
# written to $BUILD_DIR/fuzz-artifacts/; rerun one with
#   $BUILD_DIR/fuzz/<target>_fuzzer <file>
# and, once the bug is fixed, add it to the target's seed script
# (fuzz/make_parse_seeds.py, make_stream_seeds.py, make_options_seeds.py,
# make_npy_seeds.py, make_tensor_proto_seeds.py, make_executor_seeds.py) as
# regress_*.
#
# A long run, e.g. overnight on 2 cores:
#   JOBS=2 scripts/fuzz.sh parse_model 28800
# The short deterministic versions run in CI as the ctests
# <target>_fuzz_corpus (fuzz/parse_model_corpus_main.cc,
# fuzz/structured_corpus_main.cc).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=parse_model
if [[ $# -gt 0 && ! $1 =~ ^[0-9]+$ && $1 != -* ]]; then
  TARGET=$1
  shift
fi
SECONDS_TO_RUN=${1:-60}
shift || true
# Per target: input size, and what the target needs beyond the defaults.
case "$TARGET" in
  parse_model)
    # libFuzzer's default (4096) is plenty with 1- and 16-byte pieces.
    target_flags=(-max_len=4096)
    corpus_name=fuzz-corpus
    ;;
  request_stream)
    # The decoder reads at most 48 messages (request_stream_fuzzer.cc).
    # Every call logs a line to stderr: the target sends stderr to
    # /dev/null unless libFuzzer already has (-close_fd_mask=2), which keeps
    # libFuzzer's own output; a violation's detail comes as the sanitizer's
    # SUMMARY line (rerun on the artifact for the whole message). A stuck
    # call takes up to ~15 s (deadline + settle). -detect_leaks=0: gRPC
    # frees on its own threads after the input, so nearly every input looks
    # like a leak and gets a full LeakSanitizer pass (18 exec/s instead of
    # ~150); the target checks the service's own bookkeeping instead.
    target_flags=(-max_len=4096 -close_fd_mask=2 -timeout=30 -detect_leaks=0)
    corpus_name=fuzz-corpus-request_stream
    ;;
  options)
    target_flags=(-max_len=4096)
    corpus_name=fuzz-corpus-options
    ;;
  npy | tensor_proto)
    # Seeds are 10-330 bytes; 4096 leaves room for longer data and
    # headers.
    target_flags=(-max_len=4096)
    corpus_name=fuzz-corpus-$TARGET
    ;;
  executor)
    # Seeds are 60-500 bytes; the target ignores inputs over 8 KiB.
    # Building the executor with ASan takes ~40 min on 2 cores the first
    # time (ccache after that).
    target_flags=(-max_len=2048)
    corpus_name=fuzz-corpus-executor
    ;;
  *)
    echo "unknown target '$TARGET' (parse_model, request_stream, options," \
      "npy, tensor_proto, executor)" >&2
    exit 2
    ;;
esac
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-1}

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  # ccache when installed (rebuilds after a header change), not required.
  launcher=()
  if command -v ccache > /dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DQUANTD_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}"
fi
ninja -C "$BUILD_DIR" -j"$JOBS" "${TARGET}_fuzzer"

corpus="$BUILD_DIR/$corpus_name"
artifacts="$BUILD_DIR/fuzz-artifacts"
mkdir -p "$corpus" "$artifacts"
cp -n "fuzz/corpus/$TARGET"/* "$corpus"/
# -print_final_stats: executions, exec/s and coverage (cov: edges, ft:
# features) at the end; the log lines show them as it goes.
# JOBS=1 fuzzes in this process (what -jobs=1 amounts to, with the log on
# the terminal); JOBS>1 runs that many workers, each logging to
# fuzz-<n>.log in the current directory.
parallel=()
if ((JOBS > 1)); then parallel=(-jobs="$JOBS" -workers="$JOBS"); fi
# Later flags win: the target's over the defaults, the caller's over both.
"$BUILD_DIR/fuzz/${TARGET}_fuzzer" "$corpus" \
  -max_total_time="$SECONDS_TO_RUN" -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "${target_flags[@]}" \
  "${parallel[@]}" -artifact_prefix="$artifacts/${TARGET}-" "$@"
