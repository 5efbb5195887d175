package cluster

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

// The worker-ID leases, simulated (issue 21): vendors, the NATS store and
// the clocks in one process, stepped by one seeded source and nothing else,
// so that a seed replays the same run, event for event. Each vendor runs a
// real workerid.Keeper: its lease.Driver and lease.Machine (claim, first
// renewal and window, renewals every third of the hold and every quarter
// of that while they fail, a loss revoking the generator at once and
// claiming again after the backoff, a renewal at once after a reconnect,
// Release with the last millisecond on a graceful stop), over the real
// kv.Claim, kv.Lease (its fenced key) and snowflake.Generator, with the
// Guard's real holder (held), decisions (CheckClocks, ClaimSettings,
// VendingWith) and Core, whose snowflake gate is stepped every CheckEvery
// with the live peers. Nothing of the loop is modelled: the Keeper's
// driver runs on its own goroutine, on a clock the simulation injects
// (simVendor: its time is the server's plus an offset, its alarm parks the
// driver until a simulated time), and the world hands the turn to one
// driver at a time, when its alarm is due or it was rung, and waits until
// it parks again, so that a turn is as deterministic as a function call.
// In the same world every vendor also contends for a strict tag's lead,
// run by the same driver and machine (simlead_test.go): two leads never
// serve at once.
//
// The store is a fake jetstream.JetStream holding the buckets the leases
// touch. Each bucket is one stream: every write takes its next sequence,
// which is the revision; writes carry the expected last sequence of their
// key and fail as nats-server and nats.go fail them; the leases bucket
// drops a key one TTL after its last write, by the server's time. Its
// faults, drawn from the seed:
//
//   - a request dropped: nothing written, the caller gets a timeout (or,
//     for a write, no responders);
//   - an ack lost: written, the caller gets a timeout;
//   - a write delayed: the caller gets a timeout and the write lands up to
//     300 ms later if its expected revision still holds then (writes in
//     flight when the store goes back are lost with it);
//   - the store going back: both buckets to one earlier snapshot, or each
//     to its own, or one alone, with their stream sequences, so revisions
//     are issued again (a copy restored, unsynced writes lost to a power
//     cut);
//   - no stream leader: every request fails for up to 8 s;
//   - a vendor cut off from the store for up to two TTLs: its requests
//     fail, while it answers its peers and vends within its window.
//
// Every vendor's clock is the server's plus an offset within ±simSkew,
// which steps back and forth (one claim in five just before its generator
// starts, where it hurts most); a clock's Sleep lets simulated time pass.
// Vendors crash (forget everything, release nothing: their Keeper is
// closed with every request it makes dropped unseen), stop gracefully
// (Keeper.Close) and start again; a store that goes back moves the fence
// of about half the live vendors (they reconnect), which renew before they
// vend again. Time moves by up to 20 ms a step, now and then by up to a
// second, and now and then to just past the next edge: a lease expiring,
// a window shutting, a driver's alarm, a delayed write landing. Each seed
// draws its own TTL (1, 2 or 6 s), number of vendors (5 to 8, for 4
// worker IDs) and fault rates.
//
// The invariant: no ID is vended twice, over the whole run. Every
// generator starts each millisecond at sequence 0, so two that use one
// millisecond of one worker ID vend the same ID; and traffic is taken to
// be continuous: a generator that vended in milliseconds a and b with
// nothing between (no clock step, window or gate shut, refusal) would have
// vended in each millisecond between had a request come, so those count as
// used too (cover). A run that breaks it fails with its seed, the command
// that replays it, both holders' stories and the last events.
//
// Excluded, because the design says it cannot be helped (docs/operations.md,
// "What cannot be repaired": a last timestamp lost with the store, its
// holder stopped, a claimer's clock behind): a vendor starting to vend
// with a worker ID (its claim's first window, a renewal that opens a window
// shut since its deadline, its gate opening again) below milliseconds that
// another holder used, when a rewind of the clocks bucket took the last
// timestamp below them and that holder recorded none over them since, that
// holder has stopped vending (crashed, stopped, lost its lease, or its
// deadline passed: what VendingWith sees, and its generator revoked or its
// window shut), and some clock may still read one of those milliseconds
// (the server's time less simSkew is not past them). Nothing can know the
// lost timestamp then. Such a claim passes the worker ID over, and the
// renewal that would open such a window fails (the Keeper gives a claim
// whose first renewal fails up, and retries a later one), until the
// clocks are past them (simExcluded). Nothing else is excluded. Not
// generated either: a
// peer that does not answer (each answers at once; one that does not is
// another documented limit), buckets deleted or created again, a first
// start on a new store.
//
// Departures from production, none of which matters to uniqueness: the
// Guard's claim (Guard.Claim, which asks its peers over NATS) is its steps
// in order, with the peers' answers read from the world; a claim tries one
// worker ID at a time from a seeded start (kv.Claim's scan starts at a
// random ID of math/rand's global source, which no seed replays); a claim
// whose clock is behind a last timestamp does not wait inside kv.Claim
// (MaxWait 1 ns: ErrClockBehind) but parks its driver 10 to 100 ms and
// tries again, so that the other vendors go on meanwhile, and is never made
// permanent for it; Where is "leaf_workers" for every holder
// (jetstream.KeyValueBucketStatus cannot be made outside nats.go, so it
// does not tell the stream's creation).

// LEAF_SIM_SEED replays one seed; LEAF_SIM_STEPS sets how many steps each
// seed runs (testtool.SimSeeds).
const (
	simSeedEnv  = testtool.SeedEnv
	simStepsEnv = "LEAF_SIM_STEPS"
)

const (
	simSkew      = 250 * time.Millisecond // every vendor clock is within this of the server's
	simMaxSkew   = 400 * time.Millisecond // LEAF_CLOCK_MAX_SKEW
	simWorkers   = 4                      // worker IDs 0..3, fewer than vendors
	simTrace     = 400                    // events a failure's report shows
	simVendTrace = 100                    // and vends
	simSnaps     = 256
)

var simStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// The normal run: simSeeds fixed seeds and a fresh one, of simSteps steps
// each.
const (
	simSeeds = 10
	simSteps = 10_000
)

func TestSimLease(t *testing.T) {
	seeds, steps := simPlan(t)
	var total, ids, windows int64
	for _, seed := range seeds {
		w := newSimWorld(seed)
		err := w.run(steps)
		total, ids, windows = total+int64(w.step), ids+w.count, windows+int64(w.stats.leadWindows)
		if err != nil {
			t.Fatalf("%v\nreplay it with: %s=%d %s=%d go test -count=1 -run 'TestSimLease$' -v ./cluster/",
				err, simSeedEnv, seed, simStepsEnv, steps)
		}
		t.Logf("seed %d: %d steps, %v simulated, %d IDs, %s", seed, w.step, w.now.Sub(simStart).Round(time.Second), w.count, w.stats)
	}
	t.Logf("%d steps, %d IDs, no repeats; %d strict lead windows opened, never two leads at once", total, ids, windows)
}

// simPlan reads the seeds and steps to run from the environment.
func simPlan(t *testing.T) ([]uint64, int) {
	steps := simSteps
	if s := os.Getenv(simStepsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number of steps", simStepsEnv, s)
		}
		steps = n
	}
	seeds := make([]uint64, simSeeds)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return testtool.SimSeeds(t, seeds, "go test -count=1 -run 'TestSimLease$' -v ./cluster/"), steps
}

