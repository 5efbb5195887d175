package strict_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/strict"
	"github.com/leaf-nats/leaf/vending"
)

// memStore is a segment store in memory with one strict tag, "ledger".
type memStore struct {
	mu     sync.Mutex
	maxID  int64
	strict bool
}

func (m *memStore) Alloc(_ context.Context, tag string, step int64, floor segment.Floor) (segment.Row, error) {
	if tag != "ledger" {
		return segment.Row{}, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if step == 0 {
		step = 100
	}
	if floor != nil {
		base, _, err := floor(m.maxID, step)
		if err != nil {
			return segment.Row{}, err
		}
		m.maxID = base
	}
	m.maxID += step
	return segment.Row{Tag: tag, MaxID: m.maxID, Step: 100, Strict: m.strict}, nil
}

func (m *memStore) Tags(context.Context) ([]segment.Row, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []segment.Row{{Tag: "ledger", Strict: m.strict}}, nil
}

func (m *memStore) Tag(_ context.Context, tag string) (segment.Row, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if tag != "ledger" {
		return segment.Row{}, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	return segment.Row{Tag: "ledger", Strict: m.strict}, nil
}

// leaseKV is a lease bucket in memory: one key per tag, expiring a TTL
// after its last write, as the KV bucket's MaxAge does.
type leaseKV struct {
	mu     sync.Mutex
	ttl    time.Duration
	holder map[string]string
	expiry map[string]time.Time
}

func newLeaseKV(ttl time.Duration) *leaseKV {
	return &leaseKV{ttl: ttl, holder: map[string]string{}, expiry: map[string]time.Time{}}
}

// fakeLease is one vendor's lease of a tag; failing makes its renewals
// fail as a frozen or cut-off vendor's do.
type fakeLease struct {
	kv      *leaseKV
	tag, me string
	failing *atomic.Bool
}

func (l *fakeLease) Renew(context.Context) (time.Time, error) {
	if l.failing.Load() {
		return time.Time{}, errors.New("no response from the stream")
	}
	sent := time.Now()
	l.kv.mu.Lock()
	defer l.kv.mu.Unlock()
	if l.kv.holder[l.tag] != l.me || !time.Now().Before(l.kv.expiry[l.tag]) {
		return time.Time{}, fmt.Errorf("%w: expired", lease.ErrLost)
	}
	l.kv.expiry[l.tag] = time.Now().Add(l.kv.ttl)
	return sent.Add(l.kv.ttl - l.kv.ttl/50), nil
}

func (l *fakeLease) Release(context.Context) error {
	l.kv.mu.Lock()
	defer l.kv.mu.Unlock()
	if l.kv.holder[l.tag] == l.me {
		delete(l.kv.holder, l.tag)
	}
	return nil
}

// cluster is vendors sharing a store, a lease bucket and a "NATS" on which
// forwarded requests reach the listening leader.
type cluster struct {
	t     *testing.T
	store *memStore
	kv    *leaseKV

	mu        sync.Mutex
	listening map[string]*vendor // by tag
	vendors   []*vendor
}

type vendor struct {
	name     string
	c        *cluster
	ls       *strict.Leaders
	failing  atomic.Bool // its lease renewals fail
	fence    counter
	handoffs atomic.Int64 // requests handed to the leader
}

func newCluster(t *testing.T, n int, ttl time.Duration) *cluster {
	c := &cluster{t: t, store: &memStore{strict: true}, kv: newLeaseKV(ttl), listening: map[string]*vendor{}}
	for i := range n {
		c.vendors = append(c.vendors, c.newVendor(fmt.Sprintf("v%d", i)))
	}
	return c
}

func (c *cluster) newVendor(name string) *vendor {
	v := &vendor{name: name, c: c}
	alloc, err := segment.Open(context.Background(), segment.Options{Store: c.store, Wait: time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { alloc.Close(context.Background()) })
	v.ls, err = strict.Open(strict.Config{Source: alloc, Leases: v, Transport: v, Fence: &v.fence})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { v.ls.Close(context.Background()) })
	return v
}

// Take is the vendor's lease bucket (strict.Leases).
func (v *vendor) Take(_ context.Context, tag string) (strict.Lease, time.Time, error) {
	c := v.c
	c.kv.mu.Lock()
	defer c.kv.mu.Unlock()
	if h := c.kv.holder[tag]; h != "" && time.Now().Before(c.kv.expiry[tag]) {
		return nil, time.Time{}, fmt.Errorf("%w: %s", strict.ErrLedElsewhere, h)
	}
	c.kv.holder[tag], c.kv.expiry[tag] = v.name, time.Now().Add(c.kv.ttl)
	return &fakeLease{kv: c.kv, tag: tag, me: v.name, failing: &v.failing}, time.Time{}, nil
}

// Forward, Listen, Follow and HandOff are the vendor's "NATS"
// (strict.Transport): a forward reaches the listening leader's Serve.
func (v *vendor) Forward(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	c := v.c
	c.mu.Lock()
	leader := c.listening[tag]
	c.mu.Unlock()
	if leader == nil || leader == v {
		return dst, false, strict.ErrNoLeader
	}
	rs, err := leader.ls.Serve(ctx, tag, dst, n)
	if errors.Is(err, strict.ErrNotLeader) {
		err = fmt.Errorf("%w: %w", segment.ErrUnavailable, err)
	}
	return rs, true, err
}

func (v *vendor) Listen(tag string, _ *strict.Leaders) (func(), error) {
	c := v.c
	c.mu.Lock()
	c.listening[tag] = v
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.listening[tag] == v {
			delete(c.listening, tag)
		}
		c.mu.Unlock()
	}, nil
}

func (v *vendor) Follow(*strict.Leaders) error         { return nil }
func (v *vendor) HandOff(string, vending.Handing) bool { return false }

// counter is a strict.Fence that tests move.
type counter struct{ atomic.Uint64 }

func (c *counter) Fence() uint64 { return c.Load() }

// leaseFunc and forwardFunc make a function a strict.Leases, a
// strict.Transport that forwards only.
type leaseFunc func(ctx context.Context, tag string) (strict.Lease, time.Time, error)

func (f leaseFunc) Take(ctx context.Context, tag string) (strict.Lease, time.Time, error) {
	return f(ctx, tag)
}

type forwardFunc func(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error)

func (f forwardFunc) Forward(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	return f(ctx, tag, dst, n)
}
func (forwardFunc) Listen(string, *strict.Leaders) (func(), error) { return func() {}, nil }
func (forwardFunc) Follow(*strict.Leaders) error                   { return nil }
func (forwardFunc) HandOff(string, vending.Handing) bool           { return false }

// take asks v for n IDs of ledger the way the vendor's handler does,
// handing the request to the leader when Handoff says so (which then
// answers as vending.Forwarder does: TryTake, else Serve).
func (v *vendor) take(ctx context.Context, n int64) ([]ids.Range, error) {
	if rs, ok, err := v.ls.TryTake("ledger", nil, n); ok || err != nil {
		return rs, err
	}
	if !v.ls.Handoff("ledger") {
		return v.ls.Take(ctx, "ledger", nil, n)
	}
	v.handoffs.Add(1)
	v.c.mu.Lock()
	leader := v.c.listening["ledger"]
	v.c.mu.Unlock()
	if leader == nil {
		return nil, errors.New("no responders")
	}
	if rs, ok, err := leader.ls.TryTake("ledger", nil, n); ok || err != nil {
		return rs, err
	}
	return leader.ls.Serve(ctx, "ledger", nil, n)
}

func mustTake(t *testing.T, v *vendor, n int64) (first, last int64) {
	t.Helper()
	rs, err := v.take(t.Context(), n)
	if err != nil {
		t.Fatalf("%s: take %d: %v", v.name, n, err)
	}
	return rs[0].First, rs[len(rs)-1].Last()
}

// A leader that cannot renew stops serving at its deadline, before its key
// expires; the next leader leads only after that, and its first ID is above
// every ID the first one served.
func TestHandOverAfterAFrozenLeader(t *testing.T) {
	ttl := time.Second // long enough that a stalled goroutine on a loaded machine keeps the lead
	c := newCluster(t, 2, ttl)
	a, b := c.vendors[0], c.vendors[1]

	_, lastA := mustTake(t, a, 5) // a leads
	_, viaB := mustTake(t, b, 5)  // b forwards to a
	if viaB <= lastA {
		t.Fatalf("forwarded IDs end at %d, not above %d", viaB, lastA)
	}
	if st := a.ls.Status(); len(st) != 1 || !st[0].Serving {
		t.Fatalf("a's status %+v, want leading ledger", st)
	}

	a.failing.Store(true) // frozen: its renewals fail from now on
	var served atomic.Int64
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		rs, err := a.take(t.Context(), 1)
		if err != nil {
			if !errors.Is(err, segment.ErrUnavailable) {
				t.Fatalf("a past its deadline: %v, want a 503", err)
			}
			break
		}
		served.Store(rs[0].First)
	}
	if _, err := a.take(t.Context(), 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("a serves past its deadline: %v", err)
	}

	// b forwards to a, which answers 503, until a's key expires and a
	// steps down; then b leads.
	var firstB int64
	for {
		rs, err := b.take(t.Context(), 1)
		if err == nil {
			firstB = rs[0].First
			break
		}
		if !errors.Is(err, segment.ErrUnavailable) {
			t.Fatal(err)
		}
		if time.Now().After(deadline.Add(5 * ttl)) {
			t.Fatalf("b never led: %v", err)
		}
		time.Sleep(ttl / 20)
	}
	if firstB <= max(viaB, served.Load()) {
		t.Fatalf("b's first ID %d is not above a's last %d", firstB, max(viaB, served.Load()))
	}
	if st := b.ls.Status(); len(st) != 1 || st[0].Tag != "ledger" {
		t.Fatalf("b's status %+v, want leading ledger", st)
	}
}

