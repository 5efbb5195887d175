package vending

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// prefetcher is a Source's buffer. Callers take IDs from cur under mu; one
// goroutine, run, fills ready while they do, so the switch from cur to ready
// is a swap of slices. Both are pointer-free []int64, and the exhausted one
// is handed back for the next refill to decode into, so a steady state
// allocates nothing per ID.
type prefetcher struct {
	src      *Source
	size     int
	lowWater int

	mu     sync.Mutex
	cur    []int64 // cur[pos:] are the IDs not yet taken
	pos    int
	ready  []int64 // the last refill, taken when cur is empty
	spare  []int64 // an exhausted buffer to refill into
	asked  bool    // a refill is requested or in flight
	err    error   // the last refill's error, returned when the buffer is empty
	filled chan struct{}
	closed bool

	wake chan struct{} // asks run for a refill; capacity 1
	stop chan struct{}
	done chan struct{}
}

func newPrefetcher(s *Source) *prefetcher {
	p := &prefetcher{
		src:      s,
		size:     s.c.cfg.Prefetch,
		lowWater: s.c.cfg.LowWater,
		filled:   make(chan struct{}),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go p.run()
	return p
}

// held is how many IDs the buffer holds. Called with mu held.
func (p *prefetcher) held() int { return len(p.cur) - p.pos + len(p.ready) }

// next is the hot path: a lock, an index and, below the low-water mark, a
// flag and a non-blocking send.
func (p *prefetcher) next(ctx context.Context) (int64, error) {
	p.mu.Lock()
	for {
		if p.pos == len(p.cur) && len(p.ready) > 0 {
			p.swap()
		}
		if p.pos < len(p.cur) && !p.closed {
			id := p.cur[p.pos]
			p.pos++
			if p.held() <= p.lowWater {
				p.ask()
			}
			p.mu.Unlock()
			return id, nil
		}
		if err := p.wait(ctx); err != nil {
			p.mu.Unlock()
			return 0, err
		}
	}
}

// take returns n IDs from the buffer, or nil if it holds fewer.
func (p *prefetcher) take(n int) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held() < n || p.closed {
		p.ask()
		return nil
	}
	ids := make([]int64, 0, n)
	for len(ids) < n {
		if p.pos == len(p.cur) {
			p.swap()
		}
		k := min(n-len(ids), len(p.cur)-p.pos)
		ids = append(ids, p.cur[p.pos:p.pos+k]...)
		p.pos += k
	}
	if p.held() <= p.lowWater {
		p.ask()
	}
	return ids
}

// swap makes the refilled buffer current and keeps the exhausted one.
// Called with mu held.
func (p *prefetcher) swap() {
	if cap(p.cur) >= p.size {
		p.spare = p.cur[:0]
	}
	p.cur, p.pos, p.ready = p.ready, 0, nil
}

// ask requests a refill unless one is under way, ready is still full or an
// error waits to be returned. Called with mu held.
func (p *prefetcher) ask() {
	if p.asked || p.ready != nil || p.err != nil || p.closed {
		return
	}
	p.asked = true
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// wait, with the buffer empty and mu held, returns the refill's error if
// there is one, else waits for the refill. It returns with mu held.
func (p *prefetcher) wait(ctx context.Context) error {
	if p.closed {
		return ErrClientClosed
	}
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
	case <-p.stop:
		return ErrClientClosed
	}
}

// run is the refill goroutine: one request at a time, on demand.
func (p *prefetcher) run() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		p.mu.Lock()
		buf := p.spare
		p.spare = nil
		p.mu.Unlock()
		if buf == nil {
			buf = make([]int64, 0, p.size)
		}
		ids, err := p.refill(buf)
		p.mu.Lock()
		if err != nil {
			p.err = fmt.Errorf("vending: prefetch from %s: %w", p.src.subject, err)
			p.spare = buf
		} else {
			p.ready = ids
		}
		p.asked = false
		close(p.filled)
		p.filled = make(chan struct{})
		p.mu.Unlock()
	}
}

// refill fills buf with size IDs: one request, or for a buffer larger than
// the max batch, requests of the max batch in parallel, so the refill takes
// one round trip whatever the size. Each request decodes into its own part
// of buf, so the parts join without copying.
func (p *prefetcher) refill(buf []int64) ([]int64, error) {
	batch := p.src.c.cfg.MaxBatch
	if p.size <= batch {
		return p.src.request(p.src.ctx, buf, p.size)
	}
	buf = buf[:p.size]
	errs := make([]error, (p.size+batch-1)/batch)
	var wg sync.WaitGroup
	for i := range errs {
		lo := i * batch
		hi := min(lo+batch, p.size)
		wg.Go(func() {
			part, err := p.src.request(p.src.ctx, buf[lo:lo:hi], hi-lo)
			if err == nil && (len(part) != hi-lo || &part[0] != &buf[lo]) {
				err = fmt.Errorf("%w: refill part of %d IDs", ErrBadReply, len(part))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return buf[:0], err
	}
	return buf, nil
}

func (p *prefetcher) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
}
