package main

import "math/bits"

// histogram counts values (nanoseconds) in log-linear buckets, as HDR
// histograms do: below 2*sub each value has its own bucket; above, each
// power of two is split into sub buckets, so a bucket is under 1/sub = 0.8%
// wide relative to its values. Recording is an index and an increment.
type histogram struct {
	counts [(64 - subBits) * sub]uint64
	total  uint64
	max    uint64
}

const (
	subBits = 7
	sub     = 1 << subBits
)

func bucket(v uint64) int {
	if v < sub {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift*sub + int(v>>shift)
}

// highest is the largest value that falls in bucket i.
func highest(i int) uint64 {
	if i < sub {
		return uint64(i)
	}
	shift := i/sub - 1
	low := uint64(i-shift*sub) << shift
	return low + (1 << shift) - 1
}

func (h *histogram) record(v uint64) {
	h.counts[bucket(v)]++
	h.total++
	h.max = max(h.max, v)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the value at or below which a fraction q of the
// recorded values fall, to the bucket's resolution.
func (h *histogram) quantile(q float64) uint64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total) + 0.5)
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(highest(i), h.max)
		}
	}
	return h.max
}
