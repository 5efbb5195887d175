package segment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/inflight"
)

// Defaults for the zero fields of Options.
const (
	DefaultRefresh     = 60 * time.Second
	DefaultNegativeTTL = time.Second
	DefaultWait        = 500 * time.Millisecond
	DefaultLoadTimeout = 5 * time.Second
	DefaultMaxStep     = 1_000_000
)

// retryBackoff is how long a tag waits after a failed load before it asks
// the store again, so a store that is down sees a few calls a second per
// tag, not one per request.
const retryBackoff = 100 * time.Millisecond

// Options configures an Allocator. The zero value of every field but Store
// means its default.
type Options struct {
	// Store keeps the tags' rows. Required.
	Store Store
	// Logger receives store outages (once per outage) and recoveries.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock that times segments for the dynamic step. Default
	// time.Now.
	Now func() time.Time
	// Refresh is how often the tag list is re-read. Default 60s.
	Refresh time.Duration
	// NegativeTTL is how long a tag the store was found without is
	// answered ErrUnknownTag without asking the store again. Default 1s.
	// Each tag not cached costs one single-row read (a few hundred a
	// second at most per allocator), whatever the number of tags, and a
	// tag just added is found at once.
	NegativeTTL time.Duration
	// Wait is how long a Take may wait for the store in all (the tag's
	// lookup and its loads) before it fails with ErrUnavailable. Default
	// 500ms: short enough that the 503 reaches a client with the usual
	// one-second request timeout before it gives up, long enough for a
	// healthy store, which answers in milliseconds.
	Wait time.Duration
	// LoadTimeout bounds one store call. Default 5s.
	LoadTimeout time.Duration
	// MaxStep caps the dynamic step. Default 1,000,000 (Leaf's).
	MaxStep int64
	// RateLimit bounds how fast one tag's IDs are handed out, in IDs a
	// second, so that no requester can use up a tag's ID space: a take
	// beyond it fails with ErrRateLimited. 0: no bound.
	RateLimit float64
	// RateBurst is how many IDs a tag may hand out at once within
	// RateLimit: the largest batch that can ever be served, refused
	// beyond it with a RateError that says so. Default RateLimit (one
	// second's worth), so that no burst takes more than a second of the
	// limit.
	RateBurst float64
	// Marks, when set, keeps how far each tag was handed out outside the
	// store, so that a store that comes back older is raised above them
	// (see Marks). Without it the allocator still never allocates below
	// what it allocated itself.
	Marks Marks
	// Block is the IDs the allocator hands out: its region's
	// (RegionBlock). Zero means Whole, every positive ID. A row whose
	// max_id is outside it is not allocated from (ErrOtherRegion).
	Block Block
	// GiveBack, at Close, returns to the store the IDs this allocator holds
	// unused at the top of a tag (Store.Return, Marks lowered first), so
	// that a clean restart skips none. It needs a store that implements
	// Returner and marks (if any) that implement Lowerer.
	GiveBack bool
}

// withDefaults fills in the defaults and checks o, naming every bad field:
// as every configuration in this module, Options is a plain struct in which
// the zero value of a field means its default.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("Options.Store is nil; pass a Postgres or KV store"))
	}
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"Refresh", &o.Refresh, DefaultRefresh},
		{"NegativeTTL", &o.NegativeTTL, DefaultNegativeTTL},
		{"Wait", &o.Wait, DefaultWait},
		{"LoadTimeout", &o.LoadTimeout, DefaultLoadTimeout},
	}
	for _, d := range durations {
		if *d.d < 0 {
			errs = append(errs, fmt.Errorf("Options.%s is %v; use a positive duration, or 0 for the default %v", d.name, *d.d, d.def))
		}
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if o.MaxStep < 0 {
		errs = append(errs, fmt.Errorf("Options.MaxStep is %d; use a positive step, or 0 for the default %d", o.MaxStep, DefaultMaxStep))
	}
	if o.MaxStep == 0 {
		o.MaxStep = DefaultMaxStep
	}
	if o.RateLimit < 0 || o.RateBurst < 0 || o.RateBurst > 1<<53 {
		errs = append(errs, fmt.Errorf("Options.RateLimit %g and RateBurst %g: want 0 (none) or more, a burst up to 2^53", o.RateLimit, o.RateBurst))
	}
	if o.RateBurst == 0 {
		o.RateBurst = max(1, math.Ceil(o.RateLimit))
	}
	if o.Block == (Block{}) {
		o.Block = Whole
	}
	if o.Block.First < 1 || o.Block.End <= o.Block.First {
		errs = append(errs, fmt.Errorf("Options.Block [%d, %d): want a block of positive IDs (RegionBlock)", o.Block.First, o.Block.End))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("segment: %w", err)
	}
	return o, nil
}

