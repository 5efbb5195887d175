package snowflake

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaf-nats/leaf/ids"
)

// Bit layout of an ID in LayoutDefault; Layout gives any layout's.
const (
	TimeBits     = 41
	WorkerBits   = 10
	SequenceBits = 12

	MaxWorkerID = 1<<WorkerBits - 1
	MaxSequence = 1<<SequenceBits - 1
	maxElapsed  = 1<<TimeBits - 1
)

// DefaultEpoch is Leaf's (and Twitter's) epoch, 2010-11-04T01:42:54.657Z, in
// Unix milliseconds.
const DefaultEpoch int64 = 1288834974657

// DefaultMaxBackward is how far back the clock may step and be waited out.
const DefaultMaxBackward = 5 * time.Millisecond

// seqStartBound: each millisecond starts its sequence at a random value below
// this, as Leaf does, so that at low traffic the last digits still spread
// across shards instead of always being 0. A layout with few sequence bits
// starts below an eighth of its sequences instead, so that the random start
// costs it at most an eighth of its IDs per millisecond.
const seqStartBound = 100

func seqBoundOf(l Layout) uint32 { return uint32(min(seqStartBound, (l.MaxSequence()+1)/8)) }

var (
	// ErrClockBackwards is returned while the clock is behind the last
	// millisecond used by more than the tolerance.
	ErrClockBackwards = errors.New("snowflake: clock moved backwards")
	// ErrTimeOverflow is returned once the milliseconds since the epoch no
	// longer fit in the layout's time bits (or the clock is before the
	// epoch).
	ErrTimeOverflow = errors.New("snowflake: time outside the range of the time bits after the epoch")
	// ErrNoLease is returned when the generator is outside the window its
	// worker-ID lease allows.
	ErrNoLease = errors.New("snowflake: worker ID lease not held")
	// ErrSettings is wrapped by New for invalid settings.
	ErrSettings = errors.New("snowflake: invalid settings")
)

// Clock is the generator's source of time. Sleep is part of it so that a fake
// clock can advance instead of blocking.
type Clock interface {
	Now() time.Time
	Sleep(d time.Duration)
}

// SystemClock is the real clock. Short sleeps spin, because timer slack would
// otherwise cost a large part of a millisecond at the sequence limit.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep sleeps for d, spinning (with yields) for the last stretch.
func (SystemClock) Sleep(d time.Duration) {
	const spin = 300 * time.Microsecond
	end := time.Now().Add(d)
	if d > spin {
		time.Sleep(d - spin)
	}
	for time.Now().Before(end) {
		runtime.Gosched()
	}
}

// Settings configure a Generator. The zero value of every field means its
// default.
type Settings struct {
	// Epoch in Unix milliseconds; 0 means DefaultEpoch.
	Epoch int64
	// Layout of the IDs; the zero value is LayoutDefault.
	Layout Layout
	// WorkerID, 0..Layout.MaxWorkerID().
	WorkerID int
	// Clock; nil means SystemClock.
	Clock Clock
	// MaxBackward is the largest backwards clock step that is waited out;
	// 0 means DefaultMaxBackward, negative means none is.
	MaxBackward time.Duration
	// Last is the last Unix millisecond any earlier holder of WorkerID may
	// have used; the generator uses only later milliseconds.
	Last int64
	// Leased makes the generator refuse to vend until Window is called.
	Leased bool
	// SeqStart returns the first sequence of a new millisecond, below n;
	// nil means random.
	SeqStart func(n uint32) uint32
}

// Stats counts clock events since the generator was made.
type Stats struct {
	// BackwardSteps counts requests that found the clock behind the last
	// millisecond used.
	BackwardSteps uint64
	// BackwardRefused counts those refused with ErrClockBackwards.
	BackwardRefused uint64
	// BackwardWaited is the total time spent waiting out small steps.
	BackwardWaited time.Duration
}

// Generator hands out IDs for one worker ID. It is safe for concurrent use.
type Generator struct {
	epoch       int64
	layout      Layout
	workerBits  int64 // the worker ID, shifted into place
	timeShift   uint8
	workerShift uint8
	maxSeq      int
	maxElapsed  int64
	seqBound    uint32
	clock       Clock
	maxBackward int64 // ms
	seqStart    func(uint32) uint32

	mu       sync.Mutex
	last     int64 // Unix ms of the last ID
	seq      int   // next sequence to use in last
	limited  bool
	deadline time.Time // with a monotonic reading when from time.Now
	limitMs  int64     // last Unix ms the window allows

	backwardSteps   atomic.Uint64
	backwardRefused atomic.Uint64
	backwardWaited  atomic.Int64
}

