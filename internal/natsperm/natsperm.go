// Package natsperm reads a NATS server's refusal of what a connection did
// under its user's permissions: which operation, on which subject.
//
// The server says it in text (Permissions Violation for Publish to
// "<subject>"), and nats.go v1.55 passes that text on as an error wrapping
// nats.ErrPermissionViolation, both to the connection's error handler and
// as its last error, with no structured form of the subject. So the text
// is read here, once, and every caller branches on a Refusal.
//
// A refused publish is not an error of the Publish call: the server
// answers it later, asynchronously. Since marks a point in a connection's
// errors, so that a caller can flush after publishing and ask whether NATS
// refused something since.
package natsperm

import (
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// Op is the operation NATS refused.
type Op string

// The operations a server refuses, as its text names them.
const (
	Publish   Op = "publish"
	Subscribe Op = "subscribe"
	// Reply: a publish with a reply subject the user may not subscribe
	// to; the Refusal's Subject is that reply subject.
	Reply Op = "reply"
)

// Refusal is NATS refusing an operation on a subject.
type Refusal struct {
	Op      Op
	Subject string
	Queue   string // a refused queue subscription's group
	Err     error  // the error it was read from
}

// Publishes reports whether r refuses a publish on subject.
func (r Refusal) Publishes(subject string) bool { return r.Op == Publish && r.Subject == subject }

// Parse returns the refusal err reports; false when err is no permission
// violation, or one whose text names no subject.
func Parse(err error) (Refusal, bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return Refusal{}, false
	}
	// The server's text of each operation.
	texts := [...]struct {
		op   Op
		text string
	}{
		{Reply, "Permissions Violation for Publish with Reply of "},
		{Publish, "Permissions Violation for Publish to "},
		{Subscribe, "Permissions Violation for Subscription to "},
	}
	msg := err.Error()
	for _, t := range texts {
		i := strings.Index(msg, t.text)
		if i < 0 {
			continue
		}
		subject, rest, ok := unquote(msg[i+len(t.text):])
		if !ok {
			return Refusal{}, false
		}
		r := Refusal{Op: t.op, Subject: subject, Err: err}
		if q, ok := strings.CutPrefix(rest, " using queue "); ok && t.op == Subscribe {
			r.Queue, _, _ = unquote(q)
		}
		return r, true
	}
	return Refusal{}, false
}

// unquote reads the Go-quoted string s starts with (the server writes
// subjects with %q) and returns it and what follows.
func unquote(s string) (string, string, bool) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", false
	}
	v, err := strconv.Unquote(q)
	return v, s[len(q):], err == nil
}

// Since is a point in a connection's errors: NATS keeps the latest as the
// connection's last error, and a refusal that replaced the one seen at the
// point came since.
type Since struct {
	nc   *nats.Conn
	last error
}

// Now marks the point in nc's errors that Refused compares with.
func Now(nc *nats.Conn) Since { return Since{nc: nc, last: nc.LastError()} }

// Refused returns the refusal NATS reported on the connection since s, if
// its last error is one. Only the last error is kept: flush after the
// operations in question, so that the server's refusal of them, sent
// before its answer to the flush, has arrived.
func (s Since) Refused() (Refusal, bool) {
	last := s.nc.LastError()
	if last == s.last {
		return Refusal{}, false
	}
	return Parse(last)
}

// Advance is Refused, and moves s to the connection's last error, so that
// the next call reports only a refusal that came after this one.
func (s *Since) Advance() (Refusal, bool) {
	last, seen := s.nc.LastError(), s.last
	s.last = last
	if last == seen {
		return Refusal{}, false
	}
	return Parse(last)
}
