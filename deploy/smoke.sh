#!/usr/bin/env bash
# Smoke test of the README's Quick start: bring the pair up with Docker Compose,
# walk the curl steps and check each answer, then wipe everything. Needs Docker
# with Compose v2 (GitHub's ubuntu runners have it). deploy/ci_test.go checks
# that every curl step of the README appears here verbatim.
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
# expect CODE OUTPUT: OUTPUT (from curl -w '\n%{http_code}\n') ends with status CODE.
expect() { [ "$(tail -n 1 <<<"$2")" = "$1" ] || fail "expected HTTP $1, got: $2"; }
# contains TEXT OUTPUT
contains() { grep -qF -- "$1" <<<"$2" || fail "expected $1 in: $2"; }
# quota N: Billing's count for the org reaches N (delivery is asynchronous).
quota() {
  local got
  for _ in $(seq 1 60); do
    got=$(curl -sS "localhost:8081/v1/orgs/$ORG/quota" -H "$AUTH")
    grep -qF "\"activeRules\":$1}" <<<"$got" && return 0
    sleep 0.5
  done
  fail "quota never reached $1: $got"
}

# The issuer has no health check (docker-compose.yml says why), so --wait saw it
# started, not listening: wait until it answers before asking it for a token.
issuer=0
for _ in $(seq 1 60); do
  if curl -fs -o /dev/null http://localhost:8090/isalive; then issuer=1; break; fi
  sleep 0.5
done
[ "$issuer" = 1 ] || fail "the token issuer never answered on localhost:8090"

# The README's token step: the development issuer's token for org-a.
TOKEN=$(curl -sS -X POST http://localhost:8090/outboxpair/token \
  -d grant_type=client_credentials -d client_id=demo -d client_secret=demo -d scope=org-a \
  | jq -r .access_token)
ORG=0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8e   # the org_ids of an org-a token
AUTH="Authorization: Bearer $TOKEN"
RULE=$(cat /proc/sys/kernel/random/uuid)

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules" -H "$AUTH" \
  -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Invoices","pattern":"(?i)invoice","label":"finance"}')
expect 201 "$out"; contains '"active":false' "$out"

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules/$RULE/activate" -H "$AUTH")
expect 200 "$out"; contains '"active":true' "$out"
out=$(curl -sS "localhost:8081/v1/orgs/$ORG/quota" -H "$AUTH")
contains '"orgId"' "$out"
quota 1

out=$(curl -sS -X POST "localhost:8080/v1/orgs/$ORG/rules/$RULE/deactivate" -H "$AUTH")
contains '"active":false' "$out"
out=$(curl -sS "localhost:8081/v1/orgs/$ORG/quota" -H "$AUTH")
contains '"orgId"' "$out"
quota 0

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules" -H "$AUTH" \
  -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Invoices","pattern":"(?i)invoice","label":"finance"}')
expect 200 "$out"

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules" -H "$AUTH" \
  -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Receipts","pattern":"receipt","label":"finance"}')
expect 409 "$out"; contains rule_id_conflict "$out"

out=$(curl -sS -w '\n%{http_code}\n' "localhost:8080/v1/orgs/$ORG/rules/$RULE")
expect 401 "$out"
out=$(curl -sS -w '\n%{http_code}\n' "localhost:8080/v1/orgs/0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8f/rules/$RULE" -H "$AUTH")
expect 404 "$out"

echo "smoke: ok"
