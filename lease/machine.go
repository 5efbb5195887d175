package lease

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leaf-nats/leaf/internal/backoff"
)

var (
	// ErrLost is wrapped by a renewal that found the hold gone: its key
	// expired, was deleted or is another claim's, or the store went back
	// to before it. It is final: the holder stops serving at once.
	ErrLost = errors.New("lease lost")
)

// PermanentError marks a claim error that waiting cannot fix (a
// configuration to change): a Machine that never held stops on it instead
// of claiming again.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as one that waiting cannot fix.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// State is where a Machine is.
type State int

const (
	Idle      State = iota // holding nothing: it claims at the next tick due
	Claiming               // a claim is out
	Starting               // claimed: the first renewal is out
	Held                   // serving until the deadline, renewing when due
	Renewing               // a renewal is out, serving meanwhile until the deadline
	Releasing              // a release is out
	Stopped                // for good
)

func (s State) String() string {
	names := [...]string{"idle", "claiming", "starting", "held", "renewing", "releasing", "stopped"}
	if s < 0 || int(s) >= len(names) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return names[s]
}

// Kind is what an Event says happened.
type Kind int

const (
	Tick        Kind = iota // time passed (a wake-up due, or rung): Now and the Fence now
	Claimed                 // the claim took the hold: NotBefore
	ClaimFailed             // it did not: Err
	Renewed                 // a renewal holds until Deadline: Sent and the Fence read before it was sent
	RenewFailed             // a renewal failed and may be retried: Err
	Lost                    // a renewal found the hold gone (Err wraps ErrLost)
	Released                // the release is done: Err when it failed
	Stop                    // stop for good, releasing what is held: Err says why (nil: asked to)
)

// Event is what happened, and when, by the clock every deadline is read
// on.
type Event struct {
	Kind Kind
	Now  time.Time
	// Fence is, for a Tick, the fence now; for Renewed, its value read
	// before the renewal was sent.
	Fence uint64
	// Sent and Deadline: when a renewal was sent, and until when it lets
	// the holder serve. The hold, Deadline less Sent, sets the cadence.
	Sent, Deadline time.Time
	// NotBefore is, for Claimed, when the holder may serve at the
	// earliest (zero: at once).
	NotBefore time.Time
	Err       error
}

// Action is the I/O a Ready asks for: at most one at a time, whose result
// is the next Event.
type Action int

const (
	None    Action = iota
	Claim          // take a hold: Claimed or ClaimFailed
	Renew          // renew it (read the fence first): Renewed, RenewFailed or Lost
	Release        // give it up: Released
)

// Ready is what a step asks of its driver, in this order: stop serving
// (Shut), serve within Window (Open), log, then do the action, or wait
// until Wake (zero: for an event) and step a Tick.
type Ready struct {
	Shut   bool
	Open   bool
	Window Window
	Logs   []slog.Record
	Do     Action
	Wake   time.Time
	// Stopped: the machine is done, and Err says why (nil after a Stop
	// with no cause whose release succeeded).
	Stopped bool
	Err     error
}

// Config configures a Machine. The zero value of a field is its default.
type Config struct {
	// Name is what is held, as log lines say it: "worker ID" logs
	// "worker ID lease lost: vending stopped".
	Name string
	// Reclaim keeps a hold (worker IDs): a failed claim is tried again
	// after Backoff, a loss claims again at once, and failing renewals
	// are retried past the deadline. Without it the machine stops at a
	// failed claim, a loss, or a renewal that fails past the deadline
	// (strict leads: the next request may take the lead again).
	Reclaim bool
	// Backoff spaces failed claims: 250 ms doubling up to 10 s.
	Backoff backoff.Backoff
}

// Renewal cadence: every third of the hold, so that two renewals may fail
// and the third still lands before the deadline; a failed one is retried
// every quarter of that, and a fence that moves meanwhile waits at least
// that long (at most calmMax) rather than renew at every request.
const (
	minInterval = time.Millisecond
	calmMax     = time.Second
)

// Machine is one fenced lease: claimed, renewed, lost and released. It
// does no I/O, reads no clock and starts no goroutine: Step takes what
// happened and returns what to do (see the package doc). It is not safe
// for concurrent use; its driver owns it.
type Machine struct {
	cfg     Config
	state   State
	backoff backoff.Backoff

	everHeld  bool
	notBefore time.Time
	window    Window    // what it serves within; zero Until while not serving
	deadline  time.Time // the last renewal's, kept once shut
	fence     uint64    // read before the last renewal
	seenFence uint64    // at the last tick
	interval  time.Duration
	renewAt   time.Time
	calm      time.Time // a fence moved before this waits for it
	retryAt   time.Time
	failing   bool
	claimErr  string // the last claim failure logged

	now      time.Time // of the last event
	stopping bool      // a Stop came: end once nothing is held
	final    bool      // the release out ends the machine
	why      error     // why it ends, or why the start failed
	renewals uint64
	failures uint64
}

