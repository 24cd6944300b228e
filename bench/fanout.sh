#!/bin/bash
# First hop (labeling -> billing over HTTP) drain with one subscriber, two
# builds in one sitting, rounds interleaved: BEFORE (a build of main before
# fan-out) and AFTER (this branch), both with today's setup (no SUBSCRIBERS).
# Per round and build: fresh databases on PostgreSQL; N RuleActivated rows
# inserted into outbox_events with billing up; labeling started; the rate is
# (N-1) / (last - first receipt's created_at), billing's own stamps.
set -u
N=${N:-3000}; ROUNDS=${ROUNDS:-3}
BEFORE=${BEFORE:?go build -o DIR ./cmd/labeling ./cmd/billing at the commit before, then BEFORE=DIR}
AFTER=${AFTER:?the same at this commit, then AFTER=DIR}
PG=postgres://postgres@127.0.0.1:5432
export EVENTS_TOKEN=bench-token AUTH_DISABLED=true
waitq() { # db sql want
  for i in $(seq 1 1200); do v=$(psql -qtA "$PG/$1" -c "$2"); [ "$v" = "$3" ] && return 0; sleep 0.1; done; echo "timeout: $2 = $v" >&2; return 1; }
for r in $(seq 1 $ROUNDS); do
  for build in before after; do
    BIN=$BEFORE; [ $build = after ] && BIN=$AFTER
    L=fan_lab_${r}_$build; B=fan_bill_${r}_$build; D=$(mktemp -d)
    for db in $L $B; do psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"; done
    DATABASE_URL=$PG/$L $BIN/labeling migrate >/dev/null
    DATABASE_URL=$PG/$B HTTP_ADDR=127.0.0.1:18281 $BIN/billing serve > $D/b.log 2>&1 & bp=$!
    psql -q "$PG/$L" -c "INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at)
      SELECT gen_random_uuid(), 'RuleActivated', jsonb_build_object('orgId', gen_random_uuid(), 'ruleId', gen_random_uuid()),
        (extract(epoch from now())*1000)::bigint, (extract(epoch from now())*1000)::bigint FROM generate_series(1, $N)"
    until curl -sf 127.0.0.1:18281/readyz >/dev/null; do sleep 0.1; done
    DATABASE_URL=$PG/$L HTTP_ADDR=127.0.0.1:18280 BILLING_URL=http://127.0.0.1:18281 $BIN/labeling serve > $D/l.log 2>&1 & lp=$!
    waitq $B "SELECT count(*) FROM billing_receipts" $N
    rate=$(psql -qtA "$PG/$B" -c "SELECT round(($N-1)*1000.0/greatest(max(created_at)-min(created_at),1)) FROM billing_receipts")
    echo "round $r $build: first hop $rate events/s (load $(cut -d' ' -f1 /proc/loadavg))"
    kill -TERM $bp $lp; wait $bp $lp 2>/dev/null
    for db in $L $B; do psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $db"; done
    rm -rf $D
  done
done
