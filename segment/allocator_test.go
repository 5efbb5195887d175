package segment_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/segment"
)

func TestOpenInvalidOptions(t *testing.T) {
	store := newFakeStore(10)
	tests := []struct {
		name string
		opt  segment.Options
		want string
	}{
		{"no store", segment.Options{}, "Store is nil"},
		{"negative refresh", segment.Options{Store: store, Refresh: -1}, "Refresh"},
		{"negative negative TTL", segment.Options{Store: store, NegativeTTL: -1}, "NegativeTTL"},
		{"negative wait", segment.Options{Store: store, Wait: -1}, "Wait"},
		{"negative load timeout", segment.Options{Store: store, LoadTimeout: -1}, "LoadTimeout"},
		{"negative max step", segment.Options{Store: store, MaxStep: -1}, "MaxStep"},
		{"negative rate limit", segment.Options{Store: store, RateLimit: -1}, "RateLimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := segment.Open(context.Background(), tt.opt)
			if err == nil {
				a.Close(context.Background())
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestTakeFreshTagStartsAtOne(t *testing.T) {
	a := open(t, newFakeStore(1000, "order"), segment.Options{})
	if ids := take(t, a, "order", 3); !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Fatalf("first IDs = %v, want [1 2 3]", ids)
	}
}

func TestPreloadAtTenPercent(t *testing.T) {
	store := newFakeStore(100, "order")
	a := open(t, store, segment.Options{})

	take(t, a, "order", 1)
	take(t, a, "order", 8) // 9 of 100 used
	if s := status(t, a, "order"); s.Loading || s.NextReady {
		t.Fatalf("next segment requested at 9%% used: %+v", s)
	}
	take(t, a, "order", 1) // 10 used
	if s := status(t, a, "order"); !s.Loading && !s.NextReady {
		t.Fatalf("next segment not requested at 10%% used: %+v", s)
	}
	nextReady(t, a, "order")
	take(t, a, "order", 50)
	if got := len(store.allocSteps()); got != 2 {
		t.Fatalf("store Alloc calls = %d, want 2 (first load and one preload)", got)
	}
}

func TestDynamicStep(t *testing.T) {
	clock := newFakeClock()
	store := newFakeStore(100, "order")
	a := open(t, store, segment.Options{Now: clock.Now, MaxStep: 800})

	all := take(t, a, "order", 1)
	// How long each segment lasts, and the step of the load that follows.
	lasted := []struct {
		d    time.Duration
		step int64
	}{
		{time.Minute, 200},
		{time.Minute, 400},
		{time.Minute, 800},
		{time.Minute, 800}, // capped at MaxStep
		{20 * time.Minute, 800},
		{40 * time.Minute, 400},
		{40 * time.Minute, 200},
		{40 * time.Minute, 100},
		{40 * time.Minute, 100}, // floored at the row's step
		{14 * time.Minute, 200},
	}
	want := []int64{0} // the first load takes the row's step
	for _, l := range lasted {
		clock.Add(l.d)
		s := status(t, a, "order")
		all = append(all, take(t, a, "order", int(s.Current.End-s.Current.Value))...)
		nextReady(t, a, "order")
		all = append(all, take(t, a, "order", 1)...)
		want = append(want, l.step)
	}
	if got := store.allocSteps(); !slices.Equal(got, want) {
		t.Fatalf("Alloc steps = %v, want %v", got, want)
	}
	if !consecutive(all, 1) {
		t.Fatalf("IDs of one allocator on a fake store are not 1, 2, 3, ...: %v", all)
	}
}

func TestTakeAcrossSwitch(t *testing.T) {
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{})
	take(t, a, "order", 1)
	nextReady(t, a, "order")
	if ids := take(t, a, "order", 15); !consecutive(ids, 2) {
		t.Fatalf("batch across a switch = %v, want 2..16", ids)
	}
	if s := status(t, a, "order"); s.Current.Start != 11 || s.Current.Value != 17 {
		t.Fatalf("after the switch current = %+v, want start 11, value 17", s.Current)
	}
	// More than a load brings: allocated for itself in one store call,
	// above the buffered IDs, which serve the next requests.
	before := len(store.allocSteps())
	ids := take(t, a, "order", 500)
	if !consecutive(ids, ids[0]) || ids[0] <= 20 {
		t.Fatalf("batch of 500 = %v..., want 500 consecutive IDs above the buffers", ids[:5])
	}
	if steps := store.allocSteps()[before:]; !slices.Contains(steps, 500) {
		t.Fatalf("store calls %v for a batch of 500, want one of step 500", steps)
	}
	if ids := take(t, a, "order", 1); ids[0] != 17 {
		t.Fatalf("after the large batch the buffers gave %v, want 17", ids)
	}
}

func TestUnknownTags(t *testing.T) {
	clock := newFakeClock()
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{Now: clock.Now, NegativeTTL: 10 * time.Second})

	_, err := a.Take(context.Background(), "invoice", nil, 1)
	if !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Take(invoice) error = %v, want ErrUnknownTag", err)
	}
	const msg = `segment: tag "invoice" not found (add it with: vendor tags add invoice)`
	if err.Error() != msg {
		t.Fatalf("error = %q, want %q", err, msg)
	}

	// 10,000 requests, half for one unknown tag, half for distinct ones:
	// the first costs one read per NegativeTTL, the others one read each
	// up to the lookup budget (100 at once, the fake clock stands still),
	// then a 503 that costs the store nothing. Never a list.
	var unknown, unavailable atomic.Int64
	flood := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for g := range 100 {
			wg.Go(func() {
				for i := range 100 {
					tag := "nope"
					if i%2 == 1 {
						tag = fmt.Sprintf("nope-%d-%d", g, i)
					}
					_, err := a.Take(context.Background(), tag, nil, 1)
					switch {
					case errors.Is(err, segment.ErrUnknownTag):
						unknown.Add(1)
					case errors.Is(err, segment.ErrUnavailable):
						unavailable.Add(1)
					default:
						errs <- fmt.Errorf("Take(%s) error = %v, want ErrUnknownTag or ErrUnavailable", tag, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	flood()
	reads := store.tagReads()
	if reads > 100 || store.listCalls() != 1 {
		t.Fatalf("10,000 requests for unknown tags: %d tag reads and %d lists, want at most 100 reads and Open's one list", reads, store.listCalls())
	}
	if unknown.Load() < 5000 {
		t.Fatalf("%d answered unknown, want at least the 5,000 for the tag read once; %d unavailable", unknown.Load(), unavailable.Load())
	}
	if got := len(store.allocSteps()); got != 0 {
		t.Fatalf("unknown tags made %d Alloc calls", got)
	}

	// A tag added to the store is found, by one read, once the store's
	// "no" is older than NegativeTTL.
	clock.Add(10 * time.Second)
	store.set(func(f *fakeStore) { f.rows["invoice"] = segment.Row{Tag: "invoice", MaxID: 1, Step: 10} })
	take(t, a, "invoice", 1)
	before := store.tagReads()
	take(t, a, "invoice", 1)
	if store.tagReads() != before {
		t.Fatal("a tag found was read from the store again")
	}
}

func TestInvalidRequests(t *testing.T) {
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{})
	tests := []struct {
		name string
		tag  string
		n    int
		want error
	}{
		{"wildcard tag", "order.*", 1, segment.ErrInvalidTag},
		{"empty tag", "", 1, segment.ErrInvalidTag},
		{"zero count", "order", 0, nil},
		{"negative count", "order", -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []int64{7}
			got, err := a.Take(context.Background(), tt.tag, dst, tt.n)
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Take error = %v, want %v", err, tt.want)
			}
			if !slices.Equal(got, dst) {
				t.Fatalf("Take changed dst to %v", got)
			}
			if _, ok, err := a.TryTake(tt.tag, dst, tt.n); ok || err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("TryTake ok = %v, error = %v, want %v", ok, err, tt.want)
			}
		})
	}
	if got := len(store.allocSteps()); got != 0 {
		t.Fatalf("invalid requests made %d Alloc calls", got)
	}
}

func TestStoreDownAtOpen(t *testing.T) {
	clock := newFakeClock()
	store := newFakeStore(10, "order")
	boom := errors.New("connection refused")
	store.set(func(f *fakeStore) { f.err = boom })
	a := open(t, store, segment.Options{Now: clock.Now})

	if _, err := a.Take(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrUnavailable) || !errors.Is(err, boom) {
		t.Fatalf("Take with the store down = %v, want ErrUnavailable wrapping %v", err, boom)
	}
	store.set(func(f *fakeStore) { f.err = nil })
	clock.Add(time.Second) // past the retry backoff
	take(t, a, "order", 1)
}

func TestUnavailable(t *testing.T) {
	boom := errors.New("connection refused")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name  string
		fail  func(f *fakeStore)
		ctx   context.Context
		wait  time.Duration
		wants []error
	}{
		{"store fails", func(f *fakeStore) { f.err = boom }, context.Background(), time.Hour, []error{segment.ErrUnavailable, boom}},
		{"store hangs past Wait", func(f *fakeStore) { f.hang = true }, context.Background(), 20 * time.Millisecond, []error{segment.ErrUnavailable}},
		{"store hangs, request cancelled", func(f *fakeStore) { f.hang = true }, cancelled, time.Hour, []error{segment.ErrUnavailable, context.Canceled}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore(10, "order")
			a := open(t, store, segment.Options{Wait: tt.wait})
			take(t, a, "order", 10) // the first segment, used up
			nextReady(t, a, "order")
			store.set(tt.fail)
			s := status(t, a, "order")
			take(t, a, "order", int(s.Next.End-s.Next.Start)) // and the preloaded one
			dst := []int64{7}
			got, err := a.Take(tt.ctx, "order", dst, 1)
			for _, want := range tt.wants {
				if !errors.Is(err, want) {
					t.Fatalf("Take error = %v, want it to wrap %v", err, want)
				}
			}
			if !slices.Equal(got, dst) {
				t.Fatalf("failed Take returned %v, want dst unchanged", got)
			}
		})
	}
}

