#!/usr/bin/env bash
# Builds the quantd container image with podman and checks it end to end:
#   1. installs podman, runc and debootstrap if missing (apt-get, needs root);
#   2. writes a podman configuration for this kind of host into a work dir
#      (runc, cgroupfs, explicit ulimits, overlay storage) and points podman at
#      it with CONTAINERS_CONF / CONTAINERS_STORAGE_CONF, leaving /etc alone;
#   3. debootstraps a minimal bookworm from the host's own apt mirror and
#      imports it as the base image (skipped when the image already exists),
#      so no container registry is needed;
#   4. builds the image from the Dockerfile (the compile runs inside it);
#   5. runs it the way Kubernetes does (read-only root, no capabilities,
#      no-new-privileges), quantizes examples/digits through it, checks the
#      result, the health service, the uid and the HEALTHCHECK, stops it
#      (SIGTERM drain) and removes it.
# Every step prints its wall time; the last line is a one-line summary.
#
# Environment (all optional):
#   QUANTD_CONTAINER_DIR  work dir: podman config, storage, rootfs
#                         (default: ~/.cache/quantd-container; keep it to
#                         cache the base image and the build layers)
#   QUANTD_BASE_IMAGE     base image name (default localhost/bookworm-minbase)
#   QUANTD_IMAGE          image to build (default localhost/quantd:latest)
#   QUANTD_REBUILD_BASE=1 debootstrap the base image again
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD

WORK=${QUANTD_CONTAINER_DIR:-${HOME:-/root}/.cache/quantd-container}
BASE_IMAGE=${QUANTD_BASE_IMAGE:-localhost/bookworm-minbase:latest}
IMAGE=${QUANTD_IMAGE:-localhost/quantd:latest}
SUITE=bookworm
CONTAINER=quantd-check-$$

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO=sudo

declare -a SUMMARY=()
# step NAME COMMAND...: runs one step and prints its wall time.
step() {
  local name=$1
  shift
  echo "==> $name"
  local t0 t1
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "<== $name: ${secs}s"
  SUMMARY+=("$name=${secs}s")
}

fail() {
  echo "container_build: FAILED: $*" >&2
  exit 1
}

# --- 1. tools ---------------------------------------------------------------
install_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || [[ -x /usr/sbin/runc ]] || missing+=(runc)
  command -v debootstrap >/dev/null || [[ -x /usr/sbin/debootstrap ]] ||
    missing+=(debootstrap)
  if ((${#missing[@]})); then
    echo "installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      --no-install-recommends "${missing[@]}"
  fi
  podman --version
}

# --- 2. podman configuration ------------------------------------------------
# Why each setting: crun cannot create containers on hosts with this cgroup v1
# layout, so runc; there is no systemd to delegate cgroups to, so cgroupfs;
# podman's default ulimits (nofile 1048576, nproc unlimited) exceed what this
# host grants, so explicit ones; events go to a file (no journald).
configure_podman() {
  mkdir -p "$WORK/storage" "$WORK/run" "$WORK/out"
  cat >"$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  cat >"$WORK/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$WORK/storage"
runroot = "$WORK/run"
EOF
  export CONTAINERS_CONF="$WORK/containers.conf"
  export CONTAINERS_STORAGE_CONF="$WORK/storage.conf"
  podman info --format \
    'runtime={{.Host.OCIRuntime.Name}} cgroups={{.Host.CgroupManager}} storage={{.Store.GraphDriverName}}'
}

# --- 3. base image ----------------------------------------------------------
# "URI SUITE COMPONENTS" for every enabled Debian source of the host whose
# suite belongs to $SUITE (one-line .list and deb822 .sources formats).
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
      awk '$1 == "deb" && NF >= 4 { c = $4; for (i = 5; i <= NF; i++) c = c " " $i; print $2, $3, c }'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    awk '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled != "no")
          for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++) print uri[u], suite[s], comps
        types = ""; enabled = ""; nu = 0; ns = 0; comps = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^Types:/ { $1 = ""; types = substr($0, 2) }
      /^Enabled:/ { enabled = tolower($2) }
      /^URIs:/ { for (i = 2; i <= NF; i++) uri[++nu] = $i }
      /^Suites:/ { for (i = 2; i <= NF; i++) suite[++ns] = $i }
      /^Components:/ { $1 = ""; comps = substr($0, 2) }
      END { flush() }' "$f"
  done | awk -v suite="$SUITE" '$2 == suite || index($2, suite "-") == 1 || index($2, suite "/") == 1'
}

build_base_image() {
  if [[ "${QUANTD_REBUILD_BASE:-0}" != 1 ]] && podman image exists "$BASE_IMAGE"; then
    echo "cached: $BASE_IMAGE exists (QUANTD_REBUILD_BASE=1 rebuilds it)"
    return
  fi
  local sources mirror
  sources=$(host_sources)
  [[ -n "$sources" ]] || fail "no $SUITE source in /etc/apt/sources.list*"
  mirror=$(awk -v suite="$SUITE" '$2 == suite { print $1; exit }' <<<"$sources")
  [[ -n "$mirror" ]] || fail "no source for suite $SUITE itself in /etc/apt"
  echo "mirror: $mirror"
  local rootfs="$WORK/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror"
  # The image's apt uses the same sources as the host (main suite, updates,
  # security), so the build's apt-get sees the same packages.
  awk '{ printf "deb %s %s", $1, $2; for (i = 3; i <= NF; i++) printf " %s", $i; print "" }' \
    <<<"$sources" >"$rootfs/etc/apt/sources.list"
  cat "$rootfs/etc/apt/sources.list"
  # Like the official slim images: no package lists, caches, translations,
  # manuals or docs (but the copyright files), now or for packages installed
  # later: about 50 MB less.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*.log \
    "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  find "$rootfs/usr/share/doc" \( -type f -o -type l \) ! -name copyright -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -depth -type d -empty -delete
  echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/90-no-languages"
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/01-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
  tar -C "$rootfs" --numeric-owner -c . |
    podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE"
  rm -rf "$rootfs"
  podman image ls "$BASE_IMAGE"
}

