package kv

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

var (
	// ErrNoFreeWorkerID is returned by Claim when every worker ID of its
	// range is held.
	ErrNoFreeWorkerID = errors.New("kv: every worker ID of the range is held by a live worker")
	// ErrHeldByLive is returned by a Claim of one worker ID with WaitHeld
	// when its holder renews the lease while Claim waits for it to expire:
	// another process is alive and vending with it.
	ErrHeldByLive = errors.New("kv: held by another live worker")
	// errFarAhead: a worker ID's last timestamp is more than FarAhead
	// ahead of the claimant's clock.
	errFarAhead = fmt.Errorf("%w: an implausible last timestamp", workerid.ErrClockBehind)
	// errClockRaced: a worker ID's timestamp changed under a holder's
	// compare-and-set.
	errClockRaced = errors.New("its last timestamp was written by another writer")
)

// listTimeout bounds the listing of held keys, a hint (Create decides): a
// watcher over keys that expire while it starts may never report that it
// has sent them all.
const listTimeout = 2 * time.Second

// heldPoll is how often a Claim with WaitHeld looks at the held key.
const heldPoll = time.Second

// LeaseConfig configures Claim. The zero value of every field means its
// default (see workerid.Config for why configuration reads this way).
type LeaseConfig struct {
	// TTL of a lease (30s). The bucket's own TTL wins when the bucket
	// already exists with another one, since the server expires by it.
	TTL time.Duration
	// Replicas of both buckets when they are created (1).
	Replicas int
	// Holder describes the claimant in the lease value (host, pid).
	Holder string
	// Clock is the generator's clock: timestamps recorded and compared are
	// in its time (snowflake.SystemClock).
	Clock snowflake.Clock
	// Epoch is the snowflake epoch of the IDs made with the lease
	// (snowflake.DefaultEpoch). It is recorded with each last timestamp,
	// and a claim by a holder with a later epoch than the one before waits
	// longer by the difference: an ID's time bits count from the epoch, and
	// must pass those of every ID made before.
	Epoch int64
	// IDs bounds the worker IDs Claim tries, to split the ID space between
	// clusters: nil means workerid.AllIDs, workerid.One(id) one ID only.
	IDs *workerid.Range
	// MaxWait is how long Claim waits for the clock to pass the previous
	// holder's last timestamp before giving up (the TTL, at least
	// workerid.DefaultMaxWait).
	MaxWait time.Duration
	// LongestLease is the longest lease an earlier holder may have been
	// given, when it is longer than the bucket's TTL: the TTL of buckets
	// that were lost, which other vendors' settings or the cluster
	// contract tell. Worker IDs with no recorded last timestamp in a
	// bucket created again are held back at least this long.
	LongestLease time.Duration
	// ClockAhead is how far the clocks of other vendors may be ahead of
	// Clock, as the caller measured them (with a margin). In a timestamp
	// bucket created less than a TTL ago (a new cluster, or lost JetStream
	// state), a worker ID with no recorded last timestamp is vended with
	// only from the bucket's creation plus the TTL plus ClockAhead: by then
	// any holder from before the bucket has stopped, and this clock is past
	// every millisecond it used.
	ClockAhead time.Duration
	// WaitHeld, for a claim of one worker ID (IDs of size 1), waits up to
	// the TTL for a lease someone else holds to expire, instead of failing
	// at once: the stale lease of a process killed before it could release
	// it. A lease renewed meanwhile fails the claim with ErrHeldByLive.
	WaitHeld bool
	// Report, when set, is told in a sentence why Claim is waiting, and
	// until when.
	Report func(why string, until time.Time)
	// Logger receives the worker IDs passed over because their records
	// cannot be believed. Default: discard.
	Logger *slog.Logger
}

