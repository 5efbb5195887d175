package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
)

// Lessee is what a Driver holds a lease for: the I/O of the hold and what
// holding it means. Each method is called from the driver's goroutine
// only, one at a time.
type Lessee interface {
	// Claim takes a hold and says when it may serve at the earliest (zero:
	// at once). An error marked Permanent stops a driver that never held.
	Claim(ctx context.Context) (notBefore time.Time, err error)
	// Renew renews the hold and returns the deadline until which it may
	// serve, by the driver's clock. An error wrapping ErrLost is final.
	Renew(ctx context.Context) (deadline time.Time, err error)
	// Release gives the hold up, after Shut when it served.
	Release(ctx context.Context) error
	// Serve lets the holder serve within w, after the claim's first
	// renewal and after each one since; an error stops the driver, which
	// releases the hold.
	Serve(w Window) error
	// Shut stops serving at once: the hold is lost, or being given up.
	Shut()
	// LogArgs is what the driver's log lines say of the hold first
	// ("worker_id", 7).
	LogArgs() []any
}

// Fence is a counter that moves whenever a hold must be renewed before it
// serves again: the reconnects of the NATS connection requests arrive on,
// to a server that may have lost every lease.
type Fence interface {
	Fence() uint64
}

// ReleaseTimeout bounds a release: it runs after the driver's context
// ended.
const ReleaseTimeout = 5 * time.Second

// DriverConfig configures a Driver.
type DriverConfig struct {
	// Machine is the machine's configuration.
	Machine Config
	// Clock is what deadlines are read on and the driver waits on; nil:
	// Timers(nil), real timers on the system's time.
	Clock Clock
	// Fence, when set, is read before each renewal and at each tick.
	Fence Fence
	// Logger receives the machine's log lines. Default: discard.
	Logger *slog.Logger
}

// Driver runs a Machine for a Lessee: the loop that waits on the clock,
// does the I/O a step asks for and steps the machine with its outcome.
// Run is the loop; the caller runs it on a goroutine it owns and stops it
// by ending Run's context.
type Driver struct {
	cfg    DriverConfig
	lessee Lessee
	alarm  Alarm
	log    *slog.Logger
	status atomic.Pointer[Status]
}

// NewDriver returns the driver of l.
func NewDriver(c DriverConfig, l Lessee) *Driver {
	if c.Clock == nil {
		c.Clock = Timers(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{cfg: c, lessee: l, alarm: c.Clock.NewAlarm(), log: c.Logger}
	d.status.Store(&Status{})
	return d
}

// Status returns the machine's state as of its last step.
func (d *Driver) Status() Status { return *d.status.Load() }

// Ring asks for a look at once: the fence moved, or a renewal is overdue.
// The machine renews unless renewals fail and it waits between them. Safe
// for concurrent use.
func (d *Driver) Ring() { d.alarm.Ring() }

// Run claims, renews, and claims again or stops as the machine says,
// until the machine stops or ctx ends; then it releases what it holds and
// returns why it stopped: context.Cause(ctx) (nil when it is plain
// cancellation), joined with the release's error; or the error that ended
// the machine (a permanent claim error, a loss without Reclaim).
func (d *Driver) Run(ctx context.Context) error {
	m := NewMachine(d.cfg.Machine)
	ev := d.tick()
	for {
		r := m.Step(ev)
		d.publish(m)
		if r.Shut {
			d.lessee.Shut()
		}
		var openErr error
		if r.Open {
			openErr = d.lessee.Serve(r.Window)
		}
		d.logAll(ctx, r.Logs)
		switch {
		case r.Stopped:
			return r.Err
		case openErr != nil:
			ev = Event{Kind: Stop, Now: d.cfg.Clock.Now(), Err: openErr}
			continue
		}
		ev = d.next(ctx, r)
		if r.Do != None && ctx.Err() != nil {
			// Stopped while the action was out (which may have failed for
			// it): the machine learns of the stop first, and ends with the
			// outcome rather than act on it, claiming again or logging.
			m.Step(Event{Kind: Stop, Now: ev.Now, Err: cause(ctx)})
		}
	}
}

func (d *Driver) publish(m *Machine) {
	st := m.Status()
	d.status.Store(&st)
}

// next does what r asks, or waits as it says, and returns what happened.
func (d *Driver) next(ctx context.Context, r Ready) Event {
	clock := d.cfg.Clock
	switch r.Do {
	case Claim:
		notBefore, err := d.lessee.Claim(ctx)
		if err != nil {
			return Event{Kind: ClaimFailed, Now: clock.Now(), Err: err}
		}
		return Event{Kind: Claimed, Now: clock.Now(), NotBefore: notBefore}
	case Renew:
		// The fence is read first: a reconnect during the renewal asks for
		// another.
		fence, sent := d.fence(), clock.Now()
		deadline, err := d.lessee.Renew(ctx)
		switch {
		case err == nil:
			return Event{Kind: Renewed, Now: clock.Now(), Sent: sent, Deadline: deadline, Fence: fence}
		case errors.Is(err, ErrLost):
			return Event{Kind: Lost, Now: clock.Now(), Err: err}
		}
		return Event{Kind: RenewFailed, Now: clock.Now(), Err: err}
	case Release:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
		err := d.lessee.Release(rctx)
		cancel()
		return Event{Kind: Released, Now: clock.Now(), Err: err}
	}
	if ctx.Err() == nil {
		d.alarm.Wait(ctx, r.Wake)
	}
	if ctx.Err() != nil {
		return Event{Kind: Stop, Now: clock.Now(), Err: cause(ctx)}
	}
	return d.tick()
}

func (d *Driver) tick() Event {
	return Event{Kind: Tick, Now: d.cfg.Clock.Now(), Fence: d.fence()}
}

func (d *Driver) fence() uint64 {
	if d.cfg.Fence == nil {
		return 0
	}
	return d.cfg.Fence.Fence()
}

func (d *Driver) logAll(ctx context.Context, recs []slog.Record) {
	if len(recs) == 0 {
		return
	}
	log := d.log.With(d.lessee.LogArgs()...)
	for _, rec := range recs {
		args := make([]any, 0, rec.NumAttrs())
		rec.Attrs(func(a slog.Attr) bool {
			args = append(args, a)
			return true
		})
		log.Log(ctx, rec.Level, rec.Message, args...)
	}
}

// cause is why ctx ended: nil for a plain cancellation.
func cause(ctx context.Context) error {
	if err := context.Cause(ctx); err != context.Canceled {
		return err
	}
	return nil
}
