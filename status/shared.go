package status

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// shareEvery is the least time between two computations of one expensive
// answer; shareCost makes it at least that many times as long as the last
// computation took, so that one over 100,000 tags costs at most a tenth of
// a core however many readers loop on it; shareMax bounds that wait.
const (
	shareEvery = time.Second
	shareCost  = 10
	shareMax   = 20 * time.Second
)

// shared computes a value for every request that waits for it, at most once
// per interval. A request joins the computation under way, or the next one,
// which starts no sooner than the interval after the last began; so an
// answer is never an old copy from before a request that comes after it
// (a reader looping on the status page sees each change within a second),
// and any number of concurrent or looping readers cost one computation an
// interval. The wait needs no goroutine of its own: the first request of a
// computation waits and computes on its handler's goroutine, the others
// wait for it; it ends when the server stops, so that nothing computes
// after it.
type shared[T any] struct {
	compute func() T
	// costly: the interval grows with the computation's duration
	// (shareCost); else it is shareEvery, as for an answer that mostly
	// waits (for the other vendors' replies).
	costly bool
	clock  clock
	stop   <-chan struct{}
	flight singleflight.Group

	mu    sync.Mutex
	began time.Time     // the last computation's start
	took  time.Duration // and duration
}

// clock is the time shared paces by: the system's, or a test's.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// errStopped is what a request waiting for a computation gets when the
// server stops first.
var errStopped = errors.New("the vendor is stopping")

// newShared shares compute's values until stop is closed.
func newShared[T any](stop <-chan struct{}, costly bool, compute func() T) *shared[T] {
	return &shared[T]{compute: compute, costly: costly, clock: systemClock{}, stop: stop}
}

// get returns the value of the computation a request arriving now joins:
// errStopped when the server stops before its turn, the panic's error when
// it panicked (in the request that ran it).
func (s *shared[T]) get() (T, error) {
	v, err, _ := s.flight.Do("", func() (any, error) {
		if wait := s.next().Sub(s.clock.Now()); wait > 0 {
			select {
			case <-s.clock.After(wait): // the requests arriving meanwhile join this computation
			case <-s.stop:
				return nil, errStopped
			}
		}
		began := s.clock.Now()
		v := s.compute()
		s.mu.Lock()
		s.began, s.took = began, s.clock.Now().Sub(began)
		s.mu.Unlock()
		return v, nil
	})
	t, _ := v.(T)
	return t, err
}

// next is the earliest time the next computation may start.
func (s *shared[T]) next() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.began.Add(interval(s.took, s.costly))
}

// interval is the least time between the starts of two computations, the
// last of which took took.
func interval(took time.Duration, costly bool) time.Duration {
	if !costly {
		return shareEvery
	}
	return min(max(shareEvery, shareCost*took), shareMax)
}
