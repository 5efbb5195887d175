package workerid

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/snowflake"
)

// testNow is a fixed "now" for the fake clock, well after the epoch.
const testNow int64 = 1_700_000_000_000

func newFakeClock(ms int64) *testtool.Clock { return testtool.NewClock(time.UnixMilli(ms)) }

// fakeHolder holds worker ID id for an hold (renewing moves the deadline
// hold ahead of the real clock), counts renewals and can be told to fail.
type fakeHolder struct {
	id   int
	last int64
	hold time.Duration

	mu       sync.Mutex
	renewals int
	err      error
	released []int64
}

var _ Holder = (*fakeHolder)(nil)

func (h *fakeHolder) ID() int       { return h.id }
func (h *fakeHolder) Last() int64   { return h.last }
func (h *fakeHolder) Where() string { return "fake" }

func (h *fakeHolder) Renew(context.Context, int64) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewals++
	if h.err != nil {
		return time.Time{}, h.err
	}
	return time.Now().Add(h.hold), nil
}

func (h *fakeHolder) Release(_ context.Context, last int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = append(h.released, last)
	return nil
}

func (h *fakeHolder) fail(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

func (h *fakeHolder) state() (int, []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewals, append([]int64(nil), h.released...)
}

// claims hands out the holders given, one per Claim call, and then fails.
type claims struct {
	mu      sync.Mutex
	holders []Holder
	errs    []error // returned before the holders, one per call
	calls   int
}

func (c *claims) claim(_ context.Context, _ ClaimRequest) (Holder, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if len(c.errs) > 0 {
		err := c.errs[0]
		c.errs = c.errs[1:]
		return nil, err
	}
	if len(c.holders) == 0 {
		return nil, errors.New("no worker ID free")
	}
	h := c.holders[0]
	c.holders = c.holders[1:]
	return h, nil
}

func (c *claims) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func open(t *testing.T, c Config) *Keeper {
	t.Helper()
	k, err := Open(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close(context.Background()) })
	return k
}

func claimed(t *testing.T, k *Keeper) {
	t.Helper()
	select {
	case <-k.Claimed():
	case <-k.Done():
		t.Fatalf("keeper stopped before claiming: %v", k.Err())
	case <-time.After(10 * time.Second):
		t.Fatal("no worker ID claimed within 10s")
	}
}

func workerOf(id int64) int { return int(id >> snowflake.SequenceBits & snowflake.MaxWorkerID) }

func TestKeeperRenewsAndReleasesOnClose(t *testing.T) {
	// A hold long enough that a stalled goroutine on a loaded machine
	// does not lose it, short enough for three renewals in a second.
	h := &fakeHolder{id: 3, hold: time.Second}
	c := &claims{holders: []Holder{h}}
	k := open(t, Config{Claim: c.claim})
	claimed(t, k)
	testtool.Eventually(t, 10*time.Second, "three renewals", func() bool { n, _ := h.state(); return n >= 3 })
	ids, err := k.NextN(nil, 5)
	if err != nil || len(ids) != 5 || workerOf(ids[0]) != 3 {
		t.Fatalf("NextN = %v, %v; want 5 IDs of worker 3", ids, err)
	}
	if err := k.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := k.NextN(nil, 1); !errors.Is(err, snowflake.ErrNoLease) {
		t.Fatalf("after Close: %v, want ErrNoLease", err)
	}
	p, _ := snowflake.Decode(ids[4], snowflake.DefaultEpoch)
	if _, released := h.state(); len(released) != 1 || released[0] != p.UnixMilli {
		t.Fatalf("released %v, want once with the last ID's millisecond %d", released, p.UnixMilli)
	}
	if st := k.Status(); st.ID != 3 || st.Mode != "kv-lease" || st.Renewals == 0 {
		t.Fatalf("status %+v", st)
	}
}

