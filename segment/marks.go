package segment

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A store can come back older than it was: a Postgres restored from a
// backup or failed over to a replica that lagged, a NATS server that lost
// the writes it had not synced, a data directory put back from a copy. Its
// max_id is then below IDs already handed out, and allocating from it would
// hand them out again. So what was handed out is also known outside the
// store (Marks, and each allocator's own memory), and every allocation runs
// a Floor under the store's lock: a store found below its mark is raised
// above it in the same allocation, and the allocator says so (Rewinds).

// Marks knows, outside the store, how far each tag's IDs were handed out:
// the end of the highest segment allocated. kv.Marks keeps them in a NATS
// KV bucket beside a Postgres store; cluster.PeerMarks in the vendors
// themselves, beside the KV store.
//
// Every allocation asks them, not only after a start or a reconnect: a
// store rewritten live (nats kv put, a DBA's UPDATE) goes back without any
// sign on the connection. And every allocation records its end before it
// commits, so that no allocation can be in the store and missing from the
// marks: the marks an allocation reads hold every segment committed before
// it read the row.
type Marks interface {
	// Mark returns tag's mark: no ID at or above it was handed out; 0 when
	// none is known.
	Mark(ctx context.Context, tag string) (int64, error)
	// Record records that IDs of tag below end may be handed out. The
	// allocator calls it from the Floor, before the allocation commits,
	// and Settle once it knows whether it did. It never lowers a mark.
	Record(ctx context.Context, tag string, end int64) error
	// Settle ends the allocation Record was called for: committed or not
	// (a lost compare-and-set, a failed commit). Marks that other vendors
	// read in memory (PeerMarks) answer them only once it is settled.
	Settle(tag string, end int64, committed bool)
}

// Floor is run by Store.Alloc with a tag's max_id as the store has it and
// the step the allocation asks for (the row's when Alloc's is 0), while no
// other allocation of the tag can commit (under the row's lock, or before
// its compare-and-set): it returns the max_id to allocate from (base, at
// least maxID, above it when the store went back) and the highest max_id
// the allocation may reach (end: the end of the region's IDs,
// Options.Block), or why the row cannot be allocated from. The store then
// allocates Grant(base, step, end) IDs from base.
type Floor func(maxID, step int64) (base, end int64, err error)

// Rewind is a store found behind what was handed out.
type Rewind struct {
	Tag   string
	Store int64     // the store's max_id
	Mark  int64     // what was handed out: every ID below it
	From  string    // who knew: "this vendor" or the marks
	At    time.Time // when it was found (and the store raised)
}

func (r Rewind) String() string {
	return fmt.Sprintf("the segment store went back: tag %q has max_id %d there, but IDs up to %d were handed out (known from %s); raised it above them",
		r.Tag, r.Store, r.Mark-1, r.From)
}

// rewinds counts the rewinds an allocator found.
type rewinds struct {
	mu   sync.Mutex
	n    int64
	last Rewind
}

// Rewinds returns how many times the allocator found the store behind what
// was handed out, and the last time it did.
func (a *Allocator) Rewinds() (int64, Rewind) {
	a.rw.mu.Lock()
	defer a.rw.mu.Unlock()
	return a.rw.n, a.rw.last
}

// alloc allocates b's next segment of step (0: the row's step) from the
// store, above everything handed out, recording its mark before it
// commits.
func (a *Allocator) alloc(ctx context.Context, b *buffer, step int64) (Row, Segment, error) {
	f := &floor{a: a, ctx: ctx, b: b}
	row, err := a.opt.Store.Alloc(ctx, b.tag, step, f.run)
	f.settle(err == nil)
	var seg Segment
	if err == nil {
		a.rewound(f.found)
		seg, err = segmentOf(row, step)
	}
	if err != nil {
		return row, seg, err
	}
	b.mu.Lock()
	b.high = max(b.high, seg.End)
	b.allocated += seg.End - seg.Start
	b.mu.Unlock()
	return row, seg, nil
}

// floor is the Floor of one allocation of b: the highest of this
// allocator's own segments and the marks. A store whose compare-and-set
// fails runs it again on the row read anew, and only the last run's row is
// the one the allocation committed over: a row read just before another
// vendor's allocation committed is below that vendor's mark without having
// gone back.
type floor struct {
	a     *Allocator
	ctx   context.Context
	b     *buffer
	found *Rewind // the rewind the last run raised the row from; nil: none
	held  int64   // the end the last run recorded in the marks; 0: none
}

func (f *floor) run(maxID, step int64) (int64, int64, error) {
	a, b := f.a, f.b
	f.settle(false) // run again: the last run's allocation did not commit
	f.found = nil
	end := a.opt.Block.End
	if err := a.opt.Block.check(b.tag, maxID); err != nil {
		return 0, 0, err
	}
	b.mu.Lock()
	mark, from := b.high, "this vendor, which served them"
	b.mu.Unlock()
	if a.opt.Marks != nil {
		m, err := a.opt.Marks.Mark(f.ctx, b.tag)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: tag %q: how far it was handed out is not known outside the store: %w", ErrUnavailable, b.tag, err)
		}
		if m > mark {
			mark, from = m, "the marks kept outside the store"
		}
	}
	base := maxID
	if maxID < mark {
		f.found = &Rewind{Tag: b.tag, Store: maxID, Mark: mark, From: from, At: a.opt.Now()}
		base = mark
	}
	if n := Grant(base, step, end); n > 0 && a.opt.Marks != nil {
		if err := a.opt.Marks.Record(f.ctx, b.tag, base+n); err != nil {
			return 0, 0, fmt.Errorf("record how far tag %q is handed out (the segment is not allocated): %w", b.tag, err)
		}
		f.held = base + n
	}
	return base, end, nil
}

// settle tells the marks whether the allocation the last run recorded
// committed.
func (f *floor) settle(committed bool) {
	if f.held != 0 {
		f.a.opt.Marks.Settle(f.b.tag, f.held, committed)
		f.held = 0
	}
}

// rewound counts and logs rw (nil: none), a store found behind what was
// handed out and raised above it by an allocation that committed.
func (a *Allocator) rewound(rw *Rewind) {
	if rw == nil {
		return
	}
	a.rw.mu.Lock()
	a.rw.n++
	a.rw.last = *rw
	a.rw.mu.Unlock()
	a.log.Error("segment: "+rw.String(), "tag", rw.Tag, "store_max_id", rw.Store, "handed_out_below", rw.Mark, "known_from", rw.From)
}
