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
	"github.com/leaf-nats/leaf/internal/backoff"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/snowflake"
)

// staticHorizon is how far ahead a static worker ID's file reserves
// timestamps: a restart after a crash waits at most this long.
const staticHorizon = 3 * time.Second

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
	// marked with lease.Permanent ends the Keeper if no worker ID was ever
	// held; every other error is retried with backoff.
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
	// Clock times the renewals; its time must be Generator.Clock's, which
	// the holders measure deadlines on. Nil: real timers on
	// Generator.Clock.
	Clock lease.Clock
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
	if c.Generator.Clock == nil {
		c.Generator.Clock = snowflake.SystemClock{}
	}
	if c.Clock == nil {
		c.Clock = lease.Timers(c.Generator.Clock)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("workerid: %w", err)
	}
	return c, nil
}

// Keeper holds a worker ID and the generator that vends with it. It is safe
// for concurrent use.
//
// Its loop is a lease.Driver: claims, renewals, losses and the release at
// Close are the lease machine's decisions, and the Keeper's part is the
// hold (Config.Claim, a Holder) and the generator whose window each
// renewal opens (hold, the driver's Lessee).
type Keeper struct {
	cfg Config
	log *slog.Logger
	drv *lease.Driver

	gen      atomic.Pointer[snowflake.Generator] // nil while no worker ID is held
	fencedAt atomic.Uint64                       // the fence of gen's window
	claimed  chan struct{}                       // closed at the first claim

	cancel context.CancelFunc
	done   chan struct{} // closed when the driver returns, with err set
	err    error

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
	k := &Keeper{cfg: c, log: c.Logger, claimed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	dc := lease.DriverConfig{
		Machine: lease.Config{Name: "worker ID", Reclaim: true, Backoff: backoff.Backoff{Min: minBackoff, Max: maxBackoff}},
		Clock:   c.Clock,
		Logger:  c.Logger,
	}
	if c.Fence != nil {
		dc.Fence = fenceFunc(c.Fence)
	}
	k.drv = lease.NewDriver(dc, &hold{k: k})
	go func() {
		defer close(k.done)
		k.err = k.drv.Run(ctx)
	}()
	return k, nil
}

type fenceFunc func() uint64

func (f fenceFunc) Fence() uint64 { return f() }

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

// generator returns the generator that may vend now: its window closes by
// itself at the deadline; a moved fence closes it here, and asks the
// driver for a renewal.
func (k *Keeper) generator() (*snowflake.Generator, error) {
	g := k.gen.Load()
	if g == nil {
		return nil, fmt.Errorf("%w: %s", snowflake.ErrNoLease, k.whyNone())
	}
	if k.cfg.Fence != nil && k.cfg.Fence() != k.fencedAt.Load() {
		k.drv.Ring()
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

// hold is the Keeper's side of its driver (lease.Lessee): the worker ID
// held, and the generator that vends with it. Only the driver's goroutine
// calls its methods.
type hold struct {
	k       *Keeper
	h       Holder               // nil before the first claim
	mode    string               // "kv-lease" or "static"
	gen     *snowflake.Generator // made at the claim, vending from the first window
	serving bool                 // gen is installed
	shut    bool                 // gen was revoked: last is its last millisecond
	last    int64
}

var _ lease.Lessee = (*hold)(nil)

// Claim takes a worker ID and makes its generator, which vends from the
// first window on.
func (o *hold) Claim(ctx context.Context) (time.Time, error) {
	k := o.k
	*o = hold{k: k}
	h, mode, err := k.claim(ctx)
	if err == nil {
		settings := k.cfg.Generator
		settings.WorkerID, settings.Last, settings.Leased = h.ID(), h.Last(), true
		var g *snowflake.Generator
		if g, err = snowflake.New(settings); err == nil {
			*o = hold{k: k, h: h, mode: mode, gen: g}
			return time.Time{}, nil
		}
		err = lease.Permanent(err)
		k.releaseUnused(ctx, h)
	}
	if ctx.Err() == nil {
		k.setLastErr(err)
	}
	return time.Time{}, err
}

// Renew renews the hold, recording the generator's last millisecond
// (after a backwards clock step it is ahead of any new deadline).
func (o *hold) Renew(ctx context.Context) (time.Time, error) {
	last := o.h.Last()
	if o.serving {
		last = o.gen.Last()
	}
	deadline, err := o.h.Renew(ctx, last)
	if err != nil && !o.serving && ctx.Err() == nil {
		o.k.setLastErr(err) // the claim's first renewal: the claim failed
	}
	return deadline, err
}

// Serve opens the generator's window to w's deadline; the first one makes
// the worker ID the Keeper's.
func (o *hold) Serve(w lease.Window) error {
	k, h := o.k, o.h
	k.fencedAt.Store(w.Fence)
	o.gen.Window(w.Until)
	if o.serving {
		return nil
	}
	o.serving = true
	k.setInfo(Info{ID: h.ID(), Mode: o.mode, Where: h.Where(), PrevLast: h.Last(), Claimed: k.cfg.Clock.Now().UTC()})
	k.setLastErr(nil) // before anyone sees the claim: Status never shows both
	k.install(o.gen)
	k.log.Info("worker ID claimed", "worker_id", h.ID(), "mode", o.mode, "where", h.Where(), "previous_last_ms", h.Last())
	k.markClaimed()
	return nil
}

// Shut stops the generator, keeping its last millisecond for the release.
func (o *hold) Shut() {
	o.last, o.shut, o.serving = o.gen.Revoke(), true, false
	o.k.install(nil)
}

// Release frees the worker ID, recording the last millisecond its
// generator used (none, when it never vended: what the claim found).
func (o *hold) Release(ctx context.Context) error {
	last := o.h.Last()
	if o.shut {
		last = o.last
	}
	if err := o.h.Release(ctx, last); err != nil {
		return fmt.Errorf("release worker ID %d: %w", o.h.ID(), err)
	}
	if o.shut {
		o.k.log.Info("worker ID released", "worker_id", o.h.ID(), "last_ms", last)
	}
	return nil
}

func (o *hold) LogArgs() []any {
	if o.h == nil {
		return nil
	}
	return []any{"worker_id", o.h.ID()}
}

// claim takes a worker ID, through the static worker ID's file too when
// one is set.
func (k *Keeper) claim(ctx context.Context) (Holder, string, error) {
	clock := k.cfg.Generator.Clock
	s := k.cfg.Static
	if s == nil {
		h, err := k.cfg.Claim(ctx, ClaimRequest{IDs: *k.cfg.IDs, Report: k.report})
		if err != nil {
			return nil, "", err
		}
		return h, "kv-lease", k.check(ctx, h)
	}
	fh, err := OpenFile(s.File, s.ID, clock, staticHorizon)
	if err != nil {
		return nil, "", lease.Permanent(err)
	}
	if err := WaitPast(ctx, clock, fh.Last(), DefaultMaxWait); err != nil {
		return nil, "", lease.Permanent(fmt.Errorf("static worker ID %d (timestamp file %s): %w", s.ID, s.File, err))
	}
	l, err := k.cfg.Claim(ctx, ClaimRequest{IDs: One(s.ID), Report: k.report})
	if err != nil {
		return nil, "", err
	}
	h := both{fh, l}
	return h, "static", k.check(ctx, h)
}

// check gives h up unless it holds what the configuration asks for.
func (k *Keeper) check(ctx context.Context, h Holder) error {
	if err := held(h, k.cfg); err != nil {
		k.releaseUnused(ctx, h)
		return lease.Permanent(err)
	}
	k.report("", time.Time{})
	return nil
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

// releaseUnused frees a worker ID whose hold is of no use, for someone
// else.
func (k *Keeper) releaseUnused(ctx context.Context, h Holder) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease.ReleaseTimeout)
	defer cancel()
	if err := h.Release(rctx, h.Last()); err != nil {
		k.log.Warn("releasing a worker ID after a failed start", "worker_id", h.ID(), "err", err)
	}
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
	ls := k.drv.Status()
	s := Status{
		Info:            k.info,
		Deadline:        ls.Deadline,
		Renewals:        ls.Renewals,
		RenewalFailures: ls.Failures,
		Clock:           k.clockBase,
		LastError:       k.lastErr,
		Waiting:         k.waiting,
		WaitingUntil:    k.until,
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
