#!/usr/bin/env bash
# Benchmarks leaf-nats on this machine in one run, each measurement side by
# side with a baseline measured in the same run, and prints a markdown table
# (bench/README.md explains it and holds the latest one).
#
#   bench/run.sh                    # ~5 minutes
#   BENCH_SECONDS=3 BENCH_ROUNDS=1 bench/run.sh   # a quick look
#   BENCH_ONLY=j bench/run.sh       # only row (j), strict vs normal tags
#   BENCH_ONLY=k bench/run.sh       # only row (k), regions: a supercluster vs one region
#
# It starts everything itself on 127.0.0.1 (a nats-server with JetStream, a
# throwaway Postgres, vendors, the bare responder, the delay proxy) and stops
# it all on exit, also on failure or Ctrl-C. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

D="${BENCH_SECONDS:-5}"    # seconds per measured run
ROUNDS="${BENCH_ROUNDS:-3}" # alternations of each measurement and its baseline
C="${BENCH_C:-32}"          # loadgen concurrency for single-ID requests
BATCH_C="${BENCH_BATCH_C:-4}"
SEG_C="${BENCH_SEG_C:-8}"
DELAY="${BENCH_DELAY:-50ms}"

log() { printf 'bench: %s\n' "$*" >&2; }

WORK="$(mktemp -d /tmp/leaf-bench.XXXXXX)"
chmod 755 "$WORK"
BIN="$WORK/bin"
PIDS=()
# shellcheck source=scripts/postgres.sh
. scripts/postgres.sh
cleanup() {
	local rc=$? pid
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	pg_stop "$WORK"
	if [ "$rc" != 0 ]; then
		log "failed (exit $rc); logs:"
		tail -n 5 "$WORK"/*.log >&2 2>/dev/null || true
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT INT TERM

# start NAME CMD...: runs CMD in the background with its output in
# $WORK/NAME.log; the pid is in $LAST and stopped on exit.
start() {
	local name=$1
	shift
	"$@" >"$WORK/$name.log" 2>&1 &
	LAST=$!
	PIDS+=("$LAST")
}

# stop PID...: SIGTERM and wait (the vendor drains and frees its worker ID).
stop() {
	local pid
	for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

free_port() { echo $((20000 + RANDOM % 20000)); }

# wait_for WHAT CMD...: retries CMD for up to 30 s.
wait_for() {
	local what=$1 i
	shift
	for i in $(seq 300); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	log "$what not ready after 30s"
	return 1
}

# jget KEY FILE: a number from a JSON report (one key per line).
jget() { sed -n "s/^ *\"$1\": *\([-0-9.e+]*\).*/\1/p" "$2" | head -n 1; }
# median of the arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
fmt0() { awk -v x="$1" 'BEGIN {s = sprintf("%.0f", x); while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s); print s}'; }
fmt2() { awk -v x="$1" 'BEGIN {printf "%.2f", x}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", (b > 0) ? a / b : 0}'; }
rounds() { for x in "$@"; do printf '%s ' "$(fmt0 "$x")"; done; }
ok() { awk -v a="$1" -v b="$2" 'BEGIN {print (a >= b) ? "yes" : "**no**"}'; }

# ---- build -------------------------------------------------------------
log "building"
go build -o "$BIN/" ./cmd/vendor ./cmd/loadgen ./bench/cmd/...

# ---- Postgres (as scripts/test.sh) -------------------------------------
PG_BINDIR="${LEAF_TEST_PG_BINDIR:-$(pg_bindir)}"
[ -n "$PG_BINDIR" ] || { log "PostgreSQL not found (scripts/test.sh installs it)"; exit 1; }
pg_unprivileged
pg_start "$WORK" -c max_connections=200
PG="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"

# ---- NATS ----------------------------------------------------------------
NATS_PORT=$(free_port)
NATS="nats://127.0.0.1:$NATS_PORT"
start natsd "$BIN/natsd" -listen "127.0.0.1:$NATS_PORT" -store "$WORK/js"
wait_for "nats-server" bash -c "exec 3<>/dev/tcp/127.0.0.1/$NATS_PORT"
log "nats-server on $NATS_PORT, PostgreSQL on $PG_PORT; $D s runs, $ROUNDS rounds"

# vendors N [PG_URL]: starts N vendors (one queue group) and waits until
# each is ready; their pids are in $VENDORS.
VN=0
vendors() {
	local n=$1 pg=${2:-$PG} i port ports=()
	VENDORS=()
	for i in $(seq "$n"); do
		VN=$((VN + 1))
		port=$(free_port)
		start "vendor$VN" env LEAF_NATS_URL="$NATS" LEAF_POSTGRES_URL="$pg" \
			LEAF_NATS_STORE_DIR="$WORK/v$VN" LEAF_HTTP_ADDR="127.0.0.1:$port" LEAF_LOG_LEVEL=warn "$BIN/vendor"
		VENDORS+=("$LAST")
		ports+=("$port")
		VPORT=$port
	done
	for port in "${ports[@]}"; do
		wait_for "vendor" curl -fsS "http://127.0.0.1:$port/readyz"
	done
	wait_for "vendors" "$BIN/loadgen" -url "$NATS" -n "$((n * 20))" -c "$n" -retries 5 -timeout 500ms
}

bare() {
	start bare "$BIN/bare" -url "$NATS"
	BARE=$LAST
	wait_for "bare responder" grep -q ready "$WORK/bare.log"
}

loadgen() { "$BIN/loadgen" -url "$NATS" -json "$@"; }

ROWS=()
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 | $6 |"); }

if [ -z "${BENCH_ONLY:-}" ]; then # every row but (j) and (f)
# ---- (e) generators in process -------------------------------------------
log "(e) generator benchmarks"
go test -run '^$' -bench Compare -benchtime 1s -count 1 ./snowflake/ >"$WORK/e.txt"
ebench() { awk -v n="Benchmark$1-" 'index($1, n) == 1 {for (i = 2; i <= NF; i++) if ($(i+1) == "ns/op") ns = $i; else if ($(i+1) == "ids/s") r = $i; else if ($(i+1) == "allocs/op") a = $i} END {print ns, r, a}' "$WORK/e.txt"; }

# ---- (a) single-ID requests: vendor vs bare ------------------------------
VR=() VP=() BR=() BP=()
for r in $(seq "$ROUNDS"); do
	log "(a) round $r: vendor"
	vendors 1
	loadgen -mode snowflake -c "$C" -d "${D}s" >"$WORK/a-v$r.json" 2>/dev/null
	stop "${VENDORS[@]}"
	VR+=("$(jget req_per_sec "$WORK/a-v$r.json")") VP+=("$(jget p999_us "$WORK/a-v$r.json")")
	log "(a) round $r: bare"
	bare
	loadgen -mode snowflake -c "$C" -d "${D}s" >"$WORK/a-b$r.json" 2>/dev/null
	stop "$BARE"
	BR+=("$(jget req_per_sec "$WORK/a-b$r.json")") BP+=("$(jget p999_us "$WORK/a-b$r.json")")
done
A_V=$(median "${VR[@]}") A_B=$(median "${BR[@]}")
A_VP=$(median "${VP[@]}") A_BP=$(median "${BP[@]}")
A_RATIO=$(ratio "$A_V" "$A_B")
row "(a) single-ID req/s, c=$C (median of $ROUNDS)" "$(fmt0 "$A_V") (rounds: $(for x in "${VR[@]}"; do printf '%s ' "$(fmt0 "$x")"; done))" \
	"bare responder $(fmt0 "$A_B") (rounds: $(for x in "${BR[@]}"; do printf '%s ' "$(fmt0 "$x")"; done))" "$A_RATIO" ">= 0.9" "$(ok "$A_RATIO" 0.9)"
row "(a) single-ID p99.9 µs" "$(fmt0 "$A_VP")" "bare $(fmt0 "$A_BP")" "$(ratio "$A_VP" "$A_BP")" "-" "-"

# ---- (b), (c) batch snowflake, 1, 2 and 4 vendors -------------------------
declare -A CV
for r in $(seq "$ROUNDS"); do
	for n in 1 2 4; do
		log "(c) round $r: $n vendor(s), batch 10000"
		vendors "$n"
		loadgen -mode snowflake -batch 10000 -c "$BATCH_C" -d "${D}s" >"$WORK/c-$n-$r.json" 2>/dev/null
		stop "${VENDORS[@]}"
		CV[$n]="${CV[$n]:-} $(jget ids_per_sec "$WORK/c-$n-$r.json")"
	done
done
# shellcheck disable=SC2086
C1=$(median ${CV[1]}) C2=$(median ${CV[2]}) C4=$(median ${CV[4]})
B_RATIO=$(ratio "$C1" 4096000)
row "(b) batch snowflake IDs/s, 1 vendor, -batch 10000 -c $BATCH_C" "$(fmt0 "$C1")" "one worker ID's limit 4,096,000" "$B_RATIO" ">= 0.9" "$(ok "$B_RATIO" 0.9)"
row "(c) batch snowflake IDs/s, 2 vendors" "$(fmt0 "$C2")" "1 vendor $(fmt0 "$C1")" "$(ratio "$C2" "$C1")" "-" "-"
row "(c) batch snowflake IDs/s, 4 vendors" "$(fmt0 "$C4")" "1 vendor $(fmt0 "$C1")" "$(ratio "$C4" "$C1")" "-" "-"

# ---- (d) segment IDs through the prefetch client vs nextval() ------------
log "(d) segment: prefetch client (Next, Block) vs nextval()"
LEAF_POSTGRES_URL="$PG" LEAF_HTTP_ADDR="" "$BIN/vendor" tags add bench -step 100000 >/dev/null
vendors 1
DN1=() DN8=() DB1=() DB8=() DPG=() UNORD=0
idrate() { "$BIN/idrate" -url "$NATS" -tag bench -d "${D}s" "$@"; }
for r in $(seq "$ROUNDS"); do
	idrate -mode next -c 1 >"$WORK/d-n1-$r.json"
	idrate -mode next -c 8 >"$WORK/d-n8-$r.json"
	idrate -mode block -c 1 >"$WORK/d-b1-$r.json"
	idrate -mode block -c 8 >"$WORK/d-b8-$r.json"
	"$BIN/idrate" -mode nextval -pg "$PG" -c 8 -d "${D}s" >"$WORK/d-pg-$r.json"
	DN1+=("$(jget ids_per_sec "$WORK/d-n1-$r.json")") DN8+=("$(jget ids_per_sec "$WORK/d-n8-$r.json")")
	DB1+=("$(jget ids_per_sec "$WORK/d-b1-$r.json")") DB8+=("$(jget ids_per_sec "$WORK/d-b8-$r.json")")
	DPG+=("$(jget ids_per_sec "$WORK/d-pg-$r.json")")
	UNORD=$((UNORD + $(jget unordered "$WORK/d-n1-$r.json")))
done
loadgen -mode segment -tag bench -prefetch 10000 -c "$SEG_C" -d "${D}s" >"$WORK/d-l.json" 2>/dev/null
D_N1=$(median "${DN1[@]}") D_N8=$(median "${DN8[@]}") D_B1=$(median "${DB1[@]}") D_B8=$(median "${DB8[@]}") D_PG=$(median "${DPG[@]}")
COSID=127000000
row "(d) segment IDs/s in one process, 1 goroutine, Next (median of $ROUNDS)" "$(fmt0 "$D_N1") (rounds: $(rounds "${DN1[@]}")); IDs out of order: $UNORD" \
	"CosId SegmentChainId $(fmt0 $COSID), theirs, published (JMH, 1 thread)" "$(ratio "$D_N1" $COSID)" ">= 150,000,000" "$(ok "$D_N1" 150000000)"
row "(d) same, 8 goroutines, Next (one shared atomic)" "$(fmt0 "$D_N8") (rounds: $(rounds "${DN8[@]}"))" "1 goroutine $(fmt0 "$D_N1")" "$(ratio "$D_N8" "$D_N1")" "-" "-"
row "(d) same, 1 goroutine, Block(4096)" "$(fmt0 "$D_B1") (rounds: $(rounds "${DB1[@]}"))" "Next $(fmt0 "$D_N1")" "$(ratio "$D_B1" "$D_N1")" "-" "-"
D_SCALE=$(ratio "$D_B8" "$D_B1")
row "(d) same, 8 goroutines, Block(4096) each" "$(fmt0 "$D_B8") (rounds: $(rounds "${DB8[@]}"))" "1 goroutine $(fmt0 "$D_B1")" "$D_SCALE" ">= 1.5" "$(ok "$D_SCALE" 1.5)"
D_RATIO=$(ratio "$D_B8" "$D_PG")
row "(d) same vs Postgres nextval(), 8 connections" "$(fmt0 "$D_B8")" "nextval() $(fmt0 "$D_PG")" "$(fmt0 "$D_RATIO")x" ">= 100x" "$(ok "$D_RATIO" 100)"
row "(d) same through loadgen -prefetch 10000 -c $SEG_C (times every call, keeps every ID)" "$(fmt0 "$(jget ids_per_sec "$WORK/d-l.json")")" "-" "-" "-" "-"

# ---- (g) one vendor to one remote consumer: ranges vs binary replies ------
log "(g) remote consumer: binary vs ranges replies"
GB=() GR=() GS=()
for r in $(seq "$ROUNDS"); do
	idrate -mode binary -batch 10000 -c 8 >"$WORK/g-b$r.json"
	idrate -mode ranges -batch 10000 -c 8 >"$WORK/g-s$r.json"
	idrate -mode ranges -batch 10000000 -c 8 >"$WORK/g-r$r.json"
	GB+=("$(jget ids_per_sec "$WORK/g-b$r.json")") GS+=("$(jget ids_per_sec "$WORK/g-s$r.json")") GR+=("$(jget ids_per_sec "$WORK/g-r$r.json")")
done
G_B=$(median "${GB[@]}") G_S=$(median "${GS[@]}") G_R=$(median "${GR[@]}")
G_RATIO=$(ratio "$G_R" "$G_B")
row "(g) segment IDs/s to one remote consumer, binary replies, -batch 10000 (LEAF_MAX_BATCH) -c 8" "$(fmt0 "$G_B") (rounds: $(rounds "${GB[@]}"))" "-" "-" "-" "-"
row "(g) same, ranges replies, -batch 10000" "$(fmt0 "$G_S") (rounds: $(rounds "${GS[@]}"))" "binary $(fmt0 "$G_B")" "$(ratio "$G_S" "$G_B")" "-" "-"
row "(g) same, ranges replies, -batch 10000000 (a store call per request)" "$(fmt0 "$G_R") (rounds: $(rounds "${GR[@]}"))" "binary $(fmt0 "$G_B")" "$(fmt0 "$G_RATIO")x" ">= 100x" "$(ok "$G_RATIO" 100)"

# ---- (h) what a NATS user would try without leaf-nats ---------------------
log "(h) NATS-native baselines"
for m in counter kvcas leafkv; do
	"$BIN/natsbase" -mode "$m" -url "$NATS" -c 3 -step 1 -d "${D}s" >"$WORK/h-$m.json"
done
"$BIN/natsbase" -mode counter -url "$NATS" -c 3 -step 10000000 -d "${D}s" >"$WORK/h-counter-n.json"
"$BIN/natsbase" -mode counter -url "$NATS" -c "$C" -step 1 -d "${D}s" >"$WORK/h-counter-c.json"
loadgen -mode segment -tag bench -c 3 -d "${D}s" >"$WORK/h-leaf.json" 2>/dev/null
loadgen -mode segment -tag bench -c "$C" -d "${D}s" >"$WORK/h-leaf-c.json" 2>/dev/null
stop "${VENDORS[@]}"
H_C=$(jget ids_per_sec "$WORK/h-counter.json")
hrow() { # hrow NAME FILE
	row "(h) $1" "$(fmt0 "$(jget ids_per_sec "$2")") IDs/s, p50 $(fmt0 "$(jget p50_us "$2")") / p99 $(fmt0 "$(jget p99_us "$2")") µs${3:-}" \
		"JetStream counter $(fmt0 "$H_C") IDs/s" "$(ratio "$(jget ids_per_sec "$2")" "$H_C")" "-" "-"
}
hrow "JetStream counter stream, Nats-Incr: +1, 3 clients" "$WORK/h-counter.json"
hrow "KV compare-and-set increment, 3 clients" "$WORK/h-kvcas.json" ", $(fmt0 "$(jget retries "$WORK/h-kvcas.json")") retries"
hrow "leaf-nats KV segment store alone (Alloc, step 1: compare-and-set, retried inside), 3 clients" "$WORK/h-leafkv.json"
row "(h) leaf-nats vendor, single-ID segment requests, loadgen -c 3" "$(fmt0 "$(jget ids_per_sec "$WORK/h-leaf.json")") IDs/s, p50 $(fmt0 "$(jget p50_us "$WORK/h-leaf.json")") / p99 $(fmt0 "$(jget p99_us "$WORK/h-leaf.json")") µs" \
	"JetStream counter $(fmt0 "$H_C") IDs/s" "$(ratio "$(jget ids_per_sec "$WORK/h-leaf.json")" "$H_C")" "-" "-"
H_CC=$(jget ids_per_sec "$WORK/h-counter-c.json")
row "(h) JetStream counter, Nats-Incr: +1, $C clients" "$(fmt0 "$H_CC") IDs/s, p50 $(fmt0 "$(jget p50_us "$WORK/h-counter-c.json")") / p99 $(fmt0 "$(jget p99_us "$WORK/h-counter-c.json")") µs" "-" "-" "-" "-"
row "(h) leaf-nats vendor, single-ID segment requests, loadgen -c $C" "$(fmt0 "$(jget ids_per_sec "$WORK/h-leaf-c.json")") IDs/s, p50 $(fmt0 "$(jget p50_us "$WORK/h-leaf-c.json")") / p99 $(fmt0 "$(jget p99_us "$WORK/h-leaf-c.json")") µs" \
	"JetStream counter, $C clients $(fmt0 "$H_CC") IDs/s" "$(ratio "$(jget ids_per_sec "$WORK/h-leaf-c.json")" "$H_CC")" "-" "-"
row "(h) JetStream counter, Nats-Incr: +10000000 (a batch per call), 3 clients" "$(fmt0 "$(jget ids_per_sec "$WORK/h-counter-n.json")") IDs/s" \
	"leaf-nats ranges -batch 10000000 $(fmt0 "$G_R")" "$(ratio "$(jget ids_per_sec "$WORK/h-counter-n.json")" "$G_R")" "-" "-"

# ---- (i) Go benchmarks: allocations per ID ---------------------------------
log "(i) Go benchmarks"
go test -run '^$' -bench 'ClientPrefetch' -benchtime 1s -count 1 -cpu 1,8 ./vending/ >"$WORK/i.txt"
go test -run '^$' -bench 'TryTakeRanges' -benchtime 1s -count 1 ./segment/ >>"$WORK/i.txt"
while read -r name ns ids allocs; do
	row "(i) \`$name\`" "$ns ns/op, $(fmt0 "$ids") IDs/s, $allocs allocs/op" "-" "-" "0 allocs" "$(ok 0 "$allocs")"
done < <(awk '$1 ~ /^Benchmark/ {ns = r = a = ""; for (i = 2; i <= NF; i++) if ($(i+1) == "ns/op") ns = $i; else if ($(i+1) == "ids/s") r = $i; else if ($(i+1) == "allocs/op") a = $i; print $1, ns, (r == "" ? 0 : r), a}' "$WORK/i.txt")

# ---- (e) rows ---------------------------------------------------------------
for b in LeafNext LeafNextN1000 Bwmarrin Sonyflake Sonyflake1ms; do
	read -r ns ids allocs <<<"$(ebench "Compare$b")"
	row "(e) in-process generator: $b" "$ns ns/op, $(fmt0 "$ids") IDs/s, $allocs allocs/op" "leaf Next $(fmt0 "$(ebench CompareLeafNext | cut -d' ' -f2)") IDs/s" \
		"$(ratio "$ids" "$(ebench CompareLeafNext | cut -d' ' -f2)")" "-" "-"
done

fi

if [ -z "${BENCH_ONLY:-}" ] || [ "$BENCH_ONLY" = j ]; then
# ---- (j) a strict tag vs a normal tag, single-ID requests -----------------
# One leader serves a strict tag; with 3 vendors it leans towards the tag
# (takes about 17 in 19 of its requests itself) and the other two hand it
# the rest over NATS (it answers the clients). Paired per round: normal then strict on the same
# vendors.
LEAF_NATS_URL="$NATS" LEAF_POSTGRES_URL="$PG" LEAF_HTTP_ADDR="" "$BIN/vendor" tags add jnormal -step 1000 >/dev/null
LEAF_NATS_URL="$NATS" LEAF_POSTGRES_URL="$PG" LEAF_HTTP_ADDR="" "$BIN/vendor" tags add jstrict -step 1000 -strict >/dev/null
for n in 1 3; do
	JN=() JS=() JR=()
	for r in $(seq "$ROUNDS"); do
		log "(j) round $r: $n vendor(s), normal and strict"
		vendors "$n"
		loadgen -mode segment -tag jnormal -c "$C" -d "${D}s" >"$WORK/j-n$n-$r.json" 2>/dev/null
		loadgen -mode segment -tag jstrict -c "$C" -d "${D}s" >"$WORK/j-s$n-$r.json" 2>/dev/null
		stop "${VENDORS[@]}"
		JN+=("$(jget req_per_sec "$WORK/j-n$n-$r.json")") JS+=("$(jget req_per_sec "$WORK/j-s$n-$r.json")")
		JR+=("$(ratio "${JS[-1]}" "${JN[-1]}")")
	done
	J_R=$(median "${JR[@]}")
	row "(j) strict tag single-ID req/s, c=$C, $n vendor(s) (median of $ROUNDS)" "$(fmt0 "$(median "${JS[@]}")") (rounds: $(rounds "${JS[@]}"))" \
		"normal tag, same vendors $(fmt0 "$(median "${JN[@]}")") (rounds: $(rounds "${JN[@]}"))" "$J_R (rounds: ${JR[*]})" ">= 0.9" "$(ok "$J_R" 0.9)"
done
fi

if [ -z "${BENCH_ONLY:-}" ] || [ "$BENCH_ONLY" = k ]; then
# ---- (k) regions: in-region requests on a supercluster vs one region ------
# Regions east and west, each a nats-server (a cluster of one) joined by
# gateways, a vendor in each, the clients in east; next to them one region
# alone on a server of its own with one vendor. KV segment stores, tag
# kbench in each. The vendors run throughout; the loads alternate.
kvendor() { # kvendor URL [VAR=VALUE...]: starts a vendor; its /readyz port is added to KPORTS
	local url=$1 port
	shift
	VN=$((VN + 1)) port=$(free_port)
	start "vendor$VN" env LEAF_NATS_URL="$url" LEAF_NATS_STORE_DIR="$WORK/v$VN" LEAF_HTTP_ADDR="127.0.0.1:$port" LEAF_LOG_LEVEL=warn "$@" "$BIN/vendor"
	KPIDS+=("$LAST") KPORTS+=("$port")
}
KPORTS=()
KPIDS=()
K_ONE=$(free_port) K_EAST=$(free_port) K_WEST=$(free_port) K_EGW=$(free_port) K_WGW=$(free_port)
start k-one "$BIN/natsd" -listen "127.0.0.1:$K_ONE" -store "$WORK/k-one"
KPIDS+=("$LAST")
start k-east "$BIN/natsd" -listen "127.0.0.1:$K_EAST" -store "$WORK/k-east" -region east -cluster "127.0.0.1:$(free_port)" \
	-gateway "127.0.0.1:$K_EGW" -gateways "west=127.0.0.1:$K_WGW"
KPIDS+=("$LAST")
start k-west "$BIN/natsd" -listen "127.0.0.1:$K_WEST" -store "$WORK/k-west" -region west -cluster "127.0.0.1:$(free_port)" \
	-gateway "127.0.0.1:$K_WGW" -gateways "east=127.0.0.1:$K_EGW"
KPIDS+=("$LAST")
for p in "$K_ONE" "$K_EAST" "$K_WEST"; do wait_for "nats-server" bash -c "exec 3<>/dev/tcp/127.0.0.1/$p"; done
ONE="nats://127.0.0.1:$K_ONE" EAST="nats://127.0.0.1:$K_EAST" WEST="nats://127.0.0.1:$K_WEST"
# A supercluster's JetStream answers once it has elected a meta leader.
wait_for "tag kbench in region east" env LEAF_NATS_URL="$EAST" LEAF_REGION=east LEAF_REGION_ID=0 LEAF_HTTP_ADDR="" "$BIN/vendor" tags add kbench -step 100000
wait_for "tag kbench in region west" env LEAF_NATS_URL="$WEST" LEAF_REGION=west LEAF_REGION_ID=1 LEAF_HTTP_ADDR="" "$BIN/vendor" tags add kbench -step 100000
LEAF_NATS_URL="$ONE" LEAF_HTTP_ADDR="" "$BIN/vendor" tags add kbench -step 100000 >/dev/null
log "(k) starting the vendors of one region, east and west"
kvendor "$ONE"
kvendor "$EAST" LEAF_REGION=east LEAF_REGION_ID=0
kvendor "$WEST" LEAF_REGION=west LEAF_REGION_ID=1
# A new bucket holds a first claim back a lease TTL (30s).
for p in "${KPORTS[@]}"; do
	for i in $(seq 90); do curl -fsS "http://127.0.0.1:$p/readyz" >/dev/null 2>&1 && break; sleep 1; done
	curl -fsS "http://127.0.0.1:$p/readyz" >/dev/null || { log "(k) a vendor is not ready after 90s"; exit 1; }
done
for url in "$ONE" "$EAST"; do # warm-up, not measured
	"$BIN/loadgen" -url "$url" -json -mode segment -tag kbench -c "$C" -d 2s >/dev/null 2>&1
	"$BIN/loadgen" -url "$url" -json -mode snowflake -c "$C" -d 2s >/dev/null 2>&1
done
declare -A KR KQ
for r in $(seq "$ROUNDS"); do
	for mode in snowflake segment; do
		for where in one east; do
			log "(k) round $r: $mode, $where"
			url=$ONE
			[ "$where" = east ] && url=$EAST
			tag=()
			[ "$mode" = segment ] && tag=(-tag kbench)
			"$BIN/loadgen" -url "$url" -json -mode "$mode" "${tag[@]}" -c "$C" -d "${D}s" >"$WORK/k-$mode-$where-$r.json" 2>"$WORK/k-$mode-$where-$r.err"
			KR[$mode-$where]="${KR[$mode-$where]:-} $(jget req_per_sec "$WORK/k-$mode-$where-$r.json")"
		done
		KQ[$mode]="${KQ[$mode]:-} $(ratio "$(jget req_per_sec "$WORK/k-$mode-east-$r.json")" "$(jget req_per_sec "$WORK/k-$mode-one-$r.json")")"
	done
done
stop "${KPIDS[@]}"
for mode in snowflake segment; do
	read -ra ke <<<"${KR[$mode-east]}"
	read -ra ko <<<"${KR[$mode-one]}"
	read -ra kq <<<"${KQ[$mode]}"
	K_R=$(median "${kq[@]}")
	row "(k) $mode single-ID req/s, c=$C, in region east of a supercluster (east, west; a vendor each) (median of $ROUNDS)" \
		"$(fmt0 "$(median "${ke[@]}")") (rounds: $(rounds "${ke[@]}"))" "one region alone, one vendor $(fmt0 "$(median "${ko[@]}")") (rounds: $(rounds "${ko[@]}"))" \
		"$K_R (rounds: ${kq[*]})" ">= 0.95" "$(ok "$K_R" 0.95)"
done
fi

FD=$((2 * D))
if [ -z "${BENCH_ONLY:-}" ]; then
# ---- (f) latency at half of saturation while segments switch -------------
RATE=$(awk -v x="$A_V" 'BEGIN {printf "%d", x / 2}')
PROXY_PORT=$(free_port)
start delayproxy "$BIN/delayproxy" -listen "127.0.0.1:$PROXY_PORT" -target "127.0.0.1:$PG_PORT" -delay "$DELAY"
PROXY=$LAST
SLOW_PG="postgres://postgres@127.0.0.1:$PROXY_PORT/postgres?sslmode=disable"
wait_for "delay proxy" bash -c "exec 3<>/dev/tcp/127.0.0.1/$PROXY_PORT"
F_MAX_STEP=20000
seg_metric() { curl -fsS "http://127.0.0.1:$VPORT/metrics" | awk -v m="$1{" -v t="tag=\"$2\"" 'index($0, m) == 1 && index($0, t) {print $2}'; }
for tag in lat lat0; do
	pg=$PG
	[ "$tag" = lat ] && pg=$SLOW_PG
	LEAF_POSTGRES_URL="$pg" LEAF_HTTP_ADDR="" "$BIN/vendor" tags add "$tag" -step 1000 >/dev/null
done
# Tail latency on 2 shared cores is noisy: each kind runs once per round,
# alternating, and the table gives the median p99.99 of the rounds.
declare -A FP
F_NOTE=""
for r in $(seq "$ROUNDS"); do
	log "(f) round $r: bare responder at $RATE req/s"
	bare
	loadgen -mode snowflake -rate "$RATE" -c 64 -d "${FD}s" >"$WORK/f-bare-$r.json" 2>/dev/null
	stop "$BARE"
	for which in slow direct; do
		pg=$PG tag=lat0
		[ "$which" = slow ] && pg=$SLOW_PG tag=lat
		log "(f) round $r: segment at $RATE req/s, store $which, step 1000, max step $F_MAX_STEP"
		# A max step of well under a second of IDs keeps segments switching
		# all through the measured run.
		LEAF_SEGMENT_MAX_STEP=$F_MAX_STEP vendors 1 "$pg"
		# Warm up at the same rate: the first segments use the row's step and
		# stall on the slow store until the dynamic step has seen the rate.
		loadgen -mode segment -tag "$tag" -rate "$RATE" -c 64 -d "${D}s" >/dev/null 2>&1
		before=$(seg_metric leaf_segment_loads_total "$tag")
		loadgen -mode segment -tag "$tag" -rate "$RATE" -c 64 -d "${FD}s" >"$WORK/f-$which-$r.json" 2>/dev/null
		loads=$(($(seg_metric leaf_segment_loads_total "$tag" | cut -d. -f1) - ${before%.*}))
		if [ "$which" = slow ]; then
			F_NOTE="round $r: $loads segment loads in the run, step $(fmt0 "$(seg_metric leaf_segment_step "$tag")") (capped by LEAF_SEGMENT_MAX_STEP), last load $(awk -v x="$(seg_metric leaf_segment_last_load_seconds "$tag")" 'BEGIN {printf "%.0f", x * 1000}') ms"
		fi
		stop "${VENDORS[@]}"
	done
	log "(f) round $r: snowflake vendor at $RATE req/s"
	vendors 1
	loadgen -mode snowflake -rate "$RATE" -c 64 -d "${FD}s" >"$WORK/f-sf-$r.json" 2>/dev/null
	stop "${VENDORS[@]}"
	for k in bare slow direct sf; do FP[$k]="${FP[$k]:-} $(jget p9999_us "$WORK/f-$k-$r.json")"; done
done
stop "$PROXY"
# shellcheck disable=SC2086
F_BARE=$(median ${FP[bare]})
lat_row() { # lat_row KIND NAME NOTE: KIND's p99.99 against the bare responder's of the same round, the median of the rounds' ratios
	local k=$1 last="$WORK/f-$1-$ROUNDS.json" p r rs=() i
	# shellcheck disable=SC2086
	p=$(median ${FP[$k]})
	read -ra kp <<<"${FP[$k]}"
	read -ra bp <<<"${FP[bare]}"
	for i in "${!kp[@]}"; do rs+=("$(ratio "${kp[$i]}" "${bp[$i]}")"); done
	r=$(median "${rs[@]}")
	row "(f) $2" "p99.99 $(fmt0 "$p") µs (rounds:$(for x in ${FP[$k]}; do printf ' %s' "$(fmt0 "$x")"; done)); last round p50 $(fmt0 "$(jget p50_us "$last")") / p99 $(fmt0 "$(jget p99_us "$last")") / p99.9 $(fmt0 "$(jget p999_us "$last")") / max $(fmt0 "$(jget max_us "$last")") µs" \
		"bare responder p99.99 $(fmt0 "$F_BARE") µs${3:+; $3}" "$r (rounds: ${rs[*]})" "${4:-p99.99 <= 1.2x bare}" "$( [ -n "${4:-}" ] && echo - || ok 1.2 "$r")"
}
lat_row bare "baseline: bare responder, open loop $(fmt0 "$RATE") req/s" "" "-"
lat_row slow "segment, same rate, store +$DELAY per round trip" "$F_NOTE"
lat_row direct "segment, same rate, store direct (no delay)"
lat_row sf "snowflake vendor, same rate"

fi

# ---- table ----------------------------------------------------------------
echo
echo "Machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(go version | cut -d' ' -f3-), $(date -u +%Y-%m-%d)"
echo "Runs: ${D}s each (${FD}s for (f)), $ROUNDS rounds for (a)-(d), (f) and (g), medians; everything on 127.0.0.1 on this machine."
echo
echo "| measurement | leaf-nats | baseline (same run) | ratio | target | met |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
