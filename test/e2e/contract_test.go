package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
)

// The scenarios of the cluster contract: operator mistakes and lost state
// that made earlier builds repeat IDs. Each tries to make a duplicate,
// counts them, and checks what the operator is told. Run against an older
// build (LEAF_E2E_VENDOR_BIN), they count what it did wrong.

// runVendor runs the vendor binary with args and returns its exit code and
// combined output.
func runVendor(t testing.TB, env map[string]string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, vendorBin, args...)
	cmd.Env = vendorEnv(t, env)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("vendor %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// refused starts v and reports whether it exited before serving, failing
// the test if it exited for another reason than want says.
func refused(t testing.TB, v *vendor, want ...string) bool {
	t.Helper()
	v.start()
	if _, err := v.awaitLog(servingLine, 30*time.Second); err == nil {
		return false
	}
	if code := v.wait(10 * time.Second); code != 1 {
		t.Errorf("vendor %s exited %d, want 1", v.name, code)
	}
	for _, w := range want {
		if !strings.Contains(v.tail(20), w) {
			t.Errorf("vendor %s's refusal does not say %q:\n%s", v.name, w, v.tail(20))
		}
	}
	t.Logf("vendor %s refused, as it should: %s", v.name, lastLine(v.tail(5)))
	return true
}

// TestEpochMismatch: a vendor pinned to a worker ID runs with the default
// epoch and stops; the same LEAF_WORKER_ID moves to a host with another
// epoch, chosen so that its first IDs carry the times of the first
// vendor's. It must refuse to start, naming both epochs.
func TestEpochMismatch(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	dir := t.TempDir()
	env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_ID": "3", "LEAF_WORKER_FILE": filepath.Join(dir, "host-a.last")}
	a := startVendor(t, "A", env)
	tl := newTally("epoch mismatch")
	d := startLoad(t, nats.conn(t), tl, loadSpec{subject: "leaf.snowflake", batch: 100, clients: 2, timeout: 3 * time.Second})
	tl.waitIDs(t, scaled(100_000), 60*time.Second)
	if code := a.stop(30 * time.Second); code != 0 {
		t.Fatalf("A exited %d on SIGTERM", code)
	}
	first := workerSpan(tl.snapshotIDs(), 3).first
	epoch := snowflake.DefaultEpoch + time.Now().UnixMilli() - first
	b := newVendor(t, "B", with(env, "LEAF_EPOCH", strconv.FormatInt(epoch, 10), "LEAF_WORKER_FILE", filepath.Join(dir, "host-b.last")))
	if !refused(t, b, `err.epoch="the cluster's is 1288834974657, this vendor's `+strconv.FormatInt(epoch, 10), "set LEAF_EPOCH=1288834974657") {
		t.Errorf("B served with epoch %d on a cluster whose epoch is %d", epoch, snowflake.DefaultEpoch)
		tl.waitIDs(t, 2*scaled(100_000), 60*time.Second) // what B hands out meanwhile
	}
	d.stop()
	tl.check(t)
}

// TestTwoSegmentStores: one vendor keeps segments in the embedded KV store,
// another is started with Postgres and the same tag, as happens halfway
// through moving to Postgres. The second must refuse to start, and so must
// the tag added in the other store. Then the move, under load, with the
// admin command: the KV vendor stops, a Postgres vendor continues above
// every ID handed out.
func TestTwoSegmentStores(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	dsn := pgtest.DSN(t)
	kvEnv := map[string]string{"LEAF_NATS_URL": nats.url()}
	pgEnv := with(kvEnv, "LEAF_POSTGRES_URL", dsn)
	vendorCommand(t, kvEnv, "tags", "add", "order", "-step", "1000")
	a := startVendor(t, "A-kv", kvEnv)
	tl := newTally("two segment stores, then a move")
	d := startLoad(t, nats.conn(t), tl, loadSpec{subject: "leaf.segment.order", batch: 100, clients: 3, timeout: 3 * time.Second})
	tl.waitIDs(t, 20_000, 30*time.Second)

	if code, out := runVendor(t, pgEnv, "tags", "add", "order", "-step", "1000"); code == 0 {
		t.Errorf("tags add in a store that is not the cluster's succeeded: %s", out)
	} else if !strings.Contains(out, "is not the cluster's") {
		t.Errorf("tags add in another store refused without saying why: %s", out)
	}
	if !refused(t, newVendor(t, "B-pg", pgEnv), `err.segment_store="the cluster's is jetstream-kv:`, "this vendor's postgres:") {
		t.Error("a vendor with another segment store served")
		tl.waitIDs(t, 200_000, 60*time.Second) // both stores hand out the same IDs meanwhile
	}
	before := slices.Max(tl.snapshotIDs())

	code, out := runVendor(t, pgEnv, "cluster", "move-segments")
	if code != 0 {
		d.stop()
		tl.check(t)
		t.Fatalf("vendor cluster move-segments: exit %d:\n%s", code, out)
	}
	t.Logf("vendor cluster move-segments:\n%s", out)
	if _, err := a.awaitLog(regexp.MustCompile(`were moved to postgres:`), 30*time.Second); err != nil {
		t.Errorf("the vendor on the old store did not stop: %v", err)
	}
	if code := a.wait(30 * time.Second); code != 1 {
		t.Errorf("the vendor on the old store exited %d, want 1", code)
	}
	startVendor(t, "C-pg", pgEnv)
	tl.waitOK(t, 100, 30*time.Second, "the Postgres vendor serving")
	d.stop()
	tl.check(t)
	if ids := tl.snapshotIDs(); slices.Max(ids) <= before {
		t.Errorf("no ID above %d after the move", before)
	}
}

// TestWipedNATSStore: the NATS server restarts with its JetStream store
// wiped under snowflake and segment load (segments in Postgres). The
// running vendors must notice, re-create what they need and serve again by
// themselves. Two vendors start right after the restart and compete for
// the same two worker IDs: one claims from the range, the other is pinned
// to the worker ID a running vendor vends with, and its clock is 2s behind
// (with the check of its clock against its peers' off), so that the lost
// timestamps are all that stood between it and the running vendor's last
// IDs. No ID may repeat.
func TestWipedNATSStore(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	// A TTL long enough that a holder which has not noticed the wipe would
	// keep vending a while: the window a duplicate needs.
	const ttl = 10 * time.Second
	ns := startRestartableNATS(t)
	dsn := pgtest.DSN(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_POSTGRES_URL": dsn,
		"LEAF_WORKER_ID_RANGE": "5-6", "LEAF_WORKER_LEASE_TTL": ttl.String()}
	vendorCommand(t, env, "tags", "add", "e2e", "-step", "1000")
	vs := startVendors(t, "v", 2, env)
	pinned := vs[0].waitServing()
	nc := ns.conn(t)
	sf, seg, stop := startMixedLoad(t, nc, "wiped NATS store", loadSpec{batch: 100, clients: 2, timeout: 2 * time.Second, pace: 20 * time.Millisecond})
	sf.waitIDs(t, 50_000, 30*time.Second)

	ns.stop()
	ns.wipe()
	ns.start(nil)
	restarted := time.Now()
	late := []*vendor{
		newVendor(t, "late", env),
		newVendor(t, "late-pinned", with(env, "LEAF_WORKER_ID", strconv.Itoa(pinned), "LEAF_TEST_CLOCK_OFFSET", "-2s", "LEAF_CLOCK_MAX_SKEW", "0")),
	}
	for _, v := range late {
		v.start()
	}
	// Meanwhile the running vendors say why they do not vend.
	addr := vs[1].httpAddr()
	// Within three TTLs: the running vendors find the wipe at a renewal,
	// which a busy machine delays; they say so for a TTL at least (the
	// new bucket's wait).
	eventually(t, 3*ttl, "/readyz to say why no worker ID is held", func() bool {
		body := httpGetStatus(t, "http://"+addr+"/readyz")
		return strings.HasPrefix(body, "503 not ready: no worker-ID lease held")
	})
	_, base := sf.counts()
	eventually(t, 5*ttl, "snowflake IDs again after the wipe", func() bool { _, ok := sf.counts(); return ok > base })
	recovery := time.Since(restarted)
	// Let the running vendors and the late ones compete for a while.
	seg.waitOK(t, 50, 30*time.Second, "segment IDs after the wipe")
	<-time.After(ttl) // the fault's length, not a synchronisation
	stop()

	for _, v := range vs {
		if !v.running() {
			t.Errorf("vendor %s exited after the wipe: %v", v.name, v.exitErr())
		}
	}
	reclaimed := 0
	for _, v := range append(vs, late...) {
		reclaimed += v.count(`msg="worker ID claimed"`)
	}
	sf.check(t)
	seg.check(t)
	report(t, "wiped NATS store: recovery=%v (lease TTL %v) claims-after-wipe=%d", recovery.Round(100*time.Millisecond), ttl, reclaimed-len(vs))
}

// TestStaticWorkerIDRestartAfterKill: a vendor pinned to a worker ID is
// killed with SIGKILL and restarted at once, three times in a row (thirty
// in a soak). Its own stale lease holds the ID for up to a TTL: it must
// wait for it, saying so, and serve, never exit, and never repeat an ID.
func TestStaticWorkerIDRestartAfterKill(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	// A TTL longer than the 3s a static ID's file reserves, so the wait is
	// the lease's.
	env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_ID": "42", "LEAF_WORKER_FILE": filepath.Join(t.TempDir(), "w42.last"),
		"LEAF_WORKER_LEASE_TTL": "6s"}
	v := startVendor(t, "static", env)
	tl := newTally("static worker ID killed and restarted")
	d := startLoad(t, nats.conn(t), tl, loadSpec{subject: "leaf.snowflake", batch: 100, clients: 2, timeout: 5 * time.Second})
	var waits []string
	rounds := scaled(3)
	for round := range rounds {
		tl.waitOK(t, 50, 30*time.Second, "serving")
		v.kill()
		started := time.Now()
		v.start()
		if _, err := v.awaitLog(servingLine, 30*time.Second); err != nil {
			d.stop()
			tl.check(t)
			t.Fatalf("restart %d after kill -9: %v\n%s", round+1, err, v.tail(5))
		}
		waits = append(waits, time.Since(started).Round(100*time.Millisecond).String())
		if v.count("is still leased") == 0 {
			t.Errorf("restart %d did not say it waits for its stale lease", round+1)
		}
	}
	tl.waitOK(t, 50, 30*time.Second, "serving after the last restart")
	d.stop()
	tl.check(t)
	report(t, "static worker ID killed and restarted: restarts=%d all served, waits=%v", rounds, waits)
}

