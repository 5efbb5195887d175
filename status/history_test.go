package status

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// fakeAllocator has tags whose current segments are [0, 100), value
// at left[tag] below the end, in a store that is up unless down; it
// counts the times its tags are read.
type fakeAllocator struct {
	left      map[string]int64
	down      atomic.Bool
	snapshots atomic.Int64
}

var _ Allocator = (*fakeAllocator)(nil)

func (a *fakeAllocator) Snapshot() []segment.TagStatus {
	a.snapshots.Add(1)
	var out []segment.TagStatus
	for tag, left := range a.left {
		out = append(out, segment.TagStatus{Tag: tag, Current: segment.Segment{Start: 0, Value: 100 - left, End: 100}})
	}
	return out
}
func (a *fakeAllocator) StoreUp() bool                    { return !a.down.Load() }
func (a *fakeAllocator) Known() int                       { return len(a.left) }
func (a *fakeAllocator) Rewinds() (int64, segment.Rewind) { return 0, segment.Rewind{} }

// newTestHistory returns a History of points samples, a second apart from
// start, over fresh Metrics; nothing samples but the test.
func newTestHistory(t *testing.T, points int, alloc Allocator) (*History, *Metrics, *time.Time) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	h := newHistory(HistoryConfig{Requests: m, Allocator: alloc, Interval: time.Second, Points: points, Now: func() time.Time { return now }})
	h.sample(now)
	return h, m, &now
}

// The ring keeps the last Points samples, oldest first, each with its
// counts since the one before.
func TestHistoryRingIsBounded(t *testing.T) {
	h, m, now := newTestHistory(t, 5, nil)
	for i := 1; i <= 20; i++ {
		m.Observe(vending.ModeSnowflake, "", vending.CodeOK, i, time.Microsecond)
		*now = now.Add(time.Second)
		h.sample(*now)
	}
	v := h.view()
	if len(v.Times) != 5 || len(h.ring) != 5 || len(v.Series) != 1 {
		t.Fatalf("after 20 samples of 5: %d times, %d in the ring, %d series", len(v.Times), len(h.ring), len(v.Series))
	}
	s := v.Series[0]
	for j := range v.Times {
		if want := int64(16 + j); s.IDs[j] != want || s.Requests[j] != 1 || v.Spans[j] != time.Second {
			t.Fatalf("sample %d: %d IDs in %d requests over %v; want %d in 1 over 1s", j, s.IDs[j], s.Requests[j], v.Spans[j], want)
		}
		if j > 0 && !v.Times[j].After(v.Times[j-1]) {
			t.Fatalf("times out of order: %v", v.Times)
		}
	}
	if s.Name != "snowflake" || !v.Times[4].Equal(*now) {
		t.Fatalf("series %q, last sample at %v; want snowflake at %v", s.Name, v.Times[4], *now)
	}
}

// With more series than HistorySeries, the ones with the most IDs are kept,
// ordered by IDs, and the rest are added up as OtherSeries; no series is a
// bare number, and each segment tag kept says how much of its segment is
// left.
func TestHistoryKeepsTopSeries(t *testing.T) {
	alloc := &fakeAllocator{left: map[string]int64{}}
	h, m, now := newTestHistory(t, 60, alloc)
	for i := range 20 {
		tag := fmt.Sprintf("tag-%02d", i)
		alloc.left[tag] = int64(i)
		m.Observe(vending.ModeSegment, tag, vending.CodeOK, 100+i, time.Millisecond)
	}
	m.Observe(vending.ModeSegment, "", 404, 0, time.Millisecond)
	m.Observe(vending.ModeSnowflake, "", vending.CodeOK, 1000, time.Millisecond)
	for range 3 {
		*now = now.Add(time.Second)
		h.sample(*now)
	}
	v := h.view()
	if len(v.Series) != HistorySeries+1 {
		t.Fatalf("%d series; want %d and %s", len(v.Series), HistorySeries, OtherSeries)
	}
	want := []string{"snowflake", "segment tag-19", "segment tag-18", "segment tag-17", "segment tag-16", "segment tag-15", "segment tag-14", "segment tag-13", OtherSeries}
	var otherIDs, otherReqs, otherErrs int64
	for i := range 13 {
		otherIDs += int64(100 + i)
		otherReqs++
	}
	otherReqs++ // the 404
	otherErrs++
	for i, s := range v.Series {
		if s.Name != want[i] {
			t.Fatalf("series %d is %q; want %q", i, s.Name, want[i])
		}
		if len(s.IDs) != 3 || s.Left[1] != -1 && s.Mode != vending.ModeSegment {
			t.Fatalf("%s: %d values, left %v", s.Name, len(s.IDs), s.Left)
		}
	}
	if o := v.Series[HistorySeries]; o.IDs[0] != otherIDs || o.Requests[0] != otherReqs || o.Errors[0] != otherErrs || o.Left[0] != -1 {
		t.Fatalf("%s: %d IDs, %d requests, %d errors, left %v; want %d, %d, %d, -1", OtherSeries, o.IDs[0], o.Requests[0], o.Errors[0], o.Left[0], otherIDs, otherReqs, otherErrs)
	}
	if s := v.Series[1]; s.Left[0] != 19 || s.IDs[1] != 0 || s.Requests[1] != 0 {
		t.Fatalf("%s: left %v, IDs %v; want 19%% left and no IDs after the first sample", s.Name, s.Left, s.IDs)
	}
	for _, p := range h.ring {
		if len(p.series) > HistorySeries+1 {
			t.Fatalf("a sample holds %d series", len(p.series))
		}
	}
}

// /history.json serves the bounded series, and the sampler stops at Close.
func TestServerServesHistory(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	for i := range 1000 {
		m.Observe(vending.ModeSegment, fmt.Sprintf("tag-%04d", i), vending.CodeOK, 1+i, time.Microsecond)
	}
	hist := OpenHistory(HistoryConfig{Requests: m, Allocator: &fakeAllocator{}, Interval: 10 * time.Millisecond})
	hs, err := OpenServer(ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close(context.Background()) })
	hs.Serve(Handlers{State: &State{}, Registry: prometheus.NewRegistry(), Peers: &StatsAsker{}, History: hist})
	var v historyView
	deadline := time.Now().Add(5 * time.Second)
	for len(v.Times) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no samples served within 5 s: %+v", v)
		}
		m.Observe(vending.ModeSegment, fmt.Sprintf("tag-%04d", time.Now().Nanosecond()%1000), vending.CodeOK, 1, time.Microsecond)
		res, err := http.Get("http://" + hs.Addr() + "/history.json")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("/history.json: %s", res.Status)
		}
		err = json.NewDecoder(res.Body).Decode(&v)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := hist.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(v.Series) > HistorySeries+1 || v.Interval != 10*time.Millisecond || v.Window != 600*time.Millisecond {
		t.Fatalf("served %d series, interval %v, window %v", len(v.Series), v.Interval, v.Window)
	}
	for _, s := range v.Series {
		if len(s.IDs) != len(v.Times) || len(s.Left) != len(v.Times) {
			t.Fatalf("%s: %d values for %d times", s.Name, len(s.IDs), len(v.Times))
		}
	}
}