func TestServesFromBuffersWhileStoreDown(t *testing.T) {
	clock := newFakeClock()
	store := newFakeStore(100, "order")
	a := open(t, store, segment.Options{Now: clock.Now})

	issued := take(t, a, "order", 10)
	nextReady(t, a, "order")
	store.set(func(f *fakeStore) { f.err = errors.New("connection refused") })

	s := status(t, a, "order")
	buffered := int(s.Current.End - s.Current.Value + s.Next.End - s.Next.Value)
	// A batch larger than the buffers fails and leaves them for smaller ones.
	if _, err := a.Take(context.Background(), "order", nil, buffered+1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("batch of %d with %d buffered and the store down = %v, want ErrUnavailable", buffered+1, buffered, err)
	}
	issued = append(issued, take(t, a, "order", buffered)...)
	if _, err := a.Take(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Take with the store down and buffers empty = %v, want ErrUnavailable", err)
	}

	store.set(func(f *fakeStore) { f.err = nil })
	clock.Add(time.Second)
	issued = append(issued, take(t, a, "order", 5)...)
	if !slices.IsSorted(issued) || len(slices.Compact(slices.Clone(issued))) != len(issued) {
		t.Fatalf("IDs across the outage are not unique and ascending")
	}
	if s := status(t, a, "order"); s.LoadFailures == 0 || s.LastError != nil {
		t.Fatalf("status after recovery = %+v, want failures counted and no last error", s)
	}
}

