package vending_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/vendtest"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// A requester picks its reply subject, and the vendor publishes there with
// its own permissions. A request whose reply subject is not an inbox is
// dropped: nothing is published there, no ID is taken, and the observer
// counts it. Inboxes, and the prefixes an operator adds, are answered.
func TestRepliesGoOnlyToInboxes(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	g, err := snowflake.New(snowflake.Settings{WorkerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	segs := newCounterSegments("order")
	rec := &vendtest.Recorder{}
	data := natstest.Conn(t, s) // a vendor's connection for JetStream
	svc, err := vending.Open(nc, vending.Config{Snowflake: g, Segments: segs, Observer: rec,
		ReplyPrefixes: append(slices.Clone(vending.DefaultReplyPrefixes), "_INBOX_orders."),
		OwnInboxes:    []string{vending.RequestInbox(data)}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	client := natstest.Conn(t, s)
	spy := natstest.Conn(t, s)
	// Whatever the vendor publishes to a subject below is caught here.
	caught, err := spy.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	spy.Flush()
	bad := []string{
		"$KV.leaf_segments.order",
		"$KV.leaf_cluster.contract",
		"$KV.leaf_worker_clocks.worker.1",
		"$JS.API.INFO",
		"leaf.segment.order",
		"leaf.strict.order",
		"orders.replies",
		"_INBOX.a b",
		"_INBOX.*",
		"_INBOX..x",
		"_INBOX." + strings.Repeat("x", 600),
		vending.RequestInbox(data) + "forged",
	}
	subjects := []string{"leaf.snowflake", "leaf.snowflake.decode", "leaf.segment.order"}
	sent := 0
	for _, reply := range append(bad, "") {
		for _, subject := range subjects {
			body := []byte("5")
			if strings.HasSuffix(subject, "decode") {
				body = []byte("1862213154793730049")
			}
			err := client.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: body})
			if errors.Is(err, nats.ErrBadSubject) {
				continue // nats.go refuses to send it; the server would too
			}
			if err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	client.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.Drops()) < sent && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(rec.Drops()); got != sent {
		t.Fatalf("%d requests dropped, want %d: %q", got, sent, rec.Drops())
	}
	// Every message the spy saw is a request the client sent: the vendor
	// published nothing.
	for {
		m, err := caught.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		if !slices.Contains(subjects, m.Subject) {
			t.Errorf("the vendor published to %q: %q", m.Subject, m.Data)
		}
	}
	if g.Last() != 0 {
		t.Errorf("snowflake IDs were made for dropped requests (last ms %d)", g.Last())
	}
	if codes, _ := rec.Seen(0); len(codes) != 0 {
		t.Errorf("dropped requests were answered with codes %v", codes)
	}
	// Inboxes are answered: the default one, and a custom prefix.
	ids := requestIDs(t, client, "leaf.segment.order", "3")
	if !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Fatalf("after the dropped requests, the first IDs are %v, want 1 2 3: dropped requests took IDs", ids)
	}
	custom, err := nats.Connect(s.ClientURL(), nats.CustomInboxPrefix("_INBOX_orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer custom.Close()
	if ids := requestIDs(t, custom, "leaf.segment.order", "2"); !slices.Equal(ids, []int64{4, 5}) {
		t.Fatalf("a custom inbox got %v, want 4 5", ids)
	}
}

func requestIDs(t *testing.T, nc *nats.Conn, subject, body string) []int64 {
	t.Helper()
	msg := vendtest.Request(t, nc, subject, body)
	ids, err := vending.DecodeText(nil, msg.Data)
	if err != nil {
		t.Fatalf("%s: %v (%v %q)", subject, err, msg.Header, msg.Data)
	}
	return ids
}
