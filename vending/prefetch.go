package vending

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/inflight"
)

// Block is IDs reserved for one goroutine (Source.Block). Its Next hands
// them out in ascending order with no lock and no atomic: an increment and
// a compare. The zero Block is empty. A Block is not safe for concurrent
// use: give each goroutine its own.
type Block struct {
	next, end int64       // the run being handed out: [next, end)
	more      []ids.Range // the runs after it, when the block spans several
}

func newBlock(rs []ids.Range) Block {
	var b Block
	if len(rs) > 0 {
		b.next, b.end, b.more = rs[0].First, rs[0].First+rs[0].Count, rs[1:]
	}
	return b
}

// Next returns the block's next ID, or false once it has handed out all.
func (b *Block) Next() (int64, bool) {
	if b.next < b.end {
		id := b.next
		b.next++
		return id, true
	}
	return b.nextRun()
}

func (b *Block) nextRun() (int64, bool) {
	for len(b.more) > 0 {
		r := b.more[0]
		b.more = b.more[1:]
		if r.Count > 0 {
			b.next, b.end = r.First+1, r.First+r.Count
			return r.First, true
		}
	}
	return 0, false
}

// Len returns how many IDs the block still holds.
func (b *Block) Len() int64 { return b.end - b.next + ids.Count(b.more) }

// prefetcher is a Source's buffer of runs. Callers take IDs from the
// current run with an atomic add on its next ID: an add past its end means
// the run is used up, and the caller moves to the next run under mu. One
// goroutine, refillLoop, refills the queue of runs in the background with one
// request in the ranges encoding at a time, so a single consumer sees the
// IDs of one vendor in ascending order.
type prefetcher struct {
	src *Source
	// size is how many IDs one refill asks for, lowWater the refill mark;
	// both shrink when the vendors say a refill asks for more than their
	// rate limit serves at once.
	size     atomic.Int64
	lowWater atomic.Int64

	cur   atomic.Pointer[cursor] // the run IDs are taken from; nil before the first refill
	asked atomic.Bool            // a refill is asked for or under way

	mu     sync.Mutex
	queue  []ids.Range // the runs after cur, ascending
	queued int64       // the IDs in queue
	err    error       // the last refill's error, returned once the buffer is empty
	filled chan struct{}

	wake chan struct{}  // asks refillLoop for a refill; capacity 1
	loop inflight.Group // refillLoop; its Stop closes the buffer
}

// cursor is the run being handed out. Its next ID passes end once it is
// used up; mark is the ID whose taking leaves lowWater IDs in the buffer,
// the point to ask for a refill (-1: none in this run).
type cursor struct {
	next atomic.Int64
	end  int64
	mark int64
}

func newPrefetcher(s *Source) *prefetcher {
	p := &prefetcher{
		src:    s,
		filled: make(chan struct{}),
		wake:   make(chan struct{}, 1),
	}
	p.size.Store(min(int64(s.c.cfg.Prefetch), s.limit))
	p.lowWater.Store(int64(s.c.cfg.LowWater))
	p.loop.Go(p.refillLoop)
	return p
}

// next is the hot path: an atomic load and add, and two compares.
func (p *prefetcher) next(ctx context.Context) (int64, error) {
	if r := p.cur.Load(); r != nil {
		if id := r.next.Add(1) - 1; id < r.end {
			if id == r.mark {
				p.ask()
			}
			return id, nil
		}
	}
	b, err := p.take(ctx, 1, ids.Range{})
	if err != nil {
		return 0, err
	}
	id, _ := b.Next()
	return id, nil
}

// block reserves n IDs with one atomic add when the current run holds
// them.
func (p *prefetcher) block(ctx context.Context, n int64) (Block, error) {
	var part ids.Range // what the add got of the current run before its end
	if r := p.cur.Load(); r != nil {
		start := r.next.Add(n) - n
		if start+n <= r.end {
			if start <= r.mark && r.mark < start+n {
				p.ask()
			}
			return Block{next: start, end: start + n}, nil
		}
		if start < r.end {
			part = ids.Range{First: start, Count: r.end - start}
		}
	}
	return p.take(ctx, n, part)
}

