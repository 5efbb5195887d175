// Command healthcheck is the container health check of the vendor image,
// which has no shell, curl or wget: it asks the vendor on LEAF_HTTP_ADDR for
// /readyz (or the path given as the first argument) and exits 0 on 200 OK,
// 1 otherwise. With LEAF_HTTP_ADDR empty there is nothing to ask: exit 0.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	path := "/readyz"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	addr, ok := os.LookupEnv("LEAF_HTTP_ADDR")
	if !ok {
		addr = "127.0.0.1:9464" // the vendor's default
	}
	if addr == "" {
		return
	}
	if err := check(addr, path); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

func check(addr, path string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("LEAF_HTTP_ADDR %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // listening on every interface includes loopback
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}
