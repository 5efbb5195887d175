package ordercheck

import (
	"sync"
	"sync/atomic"
	"time"
)

// Checker checks the order of replies online, across every goroutine of a
// process. It is safe for concurrent use and takes no lock unless it finds
// a violation.
//
// Every send and every receipt replaces one pointer by compare-and-swap:
// the new event carries its time, later than every event before it, and
// the highest ID received so far. Stamping the time and reading (at a send)
// or raising (at a receipt) the highest ID are so one step, and the stamps
// are the order of those steps. An atomic maximum raised at receipt and
// read at send, with times read from the clock beside it, would not be:
// a goroutine paused between its clock read and its atomic operation makes
// the times say "received before that send" of a reply the send did not
// see, or the reverse, so an offline check of the times would disagree.
type Checker struct {
	start time.Time
	last  atomic.Pointer[event]

	mu       sync.Mutex // guards the violations: taken only on one
	n        int64
	examples []Violation
}

// event is the latest send or receipt.
type event struct {
	at      int64    // ns since start, greater than every earlier event's
	top     *Request // the reply with the highest ID received so far; nil before the first
	replies int64    // replies received so far
}

// NewChecker returns a checker whose times count from start, which should
// carry a monotonic clock reading (as time.Now's does).
func NewChecker(start time.Time) *Checker {
	c := &Checker{start: start}
	c.last.Store(&event{at: -1})
	return c
}

// Sent is a request's send as a Checker stamped it.
type Sent struct {
	At  int64    // ns since the start
	top *Request // the reply with the highest ID received before At
}

// Send stamps a request's send; call it just before the request goes out,
// so that the stamp is no later than the send.
func (c *Checker) Send() Sent {
	e := &event{}
	now := c.Now()
	for {
		old := c.last.Load()
		*e = event{at: max(now, old.at+1), top: old.top, replies: old.replies}
		if c.last.CompareAndSwap(old, e) {
			return Sent{At: e.at, top: old.top}
		}
	}
}

// Receive stamps the receipt of the reply to the request sent at s, whose
// lowest and highest IDs are low and high; call it after the reply is in
// hand. It counts a violation when low is not above every ID received
// before s, and returns the request as stamped.
func (c *Checker) Receive(s Sent, worker int, low, high int64) Request {
	r := &Request{Worker: worker, Sent: s.At, Low: low, High: high}
	e := &event{}
	now := c.Now()
	for {
		old := c.last.Load()
		*e = event{at: max(now, old.at+1), top: old.top, replies: old.replies + 1}
		if e.top == nil || high > e.top.High {
			e.top = r
		}
		// Written before the swap publishes r; a failed swap published nothing.
		r.Received = e.at
		if c.last.CompareAndSwap(old, e) {
			break
		}
	}
	if s.top != nil && low <= s.top.High {
		c.mu.Lock()
		c.n++
		c.examples = keepExample(c.examples, Violation{Request: *r, Prior: *s.top})
		c.mu.Unlock()
	}
	return *r
}

// Now returns the time since the start, on the clock of the stamps but not
// ordered with them: for events the check does not order, such as errors.
func (c *Checker) Now() int64 { return int64(time.Since(c.start)) }

// Result returns what the checker found so far.
func (c *Checker) Result() Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Result{Replies: c.last.Load().replies, Violations: c.n, Examples: append([]Violation(nil), c.examples...)}
}
