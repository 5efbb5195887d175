package lease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// steppedClock is a Clock that moves only when the test says, and whose
// alarm tells the test when the driver waits: the driver and the test take
// turns, so nothing races and nothing sleeps.
type steppedClock struct {
	now    atomic.Pointer[time.Time]
	parked chan time.Time // the driver waits until this
	wake   chan struct{}
	ring   chan struct{}
}

func newSteppedClock() *steppedClock {
	c := &steppedClock{parked: make(chan time.Time), wake: make(chan struct{}), ring: make(chan struct{}, 1)}
	c.set(t0)
	return c
}

func (c *steppedClock) Now() time.Time  { return *c.now.Load() }
func (c *steppedClock) set(t time.Time) { c.now.Store(&t) }
func (c *steppedClock) NewAlarm() Alarm { return c }
func (c *steppedClock) Ring()           { c.ring <- struct{}{} }
func (c *steppedClock) Wait(ctx context.Context, until time.Time) {
	select {
	case c.parked <- until:
	case <-ctx.Done():
		return
	}
	select {
	case <-c.wake:
	case <-c.ring:
	case <-ctx.Done():
	}
}

// fakeLessee records what the driver asks, and answers as told.
type fakeLessee struct {
	clock     *steppedClock
	hold      time.Duration
	claimErr  error
	renewErrs []error // one per renewal, then none
	fence     atomic.Uint64
	calls     []string
	window    Window
}

func (l *fakeLessee) Claim(context.Context) (time.Time, error) {
	l.calls = append(l.calls, "claim")
	return time.Time{}, l.claimErr
}

func (l *fakeLessee) Renew(context.Context) (time.Time, error) {
	l.calls = append(l.calls, "renew")
	if len(l.renewErrs) > 0 {
		err := l.renewErrs[0]
		l.renewErrs = l.renewErrs[1:]
		return time.Time{}, err
	}
	return l.clock.Now().Add(l.hold), nil
}

func (l *fakeLessee) Release(context.Context) error {
	l.calls = append(l.calls, "release")
	return nil
}

func (l *fakeLessee) Serve(w Window) error {
	l.calls = append(l.calls, "serve")
	l.window = w
	return nil
}

func (l *fakeLessee) Shut()          { l.calls = append(l.calls, "shut") }
func (l *fakeLessee) LogArgs() []any { return []any{"worker_id", 7} }
func (l *fakeLessee) Fence() uint64  { return l.fence.Load() }

// took returns the calls since the last look.
func (l *fakeLessee) took() string {
	s := strings.Join(l.calls, " ")
	l.calls = nil
	return s
}

// The driver claims, serves, renews when the alarm goes off, claims again
// after a loss, renews at once when rung after the fence moved, and on
// Stop shuts, releases and returns.
func TestDriverRunsTheMachine(t *testing.T) {
	clock := newSteppedClock()
	l := &fakeLessee{clock: clock, hold: 3 * time.Second}
	var logs bytes.Buffer
	d := NewDriver(DriverConfig{Machine: Config{Name: "worker ID", Reclaim: true}, Clock: clock, Fence: l,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: dropTime}))}, l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	park := func(what string, want string, at time.Duration) {
		t.Helper()
		until := <-clock.parked
		if got := l.took(); got != want || !until.Equal(t0.Add(at)) {
			t.Fatalf("%s: %q, then a wait until %v; want %q and %v", what, got, until.Sub(t0), want, at)
		}
	}
	park("start", "claim renew serve", time.Second)
	if st := d.Status(); st.State != Held || !st.Window.Until.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("status %+v", st)
	}
	clock.set(t0.Add(time.Second))
	clock.wake <- struct{}{}
	park("renewal", "renew serve", 2*time.Second)

	l.renewErrs = []error{fmt.Errorf("%w: expired", ErrLost)}
	clock.set(t0.Add(2 * time.Second))
	clock.wake <- struct{}{}
	park("loss", "renew shut claim renew serve", 3*time.Second)
	if !strings.Contains(logs.String(), `msg="worker ID lease lost: vending stopped" worker_id=7 err="lease lost: expired"`) {
		t.Fatalf("logs:\n%s", logs.String())
	}

	l.fence.Add(1)
	d.Ring()
	park("fence", "renew serve", 3*time.Second)
	if l.window.Fence != 1 {
		t.Fatalf("window %+v: want the new fence", l.window)
	}

	cancel()
	if err := <-done; err != nil || l.took() != "shut release" {
		t.Fatalf("Run = %v after %q", err, l.calls)
	}
}

// A permanent claim error ends Run with it; a stop's cause is Run's error.
func TestDriverStops(t *testing.T) {
	clock := newSteppedClock()
	perm := Permanent(errors.New("bad range"))
	l := &fakeLessee{clock: clock, claimErr: perm}
	if err := NewDriver(DriverConfig{Machine: Config{Reclaim: true}, Clock: clock}, l).Run(context.Background()); err != perm {
		t.Fatalf("Run = %v, want the permanent error", err)
	}

	l = &fakeLessee{clock: clock, hold: time.Second}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewDriver(DriverConfig{Clock: clock}, l).Run(ctx) }()
	<-clock.parked
	why := errors.New("tag no longer strict")
	cancel(why)
	if err := <-done; err != why || l.took() != "claim renew serve shut release" {
		t.Fatalf("Run = %v after %q", err, l.calls)
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
