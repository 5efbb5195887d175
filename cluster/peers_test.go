package cluster

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

func samplePeer() Peer {
	return Peer{V: 1, Instance: "host/42", Now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC),
		Terms: Terms{Epoch: 1288834974657, Layout: "1+41+10+12", WorkerIDs: "0-1023", Segments: "postgres:" + strings.Repeat("a", 32) + "@7300000000000000000.16384.16390"},
		Worker: PeerWorker{ID: 1023, Held: true, Deadline: time.Date(2026, 11, 23, 12, 0, 20, 0, time.UTC),
			Where: "leaf_workers@" + strings.Repeat("z", 13), LeaseTTL: 30 * time.Second}}
}

// What vendors exchange for their safety checks is a few hundred bytes,
// whatever the number of tags: nothing in it grows with them.
func TestPeerIsSmall(t *testing.T) {
	b, err := json.Marshal(samplePeer())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxPeerBytes/2 {
		t.Fatalf("a peer's answer takes %d bytes: %s", len(b), b)
	}
	if p, err := DecodePeer(b); err != nil || p != samplePeer() {
		t.Fatalf("round trip: %+v, %v", p, err)
	}
}

// A peer's worker ID must be one of its own layout's: 1023 is one of the
// default's, not of js53's (0-15).
func TestPeerWorkerIDWithinItsLayout(t *testing.T) {
	p := samplePeer()
	p.Terms.Layout = snowflake.LayoutJS53.String()
	for id, ok := range map[int]bool{15: true, 16: false, 1023: false} {
		p.Worker.ID = id
		b, _ := json.Marshal(p)
		if _, err := DecodePeer(b); (err == nil) != ok {
			t.Errorf("js53 peer holding worker ID %d: %v, want accepted %v", id, err, ok)
		}
	}
	p.Terms.Layout = "1+40+11+12"
	b, _ := json.Marshal(p)
	if _, err := DecodePeer(b); err == nil || !strings.Contains(err.Error(), "unknown layout") {
		t.Errorf("a peer with an unknown layout: %v", err)
	}
}

func FuzzDecodePeer(f *testing.F) {
	b, _ := json.Marshal(samplePeer())
	f.Add(b)
	f.Add([]byte(`{"v":1,"instance":"x","now":"2026-11-23T12:00:00Z","worker":{"id":5000,"held":true}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`1862213154793730049`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePeer(data)
		if err != nil {
			return
		}
		layout, err := snowflake.ParseLayout(p.Terms.Layout)
		if err != nil || p.V != peerVersion || p.Instance == "" || p.Now.IsZero() ||
			p.Worker.Held && (p.Worker.ID < 0 || p.Worker.ID > layout.MaxWorkerID() || p.Worker.Deadline.IsZero()) {
			t.Fatalf("DecodePeer(%q) accepted %+v", data, p)
		}
	})
}

// Every vendor answers on the exchange; an asker gets every other vendor's
// answer, drops what cannot be believed, returns as soon as the vendors it
// expects have answered, and answers nothing to a reply subject that is no
// inbox.
func TestAskAndAnswer(t *testing.T) {
	s := natstest.Server(t)
	log := slog.New(slog.DiscardHandler)
	replies := vending.NewReplies(nil, nil)
	for _, name := range []string{"a/1", "b/2", "c/3"} {
		p := samplePeer()
		p.Instance = name
		r, err := respond(natstest.Conn(t, s), "leaf", replies, log, func() Peer { return p })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.close() })
	}
	liar := natstest.Conn(t, s)
	liar.Subscribe(PeersSubject("leaf"), func(m *nats.Msg) {
		if strings.HasPrefix(m.Reply, nats.InboxPrefix) {
			m.Respond([]byte(`{"v":1,"instance":"liar/9"}`))
		}
	})
	liar.Flush()

	asker := NewAsker(natstest.Conn(t, s), "leaf", "a/1", log)
	start := time.Now()
	got, err := asker.Ask(t.Context(), 5*time.Second, 10*time.Millisecond, 2, snowflake.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %v although both expected vendors answered", took)
	}
	names := map[string]bool{}
	for _, r := range got {
		names[r.Instance] = true
	}
	if len(got) != 2 || !names["b/2"] || !names["c/3"] {
		t.Fatalf("answers %v, want b/2 and c/3 (not itself, not the liar)", names)
	}

	spy := natstest.Conn(t, s)
	kvSub, _ := spy.SubscribeSync("$KV.>")
	spy.Flush()
	client := natstest.Conn(t, s)
	client.PublishRequest(PeersSubject("leaf"), "$KV.leaf_workers.worker.1", nil)
	client.Flush()
	if m, err := kvSub.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a vendor answered on %s", m.Subject)
	}
}

// An Asker that NATS does not let ask answers ErrPeersDenied, which the
// Guard takes as no answers (the Asker has said so).
func TestAskRefused(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "vendor", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Deny: []string{PeersSubject("leaf")}},
		}}}
	}})
	nc := natstest.Conn(t, s, nats.UserInfo("vendor", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	asker := NewAsker(nc, "leaf", "a/1", slog.New(slog.DiscardHandler))
	got, err := asker.Ask(t.Context(), time.Second, 0, 0, snowflake.SystemClock{})
	if !errors.Is(err, ErrPeersDenied) || got != nil {
		t.Fatalf("Ask: %v, %v; want ErrPeersDenied", got, err)
	}
}
