package vending

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
)

// A snowflake batch larger than a millisecond's IDs waits for the clock: a
// batch of 10,000 js53 IDs (256 a millisecond) takes 40 ms of the
// generator. Served on the endpoint's one goroutine, it would hold up
// every request behind it, and four clients of such batches took a
// single ID's median from 0.2 to 147 ms. So the bulk lane serves them
// apart: one batch at a time, in arrival order, in chunks of at most
// seven eighths of a millisecond's IDs, so that requests for a
// millisecond's worth or fewer, answered inline, find IDs and the
// generator between chunks. Batches beyond maxBulkQueued wait for no
// one: a 429 says when to ask again.

// maxBulkQueued bounds the large batches waiting at one vendor: a few
// hundred milliseconds of the generator at most.
const maxBulkQueued = 8

// bulkLane is the queue of large snowflake batches.
type bulkLane struct {
	turn      chan struct{} // held by the batch being generated
	queued    atomic.Int64  // batches waiting or being generated
	queuedIDs atomic.Int64  // their IDs
	perMs     int           // IDs a millisecond of one worker ID
}

func newBulkLane(perMs int) *bulkLane {
	return &bulkLane{turn: make(chan struct{}, 1), perMs: perMs}
}

// large reports whether a batch of n is served in the lane.
func (l *bulkLane) large(n int) bool { return n > l.perMs }

// BulkBusyError is the 429 of a large snowflake batch that finds the
// lane full.
type BulkBusyError struct {
	Queued int
	Wait   time.Duration
	Inline int // the largest batch served without waiting in line
}

func (e *BulkBusyError) Error() string {
	return fmt.Sprintf("%v: %d large snowflake batches are waiting at this vendor: ask again in %v, or ask for at most %d IDs at once, which are served without waiting in line",
		ErrTooManyRequests, e.Queued, e.Wait, e.Inline)
}

func (e *BulkBusyError) Unwrap() error { return ErrTooManyRequests }

// RetryAfter is when the batches waiting should be served.
func (e *BulkBusyError) RetryAfter() time.Duration { return e.Wait }

// MaxCount is 0: a larger batch is not refused, only made to wait.
func (e *BulkBusyError) MaxCount() int64 { return 0 }

// enter queues a batch of n, or says when to ask again.
func (l *bulkLane) enter(n int) error {
	if l.queued.Add(1) > maxBulkQueued {
		l.queued.Add(-1)
		ms := l.queuedIDs.Load()/int64(l.perMs) + 1
		return &BulkBusyError{Queued: maxBulkQueued, Wait: time.Duration(ms) * time.Millisecond, Inline: l.perMs}
	}
	l.queuedIDs.Add(int64(n))
	return nil
}

// leave ends a batch of n entered.
func (l *bulkLane) leave(n int) {
	l.queuedIDs.Add(-int64(n))
	l.queued.Add(-1)
}

// take appends n IDs from src to dst in chunks, in its turn.
func (l *bulkLane) take(src Snowflake, dst []ids.Range, n int, stop <-chan struct{}) ([]ids.Range, error) {
	select {
	case l.turn <- struct{}{}:
	case <-stop:
		return dst, fmt.Errorf("%w: this vendor is stopping", ErrUnavailable)
	}
	defer func() { <-l.turn }()
	orig := len(dst)
	chunk := max(1, l.perMs-l.perMs/8)
	for n > 0 {
		k := min(n, chunk)
		var err error
		if dst, err = src.NextRanges(dst, k); err != nil {
			return dst[:orig], err
		}
		n -= k
	}
	return dst, nil
}

// bulk serves a large snowflake batch in the lane, after the handler has
// returned.
func (h *snowflakeHandler) bulk(req micro.Request, enc string, n int, c charge, start time.Time) {
	lane := h.s.bulk
	if err := lane.enter(n); err != nil {
		c.refund()
		h.s.fail(req, ModeSnowflake, "", err, start)
		return
	}
	h.s.later(req, func(req micro.Request) {
		defer lane.leave(n)
		rs, err := lane.take(h.src, nil, n, h.s.ctx.Done())
		if err != nil {
			c.refund()
			h.s.fail(req, ModeSnowflake, "", err, start)
			return
		}
		var out []byte
		reply(h.s, req, &out, enc, ModeSnowflake, "", false, rs, start)
	})
}
