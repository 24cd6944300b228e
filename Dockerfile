# One image holding both binaries; docker-compose.yml picks the command
# (["labeling","serve"] or ["billing","serve"]).
#
# Build stage: the Go version matches go.mod's go line (deploy/compose_test.go
# checks it). A static, trimmed build, so the result depends on the sources only.
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false

# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/labeling ./cmd/billing

# Final stage: no shell, no package manager, a non-root user. The health checks
# run the binaries' own `healthcheck` subcommand, so no curl is needed.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/labeling /out/billing /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080 8081
CMD ["labeling", "serve"]
