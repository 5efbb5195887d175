// Command natsd runs the embedded nats-server (with JetStream) that the
// benchmarks share, in a process of its own, so that the vendor and the
// bare responder it is compared with meet the same server over TCP.
//
//	natsd -listen 127.0.0.1:14222 -store /tmp/x [-prof 127.0.0.1:6061] [-lazy] [-http 127.0.0.1:8222]
//	natsd -config docs/nats-server-single.conf -listen 127.0.0.1:14222 -store /tmp/x [-http ...]
//	natsd -listen ... -store ... -region east -cluster 127.0.0.1:16222 -gateway 127.0.0.1:17222 -gateways west=127.0.0.1:17223
//
// Like the vendor's embedded server it syncs every JetStream write before
// acknowledging it; -lazy keeps nats-server's default (a sync every 2
// minutes), to measure what syncing costs. With -config it runs a
// nats-server configuration file instead (users, accounts, JetStream
// settings: the shipped least-privilege one), with its address, store and
// monitoring port taken from the flags, and no cluster: so that the e2e
// tests can read the CPU and memory of a server under that configuration
// from /proc, apart from their own. With -region it is one region of a
// supercluster: a cluster of one named after the region (JetStream in a
// supercluster needs a cluster), joined by gateways to the other regions'
// servers, as docs/regions.md describes.
//
// It stops on SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaf-nats/leaf/internal/natsserver"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:14222", "client address")
	store := flag.String("store", "", "JetStream storage directory (required)")
	prof := flag.String("prof", "", "host:port for the server's pprof endpoint; empty: none")
	monitor := flag.String("http", "", "host:port for the monitoring endpoints (/varz, /connz); empty: none")
	lazy := flag.Bool("lazy", false, "sync JetStream writes every 2 minutes, not before each ack (without -config, whose file says)")
	config := flag.String("config", "", "a nats-server configuration file to run (its listen, store_dir, http and cluster are replaced by the flags)")
	var sc supercluster
	flag.StringVar(&sc.region, "region", "", "this server's region, a cluster of one in a supercluster (without -config; with -cluster and -gateway)")
	flag.StringVar(&sc.cluster, "cluster", "", "with -region: host:port of the cluster's routes")
	flag.StringVar(&sc.gateway, "gateway", "", "with -region: host:port of this region's gateway")
	flag.StringVar(&sc.gateways, "gateways", "", "with -region: the other regions' gateways, name=host:port,...")
	flag.Parse()
	if err := run(*listen, *store, *prof, *monitor, *config, !*lazy, sc); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
}

func run(listen, store, prof, monitor, config string, sync bool, sc supercluster) error {
	if store == "" {
		return fmt.Errorf("-store is required")
	}
	if sc.region != "" && config != "" {
		return fmt.Errorf("-region runs without -config")
	}
	profPort, err := port("-prof", prof)
	if err != nil {
		return err
	}
	monHost, monPort := "", 0
	if monitor != "" {
		if monHost, _, err = net.SplitHostPort(monitor); err != nil {
			return fmt.Errorf("-http %q: %w", monitor, err)
		}
		if monPort, err = port("-http", monitor); err != nil {
			return err
		}
	}
	var srv *server.Server
	if config != "" {
		srv, err = startConfig(config, listen, store, func(o *server.Options) { o.HTTPHost, o.HTTPPort, o.ProfPort = monHost, monPort, profPort })
	} else {
		c := natsserver.Config{
			Listen: listen, StoreDir: store, Name: "leaf-bench",
			Configure: func(o *server.Options) {
				o.HTTPHost, o.HTTPPort, o.ProfPort = monHost, monPort, profPort
				o.SyncAlways = sync
			},
		}
		if sc.region != "" {
			if err := sc.apply(&c); err != nil {
				return err
			}
		}
		srv, err = natsserver.Start(c)
	}
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

// port is the port of hostport ("" is 0, none).
func port(flagName, hostport string) (int, error) {
	if hostport == "" {
		return 0, nil
	}
	_, p, err := net.SplitHostPort(hostport)
	if err == nil {
		var n int
		if n, err = strconv.Atoi(p); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s %q: %w", flagName, hostport, err)
}

// startConfig starts the server of a configuration file on listen and
// store, and waits until it accepts clients.
func startConfig(config, listen, store string, configure func(*server.Options)) (*server.Server, error) {
	o, err := server.ProcessConfigFile(config)
	if err != nil {
		return nil, err
	}
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %w", listen, err)
	}
	if o.Port, err = strconv.Atoi(p); err != nil {
		return nil, fmt.Errorf("-listen %q: %w", listen, err)
	}
	o.Host, o.StoreDir = host, store
	o.Cluster, o.Routes = server.ClusterOpts{}, nil
	o.NoSigs, o.NoLog, o.DisableJetStreamBanner = true, true, true
	configure(o)
	srv, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config, err)
	}
	go srv.Start() // returns once the server runs; Shutdown stops it
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("%s: the server did not accept clients within 30s", config)
	}
	return srv, nil
}

// supercluster is the flags that make the server one region of a
// supercluster.
type supercluster struct {
	region, cluster, gateway, gateways string
}

// apply makes c a cluster of one named after the region, with a gateway to
// each other region.
func (sc supercluster) apply(c *natsserver.Config) error {
	if sc.cluster == "" || sc.gateway == "" {
		return fmt.Errorf("-region %s needs -cluster and -gateway (host:port)", sc.region)
	}
	gwHost, _, _ := net.SplitHostPort(sc.gateway)
	gwPort, err := port("-gateway", sc.gateway)
	if err != nil {
		return err
	}
	var remotes []*server.RemoteGatewayOpts
	for _, g := range strings.Split(sc.gateways, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(g), "=")
		if !ok {
			return fmt.Errorf("-gateways %q: want name=host:port,...", sc.gateways)
		}
		u, err := url.Parse("nats://" + addr)
		if err != nil {
			return fmt.Errorf("-gateways %q: %w", sc.gateways, err)
		}
		remotes = append(remotes, &server.RemoteGatewayOpts{Name: name, URLs: []*url.URL{u}})
	}
	c.Name += "-" + sc.region
	c.ClusterName, c.Cluster, c.Routes = sc.region, sc.cluster, []string{"nats://" + sc.cluster}
	configure := c.Configure
	c.Configure = func(o *server.Options) {
		configure(o)
		o.Gateway.Name, o.Gateway.Host, o.Gateway.Port = sc.region, gwHost, gwPort
		o.Gateway.Gateways = remotes
	}
	return nil
}