// A vendor that leads again serves from a segment allocated after it took
// the lease, not from what it buffered when it led before.
func TestLeadingAgainStartsAboveTheOtherLeader(t *testing.T) {
	ttl := time.Second
	c := newCluster(t, 2, ttl)
	a, b := c.vendors[0], c.vendors[1]
	_, lastA := mustTake(t, a, 1) // a leads, with most of a segment buffered
	a.failing.Store(true)
	testtool.Eventually(t, 10*time.Second, "a to step down", func() bool { return len(a.ls.Status()) == 0 })
	a.failing.Store(false)
	var lastB int64
	testtool.Eventually(t, 10*time.Second, "b to lead", func() bool {
		rs, err := b.take(t.Context(), 5)
		if err == nil {
			lastB = rs[len(rs)-1].Last()
		}
		return err == nil
	})
	if lastB <= lastA {
		t.Fatalf("b's IDs end at %d, not above a's %d", lastB, lastA)
	}
	b.ls.Close(context.Background()) // releases the lease: a leads again at once
	if first, _ := mustTake(t, a, 1); first <= lastB {
		t.Fatalf("a leading again starts at %d, not above b's %d: it served its old buffer", first, lastB)
	}
}

// After a reconnect a leader renews before it serves again.
func TestReconnectFencesTheLeader(t *testing.T) {
	c := newCluster(t, 1, time.Second)
	a := c.vendors[0]
	mustTake(t, a, 1)
	a.failing.Store(true)
	a.fence.Add(1) // reconnected, and cannot renew
	if _, err := a.take(t.Context(), 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("after a reconnect with no renewal: %v, want a 503", err)
	}
	a.failing.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := a.take(t.Context(), 1); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("never served again after renewing: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A tag made normal again ends its lead, which is released at once.
func TestNormalTagEndsTheLead(t *testing.T) {
	c := newCluster(t, 1, time.Minute)
	a := c.vendors[0]
	mustTake(t, a, 1)
	c.store.mu.Lock()
	c.store.strict = false
	c.store.mu.Unlock()
	for i := 0; ; i++ { // the buffer's segment is used up, and the next load says normal
		_, err := a.take(t.Context(), 50)
		if errors.Is(err, segment.ErrNotStrict) {
			break
		}
		if err != nil || i > 10 {
			t.Fatalf("take %d after the tag became normal: %v", i, err)
		}
	}
	if st := a.ls.Status(); len(st) != 0 {
		t.Fatalf("still leading: %+v", st)
	}
	c.kv.mu.Lock()
	defer c.kv.mu.Unlock()
	if h := c.kv.holder["ledger"]; h != "" {
		t.Fatalf("lease still held by %s", h)
	}
}

// call is one request as a client saw it.
type call struct {
	sent, received time.Time
	first, last    int64
	runs           []ids.Range
}

// checkOrder reports every pair of calls in which one was received before
// the other was sent but its IDs are not all below the other's, and every
// ID handed out twice.
func checkOrder(calls []call) (violations, dups int) {
	bySent := slices.Clone(calls)
	slices.SortFunc(bySent, func(a, b call) int { return a.sent.Compare(b.sent) })
	byRecv := slices.Clone(calls)
	slices.SortFunc(byRecv, func(a, b call) int { return a.received.Compare(b.received) })
	var done int
	var high int64 = -1 << 62
	for _, c := range bySent {
		for done < len(byRecv) && byRecv[done].received.Before(c.sent) {
			high = max(high, byRecv[done].last)
			done++
		}
		if c.first <= high {
			violations++
		}
	}
	var runs []ids.Range
	for _, c := range calls {
		if c.runs == nil {
			c.runs = []ids.Range{{First: c.first, Count: c.last - c.first + 1}}
		}
		runs = append(runs, c.runs...)
	}
	slices.SortFunc(runs, func(a, b ids.Range) int { return cmp.Compare(a.First, b.First) })
	for i := 1; i < len(runs); i++ {
		if runs[i].First <= runs[i-1].Last() {
			dups++
		}
	}
	return violations, dups
}

// Clients hammer three vendors while their leases fail, reconnects fence
// them and the tag's leader is closed and replaced: every reply is above
// every reply received before it was asked for, and no ID repeats.
func TestOrderAcrossVendorsUnderFaults(t *testing.T) {
	ttl := 200 * time.Millisecond
	c := newCluster(t, 3, ttl)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()

	var mu sync.Mutex
	var calls []call
	var errs atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for ctx.Err() == nil {
				c.mu.Lock()
				v := c.vendors[r.IntN(len(c.vendors))]
				c.mu.Unlock()
				sent := time.Now()
				rs, err := v.take(ctx, 1+r.Int64N(150))
				received := time.Now()
				if err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				calls = append(calls, call{sent, received, rs[0].First, rs[len(rs)-1].Last(), rs})
				mu.Unlock()
			}
		}()
	}
	// Faults: freeze a vendor's renewals past the TTL, fence another,
	// close one and start a new one in its place.
	faults := rand.New(rand.NewPCG(7, 7))
	for i := 0; ctx.Err() == nil; i++ {
		c.mu.Lock()
		v := c.vendors[faults.IntN(len(c.vendors))]
		c.mu.Unlock()
		switch i % 3 {
		case 0:
			v.failing.Store(true)
			time.Sleep(ttl + ttl/2)
			v.failing.Store(false)
		case 1:
			v.fence.Add(1)
			time.Sleep(ttl / 2)
		case 2:
			v.ls.Close(context.Background())
			nv := c.newVendor(fmt.Sprintf("v%d", 3+i))
			c.mu.Lock()
			c.vendors[slices.Index(c.vendors, v)] = nv
			c.mu.Unlock()
			time.Sleep(ttl / 2)
		}
	}
	wg.Wait()
	violations, dups := checkOrder(calls)
	var handoffs int64
	c.mu.Lock()
	for _, v := range c.vendors {
		handoffs += v.handoffs.Load()
	}
	c.mu.Unlock()
	t.Logf("%d replies, %d errors, %d handed to the leader by the last vendors, %d order violations, %d repeated IDs",
		len(calls), errs.Load(), handoffs, violations, dups)
	if len(calls) < 100 || handoffs == 0 {
		t.Fatalf("only %d replies, %d handed off", len(calls), handoffs)
	}
	if violations != 0 || dups != 0 {
		t.Fatalf("%d order violations and %d repeats", violations, dups)
	}
}

