package segment_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leaf-nats/leaf/segment"
)

// strictStore has a strict tag "ledger" and a normal tag "order".
func strictStore(step int64) *fakeStore {
	f := newFakeStore(step, "order")
	f.rows["ledger"] = segment.Row{Tag: "ledger", MaxID: 1, Step: step, Strict: true}
	return f
}

// takeStrict is TakeStrict that fails the test on error and returns the
// first and last ID.
func takeStrict(t *testing.T, a *segment.Allocator, tag string, n int64) (first, last int64) {
	t.Helper()
	rs, err := a.TakeStrict(context.Background(), tag, nil, n)
	if err != nil {
		t.Fatalf("TakeStrict(%q, %d): %v", tag, n, err)
	}
	return rs[0].First, rs[len(rs)-1].Last()
}

// A strict tag is served only through the strict calls, and a normal one
// only through the others.
func TestStrictTagsHaveTheirOwnCalls(t *testing.T) {
	a := open(t, strictStore(10), segment.Options{})
	ctx := context.Background()
	if _, err := a.TakeRanges(ctx, "ledger", nil, 1); !errors.Is(err, segment.ErrStrict) {
		t.Fatalf("TakeRanges of a strict tag: %v, want ErrStrict", err)
	}
	if _, _, err := a.TryTakeRanges("ledger", nil, 1); !errors.Is(err, segment.ErrStrict) {
		t.Fatalf("TryTakeRanges of a strict tag: %v, want ErrStrict", err)
	}
	if _, err := a.TakeStrict(ctx, "order", nil, 1); !errors.Is(err, segment.ErrNotStrict) {
		t.Fatalf("TakeStrict of a normal tag: %v, want ErrNotStrict", err)
	}
	if first, _ := takeStrict(t, a, "ledger", 3); first != 1 {
		t.Fatalf("first strict ID %d, want 1", first)
	}
	if st := status(t, a, "ledger"); !st.Strict {
		t.Fatalf("status of ledger: %+v, want strict", st)
	}
}

// After Restart the next IDs come from a segment allocated after it, above
// every ID buffered before: what a new leader needs.
func TestRestartServesFromANewSegment(t *testing.T) {
	f := strictStore(10)
	a := open(t, f, segment.Options{})
	_, last := takeStrict(t, a, "ledger", 2) // a segment of 10, the next preloading
	nextReady(t, a, "ledger")
	f.set(func(f *fakeStore) { // another leader took segments meanwhile
		r := f.rows["ledger"]
		r.MaxID += 1000
		f.rows["ledger"] = r
	})
	a.Restart("ledger")
	first, _ := takeStrict(t, a, "ledger", 1)
	if first <= last || first < 1021 {
		t.Fatalf("after Restart: %d; want above %d and above the store's max_id before Restart (1021)", first, last)
	}
}

// A batch larger than a load is allocated for itself; for a strict tag the
// buffers, below it, are dropped, so the next IDs are above the batch.
func TestStrictBatchDropsTheBuffers(t *testing.T) {
	a := open(t, strictStore(10), segment.Options{})
	takeStrict(t, a, "ledger", 2)
	nextReady(t, a, "ledger")
	_, bigLast := takeStrict(t, a, "ledger", 1000)
	if first, _ := takeStrict(t, a, "ledger", 1); first <= bigLast {
		t.Fatalf("after a batch ending at %d the next ID is %d", bigLast, first)
	}
	// A normal tag keeps its buffers: the next ID is below the batch.
	take(t, a, "order", 2)
	nextReady(t, a, "order")
	big := take(t, a, "order", 1000)
	if next := take(t, a, "order", 1)[0]; next >= big[0] {
		t.Fatalf("a normal tag dropped its buffers: %d after a batch from %d", next, big[0])
	}
}

// A tag switched in the store is served the new way once the allocator
// sees it, and nothing buffered the old way is served.
func TestModeSwitchDropsTheBuffers(t *testing.T) {
	f := strictStore(10)
	a := open(t, f, segment.Options{})
	ids := take(t, a, "order", 2)
	nextReady(t, a, "order")
	f.set(func(f *fakeStore) {
		r := f.rows["order"]
		r.Strict = true
		f.rows["order"] = r
	})
	// The buffers still serve until the allocator learns of the switch;
	// a load is where it does.
	for {
		_, err := a.TakeRanges(context.Background(), "order", nil, 5)
		if errors.Is(err, segment.ErrStrict) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if first, _ := takeStrict(t, a, "order", 1); first <= ids[1]+10 {
		t.Fatalf("strict after the switch from %d; buffered normal IDs were up to %d", first, ids[1]+10)
	}
}
