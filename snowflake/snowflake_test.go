package snowflake

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/testtool"
)

var _ Clock = (*testtool.Clock)(nil)

func newFakeClock(ms int64) *testtool.Clock { return testtool.NewClock(time.UnixMilli(ms)) }

const testNow = int64(1_700_000_000_000)

func newGen(t *testing.T, s Settings) *Generator {
	t.Helper()
	g, err := New(s)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g
}

func decode(t *testing.T, id int64) Parts {
	t.Helper()
	p, err := Decode(id, DefaultEpoch)
	if err != nil {
		t.Fatalf("Decode(%d): %v", id, err)
	}
	return p
}

func TestNewInvalidSettings(t *testing.T) {
	clock := newFakeClock(testNow)
	for _, tc := range []struct {
		name string
		s    Settings
	}{
		{"negative worker", Settings{WorkerID: -1, Clock: clock}},
		{"worker too large", Settings{WorkerID: MaxWorkerID + 1, Clock: clock}},
		{"negative epoch", Settings{Epoch: -5, Clock: clock}},
		{"epoch in the future", Settings{Epoch: testNow + 1000, Clock: clock}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.s); !errors.Is(err, ErrSettings) {
				t.Fatalf("New(%+v) = %v, want ErrSettings", tc.s, err)
			}
		})
	}
	_, err := New(Settings{WorkerID: -1, Epoch: -5, Clock: clock})
	for _, want := range []string{"worker ID -1", "epoch -5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with two bad settings: %v; want %q named", err, want)
		}
	}
}

func TestLayout(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{WorkerID: 513, Clock: clock, SeqStart: func(uint32) uint32 { return 7 }})
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	want := (testNow-DefaultEpoch)<<22 | 513<<12 | 7
	if id != want {
		t.Fatalf("id = %d, want %d", id, want)
	}
	p := decode(t, id)
	if p.UnixMilli != testNow || p.WorkerID != 513 || p.Sequence != 7 {
		t.Fatalf("decoded %+v", p)
	}
}

func TestSequenceStartsRandomBelow100(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{Clock: clock})
	seen := map[int]bool{}
	for range 2000 {
		clock.Add(time.Millisecond)
		id, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		seq := decode(t, id).Sequence
		if seq >= 100 {
			t.Fatalf("first sequence of a millisecond is %d, want < 100", seq)
		}
		seen[seq] = true
	}
	if len(seen) < 50 {
		t.Fatalf("only %d distinct starting sequences in 2000 milliseconds: not random", len(seen))
	}
}

func TestSequenceOverflowMovesToNextMillisecond(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{Clock: clock, SeqStart: func(uint32) uint32 { return 0 }})
	ids, err := g.NextN(nil, 3*(MaxSequence+1)+5)
	if err != nil {
		t.Fatal(err)
	}
	assertAscendingUnique(t, ids)
	if got := decode(t, ids[len(ids)-1]).UnixMilli; got != testNow+3 {
		t.Fatalf("last ID's millisecond = %d, want %d (4 milliseconds used)", got, testNow+3)
	}
	if got := decode(t, ids[MaxSequence]).Sequence; got != MaxSequence {
		t.Fatalf("sequence %d at index %d, want %d", got, MaxSequence, MaxSequence)
	}
}

// NextRanges hands out the IDs NextN would, as one run per millisecond.
func TestNextRanges(t *testing.T) {
	seq := func(uint32) uint32 { return 7 }
	a := newGen(t, Settings{Clock: newFakeClock(testNow), SeqStart: seq})
	b := newGen(t, Settings{Clock: newFakeClock(testNow), SeqStart: seq})
	n := 3*(MaxSequence+1) + 5
	ids, err := a.NextN(nil, n)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := b.NextRanges(nil, n)
	if err != nil {
		t.Fatal(err)
	}
	var fromRuns []int64
	for i, r := range rs {
		if p := decode(t, r.First); i > 0 && p.UnixMilli <= decode(t, rs[i-1].First).UnixMilli {
			t.Fatalf("run %d in millisecond %d, not after the one before", i, p.UnixMilli)
		}
		for id := r.First; id < r.First+r.Count; id++ {
			fromRuns = append(fromRuns, id)
		}
	}
	if len(rs) != 4 || !slices.Equal(ids, fromRuns) {
		t.Fatalf("%d runs holding %d IDs; want 4 runs holding NextN's %d IDs", len(rs), len(fromRuns), len(ids))
	}
	// All or nothing: past the lease window, dst comes back unchanged.
	c := newGen(t, Settings{Clock: newFakeClock(testNow), Leased: true})
	if got, err := c.NextRanges(rs[:1], 10); !errors.Is(err, ErrNoLease) || len(got) != 1 {
		t.Fatalf("NextRanges without a lease: %d runs, %v", len(got), err)
	}
}

