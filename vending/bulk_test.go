package vending_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/vendtest"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// gatedSnowflake counts up; calls for more than one ID block until open is
// closed, as the generator blocks a large batch on the clock.
type gatedSnowflake struct {
	mu      sync.Mutex
	next    int64
	open    chan struct{}
	blocked chan struct{} // receives once per blocked call
}

var _ vending.Snowflake = (*gatedSnowflake)(nil)

func (g *gatedSnowflake) NextRanges(dst []ids.Range, n int) ([]ids.Range, error) {
	if n > 1 {
		select {
		case g.blocked <- struct{}{}:
		default:
		}
		<-g.open
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := ids.Range{First: g.next + 1, Count: int64(n)}
	g.next += int64(n)
	return append(dst, r), nil
}

// A batch larger than a millisecond's IDs waits in a lane of its own: a
// single ID is answered while it is being generated, and past the lane's
// room a large batch is answered 429 with when to ask again, not queued.
func TestLargeBatchesDoNotHoldUpSingleIDs(t *testing.T) {
	s := natstest.Server(t)
	src := &gatedSnowflake{open: make(chan struct{}), blocked: make(chan struct{}, 1)}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: src, Layout: snowflake.LayoutJS53})
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Conn(t, s)
	big := func() *nats.Msg {
		return &nats.Msg{Subject: "leaf.snowflake", Header: nats.Header{vending.EncodingHeader: {vending.EncodingRanges}}, Data: []byte("10000")}
	}
	// The first large batch blocks in the generator; seven more wait.
	var inboxes []*nats.Subscription
	for range 8 {
		inbox := nc.NewRespInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		inboxes = append(inboxes, sub)
		m := big()
		m.Reply = inbox
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-src.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("no large batch reached the generator")
	}
	// A single ID is answered meanwhile, inline.
	msg, err := nc.Request("leaf.snowflake", nil, 5*time.Second)
	if err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("a single ID while a large batch is generated: %v %v %q", err, msg.Header, msg.Data)
	}
	// The ninth large batch finds the lane full.
	msg, err = nc.RequestMsg(big(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "429" || msg.Header.Get(vending.RetryAfterHeader) == "" {
		t.Fatalf("a large batch past the lane's room: %v %q, want a 429 with %s", msg.Header, msg.Data, vending.RetryAfterHeader)
	}
	// Once the generator moves, every batch queued is answered in full.
	close(src.open)
	for i, sub := range inboxes {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("large batch %d: %v", i, err)
		}
		rs, err := vending.DecodeRanges(nil, m.Data)
		if err != nil || ids.Count(rs) != 10000 {
			t.Fatalf("large batch %d: %d IDs (%v), want 10000: %s", i, ids.Count(rs), err, m.Header.Get(micro.ErrorHeader))
		}
	}
	if err := svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A large batch from a real js53 generator is whole and ascending.
func TestLargeBatchIsWhole(t *testing.T) {
	s := natstest.Server(t)
	g, err := snowflake.New(snowflake.Settings{WorkerID: 3, Layout: snowflake.LayoutJS53})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: g, Layout: snowflake.LayoutJS53})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	msg := vendtest.Request(t, natstest.Conn(t, s), "leaf.snowflake", strconv.Itoa(5000))
	got, err := vending.DecodeText(nil, msg.Data)
	if err != nil || len(got) != 5000 {
		t.Fatalf("5000 js53 IDs: %d, %v (%s)", len(got), err, msg.Header.Get(micro.ErrorHeader))
	}
	ascendingUnique(t, got)
}
