package segment

import (
	"fmt"
	"math"
	"time"
)

// admit takes n IDs from b's budget under Options.RateLimit, or says when
// they will be there. b.mu is held.
func (a *Allocator) admit(b *buffer, n int64) error {
	rate, burst := a.opt.RateLimit, a.opt.RateBurst
	if rate == 0 {
		return nil
	}
	now := a.opt.Now()
	if b.tokensAt.IsZero() {
		b.tokens = burst
	} else if d := now.Sub(b.tokensAt); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
	}
	b.tokensAt = now
	need := float64(n)
	if need > burst {
		return fmt.Errorf("%w: tag %q: %d IDs at once are more than this vendor hands out of a tag in one go (%.0f: LEAF_SEGMENT_RATE_LIMIT, LEAF_MAX_RANGE_BATCH); ask for fewer",
			ErrRateLimited, b.tag, n, burst)
	}
	if b.tokens < need {
		wait := time.Duration(math.Ceil((need-b.tokens)/rate*1000)) * time.Millisecond
		return fmt.Errorf("%w: tag %q: this vendor hands out at most %.0f IDs a second of it (LEAF_SEGMENT_RATE_LIMIT); ask again in %v",
			ErrRateLimited, b.tag, rate, wait)
	}
	b.tokens -= need
	return nil
}

// refund gives back n IDs admitted for a take that handed none out. b.mu is
// held.
func (a *Allocator) refund(b *buffer, n int64) {
	if a.opt.RateLimit > 0 {
		b.tokens = min(a.opt.RateBurst, b.tokens+float64(n))
	}
}
