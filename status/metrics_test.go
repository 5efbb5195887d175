package status

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/prometheus/client_golang/prometheus"
)

// Observe runs once per request: it must not allocate.
func BenchmarkObserve(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	b.ReportAllocs()
	for b.Loop() {
		m.Observe("segment", "order", 200, 1, 30*time.Microsecond)
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.Observe("snowflake", "", 200, 1, time.Microsecond) // resolves the labels once
	if n := testing.AllocsPerRun(1000, func() { m.Observe("snowflake", "", 200, 1, time.Microsecond) }); n != 0 {
		t.Fatalf("Observe allocates %v times per request", n)
	}
}

// A vendor serving many tags keeps its scrape small: the first MetricTags
// tags asked for have series of their own, the others add up under
// OtherTags, and nothing is lost from the totals.
func TestTagSeriesAreCapped(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	const tags = 3 * MetricTags
	for i := range tags {
		m.Observe("segment", fmt.Sprintf("t%05d", i), 200, 2, time.Microsecond)
	}
	m.Observe("segment", "t00000", 200, 2, time.Microsecond) // labelled before: stays so
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "leaf_ids_total" {
			continue
		}
		var total float64
		other := false
		for _, s := range f.GetMetric() {
			total += s.GetCounter().GetValue()
			for _, l := range s.GetLabel() {
				other = other || l.GetName() == "tag" && l.GetValue() == OtherTags
			}
		}
		if len(f.GetMetric()) != MetricTags+1 || !other || total != 2*(tags+1) {
			t.Fatalf("leaf_ids_total: %d series (want %d, one of them %s), %v IDs (want %d)", len(f.GetMetric()), MetricTags+1, OtherTags, total, 2*(tags+1))
		}
		if !m.Labelled("t00000") || m.Labelled(fmt.Sprintf("t%05d", tags-1)) {
			t.Fatal("the first tags asked for are not the labelled ones")
		}
		return
	}
	t.Fatal("no leaf_ids_total")
}

// The tags without series of their own are one series in each per-tag
// gauge: sums where they add up, the worst where they do not.
func TestPerTagAddsUpTheOthers(t *testing.T) {
	tags := []tagStatus{
		{Tag: "a", Current: segRange{0, 10, 100}, NextReady: true, Step: 100, Loads: 3, Runway: 1000, Allocated: 300},
		{Tag: "b", Current: segRange{0, 90, 100}, NextReady: false, Step: 50, Loads: 2, Runway: 500, LastLoadTook: time.Second, Allocated: 100},
		{Tag: "c", Current: segRange{0, 0, 10}, NextReady: true, Step: 10, Loads: 1, Runway: -1},
	}
	got := perTag(tags, []string{"c"})
	want := []tagStatus{tags[2], {Tag: OtherTags, Current: segRange{0, 0, 100}, Step: 50, Loads: 5, Runway: 500, LastLoadTook: time.Second, Allocated: 400}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("perTag:\n got %+v\nwant %+v", got, want)
	}
}

// listAllocator is a vendor's tags, as they are.
type listAllocator []segment.TagStatus

var _ Allocator = listAllocator(nil)

func (a listAllocator) Snapshot() []segment.TagStatus  { return a }
func (listAllocator) StoreUp() bool                    { return true }
func (a listAllocator) Known() int                     { return len(a) }
func (listAllocator) Rewinds() (int64, segment.Rewind) { return 0, segment.Rewind{} }

// The tags that get series of their own are those that matter, whenever
// they were first asked for: the closest to running out and the busiest,
// among thrice MetricTags tags whose first MetricTags asked for are quiet
// and far from the end. Their request counts get series too, so that their
// runway can be divided by their rate.
func TestTagsThatMatterHaveSeries(t *testing.T) {
	const tags = 3 * MetricTags
	m := NewMetrics(prometheus.NewRegistry())
	alloc := make(listAllocator, tags)
	for i := range alloc {
		tag := fmt.Sprintf("t%05d", i)
		alloc[i] = segment.TagStatus{Tag: tag, Current: segment.Segment{Start: 1, Value: 1, End: 11}, Step: 10, Loads: 1, High: 11, Allocated: 10}
		if i >= MetricTags { // busier and further on than the first asked for
			alloc[i].High, alloc[i].Allocated = int64(1000+i), 20
		}
		m.Observe("segment", tag, 200, 1, time.Microsecond) // the first MetricTags take the request labels
	}
	quiet := alloc[2*MetricTags].Tag // neither among the least runway nor the busiest
	late, busy := alloc[tags-1].Tag, alloc[tags-2].Tag
	alloc[tags-1].High = math.MaxInt64 - 5 // 5 IDs left
	alloc[tags-2].Allocated, alloc[tags-2].Loads = 1e9, 1e5

	reg := prometheus.NewRegistry()
	reg.MustRegister(NewState(Sources{Instance: "test", Keeper: fakeKeeper{}, Allocator: alloc, Store: fakeRows{}, Guard: fakeGuard{},
		Clock: snowflake.SystemClock{}, Connected: func() bool { return true }, Requests: m}).Collector())
	got := seriesByTag(t, reg, "leaf_segment_runway_ids", "leaf_segment_loads_total")
	if len(got["leaf_segment_runway_ids"]) != MetricTags+1 || got["leaf_segment_runway_ids"][late] != 5 {
		t.Fatalf("leaf_segment_runway_ids: %d series, %s: %v (want %d series, %s: 5)",
			len(got["leaf_segment_runway_ids"]), late, got["leaf_segment_runway_ids"][late], MetricTags+1, late)
	}
	if got["leaf_segment_loads_total"][busy] != 1e5 {
		t.Fatalf("leaf_segment_loads_total: %s has %v, want 1e5", busy, got["leaf_segment_loads_total"][busy])
	}
	for _, tag := range []string{alloc[0].Tag, quiet} {
		if _, ok := got["leaf_segment_loads_total"][tag]; ok {
			t.Fatalf("leaf_segment_loads_total: %s has a series of its own", tag)
		}
	}
	if !m.Labelled(late) || !m.Labelled(busy) || m.Labelled(quiet) {
		t.Fatalf("request series: %s %v, %s %v (want both), %s %v (want none)", late, m.Labelled(late), busy, m.Labelled(busy), quiet, m.Labelled(quiet))
	}
}

// seriesByTag gathers reg and returns each named metric's value by tag.
func seriesByTag(t *testing.T, reg *prometheus.Registry, names ...string) map[string]map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range families {
		if !slices.Contains(names, f.GetName()) {
			continue
		}
		byTag := map[string]float64{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "tag" {
					byTag[l.GetValue()] = s.GetGauge().GetValue() + s.GetCounter().GetValue()
				}
			}
		}
		out[f.GetName()] = byTag
	}
	return out
}
