package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
)

// Stores that come back older (issue 21): a segment store or the NATS
// store put back, under running vendors, to a copy taken seconds before.
// Its rows and leases are then behind what was handed out. The vendors
// must find that out from what is kept elsewhere (docs/operations.md, "When
// a store comes back older"), hand out no ID twice, and say that the store
// went back. Each scenario checks first that the restored store really is
// behind the IDs handed out, so that it cannot pass without a rewind, and
// reports the repeats (also of an older build, LEAF_E2E_VENDOR_BIN) before
// it checks what the vendors said.

// rewindMaxStep keeps segments small (LEAF_SEGMENT_MAX_STEP; the tags start
// with a step of 1,000): under load each vendor allocates every few hundred
// milliseconds, so many segments are allocated and handed out between the
// copy and the restore.
const rewindMaxStep = "10000"

// rewindAge is how much older than the store it replaces the copy is put
// back: the load runs that long between the copy and the restore.
func rewindAge() time.Duration { return scaled(5 * time.Second) }

// rewindLoad is the load of these scenarios, with failed requests paced. A
// request in flight when a server stops is lost, and its client waits out
// the timeout: 1s keeps that short, and is still twice the longest a vendor
// makes a request wait (500ms for a segment).
var rewindLoad = loadSpec{batch: 100, clients: 2, timeout: time.Second, pace: 20 * time.Millisecond}

// storeRewind is a store put back to an older copy under load.
type storeRewind struct {
	bound  int64     // the copy's max_id of the tag is at most this
	handed int64     // the highest segment ID handed out before the restore
	began  time.Time // when the restore began
	up     time.Time // when the store was back, older
}

func (r storeRewind) String() string {
	return fmt.Sprintf("max_id of the copy <= %d, IDs handed out before the restore up to %d; the store back after %v",
		r.bound, r.handed, r.up.Sub(r.began).Round(10*time.Millisecond))
}

// rewindUnderLoad copies the store with snapshot, which returns the highest
// max_id of tag e2e the copy can hold; waits rewindAge, and until seg holds
// IDs above that max_id (without them the restore would take nothing back,
// and the scenario could not fail); checks that no vendor of vs said
// meanwhile that the store went back, as it did not; and puts the copy
// back with restore.
func rewindUnderLoad(t *testing.T, seg *tally, vs []*vendor, snapshot func() int64, restore func()) storeRewind {
	t.Helper()
	high := highestOf(seg)
	copied := time.Now()
	bound := snapshot()
	<-time.After(time.Until(copied.Add(rewindAge()))) // how much older the restored store is, not a synchronisation
	eventually(t, 30*time.Second, fmt.Sprintf("segment IDs handed out above the copy's max_id (%d)", bound), func() bool { return high() > bound })
	for _, r := range rewindsOf(vs) {
		t.Errorf("vendor %s said the segment store went back before it did (max_id %d there, IDs up to %d handed out, known from %s)", r.v.name, r.store, r.handed, r.from)
	}
	r := storeRewind{bound: bound, handed: high(), began: time.Now()}
	restore()
	r.up = time.Now()
	return r
}

// highestOf returns a function that gives the highest ID tl holds, reading
// only the IDs that came since its last call.
func highestOf(tl *tally) func() int64 {
	next, high := 0, int64(0)
	return func() int64 {
		tl.mu.Lock()
		fresh := tl.ids[next:]
		next = len(tl.ids)
		tl.mu.Unlock()
		for _, id := range fresh {
			high = max(high, id)
		}
		return high
	}
}

