package testtool

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when told to (Add, Set) or slept on: it
// is a snowflake.Clock, and a clock for every package that takes one with
// Now alone.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d (back when d is negative).
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Sleep returns at once, the clock d later.
func (c *Clock) Sleep(d time.Duration) { c.Add(d) }
