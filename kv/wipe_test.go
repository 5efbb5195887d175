package kv

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/snowflake"
)

// Revisions of a bucket created by leaf-nats start at its creation's Unix
// microsecond, so no revision of a bucket created again can equal one an
// old holder remembers.
func TestBucketsStartTheirRevisionsAtTheirCreation(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	before := uint64(time.Now().UnixMicro())
	l := claim(t, js, LeaseConfig{TTL: time.Second, IDs: ids(1, 1)})
	if l.key.rev < before || l.clockRev < before {
		t.Fatalf("revisions %d (lease) and %d (timestamp), want from %d on", l.key.rev, l.clockRev, before)
	}
}

// The NATS store wiped under a holder: its renewal finds the buckets gone
// and loses the lease; a new claimant of the same worker ID in the buckets
// created again holds it for a TTL before vending, so every ID it makes is
// after every ID of the old holder, although no timestamp was recorded.
func TestWipedBucketsLoseLeasesAndNewClaimsWait(t *testing.T) {
	const ttl = 2 * time.Second
	var reports []string
	w := wipeAndReclaim(t, ttl, LeaseConfig{TTL: ttl, IDs: ids(3, 3), Report: func(r string, _ time.Time) { reports = append(reports, r) }})
	if w.waited < ttl {
		t.Fatalf("the claim in the new buckets returned after %v, before a TTL (%v)", w.waited, ttl)
	}
	if len(reports) == 0 || !strings.Contains(reports[0], "no recorded last timestamp") {
		t.Fatalf("the wait was not reported: %q", reports)
	}
}

// The buckets lost, and created again by a claimant configured with a
// shorter TTL than the old holder's lease: told the longest lease a vendor
// of the cluster may hold (the contract's, its peers'), it waits that long,
// not its own TTL.
func TestWipedBucketsWaitForTheLongestLease(t *testing.T) {
	const long, short = 3 * time.Second, time.Second
	w := wipeAndReclaim(t, long, LeaseConfig{TTL: short, IDs: ids(3, 3), LongestLease: long})
	if w.waited < long {
		t.Fatalf("the claim waited %v, less than the old holder's lease of %v", w.waited, long)
	}
}

// wiped is what wipeAndReclaim saw.
type wiped struct {
	waited time.Duration // the new claim's
}

// wipeAndReclaim has a holder with lease TTL ttl vend on worker ID 3, wipes
// both buckets under it, and claims worker ID 3 with cfg while the old
// holder keeps vending until it notices. It fails the test if an ID of the
// new holder is not after every ID of the old one.
func wipeAndReclaim(t *testing.T, ttl time.Duration, cfg LeaseConfig) wiped {
	t.Helper()
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, ttl)
	a := claim(t, js, LeaseConfig{TTL: ttl, IDs: ids(3, 3)})
	ga := leasedGen(t, a, nil)
	oldRev := a.key.rev

	ctx := context.Background()
	for _, b := range []string{WorkersBucket, ClocksBucket} {
		if err := js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// A keeps vending until it notices; B claims at once.
	var idsA []int64
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if ids, err := ga.NextN(nil, 10); err == nil {
				mu.Lock()
				idsA = append(idsA, ids...)
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	})
	started := time.Now()
	b, err := Claim(ctx, newJS(t, s), cfg)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(started)
	// B vends at once; A vends on until its deadline, which it cannot renew.
	gb := leasedGen(t, b, nil)
	idsB, err := gb.NextN(nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(a.Deadline()))
	if _, err := a.Renew(ctx, 0); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("old holder's renewal after the wipe: %v, want lease.ErrLost", err)
	}
	ga.Revoke()
	close(stop)
	wg.Wait()
	if b.key.rev <= oldRev {
		t.Fatalf("new lease revision %d not above the old holder's %d", b.key.rev, oldRev)
	}
	if len(idsA) == 0 {
		t.Fatal("the old holder made no ID")
	}
	if first, last := idsB[0], idsA[len(idsA)-1]; first <= last {
		t.Fatalf("new holder's first ID %d is not after the old holder's last %d", first, last)
	}
	return wiped{waited: waited}
}

