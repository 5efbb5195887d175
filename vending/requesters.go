package vending

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"
	"golang.org/x/time/rate"

	"github.com/leaf-nats/leaf/segment"
)

// RequestInfoHeader is where NATS says who sent a request that crossed a
// service import: the account, and with the import's share: true the user
// too. The server sets it on the way in, over whatever the requester
// wrote, so in the shipped configuration (applications in accounts of
// their own) it names the requester. Inside the vendors' own account a
// user can write it: give applications no users there.
const RequestInfoHeader = "Nats-Request-Info"

// Requester names who sent req, as far as NATS says: "acc/user" from
// RequestInfoHeader, else the reply subject's inbox (one connection of
// nats.go, which a requester may vary at will: a weak name).
func Requester(req micro.Request) string {
	if info := req.Headers().Get(RequestInfoHeader); info != "" {
		var ci struct {
			Account string `json:"acc"`
			User    string `json:"user"`
		}
		if json.Unmarshal([]byte(info), &ci) == nil && ci.Account != "" {
			return ci.Account + "/" + ci.User
		}
	}
	reply := req.Reply()
	if i := strings.LastIndexByte(reply, '.'); i > 0 {
		return reply[:i]
	}
	return reply
}

// maxRequesters bounds the requesters a vendor keeps a budget for; past it
// the idle ones are dropped, and if none is idle, newcomers share one.
const maxRequesters = 10_000

// overflow is the requester newcomers share while every budget is busy.
const overflow = "(too many requesters)"

// requesters keeps each requester's budget of IDs under
// Config.RequesterRateLimit.
type requesters struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	by    map[string]*rate.Limiter
	swept time.Time // sweeps are a second apart at least: each reads every budget
}

func newRequesters(limit float64, burst int) *requesters {
	if limit == 0 {
		return nil
	}
	if burst == 0 {
		burst = int(max(1, math.Ceil(limit)))
	}
	return &requesters{limit: rate.Limit(limit), burst: burst, by: map[string]*rate.Limiter{}}
}

// RequesterRateError is the 429 of a request beyond its requester's
// budget.
type RequesterRateError struct {
	Requester string
	N         int64
	Limit     float64
	Burst     int64
	Wait      time.Duration // 0 when N > Burst: waiting cannot help
}

func (e *RequesterRateError) Error() string {
	if e.N > e.Burst {
		return fmt.Sprintf("%v: %d IDs at once are more than one requester (%s) may ask this vendor for: ask for at most %d (LEAF_REQUESTER_RATE_BURST; waiting does not help)",
			ErrTooManyRequests, e.N, e.Requester, e.Burst)
	}
	return fmt.Sprintf("%v: this vendor hands one requester (%s) at most %g IDs a second, %d at once (LEAF_REQUESTER_RATE_LIMIT, LEAF_REQUESTER_RATE_BURST); ask again in %v",
		ErrTooManyRequests, e.Requester, e.Limit, e.Burst, e.Wait)
}

func (e *RequesterRateError) Unwrap() error { return ErrTooManyRequests }

// RetryAfter is when to ask again; 0 when waiting cannot help.
func (e *RequesterRateError) RetryAfter() time.Duration { return e.Wait }

// MaxCount is the most IDs one request may ask for.
func (e *RequesterRateError) MaxCount() int64 { return e.Burst }

// charge is IDs taken from a requester's budget, given back by refund when
// the request is answered with an error (which hands out no ID).
type charge struct {
	r  *rate.Reservation
	at time.Time
}

func (c charge) refund() {
	if c.r != nil {
		c.r.CancelAt(c.at) // as of when it was made: see segment's refund
	}
}

// charge takes the IDs of a request for n from its requester's budget, or
// says when they will be there: nothing without requester limits.
func (s *Service) charge(req micro.Request, n int) (charge, error) {
	if s.reqs == nil {
		return charge{}, nil
	}
	return s.reqs.admit(Requester(req), n)
}

