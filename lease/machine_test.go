package lease

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// These tests step the Machine as its driver does, with events of their
// own: every transition, with no clock, no store and no goroutine.

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// stepper is a machine and the time of its events.
type stepper struct {
	t   *testing.T
	m   *Machine
	now time.Time
}

func newStepper(t *testing.T, c Config) *stepper {
	return &stepper{t: t, m: NewMachine(c), now: t0}
}

func (s *stepper) at(d time.Duration) *stepper { s.now = t0.Add(d); return s }

func (s *stepper) step(ev Event) Ready {
	s.t.Helper()
	ev.Now = s.now
	return s.m.Step(ev)
}

func (s *stepper) tick(fence uint64) Ready { return s.step(Event{Kind: Tick, Fence: fence}) }

// renewed is a renewal sent now that holds for hold.
func (s *stepper) renewed(hold time.Duration, fence uint64) Ready {
	return s.step(Event{Kind: Renewed, Sent: s.now, Deadline: s.now.Add(hold), Fence: fence})
}

func (s *stepper) want(r Ready, do Action, state State) {
	s.t.Helper()
	if r.Do != do || s.m.state != state {
		s.t.Fatalf("at %v: %+v in state %v; want action %v in state %v", s.now.Sub(t0), r, s.m.state, do, state)
	}
}

// hold claims and renews once, for hold: the window opens.
func (s *stepper) hold(hold time.Duration) {
	s.t.Helper()
	s.want(s.tick(0), Claim, Claiming)
	s.want(s.step(Event{Kind: Claimed}), Renew, Starting)
	r := s.renewed(hold, 0)
	s.want(r, None, Held)
	if !r.Open || !r.Window.Until.Equal(s.now.Add(hold)) {
		s.t.Fatalf("first renewal: %+v, want the window open until the deadline", r)
	}
}

func logged(r Ready) string {
	var msgs []string
	for _, rec := range r.Logs {
		msgs = append(msgs, rec.Message)
	}
	return strings.Join(msgs, "; ")
}

// A hold renews every third of the hold; a failed renewal is retried every
// quarter of that, the window staying as it was, and the first failure and
// the recovery are logged once; a Stop shuts the window and releases.
func TestMachineRenewsOnCadence(t *testing.T) {
	s := newStepper(t, Config{Name: "worker ID", Reclaim: true})
	s.hold(3 * time.Second)
	r := s.at(999 * time.Millisecond).tick(0)
	if s.want(r, None, Held); !r.Wake.Equal(t0.Add(time.Second)) {
		t.Fatalf("wake %v, want a third of the hold", r.Wake.Sub(t0))
	}
	s.at(time.Second)
	s.want(s.tick(0), Renew, Renewing)
	r = s.step(Event{Kind: RenewFailed, Err: errors.New("timeout")})
	if s.want(r, None, Held); !r.Wake.Equal(t0.Add(1250*time.Millisecond)) || logged(r) != "worker ID lease renewal failed; retrying" || r.Shut {
		t.Fatalf("first failure: %+v (%q)", r, logged(r))
	}
	s.at(1250 * time.Millisecond)
	s.want(s.tick(0), Renew, Renewing)
	if r = s.step(Event{Kind: RenewFailed, Err: errors.New("timeout")}); logged(r) != "" {
		t.Fatalf("second failure logged %q", logged(r))
	}
	s.at(1500 * time.Millisecond)
	s.want(s.tick(0), Renew, Renewing)
	r = s.renewed(3*time.Second, 0)
	if s.want(r, None, Held); !r.Open || logged(r) != "worker ID lease renewed again" || !r.Wake.Equal(t0.Add(2500*time.Millisecond)) {
		t.Fatalf("renewed again: %+v (%q)", r, logged(r))
	}
	if st := s.m.Status(); st.Renewals != 1 || st.Failures != 2 {
		t.Fatalf("status %+v", st)
	}
	r = s.step(Event{Kind: Stop})
	if s.want(r, Release, Releasing); !r.Shut {
		t.Fatal("a stop released without shutting the window first")
	}
	if r = s.step(Event{Kind: Released}); !r.Stopped || r.Err != nil || s.m.state != Stopped {
		t.Fatalf("after the release: %+v", r)
	}
}