// A batch larger than both buffers, with the next segment ready and the
// store healthy, is served across as many loads as it needs.
func TestBatchLargerThanBothBuffers(t *testing.T) {
	store := newFakeStore(100, "order")
	a := open(t, store, segment.Options{})
	issued := take(t, a, "order", 10)
	nextReady(t, a, "order")
	issued = append(issued, take(t, a, "order", 400)...) // 90 + 200 buffered (the step doubled)
	if !slices.IsSorted(issued) || len(slices.Compact(slices.Clone(issued))) != len(issued) || len(issued) != 410 {
		t.Fatalf("IDs not unique and ascending: %d of them", len(issued))
	}
}

func TestFailedBatchLeavesDstUnchanged(t *testing.T) {
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{})
	take(t, a, "order", 1)
	store.set(func(f *fakeStore) { f.err = errors.New("connection refused") })
	dst := []int64{7}
	got, err := a.Take(context.Background(), "order", dst, 50)
	if !errors.Is(err, segment.ErrUnavailable) || !slices.Equal(got, dst) {
		t.Fatalf("Take = %v, %v; want [7] and ErrUnavailable", got, err)
	}
}

func TestTryTake(t *testing.T) {
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{Now: newFakeClock().Now}) // the clock stands still
	dst := []int64{7}

	// The first load is a wait: not ok, nothing consumed.
	if got, ok, err := a.TryTake("order", dst, 1); ok || err != nil || !slices.Equal(got, dst) {
		t.Fatalf("TryTake before the first load = %v, %v, %v; want [7], false, nil", got, ok, err)
	}
	if ids := take(t, a, "order", 1); ids[0] != 1 {
		t.Fatalf("Take after a refused TryTake = %v, want [1]", ids)
	}
	nextReady(t, a, "order")
	got, ok, err := a.TryTake("order", dst, 12)
	if !ok || err != nil || got[0] != 7 || !consecutive(got[1:], 2) {
		t.Fatalf("TryTake across the switch = %v, %v, %v; want [7 2 ... 13]", got, ok, err)
	}
	// More than both buffers hold: not ok, nothing consumed.
	s := status(t, a, "order")
	if got, ok, err := a.TryTake("order", nil, 1000); ok || err != nil || len(got) != 0 {
		t.Fatalf("TryTake of 1000 = %v, %v, %v; want nothing, false, nil", got, ok, err)
	}
	if ids := take(t, a, "order", 1); ids[0] != s.Current.Value {
		t.Fatalf("Take after a refused TryTake = %v, want %d: the refusal consumed IDs", ids, s.Current.Value)
	}
	// An uncached tag is looked up in the store a few times (it may have
	// just been added), then answered from the fresh list at once.
	for range 10 {
		if _, err := a.Take(context.Background(), "invoice", nil, 1); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("Take(unknown) = %v, want ErrUnknownTag", err)
		}
	}
	if _, ok, err := a.TryTake("invoice", nil, 1); ok || !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("TryTake(unknown) = %v, %v; want ErrUnknownTag", ok, err)
	}
}