func TestKeeperStopsVendingAtTheDeadlineWhenRenewalsFail(t *testing.T) {
	h := &fakeHolder{id: 1, hold: 200 * time.Millisecond}
	c := &claims{holders: []Holder{h}}
	k := open(t, Config{Claim: c.claim})
	claimed(t, k)
	h.fail(errors.New("kv: no response from stream"))
	testtool.Eventually(t, 10*time.Second, "vending to stop at the deadline", func() bool {
		_, err := k.NextN(nil, 1)
		return errors.Is(err, snowflake.ErrNoLease)
	})
	testtool.Eventually(t, 10*time.Second, "a renewal failure counted", func() bool { return k.Status().RenewalFailures > 0 })
	h.fail(nil)
	testtool.Eventually(t, 10*time.Second, "vending to resume after a renewal", func() bool {
		_, err := k.NextN(nil, 1)
		return err == nil
	})
}

func TestKeeperClaimsAgainAfterALostLease(t *testing.T) {
	first := &fakeHolder{id: 1, hold: time.Second}
	second := &fakeHolder{id: 2, hold: time.Hour, last: time.Now().Add(50 * time.Millisecond).UnixMilli()}
	c := &claims{holders: []Holder{first, second}, errs: nil}
	k := open(t, Config{Claim: c.claim})
	claimed(t, k)
	before, err := k.NextN(nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	first.fail(lease.ErrLost)
	testtool.Eventually(t, 10*time.Second, "IDs from the second worker ID", func() bool {
		ids, err := k.NextN(nil, 1)
		return err == nil && workerOf(ids[0]) == 2
	})
	ids, _ := k.NextN(nil, 1)
	// The second holder's generator starts after its Last.
	if p, _ := snowflake.Decode(ids[0], snowflake.DefaultEpoch); p.UnixMilli <= second.last {
		t.Fatalf("ID at %d, not after the second holder's last %d", p.UnixMilli, second.last)
	}
	if workerOf(before[0]) != 1 {
		t.Fatalf("first ID from worker %d", workerOf(before[0]))
	}
}

func TestKeeperRetriesTransientClaimErrors(t *testing.T) {
	h := &fakeHolder{id: 9, hold: time.Hour}
	c := &claims{holders: []Holder{h}, errs: []error{errors.New("no JetStream leader yet"), errors.New("timeout")}}
	k := open(t, Config{Claim: c.claim})
	claimed(t, k)
	if n := c.count(); n != 3 {
		t.Fatalf("%d claims, want 3", n)
	}
	if st := k.Status(); st.LastError != nil || !st.Held {
		t.Fatalf("status after recovering: %+v", st)
	}
}

func TestKeeperGivesUpOnAPermanentError(t *testing.T) {
	c := &claims{errs: []error{lease.Permanent(errors.New("every worker ID is held"))}}
	k := open(t, Config{Claim: c.claim})
	select {
	case <-k.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("keeper still running after a permanent error")
	}
	if err := k.Err(); err == nil || err.Error() != "every worker ID is held" {
		t.Fatalf("Err = %v", err)
	}
}

func TestConfigNamesEveryBadField(t *testing.T) {
	_, err := Open(Config{IDs: &Range{First: 5, Last: 2}, Static: &Static{ID: 2000}})
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"Claim is nil", "range 5-2", "static worker ID 2000", "no timestamp file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// A static worker ID keeps its last timestamp in its file: a second run
// starts after the first one's last ID even when the KV hold knows nothing.
func TestStaticWorkerIDKeepsItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker-42.last")
	var last int64
	for run := range 2 {
		c := &claims{holders: []Holder{&fakeHolder{id: 42, hold: time.Hour}}}
		k := open(t, Config{Claim: c.claim, Static: &Static{ID: 42, File: path}})
		claimed(t, k)
		ids, err := k.NextN(nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] <= last || workerOf(ids[0]) != 42 {
			t.Fatalf("run %d: first ID %d (worker %d), want after %d and worker 42", run, ids[0], workerOf(ids[0]), last)
		}
		last = ids[len(ids)-1]
		if st := k.Status(); st.Mode != "static" || st.Where != path+" and fake" {
			t.Fatalf("status %+v", st)
		}
		if err := k.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWaitPast(t *testing.T) {
	clock := newFakeClock(testNow)
	if err := WaitPast(context.Background(), clock, testNow+500, time.Second); err != nil {
		t.Fatal(err)
	}
	if now := clock.Now().UnixMilli(); now <= testNow+500 {
		t.Fatalf("returned at %d, not past %d", now, testNow+500)
	}
	if err := WaitPast(context.Background(), clock, testNow+3_600_000, time.Minute); !errors.Is(err, ErrClockBehind) {
		t.Fatalf("an hour behind: %v, want ErrClockBehind", err)
	}
}

func TestFileHolderKeepsTimestampAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "worker-5.last")
	clock := newFakeClock(testNow)
	h, err := OpenFile(path, 5, clock, 3*time.Second)
	if err != nil || h.Last() != 0 {
		t.Fatalf("fresh file: last %d, %v", h.Last(), err)
	}
	deadline, err := h.Renew(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// A crash now: the next run must start after the reserved horizon.
	if h, err = OpenFile(path, 5, clock, 3*time.Second); err != nil || h.Last() != deadline.UnixMilli() {
		t.Fatalf("after crash: last %d, %v; want %d", h.Last(), err, deadline.UnixMilli())
	}
	// A clean stop records the true last millisecond.
	if err := h.Release(context.Background(), testNow+7); err != nil {
		t.Fatal(err)
	}
	if h, _ = OpenFile(path, 5, clock, time.Second); h.Last() != testNow+7 {
		t.Fatalf("after release: last %d, want %d", h.Last(), testNow+7)
	}
	// After a backwards clock step, IDs already made are ahead of the new
	// deadline: the file keeps the later timestamp.
	ahead := clock.Now().Add(time.Minute).UnixMilli()
	if _, err := h.Renew(context.Background(), ahead); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Renew(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if h, _ = OpenFile(path, 5, clock, time.Second); h.Last() != ahead {
		t.Fatalf("after renewals behind the last ID: recorded %d, want %d", h.Last(), ahead)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(path, 5, clock, time.Second); err == nil {
		t.Fatal("corrupt file accepted")
	}
}

func TestBothRenewsEachAndTakesTheEarlierDeadline(t *testing.T) {
	clock := newFakeClock(testNow)
	file, err := OpenFile(filepath.Join(t.TempDir(), "w.last"), 7, clock, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := &fakeHolder{id: 7, hold: time.Hour}
	hs := both{file, other}
	deadline, err := hs.Renew(context.Background(), 0)
	if err != nil || !deadline.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("Renew = %v, %v; want the file's earlier deadline", deadline, err)
	}
	if err := hs.Release(context.Background(), testNow); err != nil {
		t.Fatal(err)
	}
	if _, released := other.state(); len(released) != 1 {
		t.Fatalf("released %v, want each holder released", released)
	}
	other.fail(lease.ErrLost)
	if _, err := hs.Renew(context.Background(), 0); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Renew with one holder lost: %v", err)
	}
}

// After the connection requests arrive on reconnects (to a server that may
// have lost every lease), no ID is made until the hold is renewed there.
func TestKeeperRenewsBeforeVendingAfterTheFenceMoves(t *testing.T) {
	h := &fakeHolder{id: 5, hold: time.Hour}
	c := &claims{holders: []Holder{h}}
	var reconnects atomic.Uint64
	k := open(t, Config{Claim: c.claim, Fence: reconnects.Load})
	claimed(t, k)
	if _, err := k.NextN(nil, 1); err != nil {
		t.Fatal(err)
	}
	before, _ := h.state()
	h.fail(errors.New("the server does not answer yet"))
	reconnects.Add(1)
	if _, err := k.NextN(nil, 1); !errors.Is(err, snowflake.ErrNoLease) || !strings.Contains(err.Error(), "reconnected") {
		t.Fatalf("NextN after a reconnect: %v, want ErrNoLease saying why", err)
	}
	testtool.Eventually(t, 10*time.Second, "a renewal asked for at once", func() bool { n, _ := h.state(); return n > before })
	if _, err := k.NextN(nil, 1); !errors.Is(err, snowflake.ErrNoLease) {
		t.Fatalf("NextN while the renewal fails: %v, want ErrNoLease", err)
	}
	h.fail(nil)
	testtool.Eventually(t, 10*time.Second, "vending after a renewal", func() bool {
		_, err := k.NextN(nil, 1)
		return err == nil
	})
}
