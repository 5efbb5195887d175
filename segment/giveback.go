package segment

import (
	"context"
	"errors"
	"time"
)

// Leaf's users asked for clean restarts that skip no ID (Leaf issues 15 and
// 78): a vendor that stops throws away the rest of its segments. With
// Options.GiveBack, Close returns the unused IDs at the top of each tag to
// the store instead, when that is safe: the store's max_id is still the end
// of this allocator's highest segment (no one allocated after it), checked
// and lowered in one compare-and-set. The marks are lowered first, with a
// compare-and-set of their own: a crash between the two leaves the marks
// below the store, which is how they always are; the other order would
// leave the store below its marks, which reads as a store that went back.
// IDs are given back only once they can no longer be handed out here
// (taken out of the buffers, loads stopped), and never a strict tag's,
// which its next leader serves from a new segment anyway.

// Returner is a Store that can take back the top of a tag's IDs.
type Returner interface {
	// Return sets tag's max_id to to if it is from, atomically, and says
	// whether it did: [to, from) may then be allocated again.
	Return(ctx context.Context, tag string, from, to int64) (bool, error)
}

// Lowerer is Marks that can be lowered for IDs given back.
type Lowerer interface {
	// Lower sets tag's mark to to if it is from, atomically, and says
	// whether it did.
	Lower(ctx context.Context, tag string, from, to int64) (bool, error)
}

// giveBackTimeout bounds the give-back of every tag at Close.
const giveBackTimeout = 5 * time.Second

// giveBack returns the unused top of every tag to the store and logs what
// it gave back.
func (a *Allocator) giveBack(ctx context.Context) {
	ret, ok := a.opt.Store.(Returner)
	low, lowers := a.opt.Marks.(Lowerer)
	if !ok || a.opt.Marks != nil && !lowers {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	var tags, given int64
	for _, b := range a.buffers() {
		lo, hi := b.unused()
		if lo >= hi {
			continue
		}
		if lowers {
			if done, err := low.Lower(ctx, b.tag, hi, lo); !done || err != nil {
				a.log.Debug("segment: IDs not given back: the mark moved on", "tag", b.tag, "err", err)
				continue
			}
		}
		done, err := ret.Return(ctx, b.tag, hi, lo)
		if err != nil && !errors.Is(err, ErrUnknownTag) {
			a.log.Warn("segment: giving IDs back failed; they are skipped", "tag", b.tag, "from", lo, "to", hi, "err", err)
		}
		if done {
			tags, given = tags+1, given+hi-lo
		}
		if ctx.Err() != nil {
			break
		}
	}
	if tags > 0 {
		a.log.Info("segment: gave the unused IDs back to the store", "tags", tags, "ids", given)
	}
}

// unused takes out of b the IDs it holds unused at the top of what it
// allocated, [lo, hi), and returns them; lo == hi when there are none, or
// they are not the top (a segment allocated later is served), or the tag
// is strict or used up. b is served no more.
func (b *buffer) unused() (lo, hi int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.restart()
	if b.strict.Load() || b.exhausted || b.high == 0 {
		return 0, 0
	}
	lo, hi = b.high, b.high
	if b.nextReady && b.next.End == hi {
		lo = b.next.Value
	}
	if b.cur.End == lo && b.cur.Value < b.cur.End {
		lo = b.cur.Value
	}
	return lo, hi
}
