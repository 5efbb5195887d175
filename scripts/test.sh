#!/usr/bin/env bash
# Runs the whole test suite with everything it needs, on a fresh Debian or
# Ubuntu machine: finds (or installs) PostgreSQL, starts a throwaway server
# for the run, runs vet and the race-enabled tests, and stops and removes the
# server afterwards, also on failure.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./segment/...   # go test arguments instead of ./...
#
# LEAF_TEST_POSTGRES_URL set: use that server and start none.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'test.sh: %s\n' "$*" >&2; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=""
apt_install() {
	if [ -z "$APT_UPDATED" ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# shellcheck source=scripts/postgres.sh
. scripts/postgres.sh

PG_BINDIR="${LEAF_TEST_PG_BINDIR:-$(pg_bindir)}"
if [ -z "$PG_BINDIR" ]; then
	log "PostgreSQL binaries not found; installing the postgresql package"
	apt_install postgresql
	# The package starts a cluster of its own on 5432; this run does not use it.
	PG_BINDIR="$(pg_bindir)"
	[ -n "$PG_BINDIR" ] || { log "PostgreSQL install failed: no initdb"; exit 1; }
fi
export LEAF_TEST_PG_BINDIR="$PG_BINDIR" # for tests that start servers of their own
# The status page is tested in a real browser.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
	log "chromium not found; installing it for the status page's browser test"
	apt_install chromium
fi

# The JavaScript example runs under Node with nats.js from npm.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	log "node or npm not found; installing them for the JavaScript example's test"
	apt_install nodejs npm
fi

# The alerting rules are checked and unit-tested, and /metrics linted, by
# promtool, which Debian ships in its prometheus package.
if ! command -v promtool >/dev/null; then
	log "promtool not found; installing the prometheus package for the rules' tests"
	apt_install prometheus
fi

# The systemd units of deploy/systemd are checked by systemd-analyze verify,
# which Debian ships in its systemd package (no running systemd needed).
if ! command -v systemd-analyze >/dev/null; then
	log "systemd-analyze not found; installing the systemd package to check deploy/systemd"
	apt_install systemd
fi

# compose.yaml is validated by Docker Compose itself (no engine needed).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
	log "docker compose not found; installing docker-compose to validate compose.yaml"
	apt_install docker-compose
fi

pg_unprivileged
export LEAF_TEST_PG_USER="$PG_USER"

WORK="$(mktemp -d /tmp/leaf-test.XXXXXX)"
chmod 755 "$WORK"
cleanup() {
	local rc=$?
	pg_stop "$WORK"
	rm -rf "$WORK"
	exit $rc
}
trap cleanup EXIT INT TERM

if [ -z "${LEAF_TEST_POSTGRES_URL:-}" ]; then
	pg_start "$WORK" -c max_connections=300
	export LEAF_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
	log "PostgreSQL $("$PG_BINDIR/postgres" --version | awk '{print $3}') on port $PG_PORT"
fi

go vet ./...
go vet -tags e2e ./cmd/vendor ./test/... # the fault tests' build of the vendor
unformatted="$(gofmt -l .)"
[ -z "$unformatted" ] || { log "gofmt needed: $unformatted"; exit 1; }
# The whole-process fault tests write one summary line per scenario here.
export LEAF_E2E_SUMMARY="$WORK/e2e-summary.txt"
# The seeded simulations run their fixed seeds and one fresh seed, drawn
# here for the whole run (below 2^48, to be typed), so that every run also
# tries schedules no run tried before; a failure prints its own replay.
export LEAF_SIM_FRESH_SEED="${LEAF_SIM_FRESH_SEED:-$(printf '%d' "0x$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')")}"
sim_seed() {
	log "simulations: the fixed seeds and the fresh seed $LEAF_SIM_FRESH_SEED; replay it with:"
	log "  LEAF_SIM_SEED=$LEAF_SIM_FRESH_SEED go test -count=1 -run 'TestSimLease\$' -v ./cluster/"
	log "  LEAF_SIM_SEED=$LEAF_SIM_FRESH_SEED go test -count=1 -run 'TestSimulation\$' -v ./segment/"
}
sim_seed
rc=0
# The fault tests (test/e2e) take about 10 minutes on a two-core machine,
# longer on a loaded one: their binary gets 40 before go test stops it.
go test -race -count=1 -timeout 40m "${@:-./...}" || rc=$?
sim_seed
[ "$rc" = 0 ] || exit "$rc"
if [ -s "$LEAF_E2E_SUMMARY" ]; then
	log "fault-tolerance scenarios:"
	cat "$LEAF_E2E_SUMMARY"
fi

# A short fuzz of each parser of client input, from its seed corpus in testdata/.
if [ $# -eq 0 ]; then
	go test -run '^$' -fuzz '^FuzzParseCount$' -fuzztime 10s ./vending/
	go test -run '^$' -fuzz '^FuzzDecodeText$' -fuzztime 10s ./vending/
	go test -run '^$' -fuzz '^FuzzDecodeRanges$' -fuzztime 10s ./vending/
	go test -run '^$' -fuzz '^FuzzValidateTag$' -fuzztime 10s ./segment/
fi
