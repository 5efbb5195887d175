package kv

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

func newJS(t *testing.T, s *server.Server) JS {
	t.Helper()
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	return Plain(js)
}

// established creates the worker-ID buckets with ttl, as the first vendor
// of a cluster would, and records a last timestamp (0) for every worker ID,
// as a cluster past its first TTL has: claims do not wait out the
// quarantine of a new bucket. The tests of that quarantine do without it.
func established(t *testing.T, js JS, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	_, clocks, _, err := workerBuckets(ctx, js, LeaseConfig{TTL: ttl, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	for id := range snowflake.MaxWorkerID + 1 {
		if _, err := clocks.Put(ctx, leaseKey(id), []byte("0")); err != nil {
			t.Fatal(err)
		}
	}
}

// offsetClock is the system clock shifted, to play a host whose clock is off.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time        { return time.Now().Add(c.d) }
func (c offsetClock) Sleep(d time.Duration) { time.Sleep(d) }

func claim(t *testing.T, js JS, c LeaseConfig) *Lease {
	t.Helper()
	l, err := Claim(context.Background(), js, c)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return l
}

func leasedGen(t *testing.T, l *Lease, clock snowflake.Clock) *snowflake.Generator {
	t.Helper()
	g, err := snowflake.New(snowflake.Settings{WorkerID: l.ID(), Last: l.Last(), Leased: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	g.Window(l.Deadline())
	return g
}

func TestConcurrentClaimsNeverShare(t *testing.T) {
	s := natstest.Server(t)
	established(t, newJS(t, s), time.Minute)
	const n = 50
	ids := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		js := newJS(t, s) // each claimant its own connection
		wg.Go(func() {
			l, err := Claim(context.Background(), js, LeaseConfig{TTL: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = l.ID()
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("worker ID %d claimed twice: %v", id, ids)
		}
		seen[id] = true
	}
}

func TestAllIDsTakenIsAClearError(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	cfg := LeaseConfig{TTL: time.Minute, IDs: ids(1000, 1023)}
	seen := map[int]bool{}
	for range 24 {
		l := claim(t, js, cfg)
		if seen[l.ID()] || l.ID() < 1000 {
			t.Fatalf("claimed %d: outside the range or twice", l.ID())
		}
		seen[l.ID()] = true
	}
	_, err := Claim(context.Background(), js, cfg)
	if !errors.Is(err, ErrNoFreeWorkerID) {
		t.Fatalf("25th claim of 24 IDs: %v, want ErrNoFreeWorkerID", err)
	}
	t.Logf("error a user sees: %v", err)
}

// Worker ID 0 alone is one ID, not "all": a second claim of it fails.
func TestClaimOfWorkerIDZero(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	cfg := LeaseConfig{TTL: time.Minute, IDs: ids(0, 0)}
	if l := claim(t, js, cfg); l.ID() != 0 {
		t.Fatalf("claimed worker ID %d of 0-0", l.ID())
	}
	if l, err := Claim(context.Background(), js, cfg); !errors.Is(err, ErrNoFreeWorkerID) {
		t.Fatalf("second claim of 0-0: %v, %v; want ErrNoFreeWorkerID", l, err)
	}
}

func TestReleaseFreesIDAtOnce(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	cfg := LeaseConfig{TTL: time.Minute, IDs: ids(7, 7)}
	l := claim(t, js, cfg)
	g := leasedGen(t, l, nil)
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background(), g.Revoke()); err != nil {
		t.Fatal(err)
	}
	l2 := claim(t, js, cfg)
	if l2.ID() != 7 || l2.Last() < id>>22+snowflake.DefaultEpoch {
		t.Fatalf("reclaimed %d with last %d; want 7 with last >= the released ID's time", l2.ID(), l2.Last())
	}
}

// A release that cancels a renewal in flight may find the renewal's writes
// landed though their acks were lost: its keys are at newer revisions, of
// its own. The release still succeeds and frees the ID, and a recorded
// timestamp it finds above its last millisecond stands.
func TestReleaseAfterARenewalWhoseAckWasLost(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	cfg := LeaseConfig{TTL: time.Minute, IDs: ids(9, 9)}
	l := claim(t, js, cfg)
	ctx := context.Background()
	last := time.Now().UnixMilli()
	// The renewal's writes, as the server applied them.
	if _, err := l.key.kv.Put(ctx, leaseKey(9), l.key.value); err != nil {
		t.Fatal(err)
	}
	renewed := last + 300 // a deadline just ahead, as a renewal records
	if _, err := l.clocks.Put(ctx, leaseKey(9), clockValue(renewed, l.epoch)); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, last); err != nil {
		t.Fatalf("release after a renewal whose ack was lost: %v", err)
	}
	if _, err := l.key.kv.Get(ctx, leaseKey(9)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("lease key after the release: %v, want deleted", err)
	}
	e, err := l.clocks.Get(ctx, leaseKey(9))
	if err != nil {
		t.Fatal(err)
	}
	if ms, _, _ := ParseClock(e.Value()); ms != renewed {
		t.Fatalf("recorded %d, want the renewal's %d kept", ms, renewed)
	}

	// Someone else's writes are not taken for ours.
	l2 := claim(t, js, cfg)
	if _, err := l2.key.kv.Put(ctx, leaseKey(9), []byte(`{"holder":"another"}`)); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx, time.Now().UnixMilli()); err == nil {
		t.Fatal("released a lease key someone else wrote")
	}
}

// A worker ID used with one epoch and claimed next with a later one: the
// later holder's IDs have fewer milliseconds since their epoch, so it waits
// until its first ID is above every ID the first holder made, without any
// contract to tell it about the other epoch.
func TestLaterEpochWaitsPastEarlierIDs(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	const later = 1500 // ms
	a := claim(t, js, LeaseConfig{TTL: time.Minute, IDs: ids(6, 6)})
	ga := leasedGen(t, a, nil)
	var lastA int64
	for range 1000 {
		id, err := ga.Next()
		if err != nil {
			t.Fatal(err)
		}
		lastA = id
	}
	if err := a.Release(context.Background(), ga.Revoke()); err != nil {
		t.Fatal(err)
	}
	b := claim(t, js, LeaseConfig{TTL: time.Minute, IDs: ids(6, 6), Epoch: snowflake.DefaultEpoch + later})
	gb, err := snowflake.New(snowflake.Settings{WorkerID: 6, Last: b.Last(), Leased: true, Epoch: snowflake.DefaultEpoch + later})
	if err != nil {
		t.Fatal(err)
	}
	gb.Window(b.Deadline())
	first, err := gb.Next()
	if err != nil {
		t.Fatal(err)
	}
	if first <= lastA {
		t.Fatalf("the holder with an epoch %d ms later made %d, not above the earlier holder's last ID %d", later, first, lastA)
	}
	// And back: an earlier epoch needs no longer wait than the last
	// timestamp itself.
	lastB := gb.Revoke()
	if err := b.Release(context.Background(), lastB); err != nil {
		t.Fatal(err)
	}
	c := claim(t, js, LeaseConfig{TTL: time.Minute, IDs: ids(6, 6)})
	if c.Last() != lastB {
		t.Fatalf("an earlier epoch waits for %d, not the later holder's last %d", c.Last(), lastB)
	}
}

// A holder that stops renewing loses its ID to the TTL; the next holder, even
// with a clock two seconds behind, starts after every ID the first one made.
func TestExpiredLeaseIsReusedWithoutOverlap(t *testing.T) {
	s := natstest.Server(t)
	cfg := LeaseConfig{TTL: 2 * time.Second, IDs: ids(3, 3)}
	established(t, newJS(t, s), cfg.TTL)
	a := claim(t, newJS(t, s), cfg)
	ga := leasedGen(t, a, nil)
	var idsA []int64
	for {
		ids, err := ga.NextN(nil, 100)
		if errors.Is(err, snowflake.ErrNoLease) {
			break // a stopped renewing: its window closed
		}
		if err != nil {
			t.Fatal(err)
		}
		idsA = append(idsA, ids...)
		time.Sleep(5 * time.Millisecond)
	}
	behind := offsetClock{-2 * time.Second}
	cfg.Clock, cfg.MaxWait = behind, 10*time.Second
	jsb := newJS(t, s)
	var b *Lease
	testtool.Eventually(t, 30*time.Second, "the old lease to expire", func() bool {
		var err error
		b, err = Claim(context.Background(), jsb, cfg)
		if err != nil && !errors.Is(err, ErrNoFreeWorkerID) {
			t.Fatal(err)
		}
		return err == nil
	})
	gb := leasedGen(t, b, behind)
	idsB, err := gb.NextN(nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if first, last := idsB[0], idsA[len(idsA)-1]; first <= last {
		t.Fatalf("new holder's first ID %d is not after the old holder's last %d", first, last)
	}
	// The old holder, waking up, cannot renew.
	if _, err := a.Renew(context.Background(), 0); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("old holder's renewal: %v, want lease.ErrLost", err)
	}
}

func TestUnreachableKVStopsVendingWithinTTL(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	const ttl = 2 * time.Second
	established(t, js, ttl)
	k, err := workerid.Open(workerid.Config{Claim: func(ctx context.Context, r workerid.ClaimRequest) (workerid.Holder, error) {
		return Claim(ctx, js, LeaseConfig{TTL: ttl, IDs: &r.IDs})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close(context.Background())
	select {
	case <-k.Claimed():
	case <-time.After(10 * time.Second):
		t.Fatalf("no worker ID claimed: %v", k.Status().LastError)
	}

	s.Shutdown()
	s.WaitForShutdown()
	// A renewal acknowledged just before the shutdown may still be
	// recorded: its deadline is at most a TTL after now.
	lastDeadline := time.Now().Add(ttl)
	stop := time.Now().Add(ttl + 5*time.Second)
	for {
		if _, err := k.NextN(nil, 1); errors.Is(err, snowflake.ErrNoLease) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(stop) {
			t.Fatalf("still vending %v after the server went away (lease TTL %v)", time.Since(stop.Add(-ttl-5*time.Second)), ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := k.Status().Deadline; d.After(lastDeadline) {
		t.Fatalf("deadline moved to %v while the server was down, past %v", d, lastDeadline)
	}
}

// A holder whose clock stepped back renews with deadlines behind the IDs it
// already made; the recorded timestamp must stay ahead of them, or the next
// holder (after a crash) would repeat them.
func TestRenewNeverRecordsLessThanUsed(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	cfg := LeaseConfig{TTL: time.Minute, IDs: ids(9, 9)}
	l := claim(t, js, cfg)
	used := time.Now().Add(2 * time.Minute).UnixMilli() // IDs made before the clock stepped back
	if _, err := l.Renew(context.Background(), used); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Renew(context.Background(), 0); err != nil { // a later renewal knows less
		t.Fatal(err)
	}
	clocks, err := js.KeyValue(context.Background(), ClocksBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := clocks.Get(context.Background(), leaseKey(9))
	if err != nil {
		t.Fatal(err)
	}
	if got, epoch, err := ParseClock(e.Value()); err != nil || got != used || epoch != snowflake.DefaultEpoch {
		t.Fatalf("recorded %q, want %d (the last millisecond used) and the epoch", e.Value(), used)
	}
}

func TestClocksBucketWithLimitsIsRefused(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	if _, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: ClocksBucket, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	_, err := Claim(context.Background(), js, LeaseConfig{TTL: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "TTL or size limit") {
		t.Fatalf("Claim with a TTL on %s: %v, want a refusal", ClocksBucket, err)
	}
}

// A worker ID whose last timestamp is far ahead of this clock (its holder's
// clock ran fast) is passed over for another free one.
func TestClaimSkipsIDsAheadOfTheClock(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	l := claim(t, js, LeaseConfig{TTL: time.Minute, IDs: ids(11, 12)})
	ahead := time.Now().Add(time.Hour).UnixMilli()
	if _, err := l.Renew(context.Background(), ahead); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background(), ahead); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		l2 := claim(t, js, LeaseConfig{TTL: time.Minute, IDs: ids(11, 12)})
		if l2.ID() == l.ID() {
			t.Fatalf("claimed worker ID %d, whose last timestamp is an hour ahead", l2.ID())
		}
		if err := l2.Release(context.Background(), l2.Last()); err != nil {
			t.Fatal(err)
		}
	}
	// With only that ID left, the claim is refused with the reason.
	_, err := Claim(context.Background(), js, LeaseConfig{TTL: time.Minute, IDs: ids(l.ID(), l.ID())})
	if !errors.Is(err, workerid.ErrClockBehind) {
		t.Fatalf("claim of the ID an hour ahead: %v, want ErrClockBehind", err)
	}
}

// Claim waits for a timestamp a little ahead without holding the lease, so
// a wait longer than the TTL does not lose it.
func TestClaimWaitLongerThanTTL(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Second)
	cfg := LeaseConfig{TTL: time.Second, IDs: ids(4, 4), MaxWait: 5 * time.Second}
	l := claim(t, js, cfg)
	ahead := time.Now().Add(2500 * time.Millisecond).UnixMilli()
	if _, err := l.Renew(context.Background(), ahead); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background(), ahead); err != nil {
		t.Fatal(err)
	}
	l2 := claim(t, js, cfg)
	g := leasedGen(t, l2, nil)
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ms := id>>22 + snowflake.DefaultEpoch; ms <= ahead {
		t.Fatalf("first ID at %d, not after the recorded %d", ms, ahead)
	}
}

// A claim that waits for a worker ID's last timestamp, which another vendor
// claims meanwhile (and records a deadline ahead again), finds no free ID:
// a wait that ends, not a clock behind, which stops a vendor.
func TestClaimWhileWaitingTakenByAnother(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	l := claim(t, js, LeaseConfig{TTL: time.Minute, IDs: ids(9, 9)})
	ahead := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	if err := l.Release(context.Background(), ahead); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Claim(context.Background(), js, LeaseConfig{TTL: time.Minute, IDs: ids(9, 9), MaxWait: 5 * time.Second})
		done <- err
	}()
	// Meanwhile another vendor, whose clock is ahead, takes the ID and
	// records a deadline ahead of the waiting claim's clock.
	time.Sleep(200 * time.Millisecond)
	leases, _ := js.KeyValue(context.Background(), WorkersBucket)
	clocks, _ := js.KeyValue(context.Background(), ClocksBucket)
	if _, err := leases.Create(context.Background(), leaseKey(9), []byte(`{"holder":"other"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := clocks.Put(context.Background(), leaseKey(9), clockValue(time.Now().Add(time.Hour).UnixMilli(), snowflake.DefaultEpoch)); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, ErrNoFreeWorkerID) || errors.Is(err, workerid.ErrClockBehind) {
		t.Fatalf("a claim whose ID was taken while it waited: %v, want ErrNoFreeWorkerID", err)
	}
}

// A renewal whose timestamp write raced (its ack lost, or another writer)
// gives the lease up instead of retrying forever.
func TestRenewAfterClockRaceIsLost(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, time.Minute)
	l := claim(t, js, LeaseConfig{TTL: time.Minute, IDs: ids(5, 5)})
	clocks, _ := js.KeyValue(context.Background(), ClocksBucket)
	if _, err := clocks.Put(context.Background(), leaseKey(5), []byte(strconv.FormatInt(time.Now().UnixMilli(), 10))); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Renew(context.Background(), 0); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Renew after the timestamp changed under it: %v, want lease.ErrLost", err)
	}
}

// ids is the worker IDs first..last.
func ids(first, last int) *workerid.Range { return &workerid.Range{First: first, Last: last} }

// A renewal checks the lease key holds this claim's value before it
// writes: a renewal of its own whose ack was lost is taken up; the key
// gone, or another claim's value there (a store that went back issues its
// revisions again), loses the lease, saying why.
func TestRenewalChecksItsOwnValue(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, 2*time.Second)
	ctx := context.Background()
	one := workerid.Range{First: 5, Last: 5}
	l := claim(t, js, LeaseConfig{TTL: 2 * time.Second, IDs: &one})
	leases, _ := js.KeyValue(ctx, WorkersBucket)
	clocks, _ := js.KeyValue(ctx, ClocksBucket)
	// Both of the renewal's writes land, their acks lost: the holder's
	// revisions are behind its own writes.
	if _, err := leases.Update(ctx, leaseKey(5), l.key.value, l.key.rev); err != nil {
		t.Fatal(err)
	}
	next := time.Now().Add(time.Second).UnixMilli()
	if _, err := clocks.Update(ctx, leaseKey(5), clockValue(next, l.epoch), l.clockRev); err != nil {
		t.Fatal(err)
	}
	l.unacked = append(l.unacked, next) // as writeClock notes a write whose ack it lost
	if _, err := l.Renew(ctx, next); err != nil {
		t.Fatalf("a renewal after its own writes whose acks were lost: %v", err)
	}

	// Another claim's value at the key: lost, naming the holder.
	e, _ := leases.Get(ctx, leaseKey(5))
	other := []byte(`{"holder":"twin/9","claimed":"2026-11-23T12:00:00Z","token":"x"}`)
	if _, err := leases.Update(ctx, leaseKey(5), other, e.Revision()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Renew(ctx, 0); !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "twin/9's now") {
		t.Fatalf("renewal over another claim: %v", err)
	}

	l2 := claim(t, js, LeaseConfig{TTL: 2 * time.Second, IDs: &workerid.Range{First: 6, Last: 6}})
	leases.Purge(ctx, leaseKey(6))
	if _, err := l2.Renew(ctx, 0); !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "went back to before the claim") {
		t.Fatalf("renewal of a lease whose key is gone: %v", err)
	}
}
