# Shell functions that find PostgreSQL and run a throwaway server, for
# scripts/test.sh and bench/run.sh. Source it, then:
#
#   PG_BINDIR=$(pg_bindir)     # the directory of initdb, or empty
#   pg_unprivileged            # as root: PG_USER=postgres (initdb refuses root)
#   pg_start DIR [OPTION...]   # initdb DIR/pg, start it on a free port; sets PG_PORT
#   pg_stop DIR                # stop it (also fine when it never started)

pg_bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		[ -x "$d/initdb" ] && { echo "$d"; return; }
	done
	command -v initdb >/dev/null && dirname "$(command -v initdb)"
	command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ] && pg_config --bindir
	return 0
}

PG_USER=""
pg_unprivileged() {
	if [ "$(id -u)" = 0 ]; then
		PG_USER=postgres
		id -u "$PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_USER"
	fi
}

# run_pg runs a Postgres command as PG_USER when set.
run_pg() {
	if [ -n "$PG_USER" ]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}

pg_start() {
	local dir=$1 _
	shift
	mkdir -p "$dir/pg" "$dir/sock"
	[ -n "$PG_USER" ] && chown "$PG_USER" "$dir/pg" "$dir/sock"
	run_pg "$PG_BINDIR/initdb" -D "$dir/pg" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; return 1; }
	for _ in 1 2 3 4 5; do # a random port may be taken: try another
		PG_PORT=$((20000 + RANDOM % 20000))
		run_pg "$PG_BINDIR/pg_ctl" -D "$dir/pg" -w -t 30 -l "$dir/pg/server.log" \
			-o "-p $PG_PORT -k $dir/sock -c listen_addresses=127.0.0.1 -c fsync=off $*" start >/dev/null && return 0
	done
	echo "could not start PostgreSQL:" >&2
	cat "$dir/pg/server.log" >&2
	return 1
}

pg_stop() {
	if [ -f "$1/pg/postmaster.pid" ]; then
		run_pg "$PG_BINDIR/pg_ctl" -D "$1/pg" -m immediate stop >/dev/null 2>&1 || true
	fi
}
