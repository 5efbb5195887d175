package vending

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
)

// ErrBadID is wrapped for a decode request that is not a positive ID.
var ErrBadID = errors.New("bad ID")

// Reply codes (the Nats-Service-Error-Code header).
const (
	CodeBadRequest  = 400
	CodeNotFound    = 404
	CodeInternal    = 500
	CodeUnavailable = 503
)

// Code maps an error from a source to its reply code.
func Code(err error) int {
	switch {
	case errors.Is(err, ErrBadCount), errors.Is(err, ErrBadID),
		errors.Is(err, segment.ErrInvalidTag):
		return CodeBadRequest
	case errors.Is(err, segment.ErrUnknownTag):
		return CodeNotFound
	case errors.Is(err, snowflake.ErrNoLease), errors.Is(err, snowflake.ErrLeaseLost),
		errors.Is(err, snowflake.ErrClockBackwards), errors.Is(err, snowflake.ErrTimeOverflow),
		errors.Is(err, segment.ErrUnavailable):
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
	req.Error(strconv.Itoa(code), err.Error(), nil)
	s.obs.Observe(mode, tag, code, 0, time.Since(start))
}

// errorLog aggregates internal errors into periodic log lines.
type errorLog struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

func (l *errorLog) note(s *Service, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.last) < 10*time.Second {
		l.missed++
		return
	}
	s.log.Error("internal error answering a request (500)", "err", err, "more_since_last_line", l.missed)
	l.last, l.missed = time.Now(), 0
}