// A claim in a bucket older than a TTL does not wait for worker IDs it
// finds unrecorded: they were never used.
func TestUnrecordedIDsInAnOldBucketAreNotHeldBack(t *testing.T) {
	const ttl = time.Second
	s := natstest.Server(t)
	js := newJS(t, s)
	if _, _, _, err := workerBuckets(context.Background(), js, LeaseConfig{TTL: ttl, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 200*time.Millisecond) // the bucket comes of age
	var reports []string
	claim(t, js, LeaseConfig{TTL: ttl, IDs: ids(8, 8), Report: func(r string, _ time.Time) { reports = append(reports, r) }})
	if len(reports) > 0 {
		t.Fatalf("the claim in an old bucket waited: %q", reports)
	}
}

// A process killed without releasing its static worker ID leaves its lease
// behind; the next run waits for it to expire instead of failing.
func TestWaitHeldWaitsForAStaleLease(t *testing.T) {
	const ttl = 2 * time.Second
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, ttl)
	claim(t, js, LeaseConfig{TTL: ttl, IDs: ids(42, 42), Holder: "killed"}) // never renewed
	var reports []string
	started := time.Now()
	l, err := Claim(context.Background(), newJS(t, s), LeaseConfig{TTL: ttl, IDs: ids(42, 42), WaitHeld: true,
		Report: func(r string, _ time.Time) { reports = append(reports, r) }})
	if err != nil {
		t.Fatalf("claim after a stale lease: %v", err)
	}
	if l.ID() != 42 || time.Since(started) > 3*ttl {
		t.Fatalf("claimed %d after %v", l.ID(), time.Since(started))
	}
	if len(reports) != 1 || !strings.Contains(reports[0], `"killed"`) || !strings.Contains(reports[0], "waiting up to") {
		t.Fatalf("reports %q", reports)
	}
	// Without WaitHeld, the held ID fails at once.
	_, err = Claim(context.Background(), js, LeaseConfig{TTL: ttl, IDs: ids(42, 42)})
	if !errors.Is(err, ErrNoFreeWorkerID) {
		t.Fatalf("claim of a held ID: %v, want ErrNoFreeWorkerID", err)
	}
}

// A second process pinned to a worker ID that a live one holds fails as
// soon as the live one renews.
func TestWaitHeldFailsWhenTheHolderRenews(t *testing.T) {
	const ttl = 3 * time.Second
	s := natstest.Server(t)
	js := newJS(t, s)
	established(t, js, ttl)
	live := claim(t, js, LeaseConfig{TTL: ttl, IDs: ids(42, 42), Holder: "alive"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			live.Renew(ctx, 0)
			time.Sleep(300 * time.Millisecond)
		}
	}()
	started := time.Now()
	_, err := Claim(context.Background(), newJS(t, s), LeaseConfig{TTL: ttl, IDs: ids(42, 42), WaitHeld: true})
	if !errors.Is(err, ErrHeldByLive) || !strings.Contains(err.Error(), `"alive"`) {
		t.Fatalf("claim of a live holder's ID: %v, want ErrHeldByLive naming it", err)
	}
	if d := time.Since(started); d > ttl {
		t.Fatalf("took %v to see the holder is alive", d)
	}
}

func TestServerClock(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	if _, err := OpenContracts(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		clock snowflake.Clock
		want  time.Duration
	}{
		{nil, 0},
		{offsetClock{-5 * time.Second}, 5 * time.Second}, // this clock behind: the server is ahead
		{offsetClock{3 * time.Second}, -3 * time.Second},
	} {
		offset, rtt, err := ServerClock(context.Background(), js, tc.clock)
		if err != nil {
			t.Fatal(err)
		}
		if d := offset - tc.want; d < -rtt-50*time.Millisecond || d > rtt+50*time.Millisecond {
			t.Errorf("offset %v (rtt %v), want %v", offset, rtt, tc.want)
		}
	}
	if _, _, err := ServerClock(context.Background(), newJS(t, natstest.Server(t)), nil); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("server clock without the bucket: %v", err)
	}
}

// A store its embedded server's vendor seeded when it found no clocks
// bucket claims worker IDs with no record at once, past the seed, instead
// of holding them back a lease TTL as a young bucket otherwise does; a
// store that has the bucket is not seeded again, and a seed that cannot be
// read is an error naming it.
func TestSeededClocks(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	ctx := context.Background()
	cfg := LeaseConfig{TTL: 30 * time.Second, IDs: ids(5, 5)}
	bound := time.Now().Add(100 * time.Millisecond).UnixMilli()
	if seeded, err := SeedClocks(ctx, js, cfg, bound); err != nil || !seeded {
		t.Fatalf("SeedClocks on a new store: %v, %v", seeded, err)
	}
	if seeded, err := SeedClocks(ctx, js, cfg, bound+1e6); err != nil || seeded {
		t.Fatalf("SeedClocks again: %v, %v; want the bucket left alone", seeded, err)
	}
	var reports []string
	cfg.Report = func(r string, _ time.Time) { reports = append(reports, r) }
	l := claim(t, js, cfg)
	if len(reports) > 0 {
		t.Fatalf("the claim on a seeded store waited: %q", reports)
	}
	if l.Last() != bound {
		t.Fatalf("the claim's previous last timestamp is %d, want the seed %d", l.Last(), bound)
	}
	g := leasedGen(t, l, nil)
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	if p, err := snowflake.Decode(id, snowflake.DefaultEpoch); err != nil || p.UnixMilli <= bound {
		t.Fatalf("first ID %+v (%v), not past the seed %d", p, err, bound)
	}

	clocks, err := js.KeyValue(ctx, ClocksBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clocks.Put(ctx, seedKey, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = readClock(ctx, clocks, 6, snowflake.DefaultEpoch)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "nats kv del "+ClocksBucket+" seed") {
		t.Fatalf("a corrupt seed: %v", err)
	}
}
