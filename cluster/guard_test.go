package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment/kvstore"
	"github.com/leaf-nats/leaf/vending"
	"github.com/leaf-nats/leaf/workerid"
	"github.com/nats-io/nats.go/jetstream"
)

// syncLog collects a logger's lines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A Guard on a real server: it records the contract, claims a worker ID,
// tells the others which one it holds, and says when a vendor holding a
// worker ID does not answer for over a lease TTL.
func TestGuardSeesItsPeers(t *testing.T) {
	s := natstest.Server(t)
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	contracts, store := openContractsAndStore(t, js)
	open := func(name string, logs *syncLog) *Guard {
		g, err := Open(ctx, Config{
			Terms: want, Kind: KindKV, Self: name,
			Lease:   kv.LeaseConfig{TTL: 3 * time.Second, Holder: name},
			MaxSkew: time.Second, JS: kv.Plain(js), Contracts: contracts, Store: store,
			Conn: natstest.Conn(t, s), Prefix: "leaf", Replies: vending.NewReplies(nil, nil),
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close(ctx) })
		return g
	}
	var logsA, logsB syncLog
	a, b := open("a/1", &logsA), open("b/2", &logsB)
	if a.SnowflakeErr() != nil || a.SegmentsErr() != nil {
		t.Fatalf("gates after the first check: %v, %v", a.SnowflakeErr(), a.SegmentsErr())
	}
	one := workerid.Range{First: 5, Last: 5}
	h, err := b.Claim(ctx, workerid.ClaimRequest{IDs: one, Report: func(string, time.Time) {}})
	if err != nil {
		t.Fatal(err)
	}
	replies, err := a.asker.Ask(ctx, time.Second, 0, 1, a.clock)
	if err != nil || len(replies) != 1 || !replies[0].Worker.Held || replies[0].Worker.ID != 5 || !strings.HasPrefix(replies[0].Worker.Where, kv.WorkersBucket+"@") {
		t.Fatalf("b's answer: %+v, %v", replies, err)
	}
	// b stops answering (its guard closed) but keeps renewing its lease:
	// alive and unseen (renewed ten times a TTL, so that a loaded machine does
	// not let it lapse). Within a TTL and a check or two a says so.
	b.Close(ctx)
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
				h.Renew(ctx, 0)
			}
		}
	}()
	defer func() { close(stop); <-renewed }()
	deadline := time.Now().Add(5*CheckEvery + 5*time.Second)
	for a.Status().Blind == "" {
		if time.Now().After(deadline) {
			t.Fatalf("a never said it cannot see b:\n%s", logsA.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := a.Status(); !strings.Contains(st.Blind, "worker IDs 5") || st.Unseen != 1 {
		t.Fatalf("status %+v", st)
	}
	if !strings.Contains(logsA.String(), "cannot see some of the vendors") {
		t.Fatalf("not logged:\n%s", logsA.String())
	}
}

// goneStore is a vendor's embedded store as its watch tells it.
type goneStore struct{ err atomic.Pointer[error] }

var _ Local = (*goneStore)(nil)

func (g *goneStore) Err() error {
	if p := g.err.Load(); p != nil {
		return *p
	}
	return nil
}

// A vendor whose embedded store is gone shuts both gates with what the
// store said, as a 503; /readyz reads them from Status.
func TestGuardLocalStoreGone(t *testing.T) {
	s := natstest.Server(t)
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	contracts, store := openContractsAndStore(t, js)
	local := &goneStore{}
	g, err := Open(ctx, Config{
		Terms: want, Kind: KindKV, Self: "a/1",
		Lease:   kv.LeaseConfig{TTL: time.Second, Holder: "a/1"},
		MaxSkew: time.Second, JS: kv.Plain(js), Contracts: contracts, Store: store,
		Conn: natstest.Conn(t, s), Prefix: "leaf", Replies: vending.NewReplies(nil, nil), Local: local,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(ctx) })
	if g.SegmentsErr() != nil || g.SnowflakeErr() != nil {
		t.Fatalf("gates with the store there: %v, %v", g.SegmentsErr(), g.SnowflakeErr())
	}
	gone := fmt.Errorf("%w: the store directory leaf-data: no such file or directory", errStoreGone)
	local.err.Store(&gone)
	for _, err := range []error{g.SegmentsErr(), g.SnowflakeErr()} {
		if !errors.Is(err, errStoreGone) || vending.Code(err) != vending.CodeUnavailable || !strings.Contains(err.Error(), "leaf-data") {
			t.Fatalf("gate with the store gone: %v (code %d), want a 503 naming it", err, vending.Code(err))
		}
	}
	if st := g.Status(); !strings.Contains(st.SegmentsRefused, "leaf-data") || !strings.Contains(st.SnowflakeRefused, "leaf-data") {
		t.Fatalf("status %+v, want both refused naming the store", st)
	}
}

var errStoreGone = errors.New("embedded NATS store gone")

// openContractsAndStore opens the cluster contract's bucket and a KV
// segment store in js, as a vendor does before its guard.
func openContractsAndStore(t *testing.T, js jetstream.JetStream) (*kv.Contracts, *kvstore.Store) {
	t.Helper()
	contracts, err := kv.OpenContracts(context.Background(), kv.Plain(js), 1)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(context.Background(), kv.Plain(js), 1)
	if err != nil {
		t.Fatal(err)
	}
	return contracts, store
}
