package segment_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
)

// BenchmarkTryTake measures the request hot path: TryTake on a warm tag,
// falling back to Take as the NATS handler does.
func BenchmarkTryTake(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			a := open(b, newFakeStore(1000, "order"), segment.Options{Now: time.Now})
			dst := make([]int64, 0, n)
			take(b, a, "order", 1)
			b.ReportAllocs()
			for b.Loop() {
				ids, ok, err := a.TryTake("order", dst[:0], n)
				if err == nil && !ok {
					ids, err = a.Take(context.Background(), "order", dst[:0], n)
				}
				if err != nil || len(ids) != n {
					b.Fatalf("TryTake: %d IDs, %v", len(ids), err)
				}
			}
		})
	}
}

func BenchmarkTryTakeParallel(b *testing.B) {
	a := open(b, newFakeStore(1000, "order"), segment.Options{Now: time.Now})
	take(b, a, "order", 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]int64, 0, 1)
		for pb.Next() {
			ids, ok, err := a.TryTake("order", dst[:0], 1)
			if err == nil && !ok {
				ids, err = a.Take(context.Background(), "order", dst[:0], 1)
			}
			if err != nil || len(ids) != 1 {
				b.Fatalf("TryTake: %v", err)
			}
		}
	})
}

// BenchmarkTryTakeRanges is the hot path of a range reply: the cost does
// not grow with n, since no ID is made.
func BenchmarkTryTakeRanges(b *testing.B) {
	for _, n := range []int64{1, 1000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			a := open(b, newFakeStore(1_000_000, "order"), segment.Options{Now: time.Now, MaxStep: 100_000_000})
			dst := make([]ids.Range, 0, 2)
			take(b, a, "order", 1)
			b.ReportAllocs()
			for b.Loop() {
				rs, ok, err := a.TryTakeRanges("order", dst[:0], n)
				if err == nil && !ok {
					rs, err = a.TakeRanges(context.Background(), "order", dst[:0], n)
				}
				if err != nil || len(rs) == 0 {
					b.Fatalf("TryTakeRanges: %v, %v", rs, err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(n)/b.Elapsed().Seconds(), "ids/s")
		})
	}
}
