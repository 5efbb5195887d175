package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

// Lease is a claimed worker ID. It implements workerid.Holder.
type Lease struct {
	id       int
	last     int64 // previous holder's last timestamp
	deadline time.Time
	key      fencedKey // in the leases bucket
	clock    snowflake.Clock
	epoch    int64 // the snowflake epoch of the IDs made with the lease

	clocks   jetstream.KeyValue
	clockRev uint64  // clock key's revision
	recorded int64   // the highest last timestamp written
	unacked  []int64 // timestamps written whose acks were lost since the last that was acked
	where    string  // the bucket, and the JetStream it is in
}

var _ workerid.Holder = (*Lease)(nil)

// start makes the first reservation. The clock key is written with
// compare-and-set: if a former holder that lost the ID without noticing
// recorded a later timestamp after Claim read it, the write fails and start
// waits past that one too.
//
// A worker ID with no recorded timestamp (and no seed) in a bucket younger
// than a TTL is one no holder of this bucket ever used, or one whose record
// was lost with an earlier bucket (a wiped NATS store), whose last holder
// may still be vending until its deadline, a TTL after the wipe at most,
// since it can renew no more. Then fresh is how long until that deadline has passed for
// every clock, and start records, and waits past while renewing, the
// millisecond fresh from now.
func (l *Lease) start(ctx context.Context, maxWait, fresh time.Duration, report func(string, time.Time)) error {
	for {
		last, rev, known, err := readClock(ctx, l.clocks, l.id, l.epoch)
		if err != nil {
			return err
		}
		quarantine := !known && fresh > 0
		if quarantine {
			last = l.clock.Now().Add(fresh).UnixMilli()
			report(fmt.Sprintf("worker ID %d has no recorded last timestamp and bucket %s is new (a new cluster, or lost JetStream state): waiting %v, "+
				"until no earlier holder can still be vending with it; this passes by itself, once per new cluster or loss",
				l.id, l.clocks.Bucket(), fresh.Round(time.Millisecond)), l.clock.Now().Add(fresh))
		} else if err := workerid.WaitPast(ctx, l.clock, last, maxWait); err != nil {
			return fmt.Errorf("worker ID %d: %w", l.id, err)
		}
		l.last, l.clockRev = last, rev
		if _, err := l.Renew(ctx, last); err != nil {
			if errors.Is(err, errClockRaced) {
				continue
			}
			return err
		}
		if quarantine {
			return l.waitPastRenewing(ctx, last)
		}
		return nil
	}
}

// waitPastRenewing waits until the clock is past the Unix millisecond last,
// renewing the lease as a holder does.
func (l *Lease) waitPastRenewing(ctx context.Context, last int64) error {
	for {
		behind := time.Duration(last-l.clock.Now().UnixMilli()+1) * time.Millisecond
		if behind <= 0 {
			_, err := l.Renew(ctx, last)
			return err
		}
		t := time.NewTimer(min(behind, l.key.ttl/3))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if behind > l.key.ttl/3 {
			if _, err := l.Renew(ctx, last); err != nil {
				return err
			}
		}
	}
}

// readClock returns worker ID id's last timestamp, in the Unix ms of a
// holder with snowflake epoch epoch (see inEpoch), and its revision (0 when
// none was recorded). known is false when nothing bounds the timestamps of
// its earlier holders: no record, and no seed (SeedClocks).
func readClock(ctx context.Context, clocks jetstream.KeyValue, id int, epoch int64) (last int64, rev uint64, known bool, err error) {
	key := leaseKey(id)
	e, err := clocks.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		key = seedKey
		e, err = clocks.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, 0, false, nil
		}
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("kv: read last timestamp of worker ID %d: %w", id, err)
	}
	last, theirs, err := ParseClock(e.Value())
	if err != nil {
		fix := fmt.Sprintf("Worker ID %d is not claimed while it is; if no vendor used it in the last minutes, reset it with: vendor cluster reset-worker %d", id, id)
		if key == seedKey {
			fix = "Worker IDs with no last timestamp are not claimed while it is; delete it (nats kv del " + clocks.Bucket() + " " + seedKey + "): they then wait a lease TTL once"
		}
		return 0, 0, false, Corrupt(clocks.Bucket(), key, e.Revision(), e.Value(), err, fix)
	}
	if key == seedKey {
		return inEpoch(last, theirs, epoch), 0, true, nil
	}
	return inEpoch(last, theirs, epoch), e.Revision(), true, nil
}

