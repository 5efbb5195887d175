package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

// TestWorkerIDExhaustion claims every worker ID of a range (the top 128,
// up to snowflake.MaxWorkerID) from eight goroutines at once, then one
// more: that one must fail with kv.ErrNoFreeWorkerID, no ID may be handed
// out twice, and every one must be of the range. Then the other 896 are
// held too, and a claim of any worker ID, which lists all 1,024 held keys,
// fails the same way. (A claim lists the held keys and reads each: 1,024
// claims one by one would cost half a million reads.)
func TestWorkerIDExhaustion(t *testing.T) {
	start := time.Now()
	js := startNATS(t).js(t)
	ctx := context.Background()
	ids := workerid.Range{First: snowflake.MaxWorkerID - 127, Last: snowflake.MaxWorkerID}
	cfg := kv.LeaseConfig{TTL: 10 * time.Minute, Holder: "e2e exhaustion", IDs: &ids}
	leases := createLeaseBuckets(t, js, cfg.TTL, 1)

	const claimants = 8
	var (
		mu    sync.Mutex
		got   []int
		fails []error
		wg    sync.WaitGroup
	)
	for range claimants {
		wg.Go(func() {
			for range ids.Size() / claimants {
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
	if len(got) != ids.Size() {
		t.Errorf("%d claims succeeded, want %d", len(got), ids.Size())
	}
	if len(got) > 0 && (!ids.Contains(got[0]) || !ids.Contains(got[len(got)-1])) {
		t.Errorf("claims of %s got worker IDs %d to %d", ids, got[0], got[len(got)-1])
	}
	_, err := kv.Claim(ctx, kv.Plain(js), cfg)
	checkNoFree(t, fmt.Sprintf("claim %d of %s", ids.Size()+1, ids), err)
	for id := range ids.First {
		if _, err := leases.Create(ctx, workerKey(id), []byte(`{"holder":"e2e filler"}`)); err != nil {
			t.Fatalf("hold worker ID %d: %v", id, err)
		}
	}
	cfg.IDs = nil
	_, errAll := kv.Claim(ctx, kv.Plain(js), cfg)
	checkNoFree(t, "claim 1,025 of all", errAll)
	report(t, "worker-ID exhaustion: IDs %s, claims=%d distinct=%d shared=%d claim-%d=%q; all 1,024 held, claim-1,025=%q elapsed=%v",
		ids, len(got)+len(fails), len(got)-shared, shared, ids.Size()+1, err, errAll, time.Since(start).Round(100*time.Millisecond))
}

// checkNoFree checks that a claim failed with kv.ErrNoFreeWorkerID, saying
// what to do.
func checkNoFree(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, kv.ErrNoFreeWorkerID) {
		t.Fatalf("%s: %v, want kv.ErrNoFreeWorkerID", what, err)
	}
	if !strings.Contains(err.Error(), "stop some workers") {
		t.Errorf("%s: %q does not say what to do", what, err)
	}
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
