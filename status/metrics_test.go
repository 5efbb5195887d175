package status

import (
	"fmt"
	"reflect"
	"testing"
	"time"

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

// The tags past the cap are one series in each per-tag gauge: sums where
// they add up, the worst where they do not.
func TestPerTagAddsUpTheOthers(t *testing.T) {
	tags := []tagStatus{
		{Tag: "a", Current: segRange{0, 10, 100}, NextReady: true, Step: 100, Loads: 3, Runway: 1000},
		{Tag: "b", Current: segRange{0, 90, 100}, NextReady: false, Step: 50, Loads: 2, Runway: 500, LastLoadTook: time.Second},
		{Tag: "c", Current: segRange{0, 0, 10}, NextReady: true, Step: 10, Loads: 1, Runway: -1},
	}
	got := perTag(tags, func(tag string) bool { return tag == "c" })
	want := []tagStatus{tags[2], {Tag: OtherTags, Current: segRange{0, 0, 100}, Step: 50, Loads: 5, Runway: 500, LastLoadTook: time.Second}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("perTag:\n got %+v\nwant %+v", got, want)
	}
}