// seedKey, in the clocks bucket, bounds the last timestamps of worker IDs
// that have none recorded: see SeedClocks.
const seedKey = "seed"

// SeedClocks records, in a store that has no clocks bucket yet, a bound on
// every timestamp vended with a worker ID it has not recorded: the Unix ms
// bound, taken by an embedded server's vendor when it starts on a store of
// its own in which no vendor ever recorded one. The only vendors that can
// have vended with worker IDs the store does not know were attached to an
// earlier server at the address, with another store, and they vend no
// more until they renew on this one (workerid.Config.Fence), which they
// cannot: each stopped before now, on a clock within the allowed skew of
// this one (bound is now plus that skew). A claim then waits past bound
// instead of holding a worker ID back a lease TTL, as it does in a young
// bucket with no seed (a new cluster on an external server, or lost
// state). A store that already has the bucket is left alone: seeded is
// false.
func SeedClocks(ctx context.Context, js JS, c LeaseConfig, bound int64) (seeded bool, err error) {
	if _, err := js.KeyValue(ctx, js.Clocks); !errors.Is(err, jetstream.ErrBucketNotFound) {
		return false, err
	}
	c, err = c.withDefaults()
	if err != nil {
		return false, err
	}
	_, clocks, _, err := workerBuckets(ctx, js, c)
	if err != nil {
		return false, err
	}
	if _, err := clocks.Create(ctx, seedKey, clockValue(bound, c.Epoch)); err != nil {
		return false, fmt.Errorf("kv: seed bucket %s: %w", js.Clocks, err)
	}
	return true, nil
}

// clockValue is what the clocks bucket records: ms and the epoch the
// holder vends with.
func clockValue(ms, epoch int64) []byte {
	return []byte(strconv.FormatInt(ms, 10) + " " + strconv.FormatInt(epoch, 10))
}

// inEpoch converts last, the last Unix ms a holder with epoch theirs may
// have used, to the Unix ms after which a holder with epoch mine makes only
// IDs above that holder's: an ID's time bits are its Unix ms less the
// epoch, so a later epoch must wait longer by the difference. An earlier
// one, or an unknown theirs (0), waits for last itself.
func inEpoch(last, theirs, mine int64) int64 {
	if theirs == 0 || mine <= theirs {
		return last
	}
	return last + (mine - theirs)
}

// ID returns the worker ID.
func (l *Lease) ID() int { return l.id }

// Last returns the previous holder's last timestamp (Unix ms): the generator
// must start after it.
func (l *Lease) Last() int64 { return l.last }

// Deadline returns the deadline of the last reservation.
func (l *Lease) Deadline() time.Time { return l.deadline }

// Where names the bucket of the lease and the JetStream it is in
// ("leaf_workers@<the stream's creation>"): two vendors holding one worker
// ID in the same place got it from a store that went back, in two places
// from two JetStreams.
func (l *Lease) Where() string { return l.where }

// TTL returns the lease TTL in force (the bucket's).
func (l *Lease) TTL() time.Duration { return l.key.ttl }

// Renew renews the lease key (fencedKey.renew), then records the new
// deadline (or last, or what it recorded before, whichever is latest) as
// the worker ID's last timestamp. The deadline is measured from before the
// renewal was sent, so it falls before the server can expire the key: no
// one else can hold the ID while we may vend with it.
//
// A lease whose key, or whose bucket, is gone is lost: so is every lease
// when the NATS store is wiped, and the holder claims anew in the buckets
// created again.
func (l *Lease) Renew(ctx context.Context, last int64) (time.Time, error) {
	// A renewal that takes longer than a quarter of the TTL is better
	// abandoned and retried than waited for.
	ctx, cancel := context.WithTimeout(ctx, l.key.ttl/4)
	defer cancel()
	deadline, err := l.key.renew(ctx)
	if err != nil {
		return time.Time{}, err
	}
	// After a backwards clock step the deadline is behind IDs already
	// made: record the later of the two, and never less than before.
	rec := max(deadline.UnixMilli(), last, l.recorded)
	crev, err := l.writeClock(ctx, rec)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		// An earlier write of ours may have landed though its ack was
		// lost: then write again at its revision. Anything else means
		// this lease can no longer tell what is recorded: give it up (the
		// window stays shut) and claim anew.
		if err = l.adoptClock(ctx); err != nil {
			return time.Time{}, err
		}
		crev, err = l.writeClock(ctx, rec)
	}
	if err != nil {
		return time.Time{}, l.clockError(ctx, err)
	}
	l.clockRev, l.recorded = crev, rec
	l.deadline = deadline
	return deadline, nil
}

