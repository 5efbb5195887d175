// Package strict serves strict tags: segment tags whose IDs increase across
// the whole cluster. If one request's reply was received before another
// request was sent, every ID of the second is greater than every ID of the
// first, whichever vendors served them; gaps are allowed, going backwards
// never, and a vendor that cannot keep that answers ErrUnavailable (a 503).
//
// One vendor leads a strict tag at a time and serves all its requests from
// one segment.Allocator buffer, whose IDs ascend; the other vendors forward
// the tag's requests to it over NATS. Leadership is a lease (kv.Lead) with
// the worker-ID lease's fencing, held by the same machine (a lease.Driver
// per lead, without Reclaim: a lead lost, or whose renewals fail past its
// deadline, steps down, and the next request may take it again), and the
// argument is the same:
//
//   - A leader serves only before its deadline, a TTL after its last renewal
//     was sent, less a margin, which passes before the server can expire its
//     key; a new leader can take the key only after that. So no two leaders
//     serve at once, and a leader checks its deadline after it has taken a
//     request's IDs, when they are about to leave.
//   - A new leader serves only from a segment allocated after it took the
//     lease (it restarts the tag's buffer): every segment an earlier leader
//     served from was allocated before that leader's deadline, so before
//     this allocation, and holds lower IDs.
//   - One leader's IDs come from one buffer in the order it takes them, and a
//     batch allocated for itself drops the buffer (segment.Allocator's
//     TakeStrict), so they ascend in real time.
//   - After a reconnect to NATS (to a server that may have lost its state) a
//     leader renews before it serves again (Config.Fence), as a worker-ID
//     holder does.
//
// A vendor that does not lead a tag forwards its requests (Take) and waits
// for the answer, which tells it the leader serves; while the last answer
// is fresh (Config.HandoffFor), it hands them off instead (Handoff), and
// the leader answers the client directly. Safety does not rest on that
// freshness: the leader checks its own lease for every request, however
// it came.
//
// Leadership is taken on demand: a vendor that gets a strict tag's request
// and finds no leader answering takes the lease itself. So the tags spread
// over the vendors that happen to get their first requests.
package strict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/inflight"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

var (
	// ErrNoLeader is what Config.Forward returns when no leader answered:
	// the caller may take the lead.
	ErrNoLeader = errors.New("strict: no leader answered")
	// ErrNotLeader is returned by Serve on a vendor that does not lead the
	// tag (any more): the forwarding vendor answers a 503, and the client
	// asks again.
	ErrNotLeader = errors.New("strict: this vendor does not lead the tag")
	// ErrLedElsewhere is what Config.Lead returns when another vendor
	// holds the tag's lease.
	ErrLedElsewhere = errors.New("strict: another vendor leads the tag")
)

// Source is where a leader takes a strict tag's IDs: segment.Allocator.
type Source interface {
	// Home is a strict tag's home region (segment.Row.Home).
	Home(tag string) string
	Restart(tag string)
	TryTakeStrict(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error)
	TakeStrict(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error)
}

var _ Source = (*segment.Allocator)(nil)

// Lease is a hold on a tag's leadership (kv.Lead).
type Lease interface {
	// Renew extends the lease and returns the deadline until which its
	// holder may serve, by Config.Clock; an error wrapping lease.ErrLost
	// is final.
	Renew(ctx context.Context) (deadline time.Time, err error)
	// Release gives the lease up.
	Release(ctx context.Context) error
}

// Leases takes tags' leases (kv.Leaders).
type Leases interface {
	// Take takes the lease of tag: ErrLedElsewhere when another vendor
	// holds it. notBefore is when the new leader may serve at the
	// earliest (see kv.Lead.NotBefore).
	Take(ctx context.Context, tag string) (l Lease, notBefore time.Time, err error)
}

// Transport carries strict tags' requests between vendors: Forwarder, over
// NATS.
type Transport interface {
	// Forward asks the tag's leader for n IDs: ErrNoLeader when none
	// answered. handoff reports that the leader takes handed-off requests
	// too (it may answer the clients directly; see Handoff).
	Forward(ctx context.Context, tag string, dst []ids.Range, n int64) (rs []ids.Range, handoff bool, err error)
	// Listen makes this vendor reachable as tag's leader (requests that
	// arrive are answered from ls with TryTake and Serve); stop undoes
	// it and says so to the other vendors.
	Listen(tag string, ls *Leaders) (stop func(), err error)
	// Follow makes ls hear what the other vendors say of leaders: one
	// that stepped down (Forget), a handed-off request that found none
	// (ForgetAll). Open calls it, before ls serves.
	Follow(ls *Leaders) error
	// HandOff hands a request of tag to its leader, which answers the
	// client: false when it could not.
	HandOff(tag string, r vending.Handing) bool
}

