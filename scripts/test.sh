#!/usr/bin/env bash
# Runs every test sluice has, on a fresh machine too: starts PostgreSQL when it
# is down, installs the Node packages the client and browser tests use and
# Chromium (from the distribution's packages), then runs each stage: go vet,
# gofmt (every Go file formatted), go mod tidy -diff, staticcheck (fetched at
# a fixed version from the Go module proxy), the Go tests with the race
# detector, the allocation tests (Test…Allocations) again without it, and
# every fuzz target briefly (FUZZTIME, default 10s each;
# SLUICE_FUZZ=0 skips them). A stage that fails does not stop the others: the
# end prints one line per stage, the tests that failed, the 10 slowest tests
# and the wall time, and the script fails if any stage did. Extra arguments
# go to "go test" and run only go vet, gofmt and the tests (e.g.
# scripts/test.sh -run TestGovernor ./governor).
set -euo pipefail
began=$SECONDS
cd "$(dirname "$0")/.."

log() { printf '== %s\n' "$*"; }

# PostgreSQL: the store, engine and crash tests run on it as well as on SQLite.
if [ -z "${SLUICE_TEST_POSTGRES:-}" ]; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    if ! command -v pg_ctlcluster >/dev/null 2>&1; then
      log "installing PostgreSQL"
      if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      fi
    fi
    log "starting PostgreSQL"
    for v in $(ls /etc/postgresql); do
      pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
    done
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
  export SLUICE_TEST_POSTGRES="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
fi
psql "$SLUICE_TEST_POSTGRES" -qtAc 'select 1' >/dev/null || { echo "PostgreSQL at \$SLUICE_TEST_POSTGRES does not answer" >&2; exit 1; }

# Node packages for the tests that drive sluice with clients no one here wrote,
# and the browser test of the dashboard (playwright-core driving the
# distribution's Chromium: no browser download).
if command -v npm >/dev/null 2>&1; then
  # Every package of package.json (each at an exact version) installed at
  # that version, else a clean install from package-lock.json.
  stale="$(cd clients/node && node -e '
    const fs = require("fs");
    const deps = require("./package.json").dependencies;
    const have = (p) => { try { return JSON.parse(fs.readFileSync("node_modules/" + p + "/package.json", "utf8")).version; } catch { return null; } };
    console.log(Object.keys(deps).filter((p) => have(p) !== deps[p]).join(" "));')"
  if [ -n "$stale" ]; then
    log "installing Node packages (clients/node: $stale)"
    (cd clients/node && npm ci --no-audit --no-fund --loglevel=error)
  fi
  export SLUICE_TEST_NODE_MODULES="$PWD/clients/node/node_modules"
fi
if [ -z "${SLUICE_TEST_CHROMIUM:-}" ]; then
  if ! command -v chromium >/dev/null 2>&1; then
    log "installing Chromium"
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
  fi
  SLUICE_TEST_CHROMIUM="$(command -v chromium)"
  export SLUICE_TEST_CHROMIUM
fi

# Each stage runs to its end whatever the others did; the summary says which
# failed.
stages=()
failed=0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
stage() {
  local name="$1" t0=$SECONDS status=ok
  shift
  log "$name"
  if ! "$@"; then
    status=FAIL
    failed=$((failed + 1))
  fi
  stages+=("$(printf '%-4s  %-22s %5ds' "$status" "$name" $((SECONDS - t0)))")
}
gofmt_check() {
  local unformatted
  unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './clients/*'))"
  if [ -n "$unformatted" ]; then
    printf 'gofmt would change:\n%s\n' "$unformatted" >&2
    return 1
  fi
}
# The tests report through scripts/testreport: each package's result as it
# ends, the output of the tests that failed, and at the end the failures and
# the slowest tests (from go test -json).
go_test() {
  go build -o "$work/testreport" ./scripts/testreport || return 1
  go test -race -count=1 -timeout 30m -json "$@" 2>&1 | "$work/testreport" -slowest 10 -report "$work/tests"
}

stage "go vet" go vet ./...
stage "gofmt -l" gofmt_check
if [ "$#" -eq 0 ]; then
  stage "go mod tidy -diff" go mod tidy -diff
  stage "staticcheck" go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
fi
stage "go test -race" go_test "${@:-./...}"
if [ "$#" -eq 0 ]; then
  # Allocation counts are pinned in a build without the race detector,
  # whose instrumentation makes more values escape to the heap.
  stage "allocation tests without -race" go test -count=1 -run 'Allocations$' ./...
fi
if [ "$#" -eq 0 ] && [ "${SLUICE_FUZZ:-1}" != 0 ]; then
  stage "fuzz (scripts/fuzz.sh)" env FUZZTIME="${FUZZTIME:-10s}" scripts/fuzz.sh
fi

log "summary"
printf '  %s\n' "${stages[@]}"
if [ -s "$work/tests" ]; then
  sed 's/^/  /' "$work/tests"
fi
wall=$((SECONDS - began))
printf '  wall time %dm%02ds\n' $((wall / 60)) $((wall % 60))
if [ "$failed" -gt 0 ]; then
  printf '  %d of %d stages failed\n' "$failed" "${#stages[@]}"
  exit 1
fi