// NewMachine returns an Idle machine, which claims at its first Tick.
func NewMachine(c Config) *Machine {
	if c.Name == "" {
		c.Name = "lease"
	}
	if c.Backoff == (backoff.Backoff{}) {
		c.Backoff = backoff.Backoff{Min: 250 * time.Millisecond, Max: 10 * time.Second}
	}
	return &Machine{cfg: c, backoff: c.Backoff}
}

// Status is a Machine's state, for status pages and tests.
type Status struct {
	State State
	// Window is what the holder serves within; zero Until while it does
	// not serve.
	Window Window
	// Deadline is the last renewal's, kept once the hold is shut.
	Deadline time.Time
	// Renewals counts the renewals after the first of each hold;
	// Failures the renewals that failed or found the hold lost.
	Renewals, Failures uint64
}

// Status returns the machine's state.
func (m *Machine) Status() Status {
	return Status{State: m.state, Window: m.window, Deadline: m.deadline, Renewals: m.renewals, Failures: m.failures}
}

// Step takes one event and returns what to do.
func (m *Machine) Step(ev Event) Ready {
	m.unstep(ev.Now)
	var r Ready
	switch ev.Kind {
	case Tick:
		m.tick(ev, &r)
	case Claimed:
		m.claimed(ev, &r)
	case ClaimFailed:
		m.claimFailed(ev, &r)
	case Renewed:
		m.renewed(ev, &r)
	case RenewFailed:
		m.renewFailed(ev, &r)
	case Lost:
		m.lost(ev, &r)
	case Released:
		m.released(ev, &r)
	case Stop:
		m.stop(ev, &r)
	}
	if r.Do == None && !r.Stopped {
		r.Wake = m.wake()
	}
	return r
}

// unstep moves what is due back with a clock stepped back (by hand, or
// one whose readings are not monotonic): else a step back would put the
// next renewal off by as much. Deadlines stay: a window ends when its
// clock says so.
func (m *Machine) unstep(now time.Time) {
	if !m.now.IsZero() && now.Before(m.now) {
		back := m.now.Sub(now)
		for _, t := range []*time.Time{&m.renewAt, &m.calm, &m.retryAt} {
			if !t.IsZero() {
				*t = t.Add(-back)
			}
		}
	}
	m.now = now
}

func (m *Machine) tick(ev Event, r *Ready) {
	m.seenFence = ev.Fence
	switch m.state {
	case Idle:
		if !ev.Now.Before(m.retryAt) {
			m.state, r.Do = Claiming, Claim
		}
	case Held:
		// A moved fence: the connection may reach a server that lost the
		// hold, so it is renewed there before the holder serves again.
		fenced := ev.Fence != m.fence && !ev.Now.Before(m.calm)
		if fenced || !ev.Now.Before(m.renewAt) {
			m.state, r.Do = Renewing, Renew
		}
	}
}

// wake is when the next Tick is due.
func (m *Machine) wake() time.Time {
	switch m.state {
	case Idle:
		return m.retryAt
	case Held:
		if m.seenFence != m.fence && m.calm.Before(m.renewAt) {
			return m.calm
		}
		return m.renewAt
	}
	return time.Time{}
}

func (m *Machine) claimed(ev Event, r *Ready) {
	if m.state != Claiming {
		return
	}
	m.notBefore = ev.NotBefore
	if m.stopping {
		m.release(r, true)
		return
	}
	m.state, r.Do = Starting, Renew
}

func (m *Machine) claimFailed(ev Event, r *Ready) {
	if m.state != Claiming {
		return
	}
	var perm *PermanentError
	switch {
	case m.stopping:
		m.stopped(r, m.why)
	case !m.cfg.Reclaim, errors.As(ev.Err, &perm) && !m.everHeld:
		m.stopped(r, ev.Err)
	default:
		m.retry(ev.Now, ev.Err, r)
	}
}

// retry claims again after the backoff, saying why once per reason.
func (m *Machine) retry(now time.Time, err error, r *Ready) {
	wait := m.backoff.Next()
	m.state, m.retryAt = Idle, now.Add(wait)
	if err != nil && err.Error() != m.claimErr {
		m.claimErr = err.Error()
		m.log(r, now, slog.LevelWarn, "claiming a "+m.cfg.Name+" failed; retrying", "err", err, "retry_in", wait)
	}
}

func (m *Machine) renewed(ev Event, r *Ready) {
	switch m.state {
	case Starting:
		m.interval = max(ev.Deadline.Sub(ev.Sent)/3, minInterval)
		m.everHeld, m.claimErr, m.failing = true, "", false
		m.backoff.Reset()
	case Renewing:
		m.renewals++
		if m.failing {
			m.failing = false
			m.log(r, ev.Now, slog.LevelInfo, m.cfg.Name+" lease renewed again")
		}
	default:
		return
	}
	m.state, m.fence, m.deadline = Held, ev.Fence, ev.Deadline
	m.renewAt = ev.Now.Add(m.interval)
	if m.stopping {
		m.release(r, true)
		return
	}
	m.window = Window{NotBefore: m.notBefore, Until: ev.Deadline, Fence: ev.Fence}
	r.Open, r.Window = true, m.window
}

