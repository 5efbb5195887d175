# syntax=docker/dockerfile:1

# The vendor (and loadgen) as static binaries on distroless, as a non-root
# user. Build: docker build -t leaf-nats/vendor .
# Run alone (embedded NATS): docker run -p 4222:4222 -p 9464:9464 leaf-nats/vendor

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
# The commit `vendor version` reports (the context has no .git):
# docker build --build-arg REVISION=$(git rev-parse HEAD) ...
ARG REVISION=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags="-s -w -X main.buildRevision=${REVISION}" -o /out/ \
      ./cmd/vendor ./cmd/loadgen

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot:nonroot
WORKDIR /home/nonroot
# Reachable from outside the container; with no LEAF_NATS_URL the embedded
# server keeps its JetStream data in the working directory.
ENV LEAF_HTTP_ADDR=0.0.0.0:9464 \
    LEAF_NATS_LISTEN=0.0.0.0:4222 \
    LEAF_NATS_STORE_DIR=/home/nonroot/leaf-data
EXPOSE 4222 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/vendor", "healthcheck", "/readyz"]
# The vendor drains on SIGTERM: give it time (docker stop -t 30).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/vendor"]
