// Package backoff is the wait between the tries of a retry loop: it starts
// at a minimum and doubles after each failure up to a maximum, and starts
// over after a success. It reads no clock and sleeps nowhere, so a loop
// that sleeps on a timer and a state machine stepped in simulated time
// (lease.Machine) both use it.
package backoff

import "time"

// Backoff is the wait before each next try. The zero value waits Min (or
// DefaultMin) first; Next doubles the wait that follows, up to Max (or
// DefaultMax); Reset starts over.
type Backoff struct {
	Min, Max time.Duration

	next time.Duration // the wait Next returns next; 0 before the first
}

// Defaults for a zero Min and Max.
const (
	DefaultMin = 100 * time.Millisecond
	DefaultMax = 10 * time.Second
)

// Next returns the wait before the next try, and doubles the one after.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.bounds()
	if b.next < lo {
		b.next = lo
	}
	d := min(b.next, hi)
	b.next = min(2*d, hi)
	return d
}

// Reset makes the next wait Min again: the loop succeeded.
func (b *Backoff) Reset() { b.next = 0 }

func (b *Backoff) bounds() (lo, hi time.Duration) {
	lo, hi = b.Min, b.Max
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi <= 0 {
		hi = DefaultMax
	}
	return lo, max(lo, hi)
}
