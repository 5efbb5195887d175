package strict

import (
	"context"
	"errors"
	"fmt"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// Segments serves every segment tag of a vendor past a gate: a normal tag
// from the allocator's buffers, a strict one through its leader (this
// vendor, or another one the tag's requests are forwarded to). It is what
// the service serves (vending.StrictSegments).
type Segments struct {
	alloc   *segment.Allocator
	leaders *Leaders
	gate    Gate
}

var _ vending.Segments = (*Segments)(nil)

// NewSegments serves alloc's tags, the strict ones through leaders, past
// gate (such as the cluster's segment gate).
func NewSegments(alloc *segment.Allocator, leaders *Leaders, gate Gate) *Segments {
	return &Segments{alloc: alloc, leaders: leaders, gate: gate}
}

// TryTakeRanges serves from the buffers, past the gate. The allocator
// refuses a strict tag to normal takes (segment.ErrStrict): then only the
// tag's leader serves it from memory.
func (s *Segments) TryTakeRanges(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	if err := s.gate.SegmentsErr(); err != nil {
		return dst, false, err
	}
	rs, ok, err := s.alloc.TryTakeRanges(tag, dst, n)
	if !errors.Is(err, segment.ErrStrict) {
		return rs, ok, err
	}
	rs, ok, err = s.leaders.TryTake(tag, dst, n)
	if errors.Is(err, segment.ErrNotStrict) { // normal again since: TakeRanges serves it
		return dst, false, nil
	}
	return rs, ok, err
}

// TakeRanges serves waiting for the store, past the gate; a strict tag's
// requests wait for its leader, or take the lead.
func (s *Segments) TakeRanges(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	if err := s.gate.SegmentsErr(); err != nil {
		return dst, err
	}
	for range 2 { // a tag whose mode changes under the call is asked for again
		rs, err := s.alloc.TakeRanges(ctx, tag, dst, n)
		if !errors.Is(err, segment.ErrStrict) {
			return rs, err
		}
		if rs, err = s.leaders.Take(ctx, tag, dst, n); !errors.Is(err, segment.ErrNotStrict) {
			return rs, err
		}
	}
	return dst, fmt.Errorf("%w: tag %q: its mode is being changed; ask again", segment.ErrUnavailable, tag)
}

// HandOff hands a request of tag to its leader on another vendor, which
// answers the client directly: when tag is strict, this vendor may serve
// segments, and the leader answered it lately (Leaders.Handoff).
func (s *Segments) HandOff(tag string, r vending.Handing) bool {
	return s.alloc.IsStrict(tag) && s.gate.SegmentsErr() == nil && s.leaders.Handoff(tag) && s.leaders.cfg.Transport.HandOff(tag, r)
}

// Leans reports whether this vendor leads strict tag and another vendor
// passed it one of the tag's requests since it took the lead: then the
// service takes most of the tag's requests itself (vending.LeanWeight).
func (s *Segments) Leans(tag string) bool { return s.leaders.Leans(tag) }

// IsStrict tells the service which replies to mark strict.
func (s *Segments) IsStrict(tag string) bool { return s.alloc.IsStrict(tag) }
