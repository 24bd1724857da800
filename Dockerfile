# Multi-stage build of quantd. The base image is a build argument so it can be
# built without a registry (a debootstrapped bookworm imported into podman).
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libeigen3-dev prometheus-cpp-dev libonnx-dev libgtest-dev libgmock-dev nodejs \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    && cmake --build /build --target quantd quantctl -j"$(nproc)"

FROM ${BASE_IMAGE} AS runtime
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libonnx1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libabsl20220623 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home quantd
COPY --from=build /build/server/quantd /build/client/quantctl /usr/local/bin/
USER 10001
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s CMD ["quantctl", "health", "--server=127.0.0.1:50051"]
ENTRYPOINT ["quantd", "--port=50051", "--metrics_port=9464"]
