#!/usr/bin/env bash
# Smoke test of the README's Quick start: bring the pair up with Docker Compose,
# walk the curl steps and check each answer, then wipe everything. Needs Docker
# with Compose v2 (GitHub's ubuntu runners have it). deploy/smoke_test.go checks
# that every curl step of the README appears here verbatim.
set -euo pipefail
cd "$(dirname "$0")/.."

cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then docker compose logs --no-color --tail 50 labeling billing >&2 || true; fi
  docker compose down -v
  exit "$status"
}
trap cleanup EXIT

docker compose up -d --build --wait

fail() { echo "smoke: $*" >&2; exit 1; }
# expect CODE OUTPUT: OUTPUT (from curl -w '\n%{http_code}\n') ends with status CODE.
expect() { [ "$(tail -n 1 <<<"$2")" = "$1" ] || fail "expected HTTP $1, got: $2"; }
# contains TEXT OUTPUT
contains() { grep -qF -- "$1" <<<"$2" || fail "expected $1 in: $2"; }
# quota N: Billing's count for the org reaches N (delivery is asynchronous).
quota() {
  local got
  for _ in $(seq 1 60); do
    got=$(curl -sS "localhost:8081/v1/orgs/$ORG/quota")
    grep -qF "\"activeRules\":$1}" <<<"$got" && return 0
    sleep 0.5
  done
  fail "quota never reached $1: $got"
}

ORG=$(cat /proc/sys/kernel/random/uuid); RULE=$(cat /proc/sys/kernel/random/uuid)

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules" \
  -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Invoices","pattern":"(?i)invoice","label":"finance"}')
expect 201 "$out"; contains '"active":false' "$out"

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules/$RULE/activate")
expect 200 "$out"; contains '"active":true' "$out"
quota 1

out=$(curl -sS -X POST "localhost:8080/v1/orgs/$ORG/rules/$RULE/deactivate")
contains '"active":false' "$out"
quota 0

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules" \
  -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Invoices","pattern":"(?i)invoice","label":"finance"}')
expect 200 "$out"

out=$(curl -sS -w '\n%{http_code}\n' -X POST "localhost:8080/v1/orgs/$ORG/rules" \
  -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Receipts","pattern":"receipt","label":"finance"}')
expect 409 "$out"; contains rule_id_conflict "$out"

echo "smoke: ok"