// TestMaxBatchAboveMaxPayload: a LEAF_MAX_BATCH whose text reply exceeds
// the server's max_payload is refused at start. And when the server's
// max_payload shrinks under a running vendor (restarted with another
// configuration), a reply it cannot send is a 500 that says so, counted as
// an error in /metrics and in micro stats, not a 200 that never arrives.
func TestMaxBatchAboveMaxPayload(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	ns := startRestartableNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url()}
	if code, out := runVendor(t, with(env, "LEAF_MAX_BATCH", "100000")); code != 1 || !strings.Contains(out, "max_payload of 1048576 bytes; set LEAF_MAX_BATCH to 52428 or less") {
		t.Errorf("LEAF_MAX_BATCH 100000 with a 1 MB max_payload: exit %d:\n%s", code, lastLine(out))
	}

	v := startVendor(t, "V", with(env, "LEAF_MAX_BATCH", "50000"))
	addr := v.httpAddr()
	ns.stop()
	ns.start(func(o *server.Options) { o.MaxPayload = 64 * 1024 })
	nc := ns.conn(t)
	var msg string
	eventually(t, 30*time.Second, "an answer to 10,000 IDs from the vendor after the restart", func() bool {
		m, err := nc.Request("leaf.snowflake", []byte("10000"), 2*time.Second)
		if err != nil {
			return false
		}
		if m.Header.Get(micro.ErrorCodeHeader) == "503" {
			return false // renewing its lease on the restarted server
		}
		msg = m.Header.Get(micro.ErrorCodeHeader) + " " + m.Header.Get(micro.ErrorHeader)
		return true
	})
	if !strings.HasPrefix(msg, "500 ") || !strings.Contains(msg, "max_payload of 65536") {
		t.Errorf("10,000 IDs over a 64 KB max_payload: %q, want a 500 naming max_payload", msg)
	}
	// The metrics and micro count a request just after its reply has gone.
	var metrics string
	within(5*time.Second, func() bool {
		metrics = httpGet(t, "http://"+addr+"/metrics")
		return strings.Contains(metrics, `leaf_requests_total{code="500",mode="snowflake",tag=""} 1`)
	})
	if !strings.Contains(metrics, `leaf_requests_total{code="500",mode="snowflake",tag=""} 1`) {
		t.Errorf("/metrics does not count the reply that could not be sent as a 500:\n%s", grepLines(metrics, "leaf_requests_total"))
	}
	var stats int
	within(5*time.Second, func() bool { stats = clusterEndpointErrors(t, ns); return stats > 0 })
	if stats == 0 {
		t.Error("micro stats count no error for the reply that could not be sent")
	}
	report(t, "max batch above max_payload: refused at start; reply too large after a restart: %q, metrics 500=1, micro errors=%d", msg, stats)
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// httpGetStatus returns "<code> <body>", or "" when nothing answers.
func httpGetStatus(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strconv.Itoa(resp.StatusCode) + " " + string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// clusterEndpointErrors is the errors a vendor's micro stats tell: the
// count in its endpoints' data (the service summary, as /metrics counts
// them), or micro's own num_errors when more. Micro counts a request when
// its handler returns, so its num_errors leaves out the errors of replies
// sent later (a large snowflake batch, a request that waited for the
// store).
func clusterEndpointErrors(t testing.TB, ns *restartableNATS) int {
	t.Helper()
	m, err := ns.conn(t).Request("$SRV.STATS.leaf", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", m.Data, err))
	}
	counted, n := 0, 0
	for _, ep := range st.Endpoints {
		n += ep.NumErrors
		var data struct {
			Service struct{ Errors int } `json:"service"`
		}
		if json.Unmarshal(ep.Data, &data) == nil {
			counted = max(counted, data.Service.Errors)
		}
	}
	return max(counted, n)
}

// TestSkewedClockClaimsNothing: a vendor whose clock is 5s behind the NATS
// server's and its live peer's claims no worker ID and says why, in its log
// and on /readyz, until its clock agrees (here: never).
func TestSkewedClockClaimsNothing(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": nats.url()}
	startVendor(t, "peer", env)
	v := newVendor(t, "skewed", with(env, "LEAF_TEST_CLOCK_OFFSET", "-5s"))
	v.start()
	addr := v.httpAddr()
	v.waitLog(regexp.MustCompile(`this host's clock is 5s behind the median`), 30*time.Second)
	eventually(t, 10*time.Second, "/readyz to name the clock", func() bool {
		return strings.Contains(httpGetStatus(t, "http://"+addr+"/readyz"), "503 not ready: no worker-ID lease held: this host's clock is 5s behind")
	})
	if _, err := v.awaitLog(servingLine, 3*time.Second); err == nil {
		t.Fatal("the skewed vendor claimed a worker ID")
	}
	if !v.running() {
		t.Fatalf("the skewed vendor exited instead of waiting for its clock: %v", v.exitErr())
	}
	report(t, "skewed clock: a vendor 5s behind claims nothing and says: %s", lastLine(grepLines(v.tail(30), "clock is 5s behind")))
}

// TestContractLostUnderLoad: the contract's bucket is deleted under a
// serving vendor and, at once, a vendor with a later epoch starts, as an
// operator's `nats kv del` or a lost stream would allow. The newcomer must
// not record its settings in the empty bucket and vend by them: it stops,
// naming both epochs; the serving vendor records the contract again and
// keeps serving. No ID may repeat.
func TestContractLostUnderLoad(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_ID_RANGE": "906-906", "LEAF_WORKER_LEASE_TTL": "6s"}
	a := startVendor(t, "A", env)
	tl := newTally("contract lost")
	d := startLoad(t, nats.conn(t), tl, loadSpec{subject: "leaf.snowflake", batch: 1000, clients: 2, timeout: 3 * time.Second})
	tl.waitIDs(t, scaled(200_000), 60*time.Second)

	js := nats.js(t)
	if err := js.DeleteKeyValue(context.Background(), kv.ClusterBucket); err != nil {
		t.Fatal(err)
	}
	later := strconv.FormatInt(snowflake.DefaultEpoch+3000, 10)
	c := newVendor(t, "C", with(env, "LEAF_EPOCH", later))
	if !refused(t, c, `err.epoch="the cluster's is 1288834974657, this vendor's `+later) {
		t.Errorf("C served with epoch %s while the contract was missing", later)
		moreIDs(t, tl, scaled(3_000_000)) // what C hands out meanwhile
	}
	_, base := tl.counts()
	tl.waitOK(t, 20, 30*time.Second, "A still serving")
	cs, err := kv.FindContracts(context.Background(), kv.Plain(js))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := cs.Get(context.Background())
	if err != nil || rec.Epoch != snowflake.DefaultEpoch {
		t.Errorf("contract after the loss: %+v, %v; want A's epoch recorded again", rec, err)
	}
	d.stop()
	if !a.running() {
		t.Errorf("A exited: %v", a.exitErr())
	}
	tl.check(t)
	_, ok := tl.counts()
	report(t, "contract lost: C refused (%s); A served %d more replies", lastLine(grepLines(c.tail(20), "epoch")), ok-base)
}

// TestTwoJetStreamDomains: a hub and a leaf node with JetStream domains of
// their own share one subject space; a vendor on each claims worker IDs
// 5-5, each in its own domain's bucket. The second must not vend with the
// worker ID the first vends with: it stops, saying why. With a KV segment
// store each domain has a store of its own, and the second vendor finds a
// serving peer that never records a contract in its JetStream; with one
// Postgres, the contracts agree, and it finds the peer vending with worker
// ID 5. No ID may repeat.
func TestTwoJetStreamDomains(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		// Either check may refuse first: the contract's ("keeps it in
		// another JetStream") or the peers' ("... of another JetStream").
		{"KV stores", map[string]string{}, "another JetStream"},
		{"one Postgres", map[string]string{"LEAF_POSTGRES_URL": pgtest.DSN(t)}, "vends with worker ID 5 too"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on servers of its own
			leafPort := natstest.FreePort(t)
			hub := natstest.ServerWith(t, natsserver.Config{Name: "hub", Configure: func(o *server.Options) {
				o.JetStreamDomain = "hub"
				o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", leafPort
			}})
			remote, _ := url.Parse("nats://127.0.0.1:" + strconv.Itoa(leafPort))
			edge := natstest.ServerWith(t, natsserver.Config{Name: "edge", Configure: func(o *server.Options) {
				o.JetStreamDomain = "edge"
				o.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{remote}}}
			}})
			env := with(tc.env, "LEAF_WORKER_ID_RANGE", "5-5")
			startVendor(t, "hub", with(env, "LEAF_NATS_URL", hub.ClientURL()))
			// Clients on both sides; the edge's reach the hub's vendor over
			// the leaf node, each side's prefer its own vendor once there is.
			tl := newTally("two domains, " + tc.name)
			spec := loadSpec{subject: "leaf.snowflake", batch: 1000, clients: 1, timeout: 3 * time.Second}
			d := startLoad(t, natstest.Conn(t, edge), tl, spec)
			dh := startLoad(t, natstest.Conn(t, hub), tl, spec)
			tl.waitIDs(t, scaled(100_000), 60*time.Second)

			b := newVendor(t, "edge", with(env, "LEAF_NATS_URL", edge.ClientURL()))
			if !refused(t, b, tc.want, "must share one JetStream") {
				t.Errorf("the edge's vendor served with worker ID 5")
				moreIDs(t, tl, scaled(3_000_000)) // what it hands out meanwhile
			}
			d.stop()
			dh.stop()
			tl.check(t)
			report(t, "two JetStream domains, %s: the second vendor refused: %s", tc.name, lastLine(grepLines(b.tail(20), "JetStream")))
		})
	}
}