// Allocator vends IDs for every tag of a Store. It is safe for concurrent
// use.
type Allocator struct {
	opt    Options
	log    *slog.Logger
	ctx    context.Context // cancelled by Close; parent of every store call
	cancel context.CancelFunc

	tags  atomic.Pointer[tagSet] // replaced, never mutated: readers take no lock
	live  sync.Map               // tag -> *buffer, for the known tags asked for since they were listed
	homes sync.Map               // tag -> the home region of a strict tag, as last read

	mu     sync.Mutex           // guards absent and replacing tags
	absent map[string]time.Time // tags the store was found without, and when
	finds  singleflight.Group   // store reads of uncached tags, one per tag at a time
	// lookups bounds the store reads of uncached tags.
	lookups *rate.Limiter

	goroutines inflight.Group // the refresh loop and the loads; Close waits for them

	storeDown atomic.Bool // logs an outage once, and its end once
	rw        rewinds     // stores found behind what was handed out

}

// tagSet is one version of the tag cache: the tags the store lists, each
// with its mode (true: strict). A tag gets a buffer only once it is asked
// for (Allocator.live), so that 100,000 tags in the store cost a vendor a
// few MB, not a buffer each.
type tagSet struct {
	known map[string]bool
	// listed is when the store last listed its tags, zero if it never
	// has; tags absent from a recent list are unknown.
	listed time.Time
}

// call is a store call whose result several goroutines wait for.
type call struct {
	done chan struct{} // closed when err is set
	err  error
}

// Open starts an allocator: it reads the tag list and re-reads it every
// Options.Refresh. A store that cannot be read now is logged, not fatal:
// tags are then looked up as requests name them. Close stops it.
func Open(ctx context.Context, opt Options) (*Allocator, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Allocator{opt: opt, log: opt.Logger, absent: map[string]time.Time{}, lookups: rate.NewLimiter(lookupRate, lookupRate)}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.tags.Store(&tagSet{known: map[string]bool{}})
	_ = a.list(ctx) // logged; tags are then looked up as requests name them
	a.spawn(a.refreshLoop)
	return a, nil
}

// Known returns how many tags the store listed last.
func (a *Allocator) Known() int { return len(a.tags.Load().known) }

// Close stops the refresh loop and every load in flight and waits for
// them (each bounded by Options.LoadTimeout). Calls after Close fail with
// ErrUnavailable.
func (a *Allocator) Close(ctx context.Context) error {
	a.goroutines.Stop()
	a.cancel()
	a.goroutines.Wait()
	if a.opt.GiveBack {
		a.giveBack(ctx)
	}
	return nil
}

// spawn runs f in a goroutine that Close waits for; false after Close.
func (a *Allocator) spawn(f func()) bool { return a.goroutines.Go(f) }

// TryTake appends n ascending IDs for tag to dst if it can without waiting
// for the store. ok is false, with nothing consumed, when serving would
// wait: the tag's first load, both buffers empty, or a tag not yet looked
// up; call Take then. A non-nil err is final (bad tag or n, unknown tag).
func (a *Allocator) TryTake(tag string, dst []int64, n int) (got []int64, ok bool, err error) {
	var buf [2]ids.Range
	rs, ok, err := a.TryTakeRanges(tag, buf[:0], int64(n))
	return appendIDs(dst, rs, n), ok, err
}

