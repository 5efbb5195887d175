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
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/strict"
)

// LeadersBucket holds one key per strict tag that a vendor leads: the tag,
// whose value names the vendor. The bucket's TTL expires the key of a
// leader that stopped renewing.
const LeadersBucket = "leaf_strict_leaders"

// A Lead is a strict.Lease: Lead fails with an error wrapping
// strict.ErrLedElsewhere (naming the leader) when another vendor leads the
// tag, and a Lead's Renew with one wrapping lease.ErrLost once the key is
// gone or someone else's.
var _ strict.Lease = (*Lead)(nil)

// Leaders is the bucket of strict tags' leases.
type Leaders struct {
	js  JS
	cfg LeadersConfig

	mu  sync.Mutex
	kv  jetstream.KeyValue // as last opened
	ttl time.Duration      // the bucket's
}

// LeadersConfig configures OpenLeaders. TTL is required.
type LeadersConfig struct {
	// TTL of a lead when the bucket is created; the TTL in force is the
	// bucket's.
	TTL time.Duration
	// Replicas of the bucket when it is created (1).
	Replicas int
	// Holder names this vendor in the keys it holds.
	Holder string
	// Clock is what leads' deadlines are read on: the clock the strict
	// tags' leaders check them with (snowflake.SystemClock).
	Clock snowflake.Clock
}

// OpenLeaders opens the bucket, creating it when it is missing.
func OpenLeaders(ctx context.Context, js JS, c LeadersConfig) (*Leaders, error) {
	if c.TTL <= 0 {
		return nil, fmt.Errorf("kv: lead TTL %v: want a positive duration", c.TTL)
	}
	c.Replicas = max(c.Replicas, 1)
	if c.Clock == nil {
		c.Clock = snowflake.SystemClock{}
	}
	ls := &Leaders{js: js, cfg: c, ttl: c.TTL}
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
		Bucket: ls.js.Leaders, Description: "leaf-nats leaders of strict tags",
		History: 1, TTL: ls.cfg.TTL, Replicas: ls.cfg.Replicas, Storage: jetstream.FileStorage, Placement: ls.js.Placement,
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	asked := ls.cfg.Clock.Now()
	st, err := b.Status(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("kv: status of %s: %w", ls.js.Leaders, err)
	}
	if st.TTL() <= 0 {
		return nil, time.Time{}, fmt.Errorf("kv: bucket %s has no TTL, so a dead leader's tags would never be freed; delete it (nats kv del %s) and restart", ls.js.Leaders, ls.js.Leaders)
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
	v, _ := json.Marshal(leadValue{Holder: ls.cfg.Holder, Since: ls.cfg.Clock.Now().UTC(), Token: rand.Text()})
	l := &Lead{NotBefore: notBefore, key: fencedKey{kv: b, key: tag, what: fmt.Sprintf("the lead of %q", tag), value: v, ttl: ls.TTL(),
		clock: ls.cfg.Clock, owner: leadOwner}}
	err = l.key.create(ctx)
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
	return l, nil
}

// leadOwner names who a lead key's value says holds it.
func leadOwner(v []byte) string {
	if l, err := decodeLeadValue(v); err == nil {
		return l.Holder
	}
	return "someone else"
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
		return "", Corrupt(ls.js.Leaders, tag, e.Revision(), e.Value(), err, "It expires with the bucket's TTL")
	}
	return v.Holder, nil
}

// Lead is the lease of one strict tag: a fencedKey in LeadersBucket.
type Lead struct {
	key fencedKey
	// NotBefore is when its holder may serve at the earliest: zero, or a
	// TTL after a bucket created again (see Leaders.Lead).
	NotBefore time.Time
}

// Renew renews the key (fencedKey.renew) and returns the deadline until
// which the holder may serve; an error wrapping lease.ErrLost is final.
func (l *Lead) Renew(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, l.key.ttl/4)
	defer cancel()
	return l.key.renew(ctx)
}

// TTL returns the lease's TTL.
func (l *Lead) TTL() time.Duration { return l.key.ttl }

// Release deletes the key, so that another vendor may lead at once. The
// holder stops serving first.
func (l *Lead) Release(ctx context.Context) error {
	if err := l.key.release(ctx); err != nil {
		return fmt.Errorf("kv: release the lead of %q: %w", l.key.key, err)
	}
	return nil
}
