package vending

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// Reply encodings. Text (decimal IDs separated by "\n") is the default, so
// `nats req` prints IDs; a client asks for binary with the EncodingHeader.
const (
	// EncodingHeader names the reply encoding a request asks for.
	EncodingHeader = "Leaf-Encoding"
	// EncodingText, the default: decimals separated by "\n".
	EncodingText = "text"
	// EncodingBinary: each ID as 8 bytes, big-endian, ascending.
	EncodingBinary = "binary"
)

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
	start := 0
	for i := 0; i <= len(body); i++ {
		if i < len(body) && body[i] != '\n' {
			continue
		}
		var id int64
		field := body[start:i]
		if len(field) == 0 || len(field) > 19 {
			return dst, fmt.Errorf("%w: field %s", ErrBadReply, quote(field))
		}
		for _, c := range field {
			if c < '0' || c > '9' {
				return dst, fmt.Errorf("%w: field %s", ErrBadReply, quote(field))
			}
			id = id*10 + int64(c-'0')
		}
		if id <= 0 {
			return dst, fmt.Errorf("%w: non-positive ID %s", ErrBadReply, quote(field))
		}
		dst = append(dst, id)
		start = i + 1
	}
	return dst, nil
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
