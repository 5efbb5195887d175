package workerid

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leaf-nats/leaf/snowflake"
)

// ErrClockBehind is returned when the clock is further behind a worker ID's
// last recorded timestamp than the caller will wait.
var ErrClockBehind = errors.New("workerid: clock is behind the worker ID's last recorded timestamp")

// DefaultMaxWait is the least time a claim waits for its clock to pass a
// worker ID's last timestamp: a clock a few seconds behind (a new host, or
// an old holder whose clock ran ahead) is waited out, a larger gap refused.
const DefaultMaxWait = 10 * time.Second

// Range is the worker IDs First through Last, both included. Range{0, 0}
// is worker ID 0 alone: configurations take a *Range, nil for AllIDs.
type Range struct {
	First, Last int
}

// AllIDs is every worker ID of the default layout.
var AllIDs = Range{0, snowflake.MaxWorkerID}

// AllOf is every worker ID of layout l.
func AllOf(l snowflake.Layout) Range { return Range{0, l.MaxWorkerID()} }

// CheckIn returns an error, naming the rule broken, unless r is a
// non-empty range within layout l's worker IDs.
func (r Range) CheckIn(l snowflake.Layout) error {
	if err := r.within(AllOf(l), "layout "+l.Name()); err != nil {
		return fmt.Errorf("worker ID range %s: %w", r, err)
	}
	return nil
}

// One is the range of worker ID id alone.
func One(id int) Range { return Range{id, id} }

// Size returns how many worker IDs r holds.
func (r Range) Size() int { return r.Last - r.First + 1 }

// Contains reports whether id is in r.
func (r Range) Contains(id int) bool { return r.First <= id && id <= r.Last }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ParseRange reads "first-last", such as 0-511, a range within AllIDs. Its
// error names the rule s breaks.
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, ferr := strconv.Atoi(strings.TrimSpace(a))
	last, lerr := strconv.Atoi(strings.TrimSpace(b))
	if !ok || ferr != nil || lerr != nil {
		return Range{First: 0, Last: -1}, fmt.Errorf("%q: want first-last, two worker IDs of %s joined by '-', such as 0-511", s, AllIDs)
	}
	r := Range{First: first, Last: last}
	if err := r.within(AllIDs, "the default layout"); err != nil {
		return Range{First: 0, Last: -1}, fmt.Errorf("%q: %w", s, err)
	}
	return r, nil
}

// Check returns an error, naming the rule broken, unless r is a non-empty
// range within AllIDs.
func (r Range) Check() error {
	if err := r.within(AllIDs, "the default layout"); err != nil {
		return fmt.Errorf("worker ID range %s: %w", r, err)
	}
	return nil
}

// within says which rule r breaks as a range of all, the worker IDs of
// what (a layout), or nil.
func (r Range) within(all Range, what string) error {
	switch {
	case r.First > r.Last:
		return fmt.Errorf("the first worker ID, %d, is above the last, %d: put the lower one first (%d-%d)", r.First, r.Last, r.Last, r.First)
	case r.First < all.First:
		return fmt.Errorf("worker ID %d is below %d, the lowest of %s", r.First, all.First, what)
	case r.Last > all.Last:
		return fmt.Errorf("worker ID %d is above %d, the highest of %s (%s)", r.Last, all.Last, what, all)
	}
	return nil
}

// Holder is a hold on one worker ID: a lease in NATS KV (kv.Lease), a local
// timestamp file (FileHolder), or both.
type Holder interface {
	// ID returns the worker ID held.
	ID() int
	// Last returns the last Unix millisecond an earlier holder of the
	// worker ID may have used: the generator starts after it.
	Last() int64
	// Where says where the hold is kept, for people (a bucket, a file).
	Where() string
	// Renew extends the hold and returns the deadline until which the
	// generator may vend. Before it returns, it has durably recorded as the
	// worker ID's last timestamp the later of the deadline's millisecond and
	// last (the generator's last millisecond used: after a backwards clock
	// step it is ahead of the deadline), and never less than it recorded
	// before, so a later holder starts after every ID made. An error
	// wrapping lease.ErrLost is final: the Keeper stops vending with the
	// worker ID and claims another.
	Renew(ctx context.Context, last int64) (deadline time.Time, err error)
	// Release records last (Unix ms) as the worker ID's last timestamp and
	// frees the worker ID.
	Release(ctx context.Context, last int64) error
}

// both holds one worker ID through two holders at once (a static ID keeps
// its file and is leased in KV too). Renew renews each and returns the
// earlier deadline; Release releases each.
type both struct {
	a, b Holder
}

func (h both) ID() int       { return h.a.ID() }
func (h both) Last() int64   { return max(h.a.Last(), h.b.Last()) }
func (h both) Where() string { return h.a.Where() + " and " + h.b.Where() }

func (h both) Renew(ctx context.Context, last int64) (time.Time, error) {
	da, err := h.a.Renew(ctx, last)
	if err != nil {
		return time.Time{}, err
	}
	db, err := h.b.Renew(ctx, last)
	if err != nil {
		return time.Time{}, err
	}
	if db.Before(da) {
		return db, nil
	}
	return da, nil
}

// Release releases both, even when the first fails.
func (h both) Release(ctx context.Context, last int64) error {
	return errors.Join(h.a.Release(ctx, last), h.b.Release(ctx, last))
}

// WaitPast waits until clock's time is past the Unix millisecond last, for at
// most maxWait; beyond that it returns ErrClockBehind at once, since nothing
// may be vended until then.
func WaitPast(ctx context.Context, clock snowflake.Clock, last int64, maxWait time.Duration) error {
	if clock == nil {
		clock = snowflake.SystemClock{}
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