// TestPinnedWorkerIDZero: worker ID 0 is an ID like any other. Two vendors
// pinned to it on one NATS, the second started under load: it must be
// refused, as a second vendor pinned to any other ID is. No ID may repeat.
func TestPinnedWorkerIDZero(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	dir := t.TempDir()
	env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_ID": "0"}
	startVendor(t, "A", with(env, "LEAF_WORKER_FILE", filepath.Join(dir, "a.last")))
	tl := newTally("pinned worker ID 0")
	d := startLoad(t, nats.conn(t), tl, loadSpec{subject: "leaf.snowflake", batch: 1000, clients: 2, timeout: 3 * time.Second})
	tl.waitIDs(t, scaled(100_000), 60*time.Second)
	b := newVendor(t, "B", with(env, "LEAF_WORKER_FILE", filepath.Join(dir, "b.last")))
	if !refused(t, b, "LEAF_WORKER_ID 0 is held by another live worker") {
		t.Errorf("B served pinned to worker ID 0 while A did")
		moreIDs(t, tl, scaled(3_000_000)) // what B hands out meanwhile

	}
	d.stop()
	tl.check(t)
}

// moreIDs waits until tl holds n more IDs than now: a load that goes on
// after a vendor that should have been refused began to serve.
func moreIDs(t testing.TB, tl *tally, n int) {
	t.Helper()
	have, _ := tl.counts()
	tl.waitIDs(t, have+n, 60*time.Second)
}