// A seed replays exactly: the same events, the same IDs.
func TestSimLeaseDeterministic(t *testing.T) {
	const seed, steps = 7, 3000
	a, b := newSimWorld(seed), newSimWorld(seed)
	errA, errB := a.run(steps), b.run(steps)
	if (errA == nil) != (errB == nil) || a.hash != b.hash || a.count != b.count || a.events != b.events {
		t.Fatalf("seed %d ran twice differently: %d IDs, %d events, trace %x (%v); then %d IDs, %d events, trace %x (%v)",
			seed, a.count, a.events, a.hash, errA, b.count, b.events, b.hash, errB)
	}
	if a.count == 0 || a.stats.claims == 0 || a.stats.rewinds == 0 {
		t.Fatalf("seed %d did nothing worth replaying: %s", seed, a.stats)
	}
}

// The fake reads jetstream.LastRevision's revision as nats.go does.
func TestSimDeleteRevision(t *testing.T) {
	if rev, ok := simDeleteRevision([]jetstream.KVDeleteOpt{jetstream.LastRevision(42)}); !ok || rev != 42 {
		t.Fatalf("LastRevision(42) read as %d, %v", rev, ok)
	}
	if _, ok := simDeleteRevision(nil); ok {
		t.Fatal("no option read as a revision")
	}
}

// simRates are the lease TTL of a run, and the chances of each fault: per
// request, per step, or per vendor and step.
type simRates struct {
	ttl                  time.Duration
	vendors              int
	drop, lostAck, delay float64
	rewind, outage       float64
	cut                  float64
	clockStep, crash     float64
	stop                 float64
	leadTTL              time.Duration
}

func simRatesFor(rng *rand.Rand) simRates {
	return simRates{
		ttl:       []time.Duration{time.Second, 2 * time.Second, 6 * time.Second}[rng.IntN(3)],
		vendors:   simWorkers + 1 + rng.IntN(4),
		drop:      0.01 + 0.06*rng.Float64(),
		lostAck:   0.01 + 0.04*rng.Float64(),
		delay:     0.005 + 0.02*rng.Float64(),
		rewind:    0.001 + 0.005*rng.Float64(),
		outage:    0.0002 + 0.001*rng.Float64(),
		cut:       0.0005 + 0.002*rng.Float64(),
		clockStep: 0.001 + 0.006*rng.Float64(),
		crash:     0.0002 + 0.001*rng.Float64(),
		stop:      0.0003 + 0.0015*rng.Float64(),
		leadTTL:   []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}[rng.IntN(3)],
	}
}

// simStats counts what a run did.
type simStats struct {
	claims, claimFails, excluded, renewals, renewFails, lost int
	rewinds, crashes, stops, steps, shut, vendFails          int
	leadWindows, leadServed, leadsLost, stepDowns            int
}

func (s simStats) String() string {
	return fmt.Sprintf("%d claims (%d failed, %d passed over or put off as excluded), %d renewals (%d failed, %d leases lost), "+
		"%d rewinds, %d crashes, %d stops, %d clock steps, %d gates shut, %d refused vends; "+
		"strict leads: %d windows opened, %d requests served, %d leads lost, %d stepped down",
		s.claims, s.claimFails, s.excluded, s.renewals, s.renewFails, s.lost, s.rewinds, s.crashes, s.stops, s.steps, s.shut, s.vendFails,
		s.leadWindows, s.leadServed, s.leadsLost, s.stepDowns)
}

// The store.

// simMsg is the last message of a key (every bucket keeps one per key).
type simMsg struct {
	seq uint64
	val []byte
	del bool // a delete marker
	at  time.Time
}

// simBucket is a KV bucket's stream.
type simBucket struct {
	name    string
	maxAge  time.Duration
	created time.Time
	seq     uint64 // the last sequence issued
	msgs    map[string]simMsg
}

func (b *simBucket) clone() *simBucket {
	c := *b
	c.msgs = maps.Clone(b.msgs)
	return &c
}

// expire drops the messages MaxAge old, as the server does by its clock.
func (b *simBucket) expire(now time.Time) {
	if b.maxAge == 0 {
		return
	}
	for k, m := range b.msgs {
		if now.Sub(m.at) >= b.maxAge {
			delete(b.msgs, k)
		}
	}
}

// simAnyRev: a write that expects nothing of its key's last sequence.
const simAnyRev = ^uint64(0)

// publish is the server's side of a write.
func (b *simBucket) publish(now time.Time, key string, val []byte, del bool, expect uint64) (uint64, error) {
	b.expire(now)
	if last := b.msgs[key].seq; expect != simAnyRev && last != expect {
		return 0, simWrongSeq(last)
	}
	b.seq++
	b.msgs[key] = simMsg{seq: b.seq, val: val, del: del, at: now}
	return b.seq, nil
}

// simWrongSeq is the error nats.go's publish returns for a write whose
// expected last sequence does not hold.
func simWrongSeq(last uint64) error {
	return fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence,
		Description: fmt.Sprintf("wrong last sequence: %d", last)})
}

// simWrite is a write delayed in flight.
type simWrite struct {
	b      *simBucket
	key    string
	val    []byte
	del    bool
	expect uint64
	due    time.Time
}

// simSnap is the store as it was.
type simSnap struct {
	at             time.Time
	leases, clocks *simBucket
}

// simFault is what happens to one request.
type simFault int

const (
	simOK simFault = iota
	simDrop
	simLostAck
	simDelayed
)

// fault draws a request's fate; only writes can have an ack lost or be
// delayed.
func (w *simWorld) fault(write bool) simFault {
	if w.gone() {
		return simDrop // no draw: a crashed vendor's requests are not in the run
	}
	r := w.rng.Float64()
	switch {
	case w.now.Before(w.outUntil), w.caller != nil && w.now.Before(w.caller.cutUntil):
		return simDrop
	case r < w.rates.drop:
		return simDrop
	case !write:
		return simOK
	case r < w.rates.drop+w.rates.lostAck:
		return simLostAck
	case r < w.rates.drop+w.rates.lostAck+w.rates.delay:
		return simDelayed
	}
	return simOK
}

// gone reports whether the caller has crashed: its Keeper's closing
// requests reach nothing.
func (w *simWorld) gone() bool { return w.caller != nil && w.caller.dead }

// publish is a write as a client of the store sees it.
func (w *simWorld) publish(b *simBucket, op, key string, val []byte, del bool, expect uint64) (uint64, error) {
	f := w.fault(true)
	switch f {
	case simDrop:
		if w.gone() {
			return 0, context.Canceled
		}
		w.logf(nil, "    %s %s %s: dropped", b.name, op, key)
		if w.rng.IntN(4) == 0 {
			return 0, jetstream.ErrNoStreamResponse
		}
		return 0, context.DeadlineExceeded
	case simDelayed:
		due := w.now.Add(time.Duration(1+w.rng.IntN(300)) * time.Millisecond)
		w.inflight = append(w.inflight, simWrite{b, key, val, del, expect, due})
		w.logf(nil, "    %s %s %s (expecting %s): delayed until %s", b.name, op, key, simRev(expect), simAt(due))
		return 0, context.DeadlineExceeded
	}
	seq, err := b.publish(w.now, key, val, del, expect)
	res := fmt.Sprintf("revision %d", seq)
	if err != nil {
		res = err.Error()
	}
	if f == simLostAck {
		w.logf(nil, "    %s %s %s (expecting %s): %s, ack lost", b.name, op, key, simRev(expect), res)
		return 0, context.DeadlineExceeded
	}
	w.logf(nil, "    %s %s %s (expecting %s): %s", b.name, op, key, simRev(expect), res)
	return seq, err
}

