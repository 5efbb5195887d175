package kv

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/strict"
)

// LeadersBucket holds one key per strict tag that a vendor leads: the tag,
// whose value names the vendor. The bucket's TTL expires the key of a
// leader that stopped renewing.
const LeadersBucket = "leaf_strict_leaders"

// A Lead is a strict.Lease: Lead fails with an error wrapping
// strict.ErrLedElsewhere (naming the leader) when another vendor leads the
// tag, and a Lead's Renew with one wrapping strict.ErrLost once the key is
// gone or someone else's.
var _ strict.Lease = (*Lead)(nil)

// Leaders is the bucket of strict tags' leases.
type Leaders struct {
	js       jetstream.JetStream
	ttl      time.Duration
	replicas int
	holder   string

	mu sync.Mutex
	kv jetstream.KeyValue // as last opened
}

// OpenLeaders opens the bucket, creating it with ttl and replicas when it
// is missing; the TTL in force is the bucket's. holder names this vendor in
// the keys it holds.
func OpenLeaders(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int, holder string) (*Leaders, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("kv: lead TTL %v: want a positive duration", ttl)
	}
	ls := &Leaders{js: js, ttl: ttl, replicas: max(replicas, 1), holder: holder}
	if _, _, err := ls.open(ctx); err != nil {
		return nil, err
	}
	return ls, nil
}

// open opens the bucket, creating it again when it is gone, and returns
// when a leader in it may serve at the earliest: zero, or a TTL after the
// bucket's creation when it is younger than that, since it may have been
// created again after it was lost while an earlier leader, which cannot
// know, serves until its deadline.
func (ls *Leaders) open(ctx context.Context) (jetstream.KeyValue, time.Time, error) {
	b, err := openOrCreateSequenced(ctx, ls.js, jetstream.KeyValueConfig{
		Bucket: LeadersBucket, Description: "leaf-nats leaders of strict tags",
		History: 1, TTL: ls.ttl, Replicas: ls.replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	asked := time.Now()
	st, err := b.Status(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("kv: status of %s: %w", LeadersBucket, err)
	}
	if st.TTL() <= 0 {
		return nil, time.Time{}, fmt.Errorf("kv: bucket %s has no TTL, so a dead leader's tags would never be freed; delete it (nats kv del %s) and restart", LeadersBucket, LeadersBucket)
	}
	ls.mu.Lock()
	ls.kv, ls.ttl = b, st.TTL()
	ls.mu.Unlock()
	var notBefore time.Time
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		info := bs.StreamInfo()
		// The bucket's age by the server's clock, a TTL past its creation
		// by this one.
		if young := info.Created.Add(st.TTL()).Sub(info.TimeStamp); young > 0 && !info.TimeStamp.IsZero() {
			notBefore = asked.Add(young)
		}
	}
	return b, notBefore, nil
}

// TTL returns the lease TTL in force.
func (ls *Leaders) TTL() time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.ttl
}

// leadValue is a lead key's value; Token, random to each lead, makes it
// the lead's own (see leaseValue).
type leadValue struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
	Token  string    `json:"token,omitempty"`
}

// Lead takes the lease of tag. The bucket is looked at anew each time, so
// that a bucket created again since (see open) sets NotBefore.
func (ls *Leaders) Lead(ctx context.Context, tag string) (*Lead, error) {
	b, notBefore, err := ls.open(ctx)
	if err != nil {
		return nil, err
	}
	v, _ := json.Marshal(leadValue{Holder: ls.holder, Since: time.Now().UTC(), Token: rand.Text()})
	rev, err := b.Create(ctx, tag, v)
	if errors.Is(err, jetstream.ErrKeyExists) {
		holder, herr := ls.Holder(ctx, tag)
		if herr != nil {
			holder = herr.Error()
		}
		return nil, fmt.Errorf("%w: %s leads %q", strict.ErrLedElsewhere, holder, tag)
	}
	if err != nil {
		return nil, fmt.Errorf("kv: lead %q: %w", tag, err)
	}
	return &Lead{tag: tag, rev: rev, ttl: ls.TTL(), value: v, kv: b, NotBefore: notBefore}, nil
}