// Failed claims are retried after a doubling backoff, each new reason
// logged once; a permanent one stops a machine that never held, not one
// that did.
func TestMachineRetriesClaims(t *testing.T) {
	s := newStepper(t, Config{Name: "worker ID", Reclaim: true})
	s.want(s.tick(0), Claim, Claiming)
	var logs []string
	for i, wait := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		r := s.step(Event{Kind: ClaimFailed, Err: errors.New("no worker ID free")})
		if s.want(r, None, Idle); !r.Wake.Equal(s.now.Add(wait)) {
			t.Fatalf("failure %d: wake in %v, want %v", i, r.Wake.Sub(s.now), wait)
		}
		logs = append(logs, logged(r))
		s.now = r.Wake
		s.want(s.tick(0), Claim, Claiming)
	}
	if logs[0] != "claiming a worker ID failed; retrying" || logs[1] != "" || logs[2] != "" {
		t.Fatalf("logs %q: want the reason once", logs)
	}
	s.want(s.step(Event{Kind: Claimed}), Renew, Starting)
	s.want(s.renewed(time.Second, 0), None, Held)
	s.at(time.Hour)
	s.want(s.tick(0), Renew, Renewing)
	s.want(s.step(Event{Kind: Lost, Err: ErrLost}), Claim, Claiming)
	r := s.step(Event{Kind: ClaimFailed, Err: Permanent(errors.New("clock behind"))})
	if s.want(r, None, Idle); !r.Wake.Equal(s.now.Add(250 * time.Millisecond)) {
		t.Fatalf("a permanent error after a hold: %+v, want a retry after the reset backoff", r)
	}

	s = newStepper(t, Config{Reclaim: true})
	s.want(s.tick(0), Claim, Claiming)
	perm := Permanent(errors.New("every worker ID is held"))
	if r := s.step(Event{Kind: ClaimFailed, Err: perm}); !r.Stopped || r.Err != perm {
		t.Fatalf("a permanent error before any hold: %+v", r)
	}
}

// A loss shuts the window at once: a worker ID is claimed again at once,
// a strict lead stops without a release (the key is not its own).
func TestMachineLoss(t *testing.T) {
	for _, reclaim := range []bool{true, false} {
		t.Run(fmt.Sprint("reclaim=", reclaim), func(t *testing.T) {
			s := newStepper(t, Config{Name: "worker ID", Reclaim: reclaim})
			s.hold(3 * time.Second)
			s.at(time.Second)
			s.want(s.tick(0), Renew, Renewing)
			lost := fmt.Errorf("%w: the key is another's", ErrLost)
			r := s.step(Event{Kind: Lost, Err: lost})
			if !r.Shut || r.Do == Release {
				t.Fatalf("%+v: want the window shut and nothing released", r)
			}
			if reclaim && (r.Do != Claim || logged(r) != "worker ID lease lost: vending stopped") {
				t.Fatalf("%+v (%q): want a claim at once, saying why", r, logged(r))
			}
			if !reclaim && (!r.Stopped || r.Err != lost) {
				t.Fatalf("%+v: want stopped with the loss", r)
			}
		})
	}
}

// A first renewal that fails gives the claim up: released, then claimed
// again after the backoff (or the machine stops, without Reclaim).
func TestMachineFailedStart(t *testing.T) {
	for _, reclaim := range []bool{true, false} {
		t.Run(fmt.Sprint("reclaim=", reclaim), func(t *testing.T) {
			s := newStepper(t, Config{Name: "worker ID", Reclaim: reclaim})
			s.want(s.tick(0), Claim, Claiming)
			s.want(s.step(Event{Kind: Claimed}), Renew, Starting)
			failed := errors.New("no response from stream")
			r := s.step(Event{Kind: RenewFailed, Err: failed})
			if s.want(r, Release, Releasing); r.Shut {
				t.Fatal("shut a window never opened")
			}
			r = s.step(Event{Kind: Released, Err: errors.New("timeout")})
			switch {
			case reclaim && (s.m.state != Idle || !r.Wake.Equal(s.now.Add(250*time.Millisecond)) ||
				logged(r) != "releasing a worker ID after a failed start; claiming a worker ID failed; retrying"):
				t.Fatalf("%+v in %v (%q)", r, s.m.state, logged(r))
			case !reclaim && (!r.Stopped || !errors.Is(r.Err, failed)):
				t.Fatalf("%+v: want stopped with the renewal's error", r)
			}
		})
	}
}

