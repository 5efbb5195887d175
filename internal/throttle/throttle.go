// Package throttle keeps a log line that a flood can trigger (a request
// dropped, an internal error) from flooding the log: one line per interval
// gets through, carrying the count of those held back since the last.
//
// The interval is a token bucket of golang.org/x/time/rate, asked at an
// explicit time, so that a test's clock drives it as well as the system's.
package throttle

import (
	"cmp"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultEvery is the interval of a Lines whose Every is zero.
const DefaultEvery = 10 * time.Second

// Lines lets one log line through per Every. The zero value is ready, with
// DefaultEvery; a Lines must not be copied after first use.
type Lines struct {
	Every time.Duration

	mu   sync.Mutex
	lim  *rate.Limiter // made on first use
	held int           // lines held back since the last let through
}

// Allow reports whether the line due at now may be logged and, when it
// may, how many were held back since the last one let through.
func (l *Lines) Allow(now time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim == nil {
		l.lim = rate.NewLimiter(rate.Every(cmp.Or(l.Every, DefaultEvery)), 1)
	}
	if !l.lim.AllowN(now, 1) {
		l.held++
		return 0, false
	}
	held, l.held = l.held, 0
	return held, true
}