func (c LeaseConfig) withDefaults() (LeaseConfig, error) {
	var errs []error
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("TTL %v is negative", c.TTL))
	}
	if c.TTL == 0 {
		c.TTL = 30 * time.Second
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1..5", c.Replicas))
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Clock == nil {
		c.Clock = snowflake.SystemClock{}
	}
	if c.Epoch == 0 {
		c.Epoch = snowflake.DefaultEpoch
	}
	if c.Epoch < 0 {
		errs = append(errs, fmt.Errorf("epoch %d is negative", c.Epoch))
	}
	if c.MaxWait <= 0 {
		c.MaxWait = max(c.TTL, workerid.DefaultMaxWait)
	}
	if c.IDs == nil {
		c.IDs = &workerid.AllIDs
	}
	if err := c.IDs.Check(); err != nil {
		errs = append(errs, err)
	}
	if c.ClockAhead < 0 {
		c.ClockAhead = 0
	}
	if c.Report == nil {
		c.Report = func(string, time.Time) {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("kv: lease config: %w", err)
	}
	return c, nil
}

// leaseValue is a lease key's value. Token is random to each claim: a
// revision is no unique fencing token once a store goes back and issues
// its sequence numbers again, the holder's own value is.
type leaseValue struct {
	Holder  string    `json:"holder"`
	Claimed time.Time `json:"claimed"`
	Token   string    `json:"token,omitempty"`
}

func leaseKey(id int) string { return "worker." + strconv.Itoa(id) }

// leaseOwner names who a lease key's value says holds it.
func leaseOwner(v []byte) string {
	if l, err := decodeLeaseValue(v); err == nil {
		return l.Holder
	}
	return "someone else"
}

// Claim takes a free worker ID: Create on its key is the claim. It then waits
// until the clock is past the ID's last recorded timestamp and records a
// first reservation, so the returned lease may vend at once (until Deadline).
//
// It starts at a random ID so that concurrent claimants rarely collide. A
// first pass takes only IDs whose last timestamp the clock has passed; a
// second one waits (up to MaxWait) for one it has not.
func Claim(ctx context.Context, js JS, c LeaseConfig) (*Lease, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	cl, err := newClaimer(ctx, js, c)
	if err != nil {
		return nil, err
	}
	ids := *c.IDs
	if c.WaitHeld && ids.Size() == 1 {
		return cl.waitHeld(ctx, ids.First)
	}
	taken, err := cl.held(ctx)
	if err != nil {
		return nil, err
	}
	return cl.scan(ctx, taken)
}

// FarAhead is how far ahead of the claimant's clock a worker ID's last
// timestamp is reported as implausible: no clock that passed the skew check
// runs so far ahead. The ID is passed over; `vendor cluster reset-worker`
// repairs it.
const FarAhead = time.Hour

// scan tries the free worker IDs of the range, from a random one: a first
// pass takes only IDs whose last timestamp the clock has passed, a second
// one waits (up to MaxWait) for one it has not. An ID whose record is
// corrupt or implausible is passed over and logged.
func (cl *claimer) scan(ctx context.Context, taken map[int]bool) (*Lease, error) {
	ids := *cl.cfg.IDs
	size := ids.Size()
	start := rand.IntN(size)
	var behind, passed error
	var behindIDs []int
	for _, wait := range []time.Duration{0, cl.cfg.MaxWait} {
		for i := range size {
			id := ids.First + (start+i)%size
			if taken[id] {
				continue
			}
			l, err := cl.try(ctx, id, wait)
			switch {
			case err == nil:
				return l, nil
			case errors.Is(err, jetstream.ErrKeyExists):
				taken[id] = true
			case errors.Is(err, ErrCorrupt), errors.Is(err, errFarAhead):
				taken[id], passed = true, err
				cl.cfg.Logger.Warn("worker ID passed over: its record cannot be believed", "worker_id", id, "err", err)
			case errors.Is(err, workerid.ErrClockBehind):
				behind, behindIDs = err, append(behindIDs, id)
			default:
				return nil, err
			}
		}
	}
	if behind != nil && cl.allHeld(ctx, behindIDs) {
		// Claimed by others while this claim waited for them: held, not
		// ahead of this clock.
		behind = nil
	}
	switch {
	case behind != nil:
		return nil, fmt.Errorf("kv: no free worker ID in %s whose last timestamp this clock has passed: %w", ids, behind)
	case passed != nil:
		return nil, fmt.Errorf("kv: no worker ID in %s can be claimed; the last one passed over: %w", ids, passed)
	}
	return nil, fmt.Errorf("%w (IDs %s, bucket %s); stop some workers or wait %v for dead ones to expire",
		ErrNoFreeWorkerID, ids, cl.bucket, cl.ttl)
}

// allHeld says whether every one of ids is held now, as far as a listing
// finds.
func (cl *claimer) allHeld(ctx context.Context, ids []int) bool {
	held, err := cl.held(ctx)
	if err != nil {
		return false
	}
	for _, id := range ids {
		if !held[id] {
			return false
		}
	}
	return true
}

// claimer is one Claim's view of the buckets.
type claimer struct {
	cfg            LeaseConfig
	leases, clocks jetstream.KeyValue
	ttl            time.Duration // the lease bucket's
	fresh          time.Duration // until the clocks bucket is a TTL old (and ClockAhead), by the server
	value          []byte
	where          string // the leases bucket and its JetStream
	bucket         string // the leases bucket
	js             jetstream.JetStream
}

func newClaimer(ctx context.Context, js JS, c LeaseConfig) (*claimer, error) {
	leases, clocks, ttl, err := workerBuckets(ctx, js, c)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, streamOf(js.Clocks))
	if err != nil {
		return nil, fmt.Errorf("kv: stream of %s: %w", js.Clocks, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("kv: stream of %s: %w", js.Clocks, err)
	}
	now := info.TimeStamp
	if now.IsZero() { // a server before 2.10: assume the bucket is new
		now = info.Created
	}
	value, _ := json.Marshal(leaseValue{Holder: c.Holder, Claimed: c.Clock.Now().UTC(), Token: crand.Text()})
	where := js.Workers
	if st, err := leases.Status(ctx); err == nil {
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			// The stream's creation tells one JetStream from another (a
			// copy restored from a backup keeps it).
			where += "@" + strconv.FormatInt(bs.StreamInfo().Created.UnixNano(), 36)
		}
	}
	return &claimer{
		cfg: c, leases: leases, clocks: clocks, ttl: ttl, value: value, where: where, bucket: js.Workers, js: js,
		fresh: info.Created.Add(max(ttl, c.LongestLease) + c.ClockAhead).Sub(now),
	}, nil
}