func TestCloseWaitsForLoads(t *testing.T) {
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{Wait: time.Hour})
	store.set(func(f *fakeStore) { f.hang = true })

	done := make(chan error, 1)
	go func() {
		_, err := a.Take(context.Background(), "order", nil, 1)
		done <- err
	}()
	testtool.Eventually(t, 10*time.Second, "the load to reach the store", func() bool { return store.running() == 1 })
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := store.running(); n != 0 {
		t.Fatalf("%d store calls still running after Close", n)
	}
	if err := <-done; !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Take interrupted by Close = %v, want ErrUnavailable", err)
	}
	if _, err := a.Take(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Take after Close = %v, want ErrUnavailable", err)
	}
}

func TestRefreshFollowsStore(t *testing.T) {
	store := newFakeStore(10, "a", "b")
	a := open(t, store, segment.Options{Refresh: time.Millisecond})
	take(t, a, "a", 1)
	take(t, a, "b", 1)
	store.set(func(f *fakeStore) {
		delete(f.rows, "b")
		f.rows["c"] = segment.Row{Tag: "c", MaxID: 1, Step: 10}
	})
	// Known tags get a buffer once asked for: c is known but not listed
	// in the snapshot until then.
	testtool.Eventually(t, 10*time.Second, "the refresh to drop b and add c", func() bool {
		var tags []string
		for _, s := range a.Snapshot() {
			tags = append(tags, s.Tag)
		}
		return slices.Equal(tags, []string{"a"}) && a.Known() == 2
	})
	take(t, a, "c", 1)
	if _, err := a.Take(context.Background(), "b", nil, 1); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Take of a tag dropped from the store = %v, want ErrUnknownTag", err)
	}
}

func TestDeletedTagIsDropped(t *testing.T) {
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{})
	take(t, a, "order", 1)
	nextReady(t, a, "order") // [11, 31)
	store.set(func(f *fakeStore) { delete(f.rows, "order") })
	take(t, a, "order", 11) // 10% into the next segment: a preload, which finds no row
	testtool.Eventually(t, 10*time.Second, "the deleted tag to leave the cache", func() bool {
		for _, s := range a.Snapshot() {
			if s.Tag == "order" {
				return false
			}
		}
		return true
	})
	if _, err := a.Take(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Take of a deleted tag = %v, want ErrUnknownTag", err)
	}
}

