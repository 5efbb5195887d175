package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// clockOffset is a vendor's LEAF_TEST_CLOCK_OFFSET_FILE: writing it steps the
// running vendor's snowflake clock.
type clockOffset struct {
	t    testing.TB
	path string
}

func newClockOffset(t testing.TB) *clockOffset {
	t.Helper()
	c := &clockOffset{t: t, path: filepath.Join(t.TempDir(), "clock-offset")}
	c.write("0s")
	return c
}

func (c *clockOffset) write(d string) {
	c.t.Helper()
	if err := os.WriteFile(c.path, []byte(d+"\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// step sets the offset and waits until v has applied it.
func (c *clockOffset) step(v *vendor, d string) {
	c.t.Helper()
	c.write(d)
	v.waitLog(regexp.MustCompile(`clock offset changed.* offset=`+regexp.QuoteMeta(d)), 10*time.Second)
}

// TestClockStepBack steps a running vendor's clock back under load: 10ms
// (twice the default tolerance: brief 503s at most) and 10s (503s that say
// the clock moved back, until real time catches up). No ID may repeat.
func TestClockStepBack(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	offset := newClockOffset(t)
	v := startVendor(t, "V", map[string]string{
		"LEAF_NATS_URL":               nats.url(),
		"LEAF_WORKER_LEASE_TTL":       "3s",
		"LEAF_TEST_CLOCK_OFFSET_FILE": offset.path,
	})
	tl := newTally("clock step back 10ms and 10s")
	d := startLoad(t, nats.conn(t), tl, loadSpec{subject: "leaf.snowflake", batch: 100, clients: 2, timeout: 2 * time.Second})
	tl.waitOK(t, 50, 20*time.Second, "serving")

	offset.step(v, "-10ms")
	tl.waitOK(t, 200, 20*time.Second, "after a 10ms step back")
	small := tl.errCount("503")

	refused := tl.errCount("503")
	offset.step(v, "-10s")
	eventually(t, 10*time.Second, "a 503 that says the clock moved back", func() bool {
		return tl.errCount("503") > refused && strings.Contains(tl.last("503"), "clock")
	})
	t.Logf("503s after the 10ms step: %d; after the 10s step: %q", small, tl.last("503"))
	tl.waitOK(t, 50, scaled(40*time.Second), "after real time caught up with a 10s step back")
	d.stop()
	tl.check(t)
}

// TestClockBehindAtCrash: a vendor's clock steps back 10s, it renews its
// lease while behind, and then it dies (SIGKILL) before its clock has
// caught up. A new holder of its worker ID, 5s behind real time, must still
// start after every ID the dead vendor made: the worker ID's recorded last
// timestamp must never move back below an ID already made.
func TestClockBehindAtCrash(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	const id, ttl = 7, 3 * time.Second
	nats := startNATS(t)
	js := nats.js(t)
	fillWorkerIDs(t, js, ttl, id)
	offset := newClockOffset(t)
	// The check of a claimant's clock against the server's would refuse
	// B; with it off, this tests the defenses behind it.
	base := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_LEASE_TTL": ttl.String(), "LEAF_CLOCK_MAX_SKEW": "0", "LEAF_WORKER_ID_RANGE": fillRange}
	nc := nats.conn(t)

	v := startVendor(t, "V", with(base, "LEAF_SUBJECT_PREFIX", "a", "LEAF_TEST_CLOCK_OFFSET_FILE", offset.path))
	if got := v.waitServing(); got != id {
		t.Fatalf("V holds worker ID %d, want %d", got, id)
	}
	tv := newTally("clock behind at crash V+B")
	dv := startLoad(t, nc, tv, loadSpec{subject: "a.snowflake", batch: 100, clients: 2, timeout: 2 * time.Second})
	tv.waitOK(t, 200, 20*time.Second, "V serving")

	offset.step(v, "-10s")
	_, rev := recordedLast(t, js, id)
	eventually(t, 2*ttl, "V to renew its lease while its clock is behind", func() bool {
		_, r := recordedLast(t, js, id)
		return r > rev
	})
	recorded, _ := recordedLast(t, js, id)
	v.kill()
	dv.stop()
	made := workerSpan(tv.snapshotIDs(), id)
	if recorded < made.end {
		t.Errorf("after a renewal with the clock 10s behind, %s worker.%d = %d, %d ms before the latest ID V had made (%d): "+
			"the next holder only waits past the recorded value", "leaf_worker_clocks", id, recorded, made.end-recorded, made.end)
	}

	eventually(t, 3*ttl, "V's lease to expire", func() bool { return !leaseHeld(t, js, id) })
	b := startVendor(t, "B", with(base, "LEAF_SUBJECT_PREFIX", "b", "LEAF_TEST_CLOCK_OFFSET", "-5s"))
	if got := b.waitServing(); got != id {
		t.Fatalf("B holds worker ID %d, want V's, %d", got, id)
	}
	tb := newTally("clock behind at crash B")
	db := startLoad(t, nc, tb, loadSpec{subject: "b.snowflake", batch: 100, clients: 2, timeout: 2 * time.Second})
	// Let B's clock pass V's last ID, so any overlap has had its chance.
	eventually(t, 30*time.Second, "B's IDs to pass V's last", func() bool {
		return workerSpan(tb.snapshotIDs(), id).end > made.end
	})
	db.stop()
	tv.check(t, tb)
	checkHandover(t, tv.snapshotIDs(), tb.snapshotIDs(), id)
}

// TestRestartWithFutureTimestamp: a vendor runs with its clock ahead, stops
// cleanly, and restarts with the true clock and the same worker ID, static
// (LEAF_WORKER_ID with its file) or leased from KV. The restart waits or
// refuses; it never vends an ID at or before the first run's last. A
// leased restart, whose clock agrees with the NATS server's, waits: its
// clock is right, and the time will pass.
func TestRestartWithFutureTimestamp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		static bool
		offset string
		serve  bool // must serve after waiting, not refuse
	}{
		{"static ID 20s ahead", true, "20s", false},
		// Past the claim's longest wait (10s) at the restart: the claim
		// fails, and the vendor claims again until its clock is past.
		{"KV lease 15s ahead", false, "15s", true},
		{"KV lease 2s ahead", false, "2s", true}, // within the TTL: the claim waits
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on a server of its own, mostly waiting
			const id = 5
			nats := startNATS(t)
			// Without the check of the clock against the server's, which
			// would refuse the first run: the timestamps must hold alone.
			env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_LEASE_TTL": "3s", "LEAF_CLOCK_MAX_SKEW": "0"}
			if tc.static {
				env = with(env, "LEAF_WORKER_ID", "5", "LEAF_WORKER_FILE", filepath.Join(t.TempDir(), "worker-5.last"))
			} else {
				fillWorkerIDs(t, nats.js(t), 3*time.Second, id)
				env = with(env, "LEAF_WORKER_ID_RANGE", fillRange)
			}
			restartAfterFuture(t, nats.conn(t), tc.name, env, id, tc.offset, tc.serve)
		})
	}
}

