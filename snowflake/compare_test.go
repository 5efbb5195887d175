package snowflake_test

import (
	"testing"
	"time"

	bwmarrin "github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake/v2"

	"github.com/leaf-nats/leaf/snowflake"
)

// The benchmarks below put this package's generator next to two peers, one
// ID per call, with the settings each ships with. All three are limited by
// their sequence space, so ns/op is the time per ID at saturation: ours and
// bwmarrin/snowflake give 4096 IDs per millisecond (~244 ns/ID), sonyflake
// 256 per 10 ms (~39 µs/ID). The "ids/s" metric says it directly. bench/run.sh
// runs them; bench/README.md has the latest numbers.

func BenchmarkCompareLeafNext(b *testing.B) {
	g, err := snowflake.New(snowflake.Settings{WorkerID: 1})
	if err != nil {
		b.Fatal(err)
	}
	benchOneByOne(b, g.Next)
}

// BenchmarkCompareLeafNextN1000 is the batch path the service uses: the
// lock is taken once per request, not once per ID.
func BenchmarkCompareLeafNextN1000(b *testing.B) {
	g, err := snowflake.New(snowflake.Settings{WorkerID: 1})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]int64, 0, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if buf, err = g.NextN(buf[:0], 1000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "ids/s")
}

func BenchmarkCompareBwmarrin(b *testing.B) {
	n, err := bwmarrin.NewNode(1)
	if err != nil {
		b.Fatal(err)
	}
	benchOneByOne(b, func() (int64, error) { return n.Generate().Int64(), nil })
}

func BenchmarkCompareSonyflake(b *testing.B) { benchSonyflake(b, 0) }

// BenchmarkCompareSonyflake1ms gives sonyflake a 1 ms time unit, its
// finest: 256 IDs per millisecond.
func BenchmarkCompareSonyflake1ms(b *testing.B) { benchSonyflake(b, time.Millisecond) }

func benchSonyflake(b *testing.B, unit time.Duration) {
	sf, err := sonyflake.New(sonyflake.Settings{
		TimeUnit:  unit,                                  // 0: its default, 10 ms
		MachineID: func() (int, error) { return 1, nil }, // the default needs a private IP
	})
	if err != nil {
		b.Fatal(err)
	}
	benchOneByOne(b, sf.NextID)
}

// benchOneByOne takes one ID per iteration and reports the rate.
func benchOneByOne(b *testing.B, next func() (int64, error)) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := next(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}