// Take appends n ascending IDs for tag to dst, waiting for the store when
// the tag's buffers cannot serve them: up to Options.Wait in all, and never
// past ctx. On error dst is returned unchanged; the error wraps
// ErrInvalidTag, ErrUnknownTag or ErrUnavailable.
func (a *Allocator) Take(ctx context.Context, tag string, dst []int64, n int) ([]int64, error) {
	var buf [4]ids.Range
	rs, err := a.TakeRanges(ctx, tag, buf[:0], int64(n))
	return appendIDs(dst, rs, n), err
}

// appendIDs appends the IDs of rs, n in all, to dst, growing it once.
func appendIDs(dst []int64, rs []ids.Range, n int) []int64 {
	if len(rs) == 0 {
		return dst
	}
	dst = slices.Grow(dst, n)
	for _, r := range rs {
		for id := r.First; id < r.First+r.Count; id++ {
			dst = append(dst, id)
		}
	}
	return dst
}

// TryTakeRanges is TryTake handing out runs of IDs instead of each ID: at
// most two (the rest of the current segment and the start of the next),
// whatever n, so a batch of any size costs the same. A strict tag fails
// with ErrStrict: its leader serves it, with TryTakeStrict.
func (a *Allocator) TryTakeRanges(tag string, dst []ids.Range, n int64) (rs []ids.Range, ok bool, err error) {
	return a.tryTake(tag, dst, n, false)
}

// TryTakeStrict is TryTakeRanges for a strict tag, for its leader: the IDs
// of one allocator ascend across calls, and after Restart they come from a
// segment allocated after it. A tag that is not strict fails with
// ErrNotStrict.
func (a *Allocator) TryTakeStrict(tag string, dst []ids.Range, n int64) (rs []ids.Range, ok bool, err error) {
	return a.tryTake(tag, dst, n, true)
}

func (a *Allocator) tryTake(tag string, dst []ids.Range, n int64, strict bool) (rs []ids.Range, ok bool, err error) {
	if n < 1 {
		return dst, false, errCount(n)
	}
	b := a.lookup(tag)
	if b == nil {
		if err := a.missing(tag); err != nil {
			return dst, false, err
		}
		return dst, false, nil
	}
	b.mu.Lock()
	if err := b.mode(strict); err != nil {
		b.mu.Unlock()
		return dst, false, err
	}
	admitted, err := a.admit(b, n)
	if err != nil {
		b.mu.Unlock()
		return dst, false, err
	}
	r, got := b.reserve(n, true)
	if got > 0 {
		a.preload(b)
	} else {
		a.refund(admitted) // the Take that follows is charged
		if !b.tooBig(n) {
			a.startLoad(b) // the Take that follows finds it in flight
		}
	}
	b.mu.Unlock()
	if got == 0 {
		return dst, false, nil
	}
	return r.appendRanges(dst), true, nil
}

// TakeRanges is Take handing out runs of IDs instead of each ID. A batch
// larger than a segment the tag loads is allocated from the store for
// itself, in one round trip, above every buffered ID: a consumer of range
// replies can ask for millions of IDs at once. A strict tag fails with
// ErrStrict: its leader serves it, with TakeStrict.
func (a *Allocator) TakeRanges(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	return a.take(ctx, tag, dst, n, false)
}

// TakeStrict is TakeRanges for a strict tag, for its leader (see
// TryTakeStrict). A batch allocated for itself drops the buffers, whose IDs
// are below it, so that the next IDs are above it too.
func (a *Allocator) TakeStrict(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	return a.take(ctx, tag, dst, n, true)
}

// Home returns the home region of a strict tag (Row.Home), as last read
// from the store: "" with no regions, or for a normal tag.
func (a *Allocator) Home(tag string) string {
	if h, ok := a.homes.Load(tag); ok {
		return h.(string)
	}
	return ""
}

// noteHome records a row's home region.
func (a *Allocator) noteHome(r Row) {
	if r.Strict && r.Home != "" {
		a.homes.Store(r.Tag, r.Home)
	} else {
		a.homes.Delete(r.Tag)
	}
}

