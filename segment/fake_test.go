package segment_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/segment"
)

// fakeStore is an in-memory Store that counts its calls and can fail or
// hang on demand.
type fakeStore struct {
	mu    sync.Mutex
	rows  map[string]segment.Row
	steps []int64 // step argument of every Alloc
	lists int     // Tags calls
	reads int     // Tag calls
	err   error   // returned by every call when set
	hang  bool    // calls wait for their context when set
	// stale, when set, is the max_id the next Alloc reads first: its
	// compare-and-set fails, as a KV store's does when another vendor
	// allocated meanwhile, and it runs the floor again on the row.
	stale    int64
	inflight int // calls running
	// aborts is how many Allocs fail after the floor ran, the row
	// unchanged: a commit the store aborted (Postgres restarting).
	aborts int
}

var _ segment.Store = (*fakeStore)(nil)

// newFakeStore has a row of step and max_id 1 for every tag.
func newFakeStore(step int64, tags ...string) *fakeStore {
	f := &fakeStore{rows: map[string]segment.Row{}}
	for _, tag := range tags {
		f.rows[tag] = segment.Row{Tag: tag, MaxID: 1, Step: step}
	}
	return f
}

func (f *fakeStore) begin(ctx context.Context) error {
	f.mu.Lock()
	f.inflight++
	hang, err := f.hang, f.err
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (f *fakeStore) end() {
	f.mu.Lock()
	f.inflight--
	f.mu.Unlock()
}

func (f *fakeStore) Alloc(ctx context.Context, tag string, step int64, floor segment.Floor) (segment.Row, error) {
	f.mu.Lock()
	f.steps = append(f.steps, step)
	f.mu.Unlock()
	defer f.end()
	if err := f.begin(ctx); err != nil {
		return segment.Row{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rows[tag]
	if !ok {
		return segment.Row{}, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	if floor != nil && f.stale != 0 {
		if _, _, err := floor(f.stale, cmp.Or(step, r.Step)); err != nil {
			return segment.Row{}, err
		}
		f.stale = 0
	}
	end := segment.Whole.End
	if floor != nil {
		base, e, err := floor(r.MaxID, cmp.Or(step, r.Step))
		if err != nil {
			return segment.Row{}, err
		}
		r.MaxID, end = base, e
	}
	if f.aborts > 0 {
		f.aborts--
		return segment.Row{}, errors.New("the commit was aborted: the database system is shutting down")
	}
	r.Allocated = segment.Grant(r.MaxID, cmp.Or(step, r.Step), end)
	if r.Allocated == 0 {
		return segment.Row{}, &segment.TagError{Tag: tag, Err: segment.ErrExhausted}
	}
	r.MaxID += r.Allocated
	f.rows[tag] = r
	return r, nil
}

func (f *fakeStore) Tags(ctx context.Context) ([]segment.Row, error) {
	f.mu.Lock()
	f.lists++
	f.mu.Unlock()
	defer f.end()
	if err := f.begin(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rows := make([]segment.Row, 0, len(f.rows))
	for _, r := range f.rows {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b segment.Row) int { return strings.Compare(a.Tag, b.Tag) })
	return rows, nil
}

func (f *fakeStore) Tag(ctx context.Context, tag string) (segment.Row, error) {
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	defer f.end()
	if err := f.begin(ctx); err != nil {
		return segment.Row{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rows[tag]
	if !ok {
		return segment.Row{}, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	return r, nil
}

func (f *fakeStore) tagReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeStore) set(fn func(f *fakeStore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeStore) allocSteps() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.steps)
}

func (f *fakeStore) listCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeStore) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight
}

func newFakeClock() *testtool.Clock {
	return testtool.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

// open starts an allocator on store with a fake clock unless opt has one,
// and closes it when the test ends.
func open(t testing.TB, store segment.Store, opt segment.Options) *segment.Allocator {
	t.Helper()
	opt.Store = store
	if opt.Now == nil {
		opt.Now = newFakeClock().Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a, err := segment.Open(context.Background(), opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

// take is Take that fails the test on error.
func take(t testing.TB, a *segment.Allocator, tag string, n int) []int64 {
	t.Helper()
	ids, err := a.Take(context.Background(), tag, nil, n)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", tag, n, err)
	}
	if len(ids) != n {
		t.Fatalf("Take(%q, %d) returned %d IDs", tag, n, len(ids))
	}
	return ids
}

// status returns tag's status, failing the test when it is not cached.
func status(t testing.TB, a *segment.Allocator, tag string) segment.TagStatus {
	t.Helper()
	for _, s := range a.Snapshot() {
		if s.Tag == tag {
			return s
		}
	}
	t.Fatalf("tag %q not in Snapshot", tag)
	return segment.TagStatus{}
}

// nextReady waits until tag's next segment is loaded.
func nextReady(t testing.TB, a *segment.Allocator, tag string) {
	t.Helper()
	testtool.Eventually(t, 10*time.Second, "the next segment of "+tag, func() bool { return status(t, a, tag).NextReady })
}

// consecutive reports whether ids are from, from+1, ...
func consecutive(ids []int64, from int64) bool {
	for i, id := range ids {
		if id != from+int64(i) {
			return false
		}
	}
	return true
}

// Return implements segment.Returner.
func (f *fakeStore) Return(_ context.Context, tag string, from, to int64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rows[tag]
	if !ok || r.MaxID != from || r.Strict {
		return false, nil
	}
	r.MaxID = to
	f.rows[tag] = r
	return true, nil
}
