package workerid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/snowflake"
)

// staticHorizon is how far ahead a static worker ID's file reserves
// timestamps: a restart after a crash waits at most this long.
const staticHorizon = 3 * time.Second

// releaseTimeout bounds the release of the worker ID at Close.
const releaseTimeout = 5 * time.Second

// Claim backoff: a failed claim is retried after minBackoff, doubling up
// to maxBackoff.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// Config configures a Keeper.
//
// Like every component's configuration in this module, it is a plain struct
// in which the zero value of a field means its default; Open checks the
// whole struct at once and names every bad field, so a caller sees all its
// mistakes in one error.
type Config struct {
	// Claim takes a hold on a free worker ID of the request's range,
	// waiting until the clock is past its last timestamp (kv.Claim), and
	// says through the request's Report why it waits. Required. An error
	// marked with Permanent ends the Keeper if no worker ID was ever held;
	// every other error is retried with backoff.
	Claim func(ctx context.Context, r ClaimRequest) (Holder, error)
	// IDs bounds the worker IDs claimed; nil means every worker ID of
	// Generator.Layout.
	IDs *Range
	// Static, when set, pins one worker ID (Leaf's local mode) instead of
	// claiming any free one.
	Static *Static
	// Generator is the settings of every generator the Keeper makes: the
	// epoch, clock and clock tolerance. The Keeper sets WorkerID, Last and
	// Leased.
	Generator snowflake.Settings
	// Fence, when set, is a counter that moves whenever the worker ID's
	// hold must be renewed before the next ID: the count of reconnects of
	// the connection requests arrive on, to a server that may not be the
	// one the hold was renewed on (it may have lost every lease). NextN
	// refuses while it differs from its value at the last renewal, and
	// asks for a renewal at once.
	Fence func() uint64
	// Logger receives claims, losses and releases. Default: discard.
	Logger *slog.Logger
}

// ClaimRequest is what the Keeper asks Config.Claim for.
type ClaimRequest struct {
	// IDs bounds the worker IDs to claim: One(id) for a static worker ID.
	IDs Range
	// Report tells the Keeper, in a sentence for people, why the claim
	// is waiting, and until when (zero when that is not known); Status
	// shows it until the claim ends.
	Report func(why string, until time.Time)
}