func TestSnapshot(t *testing.T) {
	a := open(t, newFakeStore(100, "order", "invoice"), segment.Options{})
	take(t, a, "order", 20)
	nextReady(t, a, "order")
	got := a.Snapshot()
	if len(got) != 1 || got[0].Tag != "order" || a.Known() != 2 {
		t.Fatalf("Snapshot tags = %+v of %d known, want order (invoice is known, never asked for)", got, a.Known())
	}
	s := got[0]
	want := segment.TagStatus{
		Tag:       "order",
		Current:   segment.Segment{Start: 1, Value: 21, End: 101},
		Next:      segment.Segment{Start: 101, Value: 101, End: 301},
		NextReady: true,
		Step:      200,
		MinStep:   100,
		Loads:     2,
		High:      301,
		Allocated: 300,
	}
	s.LastLoad, s.LastLoadTook = time.Time{}, 0
	if s != want {
		t.Fatalf("Snapshot(order) = %+v, want %+v", s, want)
	}
}

func TestConcurrentTakes(t *testing.T) {
	store := newFakeStore(50, "order")
	a := open(t, store, segment.Options{Now: time.Now, MaxStep: 400})
	const goroutines, perG = 16, 2000
	results := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			var ids []int64
			for len(ids) < perG {
				n := 1 + len(ids)%37
				var err error
				var ok bool
				if ids, ok, err = a.TryTake("order", ids, n); err == nil && !ok {
					ids, err = a.Take(context.Background(), "order", ids, n)
				}
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
			}
			results[g] = ids
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for g, ids := range results {
		if !slices.IsSorted(ids) {
			t.Fatalf("goroutine %d: IDs not ascending", g)
		}
		for _, id := range ids {
			if id <= 0 || seen[id] {
				t.Fatalf("ID %d is duplicate or not positive", id)
			}
			seen[id] = true
		}
	}
}

// Runs: at most two per batch from the buffers, one for a batch larger
// than a load, with the IDs Take would give.
func TestTakeRanges(t *testing.T) {
	store := newFakeStore(10, "order")
	a := open(t, store, segment.Options{})
	take(t, a, "order", 5)
	nextReady(t, a, "order")
	rs, ok, err := a.TryTakeRanges("order", nil, 10) // 6..10 and 11..15
	if err != nil || !ok || len(rs) != 2 || rs[0] != (ids.Range{First: 6, Count: 5}) || rs[1] != (ids.Range{First: 11, Count: 5}) {
		t.Fatalf("TryTakeRanges across a switch = %v, %v, %v; want [6+5 11+5]", rs, ok, err)
	}
	before := len(store.allocSteps())
	rs, err = a.TakeRanges(t.Context(), "order", rs[:0], 1_000_000_000)
	if err != nil || len(rs) != 1 || rs[0].Count != 1_000_000_000 || rs[0].First <= 15 {
		t.Fatalf("TakeRanges of 1e9 = %v, %v; want one run above the buffers", rs, err)
	}
	if steps := store.allocSteps()[before:]; !slices.Contains(steps, 1_000_000_000) {
		t.Fatalf("store calls %v, want one of 1e9", steps)
	}
	if _, _, err := a.TryTakeRanges("order", nil, 0); err == nil {
		t.Fatal("TryTakeRanges of 0 IDs succeeded")
	}
}

