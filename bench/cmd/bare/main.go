// Command bare is the baseline the vendor is measured against: a plain
// nats.go queue subscriber on leaf.snowflake that answers every request
// with one 19-digit number and does nothing else. Whatever the vendor
// costs above it is the price of the service (micro, parsing, the
// generator, encoding, metrics).
//
// The number is a counter starting at 1862213154793730049 rather than one
// constant, so that loadgen's duplicate check passes; it stays 19 digits
// for the whole run.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/nats-io/nats.go"
)

func main() {
	url := flag.String("url", nats.DefaultURL, "NATS URL")
	subject := flag.String("subject", "leaf.snowflake", "subject to answer")
	queue := flag.String("queue", "leaf", "queue group")
	flag.Parse()
	if err := run(*url, *subject, *queue); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

func run(url, subject, queue string) error {
	nc, err := nats.Connect(url, nats.Name("leaf-bench-bare"))
	if err != nil {
		return err
	}
	defer nc.Close()
	// The handler runs on the subscription's one goroutine, like a micro
	// endpoint's, so next and buf need no lock.
	next := int64(1862213154793730049)
	var buf []byte
	_, err = nc.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		buf = strconv.AppendInt(buf[:0], next, 10)
		next++
		m.Respond(buf)
	})
	if err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bare: ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nc.Drain()
}
