package vending

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/throttle"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
)

// Sentinel errors. A *Error (an error reply) matches the one of its code,
// ErrBadRequest to ErrInternal; the parsers and the client wrap the others.
var (
	// ErrBadRequest: the request was malformed (400). Retrying cannot help.
	ErrBadRequest = errors.New("vending: bad request")
	// ErrNotFound: the segment tag does not exist (404).
	ErrNotFound = errors.New("vending: not found")
	// ErrGone: the IDs asked for are used up (410): a segment tag whose
	// max_id reached the largest int64, or snowflake time bits past their
	// end. Retrying cannot help.
	ErrGone = errors.New("vending: gone")
	// ErrTooManyRequests: the tag's IDs are asked for faster than the
	// vendor hands them out (429, LEAF_SEGMENT_RATE_LIMIT). Retrying later
	// helps.
	ErrTooManyRequests = errors.New("vending: too many requests")
	// ErrUnavailable: the service cannot vend now (503), or no worker
	// answered within the retries. Retrying later may help.
	ErrUnavailable = errors.New("vending: unavailable")
	// ErrInternal: a worker failed unexpectedly (500).
	ErrInternal = errors.New("vending: internal error")

	// ErrBadCount is wrapped by ParseCount (a 400).
	ErrBadCount = errors.New("vending: bad count")
	// ErrBadEncoding is wrapped for a request asking for an encoding the
	// service does not have (a 400).
	ErrBadEncoding = errors.New("vending: bad encoding")
	// ErrBadID is wrapped for a decode request that is not a positive ID
	// (a 400).
	ErrBadID = errors.New("vending: bad ID")
	// ErrBadReply is wrapped by the reply decoders.
	ErrBadReply = errors.New("vending: malformed reply")
	// ErrClientClosed is returned by calls after Client.Close.
	ErrClientClosed = errors.New("vending: client closed")
)

// Error is an error reply of the service: its code (400, 404, 410, 429, 500, 503) and
// the sentence it sent. Inspect it with errors.As, or match a code with
// errors.Is(err, ErrNotFound) and the other sentinels.
type Error struct {
	Code    int
	Message string
	// RetryAfter and MaxCount are what a 429 says: when to ask again (0:
	// not said, or waiting cannot help) and the most IDs one request may
	// ask for (0: not said).
	RetryAfter time.Duration
	MaxCount   int64
}

// replyError is the *Error of an error reply's headers.
func replyError(h nats.Header) *Error {
	c, _ := strconv.Atoi(h.Get(micro.ErrorCodeHeader))
	e := &Error{Code: c, Message: h.Get(micro.ErrorHeader)}
	if ms, err := strconv.ParseInt(h.Get(RetryAfterHeader), 10, 64); err == nil && ms > 0 && ms < 1<<40 {
		e.RetryAfter = time.Duration(ms) * time.Millisecond
	}
	if n, err := strconv.ParseInt(h.Get(MaxCountHeader), 10, 64); err == nil && n > 0 {
		e.MaxCount = n
	}
	return e
}

func (e *Error) Error() string {
	return fmt.Sprintf("vending: error %d: %s", e.Code, e.Message)
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Code == CodeBadRequest
	case ErrNotFound:
		return e.Code == CodeNotFound
	case ErrGone:
		return e.Code == CodeGone
	case ErrTooManyRequests:
		return e.Code == CodeTooManyRequests
	case ErrUnavailable:
		return e.Code == CodeUnavailable
	case ErrInternal:
		return e.Code == CodeInternal
	}
	return false
}

// Reply codes (the Nats-Service-Error-Code header).
const (
	CodeBadRequest = 400
	CodeNotFound   = 404
	// CodeGone: the IDs are used up (a tag at the largest int64, snowflake
	// time bits past their end); not retried.
	CodeGone = 410
	// CodeTooManyRequests: a segment tag asked for faster than its rate
	// limit; ask again later.
	CodeTooManyRequests = 429
	CodeInternal        = 500
	CodeUnavailable     = 503
)

// Code maps an error from a source to its reply code.
func Code(err error) int {
	switch {
	case errors.Is(err, ErrBadCount), errors.Is(err, ErrBadID), errors.Is(err, ErrBadEncoding),
		errors.Is(err, segment.ErrInvalidTag), errors.Is(err, ErrBadRequest):
		return CodeBadRequest
	case errors.Is(err, segment.ErrUnknownTag), errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, segment.ErrExhausted), errors.Is(err, snowflake.ErrTimeOverflow), errors.Is(err, ErrGone):
		return CodeGone
	case errors.Is(err, segment.ErrRateLimited), errors.Is(err, ErrTooManyRequests):
		return CodeTooManyRequests
	case errors.Is(err, ErrUnavailable), errors.Is(err, snowflake.ErrNoLease), errors.Is(err, snowflake.ErrClockBackwards),
		errors.Is(err, segment.ErrUnavailable), errors.Is(err, segment.ErrStoreMoved),
		// A tag whose mode changed under the request: the next one is
		// routed the new way.
		errors.Is(err, segment.ErrStrict), errors.Is(err, segment.ErrNotStrict):
		return CodeUnavailable
	default:
		return CodeInternal
	}
}

// fail answers req with err's code and message. Internal errors are bugs:
// they are logged, at most once every few seconds with a count, so a storm
// of them cannot flood the log.
func (s *Service) fail(req micro.Request, mode, tag string, err error, start time.Time) {
	code := Code(err)
	if code == CodeInternal {
		s.internal.note(s, err)
	}
	if code == CodeNotFound {
		tag = "" // unknown tags must not grow metric label sets
	}
	// The sentence is the body too: a client that ignores the headers
	// reads it, and cannot take an error for an ID.
	msg := err.Error()
	req.Error(strconv.Itoa(code), msg, []byte(msg), limitHeaders(err)...)
	s.obs.Observe(mode, tag, code, 0, time.Since(start))
}

// Headers of a 429, so that a client waits as long as it must, or asks for
// fewer IDs, instead of guessing: RetryAfterHeader is when to ask again (in
// milliseconds), MaxCountHeader the most IDs one request may ask for.
const (
	RetryAfterHeader = "Leaf-Retry-After-Ms"
	MaxCountHeader   = "Leaf-Max-Count"
)

// limited is an error of a rate limit (segment.RateError, the requesters'
// limit): when to ask again (0: waiting cannot help), and the most one
// request may ask for.
type limited interface {
	RetryAfter() time.Duration
	MaxCount() int64
}

// limitHeaders are the headers of err's reply: RetryAfterHeader and
// MaxCountHeader for a rate limit's error, none for others.
func limitHeaders(err error) []micro.RespondOpt {
	var l limited
	if !errors.As(err, &l) {
		return nil
	}
	h := micro.Headers{}
	if n := l.MaxCount(); n > 0 {
		h[MaxCountHeader] = []string{strconv.FormatInt(n, 10)}
	}
	if d := l.RetryAfter(); d > 0 {
		h[RetryAfterHeader] = []string{strconv.FormatInt(d.Milliseconds(), 10)}
	}
	return []micro.RespondOpt{micro.WithHeaders(h)}
}

// errorLog logs internal errors, so that a storm of them cannot flood the
// log: one line per interval, with a count of those since.
type errorLog struct{ lines throttle.Lines }

func (l *errorLog) note(s *Service, err error) {
	if held, ok := l.lines.Allow(time.Now()); ok {
		s.log.Error("internal error answering a request (500)", "err", err, "more_since_last_line", held)
	}
}
