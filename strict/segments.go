package strict

import (
	"context"
	"errors"
	"fmt"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
)

// Segments serves every segment tag of a vendor past a gate: a normal tag
// from the allocator's buffers, a strict one through its leader (this
// vendor, or another one the tag's requests are forwarded to). It is what
// the service serves (vending.StrictSegments).
type Segments struct {
	alloc   *segment.Allocator
	leaders *Leaders
	gate    func() error
}

// NewSegments serves alloc's tags, the strict ones through leaders, past
// gate (nil: pass; else why not, such as the cluster's segment gate).
func NewSegments(alloc *segment.Allocator, leaders *Leaders, gate func() error) *Segments {
	return &Segments{alloc: alloc, leaders: leaders, gate: gate}
}

// TryTakeRanges serves from the buffers, past the gate. The allocator
// refuses a strict tag to normal takes (segment.ErrStrict): then only the
// tag's leader serves it from memory.
func (s *Segments) TryTakeRanges(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	if err := s.gate(); err != nil {
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
	if err := s.gate(); err != nil {
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

// Handoff reports whether the service should hand a request of tag to its
// leader on another vendor, which answers the client directly
// (vending.Handoffs): tag is strict, this vendor may serve segments, and
// the leader answered it lately (Leaders.Handoff).
func (s *Segments) Handoff(tag string) bool {
	return s.alloc.IsStrict(tag) && s.gate() == nil && s.leaders.Handoff(tag)
}

// HandoffLost is told that a handed-off request found no leader
// (Leaders.ForgetAll).
func (s *Segments) HandoffLost() { s.leaders.ForgetAll() }

// IsStrict tells the service which replies to mark strict.
func (s *Segments) IsStrict(tag string) bool { return s.alloc.IsStrict(tag) }