# --- 4. quantd image --------------------------------------------------------
build_image() {
  # --format docker: OCI images cannot carry a HEALTHCHECK.
  # --network=host: apt-get inside reaches the host's mirror without a
  # container network (no CNI/netavark set up here).
  podman build --format docker --network=host \
    --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$IMAGE" -f Dockerfile "$SRC"
  podman image ls "$IMAGE"
}

# --- 5. run and check -------------------------------------------------------
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cleanup() {
  podman rm -f -t 0 "$CONTAINER" >/dev/null 2>&1 || true
}

start_container() {
  PORT=$(free_port)
  METRICS_PORT=$(free_port)
  while [[ "$METRICS_PORT" == "$PORT" ]]; do METRICS_PORT=$(free_port); done
  trap cleanup EXIT
  rm -rf "$WORK/out"
  mkdir -p "$WORK/out"
  chown 10001:10001 "$WORK/out"
  # The same restrictions as deploy/kubernetes: read-only root, no
  # capabilities, no privilege escalation. (podman 4.3 logs "unable to get
  # systemd connection" errors here and on removal: only the periodic
  # HEALTHCHECK timer needs systemd; check_container runs the check itself.)
  podman run -d --name "$CONTAINER" --network=host \
    --read-only --cap-drop=ALL --security-opt=no-new-privileges \
    -e QUANTD_PORT="$PORT" \
    -v "$SRC/examples/digits:/models:ro" -v "$WORK/out:/out" \
    "$IMAGE" --port="$PORT" --metrics_port="$METRICS_PORT"
  echo "quantd on 127.0.0.1:$PORT (metrics :$METRICS_PORT)"
  local _
  for _ in $(seq 1 100); do
    if podman exec "$CONTAINER" quantctl health --server="127.0.0.1:$PORT" --timeout=1 \
      >/dev/null 2>&1; then
      return
    fi
    sleep 0.1
  done
  podman logs "$CONTAINER" >&2 || true
  fail "quantd did not become SERVING within 10s"
}

check_container() {
  local health
  health=$(podman exec "$CONTAINER" quantctl health --server="127.0.0.1:$PORT")
  echo "health: $health"
  [[ "$health" == *SERVING* && "$health" != *NOT_SERVING* ]] ||
    fail "health is not SERVING: $health"

  local pid uid
  pid=$(podman inspect -f '{{.State.Pid}}' "$CONTAINER")
  uid=$(stat -c %u "/proc/$pid")
  echo "quantd process uid (host view): $uid"
  [[ "$uid" == 10001 ]] || fail "quantd runs as uid $uid, want 10001"
  uid=$(podman exec "$CONTAINER" id -u)
  [[ "$uid" == 10001 ]] || fail "exec in the container runs as uid $uid, want 10001"

  podman healthcheck run "$CONTAINER" || fail "podman healthcheck run failed"
  echo "HEALTHCHECK: healthy"

  # deploy/kubernetes' preStop hook runs `sleep` inside this image.
  podman exec "$CONTAINER" sleep 0 || fail "the image has no sleep for the preStop hook"

  if curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt"; then
    echo "metrics: $(grep -c '^quantd_' "$WORK/metrics.txt") quantd_ samples"
  else
    fail "metrics endpoint :$METRICS_PORT/metrics does not answer"
  fi
}

quantize_example() {
  podman exec "$CONTAINER" quantctl quantize --server="127.0.0.1:$PORT" \
    --model=/models/model.onnx --output=/out/model_int8.onnx \
    --method=dynamic_range --json >"$WORK/quantize.json" ||
    fail "quantctl quantize exited $?"
  local in_size out_size
  in_size=$(stat -c %s "$SRC/examples/digits/model.onnx")
  out_size=$(stat -c %s "$WORK/out/model_int8.onnx")
  echo "model.onnx: $in_size bytes -> model_int8.onnx: $out_size bytes"
  ((out_size > 0 && out_size < in_size)) || fail "quantized model is not smaller"
  QUANT_SIZES="$in_size->$out_size"
}

stop_container() {
  # SIGTERM: quantd reports NOT_SERVING and drains; with nothing running it
  # exits at once.
  podman stop -t 40 "$CONTAINER" >/dev/null
  local code
  code=$(podman inspect -f '{{.State.ExitCode}}' "$CONTAINER")
  podman logs "$CONTAINER" 2>&1 | tail -n 3
  podman rm "$CONTAINER" >/dev/null
  trap - EXIT
  [[ "$code" == 0 ]] || fail "quantd exited with $code after SIGTERM"
  echo "stopped on SIGTERM, exit code 0, container removed"
}

T_START=$(date +%s)
step tools install_tools
step configure configure_podman
step base_image build_base_image
step build_image build_image
step start start_container
step quantize quantize_example
step checks check_container
step stop stop_container
IMAGE_SIZE=$(podman image inspect -f '{{.Size}}' "$IMAGE")
BASE_SIZE=$(podman image inspect -f '{{.Size}}' "$BASE_IMAGE")
echo "image $IMAGE: $((IMAGE_SIZE / 1000000)) MB (base $BASE_IMAGE: $((BASE_SIZE / 1000000)) MB)"
echo "container_build: OK in $(($(date +%s) - T_START))s: ${SUMMARY[*]} model=$QUANT_SIZES bytes"