// TestRewindPostgresRestored: two vendors under segment load; Postgres is
// stopped for a moment, its data directory copied and the server started
// again; 5s later (many segments allocated and served meanwhile) the copy is
// put back. The row of the tag is then below IDs already handed out. The
// vendor whose allocation finds it must raise it above the marks kept in
// NATS, log it, count it in /metrics and note it in /readyz while ready; no
// ID may repeat.
//
// It runs alone, not in parallel: an allocation under way when the copy
// stops Postgres has recorded its mark and fails to commit, and the next
// allocation finds the store below that mark and says it went back before
// it did (failing the test); on a busier machine allocations take longer
// and are caught more often (it failed so in a run beside two others, and
// once alone while another program loaded the machine).
func TestRewindPostgresRestored(t *testing.T) {
	pg := pgtest.StartServer(t)
	nats := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_POSTGRES_URL": pg.DSN(), "LEAF_SEGMENT_MAX_STEP": rewindMaxStep}
	vendorCommand(t, env, "tags", "add", "e2e", "-step", "1000")
	vs := startVendors(t, "v", 2, env)
	seg := newTally("Postgres restored: segment")
	d := startLoad(t, nats.conn(t), seg, onSubject(rewindLoad, "leaf.segment.e2e"))
	seg.waitIDs(t, 50_000, 30*time.Second)

	var copyDir string
	rw := rewindUnderLoad(t, seg, vs, func() int64 {
		copyDir = pgSnapshot(t, pg)
		return pgMaxID(t, pg.DSN(), "e2e")
	}, func() { pgRestore(t, pg, copyDir) })
	times := timeTo(rw.began, 20*time.Second, append(readyEvents(vs),
		event{"segment reply", repliesAfter(seg)},
		event{"rewind logged", func() bool { return len(rewindsOf(vs)) > 0 }}))
	seg.waitOK(t, 200, 30*time.Second, "after the restore")
	d.stop()

	seg.check(t)
	report(t, "Postgres restored: %s; from the restore began: %s", rw, times)
	checkRewinds(t, vs, rw.bound)
}

// TestRewindNATSRestored: two vendors keep segments in the KV store (no
// Postgres) under snowflake and segment load. The NATS server is stopped,
// its store directory copied, and started again; 5s later the copy is put
// back, and a third vendor starts, which knows nothing of what was handed
// out. The segment row and the worker-ID leases are then older than what
// the vendors hold. The segment row must be raised above what the vendors
// answer on leaf.peers.mark, with the log line, metric and /readyz note;
// the vendors must give up leases that are not theirs in the store any
// more, saying that the store went back; no ID of either kind may repeat.
//
// The vendors wait for the marks of the holders of worker IDs that the
// store lists; with 30s leases (the default) the copy, 5s old, lists the
// two vendors. A copy older than a lease lists none, and a vendor started
// while the others reconnect allocates without their marks: the limit
// docs/operations.md states ("What cannot be repaired").
//
// It runs alone, not in parallel, as TestRewindPostgresRestored does and
// for the same reason: a segment's compare-and-set under way when the copy
// stops the server leaves a mark above the store, and a vendor reported the
// store gone back before the restore in one run beside two others.
func TestRewindNATSRestored(t *testing.T) {
	natsRestored(t, "NATS store restored:", 30*time.Second)
}

// TestRewindNATSRestoredPastTheLease: the same with 3s leases, so that the
// copy put back (5s old) is older than a lease TTL: every lease in it has
// expired, and a vendor that reads it before the others have reconnected
// finds every worker ID free and no holder to expect. Snowflake must not
// repeat (a claim hears every vendor for 1.5 s); segments can still repeat
// a segment (docs/guarantees.md#limits): this test measures how many, and
// fails if any snowflake ID repeats or the store is not raised.
//
// It runs alone, not in parallel: its check of snowflake rests on the
// vendors reconnecting within a claim's 1.5 s, and the segment repeats it
// measures (docs/guarantees.md#limits) grow on a busier machine (24,560 in
// a run beside two other scenarios, against 0 to 12,997 alone).
func TestRewindNATSRestoredPastTheLease(t *testing.T) {
	natsRestored(t, "NATS store restored, copy older than the 3s lease TTL:", 3*time.Second)
}

// rewindPastTTL: a restore with leases shorter than this puts back a copy
// older than every lease in it (the copy is about 5 s old).
const rewindPastTTL = 5 * time.Second

