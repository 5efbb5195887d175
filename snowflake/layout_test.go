package snowflake

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// maxSafe is JavaScript's Number.MAX_SAFE_INTEGER, 2^53-1.
const maxSafe = 1<<53 - 1

func TestLayouts(t *testing.T) {
	for _, tc := range []struct {
		l                 Layout
		name, bits        string
		workers, perMilli int
	}{
		{LayoutDefault, "default", "1+41+10+12", 1024, 4096},
		{LayoutJS53, "js53", "11+41+4+8", 16, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.l.Name() != tc.name || tc.l.String() != tc.bits || tc.l.MaxWorkerID()+1 != tc.workers || tc.l.MaxSequence()+1 != tc.perMilli {
				t.Fatalf("%s: %s, %d workers, %d per ms", tc.l.Name(), tc.l, tc.l.MaxWorkerID()+1, tc.l.MaxSequence()+1)
			}
			for _, s := range []string{tc.name, tc.bits, strings.ToUpper(tc.name)} {
				if got, err := ParseLayout(s); err != nil || got != tc.l {
					t.Fatalf("ParseLayout(%q) = %v, %v", s, got, err)
				}
			}
			if end := tc.l.Ends(DefaultEpoch); end.Year() != 2080 {
				t.Fatalf("time bits end %v, want in 2080", end)
			}
		})
	}
	if l, err := ParseLayout(""); err != nil || l != LayoutDefault {
		t.Fatalf("ParseLayout(\"\") = %v, %v", l, err)
	}
	if _, err := ParseLayout("1+39+8+15"); err == nil || !strings.Contains(err.Error(), "js53") {
		t.Fatalf("ParseLayout of an unsupported split: %v", err)
	}
}

// The js53 generator's IDs stay below 2^53 up to the last millisecond its
// time bits hold, ascend, and a full millisecond waits for the next one.
func TestJS53Generator(t *testing.T) {
	clock := newFakeClock(testNow)
	g := newGen(t, Settings{Layout: LayoutJS53, WorkerID: 15, Clock: clock, SeqStart: func(n uint32) uint32 { return n - 1 }})
	ids, err := g.NextN(nil, 3*256+5)
	if err != nil {
		t.Fatal(err)
	}
	assertAscendingUnique(t, ids)
	first, last := decodeJS53(t, ids[0]), decodeJS53(t, ids[len(ids)-1])
	if first.UnixMilli != testNow || first.WorkerID != 15 || first.Sequence != 31 {
		t.Fatalf("first ID %+v, want worker 15, sequence 31 (start below 256/8) at %d", first, testNow)
	}
	if last.UnixMilli != testNow+3 {
		t.Fatalf("last ID at %d, want %d: each millisecond holds 225 IDs from sequence 31", last.UnixMilli, testNow+3)
	}
	for _, id := range ids {
		if id > maxSafe {
			t.Fatalf("js53 ID %d above 2^53-1", id)
		}
	}
	if _, err := New(Settings{Layout: LayoutJS53, WorkerID: 16, Clock: clock}); !errors.Is(err, ErrSettings) ||
		!strings.Contains(err.Error(), "worker ID 16 is outside 0..15 of layout js53") {
		t.Fatalf("js53 with worker ID 16: %v", err)
	}

	// The last millisecond of the time bits holds IDs below 2^53; the next
	// is refused.
	clock = newFakeClock(DefaultEpoch + LayoutJS53.MaxElapsed())
	g = newGen(t, Settings{Layout: LayoutJS53, WorkerID: 15, Clock: clock, SeqStart: func(uint32) uint32 { return 0 }})
	ids, err = g.NextN(nil, 256)
	if err != nil || ids[len(ids)-1] != maxSafe {
		t.Fatalf("last millisecond: last ID %d, %v; want 2^53-1", ids[len(ids)-1], err)
	}
	clock.Add(time.Millisecond)
	if id, err := g.Next(); !errors.Is(err, ErrTimeOverflow) {
		t.Fatalf("past the time bits: %d, %v; want ErrTimeOverflow", id, err)
	}
}

func decodeJS53(t *testing.T, id int64) Parts {
	t.Helper()
	p, err := LayoutJS53.Decode(id, DefaultEpoch)
	if err != nil {
		t.Fatalf("Decode(%d): %v", id, err)
	}
	return p
}

// Every js53 ID composed from parts in range is below 2^53 and decodes back
// to its parts; any positive int64 either decodes and composes back, or has
// bits above the 53.
func FuzzComposeDecodeJS53(f *testing.F) {
	f.Add(int64(1), int64(DefaultEpoch), 0, 1)
	f.Add(int64(DefaultEpoch+1<<41-1), int64(DefaultEpoch), 15, 255)
	f.Add(int64(1_700_000_000_000), int64(DefaultEpoch), 7, 31)
	f.Add(int64(1<<53), int64(0), 16, 256)
	f.Add(int64(-5), int64(1), -1, -1)
	f.Fuzz(func(t *testing.T, ms, epoch int64, worker, seq int) {
		if epoch < 0 || epoch > 1<<50 {
			return
		}
		l := LayoutJS53
		p := Parts{UnixMilli: ms, WorkerID: worker, Sequence: seq}
		id, err := l.Compose(p, epoch)
		inRange := ms-epoch >= 0 && ms-epoch <= l.MaxElapsed() && worker >= 0 && worker <= 15 && seq >= 0 && seq <= 255 &&
			(ms != epoch || worker != 0 || seq != 0)
		if inRange != (err == nil) {
			t.Fatalf("Compose(%+v, %d) = %d, %v; parts in range: %v", p, epoch, id, err, inRange)
		}
		if err == nil {
			if id <= 0 || id > maxSafe {
				t.Fatalf("Compose(%+v) = %d, not in 1..2^53-1", p, id)
			}
			if back, err := l.Decode(id, epoch); err != nil || back != p {
				t.Fatalf("Decode(Compose(%+v)) = %+v, %v", p, back, err)
			}
		}
		// ms read as an ID: below 2^53 it round-trips, above it is refused.
		back, err := l.Decode(ms, epoch)
		switch {
		case ms <= 0 || ms > maxSafe:
			if err == nil {
				t.Fatalf("Decode(%d) accepted an ID outside 1..2^53-1: %+v", ms, back)
			}
		case err != nil:
			t.Fatalf("Decode(%d): %v", ms, err)
		default:
			if again, err := l.Compose(back, epoch); err != nil || again != ms {
				t.Fatalf("Compose(Decode(%d)) = %d, %v", ms, again, err)
			}
		}
	})
}

// stepClock moves one millisecond every 64 readings, so that no layout's
// millisecond fills up: benchmarks with it measure the generator's own
// work, not the wait for the next millisecond.
type stepClock struct{ n int64 }

func (c *stepClock) Now() time.Time {
	c.n++
	return time.UnixMilli(testNow + c.n/64)
}

func (c *stepClock) Sleep(time.Duration) {}

func benchUnsaturated(b *testing.B, l Layout) {
	g, err := New(Settings{Layout: l, Clock: &stepClock{}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextUnsaturated is the cost of one Next in the default layout
// when the millisecond has room.
func BenchmarkNextUnsaturated(b *testing.B) { benchUnsaturated(b, LayoutDefault) }

// BenchmarkNextUnsaturatedJS53 is the same in the js53 layout.
func BenchmarkNextUnsaturatedJS53(b *testing.B) { benchUnsaturated(b, LayoutJS53) }
