package status

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaf-nats/leaf/vending"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

//go:embed status.html
var statusPage []byte

// ServerConfig configures a Server. Addr is required; the zero value of
// every other field means its default.
type ServerConfig struct {
	// Addr is the address to listen on (LEAF_HTTP_ADDR).
	Addr string
	// MaxConns bounds the connections held (LEAF_HTTP_MAX_CONNS), beyond
	// the healthConns kept for health checks. Default 1024.
	MaxConns int
	Logger   *slog.Logger
}

// healthConns is how many connections past MaxConns are kept for /healthz
// and /readyz (connLimit).
const healthConns = 16

// Server serves the status page, /status.json, /history.json,
// /cluster.json, /metrics, /healthz, /readyz and, when configured, Leaf's
// API. It answers from the moment the vendor starts: until Serve, /healthz
// says it lives, and /readyz and every other path what the start is doing
// (503).
type Server struct {
	srv     *http.Server
	addr    string
	conns   *connLimit
	wg      sync.WaitGroup
	handler atomic.Pointer[http.Handler]
	stop    chan struct{} // closed at Close: requests waiting for expensive answers stop waiting

	mu   sync.Mutex
	step string // what the start is doing
	err  error  // why its last try failed, nil if none did
}

// Handlers is what a Server serves once the vendor is up.
type Handlers struct {
	State    *State
	Registry *prometheus.Registry
	Peers    *StatsAsker // the cluster table's
	// History, when set, answers /history.json: the page's charts.
	History *History
	// API, when set, answers /api/ (Leaf's HTTP API, LEAF_HTTP_LEAF_API).
	API http.Handler
}

// OpenServer starts serving on c.Addr, as a vendor that is starting.
func OpenServer(c ServerConfig) (*Server, error) {
	if c.MaxConns == 0 {
		c.MaxConns = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("LEAF_HTTP_ADDR %s: %w (set LEAF_HTTP_ADDR to a free address, or empty to disable)", c.Addr, err)
	}
	hs := &Server{addr: ln.Addr().String(), conns: newConnLimit(ln, c.MaxConns, healthConns), step: "starting", stop: make(chan struct{})}
	var starting http.Handler = http.HandlerFunc(hs.serveStarting)
	hs.handler.Store(&starting)
	hs.srv = &http.Server{
		Handler: http.HandlerFunc(hs.route),
		// A client can neither hold a connection open by sending slowly
		// nor by not reading: each stage of a request has a deadline of
		// seconds. The expensive answers set their own, on each write
		// (turns); the write time-out also resets theirs for the next
		// request.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ConnState:         hs.conns.track,
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(c.Logger.Handler(), slog.LevelDebug),
	}
	hs.wg.Go(func() {
		if err := hs.srv.Serve(hs.conns); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.Logger.Error("HTTP server stopped", "err", err)
		}
	})
	c.Logger.Info("status page, metrics and health", "url", "http://"+hs.addr+"/")
	return hs, nil
}

// route serves r with the handler of the moment; on a connection kept for
// health checks, /healthz and /readyz only, and the connection is closed
// after its answer.
func (hs *Server) route(rw http.ResponseWriter, r *http.Request) {
	if healthOnly(r.Context()) {
		rw.Header().Set("Connection", "close")
		if r.URL.Path != "/healthz" && !strings.HasPrefix(r.URL.Path, "/readyz") {
			rw.Header().Set("Retry-After", "1")
			http.Error(rw, "busy: every connection is serving a request; only /healthz and /readyz are answered", http.StatusServiceUnavailable)
			return
		}
	}
	(*hs.handler.Load()).ServeHTTP(rw, r)
}

// Starting records what the start is doing, and why its last try failed
// (nil: none did); /readyz says so until Serve.
func (hs *Server) Starting(step string, err error) {
	hs.mu.Lock()
	hs.step, hs.err = step, err
	hs.mu.Unlock()
}

// serveStarting answers while the vendor starts: it lives (/healthz), and
// is not ready, saying what it is doing.
func (hs *Server) serveStarting(rw http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
		fmt.Fprintln(rw, "ok: starting")
		return
	}
	hs.mu.Lock()
	why := "starting: " + hs.step
	if hs.err != nil {
		why += ", retrying after: " + hs.err.Error()
	}
	hs.mu.Unlock()
	http.Error(rw, "not ready: "+why, http.StatusServiceUnavailable)
}

