#!/usr/bin/env bash
# Runs every fuzz target in the module (each func FuzzXxx: the parsers of
# untrusted input — gateway requests and headers, the SSE reader, the event
# API, limits, flows, client keys, scenarios, the simulator's handler) for
# FUZZTIME each (default 30s). scripts/test.sh runs it with FUZZTIME=10s.
# Extra arguments narrow the packages (e.g. scripts/fuzz.sh ./llm).
# A failing input is saved under the package's testdata/fuzz/ and then
# replayed by every plain "go test" run.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${FUZZTIME:-30s}"
failed=()
raced=()
ran=0
for pkg in $(go list "${@:-./...}"); do
  targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
  for t in $targets; do
    printf '== fuzz %s %s (%s)\n' "$pkg" "$t" "$fuzztime"
    ran=$((ran + 1))
    out="$(mktemp)"
    if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$out"; then
      # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as
      # a failure when a worker is mid-input as the time ends (golang/go
      # issue 75804, fixed in Go 1.27): a bare "context deadline exceeded"
      # with no failing input written. Any other failure, and any failing
      # input, fails the run.
      if ! grep -q 'Failing input written to' "$out" &&
        [ "$(grep -c '^    ' "$out")" = 1 ] && grep -qx '    context deadline exceeded' "$out"; then
        printf '== %s %s: the fuzz coordinator reported its own deadline, no failing input (Go issue 75804)\n' "$pkg" "$t"
        raced+=("$pkg $t")
      else
        failed+=("$pkg $t")
      fi
    fi
    rm -f "$out"
  done
done
if [ "$ran" -eq 0 ]; then
  echo "no fuzz targets found" >&2
  exit 1
fi
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'fuzz target failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
printf '== %d fuzz targets ran %s each without a failure' "$ran" "$fuzztime"
if [ "${#raced[@]}" -gt 0 ]; then
  printf ' (%d ended on the coordinator deadline race: %s)' "${#raced[@]}" "${raced[*]}"
fi
printf '\n'