// Take takes the lead of tag, as strict.Config.Lead: the lease, and when
// its holder may serve at the earliest. Another vendor's lead is
// strict.ErrLedElsewhere; any other failure is segment.ErrUnavailable.
func (ls *Leaders) Take(ctx context.Context, tag string) (strict.Lease, time.Time, error) {
	l, err := ls.Lead(ctx, tag)
	switch {
	case errors.Is(err, strict.ErrLedElsewhere):
		return nil, time.Time{}, err
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("%w: take the lead of %q: %w", segment.ErrUnavailable, tag, err)
	}
	return l, l.NotBefore, nil
}

// Holder returns who leads tag, "" when no one does.
func (ls *Leaders) Holder(ctx context.Context, tag string) (string, error) {
	ls.mu.Lock()
	b := ls.kv
	ls.mu.Unlock()
	e, err := b.Get(ctx, tag)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	v, err := decodeLeadValue(e.Value())
	if err != nil {
		return "", corrupt(LeadersBucket, tag, e.Revision(), e.Value(), err, "It expires with the bucket's TTL")
	}
	return v.Holder, nil
}

// Lead is the lease of one strict tag.
type Lead struct {
	tag   string
	rev   uint64
	ttl   time.Duration
	value []byte
	kv    jetstream.KeyValue
	// NotBefore is when its holder may serve at the earliest: zero, or a
	// TTL after a bucket created again (see Leaders.Lead).
	NotBefore time.Time
}

// Renew updates the key against its last revision and returns the deadline
// until which the holder may serve: a TTL, less a margin for clock rates,
// after the update was sent, so that it passes before the server can expire
// the key and let another vendor lead.
//
// It first checks that the key still holds this lead's value, as a
// worker-ID lease's renewal does: a revision alone is no fence once a store
// goes back.
func (l *Lead) Renew(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, l.ttl/4)
	defer cancel()
	sent := time.Now()
	if e, err := l.kv.Get(ctx, l.tag); err == nil {
		switch {
		case string(e.Value()) != string(l.value):
			return time.Time{}, fmt.Errorf("%w: %q is another lead's now (revision %d, this vendor's was %d): it expired and was taken, or the NATS store went back",
				strict.ErrLost, l.tag, e.Revision(), l.rev)
		case e.Revision() < l.rev:
			return time.Time{}, fmt.Errorf("%w: %q: the NATS store went back: the lead is at revision %d, below the %d this vendor wrote", strict.ErrLost, l.tag, e.Revision(), l.rev)
		}
		l.rev = e.Revision() // a renewal of its own whose ack was lost, if later
	}
	rev, err := l.kv.Update(ctx, l.tag, l.value, l.rev)
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		return time.Time{}, fmt.Errorf("%w: %q expired or was taken (%s)", strict.ErrLost, l.tag, jsText(err))
	case err != nil:
		// "No response from stream", or a time-out while the publish
		// retries it, is also what a stream without a leader gives: ask
		// whether the bucket still exists.
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl/4)
		_, serr := l.kv.Status(pctx)
		pcancel()
		if bucketGone(serr) {
			return time.Time{}, fmt.Errorf("%w: bucket %s is gone (deleted, or the NATS store lost its JetStream state)", strict.ErrLost, LeadersBucket)
		}
		return time.Time{}, fmt.Errorf("kv: renew the lead of %q: %w", l.tag, err)
	}
	l.rev = rev
	return sent.Add(l.ttl - l.ttl/50), nil
}

// TTL returns the lease's TTL.
func (l *Lead) TTL() time.Duration { return l.ttl }

// Release deletes the key, so that another vendor may lead at once. The
// holder stops serving first.
func (l *Lead) Release(ctx context.Context) error {
	if err := l.kv.Delete(ctx, l.tag, jetstream.LastRevision(l.rev)); err != nil {
		return fmt.Errorf("kv: release the lead of %q: %w", l.tag, err)
	}
	return nil
}