func (m *Machine) renewFailed(ev Event, r *Ready) {
	switch m.state {
	case Starting:
		m.release(r, m.stopping || !m.cfg.Reclaim, ev.Err)
		return
	case Renewing:
	default:
		return
	}
	m.failures++
	m.state = Held
	switch {
	case m.stopping:
		m.release(r, true)
	case !m.cfg.Reclaim && !ev.Now.Before(m.window.Until):
		// Past the deadline it serves no more: giving the hold up lets
		// another take it once the key expires, instead of waiting here.
		m.release(r, true, fmt.Errorf("renewals failed past the deadline: %w", ev.Err))
	default:
		if !m.failing {
			m.failing = true
			m.log(r, ev.Now, slog.LevelWarn, m.cfg.Name+" lease renewal failed; retrying", "err", ev.Err,
				"hint", "serving stops at the deadline unless a renewal lands", "deadline", m.window.Until)
		}
		m.calm = ev.Now.Add(min(m.interval/4, calmMax))
		m.renewAt = ev.Now.Add(m.interval / 4)
	}
}

func (m *Machine) lost(ev Event, r *Ready) {
	switch m.state {
	case Starting:
		m.release(r, m.stopping || !m.cfg.Reclaim, ev.Err)
		return
	case Renewing:
	default:
		return
	}
	m.failures++
	m.shut(r)
	if m.stopping || !m.cfg.Reclaim {
		m.stopped(r, ev.Err)
		return
	}
	m.log(r, ev.Now, slog.LevelError, m.cfg.Name+" lease lost: vending stopped", "err", ev.Err)
	m.backoff.Reset()
	m.state, r.Do = Claiming, Claim
}

func (m *Machine) released(ev Event, r *Ready) {
	if m.state != Releasing {
		return
	}
	if m.final || m.stopping {
		m.stopped(r, joinErr(m.why, ev.Err))
		return
	}
	if ev.Err != nil {
		m.log(r, ev.Now, slog.LevelWarn, "releasing a "+m.cfg.Name+" after a failed start", "err", ev.Err)
	}
	m.retry(ev.Now, m.why, r)
}

func (m *Machine) stop(ev Event, r *Ready) {
	if m.state == Stopped {
		r.Stopped, r.Err = true, m.why
		return
	}
	m.stopping, m.why = true, ev.Err
	switch m.state {
	case Idle:
		m.stopped(r, m.why)
	case Held:
		m.release(r, true)
	case Releasing:
		m.final = true
	}
	// Claiming, Starting, Renewing: the result of what is out ends it.
}

// release shuts the window and gives the hold up; final ends the machine
// after it. A why replaces the reason it ends for.
func (m *Machine) release(r *Ready, final bool, why ...error) {
	m.shut(r)
	if len(why) > 0 && !m.stopping {
		m.why = why[0]
	}
	m.state, m.final, r.Do = Releasing, final, Release
}

func (m *Machine) shut(r *Ready) {
	if !m.window.Until.IsZero() {
		m.window, r.Shut = Window{}, true
	}
}

func (m *Machine) stopped(r *Ready, err error) {
	m.shut(r)
	m.state, m.why = Stopped, err
	r.Stopped, r.Err = true, err
}

// joinErr is why a machine stopped, and its release's failure: either
// alone as it is.
func joinErr(why, release error) error {
	switch {
	case release == nil:
		return why
	case why == nil:
		return release
	}
	return errors.Join(why, release)
}

func (m *Machine) log(r *Ready, now time.Time, level slog.Level, msg string, args ...any) {
	rec := slog.NewRecord(now, level, msg, 0)
	rec.Add(args...)
	r.Logs = append(r.Logs, rec)
}

// Window is what a holder may serve within: from NotBefore until Until,
// while the fence reads Fence.
type Window struct {
	NotBefore, Until time.Time
	Fence            uint64
}

// Refusal says why a holder may not serve now.
type Refusal int

const (
	Serving Refusal = iota // it may
	Closed                 // it holds nothing (yet, or any more)
	Early                  // before NotBefore
	Overdue                // at or past Until: the renewal is late
	Fenced                 // the fence moved: renew first
)

// Check says whether a holder may serve at now while the fence reads
// fence. Overdue and Fenced ask for a renewal (Driver.Ring).
func (w Window) Check(now time.Time, fence uint64) Refusal {
	switch {
	case w.Until.IsZero():
		return Closed
	case now.Before(w.NotBefore):
		return Early
	case !now.Before(w.Until):
		return Overdue
	case fence != w.Fence:
		return Fenced
	}
	return Serving
}