// The checker finds what it is there to find.
func TestCheckOrderFindsViolations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ok := []call{{at(0), at(2), 1, 5, nil}, {at(3), at(4), 6, 6, nil}, {at(1), at(5), 7, 9, nil}}
	if v, d := checkOrder(ok); v != 0 || d != 0 {
		t.Fatalf("in order: %d, %d", v, d)
	}
	// The second was sent after the first was received, but is below it.
	back := []call{{at(0), at(2), 10, 12, nil}, {at(3), at(4), 6, 6, nil}}
	if v, _ := checkOrder(back); v != 1 {
		t.Fatalf("backwards: %d violations, want 1", v)
	}
	// Overlapping calls may come in any order, but not repeat.
	rep := []call{{at(0), at(5), 10, 12, nil}, {at(1), at(4), 12, 13, nil}}
	if v, d := checkOrder(rep); v != 0 || d != 1 {
		t.Fatalf("repeat: %d, %d", v, d)
	}
}

// A vendor hands a tag's requests to the leader only while the leader's
// last answer to its forwards is fresh: not before one, not after a failed
// forward, not once HandoffFor passed, and never a tag it leads itself.
func TestHandoffFollowsTheLeadersAnswers(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	answer := errors.New("none yet") // of the next Forward
	takesHandoffs := true
	ledElsewhere := false
	ls, err := strict.Open(strict.Config{
		Source: &nopSource{},
		Leases: leaseFunc(func(context.Context, string) (strict.Lease, time.Time, error) {
			if ledElsewhere {
				return nil, time.Time{}, strict.ErrLedElsewhere
			}
			return nopLease{clock}, time.Time{}, nil
		}),
		Transport: forwardFunc(func(_ context.Context, _ string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
			if answer != nil {
				return dst, false, answer
			}
			return append(dst, ids.Range{First: 1, Count: n}), takesHandoffs, nil
		}),
		Clock:      lease.Timers(nowFunc(clock)),
		HandoffFor: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close(context.Background())
	step := func(what string, want bool) {
		t.Helper()
		if got := ls.Handoff("ledger"); got != want {
			t.Fatalf("%s: Handoff %v, want %v", what, got, want)
		}
	}
	ledElsewhere = true
	step("before any forward", false)
	answer = nil
	if _, err := ls.Take(t.Context(), "ledger", nil, 1); err != nil {
		t.Fatal(err)
	}
	step("the leader answered", true)
	now.Add(int64(99 * time.Millisecond))
	step("99ms later", true)
	now.Add(int64(time.Millisecond))
	step("100ms later", false)
	ls.Take(t.Context(), "ledger", nil, 1)
	step("answered again", true)
	takesHandoffs = false
	ls.Take(t.Context(), "ledger", nil, 1)
	step("a leader that takes no handoffs answered", false)
	takesHandoffs = true
	ls.Take(t.Context(), "ledger", nil, 1)
	step("answered again", true)
	ls.Forget("ledger")
	step("the leader said it stepped down", false)
	ls.Take(t.Context(), "ledger", nil, 1)
	answer = fmt.Errorf("%w: timeout", strict.ErrNoLeader)
	ls.Take(t.Context(), "ledger", nil, 1) // no leader, lead held elsewhere: a 503
	step("a forward failed", false)
	ledElsewhere = false
	if _, err := ls.Take(t.Context(), "ledger", nil, 1); err != nil { // takes the lead
		t.Fatal(err)
	}
	answer = nil
	step("leading it", false)
}

// nowFunc makes a function a clock's time.
type nowFunc func() time.Time

func (f nowFunc) Now() time.Time { return f() }

type nopSource struct{}

func (nopSource) Restart(string) {}

func (nopSource) Home(string) string { return "" }
func (nopSource) TryTakeStrict(_ string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	return append(dst, ids.Range{First: 1, Count: n}), true, nil
}
func (nopSource) TakeStrict(_ context.Context, _ string, dst []ids.Range, n int64) ([]ids.Range, error) {
	return append(dst, ids.Range{First: 1, Count: n}), nil
}

type nopLease struct{ now func() time.Time }

func (l nopLease) Renew(context.Context) (time.Time, error) { return l.now().Add(time.Hour), nil }
func (nopLease) Release(context.Context) error              { return nil }

// Requests that arrive while this vendor takes a tag's lead wait for it
// and are served, rather than race it for the lease and get a 503.
func TestConcurrentFirstRequestsShareOneLead(t *testing.T) {
	var leads atomic.Int64
	release := make(chan struct{})
	ls, err := strict.Open(strict.Config{
		Source: &nopSource{},
		Leases: leaseFunc(func(context.Context, string) (strict.Lease, time.Time, error) {
			if leads.Add(1) > 1 {
				return nil, time.Time{}, strict.ErrLedElsewhere // as the lease bucket would say
			}
			<-release
			return nopLease{time.Now}, time.Time{}, nil
		}),
		Transport: forwardFunc(func(_ context.Context, _ string, dst []ids.Range, _ int64) ([]ids.Range, bool, error) {
			return dst, false, strict.ErrNoLeader
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close(context.Background())
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := ls.Take(t.Context(), "ledger", nil, 1)
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond) // the eight wait for the one lead
	close(release)
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a first request: %v", err)
		}
	}
	if n := leads.Load(); n != 1 {
		t.Errorf("%d leads taken, want 1", n)
	}
}

// homeSource is a source whose tags are all of home region east.
type homeSource struct{ nopSource }

func (homeSource) Home(string) string { return "east" }

// With regions, only the vendors of a strict tag's home region lead it: a
// vendor of another region that finds no leader answering answers 503
// naming the home region, and takes no lease.
func TestOnlyTheHomeRegionLeads(t *testing.T) {
	var leases atomic.Int64
	for _, region := range []string{"west", "east"} {
		ls, err := strict.Open(strict.Config{
			Source: homeSource{},
			Leases: leaseFunc(func(context.Context, string) (strict.Lease, time.Time, error) {
				leases.Add(1)
				return nopLease{time.Now}, time.Time{}, nil
			}),
			Transport: forwardFunc(func(_ context.Context, _ string, dst []ids.Range, _ int64) ([]ids.Range, bool, error) {
				return dst, false, strict.ErrNoLeader
			}),
			Region: region,
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ls.Take(t.Context(), "ledger", nil, 1)
		switch {
		case region == "west" && (!errors.Is(err, segment.ErrUnavailable) || !strings.Contains(err.Error(), "home region east") || leases.Load() != 0):
			t.Fatalf("a vendor of region west: %v, %d leases taken; want a 503 naming east and none", err, leases.Load())
		case region == "east" && (err != nil || leases.Load() != 1):
			t.Fatalf("a vendor of the home region: %v, %d leases taken; want it to lead", err, leases.Load())
		}
		ls.Close(context.Background())
	}
}