// IsStrict reports whether tag is strict, as last read from the store,
// without a lock.
func (a *Allocator) IsStrict(tag string) bool {
	if b := a.cached(tag); b != nil {
		return b.strict.Load()
	}
	return a.tags.Load().known[tag]
}

// Restart drops tag's segments and any load in flight: the IDs handed out
// next for it come from a segment allocated after Restart returns. A new
// leader of a strict tag calls it, so that it serves above every ID any
// earlier leader served.
func (a *Allocator) Restart(tag string) {
	if b := a.cached(tag); b != nil {
		b.mu.Lock()
		b.restart()
		b.mu.Unlock()
	}
}

func (a *Allocator) take(ctx context.Context, tag string, dst []ids.Range, n int64, strict bool) ([]ids.Range, error) {
	if n < 1 {
		return dst, errCount(n)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, a.opt.Wait, errWaited)
	defer cancel()
	b, err := a.buffer(ctx, tag)
	if err != nil {
		return dst, err
	}
	b.mu.Lock()
	admitted, err := a.admit(b, n)
	b.mu.Unlock()
	if err != nil {
		return dst, err
	}
	rs, err := a.takeAdmitted(ctx, b, dst, n, strict)
	if err != nil {
		a.refund(admitted)
	}
	return rs, err
}

// takeAdmitted is take once the IDs are within the tag's rate limit.
func (a *Allocator) takeAdmitted(ctx context.Context, b *buffer, dst []ids.Range, n int64, strict bool) ([]ids.Range, error) {
	tag := b.tag
	var err error
	orig := len(dst)
	need := n
	// Until a load succeeds in this call, take all or nothing: a batch
	// larger than the buffers must not use them up if the store turns out
	// to be down, or smaller requests that they could serve would fail too.
	loaded := false
	for {
		b.mu.Lock()
		if err := b.mode(strict); err != nil {
			b.mu.Unlock()
			return dst[:orig], err
		}
		r, got := b.reserve(need, !loaded)
		need -= got
		var l *call
		var failed error // why no load could start
		direct := false  // no load would serve it
		switch {
		case need == 0:
			a.preload(b)
		case b.tooBig(need) || b.step == 0 && need > a.opt.MaxStep:
			// More than a load brings (or, on a tag not loaded yet, than
			// any could): one allocation of exactly what is missing.
			direct = a.ctx.Err() == nil
		default:
			if l = a.startLoad(b); l == nil {
				failed = b.lastErr
				direct = b.nextReady && failed == nil && a.ctx.Err() == nil
			}
		}
		b.mu.Unlock()
		dst = r.appendRanges(dst)
		if need == 0 {
			return dst, nil
		}
		if direct {
			if dst, err = a.takeDirect(ctx, b, dst, need); err != nil {
				return dst[:orig], err
			}
			return dst, nil
		}
		if err = a.await(ctx, tag, l, failed); err != nil {
			return dst[:orig], err
		}
		loaded = true
	}
}

// takeDirect serves need IDs from a segment of exactly that size allocated
// for this request alone: for a batch larger than a load brings. Its IDs
// are above every buffered one, so the batch stays ascending. A normal tag
// keeps its buffers; a strict one drops them, or its next IDs would be
// below this batch's.
func (a *Allocator) takeDirect(ctx context.Context, b *buffer, dst []ids.Range, need int64) ([]ids.Range, error) {
	tag := b.tag
	ctx, cancel := context.WithTimeout(ctx, a.opt.LoadTimeout)
	defer cancel()
	row, seg, err := a.alloc(ctx, b, need)
	if err == nil && seg.End-seg.Start < need {
		// The tag's last IDs, fewer than asked for: smaller requests get
		// them.
		b.mu.Lock()
		if !b.nextReady && b.strict.Load() == row.Strict {
			b.next, b.nextReady = seg, true
		}
		b.mu.Unlock()
		return dst, &TagError{Tag: tag, Err: fmt.Errorf("%w (%d are left, fewer than the %d asked for)", ErrExhausted, seg.End-seg.Start, need)}
	}
	if err != nil {
		return dst, loadError(tag, err)
	}
	b.mu.Lock()
	mismatch := b.strict.Load() != row.Strict
	if b.strict.Load() || mismatch {
		b.setStrict(row.Strict)
		b.restart()
	}
	b.mu.Unlock()
	if mismatch {
		// The mode changed: the batch may not be served the way asked.
		return dst, b.modeChanged(row.Strict)
	}
	return append(dst, ids.Range{First: seg.Start, Count: need}), nil
}

