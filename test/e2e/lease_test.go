package e2e

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/snowflake"
)

// with returns a copy of env with more key, value pairs set.
func with(env map[string]string, kvs ...string) map[string]string {
	out := make(map[string]string, len(env)+len(kvs)/2)
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kvs); i += 2 {
		out[kvs[i]] = kvs[i+1]
	}
	return out
}

// span is the time range of the IDs made with one worker ID.
type span struct {
	n          int
	first, end int64 // Unix ms of the earliest and latest ID
}

// workerSpan decodes ids and returns the span of those made by worker.
func workerSpan(ids []int64, worker int) span {
	var s span
	for _, id := range ids {
		p, err := snowflake.Decode(id, snowflake.DefaultEpoch)
		if err != nil || p.WorkerID != worker {
			continue
		}
		if s.n == 0 || p.UnixMilli < s.first {
			s.first = p.UnixMilli
		}
		if s.n == 0 || p.UnixMilli > s.end {
			s.end = p.UnixMilli
		}
		s.n++
	}
	return s
}

// checkHandover fails the test unless every ID the new holder made with
// worker is later than every ID the old holder made with it: reuse of a
// worker ID must never repeat an ID, whatever the two clocks say.
func checkHandover(t testing.TB, old, next []int64, worker int) {
	t.Helper()
	o, n := workerSpan(old, worker), workerSpan(next, worker)
	if o.n == 0 || n.n == 0 {
		t.Errorf("worker ID %d: old holder made %d IDs, new holder %d; want both > 0", worker, o.n, n.n)
		return
	}
	if n.first <= o.end {
		t.Errorf("worker ID %d reused too early: the new holder's first ID is at %s, the old holder's last at %s (%d ms overlap)",
			worker, time.UnixMilli(n.first).UTC().Format(time.StampMilli), time.UnixMilli(o.end).UTC().Format(time.StampMilli), o.end-n.first+1)
	}
}

// TestLeaseExpiryAndReuse: vendor A holds the only free worker ID and is
// frozen with SIGSTOP past its lease TTL; vendor B claims the ID. After
// SIGCONT, A must not vend with it: it notices the loss and answers 503
// until another ID is free, then vends with that one. The second case runs
// B with its clock 5s behind A's. A and B serve different subject prefixes
// so every reply is known to come from one of them.
func TestLeaseExpiryAndReuse(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		offsetB string
	}{
		{"same clock", 3 * time.Second, "0s"},
		// The TTL is longer than the offset: B's claim waits until its
		// clock passes A's last reservation, at most one TTL.
		{"new holder 5s behind", 8 * time.Second, "-5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on a server of its own
			leaseReuse(t, tc.ttl, tc.offsetB)
		})
	}
}

var (
	leaseLostLine = regexp.MustCompile(`worker ID lease lost`)
	claimedSpare  = regexp.MustCompile(`msg="worker ID claimed" worker_id=9 `)
)

func leaseReuse(t *testing.T, ttl time.Duration, offsetB string) {
	const id, spare = 7, 9
	nats := startNATS(t)
	js := nats.js(t)
	filler := fillWorkerIDs(t, js, ttl, id)
	// LEAF_CLOCK_MAX_SKEW=0: B's clock may be off; the hand-over must hold
	// without the check that would refuse it.
	base := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_LEASE_TTL": ttl.String(), "LEAF_CLOCK_MAX_SKEW": "0", "LEAF_WORKER_ID_RANGE": fillRange}
	nc := nats.conn(t)

	a := startVendor(t, "A", with(base, "LEAF_SUBJECT_PREFIX", "a"))
	if got := a.waitServing(); got != id {
		t.Fatalf("A holds worker ID %d, want the only free one, %d", got, id)
	}
	ta := newTally("lease reuse A+B, B offset " + offsetB)
	// A long timeout: requests that reach A while it is stopped are
	// answered after SIGCONT, and those answers are checked too.
	da := startLoad(t, nc, ta, loadSpec{subject: "a.snowflake", batch: 100, clients: 2, timeout: 3*ttl + 10*time.Second})
	ta.waitOK(t, 50, 20*time.Second, "A serving")

	a.signal(syscall.SIGSTOP)
	eventually(t, 3*ttl, "A's lease to expire", func() bool { return !leaseHeld(t, js, id) })
	b := startVendor(t, "B", with(base, "LEAF_SUBJECT_PREFIX", "b", "LEAF_TEST_CLOCK_OFFSET", offsetB))
	if got := b.waitServing(); got != id {
		t.Fatalf("B holds worker ID %d, want A's, %d", got, id)
	}
	tb := newTally("lease reuse B")
	db := startLoad(t, nc, tb, loadSpec{subject: "b.snowflake", batch: 100, clients: 2, timeout: 5 * time.Second})
	tb.waitOK(t, 50, 20*time.Second, "B serving")

	a.signal(syscall.SIGCONT)
	a.waitLog(leaseLostLine, 2*ttl)
	refused := ta.errCount("503")
	eventually(t, 10*time.Second, "A to answer 503 without a worker ID", func() bool { return ta.errCount("503") > refused })
	filler.release(t, spare)
	a.waitLog(claimedSpare, 60*time.Second)
	ta.waitOK(t, 50, 30*time.Second, "A vending with a new worker ID")
	tb.waitOK(t, 50, 30*time.Second, "B still serving")
	da.stop()
	db.stop()

	ta.check(t, tb)
	checkHandover(t, ta.snapshotIDs(), tb.snapshotIDs(), id)
	if s := workerSpan(ta.snapshotIDs(), spare); s.n == 0 {
		t.Errorf("A made no IDs with its new worker ID %d", spare)
	}
}