func TestClockSmallStepBackIsWaitedOut(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{Clock: clock})
	first, err := g.NextN(nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(-2 * time.Millisecond)
	second, err := g.NextN(nil, 100)
	if err != nil {
		t.Fatalf("2ms step back: %v, want it waited out", err)
	}
	all := append(first, second...)
	assertAscendingUnique(t, all)
	st := g.Stats()
	if st.BackwardSteps != 1 || st.BackwardRefused != 0 || st.BackwardWaited != 2*time.Millisecond {
		t.Fatalf("stats %+v, want one step waited 2ms", st)
	}
}

func TestClockLargeStepBackIsRefusedUntilCaughtUp(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{Clock: clock})
	before, err := g.NextN(nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(-10 * time.Second)
	for range 3 {
		if _, err := g.Next(); !errors.Is(err, ErrClockBackwards) {
			t.Fatalf("10s step back: %v, want ErrClockBackwards", err)
		}
		clock.Add(3 * time.Second)
	}
	clock.Add(time.Second) // back where it was, and past
	after, err := g.NextN(nil, 10)
	if err != nil {
		t.Fatalf("after catching up: %v", err)
	}
	assertAscendingUnique(t, append(before, after...))
	if st := g.Stats(); st.BackwardRefused != 3 {
		t.Fatalf("refused %d, want 3", st.BackwardRefused)
	}
}

func TestNeverZero(t *testing.T) {
	clock := newFakeClock(DefaultEpoch) // the epoch's first millisecond
	g := newGen(t, Settings{Clock: clock, SeqStart: func(uint32) uint32 { return 0 }})
	id, err := g.Next()
	if err != nil || id <= 0 {
		t.Fatalf("worker 0 at the epoch with sequence 0: id %d, %v; want a positive ID", id, err)
	}
}

func TestTimeOverflowRefused(t *testing.T) {
	// The clock at the last millisecond 41 bits can hold.
	clock := newFakeClock(DefaultEpoch + maxElapsed)
	g := newGen(t, Settings{Clock: clock})
	id, err := g.Next()
	if err != nil || id <= 0 {
		t.Fatalf("last representable millisecond: id %d, %v", id, err)
	}
	clock.Add(time.Millisecond)
	if id, err := g.Next(); !errors.Is(err, ErrTimeOverflow) {
		t.Fatalf("past 41 bits: id %d, err %v, want ErrTimeOverflow", id, err)
	}
}

func TestLastIsRespected(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{Clock: clock, Last: testNow + 3})
	id, err := g.Next()
	if err != nil {
		t.Fatalf("3ms behind Last (within tolerance): %v", err)
	}
	if ms := decode(t, id).UnixMilli; ms <= testNow+3 {
		t.Fatalf("ID at %d, want after Last %d", ms, testNow+3)
	}

	g = newGen(t, Settings{Clock: newFakeClock(testNow), Last: testNow + 60_000})
	if _, err := g.Next(); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("a minute behind Last: %v, want ErrClockBackwards", err)
	}
}

