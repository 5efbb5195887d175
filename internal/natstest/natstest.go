// Package natstest starts real embedded nats-servers for tests.
package natstest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// FreePort returns a port on 127.0.0.1 that is free now, for servers
// whose address must be known before they start (cluster routes, a
// Postgres that restarts on the same port). The port is below the
// kernel's ephemeral range, where no listener on port 0 and no outgoing
// connection is ever given a port: a server stopped for a restart gets its
// port back, though other tests (of this process or another) bind port 0
// meanwhile. Each process hands out the ports of the range in turn from a
// start of its own, skipping those in use.
func FreePort(t testing.TB) int {
	t.Helper()
	portsOnce.Do(choosePorts)
	n := portsHi - portsLo
	if n < minPorts {
		// No room below the ephemeral range: a port that was free a
		// moment ago, as the kernel chooses.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	for range n {
		p := portsLo + int((portsStart+portsNext.Add(1))%uint64(n))
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // in use
		}
		l.Close()
		return p
	}
	t.Fatalf("no free port in %d-%d", portsLo, portsHi-1)
	return 0
}

// FreePort's ports: [portsLo, portsHi), handed out from portsStart on.
// portsHi is at most 20000, below the ports scripts/postgres.sh tries for
// its throwaway servers (20000-39999).
const (
	defaultPortsLo, defaultPortsHi = 10000, 20000
	minPorts                       = 1000
)

var (
	portsOnce        sync.Once
	portsLo, portsHi int
	portsStart       uint64
	portsNext        atomic.Uint64
)

func choosePorts() {
	portsLo, portsHi = defaultPortsLo, defaultPortsHi
	// Linux: "32768\t60999"; elsewhere (macOS: 49152 on) the default holds.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil {
				portsHi = min(portsHi, low)
			}
		}
	}
	// The test binaries of one go test run start at ports far apart.
	portsStart = uint64(os.Getpid()) * 7919
}
