package status

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A server behind connLimit holds at most its cap of connections: clients
// that open connections and leave them idle, or send nothing, cannot keep a
// new client from being served.
func TestConnLimitServesPastIdleConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := newConnLimit(ln, 10, 0)
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }),
		ReadHeaderTimeout: time.Minute, // longer than the test: only the cap frees connections
		IdleTimeout:       time.Minute,
		ConnState:         lim.track,
	}
	go srv.Serve(lim)
	defer srv.Close()
	addr := ln.Addr().String()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if i%2 == 0 { // half send a request and stay idle, half send nothing
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil && i >= len(held)-10 {
				t.Fatalf("idle client %d: %v", i, err)
			}
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("with 200 connections held, a new client: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("body %q", body)
	}
	if n := lim.open(); n > 10 {
		t.Fatalf("the server holds %d connections, more than its cap of 10", n)
	}
}
