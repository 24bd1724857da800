#!/usr/bin/env bash
# Installs everything quantd needs to build, run and test, from Debian's
# packages and the npm registry. Idempotent: installs only what is missing,
# and runs `apt-get update` at most once.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev prometheus-cpp-dev libonnx-dev libonnx-testdata
  libgtest-dev libgmock-dev
  python3-torch python3-torchvision python3-sklearn python3-numpy python3-onnx
  nodejs npm curl
  # Client SDK for Python, the Prometheus scrape test, manifest checks.
  python3-grpcio python3-grpc-tools prometheus yamllint
)

missing=()
for p in "${PACKAGES[@]}"; do
  # nodejs from another origin may provide npm itself.
  if [[ "$p" == npm ]] && command -v npm >/dev/null 2>&1; then continue; fi
  if [[ "$p" == nodejs ]] && command -v node >/dev/null 2>&1; then continue; fi
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime for Node.js: the independent runtime the tests check our
# output models with. --ignore-scripts: its install script downloads extra
# binaries, which this network does not allow and the CPU runtime does not
# need.
ORT_DIR=build/ort
if [[ ! -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ]]; then
  mkdir -p "$ORT_DIR"
  (cd "$ORT_DIR" && [[ -f package.json ]] || echo '{"name":"quantd-ort","private":true}' > package.json)
  (cd "$ORT_DIR" && npm install --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0 >/dev/null)
fi
echo "setup: ok"
