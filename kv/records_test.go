package kv

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/workerid"
)

func seedForeign(f *testing.F, valid ...string) {
	for _, v := range append(testtool.ForeignValues, valid...) {
		f.Add([]byte(v))
	}
}

func TestForeignValuesAreCorrupt(t *testing.T) {
	for _, v := range testtool.ForeignValues {
		if _, _, err := ParseClock([]byte(v)); err == nil {
			t.Errorf("ParseClock(%q) accepted", v)
		}
		if _, err := decodeContract([]byte(v)); err == nil {
			t.Errorf("decodeContract(%q) accepted", v)
		}
		if _, err := decodeLeaseValue([]byte(v)); err == nil {
			t.Errorf("decodeLeaseValue(%q) accepted", v)
		}
		if _, err := decodeLeadValue([]byte(v)); err == nil {
			t.Errorf("decodeLeadValue(%q) accepted", v)
		}
	}
}

// roundTrip checks that what a decoder accepted is what a vendor writes:
// encoded again, it decodes to the same value.
func roundTrip[T comparable](t *testing.T, got T, decode func([]byte) (T, error)) {
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := decode(b)
	if err != nil || again != got {
		t.Fatalf("%+v encodes to %s, which decodes to %+v, %v", got, b, again, err)
	}
}

func FuzzParseClock(f *testing.F) {
	seedForeign(f, "1732257433123 1288834974657", "1732257433123", " 5 0 ")
	f.Fuzz(func(t *testing.T, v []byte) {
		ms, epoch, err := ParseClock(v)
		if err != nil {
			return
		}
		if ms < 0 || epoch < 0 || ms >= maxClockMs || epoch >= maxClockMs {
			t.Fatalf("ParseClock(%q) = %d, %d", v, ms, epoch)
		}
		if ms2, epoch2, err := ParseClock(clockValue(ms, epoch)); err != nil || ms2 != ms || epoch2 != epoch {
			t.Fatalf("clockValue(%d, %d) reads back as %d, %d, %v", ms, epoch, ms2, epoch2, err)
		}
	})
}

func FuzzDecodeContract(f *testing.F) {
	seedForeign(f, `{"epoch":1288834974657,"layout":"1+41+10+12","worker_ids":"0-1023","segments":"postgres:a@1.2.3","lease_ttl_ns":30000000000,"by":"h/1","at":"2026-11-22T06:06:44Z"}`,
		`{"epoch":1288834974657,"layout":"11+41+4+8","worker_ids":"0-15","by":"h/1","at":"2026-11-22T06:06:44Z"}`)
	f.Fuzz(func(t *testing.T, v []byte) {
		c, err := decodeContract(v)
		if err != nil {
			return
		}
		if c.Epoch <= 0 || !validLayout(c.Layout) || c.LeaseTTL < 0 {
			t.Fatalf("decodeContract(%q) = %+v", v, c)
		}
		if _, _, ok := parseIDRange(c.WorkerIDs); !ok {
			t.Fatalf("decodeContract(%q): worker IDs %q", v, c.WorkerIDs)
		}
		roundTrip(t, c, decodeContract)
	})
}

func FuzzDecodeLeaseValue(f *testing.F) {
	seedForeign(f, `{"holder":"h/1","claimed":"2026-11-22T06:06:44Z"}`)
	f.Fuzz(func(t *testing.T, v []byte) {
		l, err := decodeLeaseValue(v)
		if err != nil {
			return
		}
		if l.Holder == "" || l.Claimed.IsZero() {
			t.Fatalf("decodeLeaseValue(%q) = %+v", v, l)
		}
		roundTrip(t, l, decodeLeaseValue)
	})
}

func FuzzDecodeLeadValue(f *testing.F) {
	seedForeign(f, `{"holder":"h/1","since":"2026-11-22T06:06:44Z"}`)
	f.Fuzz(func(t *testing.T, v []byte) {
		l, err := decodeLeadValue(v)
		if err != nil {
			return
		}
		if l.Holder == "" || l.Since.IsZero() {
			t.Fatalf("decodeLeadValue(%q) = %+v", v, l)
		}
		roundTrip(t, l, decodeLeadValue)
	})
}

