package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/pgtest"
)

// startVendors starts n vendors at once with env and waits until all serve.
func startVendors(t testing.TB, prefix string, n int, env map[string]string) []*vendor {
	t.Helper()
	vs := make([]*vendor, n)
	for i := range vs {
		vs[i] = newVendor(t, fmt.Sprintf("%s%d", prefix, i+1), env)
		vs[i].start()
	}
	for _, v := range vs {
		v.waitServing()
	}
	return vs
}

// TestKillNineUnderLoad: three vendors share the queue group under
// snowflake and segment load, in text and in ranges (segment batches larger
// than a step too); one at a time is killed with SIGKILL and restarted.
// Requests lost with a killed vendor are counted, not failures.
func TestKillNineUnderLoad(t *testing.T) {
	nats := startNATS(t)
	env := map[string]string{
		"LEAF_NATS_URL":         nats.url(),
		"LEAF_POSTGRES_URL":     pgtest.DSN(t),
		"LEAF_WORKER_LEASE_TTL": "3s",
	}
	vendorCommand(t, env, "tags", "add", "e2e", "-step", "10000")
	vendors := startVendors(t, "v", 3, env)

	nc := nats.conn(t)
	sf, seg, stopLoad := startMixedLoad(t, nc, "kill-9", loadSpec{batch: 1000, clients: 3, timeout: 3 * time.Second})
	sfr, segr := newTally("kill-9 snowflake ranges"), newTally("kill-9 segment ranges")
	sfrLoad := startLoad(t, nc, sfr, loadSpec{subject: "leaf.snowflake", batch: 10000, ranges: true, clients: 1, timeout: 3 * time.Second})
	segrLoad := startLoad(t, nc, segr, loadSpec{subject: "leaf.segment.e2e", batch: 25000, ranges: true, clients: 1, timeout: 3 * time.Second})

	target, minKills := scaled(1_000_000), scaled(4)
	deadline := time.Now().Add(scaled(4 * time.Minute))
	tick := time.NewTicker(1500 * time.Millisecond) // the fault schedule
	defer tick.Stop()
	kills := 0
	for {
		nsf, _ := sf.counts()
		nseg, _ := seg.counts()
		if kills >= minKills && nsf >= target && nseg >= target {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d kills: %d snowflake and %d segment IDs, want %d of each", kills, nsf, nseg, target)
		}
		<-tick.C
		v := vendors[kills%len(vendors)]
		v.kill()
		v.start()
		v.waitServing()
		kills++
	}
	sf.waitOK(t, 20, 30*time.Second, "after the last restart")
	seg.waitOK(t, 20, 30*time.Second, "after the last restart")
	stopLoad()
	sfrLoad.stop()
	segrLoad.stop()
	t.Logf("%d vendors killed with SIGKILL and restarted", kills)
	sf.check(t, sfr)
	seg.check(t, segr)
}
