package kv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/strict"
)

func openLeaders(t *testing.T, js JS, ttl time.Duration, holder string) *Leaders {
	t.Helper()
	ls, err := OpenLeaders(context.Background(), js, LeadersConfig{TTL: ttl, Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// One vendor leads a tag at a time; a renewal keeps the lead, a release
// frees it at once, and a key that expired loses it: the old leader's
// renewal says so, and its deadline passed before the key could expire.
func TestLeadIsExclusiveAndExpires(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	ttl := 2 * time.Second
	a := openLeaders(t, newJS(t, s), ttl, "vendor-a")
	b := openLeaders(t, newJS(t, s), ttl, "vendor-b")

	la, err := a.Lead(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	if !la.NotBefore.IsZero() && time.Until(la.NotBefore) > ttl {
		t.Fatalf("NotBefore %v: more than a TTL away", la.NotBefore)
	}
	if _, err := b.Lead(ctx, "ledger"); !errors.Is(err, strict.ErrLedElsewhere) || !strings.Contains(err.Error(), "vendor-a") {
		t.Fatalf("second lead: %v, want ErrLedElsewhere naming vendor-a", err)
	}
	if h, err := b.Holder(ctx, "ledger"); err != nil || h != "vendor-a" {
		t.Fatalf("Holder = %q, %v", h, err)
	}
	deadline, err := la.Renew(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(deadline); d <= 0 || d > ttl {
		t.Fatalf("deadline in %v, want within the TTL %v", d, ttl)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lead(ctx, "ledger")
	if err != nil {
		t.Fatalf("lead after a release: %v", err)
	}
	deadline, err = lb.Renew(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// b stops renewing: a may lead only after b's deadline.
	var took time.Time
	for {
		_, err := a.Lead(ctx, "ledger")
		if err == nil {
			took = time.Now()
			break
		}
		if !errors.Is(err, strict.ErrLedElsewhere) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took.Before(deadline) {
		t.Fatalf("a led at %v, before b's deadline %v", took, deadline)
	}
	if _, err := lb.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("b's renewal after expiry: %v, want lease.ErrLost", err)
	}
}

// A bucket deleted under a leader loses its lead; a leader in the bucket
// created again waits a TTL before it serves, since the old one may still.
func TestLeadersBucketLost(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	ttl := 2 * time.Second
	js := newJS(t, s)
	a := openLeaders(t, js, ttl, "vendor-a")
	la, err := a.Lead(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, LeadersBucket); err != nil {
		t.Fatal(err)
	}
	if _, err := la.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renewal in a deleted bucket: %v, want lease.ErrLost", err)
	}
	// a itself, which opened the bucket before it was lost, leads in the
	// bucket created again.
	before := time.Now()
	lb, err := a.Lead(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	if lb.NotBefore.Before(before.Add(ttl/2)) || time.Until(lb.NotBefore) > ttl {
		t.Fatalf("new leader in a new bucket may serve at %v, asked at %v: want about a TTL (%v) later", lb.NotBefore, before, ttl)
	}
}
