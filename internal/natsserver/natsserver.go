// Package natsserver runs an embedded nats-server with JetStream: the
// vendor's zero-install default and the tests' real server.
package natsserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrAddrInUse is returned by Start when the client address is taken.
var ErrAddrInUse = errors.New("address in use")

// Config describes an embedded server.
type Config struct {
	// Listen is host:port for clients; port 0 picks a free one.
	Listen string
	// StoreDir holds JetStream data; it survives restarts.
	StoreDir string
	// Name is the server name (also the JetStream node name).
	Name string
	// Cluster, when set, is the host:port for cluster routes and Routes
	// the other nodes' route URLs (nats://host:port).
	Cluster     string
	ClusterName string
	Routes      []string
	// Configure, when set, edits the options before the server starts
	// (authorization, TLS, ...).
	Configure func(*server.Options)
}

// EmbeddedName is the name of the server a vendor embeds when LEAF_NATS_URL
// is empty. Start syncs every write of every server it starts, so a vendor
// that finds itself connected to a server of this name (another vendor's)
// knows its writes are on disk without asking the system account.
const EmbeddedName = "leaf-embedded"

// Start starts the server and waits until it accepts clients. Stop it with
// Shutdown and WaitForShutdown.
func Start(c Config) (*server.Server, error) {
	host, port, err := splitHostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("nats listen address %q: %w", c.Listen, err)
	}
	if port != server.RANDOM_PORT {
		// The server only logs a failed listen and keeps waiting; check
		// first so a taken port is an error at once.
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrAddrInUse, err)
		}
		ln.Close()
	}
	opts := &server.Options{
		ServerName:             c.Name,
		Host:                   host,
		Port:                   port,
		JetStream:              true,
		StoreDir:               c.StoreDir,
		NoSigs:                 true,
		NoLog:                  true,
		DisableJetStreamBanner: true,
		// Sync every JetStream write before acknowledging it (nats-server
		// syncs every 2 minutes by default): worker-ID leases, marks and
		// segment rows acknowledged are on disk, so a power cut does not
		// take the store back to before them (docs/operations.md).
		SyncAlways: true,
	}
	if c.Cluster != "" {
		ch, cp, err := splitHostPort(c.Cluster)
		if err != nil {
			return nil, fmt.Errorf("nats cluster address %q: %w", c.Cluster, err)
		}
		opts.Cluster.Name = c.ClusterName
		opts.Cluster.Host = ch
		opts.Cluster.Port = cp
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
	}
	if c.Configure != nil {
		c.Configure(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not start listening on %s within 10s", c.Listen)
	}
	return s, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}