func TestWindow(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{Clock: clock, Leased: true})
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("leased generator before Window: %v, want ErrNoLease", err)
	}
	g.Window(clock.Now().Add(10 * time.Millisecond))
	if _, err := g.Next(); err != nil {
		t.Fatalf("inside window: %v", err)
	}
	// A batch that would run past the window's last millisecond fails whole.
	if ids, err := g.NextN(nil, 20*(MaxSequence+1)); !errors.Is(err, ErrNoLease) || len(ids) != 0 {
		t.Fatalf("batch past window: %d IDs, %v; want none and ErrNoLease", len(ids), err)
	}
	clock.Add(10 * time.Millisecond)
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("at deadline: %v, want ErrNoLease", err)
	}
	g.Window(clock.Now().Add(time.Second))
	if _, err := g.Next(); err != nil {
		t.Fatalf("renewed window: %v", err)
	}
	last := g.Revoke()
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("after Revoke: %v, want ErrNoLease", err)
	}
	if last < testNow+10 || last > testNow+20 {
		t.Fatalf("Revoke returned %d, want the last millisecond used", last)
	}
}

func TestConcurrentUnique(t *testing.T) {
	g := newGen(t, Settings{WorkerID: 1})
	const workers, per = 8, 20000
	results := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var ids []int64
			for len(ids) < per {
				var err error
				if ids, err = g.NextN(ids, 1+len(ids)%7); err != nil {
					t.Error(err)
					return
				}
			}
			results[w] = ids
		})
	}
	wg.Wait()
	seen := make(map[int64]bool, workers*per)
	for _, ids := range results {
		assertAscendingUnique(t, ids)
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate ID %d", id)
			}
			seen[id] = true
		}
	}
}

func TestComposeDecodeRoundTrip(t *testing.T) {
	for _, p := range []Parts{
		{UnixMilli: DefaultEpoch, WorkerID: 0, Sequence: 1},
		{UnixMilli: testNow, WorkerID: MaxWorkerID, Sequence: MaxSequence},
		{UnixMilli: DefaultEpoch + maxElapsed, WorkerID: 7, Sequence: 0},
	} {
		id, err := Compose(p, DefaultEpoch)
		if err != nil {
			t.Fatalf("Compose(%+v): %v", p, err)
		}
		if got := decode(t, id); got != p {
			t.Fatalf("round trip %+v -> %d -> %+v", p, id, got)
		}
	}
	for _, bad := range []int64{0, -1, -1 << 62} {
		if _, err := Decode(bad, DefaultEpoch); !errors.Is(err, ErrInvalidID) {
			t.Fatalf("Decode(%d) = %v, want ErrInvalidID", bad, err)
		}
	}
}

func FuzzComposeDecode(f *testing.F) {
	f.Add(int64(1862213154793730049), int64(DefaultEpoch))
	f.Add(int64(1), int64(0))
	f.Add(int64(1<<63-1), int64(DefaultEpoch))
	f.Fuzz(func(t *testing.T, id, epoch int64) {
		if epoch < 0 || epoch > 1<<50 {
			return
		}
		p, err := Decode(id, epoch)
		if id <= 0 {
			if err == nil {
				t.Fatalf("Decode(%d) accepted a non-positive ID", id)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(%d): %v", id, err)
		}
		back, err := Compose(p, epoch)
		if err != nil || back != id {
			t.Fatalf("Compose(Decode(%d)) = %d, %v", id, back, err)
		}
	})
}

func assertAscendingUnique(t *testing.T, ids []int64) {
	t.Helper()
	for i, id := range ids {
		if id <= 0 {
			t.Fatalf("ID %d at %d is not positive", id, i)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("ID %d at %d is not above %d", id, i, ids[i-1])
		}
	}
	if !slices.IsSorted(ids) {
		t.Fatal("not sorted")
	}
}

func BenchmarkNext(b *testing.B) {
	g, _ := New(Settings{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNextN1000(b *testing.B) {
	g, _ := New(Settings{})
	buf := make([]int64, 0, 1000)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = g.NextN(buf[:0], 1000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "ids/s")
}

func BenchmarkNextRanges10000(b *testing.B) {
	g, _ := New(Settings{})
	buf := make([]ids.Range, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = g.NextRanges(buf[:0], 10000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*10000/b.Elapsed().Seconds(), "ids/s")
}
