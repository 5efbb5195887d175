package status

import (
	"context"
	"errors"
	"testing"

	"github.com/leaf-nats/leaf/strict"
)

// fakeLeaders leads the tags of self; holders are what the bucket says of
// the others (a tag missing: the read fails).
type fakeLeaders struct {
	self    []string
	holders map[string]string
	reads   int
}

var _ Leaders = (*fakeLeaders)(nil)

func (l *fakeLeaders) Status() []strict.Status {
	var out []strict.Status
	for _, tag := range l.self {
		out = append(out, strict.Status{Tag: tag, Serving: true})
	}
	return out
}

func (l *fakeLeaders) Holder(_ context.Context, tag string) (string, error) {
	l.reads++
	h, ok := l.holders[tag]
	if !ok {
		return "", errors.New("no response from stream")
	}
	return h, nil
}

// The page names each strict tag's leader: this vendor, another by its
// instance name, none yet, or another vendor when the bucket cannot be
// read; normal tags have none, and reads are cached.
func TestStrictTagsNameTheirLeader(t *testing.T) {
	l := &fakeLeaders{self: []string{"mine"}, holders: map[string]string{"theirs": "vendor-2", "free": "", "also-mine": "vendor-1"}}
	v := &State{src: Sources{Instance: "vendor-1", Leaders: l}}
	tags := []tagStatus{
		{Tag: "also-mine", Strict: true}, {Tag: "free", Strict: true}, {Tag: "mine", Strict: true},
		{Tag: "normal"}, {Tag: "theirs", Strict: true}, {Tag: "unread", Strict: true},
	}
	want := map[string]string{"also-mine": LeaderSelf, "free": LeaderNone, "mine": LeaderSelf, "normal": "", "theirs": "vendor-2", "unread": LeaderOther}
	for range 2 {
		v.addLeaders(context.Background(), tags)
		for _, ts := range tags {
			if ts.Leader != want[ts.Tag] {
				t.Fatalf("%s: leader %q; want %q", ts.Tag, ts.Leader, want[ts.Tag])
			}
		}
	}
	if l.reads != 4 {
		t.Fatalf("%d reads of the bucket for 4 strict tags led elsewhere, twice; want them cached", l.reads)
	}
}
