package status

import (
	"context"
	"time"
)

// How the page names a strict tag's leader.
const (
	LeaderSelf    = "this vendor"
	LeaderOther   = "another vendor" // the leaders bucket could not be read
	LeaderNone    = "none yet (the first vendor asked for it leads)"
	holderFresh   = 5 * time.Second // how long a holder read from the bucket is shown
	holderReadMax = 32              // bucket reads per page refresh at most
)

// holderSeen is a strict tag's leader as read from the leaders bucket.
type holderSeen struct {
	leader string
	at     time.Time
}

// addLeaders names the leader of each strict tag of tags: this vendor when
// it leads the tag, else the holder the leaders bucket names. Reads are
// cached for holderFresh and bounded per call, so that a page refreshing
// every second over many strict tags costs NATS little; a tag not read yet
// says LeaderOther until it is, one read before what was read then.
func (v *State) addLeaders(ctx context.Context, tags []tagStatus) {
	if v.src.Leaders == nil {
		return
	}
	self := map[string]bool{}
	for _, l := range v.src.Leaders.Status() {
		self[l.Tag] = true
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v.holdersMu.Lock()
	defer v.holdersMu.Unlock()
	seen, reads, now := make(map[string]holderSeen, len(v.holders)), 0, time.Now()
	for i := range tags {
		t := &tags[i]
		switch h, ok := v.holders[t.Tag]; {
		case !t.Strict:
			continue
		case self[t.Tag]:
			t.Leader = LeaderSelf
			continue
		case ok && now.Sub(h.at) < holderFresh:
			t.Leader, seen[t.Tag] = h.leader, h
			continue
		case reads >= holderReadMax || ctx.Err() != nil:
			t.Leader = LeaderOther
			if ok { // read before: show it until read again
				t.Leader, seen[t.Tag] = h.leader, h
			}
			continue
		}
		reads++
		t.Leader = v.leader(ctx, t.Tag)
		seen[t.Tag] = holderSeen{t.Leader, now}
	}
	v.holders = seen // only the tags shown: bounded by PageTags
}

// leader reads who leads tag from the leaders bucket.
func (v *State) leader(ctx context.Context, tag string) string {
	holder, err := v.src.Leaders.Holder(ctx, tag)
	switch {
	case err != nil:
		return LeaderOther
	case holder == "":
		return LeaderNone
	case holder == v.src.Instance:
		return LeaderSelf // its lead, not yet in Status, or being stepped down from
	}
	return holder
}
