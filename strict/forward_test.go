package strict_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/vendtest"
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

func (s *strictSource) Home(string) string { return "" }

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

// leadLedger makes f's vendor the leader of "ledger", serving from src,
// until the test ends.
func leadLedger(t *testing.T, f *strict.Forwarder, src strict.Source) *strict.Leaders {
	t.Helper()
	ls, err := strict.Open(strict.Config{
		Source: src,
		Leases: leaseFunc(func(context.Context, string) (strict.Lease, time.Time, error) {
			return foreverLease{}, time.Time{}, nil
		}),
		Transport: f,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close(context.Background()) })
	if _, err := ls.Take(t.Context(), "ledger", nil, 1); err != nil { // no leader answers: this one leads
		t.Fatal(err)
	}
	return ls
}

// expectDropped publishes m, which names a $KV subject to answer, and
// checks that the leader drops it (rec counts one more drop) and publishes
// nothing under $KV.
func expectDropped(t *testing.T, s *server.Server, client *nats.Conn, rec *vendtest.Recorder, m *nats.Msg) {
	t.Helper()
	spy := natstest.Conn(t, s)
	caught, _ := spy.SubscribeSync("$KV.>")
	spy.Flush()
	before := len(rec.Drops())
	if err := client.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	client.Flush()
	for deadline := time.Now().Add(5 * time.Second); len(rec.Drops()) == before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(rec.Drops()) != before+1 {
		t.Fatalf("drops %q, want the request answered to $KV dropped", rec.Drops())
	}
	if m, err := caught.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the leader published to %s", m.Subject)
	}
}

type foreverLease struct{}

func (foreverLease) Renew(context.Context) (time.Time, error) { return time.Now().Add(time.Hour), nil }
func (foreverLease) Release(context.Context) error            { return nil }