// Static is a pinned worker ID. It keeps its last timestamp in File as well
// as wherever Claim holds it, so that a restart never vends a millisecond an
// earlier run may have used.
type Static struct {
	ID   int
	File string
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Claim == nil {
		errs = append(errs, errors.New("Claim is nil; pass a function that claims worker IDs (kv.Claim)"))
	}
	l := c.Generator.Layout
	if c.IDs == nil {
		all := AllOf(l)
		c.IDs = &all
	}
	if err := c.IDs.CheckIn(l); err != nil {
		errs = append(errs, err)
	}
	if s := c.Static; s != nil {
		if s.ID < 0 || s.ID > l.MaxWorkerID() {
			errs = append(errs, fmt.Errorf("static worker ID %d is outside 0..%d of layout %s", s.ID, l.MaxWorkerID(), l.Name()))
		}
		if s.File == "" {
			errs = append(errs, fmt.Errorf("static worker ID %d has no timestamp file", s.ID))
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("workerid: %w", err)
	}
	return c, nil
}

// Keeper holds a worker ID and the generator that vends with it. It is safe
// for concurrent use.
type Keeper struct {
	cfg Config
	log *slog.Logger

	gen     atomic.Pointer[snowflake.Generator] // nil while no worker ID is held
	claimed chan struct{}                       // closed at the first claim

	cancel context.CancelFunc
	done   chan struct{} // closed when run returns, with err set
	err    error

	renewals, failures atomic.Uint64
	deadline           atomic.Int64  // Unix ns of the last deadline, 0 before any
	fencedAt           atomic.Uint64 // Fence's value before the last renewal
	renewNow           chan struct{} // capacity 1: NextN found the fence moved

	mu        sync.Mutex // guards the fields below and replacing gen
	info      Info
	waiting   string          // why the claim in progress waits
	until     time.Time       // until when, zero when unknown
	lastErr   error           // of the last failed claim, until one succeeds
	clockBase snowflake.Stats // clock counters of generators replaced
}

// Open checks c and starts the Keeper's loop, which claims a worker ID at
// once. Claimed tells when vending can start; Close stops the Keeper.
func Open(c Config) (*Keeper, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Keeper{cfg: c, log: c.Logger, claimed: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
		renewNow: make(chan struct{}, 1)}
	go func() {
		defer close(k.done)
		k.err = k.run(ctx)
	}()
	return k, nil
}

// Claimed is closed once a worker ID is held for the first time.
func (k *Keeper) Claimed() <-chan struct{} { return k.claimed }

// Done is closed when the Keeper has stopped: after Close, or when it gave
// up (Err says why).
func (k *Keeper) Done() <-chan struct{} { return k.done }

// Err returns why the Keeper stopped, once Done is closed: nil after Close
// and a clean release.
func (k *Keeper) Err() error {
	select {
	case <-k.done:
		return k.err
	default:
		return nil
	}
}

// Close stops vending, releases the worker ID (recording its true last
// millisecond) and waits for the loop, or for ctx. It returns the release's
// error; a Keeper that had stopped by itself has said why through Err.
func (k *Keeper) Close(ctx context.Context) error {
	select {
	case <-k.done:
		return nil
	default:
	}
	k.cancel()
	select {
	case <-k.done:
		return k.err
	case <-ctx.Done():
		return fmt.Errorf("workerid: release of the worker ID: %w", ctx.Err())
	}
}

// NextN appends n IDs from the current generator to dst; without a worker
// ID, or while the fence says the hold must be renewed first, it fails with
// an error wrapping snowflake.ErrNoLease.
func (k *Keeper) NextN(dst []int64, n int) ([]int64, error) {
	g, err := k.generator()
	if err != nil {
		return dst, err
	}
	return g.NextN(dst, n)
}

// NextRanges is NextN handing out runs of IDs, one per millisecond.
func (k *Keeper) NextRanges(dst []ids.Range, n int) ([]ids.Range, error) {
	g, err := k.generator()
	if err != nil {
		return dst, err
	}
	return g.NextRanges(dst, n)
}

// generator returns the generator that may vend now.
func (k *Keeper) generator() (*snowflake.Generator, error) {
	g := k.gen.Load()
	if g == nil {
		return nil, fmt.Errorf("%w: %s", snowflake.ErrNoLease, k.whyNone())
	}
	if k.cfg.Fence != nil && k.cfg.Fence() != k.fencedAt.Load() {
		select {
		case k.renewNow <- struct{}{}:
		default:
		}
		return nil, fmt.Errorf("%w: reconnected to NATS; renewing the worker ID's lease there before vending again", snowflake.ErrNoLease)
	}
	return g, nil
}

// whyNone says why no worker ID is held, for a 503.
func (k *Keeper) whyNone() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.waiting != "":
		return "claiming a worker ID: " + k.waiting
	case k.lastErr != nil:
		return "claiming a worker ID failed (retrying): " + k.lastErr.Error()
	}
	return "no worker ID claimed yet"
}

// fence returns the Fence's value, read before a renewal.
func (k *Keeper) fence() uint64 {
	if k.cfg.Fence == nil {
		return 0
	}
	return k.cfg.Fence()
}

// run claims, keeps and re-claims a worker ID until ctx ends.
func (k *Keeper) run(ctx context.Context) error {
	for {
		g, h, every, err := k.claimRetrying(ctx)
		if err != nil || g == nil {
			return err
		}
		err = k.keep(ctx, g, h, every)
		if !errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
			return err
		}
		k.install(nil)
	}
}

