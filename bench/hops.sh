#!/bin/bash
# Provider-call drain (second hop) beside the first hop's, one sitting, PostgreSQL.
# Per round: fresh databases; phase A drains N RuleActivated rows labeling->billing
# (billing with PROVIDER_URL, as it appends QuotaChanged rows only with one,
# but a trigger of the benchmark's holds each row out of reach, available_at
# 10^11 ms ahead, so the rows wait unclaimed); phase B drops the trigger, makes
# the rows available at their created_at, restarts billing with the stand-in up,
# and its relay drains the N rows.
# Rate = (N-1) / (last - first effect), from the tables' own stamps.
# PREFIX names the databases (PREFIX_lab_R, PREFIX_bill_R) and PORT is the
# first of three loopback ports (labeling, billing, the stand-in), so that two
# sittings on one host do not share them. HOP2_ENV (e.g. "OUTBOX_WORKERS=80
# OUTBOX_CLAIM_SIZE=80") is set for billing's phase B only: its relay's settings.
# PG (default: the local server on 5432) is the server whose databases it uses.
set -u
N=${N:-5000}; ROUNDS=${ROUNDS:-3}; BIN=${BIN:?go build -o DIR ./cmd/labeling ./cmd/billing ./cmd/provider, then BIN=DIR}
PREFIX=${PREFIX:-hop}; PORT=${PORT:-18180}; LP=$PORT; BP=$((PORT+1)); PP=$((PORT+2))
PG=${PG:-postgres://postgres@127.0.0.1:5432}
SECRET=whsec_ZGV2LXByb3ZpZGVyLXNlY3JldC1jaGFuZ2UtbWUhISE=
export EVENTS_TOKEN=bench-token AUTH_DISABLED=true
waitq() { # db sql want
  for i in $(seq 1 1200); do v=$(psql -qtA "$PG/$1" -c "$2"); [ "$v" = "$3" ] && return 0; sleep 0.25; done; echo "timeout: $2 = $v" >&2; return 1; }
for r in $(seq 1 $ROUNDS); do
  L=${PREFIX}_lab_$r; B=${PREFIX}_bill_$r; D=$(mktemp -d)
  for db in $L $B; do psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"; done
  DATABASE_URL=$PG/$L $BIN/labeling migrate >/dev/null
  DATABASE_URL=$PG/$B HTTP_ADDR=127.0.0.1:$BP PROVIDER_URL=http://127.0.0.1:$PP/webhook PROVIDER_SECRET=$SECRET $BIN/billing serve > $D/b1.log 2>&1 & bp=$!
  psql -q "$PG/$L" -c "INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at)
    SELECT gen_random_uuid(), 'RuleActivated', jsonb_build_object('orgId', gen_random_uuid(), 'ruleId', gen_random_uuid()),
      (extract(epoch from now())*1000)::bigint, (extract(epoch from now())*1000)::bigint FROM generate_series(1, $N)"
  until curl -sf 127.0.0.1:$BP/readyz >/dev/null; do sleep 0.1; done
  psql -q "$PG/$B" -c "CREATE FUNCTION bench_hold() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN NEW.available_at := NEW.available_at + 100000000000; RETURN NEW; END'" \
    -c "CREATE TRIGGER bench_hold BEFORE INSERT ON billing_outbox_events FOR EACH ROW EXECUTE FUNCTION bench_hold()"
  DATABASE_URL=$PG/$L HTTP_ADDR=127.0.0.1:$LP BILLING_URL=http://127.0.0.1:$BP $BIN/labeling serve > $D/l.log 2>&1 & lp=$!
  waitq $B "SELECT count(*) FROM billing_outbox_events" $N
  hop1=$(psql -qtA "$PG/$B" -c "SELECT round(($N-1)*1000.0/greatest(max(created_at)-min(created_at),1)) FROM billing_receipts")
  kill -TERM $bp; wait $bp
  psql -q "$PG/$B" -c "DROP TRIGGER bench_hold ON billing_outbox_events" -c "DROP FUNCTION bench_hold()" \
    -c "UPDATE billing_outbox_events SET available_at = created_at WHERE processed_at IS NULL"
  PROVIDER_ADDR=127.0.0.1:$PP PROVIDER_SECRET=$SECRET PROVIDER_DB=$D/provider.db $BIN/provider serve > $D/p.log 2>&1 & pp=$!
  until curl -sf 127.0.0.1:$PP/healthz >/dev/null; do sleep 0.1; done
  env ${HOP2_ENV:-} DATABASE_URL=$PG/$B HTTP_ADDR=127.0.0.1:$BP PROVIDER_URL=http://127.0.0.1:$PP/webhook PROVIDER_SECRET=$SECRET $BIN/billing serve > $D/b2.log 2>&1 & bp=$!
  waitq $B "SELECT count(*) FROM billing_outbox_events WHERE processed_at IS NOT NULL" $N
  hop2=$(psql -qtA "$PG/$B" -c "SELECT round(($N-1)*1000.0/greatest(max(processed_at)-min(processed_at),1)) FROM billing_outbox_events")
  applied=$(curl -s 127.0.0.1:$PP/applied | head -c 80)
  echo "round $r: first hop (labeling->billing) $hop1 events/s; second hop (billing->provider) $hop2 calls/s; provider: $applied"
  kill -TERM $bp $lp $pp; wait $bp $lp $pp 2>/dev/null
  rm -rf $D
  for db in $L $B; do psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $db"; done
done
