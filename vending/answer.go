package vending

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
)

// Every answer to a request for IDs is made here, whichever path sends it:
// the service's endpoints (through micro), a request served later, a strict
// tag's leader answering a request handed to it (published on the
// connection). AppendAnswer and ErrorMsg are the two kinds.

// encoding returns the reply encoding req asks for.
func encoding(req micro.Request) (string, error) {
	return ParseEncoding(req.Headers().Get(EncodingHeader))
}

// ParseEncoding returns the reply encoding that the EncodingHeader value e
// asks for: the default text for "".
func ParseEncoding(e string) (string, error) {
	switch e {
	case "", EncodingText:
		return EncodingText, nil
	case EncodingBinary, EncodingRanges:
		return e, nil
	default:
		return "", fmt.Errorf("%w: %s %q is not an encoding: use %s, %s or %s", ErrBadEncoding, EncodingHeader, quote([]byte(e)), EncodingText, EncodingBinary, EncodingRanges)
	}
}

// answerKind is the headers of an answer with IDs, built once (read-only)
// for each kind, so that they cost no allocation per reply: a reply in the
// ranges encoding says so (a vendor that predates ranges answers text), and
// a strict tag's reply says so (a client does not buffer its IDs).
type answerKind struct {
	header nats.Header
	opts   []micro.RespondOpt
}

var answerKinds = func() (k [2][2]answerKind) {
	for r := range 2 {
		for s := range 2 {
			h := nats.Header{}
			if r == 1 {
				h.Set(EncodingHeader, EncodingRanges)
			}
			if s == 1 {
				h.Set(StrictHeader, "true")
			}
			if len(h) > 0 {
				k[r][s] = answerKind{header: h, opts: []micro.RespondOpt{micro.WithHeaders(micro.Headers(h))}}
			}
		}
	}
	return k
}()

// AppendAnswer appends the body of an answer with rs, in encoding enc, to
// out, and returns it with the answer's kind (its headers).
func AppendAnswer(out []byte, enc string, strict bool, rs []ids.Range) ([]byte, answerKind) {
	r, s := 0, 0
	switch enc {
	case EncodingRanges:
		out, r = AppendRanges(out, rs), 1
	case EncodingBinary:
		out = AppendBinaryRanges(out, rs)
	default:
		out = AppendTextRanges(out, rs)
	}
	if strict {
		s = 1
	}
	return out, answerKinds[r][s]
}

// AnswerMsg is the answer with rs to subject, in encoding enc, as a
// message to publish.
func AnswerMsg(subject, enc string, strict bool, rs []ids.Range) *nats.Msg {
	body, kind := AppendAnswer(nil, enc, strict, rs)
	return &nats.Msg{Subject: subject, Header: kind.header, Data: body}
}

// ErrorMsg is the answer of err to subject, as the service answers it: its
// code and sentence in the headers (with a rate limit's when and how many),
// the sentence as the body, so that a client that ignores headers cannot
// take it for an ID.
func ErrorMsg(subject string, err error) *nats.Msg {
	msg := err.Error()
	m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte(msg)}
	for _, o := range limitHeaders(err) {
		o(m)
	}
	m.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(Code(err)))
	m.Header.Set(micro.ErrorHeader, msg)
	return m
}
