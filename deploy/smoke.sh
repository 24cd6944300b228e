#!/usr/bin/env bash
# Smoke test of the README's Quick start: bring the pair up with Docker Compose,
# run the Quick start's steps (the token, then docs/walkthrough.sh with it, which
# checks each answer), then wipe everything. Needs Docker with Compose v2 and jq
# (GitHub's ubuntu runners have both). deploy/ci_test.go checks that every step
# of the README's Quick start appears here verbatim.
#
# Every compose call runs under the project outboxpair-smoke, not the compose
# file's own name: the closing `down -v` then removes this run's containers and
# volumes only, never those of a `docker compose up` the user runs beside it
# (deploy/ci_test.go checks every call). The ports are the same, so with the
# user's pair up this run fails to start rather than touch it.
set -euo pipefail
cd "$(dirname "$0")/.."

cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then docker compose -p outboxpair-smoke logs --no-color --tail 50 labeling billing oauth >&2 || true; fi
  docker compose -p outboxpair-smoke down -v
  exit "$status"
}
trap cleanup EXIT

docker compose -p outboxpair-smoke up -d --build --wait

fail() { echo "smoke: $*" >&2; exit 1; }
# The issuer has no health check (docker-compose.yml says why), so --wait saw it
# started, not listening: wait until it answers before asking it for a token.
issuer=0
for _ in $(seq 1 60); do
  if curl -fs -o /dev/null http://localhost:8090/isalive; then issuer=1; break; fi
  sleep 0.5
done
[ "$issuer" = 1 ] || fail "the token issuer never answered on localhost:8090"

# The README's Quick start, verbatim (deploy/ci_test.go checks it): the
# development issuer's token for org-a, then the walk-through with it, which
# checks every answer itself (and 401 without the token, 404 under org-b).
TOKEN=$(curl -sS -X POST http://localhost:8090/outboxpair/token \
  -d grant_type=client_credentials -d client_id=demo -d client_secret=demo -d scope=org-a \
  | jq -r .access_token)
AUTH="Authorization: Bearer $TOKEN" ORG=0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8e \
  OTHER_ORG=0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8f bash docs/walkthrough.sh

echo "smoke: ok"