// A tag hands out at most RateLimit IDs a second, up to RateBurst at once,
// on every path: a take beyond it fails with ErrRateLimited and consumes
// nothing, and the budget refills with time.
func TestRateLimit(t *testing.T) {
	clock := newFakeClock()
	a := open(t, newFakeStore(100, "order"), segment.Options{Now: clock.Now, RateLimit: 1000, RateBurst: 2000})
	take(t, a, "order", 1500) // a batch allocated for itself
	if _, err := a.Take(context.Background(), "order", nil, 600); !errors.Is(err, segment.ErrRateLimited) || !strings.Contains(err.Error(), "ask again in 100ms") {
		t.Fatalf("600 more at once: %v, want ErrRateLimited for 100ms", err)
	}
	if _, _, err := a.TryTakeRanges("order", nil, 600); !errors.Is(err, segment.ErrRateLimited) {
		t.Fatalf("TryTake of 600 more: %v, want ErrRateLimited", err)
	}
	ids := take(t, a, "order", 500) // what is left
	if _, err := a.Take(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrRateLimited) {
		t.Fatalf("one more with the budget used: %v", err)
	}
	if _, err := a.Take(context.Background(), "order", nil, 2001); !errors.Is(err, segment.ErrRateLimited) || !strings.Contains(err.Error(), "ask for at most 2000") {
		t.Fatalf("more than the burst: %v", err)
	}
	clock.Add(time.Second)
	more := take(t, a, "order", 1000)
	if more[0] <= ids[len(ids)-1] {
		t.Fatalf("after a second: %d.., want above %d", more[0], ids[len(ids)-1])
	}
}

// fakeMarks keeps marks in memory, as kv.Marks keeps them beside a store.
type fakeMarks struct {
	mu      sync.Mutex
	marks   map[string]int64
	pending []int64 // recorded, not settled
	failing bool
}

var _ segment.Marks = (*fakeMarks)(nil)

func (m *fakeMarks) Mark(_ context.Context, tag string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing {
		return 0, errors.New("marks unreachable")
	}
	return m.marks[tag], nil
}

func (m *fakeMarks) Record(_ context.Context, tag string, end int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing {
		return errors.New("marks unreachable")
	}
	m.pending = append(m.pending, end)
	return nil
}

// Settle raises the mark to an allocation that committed: a lost
// compare-and-set (fakeStore.stale) leaves no mark.
func (m *fakeMarks) Settle(tag string, end int64, committed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.Index(m.pending, end); i >= 0 {
		m.pending = slices.Delete(m.pending, i, i+1)
	}
	if committed {
		m.marks[tag] = max(m.marks[tag], end)
	}
}

// eagerMarks record a mark when asked, before the allocation commits, and
// lower it back when it settles uncommitted, as the marks in NATS do
// (kv.Marks).
type eagerMarks struct {
	*fakeMarks
	before map[int64]int64 // end recorded -> the mark before
}

func (m eagerMarks) Record(ctx context.Context, tag string, end int64) error {
	m.mu.Lock()
	if end > m.marks[tag] {
		m.before[end], m.marks[tag] = m.marks[tag], end
	}
	m.mu.Unlock()
	return m.fakeMarks.Record(ctx, tag, end)
}

func (m eagerMarks) Settle(tag string, end int64, committed bool) {
	m.mu.Lock()
	if before, ok := m.before[end]; ok && !committed && m.marks[tag] == end {
		m.marks[tag] = before
	}
	delete(m.before, end)
	m.mu.Unlock()
	m.fakeMarks.Settle(tag, end, committed)
}

// An allocation that recorded its mark and then failed (the store
// restarting under it) is settled as not committed before the next
// allocation reads the marks, which lower it back: the next allocation
// counts no rewind, and no ID repeats. A store that then does go back
// still counts.
func TestFailedAllocationIsNoRewind(t *testing.T) {
	marks := eagerMarks{&fakeMarks{marks: map[string]int64{}}, map[int64]int64{}}
	store := newFakeStore(100, "order")
	clock := newFakeClock()
	a := open(t, store, segment.Options{Marks: marks, Now: clock.Now})
	take(t, a, "order", 150)
	nextReady(t, a, "order")
	// takeUntil takes IDs one at a time, past the back-off after a failed
	// load, until done says so.
	var ids []int64
	takeUntil := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !done(); {
			if time.Now().After(deadline) {
				t.Fatalf("in 10s (%d IDs taken): %s", len(ids), what)
			}
			got, err := a.Take(context.Background(), "order", nil, 1)
			if err != nil {
				clock.Add(time.Second)
				continue
			}
			ids = append(ids, got...)
		}
	}
	// above says whether an ID above the store's max_id at was served: one
	// of a segment allocated since, whose allocation has been counted.
	rowMax := func() (n int64) { store.set(func(f *fakeStore) { n = f.rows["order"].MaxID }); return n }
	above := func(at int64) func() bool {
		return func() bool { return len(ids) > 0 && slices.Max(ids) > at }
	}
	store.set(func(f *fakeStore) { f.aborts = 1 })
	takeUntil("an allocation aborted", func() bool { var n int; store.set(func(f *fakeStore) { n = f.aborts }); return n == 0 })
	takeUntil("an ID of an allocation after the aborted one", above(rowMax()))
	if n, rw := a.Rewinds(); n != 0 {
		t.Fatalf("an allocation that failed after its mark counted as a rewind: %d, %+v", n, rw)
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if id <= 150 || seen[id] {
			t.Fatalf("ID %d again", id)
		}
		seen[id] = true
	}
	handed := rowMax()
	store.set(func(f *fakeStore) { r := f.rows["order"]; r.MaxID = 1; f.rows["order"] = r })
	takeUntil("an ID of an allocation after the store went back", above(handed))
	if n, _ := a.Rewinds(); n != 1 {
		t.Fatalf("a store that went back after a failed allocation: %d rewinds, want 1", n)
	}
}

