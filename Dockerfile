# sagafeed and cosmolite on Debian 12 (bookworm), in two stages:
#   build    - compilers and -dev packages; builds the two programs (Release)
#   runtime  - the shared libraries only, a non-root user, the programs and
#              the container configuration (packaging/docker/)
#
#   docker build -t sagafeed .                       # the runtime image
#   docker run --rm sagafeed --help
#   docker run --rm --entrypoint cosmolite sagafeed --help
#
# docker-compose.yml runs it next to the official Cosmos DB emulator and
# Kafka; docs/operations.md explains the environment variables.

FROM debian:12-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config ca-certificates check \
      libjansson-dev libmicrohttpd-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev \
      libconfig-dev librdkafka-dev duktape-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build --target sagafeed cosmolite -j"$(nproc)" \
 && mkdir -p /out/etc \
 && cp /build/cli/sagafeed /build/emulator/cosmolite /out/ \
 && cp packaging/docker/sagafeed.cfg /out/etc/sagafeed.cfg \
 && sed -n '/^workflows = (/,$p' config/examples/order-fulfilment.cfg > /out/etc/order-workflows.cfg \
 && /out/sagafeed --version

FROM debian:12-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates curl libjansson4 libmicrohttpd12 libsqlite3-0 libcurl4 libssl3 \
      libconfig9 librdkafka1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/sagafeed --create-home sagafeed
COPY --from=build /out/sagafeed /out/cosmolite /usr/local/bin/
COPY --from=build /out/etc/ /etc/sagafeed/
COPY config/examples/ /etc/sagafeed/examples/
USER sagafeed
WORKDIR /var/lib/sagafeed
# /metrics, /healthz, /readyz (processor.http_listen)
EXPOSE 9464
# The packaged configuration binds /metrics to 127.0.0.1 (a host install); in
# a container the port is published instead, so listen on every address here.
ENV SAGAFEED_PROCESSOR_HTTP_LISTEN=:9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
  CMD curl -fsS http://127.0.0.1:9464/healthz || exit 1
ENTRYPOINT ["sagafeed"]
CMD ["run", "-c", "/etc/sagafeed/sagafeed.cfg"]