// held returns the worker IDs whose lease keys exist, as far as a bounded
// listing finds them: a hint that saves a Create per held ID.
func (cl *claimer) held(ctx context.Context) (map[int]bool, error) {
	return heldIDs(ctx, cl.js, cl.bucket)
}

// heldIDs returns the worker IDs whose lease keys exist in bucket, as far
// as a listing bounded by listTimeout finds them: a hint (Create decides).
func heldIDs(ctx context.Context, js jetstream.JetStream, bucket string) (map[int]bool, error) {
	taken := map[int]bool{}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	err := eachKey(lctx, js, bucket, func(id int, _ jetstream.KeyValueEntry) { taken[id] = true })
	if err != nil {
		return map[int]bool{}, ctx.Err() // only the caller's end is an error
	}
	return taken, nil
}

// HeldWorkerIDs returns the worker IDs whose leases are held, as far as a
// listing bounded to a few seconds finds them; none when the bucket does
// not exist.
func HeldWorkerIDs(ctx context.Context, js JS) (map[int]bool, error) {
	_, err := js.KeyValue(ctx, js.Workers)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return map[int]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: open bucket %s: %w", js.Workers, err)
	}
	return heldIDs(ctx, js, js.Workers)
}

// try claims worker ID id if its last timestamp is at most wait ahead of the
// clock. The wait comes before the claim: it needs no lease, and a long one
// would outlive it. It fails with jetstream.ErrKeyExists when id is held and
// workerid.ErrClockBehind when the wait would be longer.
func (cl *claimer) try(ctx context.Context, id int, wait time.Duration) (*Lease, error) {
	last, _, _, err := readClock(ctx, cl.clocks, id, cl.cfg.Epoch)
	if err != nil {
		return nil, err
	}
	ahead := time.Duration(last-cl.cfg.Clock.Now().UnixMilli()) * time.Millisecond
	if ahead > FarAhead {
		return nil, fmt.Errorf("%w: worker ID %d's last timestamp is %v ahead of this clock (%s); if no vendor's clock ran that far ahead, reset it with: vendor cluster reset-worker %d",
			errFarAhead, id, ahead.Round(time.Second), time.UnixMilli(last).UTC().Format(time.RFC3339), id)
	}
	if ahead > time.Second && ahead <= wait {
		cl.cfg.Report(fmt.Sprintf("worker ID %d's last timestamp is %v ahead of this clock (an earlier holder's clock ran ahead, or it vended with a later epoch): waiting for it",
			id, ahead.Round(time.Millisecond)), cl.cfg.Clock.Now().Add(ahead))
	}
	if err := workerid.WaitPast(ctx, cl.cfg.Clock, last, wait); err != nil {
		return nil, fmt.Errorf("worker ID %d: %w", id, err)
	}
	l := &Lease{id: id, clock: cl.cfg.Clock, epoch: cl.cfg.Epoch, clocks: cl.clocks, where: cl.where,
		key: fencedKey{kv: cl.leases, key: leaseKey(id), what: fmt.Sprintf("worker ID %d", id), value: cl.value, ttl: cl.ttl,
			clock: cl.cfg.Clock, owner: leaseOwner}}
	err = l.key.create(ctx)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("kv: claim worker ID %d: %w", id, err)
	}
	if err := l.start(ctx, min(cl.cfg.MaxWait, cl.ttl/2), cl.fresh, cl.cfg.Report); err != nil {
		l.key.release(context.WithoutCancel(ctx))
		return nil, err
	}
	return l, nil
}

