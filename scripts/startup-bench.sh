#!/usr/bin/env bash
# Measures how soon a restarted "sluice serve" listens and is ready.
#
#   scripts/startup-bench.sh SLUICE_BINARY DATABASE BUSY_PROCESSES PORT
#
# Starts serve on DATABASE (an SQLite path, emptied first, or a postgres://
# URL of an empty database) with an unreachable provider, sends 500 events
# (their runs stay unfinished, retrying), SIGKILLs serve, starts
# BUSY_PROCESSES shell loops that each keep a core busy, restarts serve and
# prints the seconds until GET /healthz answers and until GET /readyz
# answers 200 (for a serve without /readyz: until GET /v1/runs answers).
set -u
bin=$1 db=$2 load=$3 port=$4
base=http://127.0.0.1:$port
case "$db" in
postgres://* | postgresql://*) ;;
*) rm -f "$db" "$db"-* "$db".* ;;
esac
serve() { "$bin" serve --db "$db" --addr 127.0.0.1:"$port" --provider-url http://127.0.0.1:1/v1 >/dev/null 2>&1 & }
now() { date +%s.%N; }

serve
pid=$!
for _ in $(seq 200); do curl -sf "$base/v1/runs" >/dev/null && break; sleep 0.1; done
for i in $(seq 500); do
  curl -sf -H 'Content-Type: application/json' -d "{\"name\":\"doc/uploaded\",\"data\":{\"documentId\":\"d$i\"}}" "$base/v1/events" >/dev/null
done
sleep 2
kill -9 "$pid"
wait "$pid" 2>/dev/null

hogs=()
for _ in $(seq "$load"); do (while :; do :; done) & hogs+=($!); done
sleep 1
t0=$(now)
serve
pid=$!
listen="" ready=""
for _ in $(seq 6000); do
  if [ -z "$listen" ] && curl -s -o /dev/null "$base/healthz"; then listen=$(echo "$(now) - $t0" | bc); fi
  code=$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")
  if [ "$code" = 200 ] || { [ "$code" = 404 ] && curl -sf -o /dev/null "$base/v1/runs"; }; then
    ready=$(echo "$(now) - $t0" | bc)
    break
  fi
  sleep 0.05
done
runs=$(curl -s "$base/v1/runs?limit=1000" | grep -c '"id"')
kill "${hogs[@]}" 2>/dev/null
kill -9 "$pid" 2>/dev/null
wait 2>/dev/null
echo "busy=$load listen=${listen:-never}s ready=${ready:-never}s runs=$runs"
