// Command vendor is a leaf-nats worker: it answers ID requests over NATS.
// Run it with no environment for an embedded NATS server; `vendor -h` lists
// the configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/leaf-nats/leaf/cluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help", "help":
			usage(stdout)
			return 0
		case "tags":
			return runTags(ctx, args[1:], stdout, stderr)
		case "cluster":
			return runCluster(ctx, args[1:], stdout, stderr)
		case "healthcheck":
			return runHealthcheck(args[1:], stdout, stderr)
		case "version", "-version", "--version":
			return runVersion(stdout)
		default:
			fmt.Fprintf(stderr, "vendor: unknown command %q\n\n", args[0])
			usage(stderr)
			return 2
		}
	}
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "vendor: %v\n(vendor -h lists the configuration)\n", err)
		return 2
	}
	log := cfg.logger(stderr)
	if err := serve(ctx, cfg, log); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped (SIGINT, SIGTERM) before it served: nothing failed.
			log.Info("vendor stopped before it served: signal received")
			return 0
		}
		log.Error("vendor stopped", cluster.ErrAttr(err))
		return 1
	}
	log.Info("vendor stopped")
	return 0
}