// errWaited is the cause of a Take's context once Options.Wait has passed.
var errWaited = errors.New("waited too long for the store")

// await waits for the load l of tag. A nil l is a load that could not
// start: the store failed a moment ago (with failed), or the allocator is
// closed.
func (a *Allocator) await(ctx context.Context, tag string, l *call, failed error) error {
	if l == nil {
		if a.ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, errClosed)
		}
		if failed == nil {
			failed = errors.New("no segment loaded")
		}
		return loadError(tag, failed)
	}
	select {
	case <-l.done:
		return loadError(tag, l.err)
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errWaited) {
			return fmt.Errorf("%w: tag %q: the store did not answer within %v; retry later, and check the store", ErrUnavailable, tag, a.opt.Wait)
		}
		return fmt.Errorf("%w: tag %q: %w", ErrUnavailable, tag, ctx.Err())
	}
}

// loadError is what a Take that needed a failed load returns.
func loadError(tag string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnknownTag):
		return &TagError{Tag: tag, Err: ErrUnknownTag}
	case errors.Is(err, ErrExhausted):
		return &TagError{Tag: tag, Err: ErrExhausted}
	}
	return fmt.Errorf("%w: tag %q: buffers empty and the store failed: %w", ErrUnavailable, tag, err)
}

func errCount(n int64) error {
	return fmt.Errorf("segment: cannot take %d IDs; ask for 1 or more", n)
}

// preload starts loading the next segment once 10% of the current one is
// used, so the switch finds it ready. b.mu is held.
func (a *Allocator) preload(b *buffer) {
	if b.loading != nil || b.nextReady || !b.cur.used10() {
		return
	}
	a.startLoad(b)
}

// startLoad returns the load of b's next segment in flight, starting one if
// none is and the next segment is not there yet. nil when none can start.
// b.mu is held.
func (a *Allocator) startLoad(b *buffer) *call {
	if b.loading != nil || b.nextReady {
		return b.loading
	}
	now := a.opt.Now()
	if now.Before(b.retryAt) {
		return nil
	}
	step := b.nextStep(now, a.opt.MaxStep)
	l := &call{done: make(chan struct{})}
	gen := b.gen
	if !a.spawn(func() { a.load(b, l, step, now, gen) }) {
		return nil
	}
	b.loading = l
	return l
}

// load fetches b's next segment of step (0: the row's step). A segment
// loaded across a restart of b (generation gen passed), or in another mode
// than b is served in, is dropped.
func (a *Allocator) load(b *buffer, l *call, step int64, started time.Time, gen uint64) {
	ctx, cancel := context.WithTimeout(a.ctx, a.opt.LoadTimeout)
	row, seg, err := a.alloc(ctx, b, step)
	cancel()
	took := a.opt.Now().Sub(started)

	if err == nil {
		row.Tag = b.tag
		a.noteHome(row)
	}
	b.mu.Lock()
	if b.loading == l {
		b.loading = nil
	}
	b.lastTook = took
	switch {
	case err == nil && (b.gen != gen || b.strict.Load() != row.Strict):
		// Restarted meanwhile, or the mode changed in the store (which
		// drops what is buffered too): the segment is not served, and the
		// callers waiting for it load again.
		b.setStrict(row.Strict)
	case err == nil:
		b.next, b.nextReady = seg, true
		b.step, b.minStep = cmp.Or(step, row.Step), row.Step
		b.lastLoad, b.retryAt, b.lastErr = started, time.Time{}, nil
		b.loads++
	default:
		b.retryAt, b.lastErr = started.Add(retryBackoff), err
		b.failures++
	}
	b.mu.Unlock()
	l.err = err
	close(l.done)

	switch {
	case errors.Is(err, ErrUnknownTag):
		a.log.Warn("segment: tag deleted from the store; no longer served", "tag", b.tag)
		a.forget(b.tag)
	case errors.Is(err, ErrExhausted):
		// The store answered: the tag is done, the store is not down.
		a.storeOK()
		b.mu.Lock()
		first := !b.exhausted
		b.exhausted = true
		b.mu.Unlock()
		if first {
			a.log.Error("segment: "+ErrExhausted.Error(), "tag", b.tag)
		}
	case err != nil && a.ctx.Err() == nil:
		a.storeFailed(err, "tag", b.tag)
	case err == nil:
		a.storeOK()
	}
}

