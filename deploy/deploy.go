// Package deploy holds what runs the pair outside Go: the PostgreSQL init script
// that docker-compose.yml mounts, and the test that checks docker-compose.yml and
// the Dockerfile against the code (variable names, required settings, the shared
// token, service addresses, health checks, the Go version and the binaries), so a
// rename on one side fails the build instead of the first `docker compose up`.
// Its tests also keep the repository's documents true to the code: CONTRACT.md
// (variables and defaults, failpoints, tables, every "contract section N"), the
// README's and docs/' figures, commands and links, the CI workflow, and the rule that runtime packages never
// import internal/testsupport. The Prometheus alerting rules (deploy/prometheus)
// and the Grafana dashboard (deploy/grafana) are held to the metrics both
// services export, read from the running processes, and to the runbook in
// docs/operations.md.
package deploy
