// Package deploy holds what runs the pair outside Go: the PostgreSQL init script
// that docker-compose.yml mounts, and the test that checks docker-compose.yml and
// the Dockerfile against the code (variable names, required settings, the shared
// token, service addresses, health checks, the Go version and the binaries), so a
// rename on one side fails the build instead of the first `docker compose up`.
package deploy
