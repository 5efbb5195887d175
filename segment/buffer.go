package segment

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/leaf-nats/leaf/ids"
)

// Segment is a range of IDs: [Start, End), of which Value is the next to
// hand out.
type Segment struct {
	Start, Value, End int64
}

// used10 reports whether a tenth of s is used, the point where Leaf loads
// the next segment. An empty (never loaded) segment counts as used.
func (s *Segment) used10() bool {
	return (s.Value-s.Start)*10 >= s.End-s.Start
}

// buffer is one tag's double buffer: the segment being served and the next
// one, loaded in the background.
type buffer struct {
	tag string

	mu        sync.Mutex
	cur, next Segment
	nextReady bool
	loading   *call       // the load of next in flight, nil when none
	gen       uint64      // bumped by restart: a load started before it is dropped
	strict    atomic.Bool // served by the tag's leader only (TakeStrict); written with mu held
	lastErr   error       // of the last load, nil after a success
	retryAt   time.Time   // no new load before this, after a failure
	exhausted bool        // the store said the tag's IDs are used up

	// The dynamic step: step is the size of the last segment loaded
	// (0 before the first), minStep the row's step, lastLoad when the
	// last segment was loaded.
	step, minStep int64
	lastLoad      time.Time

	loads, failures int64
	lastTook        time.Duration
	// high is the end of the highest segment allocated for the tag here:
	// no allocation may start below it.
	high int64
	// allocated is how many IDs the store allocated for the tag here, in
	// all: how busy the tag is (Allocator.Snapshot ranks metrics by it).
	allocated int64

	// limiter is the tag's budget of IDs under Options.RateLimit, made
	// on the first take.
	limiter *rate.Limiter
}

// span is the IDs [lo, hi).
type span struct{ lo, hi int64 }

// spans is what one reserve hands out: the rest of the current segment and
// the start of the next, in ascending order.
type spans [2]span

// appendRanges appends the runs of r that hold IDs to dst.
func (r *spans) appendRanges(dst []ids.Range) []ids.Range {
	for _, s := range r {
		if s.hi > s.lo {
			dst = append(dst, ids.Range{First: s.lo, Count: s.hi - s.lo})
		}
	}
	return dst
}

// tooBig reports whether n IDs are more than a load of b brings, so that
// waiting for one would not serve them: they are allocated for themselves.
// b.mu is held.
func (b *buffer) tooBig(n int64) bool {
	return b.step > 0 && n > b.step+(b.cur.End-b.cur.Value)
}

// reserve takes up to n IDs from the current segment and, when it runs
// out, from the next, switching to it. With all, it takes n or nothing.
// b.mu is held; the IDs are appended after it is released.
func (b *buffer) reserve(n int64, all bool) (r spans, got int64) {
	avail := b.cur.End - b.cur.Value
	if all {
		if b.nextReady {
			avail += b.next.End - b.next.Value
		}
		if avail < n {
			return r, 0
		}
	}
	for i := range r {
		if b.cur.Value == b.cur.End {
			if !b.nextReady {
				break
			}
			b.cur, b.nextReady = b.next, false
		}
		k := min(n-got, b.cur.End-b.cur.Value)
		r[i] = span{b.cur.Value, b.cur.Value + k}
		b.cur.Value += k
		got += k
		if got == n {
			break
		}
	}
	return r, got
}

// restart drops both segments and any load in flight, so that the next
// IDs come from a segment allocated after this call. b.mu is held.
func (b *buffer) restart() {
	b.gen++
	b.cur, b.next, b.nextReady, b.loading = Segment{}, Segment{}, false, nil
	b.retryAt = time.Time{}
}

// setStrict records the tag's mode; a change drops the segments, which were
// loaded to be served the other way. b.mu is held.
func (b *buffer) setStrict(strict bool) {
	if b.strict.Load() != strict {
		b.strict.Store(strict)
		b.restart()
	}
}

// modeChanged is the error of a call made in the mode the tag had before
// its mode became strict (or not).
func (b *buffer) modeChanged(strict bool) error {
	if strict {
		return &TagError{Tag: b.tag, Err: ErrStrict}
	}
	return &TagError{Tag: b.tag, Err: ErrNotStrict}
}

// mode checks that the tag is served as strict says. b.mu is held.
func (b *buffer) mode(strict bool) error {
	switch {
	case b.strict.Load() == strict:
		return nil
	case b.strict.Load():
		return &TagError{Tag: b.tag, Err: ErrStrict}
	}
	return &TagError{Tag: b.tag, Err: ErrNotStrict}
}

// nextStep is the step of the next load at now: 0 (the row's step) first,
// then Leaf's rule on how long the last segment lasted, raised so that a
// segment outlasts the store's latency.
func (b *buffer) nextStep(now time.Time, maxStep int64) int64 {
	if b.step == 0 {
		return 0
	}
	return dynamicStep(b.step, b.minStep, maxStep, now.Sub(b.lastLoad), b.lastTook)
}

// loadsCovered is how many loads, at the last load's duration, a segment
// should outlast at the rate the last one was used: the next segment is
// requested at 10% used, so the remaining 90% must cover the load in flight
// with room for a slower one.
const loadsCovered = 4

// dynamicStep doubles a step whose segment lasted under 15 minutes (up to
// maxStep), keeps it under 30 and halves it beyond, never below minStep,
// the row's step: busy tags go to the store less often, idle ones waste
// fewer IDs when a process stops. Leaf's rule alone takes several
// doublings, each a stall, to catch up with a busy tag on a slow store, so
// the step is also raised at once to what loadsCovered loads consume at the
// last segment's rate (took is the last load's duration).
func dynamicStep(step, minStep, maxStep int64, lasted, took time.Duration) int64 {
	next := step
	switch {
	case lasted < 15*time.Minute:
		next = min(step*2, maxStep)
	case lasted >= 30*time.Minute:
		next = step / 2
	}
	if lasted = max(lasted, time.Millisecond); took > 0 {
		// IDs a segment of step used per lasted, over loadsCovered loads.
		need := float64(step) * loadsCovered * float64(took) / float64(lasted)
		next = max(next, int64(min(need, float64(maxStep))))
	}
	return max(next, minStep)
}

func (b *buffer) status() TagStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return TagStatus{
		Tag:          b.tag,
		Current:      b.cur,
		Next:         b.next,
		NextReady:    b.nextReady,
		Loading:      b.loading != nil,
		Step:         b.step,
		MinStep:      b.minStep,
		Loads:        b.loads,
		LoadFailures: b.failures,
		LastLoad:     b.lastLoad,
		LastLoadTook: b.lastTook,
		LastError:    b.lastErr,
		Strict:       b.strict.Load(),
		Exhausted:    b.exhausted,
		High:         b.high,
		Allocated:    b.allocated,
	}
}