func natsRestored(t *testing.T, name string, ttl time.Duration) {
	ns := startRestartableNATS(t)
	nc := ns.conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Buckets with every worker ID's timestamp recorded: a claim does not
	// wait out the lease TTL of a new bucket.
	createLeaseBuckets(t, js, ttl, 1)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_SEGMENT_MAX_STEP": rewindMaxStep, "LEAF_WORKER_LEASE_TTL": ttl.String()}
	vendorCommand(t, env, "tags", "add", "e2e", "-step", "1000")
	vs := startVendors(t, "v", 2, env)
	sf, seg, stop := startMixedLoad(t, nc, name, rewindLoad)
	seg.waitIDs(t, 50_000, 30*time.Second)
	sf.waitIDs(t, 50_000, 30*time.Second)

	var copyDir string
	third := newVendor(t, "v3", env)
	rw := rewindUnderLoad(t, seg, vs, func() int64 {
		copyDir = ns.snapshot()
		return kvMaxID(t, nc, "e2e")
	}, func() {
		ns.restore(copyDir)
		third.start()
	})
	all := append(vs, third)
	times := timeTo(rw.began, 20*time.Second, append(readyEvents(all),
		event{"segment reply", repliesAfter(seg)},
		event{"snowflake reply", repliesAfter(sf)},
		event{"rewind logged", func() bool { return len(rewindsOf(all)) > 0 }}))
	// The third vendor allocates a segment of its own after the restore.
	addr := third.httpAddr()
	within(20*time.Second, func() bool { return metricAt(t, addr, `leaf_segment_loads_total{tag="e2e"}`) > 0 })
	seg.waitOK(t, 200, 30*time.Second, "after the restore")
	sf.waitOK(t, 200, 30*time.Second, "after the restore")
	stop()

	sf.check(t)
	if ttl < rewindPastTTL {
		total, dups := repeats(seg)
		report(t, "%s segment IDs repeated: %d of %d (a measured limit, not checked)", name, dups, total)
	} else {
		seg.check(t)
	}
	report(t, "%s %s; from the restore began: %s", name, rw, times)
	if n := metricAt(t, addr, `leaf_segment_loads_total{tag="e2e"}`); n == 0 {
		t.Errorf("the vendor started after the restore allocated no segment")
	}
	if ttl >= rewindPastTTL {
		checkRewinds(t, all, rw.bound)
	} else if len(rewindsOf(all)) == 0 {
		t.Errorf("no vendor logged that the segment store went back")
	}
	for _, v := range vs {
		checkLeaseLoss(t, v, -1)
	}
	checkNoOtherJetStream(t, all)
}

// TestRewindQuietClaim: a worker-ID claim falls among the writes a restored
// NATS store lost. On a quiet cluster with 60s leases (as in the issue: a
// holder believes for up to a TTL that it holds its ID), vendor X claims
// worker ID 5 after the store was copied and vends with it; the copy is put
// back while no request reaches X, and vendor Y starts and claims the same
// worker ID, free again in the store. No two vendors may vend with it at
// once: X must give it up, saying that the store went back (not that
// another JetStream is about), and both must vend again once a second
// worker ID is free. No ID may repeat.
//
// Worker IDs 5-7 are the cluster's; 6 and 7 are held by phantom leases
// written before the copy, so that every claim is of worker ID 5 until the
// test frees 7. The lease TTL is 15s. A holder gives an ID up at its next
// renewal, which a request brings forward or a third of the TTL brings at
// the latest; when the holder is reachable, Y gives its claim up recording
// its deadline over X's lost IDs, and the next claim of 5 waits that out
// (about a TTL), by when phantom 6 may have expired too.
func TestRewindQuietClaim(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	for _, tc := range []struct {
		name   string
		frozen bool
	}{
		// X has reconnected when Y claims: Y finds X holding worker ID 5
		// in the same bucket on leaf.peers, and waits until X gives it up.
		{"holder reachable", false},
		// X is stopped (SIGSTOP) from before the restore until Y vends:
		// Y cannot see it, and X must find at its next renewal that its
		// claim is not in the store, and another is.
		{"holder unreachable", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on a server of its own
			quietClaim(t, "quiet claim, "+tc.name, tc.frozen)
		})
	}
}

// quietCluster is the scenario's NATS server and the vendors' settings.
type quietCluster struct {
	ns     *restartableNATS
	nc     *nats.Conn
	leases jetstream.KeyValue
	env    map[string]string
	saved  string // the store as it was before X's claim
}

const quietTTL = 15 * time.Second

