package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/strict"
)

// Strict leads, in the same world (issue 28). Every vendor also contends
// for the lead of one strict tag, as strict.Leaders does when a request
// finds no leader answering: a real lease.Driver with strict's
// configuration (no Reclaim: a lead lost, or whose renewals fail past its
// deadline, steps down), over the real kv.Leaders and kv.Lead in the
// store's leaders bucket, whose lessee plays strict's part (serving from
// the first window, and a request served only while the driver's window
// says so, asking for a renewal when it is overdue or the fence moved, as
// strict.Leaders.serveErr does). Leads crash and stop with their vendors;
// their requests meet the store's faults.
//
// The invariant: two leads never serve at once. A lead serves from when
// its window opens until its deadline, by a clock that does not step, so
// that checking the other leads each time a window opens or is extended
// checks every moment. Lead deadlines are read on a clock that keeps a
// fixed offset from the server's (the monotonic reading of the system
// clock, which deadlines are compared by, never steps), and the leaders
// bucket never goes back (a strict tag's order across a store that lost
// writes rests on the fence of a single server, which every vendor's
// reconnect moves; the worker-ID buckets go back, and half the vendors
// reconnect).

// simTag is the strict tag the vendors lead.
const simTag = "ledger"

// simLead is a vendor's lead of simTag: its driver, from the claim until
// it stops.
type simLead struct {
	d    *simDriver
	drv  *lease.Driver
	stop context.CancelCauseFunc
	err  error // why it stopped, once d.done is closed
}

// leadNow is the time v's lead deadlines are read on.
func (v *simVendor) leadNow() time.Time { return v.w.now.Add(v.mono) }

// simLeadClock is v's lead clock as kv.Leaders reads it.
type simLeadClock struct{ v *simVendor }

func (c simLeadClock) Now() time.Time        { return c.v.leadNow() }
func (c simLeadClock) Sleep(d time.Duration) { c.v.Sleep(d) }

var _ snowflake.Clock = simLeadClock{}

type simFence struct{ v *simVendor }

func (f simFence) Fence() uint64 { return f.v.fence }

// startLead starts a lead's driver, as a request that finds no leader
// does, and lets it run until it parks or ends.
func (w *simWorld) startLead(v *simVendor) {
	ctx, stop := context.WithCancelCause(context.Background())
	l := &simLead{d: newSimDriver(v, v.leadNow), stop: stop}
	done := make(chan struct{})
	l.d.done = done
	l.drv = lease.NewDriver(lease.DriverConfig{Machine: lease.Config{Name: "strict tag"}, Clock: l.d, Fence: simFence{v},
		Logger: slog.New(simLog{v: v})}, &simLeadHold{v: v, l: l})
	v.lead = l
	w.caller = v
	go func() {
		defer close(done)
		l.err = l.drv.Run(ctx)
	}()
	if !w.await(l.d) {
		w.leadEnded(v)
	}
}

// actLead does what is due for v's lead: it starts one now and then, the
// driver's turn when due, and a request for the tag.
func (w *simWorld) actLead(v *simVendor) {
	switch l := v.lead; {
	case l == nil:
		if w.rng.IntN(50) == 0 {
			w.startLead(v)
		}
	case l.d.ready(w.now):
		w.turn(l.d)
		if w.ended(l.d) {
			w.leadEnded(v)
		}
	}
	if l := v.lead; l != nil && w.failed == nil && w.rng.IntN(4) == 0 {
		switch l.drv.Status().Window.Check(v.leadNow(), v.fence) {
		case lease.Serving:
			w.stats.leadServed++
		case lease.Overdue, lease.Fenced:
			l.d.Ring()
		}
	}
}

func (w *simWorld) ended(d *simDriver) bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// leadEnded notes why v's lead stopped.
func (w *simWorld) leadEnded(v *simVendor) {
	err := v.lead.err
	v.lead = nil
	switch {
	case errors.Is(err, lease.ErrLost):
		w.stats.leadsLost++
	case err != nil && strings.Contains(err.Error(), "renewals failed past the deadline"):
		w.stats.stepDowns++
	}
	w.logf(v, "no longer leads %s: %v", simTag, err)
}

// closeLead stops v's lead and waits for it: it releases the lead, which
// reaches nothing after a crash (dead).
func (w *simWorld) closeLead(v *simVendor, dead bool, why error) {
	l := v.lead
	if l == nil {
		return
	}
	v.dead, w.caller = dead, v
	l.stop(why)
	<-l.d.done
	w.caller, v.lead = nil, nil
}

// simLeadHold is the lead's side of its driver, as strict's lead is.
type simLeadHold struct {
	v *simVendor
	l *simLead
	h strict.Lease
}

var _ lease.Lessee = (*simLeadHold)(nil)

func (h *simLeadHold) Claim(ctx context.Context) (time.Time, error) {
	v, w := h.v, h.v.w
	if v.leaders == nil {
		ls, err := kv.OpenLeaders(ctx, kv.Plain(w.js), kv.LeadersConfig{TTL: w.rates.leadTTL, Holder: v.name, Clock: simLeadClock{v}})
		if err != nil {
			return time.Time{}, err
		}
		v.leaders = ls
	}
	l, notBefore, err := v.leaders.Take(ctx, simTag)
	h.h = l
	return notBefore, err
}

func (h *simLeadHold) Renew(ctx context.Context) (time.Time, error) { return h.h.Renew(ctx) }
func (h *simLeadHold) Release(ctx context.Context) error            { return h.h.Release(ctx) }
func (h *simLeadHold) Shut()                                        {}
func (h *simLeadHold) LogArgs() []any                               { return []any{"tag", simTag} }

// Serve checks, each time the window opens or is extended, that no other
// lead serves now.
func (h *simLeadHold) Serve(win lease.Window) error {
	v, w := h.v, h.v.w
	if win.Check(v.leadNow(), v.fence) != lease.Serving {
		return nil
	}
	w.stats.leadWindows++
	for _, u := range w.vendors {
		if u == v || u.lead == nil {
			continue
		}
		if uw := u.lead.drv.Status().Window; uw.Check(u.leadNow(), u.fence) == lease.Serving {
			w.failed = w.leadsAtOnce(v, win, u, uw)
		}
	}
	return nil
}

// leadsAtOnce says which two leads served at once, and what led to it.
func (w *simWorld) leadsAtOnce(v *simVendor, vw lease.Window, u *simVendor, uw lease.Window) error {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, step %d: %s leads %s until %s while %s does until %s\n", w.seed, w.step, v.name, simTag,
		simAt(vw.Until.Add(-v.mono)), u.name, simAt(uw.Until.Add(-u.mono)))
	w.lastEvents(&b)
	return errors.New(b.String())
}