// admit takes n IDs from who's budget, or says when they will be there.
func (q *requesters) admit(who string, n int) (charge, error) {
	if q == nil {
		return charge{}, nil
	}
	lim := q.limiter(who)
	e := &RequesterRateError{Requester: who, N: int64(n), Limit: float64(q.limit), Burst: int64(q.burst)}
	if n > q.burst {
		return charge{}, e
	}
	now := time.Now()
	r := lim.ReserveN(now, n)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		e.Wait = time.Duration(math.Ceil(float64(d)/float64(time.Millisecond))) * time.Millisecond
		return charge{}, e
	}
	return charge{r, now}, nil
}

// limiter returns who's budget, making it if need be.
func (q *requesters) limiter(who string) *rate.Limiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if lim := q.by[who]; lim != nil {
		return lim
	}
	if now := time.Now(); len(q.by) >= maxRequesters && now.Sub(q.swept) >= time.Second {
		q.sweep(now)
		q.swept = now
	}
	if len(q.by) >= maxRequesters {
		who = overflow
		if lim := q.by[who]; lim != nil {
			return lim
		}
	}
	lim := rate.NewLimiter(q.limit, q.burst)
	q.by[who] = lim
	return lim
}

// sweep drops the budgets that are full again: their requesters asked for
// nothing for at least a burst's time. q.mu is held.
func (q *requesters) sweep(now time.Time) {
	for who, lim := range q.by {
		if lim.TokensAt(now) >= float64(q.burst) {
			delete(q.by, who)
		}
	}
}

// A request for a tag the vendor has not cached costs a store read, and
// the allocator allows a vendor 100 such reads a second, shared by every
// requester: one requester's made-up tags, hundreds a second, would use
// them up and leave another application's new tag unread (503). So each
// requester may ask for at most unknownTagRate tags a second that the
// store turned out not to have (unknownTagBurst at once); past that, its
// requests that would ask the store get 429 until its budget is back,
// while the others' are read.
const (
	unknownTagRate  = 10
	unknownTagBurst = 20
)

// UnknownTagsError is the 429 of a request that would ask the store, from
// a requester that asked for more tags the store does not have than
// unknownTagRate allows.
type UnknownTagsError struct {
	Requester string
	Wait      time.Duration
}

func (e *UnknownTagsError) Error() string {
	return fmt.Sprintf("%v: %s asked this vendor for more than %d tags a second that do not exist: ask again in %v, and check the tag names (vendor tags list)",
		ErrTooManyRequests, e.Requester, unknownTagRate, e.Wait)
}

func (e *UnknownTagsError) Unwrap() error { return ErrTooManyRequests }

// RetryAfter is when the requester's budget of unknown tags is back.
func (e *UnknownTagsError) RetryAfter() time.Duration { return e.Wait }

// MaxCount is 0: the count asked for does not matter.
func (e *UnknownTagsError) MaxCount() int64 { return 0 }

// owed is how long until who has one in its budget: 0 when it has.
func (q *requesters) owed(who string) time.Duration {
	tokens := q.limiter(who).TokensAt(time.Now())
	if tokens >= 1 {
		return 0
	}
	ms := math.Ceil((1 - tokens) / float64(q.limit) * 1000)
	return time.Duration(ms) * time.Millisecond
}

// spend takes one from who's budget, into debt if it has none: requests
// that were let through together may all turn out to be unknown.
func (q *requesters) spend(who string) {
	q.limiter(who).ReserveN(time.Now(), 1)
}

// mayAskStore refuses a request that would ask the store, from a
// requester that asked for too many tags the store does not have.
func (s *Service) mayAskStore(req micro.Request) error {
	who := Requester(req)
	if d := s.unknown.owed(who); d > 0 {
		return &UnknownTagsError{Requester: who, Wait: d}
	}
	return nil
}

// askedUnknown charges req's requester for a tag the store turned out not
// to have.
func (s *Service) askedUnknown(req micro.Request, err error) {
	if errors.Is(err, segment.ErrUnknownTag) {
		s.unknown.spend(Requester(req))
	}
}
