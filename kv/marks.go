package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/segment"
)

// MarksBucket holds, for a segment store kept elsewhere (Postgres), how
// far each tag's IDs were handed out: key = tag, value = the end of the
// highest segment allocated, as a decimal. A store that comes back older
// than its marks is raised above them (segment.Marks).
const MarksBucket = "leaf_segment_marks"

// Marks keeps segment marks in MarksBucket.
type Marks struct {
	kv jetstream.KeyValue

	mu     sync.Mutex
	raised map[raise]int64 // the marks this vendor raised, not settled: the mark before
}

// raise is a mark raised to end by this vendor's Record.
type raise struct {
	tag string
	end int64
}

var _ segment.Marks = (*Marks)(nil)

// OpenMarks opens the bucket, creating it with replicas copies when it is
// missing.
func OpenMarks(ctx context.Context, js JS, replicas int) (*Marks, error) {
	b, err := OpenOrCreate(ctx, js, jetstream.KeyValueConfig{
		Bucket:      js.Marks,
		Placement:   js.Placement,
		Description: "leaf-nats: how far each segment tag's IDs were handed out, kept outside the segment store",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, err
	}
	return &Marks{kv: b, raised: map[raise]int64{}}, nil
}

// Mark returns tag's mark, 0 when none is recorded.
func (m *Marks) Mark(ctx context.Context, tag string) (int64, error) {
	mark, _, err := m.get(ctx, tag)
	return mark, err
}

func (m *Marks) get(ctx context.Context, tag string) (int64, uint64, error) {
	e, err := m.kv.Get(ctx, tag)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kv: read the mark of %q: %w", tag, err)
	}
	mark, err := parseMark(e.Value())
	if err != nil {
		return 0, 0, Corrupt(m.kv.Bucket(), tag, e.Revision(), e.Value(), err,
			"It tells how far the tag was handed out; if the segment store is as it was, delete the key (nats kv del "+m.kv.Bucket()+" "+tag+"): the next segment records it again")
	}
	return mark, e.Revision(), nil
}

// parseMark reads a mark: a positive decimal.
func parseMark(v []byte) (int64, error) {
	mark, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	if err != nil || mark < 1 {
		return 0, errors.New("want a positive decimal ID")
	}
	return mark, nil
}

// Record raises tag's mark to end, with compare-and-set; it never lowers
// one.
func (m *Marks) Record(ctx context.Context, tag string, end int64) error {
	v := []byte(strconv.FormatInt(end, 10))
	for {
		mark, rev, err := m.get(ctx, tag)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return err
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			rev = ce.Revision // written over: this allocation's end, at least, is true
		} else if mark >= end {
			return nil
		}
		if rev == 0 {
			_, err = m.kv.Create(ctx, tag, v)
		} else {
			_, err = m.kv.Update(ctx, tag, v, rev)
		}
		switch {
		case err == nil:
			m.mu.Lock()
			m.raised[raise{tag, end}] = mark
			m.mu.Unlock()
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue // another vendor recorded meanwhile: look again
		default:
			return fmt.Errorf("kv: record the mark of %q: %w", tag, err)
		}
	}
}

// Settle ends an allocation Record raised the mark for. One that did not
// commit (Postgres restarting under it) lowers the mark back to what it
// was, with compare-and-set, before the next allocation reads it, which
// would otherwise read the store as gone back: under the row's lock no
// other allocation recorded meanwhile, and one that records after raises
// the mark above this one's end, which the compare-and-set then leaves
// alone. A mark that cannot be lowered (NATS down too) stays high, which
// skips IDs, never repeats one.
func (m *Marks) Settle(tag string, end int64, committed bool) {
	m.mu.Lock()
	before, ok := m.raised[raise{tag, end}]
	delete(m.raised, raise{tag, end})
	m.mu.Unlock()
	if committed || !ok || before < 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	m.Lower(ctx, tag, end, before) // not lowered: IDs skipped, none repeated
}

// settleTimeout bounds lowering the mark of an allocation that did not
// commit: the allocation has failed already, and waits no longer for it.
const settleTimeout = 2 * time.Second

var _ segment.Lowerer = (*Marks)(nil)

// Lower sets tag's mark to to if it is from, with compare-and-set
// (segment.Lowerer): the IDs above to were given back to the store.
func (m *Marks) Lower(ctx context.Context, tag string, from, to int64) (bool, error) {
	mark, rev, err := m.get(ctx, tag)
	if err != nil || mark != from || to < 1 || to > from {
		return false, err
	}
	if _, err := m.kv.Update(ctx, tag, []byte(strconv.FormatInt(to, 10)), rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, nil // recorded on meanwhile
		}
		return false, fmt.Errorf("kv: lower the mark of %q: %w", tag, err)
	}
	return true, nil
}