func restartAfterFuture(t *testing.T, nc *nats.Conn, name string, env map[string]string, id int, offset string, mustServe bool) {
	first := startVendor(t, "first", with(env, "LEAF_TEST_CLOCK_OFFSET", offset))
	if got := first.waitServing(); got != id {
		t.Fatalf("first run holds worker ID %d, want %d", got, id)
	}
	before := newTally("future timestamp, " + name)
	for range 20 {
		before.request(nc, "leaf.snowflake", 100, 5*time.Second)
	}
	if code := first.stop(30 * time.Second); code != 0 {
		t.Fatalf("first run exited %d after SIGTERM", code)
	}
	last := workerSpan(before.snapshotIDs(), id).end

	second := newVendor(t, "second", env)
	second.start()
	if _, err := second.awaitLog(servingLine, 60*time.Second); err != nil {
		code := second.wait(10 * time.Second)
		msg := second.tail(3)
		if code == 0 || !strings.Contains(msg, "clock") || mustServe {
			t.Errorf("second run did not serve (exit %d):\n%s", code, msg)
		}
		t.Logf("second run refused (exit %d): %s", code, lastLine(msg))
		before.check(t)
		return
	}
	after := newTally("future timestamp, second run")
	for range 20 {
		after.request(nc, "leaf.snowflake", 100, 5*time.Second)
	}
	waited := workerSpan(after.snapshotIDs(), id)
	t.Logf("second run served from %s, the first run's last ID was at %s",
		time.UnixMilli(waited.first).UTC().Format(time.StampMilli), time.UnixMilli(last).UTC().Format(time.StampMilli))
	before.check(t, after)
	checkHandover(t, before.snapshotIDs(), after.snapshotIDs(), id)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
