# Multi-stage build of quantd. The base image is a build argument so it can be
# built without a registry: scripts/container_build.sh debootstraps a minimal
# bookworm, imports it into podman and passes it here.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
# nodejs and the GoogleTest packages are only here because the CMake project
# configures its tests too; only quantd and quantctl are built.
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libeigen3-dev prometheus-cpp-dev libonnx-dev libgtest-dev libgmock-dev nodejs \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    && cmake --build /build --target quantd quantctl -j"$(nproc)" \
    && strip /build/server/quantd /build/client/quantctl

FROM ${BASE_IMAGE} AS runtime
# The shared libraries quantd and quantctl link (ldd), each pulling its own
# dependencies (libgrpc29, libre2-9, libssl3, libcivetweb1, ...).
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libonnx1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libabsl20220623 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
         --shell /usr/sbin/nologin quantd
COPY --from=build /build/server/quantd /build/client/quantctl /usr/local/bin/
# Numeric uid so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 10001:10001
EXPOSE 50051 9464
# QUANTD_PORT is only read by the HEALTHCHECK: set it together with --port
# when the gRPC port changes (e.g. with --network=host).
ENV QUANTD_PORT=50051
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD quantctl health --server=127.0.0.1:${QUANTD_PORT} --timeout=2
# quantd is PID 1 and takes SIGTERM itself: it turns NOT_SERVING and drains
# running calls for --shutdown_grace (30s) before exiting.
ENTRYPOINT ["quantd"]
CMD ["--port=50051", "--metrics_port=9464"]
