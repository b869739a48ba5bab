# syntax=docker/dockerfile:1
#
# The crosscheck image: one static binary, run as `crosscheck serve`,
# `crosscheck api` or `crosscheck worker` (the first argument is the command).
#
#   docker build -t crosscheck:local --build-arg VERSION=1.0.0 .
#   docker run --rm -p 8080:8080 -p 127.0.0.1:8081:8081 -v crosscheck-data:/data \
#     -e CROSSCHECK_ADMIN_ADDR=0.0.0.0:8081 crosscheck:local serve
#
# deploy/compose and deploy/kubernetes run it beside a 3-node NATS cluster.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a change to the sources does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=${VERSION}" -o /crosscheck ./cmd/crosscheck

# Alpine rather than distroless: its busybox wget is what the compose health
# checks call (Kubernetes probes need nothing in the image). Alpine's base
# already holds the CA bundle that the model vendors' HTTPS needs.
FROM alpine:3.22
RUN addgroup -S -g 10001 crosscheck \
 && adduser -S -D -H -u 10001 -G crosscheck -h /data crosscheck \
 && mkdir -p /data \
 && chown crosscheck:crosscheck /data \
 && chmod 0700 /data
COPY --from=build /crosscheck /crosscheck
# /data holds what `crosscheck serve` keeps on disk: its embedded JetStream and
# the generated admin token. Mount a volume there for serve. `api` and `worker`
# keep nothing on disk (their state is in NATS JetStream), so the image
# declares no VOLUME, which would give each of their containers an unused one.
# The public API must listen beyond the container's loopback to be reachable.
# The admin API stays on the container's loopback unless CROSSCHECK_ADMIN_ADDR
# is set: publish it only where the operators are (see docs/operations.md).
# A container's standard output goes to its logs: the first start of serve
# prints no API key there (it prints how to create one with the admin API).
ENV CROSSCHECK_DATA_DIR=/data \
    CROSSCHECK_HTTP_ADDR=0.0.0.0:8080 \
    CROSSCHECK_PRINT_FIRST_KEY=false
EXPOSE 8080 8081
USER 10001:10001
ENTRYPOINT ["/crosscheck"]
CMD ["serve"]
