#!/usr/bin/env bash
# Runs scripts/test.sh RUNS times in a row (default 3) while a CPU hog keeps
# the machine busy beside it: stress-ng with STRESS_CPU workers (default 4)
# spinning for the whole time, installed from the distribution's packages if
# it is missing. It checks that no test depends on how busy the machine is:
# every run must pass. Extra arguments go to scripts/test.sh. Prints each
# run's result and wall time at the end, and fails if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${RUNS:-3}"
if ! command -v stress-ng >/dev/null 2>&1; then
  printf '== installing stress-ng\n'
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null
  fi
fi
stress-ng --cpu "${STRESS_CPU:-4}" --timeout 0 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true' EXIT

results=()
failed=0
for i in $(seq 1 "$runs"); do
  printf '== run %d of %d beside stress-ng --cpu %s (load average %s)\n' "$i" "$runs" "${STRESS_CPU:-4}" "$(cut -d' ' -f1-3 /proc/loadavg)"
  t0=$SECONDS
  status=ok
  scripts/test.sh "$@" || { status=FAIL; failed=$((failed + 1)); }
  results+=("$(printf 'run %d: %-4s %dm%02ds' "$i" "$status" $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)))")
done
printf '== stress summary (%d CPUs, stress-ng --cpu %s beside)\n' "$(nproc)" "${STRESS_CPU:-4}"
printf '  %s\n' "${results[@]}"
[ "$failed" -eq 0 ]