// startQuietCluster makes the worker-ID buckets with phantom holders of 6
// and 7, runs a vendor that records the cluster contract and releases its
// worker ID (5) on SIGTERM, and copies the store: a cluster that has run,
// with no claim in the copy.
func startQuietCluster(t *testing.T) *quietCluster {
	ns := startRestartableNATS(t)
	nc := ns.conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	leases := createLeaseBuckets(t, js, quietTTL, 1)
	for _, id := range []int{6, 7} {
		// Written once: they hold for a TTL, longer than the scenario.
		if _, err := leases.Put(context.Background(), workerKey(id), []byte(`{"holder":"e2e phantom"}`)); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_WORKER_ID_RANGE": "5-7", "LEAF_WORKER_LEASE_TTL": quietTTL.String()}
	p := startVendor(t, "P", env)
	if code := p.stop(30 * time.Second); code != 0 {
		t.Fatalf("P exited %d on SIGTERM", code)
	}
	return &quietCluster{ns: ns, nc: nc, leases: leases, env: env, saved: ns.snapshot()}
}

var claimedTwiceLine = regexp.MustCompile(`holds worker ID 5 too, in the same bucket \([^)]*\): the NATS store went back \([^)]*\) and the ID was claimed twice`)

func quietClaim(t *testing.T, name string, frozen bool) {
	qc := startQuietCluster(t)
	x := startVendor(t, "X", qc.env)
	if id := x.waitServing(); id != 5 {
		t.Fatalf("X holds worker ID %d, want 5, the only free one", id)
	}
	sf := newTally(name)
	spec := onSubject(rewindLoad, "leaf.snowflake")
	d := startLoad(t, qc.nc, sf, spec)
	sf.waitOK(t, 50, 30*time.Second, "X vending")
	d.stop() // quiet: no request reaches X until Y has claimed

	if frozen {
		x.signal(syscall.SIGSTOP)
	}
	reconnects := x.count(`msg="NATS reconnected"`)
	began := time.Now()
	qc.ns.restore(qc.saved)
	if !frozen {
		eventually(t, 10*time.Second, "X to reconnect both its connections", func() bool { return x.count(`msg="NATS reconnected"`) >= reconnects+2 })
	}
	y := newVendor(t, "Y", qc.env)
	y.start()
	if frozen {
		if id := y.waitServing(); id != 5 {
			t.Fatalf("Y holds worker ID %d, want 5, X's lost claim", id)
		}
	} else if _, err := y.awaitLog(claimedTwiceLine, 30*time.Second); err != nil {
		t.Errorf("Y did not find X holding worker ID 5: %v", err)
	}
	resumed := time.Now()
	served := repliesAfter(sf)
	d = startLoad(t, qc.nc, sf, spec)
	if frozen {
		sf.waitOK(t, 50, 30*time.Second, "Y vending with worker ID 5")
		x.signal(syscall.SIGCONT)
	}
	// X gives worker ID 5 up at its next renewal; then 5 is one vendor's,
	// and 7, freed, the other's. When Y found X holding it, Y gave its claim
	// up recording its deadline, over X's IDs that the store lost: the next
	// claim of 5 waits that out, up to a TTL.
	gaveUp := timeTo(began, quietTTL+15*time.Second, []event{
		{"snowflake reply", served},
		{"X gives worker ID 5 up", func() bool { return x.count(`msg="worker ID lease lost`) > 0 }},
		{"worker ID 5 held again", func() bool { return claims(x, 5)+claims(y, 5) > 1 }}})
	if err := qc.leases.Delete(context.Background(), workerKey(7)); err != nil {
		t.Fatal(err)
	}
	both := timeTo(began, 30*time.Second, append(readyEvents([]*vendor{x, y}),
		event{"worker ID 5 and another vending", vendingWith(sf, began, 5)}))
	d.stop()

	sf.check(t)
	report(t, "%s: quiet until %v after the restore began; from the restore began: %s; once worker ID 7 was freed: %s",
		sf.name, resumed.Sub(began).Round(10*time.Millisecond), gaveUp, both)
	checkLeaseLoss(t, x, 5)
	checkNoOtherJetStream(t, []*vendor{x, y})
	if strings.Contains(gaveUp+both, "never") {
		t.Errorf("X and Y did not both vend again after the restore")
	}
}

// claims counts v's claims of worker ID id.
func claims(v *vendor, id int) int {
	return strings.Count(v.logs(), `msg="worker ID claimed" worker_id=`+strconv.Itoa(id)+" ")
}

// vendingWith happens once tl holds snowflake IDs made after since with
// worker ID want and at least one other. It reads only the IDs that came
// since its last call.
func vendingWith(tl *tally, since time.Time, want int) func() bool {
	seen := map[int]bool{}
	next := 0
	return func() bool {
		tl.mu.Lock()
		fresh := tl.ids[next:]
		next = len(tl.ids)
		tl.mu.Unlock()
		for _, id := range fresh {
			p, err := snowflake.Decode(id, snowflake.DefaultEpoch)
			if err == nil && p.UnixMilli > since.UnixMilli() {
				seen[p.WorkerID] = true
			}
		}
		return seen[want] && len(seen) >= 2
	}
}

// onSubject returns spec sent to subject.
func onSubject(spec loadSpec, subject string) loadSpec {
	spec.subject = subject
	return spec
}

// copyTree copies directory src to dst, which must not exist, with cp -a:
// a Postgres data directory must keep its owner and its mode 0700.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}

// putBack replaces directory dir by a copy of saved.
func putBack(t testing.TB, saved, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	copyTree(t, saved, dir)
}

// snapshot copies the server's store directory and returns the copy's
// path. The server is stopped for the copy: cp reads each file at another
// moment, so a copy of a running store is not even what a power cut
// leaves (one instant for every file), and what nats-server makes of it
// varies from run to run. Stopped, the copy holds exactly what was
// acknowledged; the vendors reconnect a moment later, as after any restart.
func (r *restartableNATS) snapshot() string {
	r.t.Helper()
	dst := filepath.Join(r.t.TempDir(), "nats-store")
	r.stop()
	copyTree(r.t, r.dir, dst)
	r.start(nil)
	return dst
}

// restore stops the server, puts its store directory back to saved (a
// snapshot) and starts it again on the same port.
func (r *restartableNATS) restore(saved string) {
	r.t.Helper()
	r.stop()
	putBack(r.t, saved, r.dir)
	r.start(nil)
}

// pgSnapshot copies the data directory of pg, stopped for the moment of the
// copy so that the copy is consistent (a running cluster's would need
// pg_basebackup), and returns the copy's path.
func pgSnapshot(t testing.TB, pg *pgtest.Server) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "pgdata")
	pg.Stop()
	copyTree(t, pg.DataDir(), dst)
	pg.Start()
	return dst
}

