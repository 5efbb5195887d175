package main

import (
	"context"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/pgtest"
)

func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen string
		want   bool
	}{
		{"127.0.0.1:4222", true}, {"127.0.0.2:4222", true}, {"localhost:4222", true}, {"[::1]:4222", true},
		{"0.0.0.0:4222", false}, {":4222", false}, {"[::]:4222", false}, {"10.0.0.5:4222", false}, {"nats.internal:4222", false}, {"nonsense", false},
	} {
		if got := loopback(tc.listen); got != tc.want {
			t.Errorf("loopback(%q) = %v, want %v", tc.listen, got, tc.want)
		}
	}
}

// The embedded server has no authentication: a vendor whose embedded
// server would listen beyond loopback says so at start, and one on
// loopback does not.
func TestEmbeddedBeyondLoopbackWarns(t *testing.T) {
	const warning = "embedded NATS listens beyond loopback with no authentication"
	t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
	t.Setenv("LEAF_HTTP_ADDR", "")
	// TEST-NET-1 (RFC 5737) is no host's: the server cannot start there,
	// so the test opens nothing to the network.
	t.Setenv("LEAF_NATS_LISTEN", "192.0.2.1:4222")
	var out syncBuffer
	if code := run(context.Background(), nil, &out, &out); code != 1 || !strings.Contains(out.String(), warning) || !strings.Contains(out.String(), "hint=") {
		t.Fatalf("embedded server beyond loopback: exit %d, want 1 after the warning:\n%s", code, out.String())
	}
	t.Setenv("LEAF_NATS_LISTEN", "127.0.0.1:"+strconv.Itoa(natstest.FreePort(t)))
	stop, logs := startVendor(t, nil)
	if code := stop(); code != 0 || strings.Contains(logs.String(), warning) {
		t.Fatalf("embedded server on loopback: exit %d, warned: %v\n%s", code, strings.Contains(logs.String(), warning), logs.String())
	}
}

// A second vendor on the first one's embedded server (README's second
// terminal) says nothing of sync_interval: that server syncs every write.
func TestSecondVendorOnEmbeddedServerDoesNotWarnOfSync(t *testing.T) {
	listen := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	t.Setenv("LEAF_NATS_LISTEN", listen)
	t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
	stopFirst, _ := startVendor(t, nil)
	defer stopFirst()
	stop, logs := startVendor(t, map[string]string{"LEAF_NATS_URL": "nats://" + listen})
	if code := stop(); code != 0 {
		t.Fatalf("second vendor exit %d:\n%s", code, logs.String())
	}
	for _, bad := range []string{"sync_interval", "cannot see whether the NATS servers sync"} {
		if strings.Contains(logs.String(), bad) {
			t.Fatalf("second vendor logs %q on the embedded server, which syncs every write:\n%s", bad, logs.String())
		}
	}
}

// A vendor whose Postgres cannot be reached starts (snowflake needs none)
// but does not say "vendor serving" while /readyz answers 503: it says what
// it does not serve, and why. Once Postgres answers, it says "vendor
// serving".
func TestStartedNotReadyIsNotServing(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	dsn, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	pgAddr := dsn.Host
	dsn.Host = "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t)) // nothing listens there yet
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_POSTGRES_URL", dsn.String())
	t.Setenv("LEAF_HTTP_ADDR", "")
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- run(ctx, nil, &logs, &logs) }()
	defer func() { cancel(); <-code }()
	waitLogged := func(what string, poke func()) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(logs.String(), what) {
			select {
			case c := <-code:
				code <- c
				t.Fatalf("vendor exited %d:\n%s", c, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("vendor never logged %q:\n%s", what, logs.String())
			}
			poke()
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitLogged("vendor started", func() {})
	if out := logs.String(); strings.Contains(out, "vendor serving") || !strings.Contains(out, "segments_not_served=") {
		t.Fatalf("with Postgres unreachable the vendor logs, want no \"vendor serving\" and why segments are not served:\n%s", out)
	}
	forward(t, dsn.Host, pgAddr)
	// A request for a tag finds the store answering again.
	waitLogged("vendor serving", func() { nc.Request("leaf.segment.order", nil, time.Second) })
}

// forward accepts connections on from and joins each to to, until the
// test ends.
func forward(t *testing.T, from, to string) {
	t.Helper()
	ln, err := net.Listen("tcp", from)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			wg.Go(func() { io.Copy(out, in); out.Close() })
			wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
}
