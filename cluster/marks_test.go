package cluster

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/scatter"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
	"github.com/leaf-nats/leaf/workerid"
)

// A vendor asks the vendors holding worker IDs for their marks at every
// allocation. Until all of them answered once since it started or
// reconnected it waits for all; once sure, it allocates without one that
// stops answering. A holder that never answers is waited for only so long.
func TestPeerMarks(t *testing.T) {
	s := natstest.Server(t)
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	hold := func(name string, id int) { holdWorkerID(t, js, name, id, 3*time.Second) }
	var fence atomic.Uint64
	open := func(name string, trust time.Duration) *PeerMarks {
		return openPeerMarks(t, s, js, name, trust, fence.Load)
	}
	hold("a/1", 1)
	hold("b/2", 2)
	a, b := open("a/1", time.Minute), open("b/2", time.Minute)
	note(b, "order", 500)
	if got, err := a.Mark(ctx, "order"); err != nil || got != 500 {
		t.Fatalf("a's mark of order: %d, %v; want b's 500", got, err)
	}
	note(b, "order", 900)
	if got, _ := a.Mark(ctx, "order"); got != 900 {
		t.Fatalf("a asked again (every allocation asks): %d, want 900", got)
	}
	// An allocation of b recorded and not settled: b answers once it is,
	// and one not settled in time counts as committed.
	b.Record(ctx, "order", 1300)
	b.Settle("order", 1300, false)
	if got, _ := a.Mark(ctx, "order"); got != 900 {
		t.Fatalf("after b's allocation up to 1300 failed: %d, want 900", got)
	}
	b.Record(ctx, "order", 1200)
	if got, _ := a.Mark(ctx, "order"); got != 1200 {
		t.Fatalf("b's allocation up to 1200 not settled: %d, want 1200", got)
	}
	b.Settle("order", 1200, true)
	// Sure of the store (every holder answered), a holder that does not
	// answer is allocated without.
	hold("c/3", 3) // holds a worker ID, never answers
	if got, err := a.Mark(ctx, "order"); err != nil || got != 1200 {
		t.Fatalf("sure, with c/3 silent: %d, %v; want 1200", got, err)
	}
	fence.Add(1) // reconnected: unsure again
	_, err := a.Mark(ctx, "order")
	if !errors.Is(err, segment.ErrUnavailable) || !strings.Contains(err.Error(), "c/3") {
		t.Fatalf("with c/3 silent: %v, want ErrUnavailable naming it", err)
	}
	impatient := open("d/4", 200*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	if got, err := impatient.Mark(ctx, "order"); err != nil || got != 1200 {
		t.Fatalf("past its patience: %d, %v; want 1200 without c/3", got, err)
	}
}

// note records an allocation of m up to end, committed.
func note(m *PeerMarks, tag string, end int64) {
	m.Record(context.Background(), tag, end)
	m.Settle(tag, end, true)
}

// A vendor that gives IDs back lowers its mark and tells the others: one
// that learned that mark lowers it too, so that the store set back does not
// read as gone back; one that knows a higher mark keeps it. kv.Marks (beside
// a Postgres store) lowers only from the value named.
func TestMarksLoweredForIDsGivenBack(t *testing.T) {
	s := natstest.Server(t)
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	open := func(name string) *PeerMarks { return openPeerMarks(t, s, js, name, time.Second, nil) }
	a, b, c := open("a/1"), open("b/2"), open("c/3")
	note(a, "order", 1000)
	if got, _ := b.Mark(ctx, "order"); got != 1000 {
		t.Fatalf("b learned %d, want a's 1000", got)
	}
	note(c, "order", 2000)
	if ok, err := a.Lower(ctx, "order", 900, 400); ok || err != nil {
		t.Fatalf("Lower from a value that is not the mark: %v, %v", ok, err)
	}
	if ok, err := a.Lower(ctx, "order", 1000, 400); !ok || err != nil {
		t.Fatalf("Lower(1000 -> 400): %v, %v", ok, err)
	}
	testtool.Eventually(t, 5*time.Second, "b's own mark lowered", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.own["order"] == 400 })
	if got, _ := c.Mark(ctx, "order"); got < 2000 {
		t.Fatalf("c lowered its own higher mark to %d", got)
	}

	marks, err := kv.OpenMarks(ctx, kv.Plain(js), 1)
	if err != nil {
		t.Fatal(err)
	}
	marks.Record(ctx, "order", 1000)
	if ok, _ := marks.Lower(ctx, "order", 999, 10); ok {
		t.Fatal("kv.Marks lowered from a value that is not the mark")
	}
	if ok, err := marks.Lower(ctx, "order", 1000, 10); !ok || err != nil {
		t.Fatalf("kv.Marks.Lower(1000 -> 10): %v, %v", ok, err)
	}
	if got, _ := marks.Mark(ctx, "order"); got != 10 {
		t.Fatalf("kv mark %d after Lower, want 10", got)
	}
}

