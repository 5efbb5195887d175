package vending

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/leaf-nats/leaf/ids"
)

// Reply encodings. Text (decimal IDs separated by "\n") is the default, so
// `nats req` prints IDs; a client asks for another with the EncodingHeader.
const (
	// EncodingHeader names the reply encoding a request asks for.
	EncodingHeader = "Leaf-Encoding"
	// EncodingText, the default: decimals separated by "\n".
	EncodingText = "text"
	// EncodingBinary: each ID as 8 bytes, big-endian, ascending.
	EncodingBinary = "binary"
	// EncodingRanges: the IDs as runs of consecutive IDs, each 16 bytes:
	// the run's first ID and its count, 8 bytes big-endian each, runs
	// ascending. A segment batch is one or two runs, a snowflake batch one
	// per millisecond, so a batch of any size costs a few bytes.
	EncodingRanges = "ranges"
)

// StrictHeader, set to "true" on a reply of a strict tag, tells a client
// that the IDs are in order across the whole cluster only when used at
// once: Source never buffers them.
const StrictHeader = "Leaf-Strict"

// rangeBytes is the size of a run in the ranges encoding.
const rangeBytes = 16

// AppendRanges appends rs in the ranges encoding.
func AppendRanges(dst []byte, rs []ids.Range) []byte {
	for _, r := range rs {
		dst = binary.BigEndian.AppendUint64(dst, uint64(r.First))
		dst = binary.BigEndian.AppendUint64(dst, uint64(r.Count))
	}
	return dst
}

// AppendTextRanges appends the IDs of rs as text, as AppendText does.
func AppendTextRanges(dst []byte, rs []ids.Range) []byte {
	sep := false
	for _, r := range rs {
		for id := r.First; id < r.First+r.Count; id++ {
			if sep {
				dst = append(dst, '\n')
			}
			dst = strconv.AppendInt(dst, id, 10)
			sep = true
		}
	}
	return dst
}

// AppendBinaryRanges appends the IDs of rs in the binary encoding.
func AppendBinaryRanges(dst []byte, rs []ids.Range) []byte {
	for _, r := range rs {
		for id := r.First; id < r.First+r.Count; id++ {
			dst = binary.BigEndian.AppendUint64(dst, uint64(id))
		}
	}
	return dst
}

// DecodeRanges appends the runs of a ranges reply to dst. Every run must
// be positive and non-empty, and start after the one before ends.
func DecodeRanges(dst []ids.Range, body []byte) ([]ids.Range, error) {
	if len(body) == 0 || len(body)%rangeBytes != 0 {
		return dst, fmt.Errorf("%w: ranges reply of %d bytes", ErrBadReply, len(body))
	}
	orig := len(dst)
	prev := int64(0)
	for i := 0; i < len(body); i += rangeBytes {
		r := ids.Range{First: int64(binary.BigEndian.Uint64(body[i:])), Count: int64(binary.BigEndian.Uint64(body[i+8:]))}
		switch {
		case r.First <= 0 || r.Count <= 0:
			return dst[:orig], fmt.Errorf("%w: run of %d IDs from %d", ErrBadReply, r.Count, r.First)
		case r.First > math.MaxInt64-(r.Count-1):
			return dst[:orig], fmt.Errorf("%w: run of %d IDs from %d passes the largest ID", ErrBadReply, r.Count, r.First)
		case r.First <= prev:
			return dst[:orig], fmt.Errorf("%w: run from %d does not start after %d", ErrBadReply, r.First, prev)
		}
		prev = r.Last()
		dst = append(dst, r)
	}
	return dst, nil
}

// decodeTextRanges appends the IDs of a text reply to dst as runs: the
// client's way to read one ID, or a vendor that predates ranges.
func decodeTextRanges(dst []ids.Range, body []byte) ([]ids.Range, error) {
	orig := len(dst)
	err := eachTextID(body, func(id int64) {
		if n := len(dst); n > orig && dst[n-1].Last() == id-1 {
			dst[n-1].Count++
		} else {
			dst = append(dst, ids.Range{First: id, Count: 1})
		}
	})
	if err != nil {
		return dst[:orig], err
	}
	return dst, nil
}

// ParseCount parses a request body: empty (or only white space) means 1,
// otherwise an ASCII decimal in 1..max with optional surrounding white space.
func ParseCount(body []byte, max int) (int, error) {
	i, j := 0, len(body)
	for i < j && isSpace(body[i]) {
		i++
	}
	for j > i && isSpace(body[j-1]) {
		j--
	}
	if i == j {
		return 1, nil
	}
	digits := body[i:j]
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: the request body must be empty (one ID) or a whole number from 1 to %d, not %s",
				ErrBadCount, max, quote(body))
		}
		if n > max { // keep going only to report non-digits; avoid overflow
			continue
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > max {
		return 0, fmt.Errorf("%w: count %s is out of range: ask for 1 to %d IDs per request", ErrBadCount, quote(digits), max)
	}
	return n, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// quote shows a client's input in an error message, shortened and escaped.
func quote(b []byte) string {
	const show = 40
	if len(b) > show {
		return strconv.Quote(string(b[:show])) + fmt.Sprintf(" (%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

// AppendText appends ids as decimals separated by "\n", no trailing newline.
func AppendText(dst []byte, ids []int64) []byte {
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, '\n')
		}
		dst = strconv.AppendInt(dst, id, 10)
	}
	return dst
}

// AppendBinary appends ids as 8-byte big-endian integers.
func AppendBinary(dst []byte, ids []int64) []byte {
	for _, id := range ids {
		dst = binary.BigEndian.AppendUint64(dst, uint64(id))
	}
	return dst
}

// DecodeText appends the IDs of a text reply to dst.
func DecodeText(dst []int64, body []byte) ([]int64, error) {
	orig := len(dst)
	if err := eachTextID(body, func(id int64) { dst = append(dst, id) }); err != nil {
		return dst[:orig], err
	}
	return dst, nil
}

// eachTextID passes each ID of a text reply to f, in order, and stops at
// the first field that is not one.
func eachTextID(body []byte, f func(id int64)) error {
	for {
		field, rest, more := bytes.Cut(body, []byte{'\n'})
		id, err := parseID(field)
		if err != nil {
			return err
		}
		f(id)
		if !more {
			return nil
		}
		body = rest
	}
}

// parseID parses one field of a text reply: a positive decimal ID.
func parseID(field []byte) (int64, error) {
	if len(field) == 0 || len(field) > 19 {
		return 0, fmt.Errorf("%w: field %s", ErrBadReply, quote(field))
	}
	var id int64
	for _, c := range field {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: field %s", ErrBadReply, quote(field))
		}
		id = id*10 + int64(c-'0')
	}
	if id <= 0 { // zero, or 19 digits past the largest int64
		return 0, fmt.Errorf("%w: non-positive ID %s", ErrBadReply, quote(field))
	}
	return id, nil
}

// DecodeBinary appends the IDs of a binary reply to dst.
func DecodeBinary(dst []int64, body []byte) ([]int64, error) {
	if len(body) == 0 || len(body)%8 != 0 {
		return dst, fmt.Errorf("%w: binary reply of %d bytes", ErrBadReply, len(body))
	}
	for i := 0; i < len(body); i += 8 {
		id := int64(binary.BigEndian.Uint64(body[i:]))
		if id <= 0 {
			return dst, fmt.Errorf("%w: non-positive ID %d", ErrBadReply, id)
		}
		dst = append(dst, id)
	}
	return dst, nil
}