// claimRetrying claims until it succeeds or ctx ends (nil generator, nil
// error). Before the first claim, a permanent error ends it.
func (k *Keeper) claimRetrying(ctx context.Context) (*snowflake.Generator, Holder, time.Duration, error) {
	for backoff := minBackoff; ; backoff = min(2*backoff, maxBackoff) {
		g, h, every, err := k.claim(ctx)
		if err == nil {
			k.report("", time.Time{})
			return g, h, every, nil
		}
		if ctx.Err() != nil {
			return nil, nil, 0, nil
		}
		var perm *PermanentError
		if errors.As(err, &perm) && !k.everClaimed() {
			k.setLastErr(err)
			return nil, nil, 0, err
		}
		if k.setLastErr(err) {
			k.log.Warn("claiming a worker ID failed; retrying until it succeeds", "err", err, "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, 0, nil
		case <-t.C:
		}
	}
}

// claim takes a worker ID and installs a generator for it; it returns once
// the generator may vend, with the interval at which to renew.
func (k *Keeper) claim(ctx context.Context) (*snowflake.Generator, Holder, time.Duration, error) {
	clock := k.cfg.Generator.Clock
	var h Holder
	mode := "kv-lease"
	if s := k.cfg.Static; s != nil {
		mode = "static"
		fh, err := OpenFile(s.File, s.ID, clock, staticHorizon)
		if err != nil {
			return nil, nil, 0, Permanent(err)
		}
		if err := WaitPast(ctx, clock, fh.Last(), DefaultMaxWait); err != nil {
			return nil, nil, 0, Permanent(fmt.Errorf("static worker ID %d (timestamp file %s): %w", s.ID, s.File, err))
		}
		l, err := k.cfg.Claim(ctx, ClaimRequest{IDs: One(s.ID), Report: k.report})
		if err != nil {
			return nil, nil, 0, err
		}
		h = both{fh, l}
	} else {
		l, err := k.cfg.Claim(ctx, ClaimRequest{IDs: *k.cfg.IDs, Report: k.report})
		if err != nil {
			return nil, nil, 0, err
		}
		h = l
	}
	if err := held(h, k.cfg); err != nil {
		k.releaseUnused(ctx, h)
		return nil, nil, 0, Permanent(err)
	}
	k.report("", time.Time{})
	settings := k.cfg.Generator
	settings.WorkerID, settings.Last, settings.Leased = h.ID(), h.Last(), true
	g, err := snowflake.New(settings)
	if err != nil {
		err = Permanent(err)
	} else {
		var deadline time.Time
		renewed, fence := time.Now(), k.fence()
		if deadline, err = h.Renew(ctx, h.Last()); err == nil {
			k.fencedAt.Store(fence)
			g.Window(deadline)
			k.deadline.Store(deadline.UnixNano())
			k.setInfo(Info{ID: h.ID(), Mode: mode, Where: h.Where(), PrevLast: h.Last(), Claimed: time.Now().UTC()})
			k.setLastErr(nil) // before anyone sees the claim: Status never shows both
			k.install(g)
			k.log.Info("worker ID claimed", "worker_id", h.ID(), "mode", mode, "where", h.Where(), "previous_last_ms", h.Last())
			k.markClaimed()
			return g, h, renewInterval(deadline.Sub(renewed)), nil
		}
	}
	k.releaseUnused(ctx, h)
	return nil, nil, 0, err
}

// held checks that the holder holds the worker ID the configuration asks
// for: a Claim that returned another would vend IDs someone else makes.
func held(h Holder, c Config) error {
	if b, ok := h.(both); ok && b.a.ID() != b.b.ID() {
		return fmt.Errorf("static worker ID %d: %s holds worker ID %d instead (a bug)", b.a.ID(), b.b.Where(), b.b.ID())
	}
	if s := c.Static; s != nil && h.ID() != s.ID {
		return fmt.Errorf("static worker ID %d: the claim returned worker ID %d (a bug)", s.ID, h.ID())
	}
	if c.Static == nil && !c.IDs.Contains(h.ID()) {
		return fmt.Errorf("the claim returned worker ID %d, outside the range %s (a bug)", h.ID(), c.IDs)
	}
	return nil
}

// release frees a worker ID whose hold is of no use, for someone else.
func (k *Keeper) releaseUnused(ctx context.Context, h Holder) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := h.Release(rctx, h.Last()); err != nil {
		k.log.Warn("releasing a worker ID after a failed start", "worker_id", h.ID(), "err", err)
	}
}

// renewInterval renews three times per hold: a renewal may fail twice and
// the third still lands before the deadline.
func renewInterval(hold time.Duration) time.Duration {
	return max(hold/3, time.Millisecond)
}

// keep renews h every interval and opens g's window to each new deadline,
// until ctx ends (then it revokes g, releases h and returns the release's
// error) or the hold is lost (then it revokes g and returns the error). A
// failed renewal is retried every interval/4; meanwhile g stops by itself
// at the last deadline.
func (k *Keeper) keep(ctx context.Context, g *snowflake.Generator, h Holder, interval time.Duration) error {
	failing := false
	var calm time.Time // pokes before this wait for the timer: renewals are failing
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return k.release(ctx, g, h)
		case <-t.C:
		case <-k.renewNow:
			if time.Now().Before(calm) {
				continue
			}
		}
		fence := k.fence()
		deadline, err := h.Renew(ctx, g.Last())
		switch {
		case err == nil:
			k.fencedAt.Store(fence)
			g.Window(deadline)
			k.renewals.Add(1)
			k.deadline.Store(deadline.UnixNano())
			if failing {
				k.log.Info("worker ID lease renewed again", "worker_id", h.ID())
				failing = false
			}
			t.Reset(interval)
		case errors.Is(err, ErrLeaseLost):
			k.failures.Add(1)
			g.Revoke()
			k.log.Error("worker ID lease lost: vending stopped", "worker_id", h.ID(), "err", err)
			return err
		case ctx.Err() != nil:
			t.Reset(0)
		default:
			k.failures.Add(1)
			if !failing {
				k.log.Warn("worker ID lease renewal failed; retrying (vending stops at the lease deadline)",
					"worker_id", h.ID(), "err", err)
				failing = true
			}
			calm = time.Now().Add(min(interval/4, time.Second))
			t.Reset(interval / 4)
		}
	}
}