// pgRestore stops pg, puts its data directory back to saved (a
// pgSnapshot) and starts it again on the same port.
func pgRestore(t testing.TB, pg *pgtest.Server, saved string) {
	t.Helper()
	pg.Stop()
	putBack(t, saved, pg.DataDir())
	pg.Start()
}

// pgMaxID reads tag's max_id in leaf_alloc.
func pgMaxID(t testing.TB, dsn, tag string) int64 {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var m int64
	if err := db.QueryRow(`SELECT max_id FROM leaf_alloc WHERE biz_tag = $1`, tag).Scan(&m); err != nil {
		t.Fatalf("read max_id of %s: %v", tag, err)
	}
	return m
}

// kvMaxID reads tag's max_id in the KV segment store, retrying while the
// connection is back after a restart.
func kvMaxID(t testing.TB, nc *nats.Conn, tag string) int64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var m int64
	var last error
	ok := within(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		b, err := js.KeyValue(ctx, kv.SegmentBucket)
		if err != nil {
			last = err
			return false
		}
		e, err := b.Get(ctx, tag)
		if err != nil {
			last = err
			return false
		}
		var row struct {
			MaxID int64 `json:"max_id"`
		}
		last = json.Unmarshal(e.Value(), &row)
		m = row.MaxID
		return last == nil
	})
	if !ok {
		t.Fatalf("read max_id of %s in %s: %v", tag, kv.SegmentBucket, last)
	}
	return m
}

// event is something that happens after a restore.
type event struct {
	name     string
	happened func() bool
}

// timeTo polls events until each has happened once, or timeout, and
// returns how long after began each first did ("never" if not).
func timeTo(began time.Time, timeout time.Duration, events []event) string {
	took := make([]time.Duration, len(events))
	within(timeout, func() bool {
		done := true
		for i, e := range events {
			if took[i] == 0 && e.happened() {
				took[i] = time.Since(began)
			}
			done = done && took[i] != 0
		}
		return done
	})
	parts := make([]string, len(events))
	for i, e := range events {
		s := "never"
		if took[i] != 0 {
			s = took[i].Round(10 * time.Millisecond).String()
		}
		parts[i] = e.name + "=" + s
	}
	return strings.Join(parts, " ")
}

// repliesAfter happens at the first reply with IDs after now.
func repliesAfter(tl *tally) func() bool {
	_, base := tl.counts()
	return func() bool { _, ok := tl.counts(); return ok > base }
}

// readyEvents happen when each vendor's /readyz answers 200.
func readyEvents(vs []*vendor) []event {
	var out []event
	for _, v := range vs {
		var addr string
		out = append(out, event{v.name + " /readyz 200", func() bool {
			if addr == "" {
				out, _ := v.current()
				m := httpLine.FindStringSubmatch(out.String())
				if m == nil {
					return false
				}
				addr = m[1]
			}
			return ready(addr)
		}})
	}
	return out
}

