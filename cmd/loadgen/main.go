// Command loadgen puts load on leaf-nats workers and checks what comes back:
// every ID unique and positive, latency percentiles from a histogram,
// errors by code. `loadgen -h` explains the flags.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
