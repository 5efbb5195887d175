package vending_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/strict"
	"github.com/leaf-nats/leaf/vending"
)

// strictSource serves one strict tag from a counter; its slow path waits
// until release is closed.
type strictSource struct {
	mu      sync.Mutex
	next    int64
	slow    bool
	entered chan struct{}
	release chan struct{}
}

func (s *strictSource) Restart(string) {}

func (s *strictSource) TryTakeStrict(_ string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slow {
		return dst, false, nil
	}
	r := ids.Range{First: s.next, Count: n}
	s.next += n
	return append(dst, r), true, nil
}

func (s *strictSource) TakeStrict(ctx context.Context, _ string, dst []ids.Range, n int64) ([]ids.Range, error) {
	s.mu.Lock()
	slow := s.slow
	s.mu.Unlock()
	if slow {
		s.entered <- struct{}{}
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := ids.Range{First: s.next, Count: n}
	s.next += n
	return append(dst, r), nil
}

type foreverLease struct{}

func (foreverLease) Renew(context.Context) (time.Time, error) { return time.Now().Add(time.Hour), nil }
func (foreverLease) Release(context.Context) error            { return nil }

// A leader answers forwarded requests within the configured count, only to
// inboxes, and its Forwarder's Close waits for the requests it is serving.
func TestForwarderLimitsRepliesAndClose(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	rec := &recorder{}
	f, err := vending.OpenForwarder(nc, vending.ForwarderConfig{MaxCount: 100, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	src := &strictSource{next: 1, entered: make(chan struct{}, 1), release: make(chan struct{})}
	ls, err := strict.Open(strict.Config{
		Source: src,
		Lead: func(context.Context, string) (strict.Lease, time.Time, error) {
			return foreverLease{}, time.Time{}, nil
		},
		Forward: f.Forward,
		Listen:  f.Listen,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close(context.Background())
	if _, err := ls.Take(t.Context(), "ledger", nil, 1); err != nil { // no leader answers: this one leads
		t.Fatal(err)
	}
	client := natstest.Conn(t, s)
	msg := requestEnc(t, client, vending.StrictSubject("leaf", "ledger"), vending.EncodingRanges, "101")
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" || !strings.Contains(msg.Header.Get(micro.ErrorHeader), "1 to 100") {
		t.Fatalf("101 IDs forwarded: %v %q, want a 400 naming the limit of 100", msg.Header, msg.Data)
	}
	rs, err := f.Forward(t.Context(), "ledger", nil, 100)
	if err != nil || ids.Count(rs) != 100 {
		t.Fatalf("forward of 100: %v, %v", rs, err)
	}

	spy := natstest.Conn(t, s)
	caught, _ := spy.SubscribeSync("$KV.>")
	spy.Flush()
	if err := client.PublishMsg(&nats.Msg{Subject: vending.StrictSubject("leaf", "ledger"), Reply: "$KV.leaf_strict_leaders.ledger", Data: []byte("5")}); err != nil {
		t.Fatal(err)
	}
	client.Flush()
	for deadline := time.Now().Add(5 * time.Second); len(rec.dropped()) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(rec.dropped()) != 1 {
		t.Fatalf("drops %q, want the request to $KV dropped", rec.dropped())
	}
	if m, err := caught.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the leader published to %s", m.Subject)
	}

	// A request that waits for the store is served in a goroutine of its
	// own: Close waits for it.
	src.mu.Lock()
	src.slow = true
	src.mu.Unlock()
	if err := client.PublishRequest(vending.StrictSubject("leaf", "ledger"), client.NewInbox(), []byte("1")); err != nil {
		t.Fatal(err)
	}
	<-src.entered
	closed := make(chan error, 1)
	go func() { closed <- f.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a forwarded request was being served", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(src.release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := f.Listen("other", ls); err == nil {
		t.Fatal("a closed forwarder listens")
	}
}