// Serve serves the vendor's state, metrics and cluster table from now on.
// The answers that cost in proportion to the tags or the vendors (the
// metrics, the status JSON, the cluster table) are each computed at most
// once a second for all the requests waiting for them (shared), served a
// few requests at a time, and written with deadlines (turns).
func (hs *Server) Serve(h Handlers) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", turns(hs.stop, promhttp.HandlerFor(sharedGatherer(hs.stop, h.Registry), promhttp.HandlerOpts{Registry: h.Registry})))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", h.State.serveReady)
	mux.HandleFunc("GET /readyz/{mode}", h.State.serveReady)
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		rw.Write(statusPage)
	})
	mux.Handle("GET /status.json", h.State.statusHandler(hs.stop))
	mux.Handle("GET /cluster.json", sharedAnswer(hs.stop, false, h.Peers.clusterAnswer))
	if h.History != nil {
		mux.HandleFunc("GET /history.json", h.History.serveHistory)
	}
	if h.API != nil {
		mux.Handle("/api/", h.API)
	}
	var handler http.Handler = mux
	hs.handler.Store(&handler)
}

// sharedGatherer gathers g's metrics at most once an interval for all the
// scrapes waiting (shared): a scrape reads every tag's state.
func sharedGatherer(stop <-chan struct{}, g prometheus.Gatherer) prometheus.Gatherer {
	type gathered struct {
		mfs []*dto.MetricFamily
		err error
	}
	s := newShared(stop, true, func() gathered {
		mfs, err := g.Gather()
		return gathered{mfs, err}
	})
	// promhttp reads the families it is given, never changes them.
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		g, err := s.get()
		if err != nil {
			return nil, err
		}
		return g.mfs, g.err
	})
}

// statusHandler is /status.json: the tags the page shows (PageTags), or
// with ?tags=all every one; each computed as shared.
func (v *State) statusHandler(stop <-chan struct{}) http.Handler {
	page := sharedAnswer(stop, true, func() answer { return v.statusAnswer(PageTags) })
	all := sharedAnswer(stop, true, func() answer { return v.statusAnswer(0) })
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("tags") == "all" {
			all.ServeHTTP(rw, r)
			return
		}
		page.ServeHTTP(rw, r)
	})
}

// statusAnswer is the state with the store's rows and at most tags tags
// (0: all), their leaders named.
func (v *State) statusAnswer(tags int) answer {
	s := v.Snapshot(true)
	if tags > 0 {
		s.Trim(tags)
	}
	v.addLeaders(context.Background(), s.Segments.Tags)
	return jsonAnswer(s)
}

// Addr returns the address served.
func (hs *Server) Addr() string { return hs.addr }

// serveReady is /readyz: 200 while the vendor can vend, else 503 and why.
// It reads no tag while the store answers, so that probes cost the same
// whatever the number of tags.
//
// /readyz/snowflake and /readyz/segment say it of one mode: a vendor may
// serve segments while it claims a worker ID, and a vendor of a region
// leaves the queue group of a mode it cannot serve.
func (v *State) serveReady(rw http.ResponseWriter, r *http.Request) {
	s := v.readiness()
	switch r.PathValue("mode") {
	case "":
	case vending.ModeSnowflake:
		serveModeReady(rw, s.Modes.Snowflake)
		return
	case vending.ModeSegment:
		serveModeReady(rw, s.Modes.Segments)
		return
	default:
		http.Error(rw, "no such mode: use /readyz, /readyz/snowflake or /readyz/segment", http.StatusNotFound)
		return
	}
	if !s.Ready {
		http.Error(rw, "not ready: "+s.NotReady, http.StatusServiceUnavailable)
		return
	}
	// Ready, with what an operator should know: the checks across
	// JetStreams miss the vendors this one cannot see; a store that went
	// back was raised above what was handed out, and why it went back is
	// for the operator to find.
	fmt.Fprintln(rw, "ready")
	if s.Contract.Blind != "" {
		fmt.Fprintln(rw, "but this vendor "+s.Contract.Blind)
	}
	if s.Segments.LastRewind != "" {
		fmt.Fprintln(rw, "note: "+s.Segments.LastRewind)
	}
}

// serveModeReady answers whether one mode is served: why not is "" when
// it is.
func serveModeReady(rw http.ResponseWriter, why string) {
	if why != "" {
		http.Error(rw, "not ready: "+why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(rw, "ready")
}

func writeJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Close stops serving: it waits for the requests in flight, or for ctx
// (then it closes their connections). Requests waiting for an expensive
// answer stop waiting at once. Call it once.
func (hs *Server) Close(ctx context.Context) error {
	close(hs.stop)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := hs.srv.Shutdown(ctx)
	if err != nil {
		hs.srv.Close()
	}
	hs.wg.Wait()
	return err
}
