package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

// Buckets of the worker-ID leases.
const (
	// WorkersBucket holds one key per claimed worker ID; the bucket's TTL
	// expires the keys of workers that stopped renewing.
	WorkersBucket = "leaf_workers"
	// ClocksBucket holds each worker ID's last timestamp. It has no TTL: the
	// timestamp must outlive the lease so the next holder starts after it.
	ClocksBucket = "leaf_worker_clocks"
)

var (
	// ErrNoFreeWorkerID is returned by Claim when every worker ID of its
	// range is held.
	ErrNoFreeWorkerID = errors.New("kv: every worker ID is held by a live worker")
	// errClockRaced: a worker ID's timestamp changed under a holder's
	// compare-and-set.
	errClockRaced = errors.New("its last timestamp was written by another writer")
)

// listTimeout bounds the listing of held keys, a hint (Create decides): a
// watcher over keys that expire while it starts may never report that it
// has sent them all.
const listTimeout = 2 * time.Second

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
	// First and Last bound the worker IDs Claim tries (0 and 0 mean all,
	// 0..1023), to split the ID space between clusters.
	First, Last int
	// MaxWait is how long Claim waits for the clock to pass the previous
	// holder's last timestamp before giving up (the TTL, at least
	// workerid.DefaultMaxWait).
	MaxWait time.Duration
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
	if c.MaxWait <= 0 {
		c.MaxWait = max(c.TTL, workerid.DefaultMaxWait)
	}
	if c.First == 0 && c.Last == 0 {
		c.Last = snowflake.MaxWorkerID
	}
	if c.First < 0 || c.Last > snowflake.MaxWorkerID || c.First > c.Last {
		errs = append(errs, fmt.Errorf("worker ID range %d..%d is not within 0..%d", c.First, c.Last, snowflake.MaxWorkerID))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("kv: lease config: %w", err)
	}
	return c, nil
}

// Lease is a claimed worker ID. It implements workerid.Holder.
type Lease struct {
	id       int
	last     int64 // previous holder's last timestamp
	deadline time.Time
	ttl      time.Duration
	value    []byte
	clock    snowflake.Clock

	leases   jetstream.KeyValue
	clocks   jetstream.KeyValue
	rev      uint64 // lease key's revision
	clockRev uint64 // clock key's revision
	recorded int64  // the highest last timestamp written
}

var _ workerid.Holder = (*Lease)(nil)

type leaseValue struct {
	Holder  string    `json:"holder"`
	Claimed time.Time `json:"claimed"`
}

func leaseKey(id int) string { return "worker." + strconv.Itoa(id) }

// Claim takes a free worker ID: Create on its key is the claim. It then waits
// until the clock is past the ID's last recorded timestamp and records a
// first reservation, so the returned lease may vend at once (until Deadline).
//
// It starts at a random ID so that concurrent claimants rarely collide. A
// first pass takes only IDs whose last timestamp the clock has passed; a
// second one waits (up to MaxWait) for one it has not.
func Claim(ctx context.Context, js jetstream.JetStream, c LeaseConfig) (*Lease, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	cl, err := newClaimer(ctx, js, c)
	if err != nil {
		return nil, err
	}
	taken, err := cl.held(ctx)
	if err != nil {
		return nil, err
	}
	size := c.Last - c.First + 1
	start := rand.IntN(size)
	var behind error
	for _, wait := range []time.Duration{0, c.MaxWait} {
		for i := range size {
			id := c.First + (start+i)%size
			if taken[id] {
				continue
			}
			l, err := cl.try(ctx, id, wait)
			switch {
			case err == nil:
				return l, nil
			case errors.Is(err, jetstream.ErrKeyExists):
				taken[id] = true
			case errors.Is(err, workerid.ErrClockBehind):
				behind = err
			default:
				return nil, err
			}
		}
	}
	if behind != nil {
		return nil, fmt.Errorf("kv: no free worker ID in %d..%d whose last timestamp this clock has passed: %w", c.First, c.Last, behind)
	}
	return nil, fmt.Errorf("%w (IDs %d..%d, bucket %s); stop some workers or wait %v for dead ones to expire",
		ErrNoFreeWorkerID, c.First, c.Last, WorkersBucket, cl.ttl)
}

// claimer is one Claim's view of the buckets.
type claimer struct {
	cfg            LeaseConfig
	leases, clocks jetstream.KeyValue
	ttl            time.Duration // the lease bucket's
	value          []byte
}