var rewoundLine = regexp.MustCompile(`the segment store went back: tag \\"e2e\\" has max_id (\d+) there, but IDs up to (\d+) were handed out \(known from ([^)]*)\); raised it above them`)

// rewind is a store found behind, as a vendor logged it.
type rewind struct {
	v             *vendor
	store, handed int64 // the max_id found, the highest ID handed out
	from          string
}

// rewindsOf returns the rewinds the current runs of vs logged.
func rewindsOf(vs []*vendor) []rewind {
	var out []rewind
	for _, v := range vs {
		for _, m := range rewoundLine.FindAllStringSubmatch(v.logs(), -1) {
			store, _ := strconv.ParseInt(m[1], 10, 64)
			handed, _ := strconv.ParseInt(m[2], 10, 64)
			out = append(out, rewind{v, store, handed, m[3]})
		}
	}
	return out
}

// checkRewinds checks what the vendors said of the store that went back:
// the log line, with the max_id the copy held at most (bound) below the IDs
// handed out; the metric and the /readyz note of each vendor that found it.
func checkRewinds(t *testing.T, vs []*vendor, bound int64) {
	t.Helper()
	rws := rewindsOf(vs)
	if len(rws) == 0 {
		t.Errorf("no vendor logged that the segment store went back")
		return
	}
	found := map[*vendor]int{}
	lowest := rws[0].store
	for _, r := range rws {
		t.Logf("vendor %s: store max_id %d, handed out up to %d (known from %s)", r.v.name, r.store, r.handed, r.from)
		found[r.v]++
		lowest = min(lowest, r.store)
		if r.store > r.handed {
			t.Errorf("vendor %s logged a rewind from max_id %d to %d, which is no rewind", r.v.name, r.store, r.handed)
		}
	}
	if lowest > bound {
		t.Errorf("no rewind logged found the copy's max_id (at most %d); the lowest found is %d", bound, lowest)
	}
	for v, n := range found {
		addr := v.httpAddr()
		if got := metricAt(t, addr, "leaf_segment_store_rewinds_total"); got < float64(n) {
			t.Errorf("vendor %s logged %d rewinds, /metrics counts leaf_segment_store_rewinds_total %v", v.name, n, got)
		}
		body := httpGetStatus(t, "http://"+addr+"/readyz")
		if !strings.HasPrefix(body, "200 ready") || !strings.Contains(body, `note: `) || !strings.Contains(body, `the segment store went back: tag "e2e"`) {
			t.Errorf("vendor %s's /readyz after the rewind: %q, want 200 ready with a note of the store that went back", v.name, body)
		}
	}
}

var lostLine = regexp.MustCompile(`msg="worker ID lease lost: vending stopped" worker_id=(\d+) err="((?:[^"\\]|\\.)*)"`)

// checkLeaseLoss checks that v gave up its worker ID (id, or any when -1)
// saying that the NATS store went back.
func checkLeaseLoss(t *testing.T, v *vendor, id int) {
	t.Helper()
	ms := lostLine.FindAllStringSubmatch(v.logs(), -1)
	for _, m := range ms {
		if id >= 0 && m[1] != strconv.Itoa(id) {
			continue
		}
		t.Logf("vendor %s gave up worker ID %s: %s", v.name, m[1], m[2])
		if !strings.Contains(m[2], "the NATS store went back") {
			t.Errorf("vendor %s gave up worker ID %s without naming the store that went back: %s", v.name, m[1], m[2])
		}
		return
	}
	t.Errorf("vendor %s logged no loss of its worker ID after the restore", v.name)
}

// checkNoOtherJetStream fails the test if a vendor blamed another JetStream
// for what a store that went back did.
func checkNoOtherJetStream(t *testing.T, vs []*vendor) {
	t.Helper()
	for _, v := range vs {
		if l := grepLines(v.logs(), "another JetStream"); l != "" {
			t.Errorf("vendor %s blames another JetStream:\n%s", v.name, l)
		}
	}
}

// logs returns the output of every run of v.
func (v *vendor) logs() string {
	v.mu.Lock()
	runs := v.runs
	v.mu.Unlock()
	var b strings.Builder
	for _, out := range runs {
		b.WriteString(out.String())
	}
	return b.String()
}

// metricAt reads the metric named name (with its labels) from the
// /metrics of the vendor at addr, 0 when it is not there.
func metricAt(t testing.TB, addr, name string) float64 {
	t.Helper()
	return metric(httpGet(t, "http://"+addr+"/metrics"), name)
}