// A store that comes back older than what was handed out is raised above
// it in the allocation that finds it: above this allocator's own segments
// without marks, above the marks with them; each time is counted.
func TestStoreThatWentBack(t *testing.T) {
	store := newFakeStore(100, "order")
	a := open(t, store, segment.Options{})
	take(t, a, "order", 150) // and the next segment preloaded
	nextReady(t, a, "order")
	var allocated int64
	store.set(func(f *fakeStore) {
		r := f.rows["order"]
		allocated, r.MaxID = r.MaxID, 1 // restored to a copy from before
		f.rows["order"] = r
	})
	ids := take(t, a, "order", 1000)
	seen := map[int64]bool{}
	for _, id := range ids {
		if id < 151 || seen[id] {
			t.Fatalf("after the store went back: ID %d again", id)
		}
		seen[id] = true
	}
	if ids[len(ids)-1] < allocated {
		t.Fatalf("IDs end at %d, below what was allocated (%d)", ids[len(ids)-1], allocated)
	}
	if n, rw := a.Rewinds(); n != 1 || rw.Store != 1 || rw.Mark != allocated || !strings.Contains(rw.String(), fmt.Sprintf("IDs up to %d were handed out", allocated-1)) {
		t.Fatalf("rewinds %d, %+v (allocated %d)", n, rw, allocated)
	}

	// A row read before another vendor's allocation committed is below what
	// was handed out too; the allocation that commits reads it again, and
	// no store went back.
	store.set(func(f *fakeStore) { f.stale = 1 })
	nextReady(t, a, "order")
	take(t, a, "order", 1000)
	if n, _ := a.Rewinds(); n != 1 {
		t.Fatalf("a compare-and-set retried over a stale read counted as a rewind: %d rewinds, want 1", n)
	}

	// Another allocator that never served the tag: only the marks know.
	marks := &fakeMarks{marks: map[string]int64{}}
	store2 := newFakeStore(100, "order")
	first := open(t, store2, segment.Options{Marks: marks})
	take(t, first, "order", 150)
	nextReady(t, first, "order") // its preload marked: the store's max_id is all handed out or marked
	var allocated2 int64
	store2.set(func(f *fakeStore) { r := f.rows["order"]; allocated2, r.MaxID = r.MaxID, 1; f.rows["order"] = r })
	fresh := open(t, store2, segment.Options{Marks: marks})
	if got := take(t, fresh, "order", 1); got[0] < allocated2 {
		t.Fatalf("a fresh allocator after the store went back starts at %d, want %d or above (the marks)", got[0], allocated2)
	}
	// Marks that cannot be read: no segment is allocated blind.
	marks.mu.Lock()
	marks.failing = true
	marks.mu.Unlock()
	third := open(t, store2, segment.Options{Marks: marks})
	if _, err := third.Take(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("with the marks unreadable: %v, want ErrUnavailable", err)
	}
}