func newClaimer(ctx context.Context, js jetstream.JetStream, c LeaseConfig) (*claimer, error) {
	leases, ttl, err := workerBuckets(ctx, js, c)
	if err != nil {
		return nil, err
	}
	clocks, err := js.KeyValue(ctx, ClocksBucket)
	if err != nil {
		return nil, fmt.Errorf("kv: open bucket %s: %w", ClocksBucket, err)
	}
	value, _ := json.Marshal(leaseValue{Holder: c.Holder, Claimed: time.Now().UTC()})
	return &claimer{cfg: c, leases: leases, clocks: clocks, ttl: ttl, value: value}, nil
}

// held returns the worker IDs whose lease keys exist, as far as a bounded
// listing finds them: a hint that saves a Create per held ID.
func (cl *claimer) held(ctx context.Context) (map[int]bool, error) {
	taken := map[int]bool{}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	keys, err := cl.leases.ListKeys(lctx)
	if err != nil {
		return taken, ctx.Err() // only the caller's end is an error
	}
	for k := range keys.Keys() {
		if id, err := strconv.Atoi(strings.TrimPrefix(k, "worker.")); err == nil {
			taken[id] = true
		}
	}
	return taken, nil
}

// try claims worker ID id if its last timestamp is at most wait ahead of the
// clock. The wait comes before the claim: it needs no lease, and a long one
// would outlive it. It fails with jetstream.ErrKeyExists when id is held and
// workerid.ErrClockBehind when the wait would be longer.
func (cl *claimer) try(ctx context.Context, id int, wait time.Duration) (*Lease, error) {
	last, _, err := readClock(ctx, cl.clocks, id)
	if err != nil {
		return nil, err
	}
	if err := workerid.WaitPast(ctx, cl.cfg.Clock, last, wait); err != nil {
		return nil, fmt.Errorf("worker ID %d: %w", id, err)
	}
	rev, err := cl.leases.Create(ctx, leaseKey(id), cl.value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("kv: claim worker ID %d: %w", id, err)
	}
	l := &Lease{id: id, rev: rev, ttl: cl.ttl, value: cl.value, clock: cl.cfg.Clock, leases: cl.leases, clocks: cl.clocks}
	if err := l.start(ctx, min(cl.cfg.MaxWait, cl.ttl/2)); err != nil {
		l.leases.Delete(context.WithoutCancel(ctx), leaseKey(id), jetstream.LastRevision(l.rev))
		return nil, err
	}
	return l, nil
}

// workerBuckets opens (or creates) both buckets and returns the lease bucket
// and its effective TTL.
func workerBuckets(ctx context.Context, js jetstream.JetStream, c LeaseConfig) (jetstream.KeyValue, time.Duration, error) {
	leases, err := openOrCreate(ctx, js, jetstream.KeyValueConfig{
		Bucket: WorkersBucket, Description: "leaf-nats worker-ID leases",
		History: 1, TTL: c.TTL, Replicas: c.Replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, 0, err
	}
	if _, err := openOrCreate(ctx, js, jetstream.KeyValueConfig{
		Bucket: ClocksBucket, Description: "leaf-nats worker-ID last timestamps",
		History: 1, Replicas: c.Replicas, Storage: jetstream.FileStorage,
	}); err != nil {
		return nil, 0, err
	}
	// A timestamp the server may drop would let the next holder repeat IDs.
	stream, err := js.Stream(ctx, "KV_"+ClocksBucket)
	if err != nil {
		return nil, 0, fmt.Errorf("kv: stream of %s: %w", ClocksBucket, err)
	}
	if sc := stream.CachedInfo().Config; sc.MaxAge > 0 || sc.MaxBytes > 0 || sc.MaxMsgs > 0 {
		return nil, 0, fmt.Errorf("kv: bucket %s has a TTL or size limit (max age %v, bytes %d, messages %d), so worker IDs' last timestamps could be dropped and IDs repeated; recreate it without limits",
			ClocksBucket, sc.MaxAge, sc.MaxBytes, sc.MaxMsgs)
	}
	st, err := leases.Status(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("kv: status of %s: %w", WorkersBucket, err)
	}
	ttl := st.TTL()
	if ttl <= 0 {
		return nil, 0, fmt.Errorf("kv: bucket %s has no TTL, so dead workers' IDs would never be freed; delete it (nats kv del %s) and restart",
			WorkersBucket, WorkersBucket)
	}
	return leases, ttl, nil
}

func openOrCreate(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // created by a concurrent process
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kv: open bucket %s (is JetStream enabled on the server?): %w", cfg.Bucket, err)
	}
	return kv, nil
}

