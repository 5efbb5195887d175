package strict

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/segment"
)

// lead is this vendor's leadership of one tag: a lease.Driver, and the
// lead's side of it (lease.Lessee). It is in Leaders.leads from the claim
// until it steps down.
type lead struct {
	ls   *Leaders
	tag  string
	drv  *lease.Driver
	stop context.CancelCauseFunc // steps down, saying why

	started chan struct{} // closed at the first window: the buffer restarted, listening
	done    chan struct{} // closed when the driver returned, with err set
	err     error
	// passed: another vendor passed this lead one of the tag's requests
	// (Segments.Leans).
	passed atomic.Bool

	// The driver's goroutine only.
	lease  Lease
	listen func() // stops listening; nil while not listening
}

var _ lease.Lessee = (*lead)(nil)

// Claim takes the tag's lease.
func (l *lead) Claim(ctx context.Context) (time.Time, error) {
	le, notBefore, err := l.ls.cfg.Leases.Take(ctx, l.tag)
	l.lease = le
	return notBefore, err
}

func (l *lead) Renew(ctx context.Context) (time.Time, error) { return l.lease.Renew(ctx) }

func (l *lead) Release(ctx context.Context) error { return l.lease.Release(ctx) }

// Serve starts serving at the first window: only then is the tag's buffer
// restarted, so that the first segment served is allocated after the
// lease was taken, above every ID an earlier leader served. Later windows
// need nothing: serveErr reads them from the driver.
func (l *lead) Serve(w lease.Window) error {
	if l.hasStarted() {
		return nil
	}
	ls := l.ls
	ls.cfg.Source.Restart(l.tag)
	stop, err := ls.cfg.Transport.Listen(l.tag, ls)
	if err != nil {
		return fmt.Errorf("%w: tag %q: listen for forwarded requests: %w", segment.ErrUnavailable, l.tag, err)
	}
	l.listen = stop
	ls.mu.Lock()
	delete(ls.answered, l.tag)
	ls.mu.Unlock()
	if w.NotBefore.IsZero() {
		ls.log.Info("leading a strict tag", "tag", l.tag, "deadline", w.Until)
	} else {
		ls.log.Info("leading a strict tag", "tag", l.tag, "deadline", w.Until, "not_before", w.NotBefore)
	}
	close(l.started)
	return nil
}

// Shut ends the lead for the other vendors: the requests that arrive find
// no lead here, and the vendors that forward find no leader listening, so
// they take the lease once it is free.
func (l *lead) Shut() {
	l.forget()
	if l.listen != nil {
		l.listen()
		l.listen = nil
	}
}

func (l *lead) LogArgs() []any { return []any{"tag", l.tag} }

// forget takes l out of its Leaders' leads.
func (l *lead) forget() {
	ls := l.ls
	ls.mu.Lock()
	if ls.leads[l.tag] == l {
		delete(ls.leads, l.tag)
	}
	ls.mu.Unlock()
}

// end is what follows the driver's return: err is why the lead ended.
func (l *lead) end(err error) {
	l.Shut()
	l.err = err
	if l.hasStarted() {
		l.ls.log.Warn("no longer leading a strict tag", "tag", l.tag, "why", err)
	}
	close(l.done)
}

func (l *lead) hasStarted() bool {
	select {
	case <-l.started:
		return true
	default:
		return false
	}
}

// why says why l does not serve: it stepped down, or is stepping down.
func (l *lead) why() error {
	select {
	case <-l.done:
		if l.err != nil {
			return l.err
		}
	default:
	}
	return errors.New("stepping down")
}

// takeErr is why l could not be taken, for a request: a 503, or
// ErrLedElsewhere.
func (l *lead) takeErr() error {
	if errors.Is(l.err, ErrLedElsewhere) || errors.Is(l.err, segment.ErrUnavailable) {
		return l.err
	}
	return fmt.Errorf("%w: tag %q: this vendor could not take its lead: %w", segment.ErrUnavailable, l.tag, l.err)
}
