// Command delayproxy is a TCP proxy that adds a fixed latency: every chunk
// read from the client is written to the target the delay after it was
// read, and replies go back at once. So each query round trip to the store
// behind it takes the delay longer, deterministically, while throughput is
// not limited (chunks queue, they do not wait for one another).
//
//	delayproxy -listen 127.0.0.1:15432 -target 127.0.0.1:5432 -delay 50ms
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:15432", "address to accept on")
	target := flag.String("target", "", "address to forward to (required)")
	delay := flag.Duration("delay", 50*time.Millisecond, "latency added to each chunk from client to target")
	flag.Parse()
	if *target == "" {
		fmt.Fprintln(os.Stderr, "delayproxy: -target is required")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "delayproxy:", err)
		os.Exit(1)
	}
	p := &proxy{target: *target, delay: *delay}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; ln.Close() }()
	p.serve(ln)
}

type proxy struct {
	target string
	delay  time.Duration
	wg     sync.WaitGroup
}

// serve accepts until ln is closed, then waits for the connections.
func (p *proxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				fmt.Fprintln(os.Stderr, "delayproxy:", err)
			}
			break
		}
		p.wg.Go(func() { p.handle(c) })
	}
	p.wg.Wait()
}

func (p *proxy) handle(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "delayproxy:", err)
		return
	}
	defer server.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(client, server)
		client.Close()
	})
	delayed(server, client, p.delay)
	server.Close()
	wg.Wait()
}

type chunk struct {
	due  time.Time
	data []byte
}

// delayed copies src to dst, each chunk d after it was read.
func delayed(dst, src net.Conn, d time.Duration) {
	q := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.data); err != nil {
				for range q { // drain so the reader is not stuck
				}
				return
			}
		}
	})
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{time.Now().Add(d), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	wg.Wait()
}
