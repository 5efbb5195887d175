package snowflake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

var (
	// ErrLeaseLost is returned by a Holder whose worker ID is no longer its
	// own; the holder must stop vending with it.
	ErrLeaseLost = errors.New("snowflake: worker ID lease lost")
	// ErrClockBehind is returned when the clock is further behind a worker
	// ID's last recorded timestamp than the caller will wait.
	ErrClockBehind = errors.New("snowflake: clock is behind the worker ID's last recorded timestamp")
)

// Holder keeps a worker ID for one generator: a lease in NATS KV (package kv)
// or a local file (FileHolder).
type Holder interface {
	// Renew extends the hold and returns the deadline until which the
	// generator may vend. Before it returns, it has durably recorded as the
	// worker ID's last timestamp the later of the deadline's millisecond and
	// last (the generator's last millisecond used: after a backwards clock
	// step it is ahead of the deadline), and never less than it recorded
	// before, so a later holder starts after every ID made. An error
	// wrapping ErrLeaseLost is final.
	Renew(ctx context.Context, last int64) (deadline time.Time, err error)
	// Release records last (Unix ms) as the worker ID's last timestamp and
	// frees the worker ID.
	Release(ctx context.Context, last int64) error
}

// Holders holds one worker ID through several holders at once (a static ID
// keeps its file and is leased in KV too). Renew renews each and returns the
// earliest deadline; Release releases each.
type Holders []Holder

// Renew renews every holder; the first error ends it.
func (hs Holders) Renew(ctx context.Context, last int64) (time.Time, error) {
	var deadline time.Time
	for i, h := range hs {
		d, err := h.Renew(ctx, last)
		if err != nil {
			return time.Time{}, err
		}
		if i == 0 || d.Before(deadline) {
			deadline = d
		}
	}
	return deadline, nil
}

// Release releases every holder, even after one fails.
func (hs Holders) Release(ctx context.Context, last int64) error {
	var errs []error
	for _, h := range hs {
		errs = append(errs, h.Release(ctx, last))
	}
	return errors.Join(errs...)
}

// KeepStats counts what a Keep loop did, for metrics. The zero value is
// ready to use.
type KeepStats struct {
	Renewals atomic.Uint64 // successful renewals
	Failures atomic.Uint64 // failed renewals
	deadline atomic.Int64  // Unix ns of the last deadline
}

// Deadline returns the deadline of the last renewal (zero before any).
func (s *KeepStats) Deadline() time.Time {
	if ns := s.deadline.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// SetDeadline records a deadline obtained outside Keep (the first claim).
func (s *KeepStats) SetDeadline(d time.Time) { s.deadline.Store(d.UnixNano()) }

// Keep renews h every interval and opens g's window to each new deadline,
// until ctx ends (then it revokes g, releases h and returns nil) or the lease
// is lost (then it revokes g and returns the error). A failed renewal is
// retried every interval/4; meanwhile g stops by itself at the last deadline.
// stats, when not nil, counts renewals.
func Keep(ctx context.Context, g *Generator, h Holder, interval time.Duration, log *slog.Logger, stats *KeepStats) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if stats == nil {
		stats = new(KeepStats)
	}
	failing := false
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			last := g.Revoke()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := h.Release(rctx, last); err != nil {
				return fmt.Errorf("release worker ID %d: %w", g.WorkerID(), err)
			}
			log.Info("worker ID released", "worker_id", g.WorkerID(), "last_ms", last)
			return nil
		case <-t.C:
		}
		deadline, err := h.Renew(ctx, g.Last())
		switch {
		case err == nil:
			g.Window(deadline)
			stats.Renewals.Add(1)
			stats.SetDeadline(deadline)
			if failing {
				log.Info("worker ID lease renewed again", "worker_id", g.WorkerID())
				failing = false
			}
			t.Reset(interval)
		case errors.Is(err, ErrLeaseLost):
			stats.Failures.Add(1)
			g.Revoke()
			log.Error("worker ID lease lost: vending stopped", "worker_id", g.WorkerID(), "err", err)
			return err
		case ctx.Err() != nil:
			t.Reset(0)
		default:
			stats.Failures.Add(1)
			if !failing {
				log.Warn("worker ID lease renewal failed; retrying (vending stops at the lease deadline)",
					"worker_id", g.WorkerID(), "err", err)
				failing = true
			}
			t.Reset(interval / 4)
		}
	}
}

// WaitPast waits until clock's time is past the Unix millisecond last, for at
// most maxWait; beyond that it returns ErrClockBehind at once, since nothing
// may be vended until then.
func WaitPast(ctx context.Context, clock Clock, last int64, maxWait time.Duration) error {
	if clock == nil {
		clock = SystemClock{}
	}
	behind := time.Duration(last-clock.Now().UnixMilli()+1) * time.Millisecond
	if behind <= 0 {
		return nil
	}
	if behind > maxWait {
		return fmt.Errorf("%w: %v behind %d (more than the %v it may wait); fix the clock (NTP) and restart",
			ErrClockBehind, behind, last, maxWait)
	}
	for clock.Now().UnixMilli() <= last {
		if err := ctx.Err(); err != nil {
			return err
		}
		clock.Sleep(min(behind, 100*time.Millisecond))
	}
	return nil
}

// Slot holds the current generator of a worker, which changes when a lost
// lease is replaced by a new worker ID. The zero value is empty and vends
// nothing.
type Slot struct {
	g atomic.Pointer[Generator]
}

// Set installs g (nil empties the slot).
func (s *Slot) Set(g *Generator) { s.g.Store(g) }

// Get returns the current generator, or nil.
func (s *Slot) Get() *Generator { return s.g.Load() }

// NextN takes n IDs from the current generator.
func (s *Slot) NextN(dst []int64, n int) ([]int64, error) {
	g := s.g.Load()
	if g == nil {
		return dst, fmt.Errorf("%w: no worker ID claimed yet", ErrNoLease)
	}
	return g.NextN(dst, n)
}
