# One image holding the binaries; docker-compose.yml picks the command
# (["labeling","serve"], ["billing","serve"], or ["provider","serve"] for the
# stand-in provider).
#
# Build stage: the Go version matches go.mod's go line (deploy/compose_test.go
# checks it), pinned to a patch release and a Debian release so a rebuild uses
# the same toolchain. A static, trimmed build, so the result depends on the
# sources only.
FROM golang:1.26.7-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false

# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/labeling ./cmd/billing ./cmd/provider
# The folder of the default SQLite files (DATABASE_URL unset: data/labeling.db,
# data/billing.db under the working directory), owned by the user that runs.
RUN mkdir -p /out/data

# Final stage: no shell, no package manager, a non-root user. The health checks
# run the binaries' own `healthcheck` subcommand, so no curl is needed.
# distroless publishes no version tags, only moving ones (nonroot), so the base is
# pinned by digest: gcr.io/distroless/static-debian12:nonroot as of 2026-08-26.
# To update: crane digest gcr.io/distroless/static-debian12:nonroot
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /out/labeling /out/billing /out/provider /usr/local/bin/
COPY --from=build --chown=nonroot:nonroot /out/data /var/lib/outboxpair/data
# Without DATABASE_URL the services run on SQLite files in data/ here; mount a
# volume on it to keep them (contract section 9).
WORKDIR /var/lib/outboxpair
VOLUME /var/lib/outboxpair/data
USER nonroot:nonroot
EXPOSE 8080 8081 8082
CMD ["labeling", "serve"]
