package kv

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natstest"
)

func TestContractRecordGetReplace(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	cs, err := OpenContracts(ctx, newJS(t, s), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cs.Get(ctx); !errors.Is(err, ErrNoContract) {
		t.Fatalf("Get of a new bucket: %v, want ErrNoContract", err)
	}
	first := Contract{Epoch: 1288834974657, Layout: "1+41+10+12", WorkerIDs: "0-1023", Segments: "postgres:a", By: "one"}
	got, rev, err := cs.Record(ctx, first)
	if err != nil || got != first {
		t.Fatalf("Record = %+v, %v", got, err)
	}
	// A second vendor's Record returns the contract in force, not its own.
	second := first
	second.Epoch, second.By = 1600000000000, "two"
	got, rev2, err := cs.Record(ctx, second)
	if err != nil || got.Epoch != first.Epoch || rev2 != rev {
		t.Fatalf("second Record = %+v (rev %d), %v; want the first one (rev %d)", got, rev2, err, rev)
	}
	diff := got.Diff(second)
	if len(diff) != 1 || diff[0].Term != "epoch" || diff[0].Recorded != "1288834974657" || diff[0].Wanted != "1600000000000" {
		t.Fatalf("Diff = %+v, want the epoch with both values", diff)
	}
	// Replace is compare-and-set on the revision.
	changed := first
	changed.Segments = "jetstream-kv:b"
	if _, err := cs.Replace(ctx, changed, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Replace(ctx, first, rev); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("Replace with a stale revision: %v, want ErrKeyRevisionMismatch", err)
	}
	if c, _, err := cs.Get(ctx); err != nil || c.Segments != "jetstream-kv:b" {
		t.Fatalf("Get after Replace = %+v, %v", c, err)
	}
}