// Fence is a counter that moves whenever a lease must be renewed before the
// next ID: the reconnects of the NATS connection requests arrive on, to a
// server that may have lost every lease.
type Fence = lease.Fence

// Config configures Leaders. Source, Leases and Transport are required.
type Config struct {
	Source    Source
	Leases    Leases
	Transport Transport
	// Fence, when set, moves whenever a lease must be renewed first.
	Fence Fence
	// HandoffFor is how long after the tag's leader last answered a
	// Forward this vendor hands the tag's requests to it (Handoff) instead
	// of forwarding them: the leader answers the client directly, and a
	// leader gone unnoticed costs at most this long of requests that get
	// no answer (or no responders). Zero means DefaultHandoffFor; negative,
	// never hand off.
	HandoffFor time.Duration
	// Clock is what deadlines are read on and renewals timed by: the
	// clock the Leases measure deadlines on. Nil: lease.Timers(nil), the
	// system's.
	Clock lease.Clock
	// Region is this vendor's region (LEAF_REGION), "" with none: with
	// regions, only the vendors of a strict tag's home region lead it, so
	// that one leader orders its IDs across every region; the others
	// forward to it, and answer 503 naming the home region when no leader
	// answers (a partition between regions).
	Region string
	// Logger receives leadership taken and lost. Default: discard.
	Logger *slog.Logger
}

// DefaultHandoffFor is Config.HandoffFor's default.
const DefaultHandoffFor = 100 * time.Millisecond

// Leaders serves the strict tags of one vendor. It is safe for concurrent
// use.
type Leaders struct {
	cfg Config
	log *slog.Logger

	// drivers are the leads' drivers; Close stops it before it takes the
	// leads, so that no lead starts after.
	drivers inflight.Group

	mu       sync.Mutex
	leads    map[string]*lead     // this vendor's, from the claim until the lead ends
	answered map[string]time.Time // when another vendor last answered a Forward as the tag's leader
}

