#!/usr/bin/env bash
# The NATS records table at scale (issue 32, findings 3-5), on PostgreSQL and
# the real billing binary: for each binary (BEFORE, AFTER), a fresh database
# migrated by it, filled with N records of about SIZE payload bytes whose
# signatures verify under EVENTS_TOKEN (bench/natsrecords); then billing serve
# and VIEWS sequential GETs of /console/nats (each's time; the median), then 4
# concurrent ones (their codes), billing's VmHWM; then `billing nats replay
# --all` under its 2-minute bound: its time, output and exit code, and, when
# it stopped and printed a resume command, that command run until done.
#   (cd bench && go build -o /tmp/natsrecords ./natsrecords)
#   BEFORE=/path/billing-at-0188ea0 AFTER=/path/billing bench/natsrecords.sh
set -euo pipefail
N=${N:-100000}; SIZE=${SIZE:-3000}; VIEWS=${VIEWS:-5}
PG=${PG:-postgres://postgres@127.0.0.1:5432}; FILL=${FILL:-/tmp/natsrecords}
BEFORE=${BEFORE:?billing binary at 0188ea0}; AFTER=${AFTER:?billing binary to compare}
export EVENTS_TOKEN=bench-token AUTH_DISABLED=true
D=$(mktemp -d)
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for v in before after; do
  bin=$BEFORE; [ $v = after ] && bin=$AFTER
  db=natsrec_$v; url="$PG/$db?sslmode=disable"
  psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  DATABASE_URL=$url $bin migrate > /dev/null 2>&1
  $FILL -url "$url" -n "$N" -size "$SIZE" -token "$EVENTS_TOKEN" > /dev/null
  mb=$(psql -qtA "$url" -c "SELECT round(sum(length(payload))/1e6) FROM billing_nats_failed")
  echo "$v: $N records, $mb MB of payloads"
  DATABASE_URL=$url HTTP_ADDR=127.0.0.1:18191 $bin serve > $D/$v.log 2>&1 & pid=$!
  until curl -sf -o /dev/null http://127.0.0.1:18191/readyz; do sleep 0.2; done
  for _ in $(seq "$VIEWS"); do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' http://127.0.0.1:18191/console/nats
  done > $D/$v.views
  echo "$v: /console/nats sequential: codes $(cut -d' ' -f1 $D/$v.views | sort | uniq -c | xargs), median $(cut -d' ' -f2 $D/$v.views | median) s (all: $(cut -d' ' -f2 $D/$v.views | xargs))"
  (for _ in 1 2 3 4; do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' http://127.0.0.1:18191/console/nats &
  done; wait) > $D/$v.concurrent
  echo "$v: 4 concurrent views: $(xargs < $D/$v.concurrent); billing $(grep VmHWM /proc/$pid/status | xargs)"
  kill $pid; wait $pid 2>/dev/null || true
  start=$(date +%s.%N)
  set +e; DATABASE_URL=$url $bin nats replay --all > $D/$v.replay 2> $D/$v.replay.err; code=$?; set -e
  echo "$v: nats replay --all: exit $code after $(echo "$(date +%s.%N) - $start" | bc | xargs printf %.1f) s: $(xargs < $D/$v.replay); $(tail -c 300 $D/$v.replay.err)"
  while resume=$(grep -o 'billing nats replay --all --after [0-9]*' $D/$v.replay.err); do
    start=$(date +%s.%N)
    set +e; DATABASE_URL=$url $bin ${resume#billing } > $D/$v.replay 2> $D/$v.replay.err; code=$?; set -e
    echo "$v: $resume: exit $code after $(echo "$(date +%s.%N) - $start" | bc | xargs printf %.1f) s: $(xargs < $D/$v.replay)"
  done
  echo "$v: left in billing_nats_failed: $(psql -qtA "$url" -c "SELECT count(*) FROM billing_nats_failed"), quota sum $(psql -qtA "$url" -c "SELECT coalesce(sum(active_rules),0) FROM billing_quota")"
  psql -q "$PG/postgres" -c "DROP DATABASE $db"
done
