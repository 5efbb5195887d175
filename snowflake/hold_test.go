package snowflake

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeHolder counts renewals and can be told to fail.
type fakeHolder struct {
	mu       sync.Mutex
	clock    Clock
	renewals int
	err      error
	released []int64
}

var _ Holder = (*fakeHolder)(nil)

func (h *fakeHolder) Renew(context.Context, int64) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewals++
	if h.err != nil {
		return time.Time{}, h.err
	}
	return h.clock.Now().Add(time.Hour), nil
}

func (h *fakeHolder) Release(_ context.Context, last int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = append(h.released, last)
	return nil
}

func (h *fakeHolder) state() (int, []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewals, append([]int64(nil), h.released...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKeepRenewsAndReleasesOnCancel(t *testing.T) {
	g := newGen(t, Settings{Leased: true})
	h := &fakeHolder{clock: SystemClock{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Keep(ctx, g, h, time.Millisecond, nil, nil) }()
	waitFor(t, "a renewal", func() bool { n, _ := h.state(); return n >= 2 })
	id, err := g.Next()
	if err != nil {
		t.Fatalf("after renewal: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Keep: %v", err)
	}
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("after release: %v, want ErrNoLease", err)
	}
	_, released := h.state()
	if len(released) != 1 || released[0] != decodeMs(t, id) {
		t.Fatalf("released %v, want the last ID's millisecond %d", released, decodeMs(t, id))
	}
}

func TestKeepStopsOnLostLease(t *testing.T) {
	g := newGen(t, Settings{Leased: true})
	g.Window(time.Now().Add(time.Hour))
	h := &fakeHolder{clock: SystemClock{}, err: ErrLeaseLost}
	err := Keep(context.Background(), g, h, time.Millisecond, nil, nil)
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Keep = %v, want ErrLeaseLost", err)
	}
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("after losing the lease: %v, want ErrNoLease", err)
	}
}

func TestWaitPast(t *testing.T) {
	clock := newFakeClock(testNow)
	if err := WaitPast(context.Background(), clock, testNow+500, time.Second); err != nil {
		t.Fatal(err)
	}
	if now := clock.Now().UnixMilli(); now <= testNow+500 {
		t.Fatalf("returned at %d, not past %d", now, testNow+500)
	}
	if err := WaitPast(context.Background(), clock, testNow+3_600_000, time.Minute); !errors.Is(err, ErrClockBehind) {
		t.Fatalf("an hour behind: %v, want ErrClockBehind", err)
	}
}

func TestFileHolderKeepsTimestampAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "worker-5.last")
	clock := newFakeClock(testNow)
	h, last, err := OpenFileHolder(path, clock, 3*time.Second)
	if err != nil || last != 0 {
		t.Fatalf("fresh file: last %d, %v", last, err)
	}
	deadline, err := h.Renew(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// A crash now: the next run must start after the reserved horizon.
	_, last, err = OpenFileHolder(path, clock, 3*time.Second)
	if err != nil || last != deadline.UnixMilli() {
		t.Fatalf("after crash: last %d, %v; want %d", last, err, deadline.UnixMilli())
	}
	// A clean stop records the true last millisecond.
	if err := h.Release(context.Background(), testNow+7); err != nil {
		t.Fatal(err)
	}
	if _, last, _ = OpenFileHolder(path, clock, time.Second); last != testNow+7 {
		t.Fatalf("after release: last %d, want %d", last, testNow+7)
	}
	// After a backwards clock step, IDs already made are ahead of the new
	// deadline: the file keeps the later timestamp.
	h, _, _ = OpenFileHolder(path, clock, 3*time.Second)
	ahead := clock.Now().Add(time.Minute).UnixMilli()
	if _, err := h.Renew(context.Background(), ahead); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Renew(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if _, last, _ = OpenFileHolder(path, clock, time.Second); last != ahead {
		t.Fatalf("after renewals behind the last ID: recorded %d, want %d", last, ahead)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenFileHolder(path, clock, time.Second); err == nil {
		t.Fatal("corrupt file accepted")
	}
}

func decodeMs(t *testing.T, id int64) int64 { return decode(t, id).UnixMilli }

func TestHoldersRenewAllAndTakeTheEarliestDeadline(t *testing.T) {
	clock := newFakeClock(testNow)
	file, _, err := OpenFileHolder(filepath.Join(t.TempDir(), "w.last"), clock, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := &fakeHolder{clock: clock} // an hour ahead
	hs := Holders{other, file}
	deadline, err := hs.Renew(context.Background(), 0)
	if err != nil || !deadline.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("Renew = %v, %v; want the file's earlier deadline", deadline, err)
	}
	if err := hs.Release(context.Background(), testNow); err != nil {
		t.Fatal(err)
	}
	if _, released := other.state(); len(released) != 1 {
		t.Fatalf("released %v, want each holder released", released)
	}
	other.err = ErrLeaseLost
	if _, err := hs.Renew(context.Background(), 0); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew with one holder lost: %v", err)
	}
}
