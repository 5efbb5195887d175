package segment

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// MaxTagLen is the longest tag, the width of the biz_tag column.
const MaxTagLen = 128

// MaxDescriptionLen is the longest description, the width of its column.
const MaxDescriptionLen = 256

// TagError reports a failed operation on one tag. Err is ErrUnknownTag or
// ErrTagExists, so callers branch with errors.Is; Error is the sentence a
// person reads, naming the command that fixes it.
type TagError struct {
	Tag string
	Err error
}

func (e *TagError) Error() string {
	switch e.Err {
	case ErrUnknownTag:
		return fmt.Sprintf("segment: tag %q not found (add it with: vendor tags add %s)", e.Tag, e.Tag)
	case ErrTagExists:
		return fmt.Sprintf("segment: tag %q already exists (see it with: vendor tags list)", e.Tag)
	case ErrExhausted:
		return fmt.Sprintf("segment: tag %q is used up: its max_id reached the end of its IDs; use another tag (vendor tags add)", e.Tag)
	}
	return fmt.Sprintf("segment: tag %q: %v", e.Tag, e.Err)
}

func (e *TagError) Unwrap() error { return e.Err }

// TagSyntax says, for people, what ValidateTag accepts.
const TagSyntax = "1 to 128 ASCII letters, digits, '_', '-' and inner '.'"

// ValidateTag reports whether tag can name a segment: 1 to 128 ASCII
// letters, digits, '_', '-' and '.', with dots only between non-empty
// tokens. Tags become NATS subject tokens (leaf.segment.<tag>) and KV keys,
// so wildcards, spaces and empty tokens are refused. The error wraps
// ErrInvalidTag.
func ValidateTag(tag string) error {
	if tag == "" {
		return fmt.Errorf("%w: the tag is empty; use 1 to %d letters, digits, '_', '-' or '.'", ErrInvalidTag, MaxTagLen)
	}
	if len(tag) > MaxTagLen {
		return fmt.Errorf("%w: the tag is %d bytes long; the limit is %d", ErrInvalidTag, len(tag), MaxTagLen)
	}
	prev := byte('.') // a leading dot is an empty first token
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		switch {
		case c == '.' && prev == '.':
			return fmt.Errorf("%w: %q has an empty dot-separated token; write tokens like order.eu", ErrInvalidTag, tag)
		case c == '.', c == '_', c == '-',
			'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		default:
			return fmt.Errorf("%w: %q contains %s; use only ASCII letters, digits, '_', '-' and '.'", ErrInvalidTag, tag, offending(tag[i:]))
		}
		prev = c
	}
	if prev == '.' {
		return fmt.Errorf("%w: %q ends with a dot; write tokens like order.eu", ErrInvalidTag, tag)
	}
	return nil
}

// offending names the character at the start of s: a rune, or the byte if
// s does not start with valid UTF-8.
func offending(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("the byte 0x%02x (not UTF-8)", s[0])
	}
	return fmt.Sprintf("%q", r)
}

// ValidateStep reports whether step can be a row's step: 1 to 2^31-1, the
// range of the step column. The error wraps ErrInvalidStep.
func ValidateStep(step int64) error {
	if step < 1 || step > math.MaxInt32 {
		return fmt.Errorf("%w: %d; use a step from 1 to %d (1000 suits most tags)", ErrInvalidStep, step, math.MaxInt32)
	}
	return nil
}

// ValidateRow checks a row before a store creates it: tag, step, a MaxID of
// at least 1 (0 means 1, the first ID) and a description that fits.
// Stores call it so that every backend refuses the same rows.
func ValidateRow(r Row) error {
	if err := ValidateTag(r.Tag); err != nil {
		return err
	}
	if err := ValidateStep(r.Step); err != nil {
		return err
	}
	if r.MaxID < 0 {
		return fmt.Errorf("segment: tag %q: start %d is negative; IDs start at 1 or above", r.Tag, r.MaxID)
	}
	if r.MaxID > math.MaxInt64-r.Step {
		return fmt.Errorf("segment: tag %q: start %d leaves no room for a segment of %d IDs below the largest ID (%d); start lower", r.Tag, r.MaxID, r.Step, int64(math.MaxInt64))
	}
	if len(r.Description) > MaxDescriptionLen {
		return fmt.Errorf("segment: tag %q: the description is %d bytes; the limit is %d", r.Tag, len(r.Description), MaxDescriptionLen)
	}
	return nil
}

// errClosed is returned by calls on a closed allocator.
var errClosed = errors.New("segment: allocator closed")