// take is the slow path: it gives n IDs, of which part already came from
// the current run, moving through the queue and waiting for a refill when
// it is empty.
func (p *prefetcher) take(ctx context.Context, n int64, part ids.Range) (Block, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := make([]ids.Range, 0, 2)
	need := n
	if part.Count > 0 {
		rs, need = append(rs, part), need-part.Count
	}
	for need > 0 {
		if p.loop.Stopped() {
			return Block{}, ErrClientClosed
		}
		if p.src.strict.Load() {
			return Block{}, errStrict
		}
		// Another caller may have moved to a run with IDs meanwhile.
		if r := p.cur.Load(); r != nil {
			start := r.next.Add(need) - need
			if start < r.end {
				k := min(need, r.end-start)
				rs, need = append(rs, ids.Range{First: start, Count: k}), need-k
				if start <= r.mark && r.mark < start+k {
					p.ask()
				}
				continue
			}
		}
		if len(p.queue) == 0 {
			if err := p.wait(ctx); err != nil {
				return Block{}, err
			}
			continue
		}
		next := p.queue[0]
		p.queue, p.queued = p.queue[1:], p.queued-next.Count
		p.install(next)
	}
	return newBlock(rs), nil
}

// install makes r the current run, with its refill mark. mu is held.
func (p *prefetcher) install(r ids.Range) {
	end := r.First + r.Count
	nr := &cursor{end: end, mark: -1}
	nr.next.Store(r.First)
	// Taking ID x leaves end-x-1 IDs of this run and the queued ones.
	if x := end - 1 + p.queued - p.lowWater.Load(); x >= r.First && x < end {
		nr.mark = x
	} else if x < r.First {
		p.ask()
	}
	p.cur.Store(nr)
}

// ask requests a refill unless one is under way.
func (p *prefetcher) ask() {
	if p.asked.CompareAndSwap(false, true) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// wait, with the buffer empty and mu held, returns the refill's error if
// there is one, else waits for the refill. It returns with mu held.
func (p *prefetcher) wait(ctx context.Context) error {
	if err := p.err; err != nil {
		p.err = nil // one caller reports it; the next call refills anew
		return err
	}
	p.ask()
	filled := p.filled
	p.mu.Unlock()
	defer p.mu.Lock()
	select {
	case <-filled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.loop.Stopping():
		return ErrClientClosed
	}
}

// held is how many IDs the buffer holds. mu is held.
func (p *prefetcher) held() int64 {
	n := p.queued
	if r := p.cur.Load(); r != nil {
		n += max(0, r.end-r.next.Load())
	}
	return n
}

// refillLoop is the refill goroutine: one request at a time, on demand.
func (p *prefetcher) refillLoop() {
	stop := p.loop.Stopping()
	for {
		select {
		case <-stop:
			return
		case <-p.wake:
		}
		p.mu.Lock()
		enough := p.held() > p.lowWater.Load() && p.err == nil
		p.mu.Unlock()
		var rs []ids.Range
		var err error
		if !enough {
			rs, err = p.refill()
		}
		if p.src.strict.Load() {
			rs, err = nil, nil // not buffered: the callers waiting request their own
		}
		p.mu.Lock()
		if err != nil {
			p.err = fmt.Errorf("vending: prefetch from %s: %w", p.src.subject, err)
		}
		p.queue = append(p.queue, rs...)
		p.queued += ids.Count(rs)
		p.asked.Store(false)
		close(p.filled)
		p.filled = make(chan struct{})
		p.mu.Unlock()
	}
}

// refill asks for the buffer's size of IDs. A vendor that serves fewer at
// once under a limit (a 429 with the most one request may ask for) makes
// the buffer that small from then on, and is asked again: as often as a
// limit says less, since several may (the requester's burst, then the
// tag's). The size only shrinks, so the asking ends.
func (p *prefetcher) refill() ([]ids.Range, error) {
	for {
		rs, err := p.src.request(p.src.ctx, nil, p.size.Load())
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeTooManyRequests || e.MaxCount <= 0 || e.MaxCount >= p.size.Load() {
			return rs, err
		}
		p.size.Store(e.MaxCount)
		p.lowWater.Store(min(p.lowWater.Load(), e.MaxCount/4))
	}
}

// errStrict is what the buffer answers for a strict tag: the caller
// requests its IDs itself.
var errStrict = errors.New("vending: strict tag, not buffered")

// drop empties the buffer.
func (p *prefetcher) drop() {
	p.mu.Lock()
	p.cur.Store(nil)
	p.queue, p.queued = nil, 0
	p.mu.Unlock()
}

func (p *prefetcher) close() {
	p.loop.Stop()
	p.mu.Lock()
	p.cur.Store(nil) // the IDs left are dropped: callers move to take, which says closed
	p.mu.Unlock()
	p.loop.Wait()
}
