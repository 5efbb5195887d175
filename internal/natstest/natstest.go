// Package natstest starts real embedded nats-servers for tests.
package natstest

import (
	"net"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natsserver"
)

// Server starts a single-node server with JetStream in a temporary directory
// and stops it when the test ends.
func Server(t testing.TB) *server.Server {
	t.Helper()
	return ServerWith(t, natsserver.Config{})
}

// ServerWith starts a server from c, filling in a free port and a temporary
// store directory when they are empty.
func ServerWith(t testing.TB, c natsserver.Config) *server.Server {
	t.Helper()
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.StoreDir == "" {
		c.StoreDir = t.TempDir()
	}
	s, err := natsserver.Start(c)
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Conn connects to s and closes the connection when the test ends.
func Conn(t testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect to %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a connection to s.
func JetStream(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago, for
// servers whose address must be known before they start (cluster routes,
// a Postgres that restarts on the same port).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
