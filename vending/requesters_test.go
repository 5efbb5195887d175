package vending_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// accountsConf puts the vendor in account LEAF and two applications in
// accounts of their own, which import the services with share: true, so
// that NATS names each requester in Nats-Request-Info.
const accountsConf = `
listen: 127.0.0.1:-1
accounts {
  LEAF {
    users: [ { user: vendor, password: pw } ]
    exports: [ { service: "leaf.snowflake" }, { service: "leaf.segment.>" } ]
  }
  ORDERS {
    users: [ { user: orders, password: pw }, { user: orders-batch, password: pw } ]
    imports: [
      { service: { account: LEAF, subject: "leaf.snowflake" }, share: true }
      { service: { account: LEAF, subject: "leaf.segment.>" }, share: true }
    ]
  }
  BILLING {
    users: [ { user: billing, password: pw } ]
    imports: [
      { service: { account: LEAF, subject: "leaf.snowflake" }, share: true }
      { service: { account: LEAF, subject: "leaf.segment.>" }, share: true }
    ]
  }
}`

func startAccountsServer(t *testing.T) *server.Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(accountsConf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func connectAs(t *testing.T, s *server.Server, user string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, "pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Each requester NATS names (account and user) has a budget of its own,
// in both modes: one that uses its budget up is answered 429 naming it and
// when to ask again, while the others are served.
func TestRequesterRateLimit(t *testing.T) {
	s := startAccountsServer(t)
	g, err := snowflake.New(snowflake.Settings{WorkerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := vending.Open(connectAs(t, s, "vendor"), vending.Config{Snowflake: g, Segments: newCounterSegments("order"),
		RequesterRateLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())

	ask := func(nc *nats.Conn, subject string, n int64) error {
		c := newClient(t, nc, vending.ClientConfig{Retries: -1})
		src := c.Snowflake()
		if subject != "" {
			src, _ = c.Segment(subject)
		}
		_, err := src.NextRanges(ctxT(t), n)
		return err
	}
	orders := connectAs(t, s, "orders")
	if err := ask(orders, "", 60); err != nil {
		t.Fatal(err)
	}
	if err := ask(orders, "order", 40); err != nil {
		t.Fatal(err)
	}
	err = ask(orders, "order", 10)
	var e *vending.Error
	if !errors.As(err, &e) || e.Code != vending.CodeTooManyRequests || e.RetryAfter <= 0 || !strings.Contains(e.Message, "ORDERS/orders") {
		t.Fatalf("orders past its 100 IDs: %v, want a 429 naming ORDERS/orders with when to ask again", err)
	}
	if err := ask(orders, "order", 1000); !errors.As(err, &e) || e.MaxCount != 100 {
		t.Fatalf("orders asking for more than the burst: %v, want a 429 with MaxCount 100", err)
	}
	// Another user of the same application, and another application.
	for _, user := range []string{"orders-batch", "billing"} {
		if err := ask(connectAs(t, s, user), "order", 100); err != nil {
			t.Fatalf("%s, with a budget of its own: %v", user, err)
		}
	}
}

// lookupSegments has the tags of known, and looks every tag up in its
// store (counted) the first time it is asked for, as the allocator does a
// tag it has not cached.
type lookupSegments struct {
	*counterSegments
	mu     sync.Mutex
	cached map[string]bool
	reads  int
}

func (l *lookupSegments) TryTakeRanges(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	l.mu.Lock()
	cached := l.cached[tag]
	l.mu.Unlock()
	if !cached {
		return dst, false, nil
	}
	return l.counterSegments.TryTakeRanges(tag, dst, n)
}

func (l *lookupSegments) TakeRanges(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	l.mu.Lock()
	l.reads++
	l.cached[tag] = true
	l.mu.Unlock()
	return l.counterSegments.TakeRanges(ctx, tag, dst, n)
}

// A requester that asks for tags the store does not have uses up a budget
// of its own (unknownTagRate): past it, its requests that would ask the
// store get 429 with when to ask again, so that another application's
// requests for tags not cached yet are still read, and its own cached
// tags are still served.
func TestUnknownTagsPerRequester(t *testing.T) {
	s := startAccountsServer(t)
	segs := &lookupSegments{counterSegments: newCounterSegments("order", "fresh"), cached: map[string]bool{}}
	svc, err := vending.Open(connectAs(t, s, "vendor"), vending.Config{Segments: segs})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	orders, billing := connectAs(t, s, "orders"), connectAs(t, s, "billing")
	code := func(nc *nats.Conn, tag string) string {
		m, err := nc.Request("leaf.segment."+tag, nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if c := m.Header.Get(micro.ErrorCodeHeader); c != "" {
			return c + " " + m.Header.Get(micro.ErrorHeader) + " after " + m.Header.Get(vending.RetryAfterHeader) + "ms"
		}
		return "ok"
	}
	if got := code(orders, "order"); got != "ok" {
		t.Fatalf("order: %s", got)
	}
	begun := time.Now()
	unknown, refused := 0, ""
	for i := range 100 {
		switch got := code(orders, "nosuch"+strconv.Itoa(i)); {
		case strings.HasPrefix(got, "404 "):
			unknown++
		case refused == "":
			refused = got
		}
	}
	// Its budget refills at 10 a second from 20: no more can be 404s,
	// each a store read.
	if most := 20 + 10*time.Since(begun).Seconds() + 1; float64(unknown) > most || !strings.HasPrefix(refused, "429 ") ||
		!strings.Contains(refused, "ORDERS/orders") || strings.HasSuffix(refused, "after ms") {
		t.Fatalf("100 made-up tags: %d answered 404 (at most %.0f), then %q; want 429s naming ORDERS/orders, with when to ask again", unknown, most, refused)
	}
	if got := code(orders, "order"); got != "ok" {
		t.Fatalf("orders' cached tag after its made-up ones: %s", got)
	}
	if got := code(billing, "fresh"); got != "ok" {
		t.Fatalf("billing's first request of a tag while orders is refused: %s", got)
	}
	segs.mu.Lock()
	defer segs.mu.Unlock()
	if segs.reads != unknown+2 {
		t.Fatalf("%d store reads for %d unknown tags and 2 tags", segs.reads, unknown)
	}
}
