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

pg_bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		[ -x "$d/initdb" ] && { echo "$d"; return; }
	done
	command -v initdb >/dev/null && dirname "$(command -v initdb)"
	command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ] && pg_config --bindir
	return 0
}

# run_pg runs a Postgres command as an unprivileged user: initdb and postgres
# refuse to run as root.
PG_USER=""
run_pg() {
	if [ -n "$PG_USER" ]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}

export LEAF_TEST_PG_BINDIR="${LEAF_TEST_PG_BINDIR:-$(pg_bindir)}"
if [ -z "$LEAF_TEST_PG_BINDIR" ]; then
	log "PostgreSQL binaries not found; installing the postgresql package"
	apt_install postgresql
	# The package starts a cluster of its own on 5432; this run does not use it.
	LEAF_TEST_PG_BINDIR="$(pg_bindir)"
	[ -n "$LEAF_TEST_PG_BINDIR" ] || { log "PostgreSQL install failed: no initdb"; exit 1; }
fi
# The status page is tested in a real browser.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
	log "chromium not found; installing it for the status page's browser test"
	apt_install chromium
fi

# compose.yaml is validated by Docker Compose itself (no engine needed).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
	log "docker compose not found; installing docker-compose to validate compose.yaml"
	apt_install docker-compose
fi

if [ "$(id -u)" = 0 ]; then
	PG_USER=postgres
	id -u "$PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_USER"
	export LEAF_TEST_PG_USER="$PG_USER" # for tests that start servers of their own
fi

WORK="$(mktemp -d /tmp/leaf-test.XXXXXX)"
chmod 755 "$WORK"
cleanup() {
	local rc=$?
	if [ -f "$WORK/pg/postmaster.pid" ]; then
		run_pg "$LEAF_TEST_PG_BINDIR/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
	fi
	rm -rf "$WORK"
	exit $rc
}
trap cleanup EXIT INT TERM

if [ -z "${LEAF_TEST_POSTGRES_URL:-}" ]; then
	mkdir -p "$WORK/pg" "$WORK/sock"
	[ -n "$PG_USER" ] && chown "$PG_USER" "$WORK/pg" "$WORK/sock"
	run_pg "$LEAF_TEST_PG_BINDIR/initdb" -D "$WORK/pg" -U postgres --auth=trust -E UTF8 >"$WORK/initdb.log" 2>&1 ||
		{ cat "$WORK/initdb.log" >&2; exit 1; }
	started=""
	for _ in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 20000))
		if run_pg "$LEAF_TEST_PG_BINDIR/pg_ctl" -D "$WORK/pg" -w -t 30 -l "$WORK/pg/server.log" \
			-o "-p $port -k $WORK/sock -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off" start >/dev/null; then
			started=1
			break
		fi
	done
	[ -n "$started" ] || { log "could not start PostgreSQL"; cat "$WORK/pg/server.log" >&2; exit 1; }
	export LEAF_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	log "PostgreSQL $("$LEAF_TEST_PG_BINDIR/postgres" --version | awk '{print $3}') on port $port"
fi

go vet ./...
unformatted="$(gofmt -l .)"
[ -z "$unformatted" ] || { log "gofmt needed: $unformatted"; exit 1; }
# The whole-process fault tests write one summary line per scenario here.
export LEAF_E2E_SUMMARY="$WORK/e2e-summary.txt"
go test -race -count=1 -timeout 15m "${@:-./...}"
if [ -s "$LEAF_E2E_SUMMARY" ]; then
	log "fault-tolerance scenarios:"
	cat "$LEAF_E2E_SUMMARY"
fi

# A short fuzz of each parser of client input, from its seed corpus in testdata/.
if [ $# -eq 0 ]; then
	go test -run '^$' -fuzz '^FuzzParseCount$' -fuzztime 10s ./vending/
	go test -run '^$' -fuzz '^FuzzDecodeText$' -fuzztime 10s ./vending/
	go test -run '^$' -fuzz '^FuzzValidateTag$' -fuzztime 10s ./segment/
fi
