package storedir

import (
	"context"
	"errors"
	"time"

	"github.com/leaf-nats/leaf/workerid"
)

// ClaimFunc claims a worker ID: workerid.Config.Claim.
type ClaimFunc = func(ctx context.Context, r workerid.ClaimRequest) (workerid.Holder, error)

// Claims returns claim with the worker ID it returns held in the record
// too, for a vendor with snowflake epoch epoch: the holder's last timestamp
// is the later of the store's and the record's (a store put back from an
// older copy knows less), and each renewal records the new deadline, and
// the release the last millisecond used, before the generator may go on.
func (r *Record) Claims(claim ClaimFunc, epoch int64) ClaimFunc {
	return func(ctx context.Context, req workerid.ClaimRequest) (workerid.Holder, error) {
		h, err := claim(ctx, req)
		if err != nil {
			return nil, err
		}
		return &held{Holder: h, r: r, epoch: epoch, last: r.workerLast(h.ID(), epoch)}, nil
	}
}

// Bound returns the latest last timestamp the record holds of any worker
// ID, as a vendor with snowflake epoch epoch must wait past it (0: none):
// a store started over knows none of them, and claims in it wait past
// this (kv.SeedClocks).
func (r *Record) Bound(epoch int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var bound int64
	for _, ms := range r.c.Workers {
		bound = max(bound, inEpoch(ms, r.c.Epoch, epoch))
	}
	return bound
}

func (r *Record) workerLast(id int, epoch int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ms, ok := r.c.Workers[id]; ok {
		return inEpoch(ms, r.c.Epoch, epoch)
	}
	return 0
}

// worked records ms as worker ID id's last timestamp, for epoch: raised
// only, unless release (the true last millisecond, after which the
// generator made nothing).
func (r *Record) worked(id int, ms, epoch int64, release bool) error {
	return r.change(func(c *contents) bool {
		changed := c.Epoch != epoch
		if changed {
			for w, last := range c.Workers {
				c.Workers[w] = inEpoch(last, c.Epoch, epoch)
			}
			c.Epoch = epoch
		}
		if ms < 1 || ms == c.Workers[id] || ms < c.Workers[id] && !release {
			return changed
		}
		c.Workers[id] = ms
		return true
	})
}

// inEpoch converts last, the last Unix ms a holder with epoch theirs may
// have used, to the Unix ms after which a holder with epoch mine makes only
// later IDs: an ID's time bits are its Unix ms less the epoch, so a later
// epoch waits longer by the difference (as kv's clocks bucket does).
func inEpoch(last, theirs, mine int64) int64 {
	if theirs == 0 || mine <= theirs {
		return last
	}
	return last + (mine - theirs)
}

// held is a worker ID held in the record too.
type held struct {
	workerid.Holder
	r     *Record
	epoch int64
	last  int64 // the record's last timestamp of the worker ID at the claim
}

func (h *held) Last() int64 { return max(h.Holder.Last(), h.last) }

func (h *held) Renew(ctx context.Context, last int64) (time.Time, error) {
	deadline, err := h.Holder.Renew(ctx, last)
	if err != nil {
		return deadline, err
	}
	if err := h.r.worked(h.ID(), max(deadline.UnixMilli(), last), h.epoch, false); err != nil {
		return time.Time{}, err
	}
	return deadline, nil
}

// Release records last in the record even when the store's release fails.
func (h *held) Release(ctx context.Context, last int64) error {
	return errors.Join(h.Holder.Release(ctx, last), h.r.worked(h.ID(), last, h.epoch, true))
}