func simRev(r uint64) string {
	if r == simAnyRev {
		return "any"
	}
	return strconv.FormatUint(r, 10)
}

// read is the last message of key as a client reads it: an error wrapping
// jetstream.ErrKeyDeleted for a delete marker, as nats.go's get.
func (w *simWorld) read(b *simBucket, key string) (simMsg, error) {
	if w.fault(false) == simDrop {
		if !w.gone() {
			w.logf(nil, "    %s get %s: dropped", b.name, key)
		}
		return simMsg{}, context.DeadlineExceeded
	}
	b.expire(w.now)
	m, ok := b.msgs[key]
	switch {
	case !ok:
		return m, jetstream.ErrKeyNotFound
	case m.del:
		return m, jetstream.ErrKeyDeleted
	}
	return m, nil
}

// land applies the delayed writes that are due.
func (w *simWorld) land() {
	keep := w.inflight[:0]
	for _, d := range w.inflight {
		if w.now.Before(d.due) {
			keep = append(keep, d)
			continue
		}
		seq, err := d.b.publish(w.now, d.key, d.val, d.del, d.expect)
		res := fmt.Sprintf("revision %d", seq)
		if err != nil {
			res = err.Error()
		}
		w.logf(nil, "    %s %s: a delayed write lands: %s", d.b.name, d.key, res)
	}
	w.inflight = keep
}

// simJS is the NATS store as the kv package uses it.
type simJS struct {
	jetstream.JetStream // nil: a call the simulation does not model panics
	w                   *simWorld
}

var _ jetstream.JetStream = simJS{}

func (js simJS) KeyValue(_ context.Context, bucket string) (jetstream.KeyValue, error) {
	b := js.w.buckets[bucket]
	if b == nil {
		return nil, jetstream.ErrBucketNotFound
	}
	if js.w.fault(false) == simDrop {
		return nil, context.DeadlineExceeded
	}
	return &simKV{w: js.w, b: b}, nil
}

func (js simJS) Stream(_ context.Context, name string) (jetstream.Stream, error) {
	b := js.w.buckets[strings.TrimPrefix(name, "KV_")]
	if b == nil {
		return nil, jetstream.ErrStreamNotFound
	}
	if js.w.fault(false) == simDrop {
		return nil, context.DeadlineExceeded
	}
	return simStream{w: js.w, b: b}, nil
}

type simStream struct {
	jetstream.Stream
	w *simWorld
	b *simBucket
}

func (s simStream) CachedInfo() *jetstream.StreamInfo {
	return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: "KV_" + s.b.name, MaxAge: s.b.maxAge},
		Created: s.b.created, TimeStamp: s.w.now}
}

func (s simStream) Info(context.Context, ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	if s.w.fault(false) == simDrop {
		return nil, context.DeadlineExceeded
	}
	return s.CachedInfo(), nil
}

// simKV is a bucket as nats.go's KeyValue presents it.
type simKV struct {
	jetstream.KeyValue
	w *simWorld
	b *simBucket
}

var _ jetstream.KeyValue = (*simKV)(nil)

func (kv *simKV) Bucket() string { return kv.b.name }

func (kv *simKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	m, err := kv.w.read(kv.b, key)
	if errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	return simEntry{bucket: kv.b.name, key: key, m: m}, nil
}

// Create is nats.go's: a write expecting no message, and over a delete
// marker, one expecting the marker.
func (kv *simKV) Create(_ context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := kv.w.publish(kv.b, "create", key, value, false, 0)
	if err == nil {
		return rev, nil
	}
	if m, gerr := kv.w.read(kv.b, key); errors.Is(gerr, jetstream.ErrKeyDeleted) {
		return kv.w.publish(kv.b, "create", key, value, false, m.seq)
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return 0, fmt.Errorf("%w: %s", err, "key exists")
	}
	return 0, err
}

// Update is nats.go's: a mismatch wraps ErrKeyRevisionMismatch.
func (kv *simKV) Update(_ context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := kv.w.publish(kv.b, "update", key, value, false, revision)
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		err = fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return rev, err
}

// Delete writes a delete marker, expecting the LastRevision option's
// revision when it has one.
func (kv *simKV) Delete(_ context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	expect, ok := simDeleteRevision(opts)
	if !ok || expect == 0 {
		expect = simAnyRev
	}
	_, err := kv.w.publish(kv.b, "delete", key, nil, true, expect)
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		err = fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return err
}

// simDeleteRevision reads the revision a jetstream.LastRevision option
// sets: the option is a function of an unexported struct, which reflect
// can make and read.
func simDeleteRevision(opts []jetstream.KVDeleteOpt) (uint64, bool) {
	var rev uint64
	found := false
	for _, o := range opts {
		fn := reflect.ValueOf(o)
		if fn.Kind() != reflect.Func || fn.Type().NumIn() != 1 {
			panic(fmt.Sprintf("simKV.Delete: an option of type %T it cannot read", o))
		}
		arg := reflect.New(fn.Type().In(0).Elem())
		fn.Call([]reflect.Value{arg})
		if f := arg.Elem().FieldByName("revision"); f.IsValid() && f.Uint() != 0 {
			rev, found = f.Uint(), true
		}
	}
	return rev, found
}