// New checks s, naming every bad setting at once, and returns a generator.
func New(s Settings) (*Generator, error) {
	var errs []error
	if s.Epoch == 0 {
		s.Epoch = DefaultEpoch
	}
	if s.Epoch < 0 {
		errs = append(errs, fmt.Errorf("epoch %d is negative", s.Epoch))
	}
	if s.Layout != LayoutDefault && s.Layout != LayoutJS53 {
		errs = append(errs, fmt.Errorf("layout %d is unknown", s.Layout))
	} else if s.WorkerID < 0 || s.WorkerID > s.Layout.MaxWorkerID() {
		errs = append(errs, fmt.Errorf("worker ID %d is outside 0..%d of layout %s", s.WorkerID, s.Layout.MaxWorkerID(), s.Layout.Name()))
	}
	if s.Clock == nil {
		s.Clock = SystemClock{}
	}
	if s.MaxBackward == 0 {
		s.MaxBackward = DefaultMaxBackward
	}
	if s.MaxBackward < 0 {
		s.MaxBackward = 0
	}
	if s.SeqStart == nil {
		s.SeqStart = rand.Uint32N
	}
	if now := s.Clock.Now().UnixMilli(); now < s.Epoch {
		errs = append(errs, fmt.Errorf("epoch %d is after the clock's time %d", s.Epoch, now))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSettings, err)
	}
	l := s.Layout
	return &Generator{
		epoch:       s.Epoch,
		layout:      l,
		workerBits:  int64(s.WorkerID) << l.SequenceBits(),
		timeShift:   uint8(l.SequenceBits() + l.WorkerBits()),
		workerShift: uint8(l.SequenceBits()),
		maxSeq:      l.MaxSequence(),
		maxElapsed:  l.MaxElapsed(),
		seqBound:    seqBoundOf(l),
		clock:       s.Clock,
		maxBackward: s.MaxBackward.Milliseconds(),
		seqStart:    s.SeqStart,
		last:        s.Last,
		seq:         l.MaxSequence() + 1, // Last is used up: start in a later millisecond
		limited:     s.Leased,
	}, nil
}

// WorkerID returns the generator's worker ID.
func (g *Generator) WorkerID() int { return int(g.workerBits >> g.workerShift) }

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Epoch returns the generator's epoch in Unix milliseconds.
func (g *Generator) Epoch() int64 { return g.epoch }

// Window allows vending until deadline: no ID is made once the clock reaches
// it, and no ID carries a millisecond after deadline's. A deadline from
// time.Now carries a monotonic reading, so wall-clock steps cannot stretch it.
func (g *Generator) Window(deadline time.Time) {
	g.mu.Lock()
	g.limited = true
	g.deadline = deadline
	g.limitMs = deadline.UnixMilli()
	g.mu.Unlock()
}

// Revoke stops vending until the next Window call and returns the last Unix
// millisecond used. After Revoke returns, no ID with a later millisecond has
// been or will be made.
func (g *Generator) Revoke() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limited = true
	g.deadline = time.Time{}
	g.limitMs = 0
	return g.last
}

// Last returns the Unix millisecond of the last ID made (or Settings.Last).
func (g *Generator) Last() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// Stats returns the clock event counters.
func (g *Generator) Stats() Stats {
	return Stats{
		BackwardSteps:   g.backwardSteps.Load(),
		BackwardRefused: g.backwardRefused.Load(),
		BackwardWaited:  time.Duration(g.backwardWaited.Load()),
	}
}

// Next returns one ID.
func (g *Generator) Next() (int64, error) {
	var buf [1]int64
	got, err := g.NextN(buf[:0], 1)
	if err != nil {
		return 0, err
	}
	return got[0], nil
}

