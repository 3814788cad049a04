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
ran=0
for pkg in $(go list "${@:-./...}"); do
  targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
  for t in $targets; do
    printf '== fuzz %s %s (%s)\n' "$pkg" "$t" "$fuzztime"
    ran=$((ran + 1))
    if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg"; then
      failed+=("$pkg $t")
    fi
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
printf '== %d fuzz targets ran %s each without a failure\n' "$ran" "$fuzztime"
