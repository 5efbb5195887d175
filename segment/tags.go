package segment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"
)

// buffer returns tag's buffer, asking the store for its tag list when the
// cache cannot tell whether tag exists.
func (a *Allocator) buffer(ctx context.Context, tag string) (*buffer, error) {
	if b := a.lookup(tag); b != nil {
		return b, nil
	}
	force, err := a.missing(tag)
	if err != nil {
		return nil, err
	}
	l := a.relist(force)
	select {
	case <-l.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: tag %q: %w", ErrUnavailable, tag, ctx.Err())
	}
	if l.err != nil {
		return nil, fmt.Errorf("%w: tag %q is not cached and the store cannot list tags: %w", ErrUnavailable, tag, l.err)
	}
	if b := a.lookup(tag); b != nil {
		return b, nil
	}
	return nil, &TagError{Tag: tag, Err: ErrUnknownTag}
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
// error when the tag is malformed or a recent list lacks it, nil when the
// store must be asked (force: although the list is recent).
//
// A recent list lacking the tag answers unknown, so a flood of unknown tags
// costs the store nothing; but a few times a second such a request lists
// again anyway (lookupRate), so a tag added a moment ago is found at once.
func (a *Allocator) missing(tag string) (force bool, err error) {
	if err := ValidateTag(tag); err != nil {
		return false, err
	}
	if !a.fresh() {
		return false, nil
	}
	if a.lookupToken() {
		return true, nil
	}
	return false, &TagError{Tag: tag, Err: ErrUnknownTag}
}

// Lookups past a recent tag list: lookupBurst at once, lookupRate a second.
const (
	lookupRate  = 5.0
	lookupBurst = 5.0
)

// lookupToken takes one lookup from the token bucket, if there is one.
func (a *Allocator) lookupToken() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opt.Now()
	if a.tokensAt.IsZero() {
		a.tokens = lookupBurst
	} else {
		a.tokens = min(lookupBurst, a.tokens+now.Sub(a.tokensAt).Seconds()*lookupRate)
	}
	a.tokensAt = now
	if a.tokens < 1 {
		return false
	}
	a.tokens--
	return true
}

// fresh reports whether the cached tag list is recent enough to say that a
// tag it lacks does not exist.
func (a *Allocator) fresh() bool {
	listed := a.tags.Load().listed
	return !listed.IsZero() && a.opt.Now().Sub(listed) < a.opt.NegativeTTL
}

// relist returns the tag list read in flight, starting one unless the last
// one failed less than retryBackoff ago or, for a request (not the refresh
// loop), the list is fresh. Every caller shares it, so any number of
// requests for unknown tags cost one store call.
func (a *Allocator) relist(refresh bool) *call {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listing != nil {
		return a.listing
	}
	if !refresh && a.fresh() {
		return doneCall(nil) // listed since the caller looked
	}
	if a.listErr != nil && a.opt.Now().Sub(a.listAt) < retryBackoff {
		return doneCall(a.listErr)
	}
	l := &call{done: make(chan struct{})}
	if !a.spawn(func() {
		err := a.list(a.ctx)
		a.mu.Lock()
		a.listing = nil
		a.mu.Unlock()
		l.err = err
		close(l.done)
	}) {
		return doneCall(errClosed)
	}
	a.listing = l
	return l
}

func doneCall(err error) *call {
	l := &call{done: make(chan struct{}), err: err}
	close(l.done)
	return l
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
		a.listErr, a.listAt = err, started
		if a.ctx.Err() == nil {
			a.storeFailed(err)
		}
		return err
	}
	a.listErr = nil
	known := make(map[string]bool, len(rows))
	for _, r := range rows {
		if err := ValidateTag(r.Tag); err != nil {
			a.log.Warn("segment: tag in the store cannot be served; rename it", "tag", r.Tag, "err", err)
			continue
		}
		known[r.Tag] = r.Strict
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
		l := a.relist(true)
		select {
		case <-a.ctx.Done():
			return
		case <-l.done:
		}
		if l.err != nil && !errors.Is(l.err, errClosed) && a.ctx.Err() == nil {
			a.log.Debug("segment: tag list refresh failed", "err", l.err)
		}
	}
}
