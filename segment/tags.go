package segment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"
)

// Lookups of tags not cached: a store read each, lookupRate a second (and
// as many at once) per allocator, so a flood of made-up tags costs the
// store a bounded number of single-row reads, never a list.
const (
	lookupRate = 100
	// maxAbsent bounds the tags remembered as absent: a flood of
	// distinct made-up tags clears it rather than grow it.
	maxAbsent = 10_000
)

// buffer returns tag's buffer, asking the store for that one tag when the
// cache does not have it.
func (a *Allocator) buffer(ctx context.Context, tag string) (*buffer, error) {
	if b := a.lookup(tag); b != nil {
		return b, nil
	}
	if err := a.missing(tag); err != nil {
		return nil, err
	}
	// The lookup runs in a goroutine of the allocator's, which Close
	// waits for, shared by every request for the tag (a.finds); a request
	// that gives up leaves it to the others.
	type found struct {
		b   *buffer
		err error
	}
	ch := make(chan found, 1)
	if !a.spawn(func() {
		v, err, _ := a.finds.Do(tag, func() (any, error) { return a.find(tag) })
		b, _ := v.(*buffer)
		ch <- found{b, err}
	}) {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, errClosed)
	}
	select {
	case f := <-ch:
		return f.b, f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: tag %q: %w", ErrUnavailable, tag, ctx.Err())
	}
}

// find reads tag's row and makes its buffer, or remembers that the store
// has none.
func (a *Allocator) find(tag string) (*buffer, error) {
	if b := a.lookup(tag); b != nil {
		return b, nil // found while this call waited its turn
	}
	if !a.lookups.AllowN(a.opt.Now(), 1) {
		return nil, fmt.Errorf("%w: tag %q is not cached and this vendor looks up at most %d uncached tags a second; ask again",
			ErrUnavailable, tag, lookupRate)
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.opt.LoadTimeout)
	defer cancel()
	row, err := a.opt.Store.Tag(ctx, tag)
	switch {
	case errors.Is(err, ErrUnknownTag):
		a.storeOK()
		a.markAbsent(tag)
		return nil, &TagError{Tag: tag, Err: ErrUnknownTag}
	case err != nil:
		if a.ctx.Err() == nil {
			a.storeFailed(err, "tag", tag)
		}
		return nil, fmt.Errorf("%w: tag %q is not cached and the store cannot look it up: %w", ErrUnavailable, tag, err)
	}
	a.storeOK()
	row.Tag = tag
	a.noteHome(row)
	b := &buffer{tag: tag}
	b.strict.Store(row.Strict)
	v, _ := a.live.LoadOrStore(tag, b)
	return v.(*buffer), nil
}

// cached returns tag's buffer if it has one.
func (a *Allocator) cached(tag string) *buffer {
	if b, ok := a.live.Load(tag); ok {
		return b.(*buffer)
	}
	return nil
}

// lookup returns tag's buffer, making it if the tag is known and has none
// yet; nil when the tag is not known.
func (a *Allocator) lookup(tag string) *buffer {
	if b := a.cached(tag); b != nil {
		return b
	}
	strict, ok := a.tags.Load().known[tag]
	if !ok {
		return nil
	}
	b := &buffer{tag: tag}
	b.strict.Store(strict)
	v, loaded := a.live.LoadOrStore(tag, b)
	if b = v.(*buffer); !loaded {
		// A list may have replaced the tags since they were read: take
		// its mode.
		if strict, ok := a.tags.Load().known[tag]; ok {
			b.mu.Lock()
			b.setStrict(strict)
			b.mu.Unlock()
		}
	}
	return b
}

// missing decides about a tag absent from the cache without the store: an
// error when the tag is malformed or was found absent less than
// Options.NegativeTTL ago, nil when the store must be asked.
func (a *Allocator) missing(tag string) error {
	if err := ValidateTag(tag); err != nil {
		return err
	}
	a.mu.Lock()
	at, ok := a.absent[tag]
	a.mu.Unlock()
	if ok && a.opt.Now().Sub(at) < a.opt.NegativeTTL {
		return &TagError{Tag: tag, Err: ErrUnknownTag}
	}
	return nil
}

// markAbsent remembers that the store has no tag.
func (a *Allocator) markAbsent(tag string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.absent) >= maxAbsent {
		clear(a.absent)
	}
	a.absent[tag] = a.opt.Now()
}

// list reads the tag list and makes it the cache: new tags get empty
// buffers (loaded on first request), deleted ones are dropped, the others
// keep their buffers.
func (a *Allocator) list(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.opt.LoadTimeout)
	defer cancel()
	started := a.opt.Now()
	rows, err := a.opt.Store.Tags(ctx)

	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		// Not a store outage: a listing can fail where single-row reads
		// and allocations work (a JetStream with no meta leader, in a
		// supercluster split by a partition), and those say when the
		// store is down.
		return err
	}
	known := make(map[string]bool, len(rows))
	for _, r := range rows {
		if err := ValidateTag(r.Tag); err != nil {
			a.log.Warn("segment: tag in the store cannot be served; rename it", "tag", r.Tag, "err", err)
			continue
		}
		known[r.Tag] = r.Strict
		a.noteHome(r)
	}
	a.tags.Store(&tagSet{known: known, listed: started})
	a.live.Range(func(tag, v any) bool {
		b := v.(*buffer)
		if strict, ok := known[b.tag]; ok {
			b.mu.Lock()
			b.setStrict(strict)
			b.mu.Unlock()
		} else {
			a.live.Delete(tag)
		}
		return true
	})
	clear(a.absent) // a tag added since is found at once
	a.storeOK()
	return nil
}

// forget drops a tag the store no longer has.
func (a *Allocator) forget(tag string) {
	a.live.Delete(tag)
	a.mu.Lock()
	defer a.mu.Unlock()
	set := a.tags.Load()
	if _, ok := set.known[tag]; !ok {
		return
	}
	known := maps.Clone(set.known)
	delete(known, tag)
	a.tags.Store(&tagSet{known: known, listed: set.listed})
}

// refreshLoop re-reads the tag list every Options.Refresh until Close.
func (a *Allocator) refreshLoop() {
	t := time.NewTicker(a.opt.Refresh)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if err := a.list(a.ctx); err != nil && a.ctx.Err() == nil {
			a.log.Debug("segment: tag list refresh failed", "err", err)
		}
	}
}