// Open returns Leaders with cfg; Close ends every lead.
func Open(cfg Config) (*Leaders, error) {
	var errs []error
	if cfg.Source == nil {
		errs = append(errs, errors.New("Source is nil"))
	}
	if cfg.Leases == nil {
		errs = append(errs, errors.New("Leases is nil"))
	}
	if cfg.Transport == nil {
		errs = append(errs, errors.New("Transport is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("strict: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = lease.Timers(nil)
	}
	if cfg.HandoffFor == 0 {
		cfg.HandoffFor = DefaultHandoffFor
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ls := &Leaders{cfg: cfg, log: cfg.Logger, leads: map[string]*lead{}, answered: map[string]time.Time{}}
	if err := cfg.Transport.Follow(ls); err != nil {
		return nil, fmt.Errorf("strict: %w", err)
	}
	return ls, nil
}

// serveErr says why l may not serve now, nil when it may; it asks for a
// renewal when one is overdue or the fence moved.
func (ls *Leaders) serveErr(l *lead) error {
	w := l.drv.Status().Window
	switch w.Check(ls.cfg.Clock.Now(), ls.fence()) {
	case lease.Serving:
		return nil
	case lease.Closed:
		return fmt.Errorf("%w: tag %q: %w", ErrNotLeader, l.tag, l.why())
	case lease.Early:
		return fmt.Errorf("%w: tag %q: this vendor leads it since its lease bucket was created again, and serves from %s, when no earlier leader can still serve",
			segment.ErrUnavailable, l.tag, w.NotBefore.Format(time.RFC3339Nano))
	case lease.Overdue:
		l.drv.Ring()
		return fmt.Errorf("%w: tag %q: the lead's renewal is overdue; renewing", segment.ErrUnavailable, l.tag)
	}
	l.drv.Ring()
	return fmt.Errorf("%w: tag %q: reconnected to NATS; renewing the lead there before serving again", segment.ErrUnavailable, l.tag)
}

func (ls *Leaders) fence() uint64 {
	if ls.cfg.Fence == nil {
		return 0
	}
	return ls.cfg.Fence.Fence()
}

// leading returns this vendor's lead of tag once it serves (it took the
// lease and restarted the buffer), nil when it has none.
func (ls *Leaders) leading(tag string) *lead {
	ls.mu.Lock()
	l := ls.leads[tag]
	ls.mu.Unlock()
	if l == nil || !l.hasStarted() {
		return nil
	}
	return l
}

// Leans reports whether this vendor leads tag and another vendor passed it
// one of the tag's requests (forwarded or handed off) since it took the
// lead: Segments.Leans.
func (ls *Leaders) Leans(tag string) bool {
	l := ls.leading(tag)
	return l != nil && l.passed.Load()
}

// TryTake serves n IDs of tag from memory when this vendor leads it and can
// without waiting for the store; ok is false otherwise (call Take).
func (ls *Leaders) TryTake(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	l := ls.leading(tag)
	if l == nil {
		return dst, false, nil
	}
	rs, ok, err := ls.cfg.Source.TryTakeStrict(tag, dst, n)
	if err != nil || !ok {
		return dst, ok, ls.sourceErr(l, err)
	}
	if err := ls.serveErr(l); err != nil {
		return dst, false, unavailable(err)
	}
	return rs, true, nil
}

// Take serves n IDs of tag: from this vendor's buffer when it leads the
// tag, from the leader's over Forward when another vendor does, and when
// none answers, by taking the lead.
func (ls *Leaders) Take(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	if l := ls.leading(tag); l != nil {
		return ls.serve(ctx, l, dst, n)
	}
	rs, handoff, err := ls.cfg.Transport.Forward(ctx, tag, dst, n)
	ls.noteAnswer(tag, handoff && err == nil)
	if !errors.Is(err, ErrNoLeader) {
		return rs, err
	}
	if err := ls.mayLead(tag); err != nil {
		return dst, err
	}
	l, err := ls.takeLead(ctx, tag)
	if errors.Is(err, ErrLedElsewhere) {
		// Taken a moment ago by another vendor, or held by one that does
		// not answer: it serves, or its lease expires.
		return dst, fmt.Errorf("%w: tag %q: %w; ask again", segment.ErrUnavailable, tag, err)
	}
	if err != nil {
		return dst, err
	}
	return ls.serve(ctx, l, dst, n)
}

// mayLead says why this vendor may not lead tag, nil when it may: with
// regions, only the vendors of the tag's home region do.
func (ls *Leaders) mayLead(tag string) error {
	home := ls.cfg.Source.Home(tag)
	switch {
	case ls.cfg.Region == "" || home == ls.cfg.Region:
		return nil
	case home == "":
		return fmt.Errorf("%w: strict tag %q has no home region, so no region leads it: set it in the region that should, with vendor tags set-strict %s",
			segment.ErrUnavailable, tag, tag)
	}
	return fmt.Errorf("%w: strict tag %q is led by its home region %s, which this vendor (region %s) cannot reach now: ask again, or ask region %s",
		segment.ErrUnavailable, tag, home, ls.cfg.Region, home)
}

// noteAnswer records when the tag's leader answered a Forward with IDs and
// takes handed-off requests (ok), and forgets it otherwise: Handoff's
// evidence that a leader listens and serves.
func (ls *Leaders) noteAnswer(tag string, ok bool) {
	now := ls.cfg.Clock.Now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ok {
		ls.answered[tag] = now
	} else {
		delete(ls.answered, tag)
	}
}

// Handoff reports whether this vendor should hand a request of tag to its
// leader, to be answered by it directly (Transport.HandOff): another
// vendor leads the tag and answered one of this vendor's forwards within
// Config.HandoffFor. Otherwise the request goes through Take, which
// forwards it and waits for the answer (so that a missing leader is
// noticed, and the lead taken), and which renews the evidence.
func (ls *Leaders) Handoff(tag string) bool {
	now := ls.cfg.Clock.Now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	at, ok := ls.answered[tag]
	return ok && !ls.drivers.Stopped() && ls.leads[tag] == nil && now.Sub(at) < ls.cfg.HandoffFor
}

// Forget forgets the leader's answers of tag: its leader said it stepped
// down, so the next requests go through Take, which finds out who leads
// (or takes the lead), rather than being handed to no one.
func (ls *Leaders) Forget(tag string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.answered, tag)
}

// ForgetAll forgets every leader's answers: a request handed to one found
// none listening.
func (ls *Leaders) ForgetAll() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	clear(ls.answered)
}

// Serve answers a request Forward sent to this vendor: from its buffer when
// it leads tag, ErrNotLeader otherwise.
func (ls *Leaders) Serve(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	l := ls.leading(tag)
	if l == nil {
		return dst, fmt.Errorf("%w: %q", ErrNotLeader, tag)
	}
	return ls.serve(ctx, l, dst, n)
}

// serve takes the IDs, then checks that the lead is still good: IDs taken
// while it is not (the store answered after the deadline) are dropped.
func (ls *Leaders) serve(ctx context.Context, l *lead, dst []ids.Range, n int64) ([]ids.Range, error) {
	if err := ls.serveErr(l); err != nil {
		return dst, unavailable(err)
	}
	rs, err := ls.cfg.Source.TakeStrict(ctx, l.tag, dst, n)
	if err != nil {
		return dst, ls.sourceErr(l, err)
	}
	if err := ls.serveErr(l); err != nil {
		return dst, unavailable(err)
	}
	return rs, nil
}

// unavailable makes a lost lead a 503 for the client.
func unavailable(err error) error {
	if errors.Is(err, ErrNotLeader) {
		return fmt.Errorf("%w: %w", segment.ErrUnavailable, err)
	}
	return err
}

// sourceErr passes the allocator's error on; a tag no longer strict ends
// the lead.
func (ls *Leaders) sourceErr(l *lead, err error) error {
	if errors.Is(err, segment.ErrNotStrict) {
		ls.stepDown(l, err)
	}
	return err
}

// takeLead takes the lead of tag, or waits for this vendor's taking of it
// already under way: the requests that find it so wait for it rather than
// race it for the lease (and lose, with a 503).
func (ls *Leaders) takeLead(ctx context.Context, tag string) (*lead, error) {
	ls.mu.Lock()
	l := ls.leads[tag]
	if l == nil {
		l = ls.startLead(tag)
	}
	ls.mu.Unlock()
	if l == nil || ls.drivers.Stopped() {
		return nil, fmt.Errorf("%w: closing", segment.ErrUnavailable)
	}
	select {
	case <-l.started:
		return l, nil
	case <-l.done:
		return nil, l.takeErr()
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: tag %q: waiting for this vendor to take its lead: %w", segment.ErrUnavailable, tag, ctx.Err())
	}
}

// startLead starts the driver of a lead of tag, which claims the lease at
// once; nil once Close has begun. ls.mu is held.
func (ls *Leaders) startLead(tag string) *lead {
	ctx, stop := context.WithCancelCause(context.Background())
	l := &lead{ls: ls, tag: tag, stop: stop, started: make(chan struct{}), done: make(chan struct{})}
	l.drv = lease.NewDriver(lease.DriverConfig{
		Machine: lease.Config{Name: "strict tag"},
		Clock:   ls.cfg.Clock,
		Fence:   ls.cfg.Fence,
		Logger:  ls.log,
	}, l)
	ls.leads[tag] = l
	if !ls.drivers.Go(func() { l.end(l.drv.Run(ctx)) }) {
		delete(ls.leads, tag)
		stop(nil)
		return nil
	}
	return l
}

// stepDown ends l and waits for it: it serves no more, stops listening,
// and gives its lease up.
func (ls *Leaders) stepDown(l *lead, why error) {
	l.stop(why)
	<-l.done
}

// Close stops leading every tag: each stops serving, stops listening and
// releases its lease, so another vendor leads at once. It waits for the
// leads' drivers to end.
func (ls *Leaders) Close(context.Context) error {
	ls.drivers.Stop()
	ls.mu.Lock()
	leads := make([]*lead, 0, len(ls.leads))
	for _, l := range ls.leads {
		leads = append(leads, l)
	}
	ls.mu.Unlock()
	for _, l := range leads {
		l.stop(errors.New("vendor stopping"))
	}
	ls.drivers.Wait()
	return nil
}

// Status is one tag this vendor leads.
type Status struct {
	Tag      string
	Deadline time.Time // of the lease, by this vendor's clock
	Serving  bool      // it may serve now
}

// Status returns the tags this vendor leads, ordered.
func (ls *Leaders) Status() []Status {
	ls.mu.Lock()
	leads := make([]*lead, 0, len(ls.leads))
	for _, l := range ls.leads {
		leads = append(leads, l)
	}
	ls.mu.Unlock()
	out := make([]Status, 0, len(leads))
	for _, l := range leads {
		if l.hasStarted() {
			out = append(out, Status{Tag: l.tag, Deadline: l.drv.Status().Window.Until, Serving: ls.serveErr(l) == nil})
		}
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Tag, b.Tag) })
	return out
}
