package segment

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// RateError is the error of a take beyond Options.RateLimit (it wraps
// ErrRateLimited): when the IDs asked for will be there, or, for a take
// larger than the burst, the most one take may ask for, since waiting
// cannot serve it.
type RateError struct {
	Tag   string
	N     int64         // IDs asked for
	Limit float64       // IDs a second (Options.RateLimit)
	Burst int64         // IDs at once (Options.RateBurst)
	Wait  time.Duration // when to ask again; 0 when N > Burst
}

func (e *RateError) Error() string {
	if e.N > e.Burst {
		return fmt.Sprintf("%v: tag %q: %d IDs at once are more than this vendor hands out of a tag in one go: ask for at most %d (LEAF_SEGMENT_RATE_BURST; waiting does not help)",
			ErrRateLimited, e.Tag, e.N, e.Burst)
	}
	return fmt.Sprintf("%v: tag %q: this vendor hands out at most %g IDs a second of it, %d at once (LEAF_SEGMENT_RATE_LIMIT, LEAF_SEGMENT_RATE_BURST); ask again in %v",
		ErrRateLimited, e.Tag, e.Limit, e.Burst, e.Wait)
}

func (e *RateError) Unwrap() error { return ErrRateLimited }

// RetryAfter is how long to wait before asking again; 0 when waiting
// cannot help.
func (e *RateError) RetryAfter() time.Duration { return e.Wait }

// MaxCount is the most IDs one take may ask for.
func (e *RateError) MaxCount() int64 { return e.Burst }

// admitted is IDs taken from a tag's budget: refund gives them back.
type admitted struct {
	r  *rate.Reservation
	at time.Time // when they were taken
}

// admit takes n IDs from b's budget under Options.RateLimit, or says when
// they will be there. b.mu is held.
func (a *Allocator) admit(b *buffer, n int64) (admitted, error) {
	if a.opt.RateLimit == 0 {
		return admitted{}, nil
	}
	if b.limiter == nil {
		b.limiter = rate.NewLimiter(rate.Limit(a.opt.RateLimit), int(a.opt.RateBurst))
	}
	e := &RateError{Tag: b.tag, N: n, Limit: a.opt.RateLimit, Burst: int64(a.opt.RateBurst)}
	if n > e.Burst {
		return admitted{}, e
	}
	now := a.opt.Now()
	r := b.limiter.ReserveN(now, int(n))
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		// Whole milliseconds, rounded up: asking again after this finds them.
		e.Wait = time.Duration(math.Ceil(float64(d)/float64(time.Millisecond))) * time.Millisecond
		return admitted{}, e
	}
	return admitted{r, now}, nil
}

// refund gives back IDs admitted for a take that handed none out. The
// reservation is cancelled as of when it was made: the limiter then
// restores its tokens less those that refilled since, and counts that
// refill again, so that exactly n come back.
func (a *Allocator) refund(ad admitted) {
	if ad.r != nil {
		ad.r.CancelAt(ad.at)
	}
}