// start makes the first reservation. The clock key is written with
// compare-and-set: if a former holder that lost the ID without noticing
// recorded a later timestamp after Claim read it, the write fails and start
// waits past that one too.
func (l *Lease) start(ctx context.Context, maxWait time.Duration) error {
	for {
		last, rev, err := readClock(ctx, l.clocks, l.id)
		if err != nil {
			return err
		}
		if err := workerid.WaitPast(ctx, l.clock, last, maxWait); err != nil {
			return fmt.Errorf("worker ID %d: %w", l.id, err)
		}
		l.last, l.clockRev = last, rev
		if _, err := l.Renew(ctx, last); err != nil {
			if errors.Is(err, errClockRaced) {
				continue
			}
			return err
		}
		return nil
	}
}

// readClock returns worker ID id's last timestamp and its revision (0, 0
// when none was ever recorded).
func readClock(ctx context.Context, clocks jetstream.KeyValue, id int) (int64, uint64, error) {
	e, err := clocks.Get(ctx, leaseKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kv: read last timestamp of worker ID %d: %w", id, err)
	}
	last, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("kv: last timestamp of worker ID %d is corrupt (%q); it must be at least the last Unix ms any holder used: fix it with nats kv put %s %s <ms>",
			id, e.Value(), ClocksBucket, leaseKey(id))
	}
	return last, e.Revision(), nil
}

// ID returns the worker ID.
func (l *Lease) ID() int { return l.id }

// Last returns the previous holder's last timestamp (Unix ms): the generator
// must start after it.
func (l *Lease) Last() int64 { return l.last }

// Deadline returns the deadline of the last reservation.
func (l *Lease) Deadline() time.Time { return l.deadline }

// Where names the bucket of the lease.
func (l *Lease) Where() string { return WorkersBucket }

// TTL returns the lease TTL in force (the bucket's).
func (l *Lease) TTL() time.Duration { return l.ttl }

// Renew updates the lease key against its last revision, then records the
// new deadline (or last, or what it recorded before, whichever is latest) as
// the worker ID's last timestamp. The deadline is measured
// from before the update was sent, so it falls before the server can expire
// the key: no one else can hold the ID while we may vend with it.
func (l *Lease) Renew(ctx context.Context, last int64) (time.Time, error) {
	// A renewal that takes longer than a quarter of the TTL is better
	// abandoned and retried than waited for.
	ctx, cancel := context.WithTimeout(ctx, l.ttl/4)
	defer cancel()
	sent := l.clock.Now()
	rev, err := l.leases.Update(ctx, leaseKey(l.id), l.value, l.rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
			return time.Time{}, fmt.Errorf("%w: worker ID %d expired or was taken: %v", workerid.ErrLeaseLost, l.id, err)
		}
		return time.Time{}, fmt.Errorf("kv: renew worker ID %d: %w", l.id, err)
	}
	l.rev = rev
	// A small margin for the server's clock running faster than ours.
	deadline := sent.Add(l.ttl - l.ttl/50)
	// After a backwards clock step the deadline is behind IDs already
	// made: record the later of the two, and never less than before.
	rec := max(deadline.UnixMilli(), last, l.recorded)
	crev, err := l.writeClock(ctx, rec)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		// Someone else wrote the timestamp, or our own last write landed
		// though its ack was lost: either way this lease can no longer
		// tell what is recorded. Give it up (the window stays shut) and
		// let the holder claim anew.
		return time.Time{}, fmt.Errorf("%w: worker ID %d: %w", workerid.ErrLeaseLost, l.id, errClockRaced)
	}
	if err != nil {
		return time.Time{}, err
	}
	l.clockRev, l.recorded = crev, rec
	l.deadline = deadline
	return deadline, nil
}

func (l *Lease) writeClock(ctx context.Context, ms int64) (uint64, error) {
	v := []byte(strconv.FormatInt(ms, 10))
	if l.clockRev == 0 {
		rev, err := l.clocks.Create(ctx, leaseKey(l.id), v)
		if err != nil {
			return 0, fmt.Errorf("kv: record last timestamp of worker ID %d: %w", l.id, err)
		}
		return rev, nil
	}
	rev, err := l.clocks.Update(ctx, leaseKey(l.id), v, l.clockRev)
	if err != nil {
		return 0, fmt.Errorf("kv: record last timestamp of worker ID %d: %w", l.id, err)
	}
	return rev, nil
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
	if _, err := l.writeClock(ctx, last); err != nil {
		errs = append(errs, err)
	}
	if err := l.leases.Delete(ctx, leaseKey(l.id), jetstream.LastRevision(l.rev)); err != nil {
		errs = append(errs, fmt.Errorf("kv: delete lease of worker ID %d: %w", l.id, err))
	}
	return errors.Join(errs...)
}
