// Command natsd runs the embedded nats-server (with JetStream) that the
// benchmarks share, in a process of its own, so that the vendor and the
// bare responder it is compared with meet the same server over TCP.
//
//	natsd -listen 127.0.0.1:14222 -store /tmp/x [-prof 127.0.0.1:6061] [-lazy]
//
// Like the vendor's embedded server it syncs every JetStream write before
// acknowledging it; -lazy keeps nats-server's default (a sync every 2
// minutes), to measure what syncing costs.
//
// It stops on SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaf-nats/leaf/internal/natsserver"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:14222", "client address")
	store := flag.String("store", "", "JetStream storage directory (required)")
	prof := flag.String("prof", "", "host:port for the server's pprof endpoint; empty: none")
	lazy := flag.Bool("lazy", false, "sync JetStream writes every 2 minutes, not before each ack")
	flag.Parse()
	if err := run(*listen, *store, *prof, !*lazy); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
}

func run(listen, store, prof string, sync bool) error {
	if store == "" {
		return fmt.Errorf("-store is required")
	}
	var profPort int
	if prof != "" {
		_, p, err := net.SplitHostPort(prof)
		if err != nil {
			return fmt.Errorf("-prof %q: %w", prof, err)
		}
		if profPort, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("-prof %q: %w", prof, err)
		}
	}
	srv, err := natsserver.Start(natsserver.Config{
		Listen: listen, StoreDir: store, Name: "leaf-bench",
		Configure: func(o *server.Options) {
			o.ProfPort = profPort
			o.SyncAlways = sync
		},
	})
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
