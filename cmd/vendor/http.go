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
	srv  *http.Server
	addr string
	wg   sync.WaitGroup
}

func startHTTP(cfg Config, state *vendorState, reg *prometheus.Registry, peers *peerAsker, leaf *leafAPI, log *slog.Logger) (*httpServer, error) {
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
		if s := state.snapshot(false); !s.Ready {
			http.Error(rw, "not ready: "+s.NotReady, http.StatusServiceUnavailable)
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
	hs.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	hs.wg.Go(func() {
		if err := hs.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
