package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed status.html
var statusPage []byte

// httpServer serves the status page, /status.json, /cluster.json, /metrics,
// /healthz and /readyz on LEAF_HTTP_ADDR.
type httpServer struct {
	srv   *http.Server
	addr  string
	conns *connLimit
	wg    sync.WaitGroup
}

// httpMaxConns bounds the HTTP server's connections: LEAF_HTTP_MAX_CONNS,
// and at most a quarter of the open-files limit, which the vendor raises
// to its hard limit first.
func httpMaxConns(configured int, log *slog.Logger) int {
	limit, err := raiseFileLimit()
	if err != nil {
		log.Warn("could not raise the open-files limit", "limit", limit, "err", err)
	}
	if limit > 0 && configured > int(limit/4) {
		log.Warn("LEAF_HTTP_MAX_CONNS is more than a quarter of the open-files limit: capped there, so that HTTP clients cannot use up the descriptors NATS needs (raise the limit: ulimit -n, LimitNOFILE, --ulimit nofile)",
			"configured", configured, "open_files_limit", limit, "max_conns", limit/4)
		return max(int(limit/4), 1)
	}
	return configured
}

func startHTTP(cfg Config, state *vendorState, reg *prometheus.Registry, peers *statsAsker, leaf *leafAPI, log *slog.Logger) (*httpServer, error) {
	hs := &httpServer{}
	if cfg.HTTPAddr == "" {
		return hs, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		s := state.snapshot(false)
		if !s.Ready {
			http.Error(rw, "not ready: "+s.NotReady, http.StatusServiceUnavailable)
			return
		}
		if s.Contract.Blind != "" {
			// Vending is safe within this vendor's JetStream; the checks
			// across JetStreams miss the vendors it cannot see.
			fmt.Fprintln(rw, "ready; but this vendor "+s.Contract.Blind)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		rw.Write(statusPage)
	})
	mux.HandleFunc("GET /status.json", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, state.snapshot(true))
	})
	mux.HandleFunc("GET /cluster.json", peers.serveCluster)
	if leaf != nil {
		mux.Handle("/api/", leaf)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("LEAF_HTTP_ADDR %s: %w (set LEAF_HTTP_ADDR to a free address, or empty to disable)", cfg.HTTPAddr, err)
	}
	hs.addr = ln.Addr().String()
	maxConns := httpMaxConns(cfg.HTTPMaxConns, log)
	hs.conns = newConnLimit(ln, maxConns)
	hs.srv = &http.Server{
		Handler: mux,
		// A client can neither hold a connection open by sending slowly
		// nor by not reading: each stage of a request has a deadline.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ConnState:         hs.conns.track,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	hs.wg.Go(func() {
		if err := hs.srv.Serve(hs.conns); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "err", err)
		}
	})
	log.Info("status page, metrics and health", "url", "http://"+hs.addr+"/")
	if leaf != nil {
		log.Info("serving Leaf's HTTP API (LEAF_HTTP_LEAF_API)", "segment", "http://"+hs.addr+leafSegmentPath+"<tag>", "snowflake", "http://"+hs.addr+leafSnowflakePath+"<key>")
	}
	return hs, nil
}

func writeJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (hs *httpServer) close() {
	if hs.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.srv.Shutdown(ctx)
	hs.wg.Wait()
}