// A tag must leave room for one segment below the largest ID: tags add and
// tags import refuse a start that leaves none, saying so.
func TestValidateRowRefusesStartsWithoutRoom(t *testing.T) {
	for _, tc := range []struct {
		start, step int64
		ok          bool
	}{
		{1, 1000, true},
		{math.MaxInt64 - 1000, 1000, true},
		{math.MaxInt64 - 999, 1000, false},
		{math.MaxInt64, 1, false},
	} {
		err := segment.ValidateRow(segment.Row{Tag: "top", MaxID: tc.start, Step: tc.step})
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "leaves no room") {
			t.Errorf("start %d, step %d: %v", tc.start, tc.step, err)
		}
	}
}

// What a tag costs a vendor (issue 23: 100,000 tags in the store, 20,000
// in use, under 100 MB): a known tag is an entry in the tag set, a tag in
// use a double buffer besides. Measured on the live heap after a GC; the
// bounds are loose, the figures are logged.
func TestMemoryPerTag(t *testing.T) {
	const known, used = 100_000, 20_000
	store := newFakeStore(1000)
	for i := range known {
		tag := fmt.Sprintf("t%06d", i)
		store.rows[tag] = segment.Row{Tag: tag, MaxID: 1, Step: 1000}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	a := open(t, store, segment.Options{})
	listed := heap()
	for i := range used {
		if _, err := a.Take(context.Background(), fmt.Sprintf("t%06d", i), nil, 1); err != nil {
			t.Fatal(err)
		}
	}
	inUse := heap()
	perKnown := float64(listed-base) / known
	perUsed := float64(inUse-listed) / used
	t.Logf("%d known tags: %.0f B each; %d in use: %.0f B more each (a segment loaded, the next preloaded)", known, perKnown, used, perUsed)
	if perKnown > 500 || perUsed > 4096 {
		t.Fatalf("a known tag costs %.0f B, a tag in use %.0f B more; want under 500 B and 4 KiB", perKnown, perUsed)
	}
	runtime.KeepAlive(a)
}

// The burst defaults to one second of the limit: a batch above it is
// refused whole, with the most one take may ask for, and a batch that
// empties the budget is followed by a 429 that says to wait at most a
// second, not hours.
func TestRateLimitDefaultBurst(t *testing.T) {
	clock := newFakeClock()
	a := open(t, newFakeStore(100, "order"), segment.Options{Now: clock.Now, RateLimit: 1000})
	var re *segment.RateError
	_, err := a.TakeRanges(context.Background(), "order", nil, 1_000_000_000)
	if !errors.As(err, &re) || re.MaxCount() != 1000 || re.RetryAfter() != 0 {
		t.Fatalf("a billion IDs with a limit of 1000/s: %v, want a RateError with MaxCount 1000 and no wait", err)
	}
	if _, err := a.TakeRanges(context.Background(), "order", nil, 1000); err != nil {
		t.Fatalf("one second's worth: %v", err)
	}
	_, err = a.TakeRanges(context.Background(), "order", nil, 500)
	if !errors.As(err, &re) || re.RetryAfter() != 500*time.Millisecond {
		t.Fatalf("500 more at once: %v, want a RateError to wait 500ms", err)
	}
	clock.Add(500 * time.Millisecond)
	if _, err := a.TakeRanges(context.Background(), "order", nil, 500); err != nil {
		t.Fatalf("500 after waiting as told: %v", err)
	}
}

// A take that hands out nothing (the store down, buffers empty) costs the
// tag's budget nothing.
func TestRateLimitRefundsFailedTakes(t *testing.T) {
	clock := newFakeClock()
	store := newFakeStore(100, "order")
	a := open(t, store, segment.Options{Now: clock.Now, RateLimit: 1000})
	store.set(func(f *fakeStore) { f.err = errors.New("store down") })
	for range 3 {
		if _, err := a.TakeRanges(context.Background(), "order", nil, 1000); !errors.Is(err, segment.ErrUnavailable) {
			t.Fatalf("with the store down: %v, want ErrUnavailable", err)
		}
	}
	store.set(func(f *fakeStore) { f.err = nil })
	clock.Add(150 * time.Millisecond) // past the failed load's retry backoff: 150 IDs of budget refill
	if _, err := a.TakeRanges(context.Background(), "order", nil, 1000); err != nil {
		t.Fatalf("the whole budget after failed takes: %v", err)
	}
	if _, err := a.TakeRanges(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrRateLimited) {
		t.Fatalf("one more: %v, want ErrRateLimited", err)
	}
}
