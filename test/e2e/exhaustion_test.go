package e2e

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
)

// TestWorkerIDExhaustion claims all 1,024 worker IDs from eight goroutines
// at once, then one more: that one must fail with kv.ErrNoFreeWorkerID, and
// no ID may be handed out twice.
func TestWorkerIDExhaustion(t *testing.T) {
	start := time.Now()
	js := startNATS(t).js(t)
	ctx := context.Background()
	cfg := kv.LeaseConfig{TTL: 10 * time.Minute, Holder: "e2e exhaustion"}
	createLeaseBuckets(t, js, cfg.TTL, 1)

	const claimants = 8
	var (
		mu    sync.Mutex
		got   []int
		fails []error
		wg    sync.WaitGroup
	)
	for range claimants {
		wg.Go(func() {
			for range (snowflake.MaxWorkerID + 1) / claimants {
				l, err := kv.Claim(ctx, kv.Plain(js), cfg)
				mu.Lock()
				if err != nil {
					fails = append(fails, err)
				} else {
					got = append(got, l.ID())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range fails[:min(len(fails), 3)] {
		t.Errorf("claim failed while IDs were free: %v", err)
	}
	slices.Sort(got)
	shared := len(got) - len(slices.Compact(slices.Clone(got)))
	if shared > 0 {
		t.Errorf("%d worker IDs were claimed twice", shared)
	}
	if len(got) != snowflake.MaxWorkerID+1 {
		t.Errorf("%d claims succeeded, want %d", len(got), snowflake.MaxWorkerID+1)
	}
	_, err := kv.Claim(ctx, kv.Plain(js), cfg)
	if !errors.Is(err, kv.ErrNoFreeWorkerID) {
		t.Fatalf("claim 1,025: %v, want kv.ErrNoFreeWorkerID", err)
	}
	if !strings.Contains(err.Error(), "stop some workers") {
		t.Errorf("claim 1,025: %q does not say what to do", err)
	}
	report(t, "worker-ID exhaustion: claims=%d distinct=%d shared=%d claim-1025=%q elapsed=%v",
		len(got)+len(fails), len(got)-shared, shared, err, time.Since(start).Round(100*time.Millisecond))
}

// TestConcurrentFirstStarts starts 20 vendors at once on a fresh server:
// they race to create the buckets and claim IDs, and must all end up with
// distinct worker IDs, each holding one lease key, each vending with it.
// The TTL is long enough for 20 processes starting at once on two cores to
// renew in time.
func TestConcurrentFirstStarts(t *testing.T) {
	start := time.Now()
	nats := startNATS(t)
	n := scaled(20)
	vendors := startVendors(t, "v", n, map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_WORKER_LEASE_TTL": "6s"})

	logged := map[int]string{}
	for _, v := range vendors {
		id := v.waitServing()
		if other, ok := logged[id]; ok {
			t.Errorf("vendors %s and %s both hold worker ID %d", other, v.name, id)
		}
		logged[id] = v.name
	}
	leases, err := nats.js(t).KeyValue(context.Background(), kv.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := leases.Keys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		id, err := strconv.Atoi(strings.TrimPrefix(k, "worker."))
		if err != nil || logged[id] == "" {
			t.Errorf("lease key %q belongs to no vendor", k)
		}
	}
	if len(keys) != len(logged) {
		t.Errorf("%d lease keys for %d vendors", len(keys), len(logged))
	}

	tl := newTally("concurrent first starts")
	nc := nats.conn(t)
	seen := map[int]bool{}
	for range 50 * n {
		ids, _ := tl.request(nc, "leaf.snowflake", 10, 5*time.Second)
		for _, id := range ids {
			p, _ := snowflake.Decode(id, snowflake.DefaultEpoch)
			if logged[p.WorkerID] == "" {
				t.Errorf("ID %d is from worker ID %d, which no vendor holds", id, p.WorkerID)
			}
			seen[p.WorkerID] = true
		}
	}
	tl.check(t)
	report(t, "concurrent first starts: vendors=%d distinct-worker-ids=%d lease-keys=%d worker-ids-seen-in-ids=%d elapsed=%v",
		n, len(logged), len(keys), len(seen), time.Since(start).Round(100*time.Millisecond))
}
