package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
)

// A worker ID whose last timestamp was written over with a value no vendor
// writes is passed over by claims, listed by `cluster workers`, and
// claimable again after `cluster reset-worker`; a plausible one is kept
// unless forced.
func TestResetWorker(t *testing.T) {
	s := natstest.Server(t)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_WORKER_ID_RANGE", "7-7")
	stop, _ := startVendor(t, nil)
	stop() // worker ID 7 released, its last timestamp recorded
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	clocks, err := js.KeyValue(ctx, kv.ClocksBucket)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := command(t, "cluster", "reset-worker", "7"); code != 1 || !strings.Contains(out, "not corrupt") {
		t.Fatalf("reset of a plausible timestamp: exit %d: %s", code, out)
	}
	if _, err := clocks.Put(ctx, "worker.7", []byte("1862213154793730049")); err != nil {
		t.Fatal(err)
	}
	code, out := command(t, "cluster", "workers")
	if code != 0 || !strings.Contains(out, "year 2248") || !strings.Contains(out, "reset-worker") {
		t.Fatalf("cluster workers: exit %d: %s", code, out)
	}
	if code, out := command(t, "cluster", "reset-worker", "7"); code != 0 || !strings.Contains(out, "1862213154793730049") {
		t.Fatalf("reset-worker 7: exit %d: %s", code, out)
	}
	e, err := clocks.Get(ctx, "worker.7")
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := kv.ParseClock(e.Value())
	if err != nil || time.Until(time.UnixMilli(ms)) > time.Minute {
		t.Fatalf("after the reset the record is %q (%v)", e.Value(), err)
	}
	_, logs := startVendor(t, nil)
	if !strings.Contains(logs.String(), "worker_id=7") {
		t.Fatalf("worker ID 7 not claimed after the reset:\n%s", logs.String())
	}
}

// reset-worker takes only the worker IDs of the cluster's layout: 16 is
// not one of a js53 cluster's (0-15).
func TestResetWorkerWithinTheLayout(t *testing.T) {
	s := natstest.Server(t)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_SNOWFLAKE_LAYOUT", "js53")
	stop, _ := startVendor(t, nil)
	stop() // the contract records js53
	if code, out := command(t, "cluster", "reset-worker", "16"); code != 1 || !strings.Contains(out, "js53 has worker IDs 0-15") {
		t.Fatalf("reset-worker 16 in a js53 cluster: exit %d: %s", code, out)
	}
}