// NextN appends n ascending IDs to dst. On error it returns dst unchanged:
// a batch is all or nothing.
func (g *Generator) NextN(dst []int64, n int) ([]int64, error) {
	if n <= 0 {
		return dst, nil
	}
	orig := len(dst)
	g.mu.Lock()
	defer g.mu.Unlock()
	now, err := g.now()
	for n > 0 && err == nil {
		var r ids.Range
		if r, now, err = g.run(now, n); err == nil {
			for id := r.First; id < r.First+r.Count; id++ {
				dst = append(dst, id)
			}
			n -= int(r.Count)
		}
	}
	if err != nil {
		return dst[:orig], err
	}
	return dst, nil
}

// NextRanges appends n ascending IDs to dst as runs, one per millisecond,
// without making each ID. On error it returns dst unchanged.
func (g *Generator) NextRanges(dst []ids.Range, n int) ([]ids.Range, error) {
	if n <= 0 {
		return dst, nil
	}
	orig := len(dst)
	g.mu.Lock()
	defer g.mu.Unlock()
	now, err := g.now()
	for n > 0 && err == nil {
		var r ids.Range
		if r, now, err = g.run(now, n); err == nil {
			dst = append(dst, r)
			n -= int(r.Count)
		}
	}
	if err != nil {
		return dst[:orig], err
	}
	return dst, nil
}

// run takes the next run of at most n IDs, in the millisecond now or, when
// that one is used up, the next: it returns the run and the millisecond to
// go on from. g.mu is held.
func (g *Generator) run(now int64, n int) (ids.Range, int64, error) {
	for {
		if now > g.last {
			g.last = now
			g.seq = int(g.seqStart(g.seqBound))
		} else if g.seq > g.maxSeq {
			// This millisecond is used up: wait for the next one.
			var err error
			if now, err = g.nextMilli(); err != nil {
				return ids.Range{}, now, err
			}
			continue
		}
		elapsed := g.last - g.epoch
		if elapsed < 0 || elapsed > g.maxElapsed {
			return ids.Range{}, now, fmt.Errorf("%w: %d ms since epoch %d", ErrTimeOverflow, elapsed, g.epoch)
		}
		if g.limited && g.last > g.limitMs {
			return ids.Range{}, now, fmt.Errorf("%w: millisecond %d is past the lease's %d", ErrNoLease, g.last, g.limitMs)
		}
		base := elapsed<<(g.timeShift&63) | g.workerBits // &63: no shift-bound check
		if base == 0 && g.seq == 0 {
			g.seq = 1 // the epoch's first millisecond on worker 0: never ID 0
		}
		k := min(n, g.maxSeq+1-g.seq)
		r := ids.Range{First: base | int64(g.seq), Count: int64(k)}
		g.seq += k
		return r, now, nil
	}
}

// now reads the clock under g.mu, checks the lease window and waits out a
// small backwards step. It returns the current Unix millisecond.
func (g *Generator) now() (int64, error) {
	t := g.clock.Now()
	if g.limited && !t.Before(g.deadline) {
		return 0, ErrNoLease
	}
	ms := t.UnixMilli()
	if ms >= g.last {
		return ms, nil
	}
	g.backwardSteps.Add(1)
	behind := g.last - ms
	if behind > g.maxBackward {
		g.backwardRefused.Add(1)
		return 0, fmt.Errorf("%w: %d ms behind the last ID's time (tolerance %d ms); retry once the clock catches up",
			ErrClockBackwards, behind, g.maxBackward)
	}
	wait := time.Duration(behind) * time.Millisecond
	g.clock.Sleep(wait)
	g.backwardWaited.Add(int64(wait))
	t = g.clock.Now()
	if g.limited && !t.Before(g.deadline) {
		return 0, ErrNoLease
	}
	if ms = t.UnixMilli(); ms < g.last {
		g.backwardRefused.Add(1)
		return 0, fmt.Errorf("%w: still %d ms behind after waiting %v", ErrClockBackwards, g.last-ms, wait)
	}
	return ms, nil
}

// nextMilli waits until the clock passes g.last.
func (g *Generator) nextMilli() (int64, error) {
	for {
		t := g.clock.Now()
		if g.limited && !t.Before(g.deadline) {
			return 0, ErrNoLease
		}
		ms := t.UnixMilli()
		if ms > g.last {
			return ms, nil
		}
		if g.last-ms > g.maxBackward+1 {
			// The clock stepped back while we were in a full millisecond.
			return g.now()
		}
		next := time.UnixMilli(g.last + 1)
		g.clock.Sleep(next.Sub(t))
	}
}