// waitHeld claims worker ID id, waiting while someone else holds it for as
// long as that lease could still be live without being renewed: the stale
// lease of a process that died without releasing it expires by then. If the
// key's revision moves meanwhile, its holder is alive: ErrHeldByLive.
func (cl *claimer) waitHeld(ctx context.Context, id int) (*Lease, error) {
	var seen uint64 // the held key's revision when first seen
	for {
		e, err := cl.leases.Get(ctx, leaseKey(id))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			l, err := cl.try(ctx, id, cl.cfg.MaxWait)
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return l, err
			}
			continue // claimed by someone else just now: look again
		case err != nil:
			return nil, fmt.Errorf("kv: read the lease of worker ID %d: %w", id, err)
		}
		who := fmt.Sprintf("renewed %s", e.Created().UTC().Format(time.RFC3339))
		if v, err := decodeLeaseValue(e.Value()); err == nil {
			who = fmt.Sprintf("%q, claimed %s, %s", v.Holder, v.Claimed.Format(time.RFC3339), who)
		} else {
			who = Corrupt(cl.bucket, leaseKey(id), e.Revision(), e.Value(), err, "").Error() + ", " + who
		}
		switch {
		case seen == 0:
			seen = e.Revision()
			// The server expires the key one TTL after its last update.
			cl.cfg.Report(fmt.Sprintf("worker ID %d is still leased (%s); waiting up to %v for that lease to expire, as a process killed without releasing it leaves it behind",
				id, who, e.Created().Add(cl.ttl).Sub(cl.cfg.Clock.Now()).Round(time.Second)), e.Created().Add(cl.ttl))
		case e.Revision() != seen:
			return nil, fmt.Errorf("%w: worker ID %d (%s) was renewed while this claim waited for it to expire", ErrHeldByLive, id, who)
		}
		t := time.NewTimer(heldPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