// adoptClock is what a renewal does when its timestamp write finds the key
// changed: if it holds what an earlier write of this lease wrote, whose ack
// was lost (at a revision past the last one it knew), that revision is
// taken up; anything else loses the lease, saying why.
func (l *Lease) adoptClock(ctx context.Context) error {
	e, err := l.clocks.Get(ctx, leaseKey(l.id))
	if err != nil {
		return fmt.Errorf("%w: worker ID %d: %w (%v)", lease.ErrLost, l.id, errClockRaced, err)
	}
	ms, epoch, perr := ParseClock(e.Value())
	switch {
	case perr == nil && epoch == l.epoch && e.Revision() > l.clockRev && slices.Contains(l.unacked, ms):
		l.clockRev, l.recorded = e.Revision(), max(l.recorded, ms)
		return nil
	case e.Revision() < l.clockRev:
		return fmt.Errorf("%w: worker ID %d: the NATS store went back: its last timestamp is at revision %d, below the %d this vendor wrote",
			lease.ErrLost, l.id, e.Revision(), l.clockRev)
	}
	return fmt.Errorf("%w: worker ID %d: %w", lease.ErrLost, l.id, errClockRaced)
}

// clockError classifies a failed write of the last timestamp: the key
// changed under it, or the bucket gone, loses the lease; anything else may
// pass and is retried.
func (l *Lease) clockError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: worker ID %d: its last timestamp expired or was taken (%s)", lease.ErrLost, l.id, jsText(err))
	case isBucketGone(ctx, err, l.clocks, l.key.ttl):
		return fmt.Errorf("%w: bucket %s is gone (deleted, or the NATS store lost its JetStream state: %s)", lease.ErrLost, l.clocks.Bucket(), jsText(err))
	}
	return fmt.Errorf("kv: renew worker ID %d: %w", l.id, err)
}

// A release cancels a renewal that may be in flight, whose writes can land
// though their acks are lost: the release then finds newer revisions of
// its own keys.

// recordedAtLeast reports whether a release's timestamp write that err
// refused finds a timestamp of at least last recorded: one of its own
// renewals, which covers every millisecond it used.
func (l *Lease) recordedAtLeast(ctx context.Context, err error, last int64) bool {
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
		return false
	}
	e, gerr := l.clocks.Get(ctx, leaseKey(l.id))
	if gerr != nil {
		return false
	}
	ms, _, perr := ParseClock(e.Value())
	return perr == nil && ms >= last
}

// writeClock records ms at the clock key's revision. A write whose outcome
// is unknown (its ack lost) is remembered, so that the next renewal can
// tell it from someone else's.
func (l *Lease) writeClock(ctx context.Context, ms int64) (uint64, error) {
	v := clockValue(ms, l.epoch)
	var rev uint64
	var err error
	if l.clockRev == 0 {
		rev, err = l.clocks.Create(ctx, leaseKey(l.id), v)
	} else {
		rev, err = l.clocks.Update(ctx, leaseKey(l.id), v, l.clockRev)
	}
	switch {
	case err == nil:
		l.unacked = l.unacked[:0]
		return rev, nil
	case !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists):
		l.unacked = append(l.unacked, ms)
	}
	return 0, fmt.Errorf("kv: record last timestamp of worker ID %d: %w", l.id, err)
}

// Release records last as the worker ID's last timestamp and deletes the
// lease, so the ID is free at once.
//
// The lease is deleted even when the timestamp cannot be written: what is
// recorded already covers every ID made (each window opens only after its
// deadline is recorded), so the true last millisecond only shortens the next
// holder's wait.
func (l *Lease) Release(ctx context.Context, last int64) error {
	var errs []error
	if _, err := l.writeClock(ctx, last); err != nil && !l.recordedAtLeast(ctx, err, last) {
		errs = append(errs, err)
	}
	if err := l.key.release(ctx); err != nil {
		errs = append(errs, fmt.Errorf("kv: delete lease of worker ID %d: %w", l.id, err))
	}
	return errors.Join(errs...)
}