// A vendor that NATS does not let ask for the marks says so, once, and
// names the refusal in its answer while its patience lasts.
func TestPeerMarksRefused(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "vendor", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{MarksSubject("leaf")}},
			}},
			{Username: "free", Password: "pw"},
		}
	}})
	ctx := context.Background()
	js, err := jetstream.New(natstest.Conn(t, s, nats.UserInfo("free", "pw")))
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.Claim(ctx, kv.Plain(js), kv.LeaseConfig{TTL: 3 * time.Second, Holder: "b/2", IDs: &workerid.Range{First: 2, Last: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background(), l.Last()) })
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	nc := natstest.Conn(t, s, nats.UserInfo("vendor", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	m, err := OpenPeerMarks(PeerMarksConfig{Conn: nc, JS: kv.Plain(js), Prefix: "leaf", Self: "a/1",
		Replies: vending.NewReplies(nil, nil), TrustAfter: time.Hour, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) })
	for range 2 {
		_, err := m.Mark(ctx, "order")
		if !errors.Is(err, segment.ErrUnavailable) || !errors.Is(err, scatter.ErrRefused) || !strings.Contains(err.Error(), "b/2") {
			t.Fatalf("Mark: %v; want ErrUnavailable naming b/2 and the refusal", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "NATS refuses this vendor's questions for the other vendors' segment marks"); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A vendor that never allocated becomes sure of the store once every holder
// of a worker ID answered its survey: a holder killed afterwards is then not
// waited for (the new leader of a strict tag allocates at once). A vendor
// started after the holder stopped answering is sure once every vendor sure
// of the store says so. (TestPeerMarks: with no vendor sure, it waits.)
func TestPeerMarksSurvey(t *testing.T) {
	s := natstest.Server(t)
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	hold := func(name string, id int) { holdWorkerID(t, js, name, id, 30*time.Second) }
	open := func(name string) *PeerMarks { return openPeerMarks(t, s, js, name, time.Hour, nil) }
	hold("a/1", 1)
	hold("b/2", 2)
	a, b := open("a/1"), open("b/2")
	note(b, "ledger", 700)
	testtool.Eventually(t, 5*time.Second, "a sure of the store", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.sure })
	hold("c/3", 3) // holds a worker ID and never answers: killed
	if got, err := a.Mark(ctx, "ledger"); err != nil || got != 700 {
		t.Fatalf("sure, with c/3 silent: %d, %v; want b's 700", got, err)
	}
	// d starts after c/3 fell silent: the sure vendors a and b say c/3
	// stopped answering them, so d need not wait for it.
	d := open("d/4")
	testtool.Eventually(t, 5*time.Second, "d allocating without c/3", func() bool { got, err := d.Mark(ctx, "ledger"); return err == nil && got == 700 })
}

// holdWorkerID claims worker ID id for name with a lease of ttl, released
// when the test ends.
func holdWorkerID(t *testing.T, js jetstream.JetStream, name string, id int, ttl time.Duration) {
	t.Helper()
	l, err := kv.Claim(context.Background(), kv.Plain(js), kv.LeaseConfig{TTL: ttl, Holder: name, IDs: &workerid.Range{First: id, Last: id}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background(), l.Last()) })
}

// openPeerMarks opens vendor name's marks on s, closed when the test ends;
// fence nil: one that never moves.
func openPeerMarks(t *testing.T, s *server.Server, js jetstream.JetStream, name string, trust time.Duration, fence func() uint64) *PeerMarks {
	t.Helper()
	m, err := OpenPeerMarks(PeerMarksConfig{Conn: natstest.Conn(t, s), JS: kv.Plain(js), Prefix: "leaf", Self: name,
		Replies: vending.NewReplies(nil, nil), Fence: fence, TrustAfter: trust, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}