// segmentOf is the segment a row handed out by Alloc(tag, step) serves.
func segmentOf(row Row, step int64) (Segment, error) {
	if step == 0 {
		step = row.Step
	}
	if row.Allocated > 0 {
		step = row.Allocated
	}
	if step < 1 {
		return Segment{}, fmt.Errorf("segment: tag %q: the store has step %d; fix it with: vendor tags set-step %s 1000", row.Tag, step, row.Tag)
	}
	// IDs are positive: a row whose max_id was set by hand below its
	// step serves only its positive part.
	start := max(row.MaxID-step, 1)
	if row.MaxID <= start {
		return Segment{}, fmt.Errorf("segment: tag %q: the store returned max_id %d, which leaves no positive IDs", row.Tag, row.MaxID)
	}
	return Segment{Start: start, Value: start, End: row.MaxID}, nil
}

func (a *Allocator) storeFailed(err error, args ...any) {
	if a.storeDown.CompareAndSwap(false, true) {
		a.log.Error("segment: store unavailable; vending from buffers and retrying when they need it", append(args, "err", err)...)
	}
}

// StoreUp reports whether the last store call succeeded: false from the
// first failed call of an outage until a call succeeds again.
func (a *Allocator) StoreUp() bool { return !a.storeDown.Load() }

func (a *Allocator) storeOK() {
	if a.storeDown.CompareAndSwap(true, false) {
		a.log.Info("segment: store available again")
	}
}

// TagStatus describes one tag's buffers, for status pages and metrics.
type TagStatus struct {
	Tag     string
	Current Segment // being served
	Next    Segment // loaded and waiting, when NextReady
	// NextReady is true when Next holds a segment; Loading when its load
	// is in flight.
	NextReady, Loading bool
	// Step is the size of the last segment loaded, MinStep the row's step
	// (the floor of the dynamic step).
	Step, MinStep int64
	Loads         int64 // segments loaded
	LoadFailures  int64
	LastLoad      time.Time     // when the last successful load started
	LastLoadTook  time.Duration // how long the last load (either outcome) took
	LastError     error         // of the last load, nil after a success
	Strict        bool          // served by its leader only
	// Exhausted: the store said the tag's IDs are used up. High is the end
	// of the highest segment allocated here (0: none yet).
	Exhausted bool
	High      int64
	// Allocated is how many IDs the store allocated for the tag here
	// (segments and batches, served or not): how busy it is.
	Allocated int64
}

// buffers returns the buffers of the tags asked for, ordered by tag.
func (a *Allocator) buffers() []*buffer {
	var out []*buffer
	a.live.Range(func(_, b any) bool {
		out = append(out, b.(*buffer))
		return true
	})
	slices.SortFunc(out, func(x, y *buffer) int { return strings.Compare(x.tag, y.tag) })
	return out
}

// Snapshot returns the status of every tag asked for, ordered by tag.
func (a *Allocator) Snapshot() []TagStatus {
	bufs := a.buffers()
	out := make([]TagStatus, 0, len(bufs))
	for _, b := range bufs {
		out = append(out, b.status())
	}
	return out
}
