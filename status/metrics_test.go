package status

import (
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
