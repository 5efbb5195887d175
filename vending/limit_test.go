package vending_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/kvstore"
	"github.com/leaf-nats/leaf/vending"
)

// startLimitedVendor serves tag "order" from a real allocator on a KV store
// with a rate limit of rate IDs a second, burst at once, and a limit per
// requester of requesterRate IDs a second (0: none), a second of it at once.
func startLimitedVendor(t *testing.T, nc *nats.Conn, rate, burst, requesterRate float64) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	store, err := kvstore.New(ctx, kv.Plain(js), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Create(ctx, segment.Row{Tag: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	a, err := segment.Open(ctx, segment.Options{Store: store, RateLimit: rate, RateBurst: burst})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	svc, err := vending.Open(nc, vending.Config{Segments: allocator{a}, RequesterRateLimit: requesterRate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
}

// allocator serves an allocator's tags, none of them strict.
type allocator struct{ *segment.Allocator }

func (allocator) HandOff(string, vending.Handing) bool { return false }
func (allocator) Leans(string) bool                    { return false }

// A 429 says what the client must do: a batch above the burst carries the
// most one request may ask for (and is not retried), one within it when to
// ask again. A prefetch buffer larger than the burst shrinks to it.
func TestClientObeysRateLimit(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	startLimitedVendor(t, nc, 1000, 1000, 0)

	c := newClient(t, nc, vending.ClientConfig{})
	order, _ := c.Segment("order")
	_, err := order.NextRanges(ctxT(t), 1_000_000_000)
	var e *vending.Error
	if !errors.As(err, &e) || e.Code != vending.CodeTooManyRequests || e.MaxCount != 1000 || e.RetryAfter != 0 {
		t.Fatalf("a billion IDs under a burst of 1000: %v (%+v), want a 429 with MaxCount 1000 and no wait", err, e)
	}
	if _, err := order.NextRanges(ctxT(t), 1000); err != nil {
		t.Fatalf("the burst: %v", err)
	}
	// The budget is used: the vendor says when to ask again, and a client
	// that waits as told makes one request in a context shorter than that.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = order.NextRanges(ctx, 900)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("900 more at once, in 100ms: %v, want the context's deadline (the client waits as the 429 says)", err)
	}
	raw, err := nc.RequestMsg(&nats.Msg{Subject: "leaf.segment.order", Header: nats.Header{vending.EncodingHeader: {vending.EncodingRanges}}, Data: []byte("900")}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Header.Get(vending.RetryAfterHeader); got == "" || raw.Header.Get(vending.MaxCountHeader) != "1000" {
		t.Fatalf("429 headers %v, want %s and %s: 1000", raw.Header, vending.RetryAfterHeader, vending.MaxCountHeader)
	}

	// A prefetch of a million, under a burst of 1000, asks for 1000.
	pc := newClient(t, nc, vending.ClientConfig{Prefetch: 1_000_000})
	porder, _ := pc.Segment("order")
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for range 1500 {
		if _, err := porder.Next(ctx); err != nil {
			t.Fatalf("prefetched Next under the rate limit: %v", err)
		}
	}
}

// Each limit a refill meets says its own most: the requester's burst
// (100,000), then the tag's (1000). A prefetch of a million shrinks to
// each in turn, and its IDs come.
func TestPrefetchShrinksToEveryLimit(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	startLimitedVendor(t, nc, 1000, 1000, 100_000)
	c := newClient(t, nc, vending.ClientConfig{Prefetch: 1_000_000})
	order, _ := c.Segment("order")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for range 1500 {
		if _, err := order.Next(ctx); err != nil {
			t.Fatalf("prefetched Next under two limits: %v", err)
		}
	}
}