// A leader answers forwarded requests within the configured count, only to
// inboxes, and its Forwarder's Close waits for the requests it is serving.
func TestForwarderLimitsRepliesAndClose(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	rec := &vendtest.Recorder{}
	f, err := strict.OpenForwarder(nc, strict.ForwarderConfig{MaxCount: 100, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	src := &strictSource{next: 1, entered: make(chan struct{}, 1), release: make(chan struct{})}
	ls := leadLedger(t, f, src)
	client := natstest.Conn(t, s)
	msg := vendtest.RequestEnc(t, client, strict.StrictSubject("leaf", "ledger"), vending.EncodingRanges, "101")
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" || !strings.Contains(msg.Header.Get(micro.ErrorHeader), "1 to 100") {
		t.Fatalf("101 IDs forwarded: %v %q, want a 400 naming the limit of 100", msg.Header, msg.Data)
	}
	rs, handoff, err := f.Forward(t.Context(), "ledger", nil, 100)
	if err != nil || ids.Count(rs) != 100 || !handoff {
		t.Fatalf("forward of 100: %v, %v; the leader takes handoffs: %v", rs, err, handoff)
	}

	expectDropped(t, s, client, rec, &nats.Msg{Subject: strict.StrictSubject("leaf", "ledger"), Reply: "$KV.leaf_strict_leaders.ledger", Data: []byte("5")})

	// A request that waits for the store is served in a goroutine of its
	// own: Close waits for it.
	src.mu.Lock()
	src.slow = true
	src.mu.Unlock()
	if err := client.PublishRequest(strict.StrictSubject("leaf", "ledger"), client.NewInbox(), []byte("1")); err != nil {
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

// handingOff is a vendor's segments that lead no tag and hand every
// request to the leader through its Forwarder; taking one itself fails
// the test.
type handingOff struct {
	f    *strict.Forwarder
	slow *atomic.Int64 // requests served the slow way, not handed off
}

func newHandingOff(f *strict.Forwarder) handingOff { return handingOff{f, &atomic.Int64{}} }

func (h handingOff) TryTakeRanges(_ string, dst []ids.Range, _ int64) ([]ids.Range, bool, error) {
	return dst, false, nil
}

func (h handingOff) TakeRanges(context.Context, string, []ids.Range, int64) ([]ids.Range, error) {
	h.slow.Add(1)
	return nil, &vending.Error{Code: vending.CodeUnavailable, Message: "not handed off"}
}

func (handingOff) IsStrict(string) bool                         { return true }
func (h handingOff) HandOff(tag string, r vending.Handing) bool { return h.f.HandOff(tag, r) }
func (handingOff) Leans(string) bool                            { return false }

// A vendor hands a strict tag's request to the leader, which answers the
// client directly as the service would: in the client's encoding, marked
// strict, within the service's counts, counted by the leader. A leader
// that steps down says so, and the vendors that follow it forget it; a
// request handed to no leader hears NATS's "no responders", and the vendor
// answers its client a 503 that says to ask again.
func TestHandoffAnsweredByTheLeader(t *testing.T) {
	s := natstest.Server(t)
	rec := &vendtest.Recorder{}
	f, err := strict.OpenForwarder(natstest.Conn(t, s), strict.ForwarderConfig{MaxCount: 100, MaxBatch: 50, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	ls := leadLedger(t, f, &strictSource{next: 1})
	if ls.Leans("ledger") {
		t.Fatal("the leader leans towards ledger before another vendor passed it a request")
	}
	// Another vendor, handing ledger off since its leader answered: its
	// Forwarder hears the leader step down, and the "no responders" of a
	// request handed to no leader.
	hf, err := strict.OpenForwarder(natstest.Conn(t, s), strict.ForwarderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close(context.Background())
	other, err := strict.Open(strict.Config{
		Source: &strictSource{next: 1},
		Leases: leaseFunc(func(context.Context, string) (strict.Lease, time.Time, error) {
			return nil, time.Time{}, strict.ErrLedElsewhere
		}),
		Transport:  hf,
		HandoffFor: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	b := newHandingOff(hf)
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Segments: b})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())

	client := natstest.Conn(t, s)
	for _, c := range []struct{ enc, body, want string }{
		{vending.EncodingText, "3", "2\n3\n4"},
		{vending.EncodingBinary, "1", "\x00\x00\x00\x00\x00\x00\x00\x05"},
		{vending.EncodingRanges, "100", "6,100\n"},
	} {
		msg := vendtest.RequestEnc(t, client, "leaf.segment.ledger", c.enc, c.body)
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" || msg.Header.Get(vending.StrictHeader) != "true" {
			t.Fatalf("%s %s: error %q %q, strict %q", c.enc, c.body, code, msg.Data, msg.Header.Get(vending.StrictHeader))
		}
		if c.enc == vending.EncodingRanges {
			rs, err := vending.DecodeRanges(nil, msg.Data)
			if err != nil || len(rs) != 1 || rs[0] != (ids.Range{First: 6, Count: 100}) {
				t.Fatalf("ranges: %v %v from %q", rs, err, msg.Data)
			}
		} else if string(msg.Data) != c.want {
			t.Fatalf("%s %s: %q, want %q", c.enc, c.body, msg.Data, c.want)
		}
	}
	// The service allows 10,000; the leader's own limit of 50 holds.
	msg := vendtest.RequestEnc(t, client, "leaf.segment.ledger", vending.EncodingBinary, "51")
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" || !strings.Contains(string(msg.Data), "1 to 50") {
		t.Fatalf("51 IDs handed off: %v %q, want a 400 naming the limit of 50", msg.Header, msg.Data)
	}
	if codes, n := rec.Seen(4); len(codes) != 4 || n != 104 {
		t.Fatalf("the leader observed %v and %d IDs, want 3 replies and a 400, 104 IDs", codes, n)
	}

	// A handoff's client must be an inbox too: the leader drops the rest.
	expectDropped(t, s, client, rec, &nats.Msg{Subject: strict.StrictSubject("leaf", "ledger"), Reply: client.NewInbox(),
		Header: nats.Header{strict.HandoffHeader: {"$KV.leaf_strict_leaders.ledger"}}, Data: []byte("5")})

	if _, err := other.Take(t.Context(), "ledger", nil, 1); err != nil || !other.Handoff("ledger") {
		t.Fatalf("forwarded to the leader: %v; hands off: %v", err, other.Handoff("ledger"))
	}
	if !ls.Leans("ledger") || other.Leans("ledger") {
		t.Fatalf("passed requests: the leader leans %v, the other vendor %v; want true, false", ls.Leans("ledger"), other.Leans("ledger"))
	}
	ls.Close(context.Background()) // steps down, and says so
	if ls.Leans("ledger") {
		t.Fatal("the leader leans towards ledger after it stepped down")
	}
	for deadline := time.Now().Add(5 * time.Second); other.Handoff("ledger") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if other.Handoff("ledger") {
		t.Fatal("the other vendor still hands ledger off after its leader stepped down")
	}
	msg = vendtest.Request(t, client, "leaf.segment.ledger", "")
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "503" || !strings.Contains(string(msg.Data), "ask again") {
		t.Fatalf("handed off with no leader: %v %q; want a 503 to ask again", msg.Header, msg.Data)
	}
	if n := b.slow.Load(); n != 0 {
		t.Fatalf("%d requests served the slow way, not handed off", n)
	}
	// A reply subject that, behind the vendor's inbox, would be longer than
	// a leader answers is served the slow way (forwarded), not dropped.
	long := "_INBOX." + strings.Repeat("x", 480)
	sub, _ := client.SubscribeSync(long)
	client.PublishRequest("leaf.segment.ledger", long, nil)
	if m, err := sub.NextMsg(5 * time.Second); err != nil || m.Header.Get(micro.ErrorCodeHeader) != "503" || b.slow.Load() != 1 {
		t.Fatalf("a long reply subject: %v %v, served the slow way %d times; want the slow path's 503", m, err, b.slow.Load())
	}
}

// A leader whose NATS user may answer clients only on the reply subjects of
// the requests it received (allow_responses) says in its answers to
// forwards that it takes no handoffs, and the vendors keep forwarding.
func TestLeaderWithoutReplyPermissionTakesNoHandoffs(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "vendor", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"leaf.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"leaf.>", "_INBOX.>"}},
			Response:  &server.ResponsePermission{MaxMsgs: 1},
		}}}
	}})
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("vendor", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	f, err := strict.OpenForwarder(nc, strict.ForwarderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	leadLedger(t, f, &strictSource{next: 1})
	rs, handoff, err := f.Forward(t.Context(), "ledger", nil, 5)
	if err != nil || ids.Count(rs) != 5 || handoff {
		t.Fatalf("forward: %v, %v; takes handoffs %v, want 5 IDs and no handoffs", rs, err, handoff)
	}
}

// A leader whose answers to clients NATS starts refusing (its permissions
// changed at run time) says so in its next answers to forwards, so the
// others forward to it again, and checks again every Reprobe. Here its user
// may publish the probe's subjects but no other inbox: the probe passes,
// the answers are refused.
func TestLeaderStopsHandoffsWhenNATSRefusesItsAnswers(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "vendor", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"leaf.>",
					"_INBOX." + strict.HandoffProbe, "_R_." + strict.HandoffProbe}},
				Subscribe: &server.SubjectPermission{Allow: []string{"leaf.>", "_INBOX.>"}},
				Response:  &server.ResponsePermission{MaxMsgs: 1},
			}},
			{Username: "free", Password: "pw"},
		}
	}})
	connect := func(user string) *nats.Conn {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	f, err := strict.OpenForwarder(connect("vendor"), strict.ForwarderConfig{Reprobe: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	leadLedger(t, f, &strictSource{next: 1})
	takesHandoffs := func() bool {
		t.Helper()
		_, handoff, err := f.Forward(t.Context(), "ledger", nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		return handoff
	}
	if !takesHandoffs() {
		t.Fatal("the probe passed, but the leader takes no handoffs")
	}
	hf, err := strict.OpenForwarder(connect("free"), strict.ForwarderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close(context.Background())
	svc, err := vending.Open(connect("free"), vending.Config{Segments: newHandingOff(hf)})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	client := connect("free")
	for i := 0; i < 20 && takesHandoffs(); i++ {
		client.Request("leaf.segment.ledger", nil, 100*time.Millisecond) // refused to the leader: times out
	}
	if takesHandoffs() {
		t.Fatal("the leader still takes handoffs after NATS refused its answers")
	}
	// Every Reprobe it checks again (the probe's subjects are allowed).
	deadline := time.Now().Add(5 * time.Second)
	for !takesHandoffs() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !takesHandoffs() {
		t.Fatal("the leader never checked again")
	}
}
