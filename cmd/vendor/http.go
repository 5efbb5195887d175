package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpServer serves /metrics, /healthz and /readyz on LEAF_HTTP_ADDR.
type httpServer struct {
	srv *http.Server
	wg  sync.WaitGroup
}

func startHTTP(cfg Config, w *worker, segs *segments, log *slog.Logger) (*httpServer, error) {
	hs := &httpServer{}
	if cfg.HTTPAddr == "" {
		return hs, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if w.slot.Get() == nil {
			http.Error(rw, "not ready: no worker ID lease held", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("LEAF_HTTP_ADDR %s: %w (set LEAF_HTTP_ADDR to a free address, or empty to disable)", cfg.HTTPAddr, err)
	}
	hs.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	hs.wg.Go(func() {
		if err := hs.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "err", err)
		}
	})
	log.Info("HTTP listening", "addr", ln.Addr().String())
	return hs, nil
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
