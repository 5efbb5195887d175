// Package segmenttest checks that a segment store behaves as the allocator
// needs, against a real server: Run is written once and run against every
// backend (segment/pgstore, kvstore.Store).
package segmenttest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/segment"
)

// Store is a client of a backend: what the allocator, `vendor tags` and
// `vendor cluster` use.
type Store = segment.AdminStore

// Backend is a store server started for one test.
type Backend struct {
	// Open returns a new client of the server, with connections of its
	// own, closed when t ends.
	Open func(t *testing.T) Store
	// Stop and Start stop the server and start it again with its data.
	// Required when the backend was asked to be restartable.
	Stop, Start func(t *testing.T)
}

// NewBackend starts a server for t; restartable asks for Stop and Start.
type NewBackend func(t *testing.T, restartable bool) Backend

// Run runs the store tests against the backends newBackend starts.
func Run(t *testing.T, newBackend NewBackend) {
	tests := []struct {
		name string
		test func(*testing.T, NewBackend)
	}{
		{"Admin", testAdmin},
		{"Alloc", testAlloc},
		{"SecondAllocatorStartsAfterFirstSegment", testSecondAllocator},
		{"RestartedAllocatorContinues", testRestart},
		{"ConcurrentAllocators", testConcurrent},
		{"StoreDownAndBack", testOutage},
		{"Identity", testIdentity},
		{"SealAndRaise", testSealAndRaise},
		{"SealRacesAllocators", testSealRace},
		{"StrictMode", testStrictMode},
		{"Floor", testFloor},
		{"Exhaustion", testExhaustion},
		{"GiveBack", testGiveBack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.test(t, newBackend) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func create(t *testing.T, s Store, r segment.Row) {
	t.Helper()
	if err := s.Create(ctx(t), r); err != nil {
		t.Fatalf("Create(%+v): %v", r, err)
	}
}

func testAdmin(t *testing.T, newBackend NewBackend) {
	s := newBackend(t, false).Open(t)
	c := ctx(t)
	if rows, err := s.List(c); err != nil || len(rows) != 0 {
		t.Fatalf("List of an empty store = %v, %v; want nothing", rows, err)
	}
	create(t, s, segment.Row{Tag: "order", Step: 1000, Description: "orders"})
	create(t, s, segment.Row{Tag: "invoice", Step: 10, MaxID: 5000})

	errs := []struct {
		name string
		err  error
		want error
	}{
		{"create duplicate", s.Create(c, segment.Row{Tag: "order", Step: 5}), segment.ErrTagExists},
		{"create bad tag", s.Create(c, segment.Row{Tag: "a b", Step: 5}), segment.ErrInvalidTag},
		{"create bad step", s.Create(c, segment.Row{Tag: "x", Step: 0}), segment.ErrInvalidStep},
		{"set step of missing", s.SetStep(c, "nope", 5), segment.ErrUnknownTag},
		{"set bad step", s.SetStep(c, "order", -5), segment.ErrInvalidStep},
		{"delete missing", s.Delete(c, "nope"), segment.ErrUnknownTag},
		{"set step", s.SetStep(c, "order", 2000), nil},
	}
	for _, e := range errs {
		if !errors.Is(e.err, e.want) || (e.want == nil) != (e.err == nil) {
			t.Errorf("%s: error %v, want %v", e.name, e.err, e.want)
		}
	}

	rows, err := s.List(c)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := []segment.Row{
		{Tag: "invoice", MaxID: 5000, Step: 10},
		{Tag: "order", MaxID: 1, Step: 2000, Description: "orders"},
	}
	for i := range rows {
		if rows[i].Updated.IsZero() {
			t.Errorf("row %s has no update time", rows[i].Tag)
		}
		rows[i].Updated = time.Time{}
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("List = %+v, want %+v", rows, want)
	}

	if err := s.Delete(c, "order"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if tags, err := s.Tags(c); err != nil || len(tags) != 1 || tags[0].Tag != "invoice" {
		t.Fatalf("Tags after Delete = %v, %v; want [invoice]", tags, err)
	}
	if r, err := s.Tag(c, "invoice"); err != nil || r.Tag != "invoice" || r.Strict {
		t.Fatalf("Tag(invoice) = %+v, %v; want the normal tag invoice", r, err)
	}
	for _, tag := range []string{"order", "never-added"} { // deleted, never there
		if r, err := s.Tag(c, tag); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("Tag(%s) = %+v, %v; want ErrUnknownTag", tag, r, err)
		}
	}
	create(t, s, segment.Row{Tag: "order", Step: 7}) // a deleted tag can come back
	checkReAdded(t, s, "invoice")
}

// checkReAdded deletes tag and adds it again: it must continue after every
// ID it handed out before, and be unknown in between.
func checkReAdded(t *testing.T, s Store, tag string) {
	c := ctx(t)
	used, err := s.Alloc(c, tag, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(c, tag); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(c, tag, 0, nil); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Alloc of a deleted tag = %v, want ErrUnknownTag", err)
	}
	create(t, s, segment.Row{Tag: tag, Step: 10})
	again, err := s.Alloc(c, tag, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first := again.MaxID - again.Step; first < used.MaxID {
		t.Fatalf("re-added tag starts at %d, below the %d it reached before its delete", first, used.MaxID)
	}
}

func testAlloc(t *testing.T, newBackend NewBackend) {
	s := newBackend(t, false).Open(t)
	c := ctx(t)
	create(t, s, segment.Row{Tag: "order", Step: 1000})
	allocs := []struct {
		step      int64
		wantMaxID int64
	}{
		{0, 1001}, // the row's step: [1, 1001)
		{0, 2001},
		{5000, 7001}, // a dynamic step: [2001, 7001)
	}
	for _, a := range allocs {
		r, err := s.Alloc(c, "order", a.step, nil)
		if err != nil || r.MaxID != a.wantMaxID || r.Step != 1000 || r.Tag != "order" {
			t.Fatalf("Alloc(order, %d) = %+v, %v; want max_id %d, step 1000", a.step, r, err, a.wantMaxID)
		}
	}
	if _, err := s.Alloc(c, "nope", 0, nil); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Alloc(nope) error = %v, want ErrUnknownTag", err)
	}
}

// allocator opens an allocator on s, closed when t ends.
func allocator(t *testing.T, s segment.Store, opt segment.Options) *segment.Allocator {
	t.Helper()
	opt.Store = s
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := segment.Open(ctx(t), opt)
	if err != nil {
		t.Fatalf("segment.Open: %v", err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

func take(t *testing.T, a *segment.Allocator, tag string, n int) []int64 {
	t.Helper()
	ids, err := a.Take(ctx(t), tag, nil, n)
	if err != nil || len(ids) != n {
		t.Fatalf("Take(%s, %d) = %d IDs, %v", tag, n, len(ids), err)
	}
	return ids
}

func testSecondAllocator(t *testing.T, newBackend NewBackend) {
	b := newBackend(t, false)
	create(t, b.Open(t), segment.Row{Tag: "order", Step: 1000})
	first := take(t, allocator(t, b.Open(t), segment.Options{}), "order", 1)
	second := take(t, allocator(t, b.Open(t), segment.Options{}), "order", 1)
	if first[0] != 1 || second[0] < 1001 {
		t.Fatalf("first IDs of two allocators = %d, %d; want 1 and >= 1001", first[0], second[0])
	}
}

func testRestart(t *testing.T, newBackend NewBackend) {
	b := newBackend(t, false)
	admin := b.Open(t)
	create(t, admin, segment.Row{Tag: "order", Step: 100})
	a := allocator(t, b.Open(t), segment.Options{})
	before := take(t, a, "order", 50) // and the next segment is loading
	waitNext(t, a, "order")
	a.Close(context.Background())

	rows, err := admin.List(ctx(t))
	if err != nil || len(rows) != 1 {
		t.Fatalf("List = %v, %v", rows, err)
	}
	after := take(t, allocator(t, b.Open(t), segment.Options{}), "order", 1)
	if after[0] < rows[0].MaxID || after[0] <= before[len(before)-1] {
		t.Fatalf("restarted allocator's first ID %d; want >= %d, the end of the last segment", after[0], rows[0].MaxID)
	}
}

// waitNext waits until tag's next segment is loaded.
func waitNext(t *testing.T, a *segment.Allocator, tag string) {
	t.Helper()
	waitFor(t, "the next segment", func() bool {
		for _, s := range a.Snapshot() {
			if s.Tag == tag {
				return s.NextReady
			}
		}
		return false
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testConcurrent runs 4 allocators, each with its own client, and 16
// goroutines on each, all on one tag: every ID is unique and positive,
// ascending per goroutine and, per allocator, in the order it issued them.
func testConcurrent(t *testing.T, newBackend NewBackend) {
	const (
		allocators = 4
		goroutines = 16
		total      = 200_000
		perG       = total / (allocators * goroutines)
	)
	b := newBackend(t, false)
	create(t, b.Open(t), segment.Row{Tag: "order", Step: 1000})

	results := make([][]int64, allocators*goroutines)
	var wg sync.WaitGroup
	for i := range allocators {
		// A small cap on the step keeps the allocators going back to
		// the store and racing each other there.
		a := allocator(t, b.Open(t), segment.Options{MaxStep: 4000, Wait: 30 * time.Second})
		// issued is the highest ID a finished Take of a returned: a Take
		// that starts later must return only higher IDs.
		var issued atomic.Int64
		for g := range goroutines {
			wg.Go(func() {
				ids := make([]int64, 0, perG)
				for len(ids) < perG {
					n := min(1+len(ids)%23, perG-len(ids))
					floor := issued.Load()
					start := len(ids)
					var err error
					if ids, err = takeAny(t, a, ids, n); err != nil {
						t.Errorf("allocator %d: %v", i, err)
						return
					}
					if got := ids[start]; got <= floor {
						t.Errorf("allocator %d issued %d after it had issued %d", i, got, floor)
						return
					}
					raise(&issued, ids[len(ids)-1])
				}
				results[i*goroutines+g] = ids
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := make(map[int64]bool, total)
	for g, ids := range results {
		for k, id := range ids {
			if id <= 0 || seen[id] {
				t.Fatalf("ID %d is duplicate or not positive", id)
			}
			if k > 0 && id <= ids[k-1] {
				t.Fatalf("goroutine %d: ID %d after %d", g, id, ids[k-1])
			}
			seen[id] = true
		}
	}
	if len(seen) != total {
		t.Fatalf("%d IDs, want %d", len(seen), total)
	}
}

// takeAny is what the NATS handler does: TryTake, then Take.
func takeAny(t *testing.T, a *segment.Allocator, dst []int64, n int) ([]int64, error) {
	ids, ok, err := a.TryTake("order", dst, n)
	if err == nil && !ok {
		return a.Take(ctx(t), "order", dst, n)
	}
	return ids, err
}

func raise(v *atomic.Int64, to int64) {
	for {
		cur := v.Load()
		if to <= cur || v.CompareAndSwap(cur, to) {
			return
		}
	}
}

// testOutage stops the server mid-run: the allocator serves what its
// buffers hold, then fails with ErrUnavailable, and once the server is back
// it serves again, with no ID twice.
func testOutage(t *testing.T, newBackend NewBackend) {
	b := newBackend(t, true)
	create(t, b.Open(t), segment.Row{Tag: "order", Step: 100})
	a := allocator(t, b.Open(t), segment.Options{Wait: 200 * time.Millisecond, LoadTimeout: time.Second})
	issued := take(t, a, "order", 10)
	waitNext(t, a, "order")

	b.Stop(t)
	s := a.Snapshot()[0]
	buffered := int(s.Current.End - s.Current.Value + s.Next.End - s.Next.Value)
	issued = append(issued, take(t, a, "order", buffered)...)
	if _, err := a.Take(ctx(t), "order", nil, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Take with the store down and buffers empty: %v, want ErrUnavailable", err)
	}

	b.Start(t)
	waitFor(t, "the allocator to recover", func() bool {
		ids, err := a.Take(ctx(t), "order", nil, 1)
		issued = append(issued, ids...)
		return err == nil
	})
	issued = append(issued, take(t, a, "order", 500)...)
	for i := 1; i < len(issued); i++ {
		if issued[i] <= issued[i-1] {
			t.Fatalf("ID %d after %d: not unique and ascending across the outage", issued[i], issued[i-1])
		}
	}
}

// testIdentity: a store keeps one identity, whoever asks; another server is
// another store.
func testIdentity(t *testing.T, newBackend NewBackend) {
	b := newBackend(t, false)
	c := ctx(t)
	first, err := b.Open(t).Info(c)
	if err != nil || first.ID == "" || first.MovedTo != "" {
		t.Fatalf("Info = %+v, %v; want an identity, not moved", first, err)
	}
	again, err := b.Open(t).Info(c)
	if err != nil || again.ID != first.ID {
		t.Fatalf("a second client's Info = %+v, %v; want identity %s", again, err, first.ID)
	}
	other, err := newBackend(t, false).Open(t).Info(c)
	if err != nil || other.ID == first.ID {
		t.Fatalf("another store's Info = %+v, %v; want an identity of its own", other, err)
	}
}

// testSealAndRaise moves a store's rows to another: the sealed store hands
// out nothing more and takes no tag; Raise carries every max_id over, live
// and retired, never lowers one, and the moved tags continue above.
func testSealAndRaise(t *testing.T, newBackend NewBackend) {
	from, to := newBackend(t, false).Open(t), newBackend(t, false).Open(t)
	c := ctx(t)
	create(t, from, segment.Row{Tag: "order", Step: 1000, Description: "orders"})
	create(t, from, segment.Row{Tag: "gone", Step: 10})
	if _, err := from.Alloc(c, "order", 0, nil); err != nil {
		t.Fatal(err)
	}
	last, err := from.Alloc(c, "gone", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := from.Delete(c, "gone"); err != nil {
		t.Fatal(err)
	}

	rows, err := from.Seal(c, "elsewhere")
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	byTag := map[string]segment.Row{}
	for _, r := range rows {
		byTag[r.Tag] = r
	}
	if r := byTag["order"]; r.MaxID != 1001 || r.Step != 1000 || r.Retired {
		t.Fatalf("sealed row of order = %+v, want max_id 1001, step 1000", r)
	}
	if r := byTag["gone"]; r.MaxID != last.MaxID || !r.Retired {
		t.Fatalf("sealed row of the deleted tag = %+v, want retired at %d", r, last.MaxID)
	}
	if _, err := from.Alloc(c, "order", 0, nil); !errors.Is(err, segment.ErrStoreMoved) {
		t.Fatalf("Alloc after Seal: %v, want ErrStoreMoved", err)
	}
	if err := from.Create(c, segment.Row{Tag: "late", Step: 5}); !errors.Is(err, segment.ErrStoreMoved) {
		t.Fatalf("Create after Seal: %v, want ErrStoreMoved", err)
	}
	if info, err := from.Info(c); err != nil || info.MovedTo != "elsewhere" || info.MovedAt.IsZero() {
		t.Fatalf("Info after Seal = %+v, %v", info, err)
	}
	if _, err := from.Seal(c, "a third store"); !errors.Is(err, segment.ErrStoreMoved) {
		t.Fatalf("Seal for another store after a Seal: %v, want ErrStoreMoved", err)
	}
	if again, err := from.Seal(c, "elsewhere"); err != nil || len(again) != len(rows) {
		t.Fatalf("Seal resumed = %d rows, %v; want %d", len(again), err, len(rows))
	}

	create(t, to, segment.Row{Tag: "order", Step: 7, MaxID: 50}) // lower: raised
	for range 2 {                                                // twice changes nothing
		for _, r := range rows {
			if err := to.Raise(c, r); err != nil {
				t.Fatalf("Raise(%+v): %v", r, err)
			}
		}
	}
	if err := to.Raise(c, segment.Row{Tag: "order", MaxID: 10, Step: 1}); err != nil { // never lowers
		t.Fatal(err)
	}
	r, err := to.Alloc(c, "order", 0, nil)
	if err != nil || r.MaxID-r.Step != 1001 {
		t.Fatalf("first segment of order after the move = %+v, %v; want it to start at 1001", r, err)
	}
	if _, err := to.Alloc(c, "gone", 0, nil); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("a retired tag is live after the move: %v", err)
	}
	create(t, to, segment.Row{Tag: "gone", Step: 10})
	if r, err := to.Alloc(c, "gone", 0, nil); err != nil || r.MaxID-r.Step < last.MaxID {
		t.Fatalf("re-added tag after the move = %+v, %v; want it to start at %d or above", r, err, last.MaxID)
	}

	// Moving back: the old store serves again once unsealed.
	if err := from.Raise(c, segment.Row{Tag: "order", MaxID: 5001, Step: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := from.Unseal(c); err != nil {
		t.Fatal(err)
	}
	if r, err := from.Alloc(c, "order", 0, nil); err != nil || r.MaxID-r.Step != 5001 {
		t.Fatalf("Alloc after a move back = %+v, %v; want it to start at 5001", r, err)
	}
}

// testSealRace seals a store while allocators hammer it: every allocation
// that succeeded is within the max_id Seal returned, and none succeeds
// after it.
func testSealRace(t *testing.T, newBackend NewBackend) {
	b := newBackend(t, false)
	c := ctx(t)
	create(t, b.Open(t), segment.Row{Tag: "order", Step: 1})
	var mu sync.Mutex
	var highest, allocs int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		s := b.Open(t)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := s.Alloc(c, "order", 0, nil)
				if errors.Is(err, segment.ErrStoreMoved) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				highest = max(highest, r.MaxID)
				allocs++
				mu.Unlock()
			}
		})
	}
	// Seal once the allocators are well under way.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		n := allocs
		mu.Unlock()
		if n >= 20 {
			break
		}
	}
	rows, err := b.Open(t).Seal(c, "elsewhere")
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || highest == 0 || highest > rows[0].MaxID {
		t.Fatalf("an allocation reached max_id %d, beyond the %d Seal returned (%+v)", highest, rows[0].MaxID, rows)
	}
}

// testStrictMode: a tag's mode is kept beside Leaf's columns, listed with
// the tags, returned by Alloc, switched either way, and carried by Seal and
// Raise; a row added without it is normal.
func testStrictMode(t *testing.T, newBackend NewBackend) {
	s := newBackend(t, false).Open(t)
	c := ctx(t)
	create(t, s, segment.Row{Tag: "ledger", Step: 10, Strict: true})
	create(t, s, segment.Row{Tag: "order", Step: 10})
	mode := func() map[string]bool {
		t.Helper()
		rows, err := s.Tags(c)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, r := range rows {
			m[r.Tag] = r.Strict
		}
		return m
	}
	if m := mode(); !m["ledger"] || m["order"] {
		t.Fatalf("modes listed: %v, want ledger strict and order normal", m)
	}
	if r, err := s.Alloc(c, "ledger", 0, nil); err != nil || !r.Strict {
		t.Fatalf("Alloc of a strict tag = %+v, %v; want it marked strict", r, err)
	}
	if err := s.SetStrict(c, "ledger", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStrict(c, "order", true, "east"); err != nil {
		t.Fatal(err)
	}
	if m := mode(); m["ledger"] || !m["order"] {
		t.Fatalf("modes after switching both: %v", m)
	}
	if r, err := s.Tag(c, "order"); err != nil || !r.Strict || r.Home != "east" {
		t.Fatalf("Tag(order) after making it strict in region east = %+v, %v", r, err)
	}
	if rows, err := s.List(c); err != nil || !slices.ContainsFunc(rows, func(r segment.Row) bool { return r.Tag == "order" && r.Home == "east" }) {
		t.Fatalf("List after making order strict in region east: %+v, %v", rows, err)
	}
	if err := s.SetStrict(c, "nope", true, ""); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("SetStrict of a missing tag: %v, want ErrUnknownTag", err)
	}
	rows, err := s.Seal(c, "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	to := newBackend(t, false).Open(t)
	for _, r := range rows {
		if err := to.Raise(c, r); err != nil {
			t.Fatal(err)
		}
	}
	if rows, err := to.List(c); err != nil || len(rows) != 2 || rows[0].Strict || !rows[1].Strict {
		t.Fatalf("rows carried over: %+v, %v; want ledger normal and order strict", rows, err)
	}
}

// testFloor: Alloc runs the floor with the max_id it read, while no other
// allocation of the tag can commit, and allocates from what it returns; a
// floor that fails leaves the row as it was. Concurrent allocators whose
// floors raise the row each get segments that do not overlap.
func testFloor(t *testing.T, newBackend NewBackend) {
	b := newBackend(t, false)
	s := b.Open(t)
	c := ctx(t)
	create(t, s, segment.Row{Tag: "order", Step: 10})
	var seen, seenStep int64
	r, err := s.Alloc(c, "order", 0, func(maxID, step int64) (int64, int64, error) {
		seen, seenStep = maxID, step
		return 5000, math.MaxInt64, nil
	})
	if err != nil || seen != 1 || seenStep != 10 || r.MaxID != 5010 {
		t.Fatalf("Alloc with a floor of 5000: %+v, %v (the floor saw %d, step %d); want max_id 5010", r, err, seen, seenStep)
	}
	boom := errors.New("no marks")
	if _, err := s.Alloc(c, "order", 0, func(int64, int64) (int64, int64, error) { return 0, 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("Alloc with a failing floor: %v", err)
	}
	if _, err := s.Alloc(c, "order", 0, func(m, _ int64) (int64, int64, error) { return m - 1, math.MaxInt64, nil }); err == nil {
		t.Fatal("a floor below max_id was accepted")
	}
	if r, err := s.Alloc(c, "order", 0, nil); err != nil || r.MaxID != 5020 {
		t.Fatalf("Alloc after the failures: %+v, %v; want 5020", r, err)
	}
	// A floor's end bounds the allocation: a step of 10 from 5020 with an
	// end of 5025 gives 5.
	if r, err := s.Alloc(c, "order", 0, func(m, _ int64) (int64, int64, error) { return m, 5025, nil }); err != nil || r.MaxID != 5025 || r.Allocated != 5 {
		t.Fatalf("Alloc with an end of 5025: %+v, %v; want max_id 5025, 5 allocated", r, err)
	}
	if _, err := s.Alloc(c, "order", 0, func(m, _ int64) (int64, int64, error) { return m, 5025, nil }); !errors.Is(err, segment.ErrExhausted) {
		t.Fatalf("Alloc at the end: %v, want ErrExhausted", err)
	}
	// Two allocators whose floors each raise to a mark they know: every
	// segment handed out is above both marks and none overlaps another.
	other := b.Open(t)
	var mu sync.Mutex
	var got []segment.Row
	var wg sync.WaitGroup
	for i, st := range []Store{s, other} {
		mark := int64(6000 + 1000*i)
		wg.Go(func() {
			for range 20 {
				r, err := st.Alloc(c, "order", 0, func(m, _ int64) (int64, int64, error) { return max(m, mark), math.MaxInt64, nil })
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(got, func(a, b segment.Row) int { return int(a.MaxID - b.MaxID) })
	for i, r := range got {
		if r.MaxID-10 < 6000 || i > 0 && r.MaxID-10 < got[i-1].MaxID {
			t.Fatalf("segment %d ends at %d: below a mark or overlapping the one before (%d)", i, r.MaxID, got[max(i-1, 0)].MaxID)
		}
	}
}

// testExhaustion runs a tag to the largest int64: the last allocation is
// what is left (so every ID below the limit is handed out), the next one
// fails with ErrExhausted, a tag's own error and not a store failure.
func testExhaustion(t *testing.T, newBackend NewBackend) {
	s := newBackend(t, false).Open(t)
	c := ctx(t)
	const left = 2500
	create(t, s, segment.Row{Tag: "top", MaxID: math.MaxInt64 - left, Step: 1000})
	for _, want := range []int64{1000, 1000, 500} {
		r, err := s.Alloc(c, "top", 0, nil)
		if err != nil || r.Allocated != want {
			t.Fatalf("Alloc(top) = %+v, %v; want %d IDs allocated", r, err, want)
		}
	}
	if _, err := s.Alloc(c, "top", 0, nil); !errors.Is(err, segment.ErrExhausted) {
		t.Fatalf("Alloc past the largest int64: %v, want ErrExhausted", err)
	}

	create(t, s, segment.Row{Tag: "end", MaxID: math.MaxInt64 - left, Step: 100})
	a := allocator(t, s, segment.Options{})
	var got []int64
	for {
		ids, err := a.Take(c, "end", nil, 7)
		if errors.Is(err, segment.ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatalf("after %d IDs: %v", len(got), err)
		}
		got = append(got, ids...)
	}
	// The last request of 7 found fewer left: take them one by one.
	for {
		ids, err := a.Take(c, "end", nil, 1)
		if err != nil {
			if !errors.Is(err, segment.ErrExhausted) {
				t.Fatalf("after %d IDs: %v", len(got), err)
			}
			break
		}
		got = append(got, ids...)
	}
	if len(got) != left || got[0] != math.MaxInt64-left || got[len(got)-1] != math.MaxInt64-1 {
		t.Fatalf("took %d IDs, %d .. %d; want every one of the %d up to %d", len(got), got[0], got[len(got)-1], left, int64(math.MaxInt64-1))
	}
	if !a.StoreUp() {
		t.Fatal("a tag used up marked the store down")
	}
	if err := s.Create(c, segment.Row{Tag: "nope", MaxID: math.MaxInt64, Step: 1}); err == nil || !strings.Contains(err.Error(), "leaves no room") {
		t.Fatalf("a tag created with no room: %v", err)
	}
}

// testGiveBack: Return sets max_id back only from the value it names, never
// a strict tag's; an allocator closed with GiveBack hands its unused top
// back, and the next one goes on from there, none skipped, none repeated.
func testGiveBack(t *testing.T, newBackend NewBackend) {
	s := newBackend(t, false).Open(t)
	ret, ok := s.(segment.Returner)
	if !ok {
		t.Fatalf("%T does not implement segment.Returner", s)
	}
	c := ctx(t)
	create(t, s, segment.Row{Tag: "back", MaxID: 1, Step: 1000})
	create(t, s, segment.Row{Tag: "strict", MaxID: 1, Step: 1000, Strict: true})
	if r, err := s.Alloc(c, "back", 0, nil); err != nil || r.MaxID != 1001 {
		t.Fatalf("Alloc(back) = %+v, %v", r, err)
	}
	for _, tc := range []struct {
		tag      string
		from, to int64
		want     bool
	}{
		{"back", 1000, 500, false}, // not the row's max_id
		{"back", 1001, 500, true},
		{"back", 1001, 400, false}, // moved on
		{"strict", 1, 1, false},
		{"none", 1, 1, false},
	} {
		if got, err := ret.Return(c, tc.tag, tc.from, tc.to); got != tc.want || err != nil && !errors.Is(err, segment.ErrUnknownTag) {
			t.Errorf("Return(%s, %d, %d) = %v, %v; want %v", tc.tag, tc.from, tc.to, got, err, tc.want)
		}
	}
	a := allocator(t, s, segment.Options{GiveBack: true})
	ids, err := a.Take(c, "back", nil, 5)
	if err != nil || ids[0] != 500 {
		t.Fatalf("Take after the give-back: %v, %v; want from 500", ids, err)
	}
	a.Close(c)
	b := allocator(t, s, segment.Options{GiveBack: true})
	if ids, err := b.Take(c, "back", nil, 1); err != nil || ids[0] != 505 {
		t.Fatalf("Take after a clean stop at 504: %v, %v; want 505", ids, err)
	}
}
