package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// runHealthcheck is `vendor healthcheck [path]`, the container health check
// of the vendor image, which has no shell, curl or wget: it asks the vendor
// on LEAF_HTTP_ADDR for /readyz (or path) and exits 0 on 200 OK, 1
// otherwise. With LEAF_HTTP_ADDR empty there is nothing to ask: exit 0.
func runHealthcheck(args []string, stdout, stderr io.Writer) int {
	path := "/readyz"
	switch {
	case len(args) > 1:
		fmt.Fprintln(stderr, "usage: vendor healthcheck [/readyz|/healthz]")
		return 2
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprintln(stdout, "usage: vendor healthcheck [/readyz|/healthz]\n\nAsks the vendor on LEAF_HTTP_ADDR for the path (default /readyz): exit 0 on 200 OK, else 1.")
		return 0
	case len(args) == 1:
		path = args[0]
	}
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "vendor healthcheck: %v\n", err)
		return 2
	}
	if cfg.HTTPAddr == "" {
		return 0
	}
	if err := check(cfg.HTTPAddr, path); err != nil {
		fmt.Fprintln(stderr, "vendor healthcheck:", err)
		return 1
	}
	return 0
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
