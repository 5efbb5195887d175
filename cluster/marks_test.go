package cluster

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
	"github.com/leaf-nats/leaf/workerid"
)

// A vendor that cannot be sure of the KV store asks the vendors holding
// worker IDs for their marks before it allocates a tag, and waits for all
// of them; once sure it asks no more until it reconnects. A holder that
// never answers is waited for only so long.
func TestPeerMarks(t *testing.T) {
	s := natstest.Server(t)
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	hold := func(name string, id int) {
		l, err := kv.Claim(ctx, js, kv.LeaseConfig{TTL: 3 * time.Second, Holder: name, IDs: &workerid.Range{First: id, Last: id}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background(), l.Last()) })
	}
	var fence atomic.Uint64
	open := func(name string, trust time.Duration) *PeerMarks {
		m, err := OpenPeerMarks(PeerMarksConfig{Conn: natstest.Conn(t, s), JS: js, Prefix: "leaf", Self: name,
			Replies: vending.NewReplies(nil, nil), Fence: fence.Load, TrustAfter: trust, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(ctx) })
		return m
	}
	hold("a/1", 1)
	hold("b/2", 2)
	a, b := open("a/1", time.Minute), open("b/2", time.Minute)
	b.Record(ctx, "order", 500)
	if got, err := a.Mark(ctx, "order"); err != nil || got != 500 {
		t.Fatalf("a's mark of order: %d, %v; want b's 500", got, err)
	}
	b.Record(ctx, "order", 900)
	if got, _ := a.Mark(ctx, "order"); got != 500 {
		t.Fatalf("sure of order, a asked again: %d", got)
	}
	fence.Add(1) // reconnected: unsure again
	if got, _ := a.Mark(ctx, "order"); got != 900 {
		t.Fatalf("after a reconnect: %d, want 900", got)
	}

	hold("c/3", 3) // holds a worker ID, never answers
	fence.Add(1)
	_, err := a.Mark(ctx, "order")
	if !errors.Is(err, segment.ErrUnavailable) || !strings.Contains(err.Error(), "c/3") {
		t.Fatalf("with c/3 silent: %v, want ErrUnavailable naming it", err)
	}
	impatient := open("d/4", 200*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	if got, err := impatient.Mark(ctx, "order"); err != nil || got != 900 {
		t.Fatalf("past its patience: %d, %v; want 900 without c/3", got, err)
	}
}
