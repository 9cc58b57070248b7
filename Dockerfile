# syntax=docker/dockerfile:1
# The warren image: one static binary (server, worker, migrate, and the
# client commands) on a distroless base with CA certificates, run as a
# non-root user.
#
#   docker build -t warren .
#   docker run --rm warren help
#   docker run --rm -p 8080:8080 \
#     -e WARREN_AMQP_URL=amqp://warren:PASS@rabbitmq:5672/ \
#     -e WARREN_DATABASE_URL='postgres://warren:PASS@postgres:5432/warren?sslmode=disable' \
#     -e WARREN_API_TOKENS=TOKEN:read+write+admin \
#     warren server
#
# deploy/compose/compose.yaml runs a whole installation from it, and
# docs/operations.md ("Deployment") says what was and was not run.

# --- build: a static binary (modernc.org/sqlite is pure Go: no cgo) ---------
FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-mod=readonly
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags='-s -w' -o /out/warren ./cmd/warren
# The SQLite store's directory, owned by the runtime user (distroless has
# no shell to make it there).
RUN mkdir -p /out/data && chown 65532:65532 /out/data

# --- run: distroless static (CA certificates, tzdata, /etc/passwd with
# "nonroot"), no shell, no package manager -----------------------------------
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/warren /usr/local/bin/warren
COPY --from=build --chown=65532:65532 /out/data /var/lib/warren
WORKDIR /var/lib/warren
USER 65532:65532
# The API inside a container must listen beyond loopback, which warren
# allows only with API tokens (WARREN_API_TOKENS): set them when you run it.
ENV WARREN_LISTEN=0.0.0.0:8080 \
    WARREN_DATABASE_URL=sqlite:///var/lib/warren/warren.db
EXPOSE 8080
VOLUME ["/var/lib/warren"]
# No HEALTHCHECK: the image has no shell and no HTTP client to run one.
# Probe over HTTP from outside instead: GET /healthz (the process is up)
# and GET /readyz (the store answers) on the API port for a server; for a
# worker, run it with --health-listen 0.0.0.0:9090 (/healthz, and /readyz:
# connected to the broker) or --metrics-listen (/metrics and /healthz).
# Kubernetes: httpGet liveness and readiness probes on those paths.
ENTRYPOINT ["/usr/local/bin/warren"]
CMD ["help"]
