// Package ids defines Range, a run of consecutive IDs: the unit in which the
// snowflake generator, the segment allocator, the wire (the ranges
// encoding) and the Go client hand IDs out, so that a batch of any size
// costs the same few words wherever it travels.
package ids

// Range is a run of consecutive IDs: First, First+1, ..., First+Count-1.
type Range struct {
	First, Count int64
}

// Last returns the run's last ID.
func (r Range) Last() int64 { return r.First + r.Count - 1 }

// Count returns how many IDs rs holds.
func Count(rs []Range) int64 {
	var n int64
	for _, r := range rs {
		n += r.Count
	}
	return n
}