func (kv *simKV) ListKeys(context.Context, ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	if kv.w.fault(false) == simDrop {
		return nil, context.DeadlineExceeded
	}
	kv.b.expire(kv.w.now)
	var keys []string
	for k, m := range kv.b.msgs {
		if !m.del {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	ch := make(chan string, len(keys))
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	return simKeys(ch), nil
}

func (kv *simKV) Status(context.Context) (jetstream.KeyValueStatus, error) {
	if kv.w.fault(false) == simDrop {
		return nil, context.DeadlineExceeded
	}
	return simStatus{b: kv.b}, nil
}

type simKeys chan string

func (k simKeys) Keys() <-chan string { return k }
func (simKeys) Stop() error           { return nil }

type simStatus struct {
	jetstream.KeyValueStatus
	b *simBucket
}

func (s simStatus) Bucket() string     { return s.b.name }
func (s simStatus) TTL() time.Duration { return s.b.maxAge }

type simEntry struct {
	bucket, key string
	m           simMsg
}

func (e simEntry) Bucket() string                  { return e.bucket }
func (e simEntry) Key() string                     { return e.key }
func (e simEntry) Value() []byte                   { return e.m.val }
func (e simEntry) Revision() uint64                { return e.m.seq }
func (e simEntry) Created() time.Time              { return e.m.at }
func (e simEntry) Delta() uint64                   { return 0 }
func (e simEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// The world.

// simWorld is one run: the store, the vendors, what they vended.
type simWorld struct {
	seed  uint64
	rng   *rand.Rand
	rates simRates
	now   time.Time // the server's
	step  int
	js    simJS

	buckets  map[string]*simBucket
	leases   *simBucket
	clocks   *simBucket
	inflight []simWrite
	snaps    []simSnap  // a ring
	outUntil time.Time  // no request reaches the store before
	caller   *simVendor // whose requests the store serves now

	vendors  []*simVendor
	sessions [simWorkers][]*simSession
	nsess    int
	vended   map[int64][]simRun // by ID>>SequenceBits: millisecond and worker ID
	spans    [simWorkers][]simSpan
	count    int64
	buf      []int64

	trace  simRing // the last events but vends
	vends  simRing // the last vends
	events int
	hash   uint64
	stats  simStats
	failed error
}

// simRun is a run of IDs of one millisecond and worker ID, by sequence.
type simRun struct {
	lo, hi int64
	sess   *simSession
}

func newSimWorld(seed uint64) *simWorld {
	rng := rand.New(rand.NewPCG(seed, 0x6c656166))
	w := &simWorld{seed: seed, rng: rng, rates: simRatesFor(rng), now: simStart, vended: map[int64][]simRun{},
		trace: simRing{keep: simTrace}, vends: simRing{keep: simVendTrace}}
	w.js = simJS{w: w}
	created := simStart.Add(-time.Hour) // long before: no claim is held back as in a new bucket
	w.leases = &simBucket{name: kv.WorkersBucket, maxAge: w.rates.ttl, created: created, msgs: map[string]simMsg{}}
	w.clocks = &simBucket{name: kv.ClocksBucket, created: created, msgs: map[string]simMsg{}}
	w.buckets = map[string]*simBucket{
		kv.WorkersBucket: w.leases, kv.ClocksBucket: w.clocks,
		kv.ClusterBucket: {name: kv.ClusterBucket, created: created, msgs: map[string]simMsg{}},
		kv.LeadersBucket: {name: kv.LeadersBucket, maxAge: w.rates.leadTTL, created: created, msgs: map[string]simMsg{}},
	}
	for i := range w.rates.vendors {
		v := &simVendor{w: w, name: fmt.Sprintf("v%d", i), off: simOffset(rng), mono: simOffset(rng)}
		w.vendors = append(w.vendors, v)
		w.restart(v)
	}
	return w
}

func simOffset(rng *rand.Rand) time.Duration {
	return time.Duration(rng.Int64N(int64(2*simSkew))) - simSkew
}

// run steps the world; it returns the first repeat.
func (w *simWorld) run(steps int) error {
	defer w.shutdown()
	for ; w.step < steps && w.failed == nil; w.step++ {
		w.tick()
	}
	return w.failed
}

// tick is one step: time passes, delayed writes land, faults strike, and
// each vendor, in a random order, does what is due.
func (w *simWorld) tick() {
	switch r := w.rng.IntN(20); {
	case r < 3:
		w.now = w.edge().Add(time.Duration(w.rng.IntN(3000)) * time.Microsecond)
	case r < 5:
		w.now = w.now.Add(time.Duration(w.rng.IntN(1000)) * time.Millisecond)
	default:
		w.now = w.now.Add(time.Duration(w.rng.IntN(20_000)) * time.Microsecond)
	}
	w.land()
	w.chaos()
	for _, i := range w.rng.Perm(len(w.vendors)) {
		if w.failed == nil {
			w.act(w.vendors[i])
		}
	}
	if w.rng.IntN(4) == 0 {
		w.snapshot()
	}
	if w.step%512 == 0 {
		w.prune()
	}
}

// edge is the next moment something changes by itself: a lease expires,
// a window shuts, a vendor's timer fires, a delayed write lands. Time
// jumps to just past one now and then, where timing bugs live.
func (w *simWorld) edge() time.Time {
	next := w.now.Add(time.Second)
	soon := func(t time.Time) {
		if t.After(w.now) && t.Before(next) {
			next = t
		}
	}
	for _, m := range w.leases.msgs {
		soon(m.at.Add(w.leases.maxAge))
	}
	for _, d := range w.inflight {
		soon(d.due)
	}
	for _, v := range w.vendors {
		times := []time.Time{v.back, v.check, v.self.get().Deadline.Add(-v.off)}
		if v.drv != nil {
			times = append(times, v.drv.due)
		}
		if v.lead != nil {
			times = append(times, v.lead.d.due, v.lead.drv.Status().Window.Until.Add(-v.mono))
		}
		if v.sess != nil {
			times = append(times, v.sess.window.Add(-v.off))
		}
		for _, t := range times {
			soon(t)
		}
	}
	return next
}

// chaos strikes: the store goes back, clocks step, vendors crash or stop.
func (w *simWorld) chaos() {
	if w.chance(w.rates.rewind) {
		w.rewind()
	}
	if w.chance(w.rates.outage) {
		w.outUntil = w.now.Add(time.Duration(500+w.rng.IntN(7500)) * time.Millisecond)
		w.logf(nil, "STORE OUT (no stream leader) until %s", simAt(w.outUntil))
	}
	for _, v := range w.vendors {
		switch {
		case w.chance(w.rates.clockStep):
			w.stepClock(v)
		case w.chance(w.rates.cut):
			v.cutUntil = w.now.Add(time.Duration(w.rng.Int64N(int64(2 * w.rates.ttl))))
			w.logf(v, "CUT OFF from the store until %s", simAt(v.cutUntil))
		case !v.alive:
		case w.chance(w.rates.crash):
			w.stats.crashes++
			w.logf(v, "CRASH")
			if v.sess != nil {
				w.story(v.sess, "crashed")
			}
			w.down(v)
		case w.chance(w.rates.stop):
			w.stop(v)
		}
	}
}

func (w *simWorld) chance(p float64) bool { return w.rng.Float64() < p }

// stepClock steps a vendor's clock, a little or anywhere within ±simSkew.
func (w *simWorld) stepClock(v *simVendor) {
	w.stats.steps++
	w.breakRun(v)
	was := v.off
	if w.rng.IntN(2) == 0 {
		v.off += time.Duration(w.rng.IntN(21)-10) * time.Millisecond
		v.off = min(max(v.off, -simSkew+time.Millisecond), simSkew-time.Millisecond)
	} else {
		v.off = simOffset(w.rng)
	}
	w.logf(v, "clock steps %+v (from %+v)", (v.off - was).Round(time.Millisecond), was.Round(time.Millisecond))
}

func (w *simWorld) snapshot() {
	s := simSnap{at: w.now, leases: w.leases.clone(), clocks: w.clocks.clone()}
	if len(w.snaps) < simSnaps {
		w.snaps = append(w.snaps, s)
		return
	}
	copy(w.snaps, w.snaps[1:])
	w.snaps[len(w.snaps)-1] = s
}

// pickSnap is a snapshot, a recent one more often.
func (w *simWorld) pickSnap() simSnap {
	n := len(w.snaps)
	if w.rng.IntN(2) == 0 {
		return w.snaps[n-1-w.rng.IntN(min(n, 16))]
	}
	return w.snaps[w.rng.IntN(n)]
}

// rewind takes the store back: both buckets to one snapshot, each to its
// own, or one alone. Writes in flight are lost with the server.
func (w *simWorld) rewind() {
	if len(w.snaps) == 0 {
		return
	}
	w.stats.rewinds++
	w.inflight = nil
	a, b := w.pickSnap(), w.pickSnap()
	what := ""
	switch w.rng.IntN(4) {
	case 0:
		*w.leases, *w.clocks = *a.leases.clone(), *a.clocks.clone()
		what = fmt.Sprintf("both buckets to %s", simAt(a.at))
	case 1:
		*w.leases, *w.clocks = *a.leases.clone(), *b.clocks.clone()
		what = fmt.Sprintf("%s to %s, %s to %s", w.leases.name, simAt(a.at), w.clocks.name, simAt(b.at))
	case 2:
		*w.leases = *a.leases.clone()
		what = fmt.Sprintf("%s alone to %s", w.leases.name, simAt(a.at))
	default:
		*w.clocks = *b.clocks.clone()
		what = fmt.Sprintf("%s alone to %s", w.clocks.name, simAt(b.at))
	}
	w.logf(nil, "STORE GOES BACK: %s (sequences %d, %d)", what, w.leases.seq, w.clocks.seq)
	w.atRisk()
	// The vendors whose connections it dropped reconnect: they renew
	// before they vend again (workerid.Config.Fence).
	for _, v := range w.vendors {
		if v.alive && w.rng.IntN(2) == 0 {
			v.fence++
			w.logf(v, "reconnects to the store")
		}
	}
}

// record is worker ID id's last timestamp in the store now, 0 for none.
func (w *simWorld) record(id int) int64 {
	m, ok := w.clocks.msgs["worker."+strconv.Itoa(id)]
	if !ok || m.del {
		return 0
	}
	ms, _, err := kv.ParseClock(m.val)
	if err != nil {
		return 0
	}
	return ms
}

// The exclusion.

// simSession is one claim of a worker ID by one vendor, from the claim to
// the end of its hold.
type simSession struct {
	id    int
	v     *simVendor
	wid   int
	maxMs int64 // the latest millisecond of its IDs, 0 before any
	// atRisk: the store went back to a last timestamp below IDs it made
	// or may still make, and no renewal of its own has recorded them again.
	atRisk  bool
	firstMs int64
	window  time.Time // the deadline of its generator's window; zero before the first
	cont    bool      // nothing broke its run of milliseconds since its last vend
	story   []string  // for a failure's report
}

// stopped reports whether s can vend no more as far as its peers can see
// (its vendor is gone, holds nothing, or its deadline has passed:
// VendingWith's test) and in truth.
func (w *simWorld) stopped(s *simSession) bool {
	v := s.v
	h := v.self.get()
	seen := !v.alive || v.sess != s || !h.Held || h.ID != s.wid || !h.Deadline.After(v.Now())
	return seen && !w.serving(s)
}

// serving reports whether s's generator may still vend: its Keeper has not
// revoked it, and its window is open. A holder that says it stopped but
// does not is no case the design cannot help.
func (w *simWorld) serving(s *simSession) bool {
	v := s.v
	return v.alive && v.sess == s && v.keeper != nil && v.keeper.Status().Held && v.Now().Before(s.window)
}

// atRisk marks, after the clocks bucket went back, the sessions whose IDs
// are above their worker ID's last timestamp now, or may be: the live
// ones whose window is.
func (w *simWorld) atRisk() {
	for id := range simWorkers {
		rec := w.record(id)
		for _, s := range w.sessions[id] {
			live := s.v.alive && s.v.sess == s
			if s.maxMs > rec || live && (s.window.IsZero() || s.window.UnixMilli() > rec) {
				s.atRisk = true
				w.story(s, "the store went back to its last timestamp %s (live %v, IDs up to %s)", simAtMs(rec), live, simAtMs(s.maxMs))
			}
		}
	}
}

// simExcluded reports whether a session other than x that has stopped
// made IDs of worker ID id in a millisecond from on (the first that x's
// generator may use) whose last timestamp the store lost, and some clock
// may still read that millisecond: the case the design cannot help (see
// the top of the file).
func (w *simWorld) simExcluded(x *simSession, id int, from int64) bool {
	lo := max(from, w.now.Add(-simSkew).UnixMilli())
	for _, s := range w.sessions[id] {
		if s != x && s.atRisk && s.maxMs >= lo && w.stopped(s) {
			return true
		}
	}
	return false
}

// prune forgets the sessions that can matter no more: over, and every
// clock past their IDs.
func (w *simWorld) prune() {
	past := w.now.Add(-simSkew).UnixMilli()
	for id := range simWorkers {
		w.sessions[id] = slices.DeleteFunc(w.sessions[id], func(s *simSession) bool {
			return s.maxMs < past && (!s.v.alive || s.v.sess != s)
		})
	}
}

// breakRun ends the run of milliseconds v's session used: the traffic
// between its vends no longer stands for every millisecond between.
func (w *simWorld) breakRun(v *simVendor) {
	if v.sess != nil {
		v.sess.cont = false
	}
}

// The vendors.

// simVendor is a vendor process: the Guard's part as the simulation runs
// it (a real Core, stepped with what the vendor sees of its peers, and
// Guard.Claim's steps), and a real workerid.Keeper, whose lease driver runs
// on a goroutine of its own in simulated time. The vendor is the Keeper's
// clock: its alarm parks the driver until a simulated time, and the world
// wakes it then (or when rung), one vendor at a time, and waits until it
// parks again, so that one goroutine at a time touches the world and a seed
// replays the same run. Its time is the server's plus off.
type simVendor struct {
	w     *simWorld
	name  string
	off   time.Duration
	alive bool
	dead  bool      // crashed: its requests reach nothing, its lines are not logged
	back  time.Time // when it starts again once down
	// cutUntil: none of its requests reach the store before (the others'
	// do, and it still answers its peers).
	cutUntil time.Time
	fence    uint64 // its reconnects (workerid.Config.Fence)

	// The Guard's part.
	core  *Core
	self  *selfWorker // what it tells its peers, as its holder (held) keeps it
	shut  bool        // the snowflake gate
	check time.Time   // the next periodic check

	// The Keeper's part.
	keeper *workerid.Keeper
	drv    *simDriver // its driver's
	sess   *simSession

	// The strict tag's lead (simlead_test.go), on a clock mono off the
	// server's, which does not step.
	mono    time.Duration
	leaders *kv.Leaders
	lead    *simLead
}

var _ snowflake.Clock = (*simVendor)(nil)

func (v *simVendor) Now() time.Time { return v.w.now.Add(v.off) }

// Sleep lets the simulation's time pass, for everyone: a generator waits
// so, within a request, for its next millisecond.
func (v *simVendor) Sleep(d time.Duration) { v.w.now = v.w.now.Add(max(d, time.Microsecond)) }

// simDriver is the clock a lease.Driver runs on in the simulation, and its
// turns: its alarm parks the driver's goroutine until a simulated time,
// and the world wakes it then (or once rung), and waits until it parks
// again or ends, so that one goroutine at a time touches the world.
type simDriver struct {
	w      *simWorld
	v      *simVendor       // whose requests the driver's are
	now    func() time.Time // its time
	parked chan time.Time   // the driver parks until then (zero: until rung)
	wake   chan struct{}
	done   <-chan struct{} // closed once the driver has returned
	due    time.Time       // when the parked driver wakes, by the server's time; zero: when rung
	rung   bool
}

var _ lease.Clock = (*simDriver)(nil)

func newSimDriver(v *simVendor, now func() time.Time) *simDriver {
	return &simDriver{w: v.w, v: v, now: now, parked: make(chan time.Time), wake: make(chan struct{})}
}

func (d *simDriver) Now() time.Time           { return d.now() }
func (d *simDriver) NewAlarm() lease.Alarm    { return d }
func (d *simDriver) ready(now time.Time) bool { return d.rung || !d.due.IsZero() && !now.Before(d.due) }

// Wait parks the driver until, by its clock, until: like a real timer it
// waits the duration to it, which a clock step meanwhile does not change.
func (d *simDriver) Wait(ctx context.Context, until time.Time) {
	var due time.Time
	if !until.IsZero() {
		due = d.w.now.Add(until.Sub(d.now()))
	}
	d.park(ctx, due)
}

// Ring has the world wake the driver at its next turn. Only the world
// rings (NextN, a strict request), while the driver is parked.
func (d *simDriver) Ring() { d.rung = true }

// park hands the turn back to the world until due (zero: until rung), or
// until ctx ends (the driver is stopped).
func (d *simDriver) park(ctx context.Context, due time.Time) {
	select {
	case d.parked <- due:
	case <-ctx.Done():
		return
	}
	select {
	case <-d.wake:
	case <-ctx.Done():
	}
}

// turn lets d run until it parks again or ends.
func (w *simWorld) turn(d *simDriver) {
	d.rung = false
	w.caller = d.v
	d.wake <- struct{}{}
	w.await(d)
}

// await waits until d parks, or ends: then it reports false.
func (w *simWorld) await(d *simDriver) bool {
	defer func() { w.caller = nil }()
	select {
	case d.due = <-d.parked:
		return true
	case <-d.done:
		d.due = time.Time{}
		return false
	}
}

// simLog puts a vendor's log lines, its Keeper's and its lease machine's,
// in the trace.
type simLog struct {
	v     *simVendor
	attrs []slog.Attr
}

func (h simLog) Enabled(context.Context, slog.Level) bool { return true }

func (h simLog) Handle(_ context.Context, r slog.Record) error {
	if h.v.dead {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s", a)
		return true
	})
	h.v.w.logf(h.v, "%s", b.String())
	return nil
}

func (h simLog) WithAttrs(as []slog.Attr) slog.Handler {
	return simLog{h.v, append(slices.Clip(h.attrs), as...)}
}

func (h simLog) WithGroup(string) slog.Handler { return h }

// act does what is due for v.
func (w *simWorld) act(v *simVendor) {
	if !v.alive {
		if !w.now.Before(v.back) {
			w.restart(v)
		}
		return
	}
	if !w.now.Before(v.check) {
		w.check(v)
	}
	if v.keeper != nil && w.failed == nil && v.drv.ready(w.now) {
		w.turn(v.drv)
		w.keeperStopped(v)
	}
	if v.keeper != nil && !v.shut && w.failed == nil && v.keeper.Status().Held && w.rng.IntN(10) < 6 {
		w.vend(v)
	}
	if w.failed == nil {
		w.actLead(v)
	}
}

// simIDs are the worker IDs the vendors claim.
var simIDs = workerid.Range{First: 0, Last: simWorkers - 1}

// restart starts a vendor afresh: Guard.Open checks at once, the Keeper
// claims at once.
func (w *simWorld) restart(v *simVendor) {
	*v = simVendor{w: w, name: v.name, off: v.off, mono: v.mono, cutUntil: v.cutUntil, fence: v.fence, alive: true,
		core: NewCore(simTerms, KindKV, v.name, w.rates.ttl), self: &selfWorker{}}
	v.drv = newSimDriver(v, v.Now)
	w.logf(v, "starts")
	w.check(v)
	w.caller = v // the driver claims at once, on its goroutine, until it parks
	k, err := workerid.Open(workerid.Config{
		Claim:     v.claim,
		IDs:       &simIDs,
		Generator: snowflake.Settings{Clock: v, SeqStart: func(uint32) uint32 { return 0 }},
		Clock:     v.drv,
		Fence:     func() uint64 { return v.fence },
		Logger:    slog.New(simLog{v: v}),
	})
	if err != nil {
		w.caller, w.failed = nil, fmt.Errorf("seed %d: %w", w.seed, err)
		return
	}
	v.drv.done = k.Done()
	w.await(v.drv)
	w.keeperStopped(v)
	v.keeper = k
}

// keeperStopped fails the run: a Keeper ends by itself only on a permanent
// error, which nothing here makes.
func (w *simWorld) keeperStopped(v *simVendor) {
	select {
	case <-v.drv.done:
		w.failed = fmt.Errorf("seed %d: the Keeper of %s stopped by itself", w.seed, v.name)
	default:
	}
}

// closeKeeper is Keeper.Close: the generator revoked, the worker ID
// released with its last millisecond; after a crash (dead) the release
// reaches nothing.
func (w *simWorld) closeKeeper(v *simVendor, dead bool) {
	if v.keeper == nil {
		return
	}
	v.dead, w.caller = dead, v
	v.keeper.Close(context.Background())
	v.keeper, w.caller = nil, nil
}

// down ends a vendor's process: what it held in the store is left as it
// was.
func (w *simWorld) down(v *simVendor) {
	w.closeKeeper(v, true)
	w.closeLead(v, true, errors.New("crashed"))
	v.alive, v.sess = false, nil
	v.self.set(PeerWorker{})
	v.back = w.now.Add(time.Duration(w.rng.IntN(8000)) * time.Millisecond)
}

// stop is a graceful stop: Keeper.Close, then the process ends.
func (w *simWorld) stop(v *simVendor) {
	w.stats.stops++
	w.logf(v, "STOPS")
	w.closeKeeper(v, false)
	w.closeLead(v, false, errors.New("vendor stopping"))
	w.down(v)
}

// shutdown ends every vendor's Keeper, the run over: their goroutines are
// joined, and nothing they do then is in the run.
func (w *simWorld) shutdown() {
	for _, v := range w.vendors {
		w.closeKeeper(v, true)
		w.closeLead(v, true, errors.New("the run is over"))
	}
}

// peers are the live vendors' answers to v.
func (w *simWorld) peers(v *simVendor) []Peer {
	var out []Peer
	for _, u := range w.vendors {
		if u != v && u.alive {
			out = append(out, Peer{V: peerVersion, Instance: u.name, Now: u.Now().UTC(), Worker: u.self.get()})
		}
	}
	return out
}

// The cluster the vendors agree on, as its Core reads it.
var (
	simTerms    = Terms{Epoch: snowflake.DefaultEpoch, Layout: "1+41+10+12", WorkerIDs: simIDs.String(), Segments: KindKV + ":sim"}
	simContract = simTerms.Contract(time.Second, "sim", simStart)
	simStore    = StoreReading{Info: segment.StoreInfo{ID: "sim"}}
)

// check is the Guard's periodic check, as far as the snowflake gate goes:
// its Core stepped with the live peers (shut while one holds this vendor's
// worker ID).
func (w *simWorld) check(v *simVendor) {
	v.check = w.now.Add(CheckEvery)
	was := v.shut
	self := v.self.get()
	v.core.Step(Observation{Now: v.Now(), Store: simStore, Contract: ContractReading{Rec: simContract, Rev: 1},
		Peers: w.peers(v), Self: Holding{ID: self.ID, Held: self.Held, Where: self.Where}})
	v.shut = v.core.Snowflake() != nil
	defer func() {
		if v.shut != was {
			w.breakRun(v)
		}
	}()
	if v.shut && !was {
		w.stats.shut++
		w.logf(v, "gate shut: %v", v.core.Snowflake())
	}
	switch {
	case !was || v.shut:
	case v.keeper != nil && w.simExcluded(v.sess, self.ID, v.keeper.Status().LastIDMs):
		v.shut, v.check = true, w.now.Add(10*time.Millisecond)
		w.stats.excluded++
		w.logf(v, "puts off opening its gate again: excluded")
	default:
		w.logf(v, "gate open again")
	}
}

// claim is Guard.Claim as the Keeper calls it (workerid.Config.Claim). A
// clock behind the last timestamps of the free worker IDs waits, as
// kv.Claim does, here 10 to 100 ms at a time while the other vendors go on.
func (v *simVendor) claim(ctx context.Context, _ workerid.ClaimRequest) (workerid.Holder, error) {
	w := v.w
	for {
		h, err := w.claimOnce(v)
		if !errors.Is(err, workerid.ErrClockBehind) {
			return h, err
		}
		wait := time.Duration(10+w.rng.IntN(90)) * time.Millisecond
		w.logf(v, "claim waits %v: %v", wait, err)
		v.drv.park(ctx, w.now.Add(wait))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// claimOnce is Guard.Claim: past the gate and the clock check, kv.Claim,
// then the check that no live peer holds the worker ID too (Guard.alone).
func (w *simWorld) claimOnce(v *simVendor) (workerid.Holder, error) {
	w.stats.claims++
	if err := v.core.Snowflake(); err != nil {
		return nil, w.claimFailed(v, err)
	}
	samples, peers := w.samples(v)
	ahead, err := CheckClocks(samples, simMaxSkew)
	if err != nil {
		return nil, w.claimFailed(v, err)
	}
	ttl := w.rates.ttl
	lc := ClaimSettings(kv.LeaseConfig{TTL: ttl, Holder: v.name, Clock: v},
		ClaimInputs{Samples: len(samples), Ahead: ahead, Peers: peers, ContractTTL: ttl})
	lc.MaxWait = time.Nanosecond // waits are the claim's parks: see claim
	l, err := w.scan(v, lc)
	if err != nil {
		return nil, w.claimFailed(v, err)
	}
	if c := VendingWith(w.peers(v), l.ID(), l.Where()); c != nil {
		err := l.Release(context.Background(), max(l.Last(), l.Deadline().UnixMilli()))
		w.logf(v, "gives worker ID %d up, %s holds it too (release: %v)", l.ID(), c.Peer.Instance, err)
		return nil, w.claimFailed(v, c)
	}
	v.self.set(PeerWorker{ID: l.ID(), Held: true, Deadline: l.Deadline(), Where: l.Where(), LeaseTTL: l.TTL()})
	w.nsess++
	v.sess = &simSession{id: w.nsess, v: v, wid: l.ID()}
	w.sessions[l.ID()] = append(w.sessions[l.ID()], v.sess)
	w.logf(v, "claimed worker ID %d (session %d) after %s, deadline %s", l.ID(), v.sess.id, simAtMs(l.Last()), simAt(l.Deadline()))
	w.story(v.sess, "claimed after %s, deadline %s", simAtMs(l.Last()), simAt(l.Deadline()))
	if w.rng.IntN(5) == 0 {
		w.stepClock(v) // just before the generator starts after the last timestamp, where it hurts
	}
	return &simHold{held: held{Lease: l, self: v.self}, v: v, s: v.sess}, nil
}

func (w *simWorld) claimFailed(v *simVendor, err error) error {
	w.stats.claimFails++
	w.logf(v, "claim failed: %v", err)
	return err
}

// samples are the clocks a claim checks against: the NATS server's and
// the live peers', as Guard.sampleClocks measures them.
func (w *simWorld) samples(v *simVendor) ([]ClockSample, []Peer) {
	var samples []ClockSample
	if offset, rtt, err := kv.ServerClock(context.Background(), kv.Plain(w.js), v); err == nil {
		samples = append(samples, ClockSample{"the NATS server", offset, rtt})
	}
	peers := w.peers(v)
	for _, p := range peers {
		now := v.Now()
		samples = append(samples, PeerSample(Reply{Peer: p, Sent: now, Arrived: now}))
	}
	return samples, peers
}

// scan is kv.Claim's scan, one worker ID at a time from a seeded start;
// it passes over the IDs the simulation excludes.
func (w *simWorld) scan(v *simVendor, lc kv.LeaseConfig) (*kv.Lease, error) {
	start := w.rng.IntN(simWorkers)
	err := error(kv.ErrNoFreeWorkerID)
	for i := range simWorkers {
		id := (start + i) % simWorkers
		if w.simExcluded(nil, id, w.record(id)+1) {
			w.stats.excluded++
			w.logf(v, "passes worker ID %d over: excluded", id)
			continue
		}
		one := workerid.One(id)
		c := lc
		c.IDs = &one
		l, cerr := kv.Claim(context.Background(), kv.Plain(w.js), c)
		switch {
		case cerr == nil:
			return l, nil
		case errors.Is(cerr, kv.ErrNoFreeWorkerID):
		case errors.Is(cerr, workerid.ErrClockBehind):
			err = cerr
		default:
			return nil, cerr
		}
	}
	return nil, err
}

// errSimExcluded is a renewal the simulation puts off (see the top of the
// file): it fails as one that may pass does, and the Keeper retries.
var errSimExcluded = errors.New("put off: excluded")

// simHold is the holder the simulation's claim hands the Keeper: the
// Guard's (held, which tells the peers' answers of each renewal and
// release), telling its session's story, and putting off the windows the
// simulation excludes.
type simHold struct {
	held
	v *simVendor
	s *simSession
}

func (h *simHold) Renew(ctx context.Context, last int64) (time.Time, error) {
	v, w, s, id := h.v, h.v.w, h.s, h.ID()
	first := s.window.IsZero()
	shut := !first && !v.Now().Before(s.window)
	// A window that opens (the first, or one shut since its deadline)
	// starts from last, the generator's last millisecond, or after the
	// previous holder's.
	if first && w.simExcluded(s, id, h.Last()+1) || shut && w.simExcluded(s, id, last) {
		w.stats.excluded++
		w.logf(v, "puts off a renewal that opens its window: excluded")
		return time.Time{}, errSimExcluded
	}
	deadline, err := h.held.Renew(ctx, last)
	switch {
	case err == nil:
		w.stats.renewals++
		s.atRisk = false // the record covers its IDs and window again
		switch {
		case first:
			w.logf(v, "vends with worker ID %d after %s until %s", id, simAtMs(h.Last()), simAt(deadline))
			w.story(s, "window until %s", simAt(deadline))
		case shut:
			w.breakRun(v)
			w.logf(v, "opens its window, shut since %s, again", simAt(s.window))
			w.story(s, "window shut since %s opened again until %s", simAt(s.window), simAt(deadline))
		default:
			w.logf(v, "renewed worker ID %d until %s", id, simAt(deadline))
		}
		s.window = deadline
	case errors.Is(err, lease.ErrLost):
		w.stats.lost++
		w.story(s, "lost (%v)", err)
		w.logf(v, "LOST worker ID %d: %v", id, err)
	default:
		w.stats.renewFails++
		w.logf(v, "renewal failed: %v", err)
	}
	return deadline, err
}

func (h *simHold) Release(ctx context.Context, last int64) error {
	v, w := h.v, h.v.w
	err := h.held.Release(ctx, last)
	if !v.dead {
		w.logf(v, "released worker ID %d at %s: %v", h.ID(), simAtMs(last), err)
		w.story(h.s, "released at %s: %v", simAtMs(last), err)
	}
	if v.sess == h.s {
		v.sess = nil
	}
	return err
}

// vend takes a few IDs, now and then thousands (across milliseconds).
func (w *simWorld) vend(v *simVendor) {
	n := 1 + w.rng.IntN(4)
	if w.rng.IntN(400) == 0 {
		n = 4096 + w.rng.IntN(4096)
	}
	ids, err := v.keeper.NextN(w.buf[:0], n)
	w.buf = ids[:0]
	if err != nil {
		w.stats.vendFails++
		w.breakRun(v)
		return
	}
	if wid := int(ids[0] >> snowflake.SequenceBits & snowflake.MaxWorkerID); v.sess == nil || v.sess.wid != wid {
		w.failed = fmt.Errorf("seed %d, step %d: %s vended with worker ID %d after its hold of it ended", w.seed, w.step, v.name, wid)
		return
	}
	w.count += int64(len(ids))
	for i := 0; i < len(ids) && w.failed == nil; {
		j := i + 1
		for j < len(ids) && ids[j] == ids[j-1]+1 && ids[j]>>snowflake.SequenceBits == ids[i]>>snowflake.SequenceBits {
			j++
		}
		w.note(v, ids[i], ids[j-1])
		i = j
	}
	if w.failed == nil {
		w.cover(v.sess, simMs(ids[0]), simMs(ids[len(ids)-1]))
	}
}

// simSpan is a run of milliseconds of one worker ID that a session used,
// or would have used under continuous traffic.
type simSpan struct {
	lo, hi int64
	s      *simSession
}

// cover adds the milliseconds lo..hi that session s just vended in to
// what it used, with those since its last vend when nothing broke the
// run (s.cont): a generator whose clock ran on with its window open would
// have vended each of them at sequence 0 had a request come. It fails the
// run when another session used one of them: both would vend its
// sequence 0. Spans of different sessions never overlap, and a session's
// come in ascending order, so each worker ID's are sorted.
func (w *simWorld) cover(s *simSession, lo, hi int64) {
	from := max(lo, s.maxMs+1)
	if s.cont && s.maxMs > 0 {
		from = s.maxMs + 1
	}
	s.cont = true
	if hi < from {
		return
	}
	spans := w.spans[s.wid]
	i, _ := slices.BinarySearchFunc(spans, from, func(sp simSpan, ms int64) int { return cmp.Compare(sp.hi, ms) })
	if i < len(spans) && spans[i].lo <= hi {
		w.failed = w.overlap(s, spans[i], max(from, spans[i].lo), from, hi)
		return
	}
	if last := i - 1; last >= 0 && spans[last].s == s && spans[last].hi == from-1 {
		spans[last].hi = hi
	} else {
		w.spans[s.wid] = slices.Insert(spans, i, simSpan{from, hi, s})
	}
	if s.firstMs == 0 {
		s.firstMs = lo
		w.story(s, "first vends at %s", simAtMs(lo))
	}
	s.maxMs = hi
}

// note records a run of IDs of one millisecond, failing the run on a
// repeat.
func (w *simWorld) note(v *simVendor, first, last int64) {
	key := first >> snowflake.SequenceBits
	lo, hi := first&snowflake.MaxSequence, last&snowflake.MaxSequence
	ms := simMs(first)
	w.event(&w.vends, simEvent{v: v.name, off: v.off, wid: v.sess.wid, ms: ms, lo: lo, hi: hi})
	for _, r := range w.vended[key] {
		if lo <= r.hi && r.lo <= hi {
			w.failed = w.repeat(v.sess, r.sess, key<<snowflake.SequenceBits|max(lo, r.lo))
			return
		}
	}
	w.vended[key] = append(w.vended[key], simRun{lo, hi, v.sess})
}

func simMs(id int64) int64 {
	return id>>(snowflake.SequenceBits+snowflake.WorkerBits) + snowflake.DefaultEpoch
}

// repeat says which ID was vended twice, by whom, and what led to it.
func (w *simWorld) repeat(now, before *simSession, id int64) error {
	return w.report(now, before, fmt.Sprintf("ID %d (worker ID %d, millisecond %s, sequence %d) was vended again by %s in session %d; %s vended it in session %d",
		id, now.wid, simAtMs(simMs(id)), id&snowflake.MaxSequence, now.v.name, now.id, before.v.name, before.id))
}

// overlap says which millisecond two sessions used, and what led to it.
func (w *simWorld) overlap(now *simSession, before simSpan, ms, lo, hi int64) error {
	return w.report(now, before.s, fmt.Sprintf("millisecond %s of worker ID %d was used by %s in session %d (from %s to %s) "+
		"and now by %s in session %d (from %s to %s): under continuous traffic both vend its sequence 0, ID %d",
		simAtMs(ms), now.wid, before.s.v.name, before.s.id, simAtMs(before.lo), simAtMs(before.hi), now.v.name, now.id, simAtMs(lo), simAtMs(hi),
		(ms-snowflake.DefaultEpoch)<<(snowflake.SequenceBits+snowflake.WorkerBits)|int64(now.wid)<<snowflake.SequenceBits))
}

// report is a failure: what repeated, the two sessions' stories and the
// last events.
func (w *simWorld) report(now, before *simSession, what string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, step %d: %s\n", w.seed, w.step, what)
	for _, s := range []*simSession{before, now} {
		fmt.Fprintf(&b, "session %d (%s, worker ID %d): %s\n", s.id, s.v.name, s.wid, strings.Join(s.story, "; "))
	}
	w.lastEvents(&b)
	return errors.New(b.String())
}

// lastEvents writes the last events and vends of the trace.
func (w *simWorld) lastEvents(b *strings.Builder) {
	events := append(w.trace.all(), w.vends.all()...)
	slices.SortFunc(events, func(a, b simEvent) int { return a.n - b.n })
	fmt.Fprintf(b, "the last %d events and %d vends (step, server time, vendor and its clock's offset):\n", len(w.trace.ring), len(w.vends.ring))
	for _, e := range events {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
}

// simEvent is a line of the trace, and its place in it: what happened,
// or a vend.
type simEvent struct {
	n, step    int
	at         time.Time
	v          string // the vendor, "" for the store
	off        time.Duration
	what       string // "" for a vend
	wid        int
	ms, lo, hi int64
}

func (e simEvent) String() string {
	who := "store"
	if e.v != "" {
		who = fmt.Sprintf("%s%+dms", e.v, e.off.Milliseconds())
	}
	what := e.what
	if what == "" {
		what = fmt.Sprintf("vends worker ID %d, %s, sequences %d-%d", e.wid, simAtMs(e.ms), e.lo, e.hi)
	}
	return fmt.Sprintf("%6d %10s %-9s %s", e.step, simAt(e.at), who, what)
}

// simRing keeps the last keep events.
type simRing struct {
	ring []simEvent
	keep int
}

func (r *simRing) add(e simEvent) {
	if len(r.ring) < r.keep {
		r.ring = append(r.ring, e)
		return
	}
	r.ring[e.n%r.keep] = e
}

func (r *simRing) all() []simEvent { return slices.Clone(r.ring) }

// logf records an event in the trace.
func (w *simWorld) logf(v *simVendor, format string, args ...any) {
	e := simEvent{what: fmt.Sprintf(format, args...)}
	if v != nil {
		e.v, e.off = v.name, v.off
	}
	w.event(&w.trace, e)
}

// event numbers e, adds it to r, and to the hash of the whole run.
func (w *simWorld) event(r *simRing, e simEvent) {
	e.n, e.step, e.at = w.events, w.step, w.now
	h := fnv.New64a()
	for _, x := range []int64{int64(e.step), e.at.UnixNano(), int64(e.off), int64(e.wid), e.ms, e.lo, e.hi} {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(x)))
	}
	h.Write([]byte(e.v + "\x00" + e.what))
	w.hash = w.hash*31 + h.Sum64()
	r.add(e)
	w.events++
}

// story adds to what a session's report says of it.
func (w *simWorld) story(s *simSession, format string, args ...any) {
	s.story = append(s.story, simAt(w.now)+" "+fmt.Sprintf(format, args...))
}

// simAt is a time as seconds since the start of the run.
func simAt(t time.Time) string {
	return strconv.FormatFloat(t.Sub(simStart).Seconds(), 'f', 3, 64) + "s"
}

// simAtMs is a Unix millisecond as simAt says it.
func simAtMs(ms int64) string { return simAt(time.UnixMilli(ms)) }