// A strict lead whose renewals fail past its deadline gives the key up
// and stops; a worker ID keeps trying.
func TestMachineStepsDownPastTheDeadline(t *testing.T) {
	s := newStepper(t, Config{Name: "strict tag"})
	s.hold(300 * time.Millisecond)
	for now := 100 * time.Millisecond; ; now += 25 * time.Millisecond {
		s.at(now)
		s.want(s.tick(0), Renew, Renewing)
		r := s.step(Event{Kind: RenewFailed, Err: errors.New("timeout")})
		if now < 300*time.Millisecond {
			s.want(r, None, Held)
			continue
		}
		if s.want(r, Release, Releasing); !r.Shut {
			t.Fatal("not shut")
		}
		r = s.step(Event{Kind: Released})
		if !r.Stopped || !strings.Contains(fmt.Sprint(r.Err), "renewals failed past the deadline: timeout") {
			t.Fatalf("%+v", r)
		}
		return
	}
}

// A moved fence asks for a renewal at once, which records the fence read
// before it was sent; while renewals fail, it waits for the retry.
func TestMachineFence(t *testing.T) {
	s := newStepper(t, Config{Reclaim: true})
	s.hold(3 * time.Second)
	s.at(10 * time.Millisecond)
	s.want(s.tick(1), Renew, Renewing)
	s.want(s.step(Event{Kind: RenewFailed, Err: errors.New("not yet")}), None, Held)
	s.at(20 * time.Millisecond)
	r := s.tick(1)
	if s.want(r, None, Held); !r.Wake.Equal(t0.Add(260 * time.Millisecond)) {
		t.Fatalf("a moved fence while failing: wake %v, want the retry's", r.Wake.Sub(t0))
	}
	s.at(260 * time.Millisecond)
	s.want(s.tick(1), Renew, Renewing)
	if r = s.renewed(3*time.Second, 1); !r.Open || r.Window.Fence != 1 {
		t.Fatalf("%+v: want the window on the new fence", r)
	}
	if w := s.m.Status().Window; w.Check(s.now, 1) != Serving || w.Check(s.now, 2) != Fenced {
		t.Fatalf("window %+v", w)
	}
}

// A Stop while an action is out takes effect with its outcome.
func TestMachineStopWhileOut(t *testing.T) {
	s := newStepper(t, Config{Reclaim: true})
	s.want(s.tick(0), Claim, Claiming)
	why := errors.New("vendor stopping")
	s.want(s.step(Event{Kind: Stop, Err: why}), None, Claiming)
	s.want(s.step(Event{Kind: Claimed}), Release, Releasing)
	if r := s.step(Event{Kind: Released}); !r.Stopped || r.Err != why {
		t.Fatalf("%+v", r)
	}

	s = newStepper(t, Config{Reclaim: true})
	s.hold(time.Second)
	s.at(time.Second)
	s.want(s.tick(0), Renew, Renewing)
	s.step(Event{Kind: Stop})
	if r := s.renewed(time.Second, 0); r.Do != Release || r.Open || !r.Shut {
		t.Fatalf("renewed after a stop: %+v, want shut and released", r)
	}
}

// A clock stepped back puts the next renewal off by no more than the time
// since the last event (which a clock that steps cannot tell), not by the
// step.
func TestMachineClockSteppedBack(t *testing.T) {
	s := newStepper(t, Config{Reclaim: true})
	s.hold(3 * time.Second)
	s.at(900*time.Millisecond - 10*time.Second) // 0.9 s later, on a clock stepped back 10 s
	r := s.tick(0)
	if s.want(r, None, Held); !r.Wake.Equal(s.now.Add(time.Second)) {
		t.Fatalf("wake in %v, want the interval, 1s", r.Wake.Sub(s.now))
	}
	if w := s.m.Status().Window; !w.Until.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("window %+v: the deadline moved", w)
	}
}

func TestWindowCheck(t *testing.T) {
	w := Window{NotBefore: t0.Add(time.Second), Until: t0.Add(3 * time.Second), Fence: 4}
	for _, c := range []struct {
		w     Window
		at    time.Duration
		fence uint64
		want  Refusal
	}{
		{w, 2 * time.Second, 4, Serving},
		{Window{}, 0, 0, Closed},
		{w, 500 * time.Millisecond, 4, Early},
		{w, 3 * time.Second, 4, Overdue},
		{w, 2 * time.Second, 5, Fenced},
	} {
		if got := c.w.Check(t0.Add(c.at), c.fence); got != c.want {
			t.Errorf("%+v at %v, fence %d: %v, want %v", c.w, c.at, c.fence, got, c.want)
		}
	}
}
