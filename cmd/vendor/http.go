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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leaf-nats/leaf/vending"
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

func startHTTP(cfg Config, state *vendorState, reg *prometheus.Registry, nc *nats.Conn, leaf *leafAPI, log *slog.Logger) (*httpServer, error) {
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
	mux.HandleFunc("GET /cluster.json", func(rw http.ResponseWriter, _ *http.Request) {
		stats, err := vending.ClusterStats(nc, 300*time.Millisecond)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(rw, clusterView(stats))
	})
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

// clusterEntry is one vendor on the status page's cluster table.
type clusterEntry struct {
	ID        string      `json:"id"`
	Requests  int         `json:"requests"`
	Errors    int         `json:"errors"`
	AverageNs int64       `json:"average_ns"`
	Data      clusterData `json:"data"`
}

type clusterData struct {
	Instance string       `json:"instance"`
	Ready    bool         `json:"ready"`
	Worker   workerStatus `json:"worker"`
	Tags     []string     `json:"tags"`
}

// clusterView condenses the micro stats replies of every vendor.
func clusterView(stats []micro.Stats) []clusterEntry {
	out := make([]clusterEntry, 0, len(stats))
	for _, st := range stats {
		e := clusterEntry{ID: st.ID}
		var took time.Duration
		for _, ep := range st.Endpoints {
			e.Requests += ep.NumRequests
			e.Errors += ep.NumErrors
			took += ep.ProcessingTime
			var s status
			if len(ep.Data) > 0 && json.Unmarshal(ep.Data, &s) == nil && s.Instance != "" {
				e.Data = clusterData{Instance: s.Instance, Ready: s.Ready, Worker: s.Worker}
				for _, t := range s.Segments.Tags {
					e.Data.Tags = append(e.Data.Tags, t.Tag)
				}
			}
		}
		if e.Requests > 0 {
			e.AverageNs = int64(took) / int64(e.Requests)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b clusterEntry) int { return strings.Compare(a.Data.Instance, b.Data.Instance) })
	return out
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