// release stops g and frees h, recording the last millisecond g used.
func (k *Keeper) release(ctx context.Context, g *snowflake.Generator, h Holder) error {
	last := g.Revoke()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := h.Release(rctx, last); err != nil {
		return fmt.Errorf("release worker ID %d: %w", h.ID(), err)
	}
	k.log.Info("worker ID released", "worker_id", h.ID(), "last_ms", last)
	return nil
}

// install replaces the generator (nil: none), keeping the old one's clock
// counters.
func (k *Keeper) install(g *snowflake.Generator) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old := k.gen.Load(); old != nil {
		st := old.Stats()
		k.clockBase.BackwardSteps += st.BackwardSteps
		k.clockBase.BackwardRefused += st.BackwardRefused
		k.clockBase.BackwardWaited += st.BackwardWaited
	}
	k.gen.Store(g)
}

func (k *Keeper) everClaimed() bool {
	select {
	case <-k.claimed:
		return true
	default:
		return false
	}
}

func (k *Keeper) markClaimed() {
	if !k.everClaimed() {
		close(k.claimed)
	}
}

func (k *Keeper) setInfo(i Info) {
	k.mu.Lock()
	k.info = i
	k.mu.Unlock()
}

// report records why the claim in progress waits ("" once it does not)
// and until when, and logs it when it changes.
func (k *Keeper) report(why string, until time.Time) {
	k.mu.Lock()
	changed := k.waiting != why
	k.waiting, k.until = why, until
	k.mu.Unlock()
	switch {
	case changed && why != "" && !until.IsZero():
		k.log.Info("claiming a worker ID: "+why, "until", until.UTC().Format(time.RFC3339Nano))
	case changed && why != "":
		k.log.Info("claiming a worker ID: " + why)
	}
}

// setLastErr records the last claim error and reports whether it says
// something other than the one before.
func (k *Keeper) setLastErr(err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := (k.lastErr == nil) != (err == nil) || err != nil && k.lastErr.Error() != err.Error()
	k.lastErr = err
	return changed
}

// Info describes the worker ID held last.
type Info struct {
	ID       int       // the worker ID
	Mode     string    // "kv-lease" or "static"
	Where    string    // where it is held (Holder.Where)
	PrevLast int64     // the Unix ms its generator started after
	Claimed  time.Time // when it was claimed
}

// Status is the Keeper's state, for status pages and metrics.
type Status struct {
	Info
	// Held is true while a generator may vend (until Deadline).
	Held bool
	// Deadline is when the hold runs out unless renewed; its millisecond
	// is the last timestamp recorded for the worker ID.
	Deadline time.Time
	// LastIDMs is the Unix ms of the last ID made.
	LastIDMs int64
	// Renewals and RenewalFailures count renewals since Open.
	Renewals, RenewalFailures uint64
	// Clock adds up the clock events of every generator since Open.
	Clock snowflake.Stats
	// LastError is why the last claim failed, while none has succeeded
	// since.
	LastError error
	// Waiting is why the claim in progress waits, when it says, and
	// WaitingUntil until when (zero when it does not know).
	Waiting      string
	WaitingUntil time.Time
}

// Status returns the Keeper's state.
func (k *Keeper) Status() Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := Status{
		Info:            k.info,
		Renewals:        k.renewals.Load(),
		RenewalFailures: k.failures.Load(),
		Clock:           k.clockBase,
		LastError:       k.lastErr,
		Waiting:         k.waiting,
		WaitingUntil:    k.until,
	}
	if ns := k.deadline.Load(); ns != 0 {
		s.Deadline = time.Unix(0, ns)
	}
	if g := k.gen.Load(); g != nil {
		s.Held = true
		s.LastIDMs = g.Last()
		cur := g.Stats()
		s.Clock.BackwardSteps += cur.BackwardSteps
		s.Clock.BackwardRefused += cur.BackwardRefused
		s.Clock.BackwardWaited += cur.BackwardWaited
	}
	return s
}
