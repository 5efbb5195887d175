package status

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when waited on (or stepped), and
// records the waits; with hold, a wait never ends.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
	hold  bool
}

var _ clock = (*fakeClock)(nil)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		return nil
	}
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *fakeClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// A request that comes after a computation gets a new one, never an old
// copy; the new one starts an interval after the last began: a second, or
// ten times as long as the last took for a costly one, at most shareMax.
func TestSharedPacesComputations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		costly bool
		took   time.Duration // each computation's
		sleeps time.Duration // before each after the first
	}{
		{"cheap", true, 10 * time.Millisecond, time.Second - 10*time.Millisecond},
		{"costly", true, 300 * time.Millisecond, 3*time.Second - 300*time.Millisecond},
		{"very costly", true, 5 * time.Second, shareMax - 5*time.Second},
		{"waiting, not costly", false, 300 * time.Millisecond, time.Second - 300*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
			n := 0
			s := &shared[int]{costly: tc.costly, clock: clock, compute: func() int {
				clock.step(tc.took)
				n++
				return n
			}}
			for want := 1; want <= 3; want++ {
				if got, err := s.get(); got != want || err != nil {
					t.Fatalf("request %d got computation %d (%v): an old answer", want, got, err)
				}
			}
			sleeps := clock.sleeps()
			if len(sleeps) != 2 || sleeps[0] != tc.sleeps || sleeps[1] != tc.sleeps {
				t.Fatalf("waits before the computations after the first: %v, want %v twice", sleeps, tc.sleeps)
			}
		})
	}
}

// Requests that arrive while a computation waits for its turn or runs
// share it: 32 readers at once cost one computation (two, should one
// arrive just after the first ended), not 32.
func TestSharedJoinsConcurrentRequests(t *testing.T) {
	const readers = 32
	var arrived sync.WaitGroup
	arrived.Add(readers)
	var computed atomic.Int64
	s := &shared[int64]{costly: true, clock: &fakeClock{}, compute: func() int64 {
		arrived.Wait() // every reader has come before this one ends
		return computed.Add(1)
	}}
	var wg sync.WaitGroup
	got := make([]int64, readers)
	for i := range readers {
		wg.Go(func() {
			arrived.Done()
			got[i], _ = s.get()
		})
	}
	wg.Wait()
	if n := computed.Load(); n > 2 {
		t.Fatalf("%d readers at once cost %d computations", readers, n)
	}
	for i, v := range got {
		if v < 1 {
			t.Fatalf("reader %d got %d", i, v)
		}
	}
}

// A request waiting for its computation's turn stops waiting when the
// server stops, and nothing is computed after.
func TestSharedStopsWaiting(t *testing.T) {
	stop := make(chan struct{})
	clock := &fakeClock{}
	computed := 0
	s := &shared[int]{costly: true, clock: clock, stop: stop, compute: func() int {
		computed++
		return computed
	}}
	if v, err := s.get(); v != 1 || err != nil {
		t.Fatalf("first request: %d %v", v, err)
	}
	clock.mu.Lock()
	clock.hold = true // the next turn never comes
	clock.mu.Unlock()
	close(stop)
	if v, err := s.get(); !errors.Is(err, errStopped) || computed != 1 {
		t.Fatalf("a request waiting when the server stops: %d %v, %d computations", v, err, computed)
	}
}
