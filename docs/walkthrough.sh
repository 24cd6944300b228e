#!/usr/bin/env bash
# The walk-through: one rule through its life, on a pair a recipe started
# (authentication off: the README, docs/sqlite-postgres.md, docs/nats.md) or,
# given a token, on the pair Compose starts. Each step checks its answer and
# stops the script when it is wrong, because deploy's tests run this very file
# against the real binaries (TestWalkthrough, TestRecipes). Needs only bash,
# curl and sleep (TestWalkthrough runs it with nothing else on PATH).
#
# Arguments: the log files of the services, named should they never answer.
set -euo pipefail
LABELING=${LABELING:-http://127.0.0.1:${LABELING_PORT:-8080}}
BILLING=${BILLING:-http://127.0.0.1:${BILLING_PORT:-8081}}
# The stand-in provider billing calls with each quota change (PROVIDER_URL).
PROVIDER=${PROVIDER:-http://127.0.0.1:${PROVIDER_PORT:-8082}}
# With authentication on (the Docker Quick start): AUTH is the Authorization
# header of a token for ORG, and OTHER_ORG an org the token does not cover.
AUTH=${AUTH:-}
auth=()
[[ -z $AUTH ]] || auth=(-H "$AUTH")

# Fresh ids on every run (any UUIDs do; ORG is the token's org when AUTH is
# set), so the walk-through can run again on the same data: a second create
# under the same id would be a replay.
uuid() { printf '%04x%04x-%04x-4%03x-%04x-%04x%04x%04x\n' $RANDOM $RANDOM $RANDOM \
  $((RANDOM & 0xfff)) $((RANDOM & 0x3fff | 0x8000)) $RANDOM $RANDOM $RANDOM; }
ORG=${ORG:-$(uuid)} RULE=$(uuid)

# check CODE TEXT CURL_ARGS...: one request; print its body, stop unless the
# status is CODE and the body holds TEXT.
check() {
  local code=$1 text=$2 out
  shift 2
  out=$(curl -sS -w '\n%{http_code}' ${auth[@]+"${auth[@]}"} "$@")
  echo "${out%$'\n'*}"
  [[ ${out##*$'\n'} == "$code" && $out == *"$text"* ]] || { echo "walkthrough: expected $code with $text" >&2; exit 1; }
}

# quota N: billing counts N active rules for the org. Delivery is asynchronous
# (normally within a moment), so ask again for up to 30s.
quota() {
  local got= i
  for ((i = 0; i < 150; i++)); do
    got=$(curl -sS ${auth[@]+"${auth[@]}"} "$BILLING/v1/orgs/$ORG/quota") && [[ $got == *'"activeRules":'"$1}"* ]] && { echo "$got"; return; }
    sleep 0.2
  done
  echo "walkthrough: quota never reached $1: $got" >&2; exit 1
}

# applied N: the provider applied a change of the org to N active rules (its
# byOrg); billing's relay calls it asynchronously, so ask again for up to 30s.
applied() {
  local got= i
  for ((i = 0; i < 150; i++)); do
    got=$(curl -sS "$PROVIDER/applied") && [[ $got == *"\"$ORG\":$1"[,}]* ]] && { echo "$got"; return; }
    sleep 0.2
  done
  echo "walkthrough: the provider never applied $1 for the org: $got" >&2; exit 1
}

# compiling: a Go compiler or linker runs on this machine (go build, go run,
# go test compile through these). Linux only: elsewhere it never says so.
compiling() {
  local f c
  for f in /proc/[0-9]*/comm; do
    { read -r c <"$f"; } 2>/dev/null || continue
    [[ $c == compile || $c == link ]] && return 0
  done
  return 1
}

# await URL LOG...: wait until URL answers 2xx. A fresh clone compiles first,
# minutes on a small machine: while a build runs the wait says so and goes on;
# it gives up after READY_WAIT seconds without one (300; four times that in
# all), naming URL and the logs.
await() {
  local url=$1 said= wait=${READY_WAIT:-300} deadline logs
  deadline=$((SECONDS + wait))
  shift
  until curl -sf --max-time 5 -o /dev/null "$url"; do
    if compiling; then
      deadline=$((SECONDS + wait))
      [[ $said == compiling ]] || echo "walkthrough: still compiling (a Go build runs on this machine); waiting for $url" >&2
      said=compiling
    elif [[ -z $said ]]; then
      echo "walkthrough: waiting for $url" >&2
      said=waiting
    fi
    if ((SECONDS >= deadline || SECONDS >= 4 * wait)); then
      logs="the services' logs"
      (($#)) && printf -v logs '%s, ' "$@" && logs=${logs%, }
      echo "walkthrough: gave up: $url did not answer; see $logs" >&2
      exit 1
    fi
    sleep 0.5
  done
}
await "$LABELING/readyz" "$@"
await "$BILLING/readyz" "$@"
await "$PROVIDER/healthz" "$@"

# Create a rule under the id we chose: 201 with the rule, inactive.
check 201 '"active":false' -X POST "$LABELING/v1/orgs/$ORG/rules" -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Invoices","pattern":"(?i)invoice","label":"finance"}'
# Activate it: 200, active. RuleActivated is appended in the same transaction.
check 200 '"active":true' -X POST "$LABELING/v1/orgs/$ORG/rules/$RULE/activate"
# The relay delivers it to billing: the org's quota counts 1 active rule.
quota 1
# Billing appended QuotaChanged in that transaction, and its own relay calls
# the provider, signed: the provider's applied count shows the org at 1.
applied 1
# Activating again changes nothing and appends nothing: the count stays 1.
check 200 '"active":true' -X POST "$LABELING/v1/orgs/$ORG/rules/$RULE/activate"
# Deactivate it (RuleDeactivated), and the count goes back to 0.
check 200 '"active":false' -X POST "$LABELING/v1/orgs/$ORG/rules/$RULE/deactivate"
quota 0
# Retry the create exactly as before: a replay, 200 with the stored rule; nothing is created.
check 200 "\"id\":\"$RULE\"" -X POST "$LABELING/v1/orgs/$ORG/rules" -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Invoices","pattern":"(?i)invoice","label":"finance"}'
# The same id with another body is a conflict: 409 rule_id_conflict.
check 409 rule_id_conflict -X POST "$LABELING/v1/orgs/$ORG/rules" -H 'Content-Type: application/json' \
  -d '{"id":"'"$RULE"'","name":"Receipts","pattern":"receipt","label":"finance"}'
if [[ -n $AUTH ]]; then
  # Without the token: 401. Under an org the token does not cover: 404, as for
  # a rule that does not exist, so the answer tells nothing of what it holds.
  auth=()
  check 401 unauthorized "$LABELING/v1/orgs/$ORG/rules/$RULE"
  auth=(-H "$AUTH")
  check 404 not_found "$LABELING/v1/orgs/${OTHER_ORG:?OTHER_ORG names an org the token does not cover}/rules/$RULE"
fi
echo "walkthrough: ok"