// A corrupt record is an error that names it, never a zero value: a
// corrupt row stops its tag (and only it) until `tags raise` repairs it, a
// corrupt contract is reported with its revision, and a worker ID with a
// corrupt or implausible last timestamp is passed over.
func TestCorruptRecordsInBuckets(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	ctx := context.Background()
	cs, err := OpenContracts(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := js.KeyValue(ctx, ClusterBucket)
	rev, _ := cb.Put(ctx, contractKey, []byte(testtool.ForeignValues[0]))
	_, got, err := cs.Get(ctx)
	var ce *CorruptError
	if !errors.As(err, &ce) || got != rev || !strings.Contains(err.Error(), "epoch 0") {
		t.Fatalf("Get of a corrupt contract: rev %d, %v; want a CorruptError at revision %d", got, err, rev)
	}
}

func TestClaimPassesOverBadRecords(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	ctx := context.Background()
	// Both buckets exist once a first claim ran.
	two := workerid.Range{First: 1, Last: 2}
	l, err := Claim(ctx, js, LeaseConfig{TTL: 2 * time.Second, IDs: &workerid.Range{First: 0, Last: 0}})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx, l.Last())
	clocks, _ := js.KeyValue(ctx, ClocksBucket)
	for id, v := range map[int]string{1: testtool.ForeignValues[1], 2: string(clockValue(time.Now().Add(3*time.Hour).UnixMilli(), 0))} {
		if _, err := clocks.Put(ctx, leaseKey(id), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Claim(ctx, js, LeaseConfig{TTL: 2 * time.Second, IDs: &two})
	if err == nil || !strings.Contains(err.Error(), "reset-worker") {
		t.Fatalf("claim of worker IDs whose records are corrupt or hours ahead: %v; want an error naming the repair", err)
	}
	three := workerid.Range{First: 1, Last: 3}
	l, err = Claim(ctx, js, LeaseConfig{TTL: 2 * time.Second, IDs: &three})
	if err != nil || l.ID() != 3 {
		t.Fatalf("claim in 1-3: %v, %v; want worker ID 3, the one with a good record", l, err)
	}
	l.Release(ctx, l.Last())
}

func FuzzParseMark(f *testing.F) {
	seedForeign(f, "1001", " 5 ")
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := parseMark(v)
		if err == nil && m < 1 {
			t.Fatalf("parseMark(%q) = %d", v, m)
		}
	})
}

// Marks are raised, never lowered, by concurrent writers; one written over
// is reported, and the next record repairs it.
func TestMarks(t *testing.T) {
	s := natstest.Server(t)
	js := newJS(t, s)
	ctx := context.Background()
	m, err := OpenMarks(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Mark(ctx, "order"); err != nil || got != 0 {
		t.Fatalf("no mark: %d, %v", got, err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				if err := m.Record(ctx, "order", int64(1000*j+i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := m.Record(ctx, "order", 5); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Mark(ctx, "order"); err != nil || got != 19007 {
		t.Fatalf("mark %d, %v; want the highest recorded, 19007", got, err)
	}
	b, _ := js.KeyValue(ctx, MarksBucket)
	b.Put(ctx, "order", []byte(testtool.ForeignValues[0]))
	if _, err := m.Mark(ctx, "order"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a corrupt mark: %v", err)
	}
	if err := m.Record(ctx, "order", 20000); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Mark(ctx, "order"); got != 20000 {
		t.Fatalf("after a record over the corrupt mark: %d", got)
	}

	// An allocation that did not commit lowers the mark it raised back to
	// what it was; one that committed keeps it, and so does one recorded
	// over since.
	if err := m.Record(ctx, "order", 21000); err != nil {
		t.Fatal(err)
	}
	m.Settle("order", 21000, false)
	if got, _ := m.Mark(ctx, "order"); got != 20000 {
		t.Fatalf("the mark %d after an allocation that did not commit, want 20000 again", got)
	}
	if err := m.Record(ctx, "order", 21000); err != nil {
		t.Fatal(err)
	}
	m.Settle("order", 21000, true)
	if err := m.Record(ctx, "order", 22000); err != nil {
		t.Fatal(err)
	}
	if err := m.Record(ctx, "order", 23000); err != nil { // another allocation, recorded over
		t.Fatal(err)
	}
	m.Settle("order", 22000, false)
	if got, _ := m.Mark(ctx, "order"); got != 23000 {
		t.Fatalf("the mark %d after an allocation recorded over one that did not commit, want 23000", got)
	}
}

// A layout is unused bits, time, worker and sequence bits adding up to 64.
func TestValidLayout(t *testing.T) {
	for l, want := range map[string]bool{
		"1+41+10+12": true, "11+41+4+8": true, "1+39+8+16": true,
		"0+41+10+13": false, "1+41+10+11": false, "js53": false, "11+41+4+08": false, "+41+10+13": false, "1+41+10+12+0": false,
	} {
		if validLayout(l) != want {
			t.Errorf("validLayout(%q) = %v", l, !want)
		}
	}
}

// A contract's region is "<name>/<id 0-7>" or absent.
func TestContractRegion(t *testing.T) {
	base := `{"epoch":1288834974657,"layout":"1+41+10+12","worker_ids":"128-255","segments":"jetstream-kv:x","by":"v","at":"2026-01-01T00:00:00Z"`
	for region, ok := range map[string]bool{"": true, "east/1": true, "eu-west_2/7": true, "east": false, "east/8": false, "east/-1": false, "e.st/1": false, "/1": false} {
		v := base + `}`
		if region != "" {
			v = base + `,"region":"` + region + `"}`
		}
		c, err := decodeContract([]byte(v))
		if (err == nil) != ok || err == nil && c.Region != region {
			t.Errorf("region %q: %+v, %v; want accepted %v", region, c, err, ok)
		}
	}
}
