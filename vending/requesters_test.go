package vending_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
